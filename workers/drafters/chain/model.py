"""What every one-layer drafter that chains on its own hidden state shares: the chain's attention.

An EAGLE-3 drafter and an MTP head differ in what they read (EAGLE-3: the fusion of three target
layers, and an attention over cat(norm(embedding), norm(hidden)); MTP: the target's last hidden
state, projected with the embedding into one input) and in what they hand on. How a chain of such
steps attends is the same for both, and lives here once:

Position i reads token x_{i+1} and a hidden input g_i, and predicts x_{i+2}. At chain step 0, g_i
comes from the target at position i. At chain step s >= 1, g_i is the drafter's own output at
position i-1 of step s-1: raw (`pre` norm) or after the final RMSNorm (`post` norm, the
attention-drift fix). Step s at position i continues the chain that started at c = i - s: it
attends to step-0 keys at positions <= c and to the chain's own keys (step s - (i - p) at position
p > c).

`forward_steps` unrolls every chain step over a whole sequence at once (training-time test and
batched measurement); `extend`, `prefill` + `step` run one chain incrementally with a KV cache
(decoding and cost timing), and `tree_step` runs one level of a draft tree. All compute the same
function; tests hold them equal for each family.

A subclass (a family's model) builds `q_proj`, `k_proj`, `v_proj` (on whatever input width it
reads), sets `cfg` (with `heads`, `num_kv_heads`, `norm`) and `head_dim` and `rope_freqs`, and
defines two methods:

- `_attention_input(tokens [B, T], g [B, T, d], noise)` -> (x, carry): what q, k and v are
  projected from, and what `_finish` needs besides the attention output;
- `_finish(g, attn [B, T, H * dh], carry)` -> (h raw [B, T, d], logits [B, T, n_out], norm(h)).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from workers.models.rope import apply_rope, rope_settings


class StepOut(NamedTuple):
    logits: torch.Tensor  # [B, T, V]
    chain: torch.Tensor  # [B, T, d] what the next step receives
    probs: torch.Tensor  # [B, H, T (or the kept rows), T + s]
    picked: torch.Tensor | None  # [B, T] drafted tokens (drafting mode only)


@dataclass(frozen=True, kw_only=True)
class LayerShape:
    """What every drafter family's config takes from its target (`shape_of`): width, query and
    key/value heads (grouped-query attention), head size, MLP width, vocabulary, rotary base and
    scaling, norm epsilon. A family's config adds its own fields."""

    hidden_size: int
    heads: int
    intermediate_size: int
    vocab_size: int
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    kv_heads: int | None = None  # key/value heads (grouped-query attention); None: as many as heads
    head_dim: int | None = None  # None: hidden_size // heads
    rope_scaling: dict | None = None  # the target's RoPE scaling (workers/models/rope.py); None: plain RoPE

    @property
    def num_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.heads

    def to_dict(self) -> dict:
        return asdict(self)


