"""specfleet workers: everything that touches torch (corpora, models, drafters, measurement)."""
