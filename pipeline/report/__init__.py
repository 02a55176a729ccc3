"""What `specfleet report` and the run's summary show: stored results read back, drawn as figures,
laid out as tables and one HTML page.
"""