def shape_of(target) -> dict:
    """The LayerShape fields of a drafter for `target` (key/value heads and head size None where
    they are the plain defaults)."""
    c = target.config
    kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    theta, scaling = rope_settings(c)
    return {
        "hidden_size": c.hidden_size,
        "heads": c.num_attention_heads,
        "intermediate_size": c.intermediate_size,
        "vocab_size": target.get_output_embeddings().weight.shape[0],
        "rope_theta": theta,
        "rope_scaling": scaling,
        "rms_eps": float(getattr(c, "rms_norm_eps", 1e-6)),
        "kv_heads": kv_heads if kv_heads != c.num_attention_heads else None,
        "head_dim": head_dim if head_dim != c.hidden_size // c.num_attention_heads else None,
    }


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class ChainDrafter(nn.Module):
    """The chain's attention over a family's `_attention_input` and `_finish` (see the module)."""

    def _qkv(self, tokens: torch.Tensor, g: torch.Tensor, pos: torch.Tensor, noise=None):
        """tokens: [B, T], g: [B, T, d], pos: [T] -> q, k, v: [B, H, T, dh] (rotary applied; each key/value
        head repeated over its group of query heads), and the carry `_finish` takes."""
        x, carry = self._attention_input(tokens, g, noise)
        B, T, _ = x.shape
        split = lambda t: t.view(B, T, -1, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        group = self.cfg.heads // self.cfg.num_kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if self.rope_freqs.device != x.device:
            self.rope_freqs = self.rope_freqs.to(x.device)
        return apply_rope(q, pos, self.rope_freqs), apply_rope(k, pos, self.rope_freqs), v, carry

    def _out(self, g: torch.Tensor, attn: torch.Tensor, carry):
        """attn: [B, H, T, dh] -> _finish's (h, logits, normed)."""
        B, H, T, dh = attn.shape
        return self._finish(g, attn.transpose(1, 2).reshape(B, T, H * dh), carry)

    def chain_input(self, h: torch.Tensor, normed: torch.Tensor) -> torch.Tensor:
        """What step k+1 receives from step k: raw h (pre-norm) or norm(h) (post-norm)."""
        return normed if self.cfg.norm == "post" else h

    # ---- all chain steps over a whole sequence --------------------------------------------
    def forward_steps(
        self,
        tokens: torch.Tensor,
        g0: torch.Tensor,
        num_steps: int,
        *,
        pick=None,
        noise=None,
        rows: torch.Tensor | None = None,
    ):
        """Unroll `num_steps` chain steps at every position.

        tokens: [B, T] token read at each position in step 0 (x_{i+1}); g0: [B, T, d] step 0's hidden input.
        pick: None = teacher forcing (training): every step reads `tokens`;
              a function logits [B, T, n_out] -> target ids [B, T] = drafting: step s at
              position i reads the draft that step s-1 picked at position i-1.
        noise: optional perturbation of the embedding path and of the hidden path between steps.
        rows: chain start positions whose attention to keep (step s keeps rows + s); all when None.
        Returns one StepOut per step (logits [B, T, V], chain input [B, T, d] it hands on,
        attention probs [B, H, T, T + s] over step-0 keys then the chain's own, picked tokens).
        """
        B, T = tokens.shape
        pos = torch.arange(T, device=tokens.device)
        scale = 1.0 / math.sqrt(self.head_dim)
        ks, vs, outs = [], [], []
        g, tok = g0, tokens
        for s in range(num_steps):
            if noise is not None:
                g = noise.hidden(g)
            q, k, v, carry = self._qkv(tok, g, pos, noise)
            ks.append(k)
            vs.append(v)
            # step-0 keys at p <= i - s: [B, H, T, T]
            base = (q @ ks[0].transpose(-1, -2)) * scale
            allowed = pos[None, :] <= pos[:, None] - s
            base = base.masked_fill(~allowed, float("-inf"))
            diag_scores, diag_vals = [], []
            for sp in range(1, s + 1):  # the chain's own keys: step sp sits at position i - (s - sp)
                shift = s - sp
                k_sh, v_sh = shift_right(ks[sp], shift), shift_right(vs[sp], shift)
                sc = (q * k_sh).sum(-1, keepdim=True) * scale  # [B, H, T, 1]
                valid = (pos >= shift)[None, None, :, None]
                diag_scores.append(sc.masked_fill(~valid, float("-inf")))
                diag_vals.append(v_sh)
            # every row keeps at least one key: p = 0 at step 0, its own position at step s >= 1
            probs = torch.softmax(torch.cat([base] + diag_scores, dim=-1), dim=-1)  # [B, H, T, T + s]
            attn = probs[..., :T] @ vs[0]
            for j, v_sh in enumerate(diag_vals):
                attn = attn + probs[..., T + j : T + j + 1] * v_sh
            h, logits, normed = self._out(g, attn, carry)
            picked = pick(logits) if pick is not None else None
            kept = probs if rows is None else probs[:, :, (rows + s).clamp(max=T - 1)]
            outs.append(StepOut(logits, self.chain_input(h, normed), kept, picked))
            g = shift_right(self.chain_input(h, normed), 1, dim=1)  # position i gets step s at i-1
            if picked is not None:
                tok = shift_right(picked, 1, dim=1)
        return outs

    # ---- one chain, incrementally, with a KV cache ----------------------------------------
    def extend(self, cache, tokens: torch.Tensor, g0: torch.Tensor, start: int):
        """Step 0 at positions start..start+T-1 on top of a cache of positions < start (None: empty).

        tokens: [B, T] (x_{i+1}), g0: [B, T, d] step 0's hidden input. Returns (cache of positions
        < start + T, logits at the last position [B, n_out], its chain input [B, d]).
        """
        T = tokens.shape[1]
        pos = torch.arange(start, start + T, device=tokens.device)
        q, k, v, carry = self._qkv(tokens, g0, pos)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        # new query at position start+t sees every cached key and the new keys up to its own
        mask = torch.arange(start + T, device=tokens.device)[None, :] <= pos[:, None]  # [T, start+T]
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        h, logits, normed = self._out(g0, attn, carry)
        return (k, v), logits[:, -1], self.chain_input(h, normed)[:, -1]

    def prefill(self, tokens: torch.Tensor, g0: torch.Tensor):
        """Step 0 over positions 0..T-1. Returns (cache, logits at T-1 [B, n_out], chain input [B, d])."""
        return self.extend(None, tokens, g0, 0)

    def step(self, token: torch.Tensor, g: torch.Tensor, cache, pos: int):
        """One chain step at absolute position `pos`. token: [B], g: [B, d].

        Returns (new cache, logits [B, n_out], chain input for the next step [B, d]).
        """
        q, k, v, carry = self._qkv(token[:, None], g[:, None, :], torch.tensor([pos], device=token.device))
        k_all, v_all = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        attn = F.scaled_dot_product_attention(q, k_all, v_all)  # the new query sees every cached key
        h, logits, normed = self._out(g[:, None, :], attn, carry)
        return (k_all, v_all), logits[:, 0], self.chain_input(h, normed)[:, 0]

    def tree_step(self, tokens: torch.Tensor, g: torch.Tensor, cache, tree_kv, visible: torch.Tensor, pos: int):
        """One drafting level of a tree: W nodes at absolute position `pos`, side by side.

        tokens: [W] each node's token; g: [W, d] its parent's chain input; cache: the committed
        (k, v); tree_kv: (k, v) of the tree nodes run at earlier levels, or None; visible: [W, M]
        bool, which of those M nodes each new node reads (its ancestors). Each node reads the
        committed cache, its ancestors and itself: the same function as `step` along its path.
        Returns (tree_kv with the W nodes appended, logits [W, n_out], chain inputs [W, d]).
        """
        W = tokens.shape[0]
        q, k, v, carry = self._qkv(tokens[None], g[None], torch.full((W,), pos, device=tokens.device))
        old_k, old_v = tree_kv if tree_kv is not None else (k[:, :, :0], v[:, :, :0])
        new_k, new_v = torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2)
        committed = torch.ones(W, cache[0].shape[2], dtype=torch.bool, device=tokens.device)
        mask = torch.cat(
            [committed, visible.to(tokens.device), torch.eye(W, dtype=torch.bool, device=tokens.device)], dim=1
        )
        attn = F.scaled_dot_product_attention(
            q, torch.cat([cache[0], new_k], dim=2), torch.cat([cache[1], new_v], dim=2), attn_mask=mask
        )
        h, logits, normed = self._out(g[None], attn, carry)
        return (new_k, new_v), logits[0], self.chain_input(h, normed)[0]


def shift_right(x: torch.Tensor, n: int, dim: int = 2) -> torch.Tensor:
    """Move entries n places to higher positions along dim, filling with zeros."""
    if n == 0:
        return x
    pad = torch.zeros_like(x.narrow(dim, 0, n))
    return torch.cat([pad, x.narrow(dim, 0, x.shape[dim] - n)], dim=dim)
