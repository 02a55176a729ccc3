"""The DFlash block drafter (block diffusion for speculative decoding): a few decoder layers that
draft a whole block of tokens in ONE non-causal pass, conditioned on the target's hidden states.

Context: the target's hidden states of chosen layers (`target_layer_ids`, 0-based layer indices;
`hidden_states[i + 1]` is layer i's output) are concatenated per position, projected to the
drafter's width and RMS-normed once: c_p = hidden_norm(fc(cat(h_p^(l) for l in ids))) [d]. Every
drafter layer projects c_p with its own k_proj and v_proj into extra keys and values at the
context's own positions.

Block: at anchor position a (the newest committed token x_a, whose target state is not known yet),
the block is [x_a, MASK, ..., MASK] over positions a .. a + block_size - 1, embedded with the
target's embedding (frozen). MASK is a token of the target's own vocabulary that its text never
uses (`mask_token_id`, the rarest in the training text), so engines that take the target's
embedding read the same vector for it. Each layer's queries come from the block
only; they attend to every context key at positions < a and to the whole block (no causal mask
inside it). Layers are Qwen3-style: per-head RMSNorm on queries and keys, rotary positions at the
absolute positions (context and block alike), pre-norm residual attention and SwiGLU MLP. Block
position k >= 1 predicts the token AT a + k through the drafter's final norm and the target's own
output head (frozen): one pass drafts block_size - 1 tokens. A shorter block, [x_a, MASK x k]
(`size` = k + 1 <= block_size), is what most engines draft for a depth k below the trained block
(the drafter spec's `block_drafting: depth`): the same layers over fewer mask positions.

`forward_blocks` runs many blocks of one sequence at once (training on random anchors, measuring
every chain of a text); `extend_context` + `draft_block` run decoding with a cache of the context's
keys and values. They compute the same function; tests hold them equal.

Attention shape (query and key/value heads, head size, rotary base and scaling) is the target's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from workers.drafters.chain.model import LayerShape, RMSNorm
from workers.models.rope import apply_rope, inv_freq


@dataclass(frozen=True, kw_only=True)
class DFlashConfig(LayerShape):
    target_layer_ids: tuple[int, ...]  # 0-based target layers whose outputs feed the context
    mask_token_id: int  # the token a masked block position reads (a rare one of the target's vocabulary)
    layers: int = 1
    block_size: int = 8  # the block's positions: the newest token and block_size - 1 drafts
    max_positions: int = 8192  # the target's context length, as engines size the drafter's

    @property
    def capture_layers(self) -> tuple[int, ...]:
        """The `hidden_states` indices the context reads (layer i's output is hidden_states[i + 1])."""
        return tuple(i + 1 for i in self.target_layer_ids)

    @classmethod
    def from_dict(cls, d: dict) -> DFlashConfig:
        return cls(**{**d, "target_layer_ids": tuple(d["target_layer_ids"])})


class BlockLayer(nn.Module):
    """One decoder layer: block queries over the context's keys and values and the block's own."""

    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        d, dh = cfg.hidden_size, cfg.dim_per_head
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.num_kv_heads, dh
        self.input_norm = RMSNorm(d, cfg.rms_eps)
        self.q_proj = nn.Linear(d, cfg.heads * dh, bias=False)
        self.k_proj = nn.Linear(d, cfg.num_kv_heads * dh, bias=False)
        self.v_proj = nn.Linear(d, cfg.num_kv_heads * dh, bias=False)
        self.q_norm = RMSNorm(dh, cfg.rms_eps)
        self.k_norm = RMSNorm(dh, cfg.rms_eps)
        self.o_proj = nn.Linear(cfg.heads * dh, d, bias=False)
        self.post_attn_norm = RMSNorm(d, cfg.rms_eps)
        self.gate_proj = nn.Linear(d, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(d, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, d, bias=False)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, n, self.head_dim).transpose(1, 2)  # [B, n, T, dh]

    def kv(self, x: torch.Tensor, pos: torch.Tensor, freqs: torch.Tensor):
        """Keys and values of inputs x [B, T, d] at positions pos [T] -> ([B, Hkv, T, dh], same)."""
        k = apply_rope(self.k_norm(self._heads(self.k_proj(x), self.kv_heads)), pos, freqs)
        return k, self._heads(self.v_proj(x), self.kv_heads)

    def forward(self, x, pos, ctx_k, ctx_v, mask, freqs):
        """x: [B, Q, d] the block stream at positions pos [Q]; ctx_k, ctx_v: [B, Hkv, C, dh] the
        context's; mask: [Q, C + Q] bool, which keys each query reads (None: all)."""
        h = self.input_norm(x)
        q = apply_rope(self.q_norm(self._heads(self.q_proj(h), self.heads)), pos, freqs)
        k, v = self.kv(h, pos, freqs)
        k, v = torch.cat([ctx_k, k], dim=2), torch.cat([ctx_v, v], dim=2)
        group = self.heads // self.kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(self.head_dim))
        B, H, Q, dh = attn.shape
        x = x + self.o_proj(attn.transpose(1, 2).reshape(B, Q, H * dh))
        m = self.post_attn_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(m)) * self.up_proj(m))


