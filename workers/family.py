"""Drafter families: the one place that knows how an EAGLE drafter and a draft model differ.

A drafter spec's `kind` names its family. `family_of(kind)` returns the object that loads a
drafter of that family, drafts chains with it for measurement, wraps it as the engine's
proposer, times one of its steps and exports it for serving engines. Everything else asks the
family and never tests what a drafter is. (How a family is trained is named beside the job
kinds, pipeline/core/kinds.py, so that training does not depend on this module.)

- `eagle3`: an EAGLE-3-style head fed by the target's hidden states (workers/drafter.py).
- `standalone`: an independent small causal LM sharing the target's tokenizer.
"""
from __future__ import annotations

from pathlib import Path

import torch

from pipeline.core.artifacts import folder_of
from pipeline.core.contracts import Trained
from workers.chains import draft_all_chains, draft_chains_with_model, eagle_ranks, fuse_context, model_ranks
from workers.diagnostics import DriftStats
from workers.eagle_checkpoint import load_eagle3
from workers.eagle_layouts import checkpoint_folder, import_checkpoint
from workers.engine import EagleProposer, ModelProposer
from workers.features import cached_forward_states, target_pass, tree_forward_states
from workers.models import load_model, load_target


class EagleChains:
    """Chains of an EAGLE drafter, with the drift diagnostics of the same drafting passes."""

    def __init__(self, drafter, target, depth: int):
        self.drafter, self.target, self.depth = drafter, target, depth
        self.stats = DriftStats(depth)

    def draft(self, seq, starts: list[int], temperature: float, gen, noise):
        streams, _ = target_pass(self.target, seq, self.drafter.cfg.capture_layers)
        drafts, q_logits, outs, g0 = draft_all_chains(self.drafter, seq, streams, self.depth, temperature, gen,
                                                      starts, noise)
        self.stats.add(outs, streams, g0, starts)
        self.g0 = g0
        return drafts, q_logits

    def ranks(self, seq, starts: list[int], noise):
        """After `draft` on the same text: the rank of the target's token at every step (workers/chains.py)."""
        return eagle_ranks(self.drafter, seq, self.g0, self.depth, starts, noise)

    def diagnostics(self) -> list[tuple[int, str, float]]:
        return self.stats.rows()


class ModelChains:
    """Chains of a standalone draft model; it has no drift diagnostics (no hidden-state chaining)."""

    def __init__(self, model, depth: int):
        self.model, self.depth = model, depth

    def draft(self, seq, starts: list[int], temperature: float, gen, noise):
        return draft_chains_with_model(self.model, seq, starts, self.depth, temperature, gen)

    def ranks(self, seq, starts: list[int], noise):
        return model_ranks(self.model, seq, self.depth, starts)

    def diagnostics(self) -> list[tuple[int, str, float]]:
        return []


class EagleFamily:
    name = "eagle3"
    method = "eagle3"  # what serving engines call a drafter of this family

    def load(self, spec, trained: Trained | None, target):
        """The trained drafter, or the checkpoint the spec names (`path`) read as it is."""
        param = next(target.parameters())
        if trained is not None:
            return load_eagle3(folder_of(trained), embedding=target.get_input_embeddings().weight,
                               device=param.device, dtype=param.dtype)
        drafter = import_checkpoint(checkpoint_folder(spec.path), target.get_input_embeddings().weight.detach().cpu(),
                                    target.config.num_hidden_layers)
        return drafter.to(device=param.device, dtype=param.dtype)

    def chains(self, drafter, target, depth: int) -> EagleChains:
        return EagleChains(drafter, target, depth)

    def proposer(self, drafter) -> EagleProposer:
        return EagleProposer(drafter)

    def hf_assistant(self, drafter):
        """HF generate cannot draft with an EAGLE head: no assisted-generation comparison."""
        return None

    def step_timer(self, drafter, target, ctx, context_len: int):
        """A closure running one drafter step against a cached context of context_len tokens."""
        g0 = fuse_context(drafter, _batch_streams(target, ctx, drafter.cfg.capture_layers))
        d_cache, logits, chain = drafter.prefill(ctx[:, 1:], g0)  # cached positions 0..L-2
        token = drafter.full_logits(logits).argmax(-1)
        return lambda: drafter.step(token, chain, d_cache, context_len - 1)

    def level_timers(self, drafter, target, ctx, context_len: int, widths) -> dict:
        """{width: a closure running one drafter pass over that many tree nodes per sequence} against
        one cached context (extend leaves the cache as it was)."""
        g0 = fuse_context(drafter, _batch_streams(target, ctx, drafter.cfg.capture_layers))
        d_cache, _, chain = drafter.prefill(ctx[:, 1:], g0)

        def timer(width: int):
            tokens = ctx[:, -width:] if width <= ctx.shape[1] else ctx[:, :1].expand(-1, width)
            g = chain[:, None, :].expand(-1, width, -1)
            return lambda: drafter.extend(d_cache, tokens, g, context_len - 1)

        return {w: timer(w) for w in widths}

    def export(self, checkpoint: Path, out: Path, layout: str = "eagle3", verifier: str | None = None) -> tuple[str, str]:
        """(folder, vLLM method): the drafter written once in the EAGLE-3 layout engines load, or in
        the speculators format (which names the `verifier` it drafts for)."""
        from pipeline.core.files import staged_dir
        from pipeline.core.kinds import resolve

        # named, not imported: exporting is the driver's business, no job's code version covers it
        export_eagle3 = resolve("workers.export:export_eagle3")
        export_speculators = resolve("workers.export:export_speculators")
        if not out.is_dir():  # written whole or not at all: a crash leaves no half export to reuse
            with staged_dir(out) as tmp:
                # the export leaves the token embedding out (engines take the target's)
                drafter = load_eagle3(checkpoint, embedding=None, device="cpu", dtype=torch.float32)
                if layout == "speculators":
                    export_speculators(drafter, tmp, verifier=verifier or "")
                else:
                    export_eagle3(drafter, tmp)
        return str(out.resolve()), self.method


