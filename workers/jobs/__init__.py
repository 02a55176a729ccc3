"""The worker side of each job kind: one module per kind, named after it, with its `run`.

`run.run_job` is what Ray calls; it finds the kind's function in the registry
(pipeline/core/kinds.py) and hands it the typed config and inputs.
"""