class DFlashDrafter(nn.Module):
    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        if cfg.heads % cfg.num_kv_heads:
            raise ValueError(f"dflash drafter: {cfg.heads} attention heads do not split into {cfg.num_kv_heads} groups")
        if not 0 <= cfg.mask_token_id < cfg.vocab_size:
            raise ValueError(
                f"dflash drafter: mask_token_id {cfg.mask_token_id} is not a token of the target's vocabulary"
            )
        if cfg.block_size < 2:
            raise ValueError(f"dflash drafter: block_size {cfg.block_size} drafts nothing (it must be at least 2)")
        self.cfg = cfg
        d = cfg.hidden_size
        self.embed = nn.Embedding(cfg.vocab_size, d)  # the target's, frozen
        self.embed.weight.requires_grad_(False)
        self.fc = nn.Linear(len(cfg.target_layer_ids) * d, d, bias=False)
        self.hidden_norm = RMSNorm(d, cfg.rms_eps)
        self.layers = nn.ModuleList([BlockLayer(cfg) for _ in range(cfg.layers)])
        self.final_norm = RMSNorm(d, cfg.rms_eps)
        self.lm_head = nn.Linear(d, cfg.vocab_size, bias=False)  # the target's, frozen
        self.lm_head.weight.requires_grad_(False)
        self.rope_freqs = inv_freq(cfg.dim_per_head, cfg.rope_theta, cfg.rope_scaling)
        # how a depth below the trained block is drafted: "trained" (the whole block, its first k drafts)
        # or "depth" (a block of k + 1). How it is run, not a weight: the spec's `block_drafting`, set
        # when the family loads it (workers/drafters/dflash/family.py); never saved.
        self.block_drafting = "trained"

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def block_for(self, depth: int) -> int | None:
        """The block size that drafts `depth` tokens as this drafter is run (None: the trained block)."""
        if depth > self.drafts_per_block:
            raise ValueError(
                f"a DFlash drafter of block_size {self.cfg.block_size} drafts at most {self.drafts_per_block} "
                f"tokens, not {depth}"
            )
        return depth + 1 if self.block_drafting == "depth" else None

    @property
    def drafts_per_block(self) -> int:
        return self.cfg.block_size - 1

    def full_logits(self, logits: torch.Tensor) -> torch.Tensor:
        return logits  # the target's own head: its whole vocabulary

    def context(self, streams: list[torch.Tensor]) -> torch.Tensor:
        """The target's captured states [B, T, d] each -> the context c [B, T, d]."""
        return self.hidden_norm(self.fc(torch.cat([s.to(self.dtype) for s in streams], dim=-1)))

    def block_len(self, size: int | None) -> int:
        """The positions of a block: the trained block_size (None), or `size` (2..block_size)."""
        if size is None:
            return self.cfg.block_size
        if not 2 <= size <= self.cfg.block_size:
            raise ValueError(f"a DFlash block of {size} positions: it takes 2 to block_size {self.cfg.block_size}")
        return size

    def _embed_block(self, first: torch.Tensor, size: int | None = None) -> torch.Tensor:
        """first: [B, J] each block's first token -> [B, J * size, d] (the rest masked)."""
        B, J = first.shape
        size = self.block_len(size)
        ids = first.new_full((B, J, size), self.cfg.mask_token_id)
        ids[:, :, 0] = first
        return self.embed(ids).to(self.dtype).reshape(B, J * size, -1)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.final_norm(x))

    def _freqs(self, device) -> torch.Tensor:
        if self.rope_freqs.device != device:
            self.rope_freqs = self.rope_freqs.to(device)
        return self.rope_freqs

    # ---- many blocks of one text at once ----------------------------------------------------
    def forward_blocks(
        self, first: torch.Tensor, anchors: torch.Tensor, ctx: torch.Tensor, size: int | None = None
    ) -> torch.Tensor:
        """Blocks at `anchors` [J] (shared by the batch's rows), each seeing the context before it.

        first: [B, J] the token at each anchor; ctx: [B, T, d] the context (`context`) at positions
        0..T-1; size: the block's positions (None: block_size). Returns logits [B, J, size, V]:
        position k of block j predicts the token at anchors[j] + k (k = 0 reads the known token; its
        logits are not a draft).
        """
        B, J = first.shape
        S, T, device = self.block_len(size), ctx.shape[1], ctx.device
        offsets = torch.arange(S, device=device)
        pos = (anchors[:, None] + offsets[None, :]).reshape(-1)  # [J * S]
        block_of = torch.arange(J, device=device).repeat_interleave(S)  # [J * S]
        sees_ctx = torch.arange(T, device=device)[None, :] < anchors[block_of][:, None]  # [J*S, T]
        sees_block = block_of[:, None] == block_of[None, :]  # [J*S, J*S]: its own block, both ways
        mask = torch.cat([sees_ctx, sees_block], dim=1)
        freqs = self._freqs(device)
        ctx_pos = torch.arange(T, device=device)
        x = self._embed_block(first, S)
        for layer in self.layers:
            k, v = layer.kv(ctx, ctx_pos, freqs)
            x = layer(x, pos, k, v, mask, freqs)
        return self._logits(x).view(B, J, S, -1)

    # ---- decoding: the context's keys and values cached ------------------------------------
    def extend_context(self, cache, ctx: torch.Tensor, start: int):
        """Append the context at positions start..start+T-1 (ctx: [B, T, d]) to `cache` (None: empty),
        one (k, v) per layer. Returns the new cache."""
        freqs = self._freqs(ctx.device)
        pos = torch.arange(start, start + ctx.shape[1], device=ctx.device)
        out = []
        for j, layer in enumerate(self.layers):
            k, v = layer.kv(ctx, pos, freqs)
            if cache is not None:
                k, v = torch.cat([cache[j][0], k], dim=2), torch.cat([cache[j][1], v], dim=2)
            out.append((k, v))
        return out

    def draft_block(self, cache, first: torch.Tensor, anchor: int, size: int | None = None) -> torch.Tensor:
        """One block at `anchor` over the cached context (positions < anchor). first: [B] the token at
        the anchor; size: the block's positions (None: block_size). Returns logits [B, size, V]
        (position k predicts the token at anchor + k)."""
        freqs = self._freqs(first.device)
        S = self.block_len(size)
        pos = torch.arange(anchor, anchor + S, device=first.device)
        x = self._embed_block(first[:, None], S)
        for (k, v), layer in zip(cache, self.layers):
            x = layer(x, pos, k, v, None, freqs)  # every query sees the whole context and block
        return self._logits(x)


def drafter_from_target(target, cfg: DFlashConfig) -> DFlashDrafter:
    """A fresh drafter sharing the target's embedding and output head (both frozen)."""
    drafter = DFlashDrafter(cfg)
    with torch.no_grad():
        drafter.embed.weight.copy_(target.get_input_embeddings().weight.float())
        drafter.lm_head.weight.copy_(target.get_output_embeddings().weight.float())
    return drafter
