"""From a tuned config (or production metrics) to the settings a serving engine runs: the depth
schedule, the tree, the engine's own format.
"""
