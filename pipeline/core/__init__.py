"""specfleet's core: what the driver and the workers share, with no heavy imports.

Result types, the acceptance and speedup maths, depth schedules, checkpoint folders as bytes
and the registry of job kinds with their typed configs and results. Nothing here imports
torch, Ray, MLflow or SQLAlchemy (a test holds this), so a worker uses it without pulling the
driver in, and the driver uses it without pulling torch in.
"""
