"""Split-KV decode attention (flash-decoding) over a bf16, fp8 or int8 cache, dequantized on load.

One query token per sequence. The G = N/K query heads that share a KV head are one program's
rows, so each cached key and value is read once, never repeated per query head. The keys are cut
into splits so that B x K x splits programs fill the GPU at any batch: at batch 1 a GQA-8 model has
only 8 (sequence, KV head) pairs for 132 SMs, which is why a (B, K, G, H) query through SDPA read
a 32k cache at 0.33 TB/s (data/measurements/README.md). A second kernel merges the splits'
partial softmaxes.

Cache layouts: (B, K, capacity, H) in the cache dtype; int8 and fp8 carry a float32 scale per
(sequence, KV head, position), (B, K, capacity): the value is stored / scale, as vLLM's and
TensorRT-LLM's quantized caches keep one scale per token and head.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from . import interpreting

SM_COUNT_DEFAULT = 132  # H100/H200; the real count is read from the device
MIN_KEYS_PER_SPLIT = 256  # below this a split's fixed cost (q load, the merge) outweighs its reads


@triton.jit
def _partial(q_ptr, k_ptr, v_ptr, ks_ptr, vs_ptr, acc_ptr, max_ptr, sum_ptr,
             first, end, keys_per_split, n_splits, scale,
             stride_qb, stride_qk, stride_cb, stride_ck, stride_sb, stride_sk, K_HEADS,
             G: tl.constexpr, BLOCK_G: tl.constexpr, H: tl.constexpr, BLOCK_S: tl.constexpr,
             SCALED: tl.constexpr, DOT: tl.constexpr):
    pair, split = tl.program_id(0), tl.program_id(1)  # pair = b * K + kv head
    b, kv = pair // K_HEADS, pair % K_HEADS
    g, h = tl.arange(0, BLOCK_G), tl.arange(0, H)
    q = tl.load(q_ptr + b * stride_qb + kv * stride_qk + g[:, None] * H + h[None, :], mask=g[:, None] < G,
                other=0.0).to(tl.float32) * scale
    q = q.to(DOT)  # (BLOCK_G, H): the G query heads of this KV head
    start = first + split * keys_per_split
    stop = tl.minimum(start + keys_per_split, end)
    running_max = tl.full((BLOCK_G,), float("-inf"), dtype=tl.float32)
    running_sum = tl.zeros((BLOCK_G,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_G, H), dtype=tl.float32)
    cache = b * stride_cb + kv * stride_ck
    scales = b * stride_sb + kv * stride_sk
    for s0 in range(start, stop, BLOCK_S):
        s = s0 + tl.arange(0, BLOCK_S)
        valid = s < stop
        # int8 and e4m3 values are exact in bf16: the stored values go to the tensor cores as they are
        keys = tl.load(k_ptr + cache + s[:, None] * H + h[None, :], mask=valid[:, None], other=0.0).to(DOT)
        values = tl.load(v_ptr + cache + s[:, None] * H + h[None, :], mask=valid[:, None], other=0.0).to(DOT)
        scores = tl.dot(q, tl.trans(keys))  # (BLOCK_G, BLOCK_S), fp32 accumulation
        if SCALED:  # dequantized on load: a position's scale multiplies its scores, and its weight below
            scores *= tl.load(ks_ptr + scales + s, mask=valid, other=0.0)[None, :]
        scores = tl.where(valid[None, :], scores, float("-inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        p = tl.exp(scores - new_max[:, None])
        alpha = tl.exp(running_max - new_max)
        running_sum = running_sum * alpha + tl.sum(p, axis=1)
        if SCALED:
            p_scaled = p * tl.load(vs_ptr + scales + s, mask=valid, other=0.0)[None, :]
        else:
            p_scaled = p
        acc = acc * alpha[:, None] + tl.dot(p_scaled.to(DOT), values)
        running_max = new_max
    out = (pair * n_splits + split) * BLOCK_G + g
    tl.store(acc_ptr + out[:, None] * H + h[None, :], acc)
    tl.store(max_ptr + out, running_max)
    tl.store(sum_ptr + out, running_sum)


@triton.jit
def _merge(acc_ptr, max_ptr, sum_ptr, out_ptr, n_splits, stride_ob, stride_ok, K_HEADS,
           BLOCK_G: tl.constexpr, H: tl.constexpr, BLOCK_SPLITS: tl.constexpr):
    pair, g = tl.program_id(0), tl.program_id(1)  # one query head of one (sequence, KV head) pair
    b, kv = pair // K_HEADS, pair % K_HEADS
    sp, h = tl.arange(0, BLOCK_SPLITS), tl.arange(0, H)
    rows = (pair * n_splits + sp) * BLOCK_G + g  # (BLOCK_SPLITS,)
    present = sp < n_splits
    maxima = tl.load(max_ptr + rows, mask=present, other=float("-inf"))
    overall = tl.max(maxima, axis=0)  # finite: every sequence sees at least one key
    weights = tl.where(present, tl.exp(maxima - overall), 0.0)  # an empty split has max -inf: weight 0
    total = tl.sum(weights * tl.load(sum_ptr + rows, mask=present, other=0.0), axis=0)
    acc = tl.load(acc_ptr + rows[:, None] * H + h[None, :], mask=present[:, None], other=0.0)
    out = tl.sum(weights[:, None] * acc, axis=0) / total  # (H,)
    tl.store(out_ptr + b * stride_ob + kv * stride_ok + g * H + h, out.to(out_ptr.dtype.element_ty))


def n_splits_for(pairs: int, keys: int, sm_count: int) -> int:
    """Enough programs for ~4 per SM, each with at least MIN_KEYS_PER_SPLIT keys, at most 64 splits."""
    wanted = math.ceil(4 * sm_count / pairs)
    return max(1, min(64, wanted, keys // MIN_KEYS_PER_SPLIT))


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, length: int, window: int = 0,
                     k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None) -> torch.Tensor:
    """q (B, N, H) for one new token per sequence, against cache positions [max(0, length - window), length)
    of (B, K, capacity, H) -> (B, N, H). Query head n uses KV head n // (N / K), as Hugging Face's repeat_kv."""
    B, N, H = q.shape
    K = k_cache.shape[1]
    G = N // K
    first = max(0, length - window) if window else 0
    keys = length - first
    sm_count = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else SM_COUNT_DEFAULT
    n_splits = n_splits_for(B * K, keys, sm_count)
    keys_per_split = math.ceil(keys / n_splits)
    block_g = max(16, triton.next_power_of_2(G))  # tl.dot's smallest tile; rows past G are masked
    q = q.contiguous()
    acc = torch.empty((B * K * n_splits * block_g, H), dtype=torch.float32, device=q.device)
    maxima = torch.empty((B * K * n_splits * block_g,), dtype=torch.float32, device=q.device)
    sums = torch.empty_like(maxima)
    scaled = k_scale is not None
    ks, vs = (k_scale, v_scale) if scaled else (maxima, maxima)  # unused pointers when not scaled
    _partial[(B * K, n_splits)](q, k_cache, v_cache, ks, vs, acc, maxima, sums, first, length, keys_per_split,
                                n_splits, H ** -0.5, q.stride(0), G * H, k_cache.stride(0), k_cache.stride(1),
                                ks.stride(0) if scaled else 0, ks.stride(1) if scaled else 0, K,
                                G=G, BLOCK_G=block_g, H=H, BLOCK_S=16 if interpreting() else 64, SCALED=scaled,
                                DOT=tl.float32 if interpreting() else tl.bfloat16)  # the interpreter has no bf16 dot
    out = torch.empty_like(q)
    _merge[(B * K, G)](acc, maxima, sums, out, n_splits, out.stride(0), G * H, K, BLOCK_G=block_g, H=H,
                       BLOCK_SPLITS=max(1, triton.next_power_of_2(n_splits)))
    return out


def quantize_per_position(x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """x (..., H) -> (stored (..., H) in dtype, float32 scale (...)): symmetric, absmax to the format's max."""
    top = 127.0 if dtype == torch.int8 else torch.finfo(dtype).max
    scale = x.float().abs().amax(dim=-1).clamp_min(1e-8) / top
    stored = x.float() / scale[..., None]
    stored = stored.round().clamp(-top, top) if dtype == torch.int8 else stored.clamp(-top, top)
    return stored.to(dtype), scale
