"""The EAGLE-3-style drafter (Li et al. 2025): one class, variants are constructor switches.

EAGLE-3 fuses three captured hidden states of the target (the residual stream entering
layers 2, N//2 and N-3 of an N-layer target) with one linear layer, runs one Llama decoder
layer whose attention reads cat(norm(embed(token)), norm(h)), and predicts over a reduced
draft vocabulary (d2t maps a draft id to its target id). Against attention drift (Eldenk
et al. 2026: along a chain the drafter's attention leaves the sink token while the hidden
state's RMS grows), `post` norm hands the normalised state to both the head and the next
step, and `fc_norm` puts one RMSNorm on each captured stream before the fusion.

Position i of the drafter reads token x_{i+1} and a hidden input g_i, and predicts x_{i+2}.
At chain step 0, g_i is the fusion of the target's captured hidden states at position i. At
chain step s >= 1, g_i is the drafter's own output at position i-1 of step s-1: raw (`pre`
norm, EAGLE-3) or after the final RMSNorm (`post` norm, the attention-drift fix). How the chain
attends, batched over a sequence (`forward_steps`) or incrementally with a KV cache (`prefill`,
`step`, `tree_step`), is shared with the other one-layer families
(workers/drafters/chain/model.py); this module says what the layer reads and computes.

Attention shape and rotary positions come from the target: the drafter's layer takes the
target's query heads, key/value heads (grouped-query attention: each key/value head serves a
group of query heads, as the target's do), head size, rotary base and RoPE scaling (`llama3`
and `linear` are computed, workers/models/rope.py; another scaling is refused by name), and
export writes them into the EAGLE-3 config. Tests run the engine with a grouped-query target
whose head size is not hidden / heads and whose RoPE is Llama-3.1-scaled: greedy output equals
the target's, the sampled distribution passes the chi-square test, and the drafter's
frequencies equal the target's own rotary embedding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workers.drafters.chain.model import ChainDrafter, LayerShape, RMSNorm
from workers.models.rope import inv_freq


@dataclass(frozen=True, kw_only=True)
class DrafterConfig(LayerShape):
    capture_layers: tuple[int, ...]  # indices into the target's output_hidden_states
    norm: str = "pre"  # "pre" | "post"
    fc_norm: bool = False
    attention: str = "standard"  # "standard" | "gated" (sigmoid gate on the attention output)
    draft_vocab: int | None = None  # size of the reduced draft vocabulary; None = the target's

    @classmethod
    def from_dict(cls, d: dict) -> DrafterConfig:
        return cls(**{**d, "capture_layers": tuple(d["capture_layers"])})


class Eagle3Drafter(ChainDrafter):
    def __init__(self, cfg: DrafterConfig):
        super().__init__()
        self.cfg = cfg
        d, n = cfg.hidden_size, len(cfg.capture_layers)
        if cfg.heads % cfg.num_kv_heads:
            raise ValueError(
                f"drafter: {cfg.heads} attention heads do not split into {cfg.num_kv_heads} key/value groups"
            )
        self.head_dim = cfg.dim_per_head
        inner, kv = cfg.heads * self.head_dim, cfg.num_kv_heads * self.head_dim
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.embed.weight.requires_grad_(False)  # copied from the target, frozen
        self.stream_norms = nn.ModuleList([RMSNorm(d, cfg.rms_eps) for _ in range(n)]) if cfg.fc_norm else None
        self.fc = nn.Linear(n * d, d, bias=False)
        self.input_norm = RMSNorm(d, cfg.rms_eps)
        self.hidden_norm = RMSNorm(d, cfg.rms_eps)
        self.q_proj = nn.Linear(2 * d, inner, bias=False)
        self.k_proj = nn.Linear(2 * d, kv, bias=False)
        self.v_proj = nn.Linear(2 * d, kv, bias=False)
        self.o_proj = nn.Linear(inner, d, bias=False)
        self.post_attn_norm = RMSNorm(d, cfg.rms_eps)
        self.gate_proj = nn.Linear(d, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(d, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, d, bias=False)
        self.attn_gate = nn.Linear(2 * d, inner, bias=False) if cfg.attention == "gated" else None
        self.final_norm = RMSNorm(d, cfg.rms_eps)
        n_out = cfg.draft_vocab or cfg.vocab_size
        self.lm_head = nn.Linear(d, n_out, bias=False)
        # draft id i is target id i + d2t[i]; t2d marks the target ids the drafter can propose
        self.register_buffer("d2t", torch.zeros(n_out, dtype=torch.long))
        self.register_buffer(
            "t2d",
            torch.ones(cfg.vocab_size, dtype=torch.bool)
            if cfg.draft_vocab is None
            else torch.zeros(cfg.vocab_size, dtype=torch.bool),
        )
        # derived from the config, not a checkpoint entry; float32 whatever dtype the layers take
        self.rope_freqs = inv_freq(self.head_dim, cfg.rope_theta, cfg.rope_scaling)

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def set_draft_vocab(self, target_ids: torch.Tensor) -> None:
        """target_ids: [draft_vocab] sorted target ids the drafter's head covers."""
        n = target_ids.numel()
        self.d2t.copy_(target_ids - torch.arange(n, device=target_ids.device))
        self.t2d.zero_()
        self.t2d[target_ids] = True

    def draft_ids(self) -> torch.Tensor:
        """The target id of every draft-vocabulary entry. -> [n_out]"""
        return torch.arange(self.d2t.numel(), device=self.d2t.device) + self.d2t

    def full_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits [..., n_out] -> target-vocabulary logits [..., V] (-inf elsewhere)."""
        if self.cfg.draft_vocab is None:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.cfg.vocab_size), float("-inf"))
        return full.index_copy(-1, self.draft_ids(), logits)

    # ---- pieces shared by both execution modes -------------------------------------------
    def fuse(self, streams: list[torch.Tensor]) -> torch.Tensor:
        """g = fc(cat(low, mid, high)), each stream optionally RMS-normed first. -> [..., d]"""
        if self.stream_norms is not None:
            streams = [norm(s) for norm, s in zip(self.stream_norms, streams)]
        return self.fc(torch.cat(streams, dim=-1))

    def _attention_input(self, tokens: torch.Tensor, g: torch.Tensor, noise=None):
        """cat(norm(embed(tokens)), norm(g)) [B, T, 2d], and the attention gate [B, T, H * dh] or None."""
        emb = self.embed(tokens)
        if noise is not None:
            emb = noise.embedding(emb)
        x = torch.cat([self.input_norm(emb), self.hidden_norm(g)], dim=-1)
        return x, torch.sigmoid(self.attn_gate(x)) if self.attn_gate is not None else None

    def _finish(self, g: torch.Tensor, attn: torch.Tensor, gate: torch.Tensor | None):
        """Residual sum and MLP. attn: [B, T, H * dh] -> (h raw [B, T, d], logits [B, T, n_out], norm(h))."""
        if gate is not None:
            attn = attn * gate
        h = g + self.o_proj(attn)
        m = self.post_attn_norm(h)
        h = h + self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))
        normed = self.final_norm(h)
        return h, self.lm_head(normed), normed


def drafter_from_target(target, cfg: DrafterConfig, draft_ids: torch.Tensor | None = None) -> Eagle3Drafter:
    """A fresh drafter whose embedding (frozen) and LM head (trainable) start from the target's.

    draft_ids: the target ids of the reduced draft vocabulary (required when cfg.draft_vocab is set).
    """
    if (cfg.draft_vocab is None) != (draft_ids is None):
        raise ValueError("draft_ids must be given exactly when cfg.draft_vocab is set")
    drafter = Eagle3Drafter(cfg)
    head = target.get_output_embeddings().weight.float()
    with torch.no_grad():
        drafter.embed.weight.copy_(target.get_input_embeddings().weight.float())
        if draft_ids is not None:
            drafter.set_draft_vocab(draft_ids.to(drafter.d2t.device))
            head = head[draft_ids]
        drafter.lm_head.weight.copy_(head)
    return drafter
