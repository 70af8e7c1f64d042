"""DeepSeek's multi-head latent attention (MLA), as Hugging Face's DeepseekV2Attention computes it.

Per token the cache keeps a latent c (C wide, RMS-normalized) and one roped key part k_R (R wide)
shared by all N heads. Per head, keys are [c W_UK | k_R] and values c W_UV, W_UK (C, Hn) and
W_UV (C, Hv) being slices of kv_b. Prefill decompresses them (the naive form, Hugging Face's).
Decode runs the absorbed form serving engines use and the library prices by default: the query
is folded into latent space, q_C = q_nope W_UK^T, so a step reads the latent cache once and never
expands it: scores = q_C c^T + q_R k_R^T, out = softmax(scores) c W_UV. Rope is interleaved
(pairs of adjacent dims, DeepSeek's complex form); no yarn scaling (its mscale is left out).
"""
from __future__ import annotations

import torch
from torch import nn

from roofline import ModelConfig

from .functional import prefill_attention, rms_norm, rotate_pairs
from .linear import Linear


class LatentAttention(nn.Module):
    def __init__(self, config: ModelConfig, eps: float = 1e-6):
        super().__init__()
        D, N, C, Cq = config.d_model, config.n_heads, config.kv_lora_rank, config.q_lora_rank
        self.N, self.C, self.R = N, C, config.qk_rope_dim
        self.Hn, self.Hv, self.eps = config.qk_nope_dim, config.v_head_dim, eps
        query_width = N * (self.Hn + self.R)
        if Cq:  # compressed queries (V3): X -> Cq -> norm -> N (Hn + R)
            self.q_a, self.q_norm = Linear(D, Cq, bias=False), nn.Parameter(torch.ones(Cq))
            self.q_b = Linear(Cq, query_width, bias=False)
        else:
            self.q = Linear(D, query_width, bias=False)
        self.kv_a = Linear(D, C + self.R, bias=False)  # [c | k_R] = X @ W_kv_a
        self.kv_norm = nn.Parameter(torch.ones(C))
        self.kv_b = Linear(C, N * (self.Hn + self.Hv), bias=False)  # per head [k_nope | v] = c @ W_kv_b
        self.o = Linear(N * self.Hv, D, bias=False)
        self.scale = (self.Hn + self.R) ** -0.5

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "q"):
            return self.q(x)
        return self.q_b(rms_norm(self.q_a(x), self.q_norm, self.eps))

    def forward(self, x, cos, sin, latent_cache, rope_cache, start: int):
        """x (B, T, D) normalized; caches (B, 1, capacity, C) and (B, 1, capacity, R)."""
        B, T, _ = x.shape
        N, C, R, Hn, Hv = self.N, self.C, self.R, self.Hn, self.Hv
        q_nope, q_rope = self.queries(x).view(B, T, N, Hn + R).split((Hn, R), dim=-1)
        latent, k_rope = self.kv_a(x).split((C, R), dim=-1)
        latent_cache[:, 0, start:start + T] = rms_norm(latent, self.kv_norm, self.eps)
        rope_cache[:, 0, start:start + T] = rotate_pairs(k_rope[:, :, None], cos, sin)[:, :, 0]
        q_rope = rotate_pairs(q_rope, cos, sin)
        latents, k_ropes = latent_cache[:, 0, :start + T], rope_cache[:, 0, :start + T]  # (B, S, C), (B, S, R)
        w_uk, w_uv = self.kv_b.weight.view(N, Hn + Hv, C).split((Hn, Hv), dim=1)  # (N, Hn, C), (N, Hv, C)
        if T == 1:  # absorbed: the latent cache is read once, for every head
            q_latent = torch.einsum("bnh,nhc->bnc", q_nope[:, 0], w_uk)  # (B, N, C)
            scores = (q_latent @ latents.transpose(1, 2) + q_rope[:, 0] @ k_ropes.transpose(1, 2)) * self.scale
            out = torch.softmax(scores.float(), dim=-1).to(x.dtype) @ latents  # (B, N, C)
            out = torch.einsum("bnc,nhc->bnh", out, w_uv)[:, None]  # (B, 1, N, Hv)
        else:  # naive: per-head keys and values decompressed from the latent, as Hugging Face runs it
            kv = self.kv_b(latents).view(B, -1, N, Hn + Hv)
            keys = torch.cat((kv[..., :Hn], k_ropes[:, :, None].expand(-1, -1, N, -1)), dim=-1)
            query = torch.cat((q_nope, q_rope), dim=-1)
            out = prefill_attention(query.transpose(1, 2), keys.transpose(1, 2), kv[..., Hn:].transpose(1, 2),
                                    start).transpose(1, 2)  # SDPA's default scale is 1 / sqrt(Hn + R)
        return self.o(out.reshape(B, T, N * Hv))
