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
norm, EAGLE-3) or after the final RMSNorm (`post` norm, the attention-drift fix).

`forward_steps` unrolls every chain step over a whole sequence at once (training-time test and
batched measurement); `prefill` + `step` run one chain incrementally with a KV cache (decoding
and cost timing). Both compute the same function; a test holds them equal.


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

import math
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from workers.models.rope import apply_rope, inv_freq


class StepOut(NamedTuple):
    logits: torch.Tensor  # [B, T, V]
    chain: torch.Tensor  # [B, T, d] what the next step receives
    probs: torch.Tensor  # [B, H, T (or the kept rows), T + s]
    picked: torch.Tensor | None  # [B, T] drafted tokens (drafting mode only)


@dataclass(frozen=True)
class DrafterConfig:
    hidden_size: int
    heads: int
    intermediate_size: int
    vocab_size: int
    capture_layers: tuple[int, ...]  # indices into the target's output_hidden_states
    norm: str = "pre"  # "pre" | "post"
    fc_norm: bool = False
    attention: str = "standard"  # "standard" | "gated" (sigmoid gate on the attention output)
    draft_vocab: int | None = None  # size of the reduced draft vocabulary; None = the target's
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

    @classmethod
    def from_dict(cls, d: dict) -> DrafterConfig:
        return cls(**{**d, "capture_layers": tuple(d["capture_layers"])})


