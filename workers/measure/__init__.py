"""Measurement on a worker: acceptance curves with drift diagnostics, costs, and the real engine
timed at every depth.
"""
