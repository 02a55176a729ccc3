"""A pairing as the serving engine gets it, shared by the jobs that hand one to vLLM (serve_check,
which judges a choice, and engine_cost, which times the engine for one).

The target goes to the engine as a model folder (a built-in target's checkpoint, a GGUF file
converted once, or the given folder or hub id), the drafter as its family exports it for serving
(the EAGLE-3 layout, or a draft model's own folder; a drafter given by path or hub id as it is).
Both jobs decode the speedup check's held-out prompts greedily, every prompt at every batch size
(b at a time; a batch larger than the prompts repeats them), `serving.repeats` times over (the
verdict's interval comes from their spread), each in an engine started for one
speculative config: what `specfleet autotune --engine vllm` prints for a schedule, for the
engine's own release.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.autotune.engines.registry import EngineVersionError, emit
from pipeline.core.artifacts import folder_of
from workers.drafters.registry import family_of
from workers.measure.speedup import validation_prompts
from workers.models.loading import load_tokenizer, served_folder
from workers.runtime.device import pick_dtype
from workers.serving.vllm_engine import serve, speculative_config


@dataclass
class EnginePairing:
    model: str  # the target's folder or hub id
    drafter: str  # the drafter's folder or hub id
    method: str  # as the engine calls the drafter's family
    serving: object  # pipeline/core/settings.Serving
    dtype: str
    prompts: list[list[int]]
    new_tokens: int
    batch_sizes: list[int]
    max_depth: int
    seed: int
    cpu_threads: int | None  # the CPU backend bound to this many cores; None on a GPU
    gpus: int = 1  # the GPUs the engine splits the target over (tensor parallelism)
    block_drafting: str = "trained"  # a DFlash drafter's depths below its block, as specfleet measured them

    def emitted(self, schedule, sampling=None, tree=None):
        """What autotune prints for `schedule` (None when no depth pays), or why the release refuses it."""
        if max(k for _, _, k in schedule) == 0 and not tree:
            return None
        try:
            return emit(
                "vllm",
                schedule,
                model=self.drafter,
                method=self.method,
                version=self.serving.version,
                draft_sampling=sampling,
                tree=tree,
                block_drafting=self.block_drafting,
            )
        except EngineVersionError as exc:
            return f"{exc.option}: {exc}"

    def serve(self, printed: str | None) -> dict:
        """One engine start with the printed config (None: no speculation), every batch size decoded."""
        return serve(
            self.serving.python,
            model=self.model,
            dtype=self.dtype,
            speculative_config=speculative_config(printed) if printed else None,
            prompts=self.prompts,
            max_tokens=self.new_tokens,
            batch_sizes=self.batch_sizes,
            repeats=self.serving.repeats,
            max_model_len=max(len(p) for p in self.prompts) + self.new_tokens + self.max_depth + 8,
            seed=self.seed,
            cpu_threads=self.cpu_threads,
            kv_cache_gib=self.serving.kv_cache_gib,
            timeout_s=self.serving.start_timeout_s,
            tensor_parallel_size=self.gpus,
        )


@contextmanager
def engine_pairing(config, inputs: dict, *, batch_sizes: list[int], device, gpus: int = 1) -> Iterator[EnginePairing]:
    """The pairing of a serve_check or engine_cost job ready for the engine, its exported drafter in
    a folder that lasts as long as the block; the engine splits the target over `gpus` GPUs. A
    drafter no stock engine runs raises ValueError."""
    evaluation = config.evaluation
    model = served_folder(config.target, inputs.get("target"))
    tokenizer = load_tokenizer(model)
    prompts = [p.tolist() for p in validation_prompts(tokenizer, evaluation, config.validation, config.seed)]
    prompts = [prompts[i % len(prompts)] for i in range(max(len(prompts), *batch_sizes))]
    family = family_of(config.drafter.kind)
    with tempfile.TemporaryDirectory(prefix="specfleet-serve-") as tmp:
        yield EnginePairing(
            model=model,
            drafter=_drafter_folder(family, config, inputs, Path(tmp) / "drafter"),
            method=family.method,
            block_drafting=getattr(config.drafter, "block_drafting", "trained"),  # a DFlash drafter's only
            serving=config.serving,
            dtype=str(pick_dtype(config.target.dtype, device)).removeprefix("torch."),
            prompts=prompts,
            new_tokens=config.validation.new_tokens or evaluation.continuation_len,
            batch_sizes=batch_sizes,
            max_depth=evaluation.max_depth,
            seed=config.seed,
            cpu_threads=None if device.type == "cuda" else max(1, int(config.num_cpus)),
            gpus=gpus,
        )


def constant_sweep(pairing: EnginePairing) -> list:
    """The printed configs of every constant depth k = 1..max_depth, or the first refusal (a str)."""
    emitted = [pairing.emitted([(1, 1, k)]) for k in range(1, pairing.max_depth + 1)]
    return next(([e] for e in emitted if isinstance(e, str)), emitted)


def _drafter_folder(family, config, inputs: dict, out: Path) -> str:
    """The drafter as the engine loads it: a trained one exported by its family, a given one as it is."""
    trained = inputs.get("drafter")
    if trained is not None:
        folder, _ = family.export(folder_of(trained), out)
        return folder
    given = getattr(config.drafter, "path", None) or getattr(config.drafter, "hf", None)
    if given is None:
        raise ValueError("the drafter has neither a trained checkpoint nor a path to serve")
    return given
