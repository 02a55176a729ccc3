"""How a drafter's training loop is spread over processes: one process, or the workers of one
torch.distributed group (a Ray Train worker group, workers/runtime/ray_train.py).

Every worker draws the same global batch from the same seeded generator and keeps its own rows
(rows rank, rank + world, ...), so the batches, the learning rates and the random draws of a run
do not depend on where it ran. The loss is the family's own loss over a worker's rows, and the
gradients are averaged over the workers:

- `ddp`: every worker holds the whole drafter (torch DistributedDataParallel);
- `fsdp`: the drafter's parameters, gradients and optimizer state are sharded over the workers
  (FSDP2, `fully_shard`), gathered for each forward and backward pass.

The family's loss calls its drafter's own methods, not `forward`, so the drafter is wrapped in a
module whose forward is that loss: DDP and FSDP hook a module's forward.

Averaging per-worker means is the global mean only where every worker's rows carry as many loss
positions (windows of a built-in corpus); on regenerated text, whose prompts carry none, the
weighting of the rows differs slightly. A job's hash therefore names its worker count and
sharding (pipeline/core/contracts.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn


class LossModule(nn.Module):
    """A drafter whose forward is its family's training loss: loss_of(drafter, ids, streams, target
    logits, mask) -> (loss, top-1 agreement per chain step)."""

    def __init__(self, drafter: nn.Module, loss_of):
        super().__init__()
        self.drafter, self.loss_of = drafter, loss_of

    def forward(self, ids, streams, logits, mask):
        return self.loss_of(self.drafter, ids, streams, logits, mask)


@dataclass(frozen=True)
class Replicas:
    """This process's place in its group: rank of world; `sharding` is "ddp" or "fsdp"."""

    rank: int = 0
    world: int = 1
    sharding: str = "ddp"

    @property
    def part(self) -> slice | None:
        """The rows of a global batch this worker trains on (None: all of them)."""
        return None if self.world == 1 else slice(self.rank, None, self.world)

    def wrap(self, module: nn.Module) -> nn.Module:
        """The module the training loop runs: itself in one process, DDP- or FSDP-wrapped in a group."""
        if self.world == 1:
            return module
        if self.sharding == "fsdp":
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            device = next(module.parameters()).device
            return fully_shard(module, mesh=init_device_mesh(device.type, (self.world,)))
        from torch.nn.parallel import DistributedDataParallel

        device = next(module.parameters()).device
        return DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)

    def working_copy(self, drafter: nn.Module) -> nn.Module:
        """The module the group trains: the drafter itself, or (sharded: sharding replaces a module's
        parameters) a copy of it that shares its frozen parameters (the target's embedding and head)."""
        if self.world == 1 or self.sharding == "ddp":
            return drafter
        frozen = {id(p): p for p in drafter.parameters() if not p.requires_grad}
        return copy.deepcopy(drafter, frozen)

    def copy_back(self, model: nn.Module, work: nn.Module, drafter: nn.Module) -> None:
        """After training: the drafter holds the trained weights on every rank (a collective when
        sharded: every rank calls it)."""
        if work is drafter:
            return
        trained = trainable_state(model, work, on_every_rank=True)
        # not strict: the trained state leaves out the frozen parameters (the target's, shared)
        missing, unexpected = drafter.load_state_dict(trained, strict=False)
        missing = set(missing) & {n for n, p in drafter.named_parameters() if p.requires_grad}
        if missing or unexpected:
            raise RuntimeError(
                f"sharded training: trained values do not fit the drafter: {sorted(missing or unexpected)[:3]}"
            )

    def mean(self, value: float) -> float:
        """A number's mean over the workers (itself in one process)."""
        if self.world == 1:
            return value
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t)
        return t.item() / self.world


def trainable_state(model: nn.Module, work: nn.Module, *, on_every_rank: bool = False) -> dict[str, torch.Tensor]:
    """The trained parameters of `work` (the drafter inside `model`, the wrapped LossModule) as full
    CPU tensors, keyed as in the drafter: on rank 0 only, or on every rank (a collective when
    sharded: every rank calls it)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    names = {f"drafter.{n}" for n, p in work.named_parameters() if p.requires_grad}
    options = StateDictOptions(full_state_dict=True, cpu_offload=not on_every_rank)
    full = get_model_state_dict(model, options=options)
    return {k.removeprefix("drafter."): v.detach().cpu() for k, v in full.items() if k in names}


@dataclass(frozen=True)
class Resume:
    """Where a group's training reports its state every `every` steps (`save(step, state)`, called
    on every rank, state None but on rank 0) and finds the state of the run it continues (`latest()`:
    the last state saved, or None for a new run)."""

    every: int
    save: object
    latest: object

    def restore(self, model: nn.Module, opt, draws: tuple[torch.Generator, ...]) -> int:
        """Load the last saved state, if any, into the model, its optimizer and the generators the
        run draws from (batches first). Returns the first step to run."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        state = self.latest()
        if state is None:
            return 0
        # not strict: a saved state holds the trained parameters only, not the frozen shared ones
        options = StateDictOptions(full_state_dict=True, strict=False)
        model_state = {f"drafter.{k}": v for k, v in state["drafter"].items()}
        set_state_dict(model, opt, model_state_dict=model_state, optim_state_dict=state["optimizer"], options=options)
        for gen, saved in zip(draws, state["generators"], strict=True):
            gen.set_state(saved)
        return int(state["step"])

    def report(self, step: int, steps: int, model: nn.Module, opt, draws: tuple[torch.Generator, ...], rank: int):
        """Save the state after `step` of `steps`, every `every` steps and after the last."""
        if step % self.every and step != steps:
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        work = model.module if hasattr(model, "module") else model  # DDP's module, or the sharded one
        drafter = trainable_state(model, work.drafter)
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        optimizer = get_optimizer_state_dict(model, opt, options=options)
        state = {"step": step, "drafter": drafter, "optimizer": optimizer, "generators": [g.get_state() for g in draws]}
        self.save(step, state if rank == 0 else None)


ONE_PROCESS = Replicas()


def current(sharding: str = "ddp") -> Replicas:
    """This process's place in the torch.distributed group it is in (one process when none)."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return ONE_PROCESS
    return Replicas(rank=dist.get_rank(), world=dist.get_world_size(), sharding=sharding)
