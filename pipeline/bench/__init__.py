"""What specfleet costs to run: `specfleet bench` (the suite and its orchestration part) and
`specfleet fleet-sim` (fleets of instant jobs).
"""
