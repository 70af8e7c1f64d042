"""The decode step's elementwise work, one launch each: add + RMSNorm, rope + cache store, SiLU * up.

Each replaces several eager kernels (the residual add, the fp32 cast, the square, the mean, the
rsqrt, the multiply; rope's negate, cat and two multiplies; the cache copies), which at batch 1
cost more than their bytes: a launch in a CUDA graph still takes a few microseconds.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _add_rms_norm(x_ptr, res_ptr, w_ptr, out_ptr, sum_ptr, D, eps, HAS_RESIDUAL: tl.constexpr,
                  BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    d = tl.arange(0, BLOCK_D)
    mask = d < D
    x = tl.load(x_ptr + row * D + d, mask=mask, other=0.0)
    if HAS_RESIDUAL:  # the sublayer's output joins the stream; the sum is the next residual
        x = (x.to(tl.float32) + tl.load(res_ptr + row * D + d, mask=mask, other=0.0).to(tl.float32)).to(x.dtype)
        tl.store(sum_ptr + row * D + d, x, mask=mask)
    xf = x.to(tl.float32)
    normed = (xf * tl.rsqrt(tl.sum(xf * xf, axis=0) / D + eps)).to(x.dtype)  # cast before the weight, as HF does
    w = tl.load(w_ptr + d, mask=mask, other=0.0)
    tl.store(out_ptr + row * D + d, (w.to(tl.float32) * normed.to(tl.float32)).to(out_ptr.dtype.element_ty), mask=mask)


def add_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
    """RMSNorm(x + residual) and x + residual (or RMSNorm(x) and x): x, residual (..., D) contiguous."""
    D = x.shape[-1]
    rows = x.numel() // D
    out = torch.empty_like(x)
    total = torch.empty_like(x) if residual is not None else x
    _add_rms_norm[(rows,)](x, residual if residual is not None else x, weight, out, total, D, eps,
                           HAS_RESIDUAL=residual is not None, BLOCK_D=triton.next_power_of_2(D))
    return out, total


@triton.jit
def _rope_store(qkv_ptr, cos_ptr, sin_ptr, q_ptr, k_ptr, v_ptr, start, cache_offset, T, N, K, stride_cb, stride_ck,
                H: tl.constexpr):
    token, head = tl.program_id(0), tl.program_id(1)  # token = b * T + t; heads 0..N-1 are Q, then K
    b, t = token // T, token % T
    half = tl.arange(0, H // 2)
    width = (N + 2 * K) * H
    pos = start + t
    cos = tl.load(cos_ptr + pos * H + half).to(tl.float32)  # the half-split layout repeats the angles
    sin = tl.load(sin_ptr + pos * H + half).to(tl.float32)
    src = qkv_ptr + token * width + head * H
    lo = tl.load(src + half).to(tl.float32)
    hi = tl.load(src + H // 2 + half).to(tl.float32)
    rot_lo, rot_hi = lo * cos - hi * sin, hi * cos + lo * sin
    if head < N:  # a query head: (B, N, T, H)
        q_dst = q_ptr + ((b * N + head) * T + t) * H
        tl.store(q_dst + half, rot_lo.to(q_ptr.dtype.element_ty))
        tl.store(q_dst + H // 2 + half, rot_hi.to(q_ptr.dtype.element_ty))
    else:  # a KV head: roped key and plain value into the cache at position pos
        kv = head - N
        slot = b * stride_cb + kv * stride_ck + (pos - cache_offset) * H
        tl.store(k_ptr + slot + half, rot_lo.to(k_ptr.dtype.element_ty))
        tl.store(k_ptr + slot + H // 2 + half, rot_hi.to(k_ptr.dtype.element_ty))
        value = qkv_ptr + token * width + (N + K + kv) * H
        tl.store(v_ptr + slot + half, tl.load(value + half).to(v_ptr.dtype.element_ty))
        tl.store(v_ptr + slot + H // 2 + half, tl.load(value + H // 2 + half).to(v_ptr.dtype.element_ty))


def rope_store(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
               start: int, n_heads: int, n_kv_heads: int, head_dim: int, cache_offset: int = 0) -> torch.Tensor:
    """qkv (B, T, (N + 2K) H) -> roped q (B, N, T, H); roped keys and values written to the caches
    (B, K, capacity, H) at slots start - cache_offset .. (a staging buffer of T slots: cache_offset = start).
    cos, sin: (capacity, H), half-split."""
    B, T, _ = qkv.shape
    q = torch.empty((B, n_heads, T, head_dim), dtype=qkv.dtype, device=qkv.device)
    _rope_store[(B * T, n_heads + n_kv_heads)](qkv, cos, sin, q, k_cache, v_cache, start, cache_offset, T, n_heads, n_kv_heads,
                                               k_cache.stride(0), k_cache.stride(1), H=head_dim)
    return q


@triton.jit
def _silu_mul(gate_up_ptr, out_ptr, F, BLOCK: tl.constexpr):
    row, block = tl.program_id(0), tl.program_id(1)
    f = block * BLOCK + tl.arange(0, BLOCK)
    mask = f < F
    gate = tl.load(gate_up_ptr + row * 2 * F + f, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_up_ptr + row * 2 * F + F + f, mask=mask, other=0.0)
    silu = (gate / (1 + tl.exp(-gate))).to(up.dtype)  # rounded as F.silu's output is, before the product
    tl.store(out_ptr + row * F + f, silu * up, mask=mask)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[gate | up] (..., 2F) -> silu(gate) * up (..., F)."""
    F2 = gate_up.shape[-1]
    rows = gate_up.numel() // F2
    out = torch.empty((*gate_up.shape[:-1], F2 // 2), dtype=gate_up.dtype, device=gate_up.device)
    _silu_mul[(rows, triton.cdiv(F2 // 2, 1024))](gate_up, out, F2 // 2, BLOCK=1024)
    return out
