"""Whether a cluster can ever run what a spec asks for: a request no node meets would make Ray
wait forever, so it is refused before anything starts, unless an autoscaler can add a node
that meets it."""

from __future__ import annotations

from pipeline.errors import ResourceError

Request = tuple[float, float, str | None]  # num_cpus, num_gpus, accelerator type or None


def fit_on_nodes(
    requests: dict[str, Request],
    nodes: list[dict],
    scalable: list[dict] | None = None,
    groups: dict[str, int] | None = None,
) -> str:
    """Refuse a request no single node can meet, and a group of workers the nodes cannot hold at once.

    requests: job kind -> its request (for a kind that runs on a group of workers, each worker's);
    nodes: each node's resources as Ray lists them ({"CPU": n, "GPU": n, "accelerator_type:H100":
    1, ...}). scalable: the node types an autoscaler can add (their resources), [] when one runs
    without saying which, None when the cluster has none; a request one of them meets is not
    refused, as the autoscaler will add that node. groups: job kind -> its workers, for the kinds
    that run on a group (all its workers start together). Returns a one-line description of the
    cluster.
    """
    total_cpu = sum(n.get("CPU", 0) for n in nodes)
    total_gpu = sum(n.get("GPU", 0) for n in nodes)
    about = f"{len(nodes)} node(s), {total_cpu:g} CPU, {total_gpu:g} GPU in all"
    try:
        _fit(requests, nodes, about)
        for kind, workers in sorted((groups or {}).items()):
            _fit_group(kind, workers, requests[kind], nodes, about)
        return about
    except ResourceError as refused:
        if scalable is None:
            raise
        if not scalable:
            return f"{about}; an autoscaler adds what jobs wait for ({refused.args[0].split(': ', 1)[1]})"
        types = ", ".join(f"{t.get('CPU', 0):g} CPU/{t.get('GPU', 0):g} GPU" for t in scalable)
        try:
            _fit(requests, nodes + scalable, f"{about}; the autoscaler's node types: {types}")
            for kind, workers in sorted((groups or {}).items()):  # the autoscaler adds nodes of a type
                _fit_group(kind, workers, requests[kind], nodes + scalable * workers, about)
        except ResourceError as also:
            raise ResourceError(f"{also.args[0]}, and no node type the autoscaler adds has it either") from None
        return f"{about}; the autoscaler adds nodes of {types} for what jobs wait for"


def _meets(node: dict, request: Request) -> bool:
    cpus, gpus, accelerator = request
    return (
        node.get("CPU", 0) >= cpus
        and node.get("GPU", 0) >= gpus
        and (accelerator is None or node.get(f"accelerator_type:{accelerator}", 0) > 0)
    )


def _fit(requests: dict[str, Request], nodes: list[dict], about: str) -> None:
    """Each request must be met by one node, with all it asks for at once; the error names what
    is missing."""
    largest = {
        "CPU": max((n.get("CPU", 0) for n in nodes), default=0),
        "GPU": max((n.get("GPU", 0) for n in nodes), default=0),
    }
    for kind, request in sorted(requests.items()):
        if any(_meets(node, request) for node in nodes):
            continue
        cpus, gpus, accelerator = request
        if accelerator is not None and not any(n.get(f"accelerator_type:{accelerator}", 0) > 0 for n in nodes):
            kinds = sorted({k.partition(":")[2] for n in nodes for k in n if k.startswith("accelerator_type:")})
            raise ResourceError(
                f"resources.{kind}.accelerator_type: no node has a {accelerator} GPU "
                f"(cluster: {about}; GPU models: {', '.join(kinds) or 'none'})"
            )
        for key, asked in (("GPU", gpus), ("CPU", cpus)):
            if asked > largest[key]:
                raise ResourceError(
                    f"resources.{kind}.num_{key.lower()}s: a {kind} job asks for {asked:g} {key}(s) but "
                    f"the largest node has {largest[key]:g} (cluster: {about})"
                )
        model = f" of model {accelerator}" if accelerator else ""
        raise ResourceError(
            f"resources.{kind}: no single node has {cpus:g} CPU(s) and {gpus:g} GPU(s){model} at once "
            f"(cluster: {about})"
        )


def _fit_group(kind: str, workers: int, request: Request, nodes: list[dict], about: str) -> None:
    """All `workers` workers of a group, each with `request`, placed at once over the nodes."""
    cpus, gpus, _ = request
    room = 0
    for node in nodes:
        if _meets(node, request):
            per = [
                node.get("CPU", 0) / cpus if cpus else float("inf"),
                node.get("GPU", 0) / gpus if gpus else float("inf"),
            ]
            room += workers if min(per) == float("inf") else int(min(per) + 1e-9)
    if room < workers:
        raise ResourceError(
            f"resources.{kind}.workers: {workers} workers of {cpus:g} CPU(s) and {gpus:g} GPU(s) each, "
            f"but the nodes hold {room} at once (cluster: {about})"
        )
