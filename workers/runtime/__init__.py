"""A job's surroundings on a worker: its device, what it reports about itself, its log, the learning-rate schedule."""
