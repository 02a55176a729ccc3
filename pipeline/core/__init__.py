"""specfleet's core: what the driver and the workers share, with no heavy imports.

Result types, the acceptance and speedup maths, depth schedules, folders written atomically,
checkpoints by reference and the registry of job kinds with their typed configs and results.
Nothing here imports torch, Ray, MLflow or SQLAlchemy when it is imported (a test holds this;
artifacts.py reaches MLflow's artifact repositories inside the functions that use a remote
store), so a worker uses it without pulling the driver in, and the driver uses it without
pulling torch in.
"""
