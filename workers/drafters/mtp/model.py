"""The MTP head (multi-token prediction, as DeepSeek-V3 ships one per extra depth): one decoder layer
that continues the target from its last hidden state.

Position i reads token x_{i+1} and a hidden input g_i, and predicts x_{i+2}. The layer's input is
one vector, proj(cat(enorm(embed(x_{i+1})), hnorm(g_i))) (2d -> d); it runs a Llama decoder layer
(RMSNorm, attention, residual, RMSNorm, SwiGLU, residual) on it, and the target's own final norm
and output head (frozen, shared) turn the result into logits. At chain step 0, g_i is the
target's last hidden state at position i (`hidden_states[N]` of an N-layer target, after its
final norm); at step s >= 1 it is the head's own output at i-1 of step s-1: raw (`pre`, as MTP
heads are trained) or after the final norm (`post`, the attention-drift fix on the chained
hidden). How the chain attends is shared with EAGLE-3 (workers/drafters/chain/model.py).

Two training recipes use this one model (workers/drafters/mtp/train.py): vanilla trains chain
step 0 only (one head per depth, as shipped); recursive unrolls the same layer over several steps
on its own outputs, the steps' losses weighted by a decaying factor and normalised (FastMTP).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workers.drafters.chain.model import ChainDrafter, LayerShape, RMSNorm
from workers.models.rope import inv_freq


@dataclass(frozen=True, kw_only=True)
class MtpConfig(LayerShape):
    num_target_layers: int  # the head reads hidden_states[num_target_layers]
    norm: str = "pre"  # "pre" | "post"

    @property
    def capture_layers(self) -> tuple[int, ...]:
        return (self.num_target_layers,)

    @classmethod
    def from_dict(cls, d: dict) -> MtpConfig:
        return cls(**d)


class MtpHead(ChainDrafter):
    def __init__(self, cfg: MtpConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.hidden_size
        if cfg.heads % cfg.num_kv_heads:
            raise ValueError(f"mtp head: {cfg.heads} attention heads do not split into {cfg.num_kv_heads} groups")
        self.head_dim = cfg.dim_per_head
        inner, kv = cfg.heads * self.head_dim, cfg.num_kv_heads * self.head_dim
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.enorm = RMSNorm(d, cfg.rms_eps)
        self.hnorm = RMSNorm(d, cfg.rms_eps)
        self.proj = nn.Linear(2 * d, d, bias=False)
        self.input_norm = RMSNorm(d, cfg.rms_eps)
        self.q_proj = nn.Linear(d, inner, bias=False)
        self.k_proj = nn.Linear(d, kv, bias=False)
        self.v_proj = nn.Linear(d, kv, bias=False)
        self.o_proj = nn.Linear(inner, d, bias=False)
        self.post_attn_norm = RMSNorm(d, cfg.rms_eps)
        self.gate_proj = nn.Linear(d, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(d, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, d, bias=False)
        self.final_norm = RMSNorm(d, cfg.rms_eps)
        self.lm_head = nn.Linear(d, cfg.vocab_size, bias=False)
        for shared in (self.embed, self.final_norm, self.lm_head):  # the target's, frozen
            shared.requires_grad_(False)
        self.rope_freqs = inv_freq(self.head_dim, cfg.rope_theta, cfg.rope_scaling)

    @property
    def dtype(self) -> torch.dtype:
        return self.proj.weight.dtype

    def fuse(self, streams: list[torch.Tensor]) -> torch.Tensor:
        """Step 0's hidden input: the target's last hidden state as it is."""
        (last,) = streams
        return last

    def full_logits(self, logits: torch.Tensor) -> torch.Tensor:
        return logits  # the target's own head: its whole vocabulary

    def draft_ids(self) -> torch.Tensor:
        return torch.arange(self.cfg.vocab_size, device=self.lm_head.weight.device)

    def _attention_input(self, tokens: torch.Tensor, g: torch.Tensor, noise=None):
        emb = self.embed(tokens)
        if noise is not None:
            emb = noise.embedding(emb)
        x = self.proj(torch.cat([self.enorm(emb), self.hnorm(g)], dim=-1))
        return self.input_norm(x), x

    def _finish(self, g: torch.Tensor, attn: torch.Tensor, x: torch.Tensor):
        h = x + self.o_proj(attn)
        m = self.post_attn_norm(h)
        h = h + self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))
        normed = self.final_norm(h)
        return h, self.lm_head(normed), normed


def shared_with(target) -> dict[str, torch.Tensor]:
    """The target's weights an MTP head shares (frozen), by the head's state-dict names."""
    norm = getattr(getattr(target, "model", None), "norm", None)
    if norm is None:
        raise ValueError(f"mtp head: the target ({type(target).__name__}) has no final norm at model.norm")
    return {
        "embed.weight": target.get_input_embeddings().weight,
        "final_norm.weight": norm.weight,
        "lm_head.weight": target.get_output_embeddings().weight,
    }


def head_from_target(target, cfg: MtpConfig) -> MtpHead:
    """A fresh head sharing the target's embedding, final norm and output head (all frozen)."""
    head = MtpHead(cfg)
    own = head.state_dict()  # views of the head's parameters: copying into them sets the weights
    with torch.no_grad():
        for name, tensor in shared_with(target).items():
            own[name].copy_(tensor.float())
    return head