class StandaloneFamily:
    name = "standalone"
    method = "draft_model"

    def load(self, spec, trained: Trained | None, target):
        param = next(target.parameters())
        folder, hf = (folder_of(trained), None) if trained is not None else (None, spec.hf)
        model, _ = load_model(folder=folder, hf=hf, device=param.device, dtype=param.dtype, role="drafter")
        d = model.get_output_embeddings().weight.shape[0]
        t = target.get_output_embeddings().weight.shape[0]
        if d != t:  # a draft model must score the target's token ids
            raise ValueError(f"drafter: vocabulary size {d} differs from the target's {t}; "
                             "a standalone drafter must share the target's tokenizer")
        return model

    def chains(self, model, target, depth: int) -> ModelChains:
        return ModelChains(model, depth)

    def proposer(self, model) -> ModelProposer:
        return ModelProposer(model)

    def hf_assistant(self, model):
        """The draft model is what HF's assisted generation takes as `assistant_model`."""
        return model

    def step_timer(self, model, target, ctx, context_len: int):
        """One decode step of the draft model against a cached context, the cache cropped back."""
        _, cache, _ = cached_forward_states(model, ctx[:, :-1])
        last = ctx[:, -1:]

        def run():
            cached_forward_states(model, last, cache)
            cache.crop(-1)

        return run

    def level_timers(self, model, target, ctx, context_len: int, widths) -> dict:
        """{width: one draft-model pass over that many tree nodes per sequence}, against one cached
        context that each call crops back."""
        _, cache, _ = cached_forward_states(model, ctx[:, :-1])

        def timer(width: int):
            nodes = ctx[:, -width:] if width <= ctx.shape[1] else ctx[:, :1].expand(-1, width)
            mask = torch.eye(width, dtype=torch.bool)  # siblings: each reads the context and itself
            positions = torch.full(nodes.shape, context_len - 1, device=ctx.device)

            def run():
                tree_forward_states(model, nodes, positions, mask, cache)
                cache.crop(-width)

            return run

        return {w: timer(w) for w in widths}

    def export(self, checkpoint: Path, out: Path, layout: str = "eagle3", verifier: str | None = None) -> tuple[str, str]:
        """A draft model is served from its Hugging Face folder as it is."""
        if layout != "eagle3":
            raise ValueError(f"a draft model is served from its own folder; the {layout} format holds EAGLE-3 heads")
        return str(checkpoint.resolve()), self.method


FAMILIES = {f.name: f for f in (EagleFamily(), StandaloneFamily())}


def load_pairing(target_ref, drafter_spec, inputs: dict, device):
    """(target, tokenizer, family, drafter) of a job's pairing, from its config and inputs."""
    target, tokenizer = load_target(target_ref, inputs.get("target"), device)
    family = family_of(drafter_spec.kind)
    return target, tokenizer, family, family.load(drafter_spec, inputs.get("drafter"), target)


def family_of(kind: str):
    try:
        return FAMILIES[kind]
    except KeyError:
        raise ValueError(f"unknown drafter family {kind!r}; known: {', '.join(FAMILIES)}") from None


def _batch_streams(target, ctx: torch.Tensor, capture: tuple[int, ...]) -> list[torch.Tensor]:
    """The target's captured states for a timing context [B, L], from one pass over its first row seen B
    times: what a drafter step costs does not depend on the values, and a pass over B x L tokens keeps
    every layer's states (an 8B target at 128 x 2048: 70 GB)."""
    streams, _ = target_pass(target, ctx[:1], capture)
    return [s.expand(ctx.shape[0], -1, -1) for s in streams]
