"""The decoder's stateless pieces: RMSNorm, the two rope layouts, and prefill attention."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # In fp32 and cast back before the weight multiply, as Hugging Face's LlamaRMSNorm does.
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rope in the half-split layout (Hugging Face Llama): x (B, heads, T, H), cos/sin (T, H)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def rotate_pairs(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Interleaved rope: (x[2i], x[2i+1]) turned by angle i; x (..., T, heads, R), cos/sin (T, R/2)."""
    pairs = x.float().unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    cos, sin = cos.float()[:, None], sin.float()[:, None]  # (T, 1, R/2) over the heads
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2).to(x.dtype)


def prefill_attention(q, keys, values, start: int, window: int = 0) -> torch.Tensor:
    """SDPA for T queries at positions start.. against keys 0..start+T-1: causal, within the window."""
    T, K, N = q.shape[2], keys.shape[1], q.shape[1]
    if start == 0 and not window:
        return F.scaled_dot_product_attention(q, keys, values, is_causal=True, enable_gqa=K != N)
    mask = torch.ones(T, start + T, dtype=torch.bool, device=q.device).tril(start)  # query i sees keys <= start + i
    if window:
        mask &= ~torch.ones_like(mask).tril(start - window)  # ... and only the last W of them
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=K != N)