def capture_layers(num_layers: int, fusion: str, chosen=None) -> tuple[int, ...]:
    """Which `hidden_states[i]` feed the drafter: `chosen` (the spec's capture_layers), checked
    against the target, or the fusion's default.

    tri: EAGLE-3's low/mid/high = (2, N//2, N-3) for N >= 8 layers; for shallower targets
    (1, N//2, N-1) so the three streams stay distinct. last: the final hidden state (EAGLE-1).
    """
    if chosen:
        if max(chosen) > num_layers:
            raise ValueError(f"capture_layers {list(chosen)}: the target has hidden states 0..{num_layers}")
        return tuple(chosen)
    if fusion == "last":
        return (num_layers,)
    if num_layers >= 8:
        return (2, num_layers // 2, num_layers - 3)
    return (1, num_layers // 2, num_layers - 1)


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


class Eagle3Drafter(nn.Module):
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

    def _qkv(self, tokens: torch.Tensor, g: torch.Tensor, pos: torch.Tensor, noise=None):
        """tokens: [B, T], g: [B, T, d], pos: [T] -> q, k, v: [B, H, T, dh] (rotary applied; each key/value
        head repeated over its group of query heads), gate [B, T, H * dh] or None."""
        emb = self.embed(tokens)
        if noise is not None:
            emb = noise.embedding(emb)
        x = torch.cat([self.input_norm(emb), self.hidden_norm(g)], dim=-1)  # [B, T, 2d]
        B, T, _ = x.shape
        split = lambda t: t.view(B, T, -1, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        group = self.cfg.heads // self.cfg.num_kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        gate = torch.sigmoid(self.attn_gate(x)) if self.attn_gate is not None else None
        if self.rope_freqs.device != x.device:
            self.rope_freqs = self.rope_freqs.to(x.device)
        return apply_rope(q, pos, self.rope_freqs), apply_rope(k, pos, self.rope_freqs), v, gate

    def _finish(self, g: torch.Tensor, attn_out: torch.Tensor, gate: torch.Tensor | None):
        """Residual sum and MLP. attn_out: [B, H, T, dh] -> (h raw [B, T, d], logits [B, T, n_out], norm(h))."""
        B, H, T, dh = attn_out.shape
        attn_out = attn_out.transpose(1, 2).reshape(B, T, H * dh)
        if gate is not None:
            attn_out = attn_out * gate
        h = g + self.o_proj(attn_out)
        m = self.post_attn_norm(h)
        h = h + self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))
        normed = self.final_norm(h)
        return h, self.lm_head(normed), normed

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

        tokens: [B, T] token read at each position in step 0 (x_{i+1}); g0: [B, T, d] fused features.
        pick: None = teacher forcing (training): every step reads `tokens`;
              a function logits [B, T, n_out] -> target ids [B, T] = drafting: step s at
              position i reads the draft that step s-1 picked at position i-1.
        noise: optional perturbation of the embedding path and of the hidden path between steps.
        rows: chain start positions whose attention to keep (step s keeps rows + s); all when None.
        Step s at position i continues the chain that started at c = i - s: it attends to step-0
        keys at positions <= c and to the chain's own keys (step s - (i - p) at position p > c).
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
            q, k, v, gate = self._qkv(tok, g, pos, noise)
            ks.append(k)
            vs.append(v)
            # step-0 keys at p <= i - s: [B, H, T, T]
            base = (q @ ks[0].transpose(-1, -2)) * scale
            allowed = pos[None, :] <= pos[:, None] - s
            base = base.masked_fill(~allowed, float("-inf"))
            diag_scores, diag_vals = [], []
            for sp in range(1, s + 1):  # the chain's own keys: step sp sits at position i - (s - sp)
                shift = s - sp
                k_sh, v_sh = _shift_right(ks[sp], shift), _shift_right(vs[sp], shift)
                sc = (q * k_sh).sum(-1, keepdim=True) * scale  # [B, H, T, 1]
                valid = (pos >= shift)[None, None, :, None]
                diag_scores.append(sc.masked_fill(~valid, float("-inf")))
                diag_vals.append(v_sh)
            # every row keeps at least one key: p = 0 at step 0, its own position at step s >= 1
            probs = torch.softmax(torch.cat([base] + diag_scores, dim=-1), dim=-1)  # [B, H, T, T + s]
            attn = probs[..., :T] @ vs[0]
            for j, v_sh in enumerate(diag_vals):
                attn = attn + probs[..., T + j : T + j + 1] * v_sh
            h, logits, normed = self._finish(g, attn, gate)
            picked = pick(logits) if pick is not None else None
            kept = probs if rows is None else probs[:, :, (rows + s).clamp(max=T - 1)]
            outs.append(StepOut(logits, self.chain_input(h, normed), kept, picked))
            g = _shift_right(self.chain_input(h, normed), 1, dim=1)  # position i gets step s at i-1
            if picked is not None:
                tok = _shift_right(picked, 1, dim=1)
        return outs

    # ---- one chain, incrementally, with a KV cache ----------------------------------------
    def extend(self, cache, tokens: torch.Tensor, g0: torch.Tensor, start: int):
        """Step 0 at positions start..start+T-1 on top of a cache of positions < start (None: empty).

        tokens: [B, T] (x_{i+1}), g0: [B, T, d] fused target features. Returns (cache of
        positions < start + T, logits at the last position [B, n_out], its chain input [B, d]).
        """
        T = tokens.shape[1]
        pos = torch.arange(start, start + T, device=tokens.device)
        q, k, v, gate = self._qkv(tokens, g0, pos)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        # new query at position start+t sees every cached key and the new keys up to its own
        mask = torch.arange(start + T, device=tokens.device)[None, :] <= pos[:, None]  # [T, start+T]
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        h, logits, normed = self._finish(g0, attn, gate)
        return (k, v), logits[:, -1], self.chain_input(h, normed)[:, -1]

    def prefill(self, tokens: torch.Tensor, g0: torch.Tensor):
        """Step 0 over positions 0..T-1. Returns (cache, logits at T-1 [B, n_out], chain input [B, d])."""
        return self.extend(None, tokens, g0, 0)

    def step(self, token: torch.Tensor, g: torch.Tensor, cache, pos: int):
        """One chain step at absolute position `pos`. token: [B], g: [B, d].

        Returns (new cache, logits [B, n_out], chain input for the next step [B, d]).
        """
        q, k, v, gate = self._qkv(token[:, None], g[:, None, :], torch.tensor([pos], device=token.device))
        k_all, v_all = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        attn = F.scaled_dot_product_attention(q, k_all, v_all)  # the new query sees every cached key
        h, logits, normed = self._finish(g[:, None, :], attn, gate)
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
        q, k, v, gate = self._qkv(tokens[None], g[None], torch.full((W,), pos, device=tokens.device))
        old_k, old_v = tree_kv if tree_kv is not None else (k[:, :, :0], v[:, :, :0])
        new_k, new_v = torch.cat([old_k, k], dim=2), torch.cat([old_v, v], dim=2)
        committed = torch.ones(W, cache[0].shape[2], dtype=torch.bool, device=tokens.device)
        mask = torch.cat(
            [committed, visible.to(tokens.device), torch.eye(W, dtype=torch.bool, device=tokens.device)], dim=1
        )
        attn = F.scaled_dot_product_attention(
            q, torch.cat([cache[0], new_k], dim=2), torch.cat([cache[1], new_v], dim=2), attn_mask=mask
        )
        h, logits, normed = self._finish(g[None], attn, gate)
        return (new_k, new_v), logits[0], self.chain_input(h, normed)[0]


def _shift_right(x: torch.Tensor, n: int, dim: int = 2) -> torch.Tensor:
    """Move entries n places to higher positions along dim, filling with zeros."""
    if n == 0:
        return x
    pad = torch.zeros_like(x.narrow(dim, 0, n))
    return torch.cat([pad, x.narrow(dim, 0, x.shape[dim] - n)], dim=dim)


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
