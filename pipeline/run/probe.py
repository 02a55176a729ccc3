"""Which worker the timing jobs get, asked before they are planned: it is part of their identity.

Cost profiles and engine benchmarks hold only on the hardware and software they were timed on,
so a timing job's config carries what a worker placed like it reports (its GPU or CPU model,
CUDA, NVIDIA driver, torch and transformers releases; workers/runtime/environment.py). A spec
rerun on another GPU generation, driver or library release then plans new timing jobs instead
of reusing the old ones; on a cluster with several kinds of worker for one placement, a job that
lands on another kind than was asked refuses to run (pin `accelerator_type`).

The question goes where the timing jobs will run: a Ray task on a joined cluster, or on a local
one whose workers get a `runtime_env`; else this machine, whose interpreter the local workers
run. The depth choices made from the timings follow them through their inputs' hashes, so the
same spec against a shared database on a new GPU generation, driver or library release times
again and still reuses the trained drafters and curves.
"""

from __future__ import annotations

from pipeline.core.contracts import WorkerEnv
from pipeline.errors import ResourceError

TIMED = "profile_cost"  # measure_speedup is placed alike (the spec checks it)


def probe_worker(spec, cluster=None) -> WorkerEnv:
    """Ask `cluster` (a Ray cluster: a joined one, or a local one whose workers have a runtime_env of
    their own), or with none this machine: the workers of the local cluster specfleet starts run
    this very interpreter on this hardware."""
    res = spec.resources_for(TIMED)
    if cluster is not None:
        cluster.check_resources({TIMED: (res.num_cpus, res.num_gpus, res.accelerator_type)})
        return cluster.probe(res.num_cpus, res.num_gpus, res.accelerator_type)
    from workers.runtime.environment import gpus_here, worker_env

    if res.num_gpus > 0 and res.num_gpus > gpus_here():
        raise ResourceError(
            f"resources.{TIMED}.num_gpus: a {TIMED} job asks for {res.num_gpus:g} GPU(s) but this "
            f"machine has {gpus_here()} (cluster: this machine)"
        )
    return worker_env(res.num_gpus)
