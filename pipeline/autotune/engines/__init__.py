"""The serving engines specfleet writes settings for, one module per engine (`registry` picks one)."""
