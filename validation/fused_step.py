"""The decoder's step as a serving engine launches it on a GPU: nine launches a layer.

Per layer: RMSNorm, the QKV projection, rope with the cache store (Triton), attention, the O
projection with the residual add folded into the GEMM (torch.addmm's beta), RMSNorm, gate/up, SiLU *
up (Triton), and the down projection with the residual add. Projections are cuBLAS: a Triton GEMV
measured 0.83-1.04x of cuBLAS's rate at one row on the H100 (benchmarks/bench_gpu_kernels.py), so it
was dropped. Same weights and cache as the eager `Decoder.forward`, same function
(tests/test_validation_kernels.py): dense models with grouped attention (MHA/GQA/MQA, sliding
windows); MLA and MoE layers stay eager.

Decode attention over a bf16/fp16/fp32 cache is SDPA with the query laid out per query head and
enable_gqa (2.5 TB/s over a 32k GQA-8 cache at batch 1 on the H100). A quantized cache (int8, fp8)
stores each new key and value divided by its per-position scale and is read by the split-KV
kernel, dequantizing on load; prefill attends the fresh keys in the activation dtype, as engines
do, and stores them quantized. Quantized weights (validation/quantized.py) run their own kernels.
"""
from __future__ import annotations

import torch

from .functional import prefill_attention
import torch.nn.functional as F

from .kernels.decode_attention import decode_attention, quantize_per_position
from .kernels.fused import add_rms_norm, rope_store, silu_mul


def linear(x: torch.Tensor, projection, residual: torch.Tensor | None = None) -> torch.Tensor:
    """projection(x) (+ residual): cuBLAS with the residual as addmm's C, or a quantized module's kernel."""
    weight = getattr(projection, "weight", None)
    if weight is None:  # weight-quantized (validation/quantized.py): its own packed kernel
        out = projection(x)
        return out if residual is None else out + residual
    if residual is None:
        return F.linear(x, weight)
    rows = x.numel() // x.shape[-1]
    out = torch.addmm(residual.reshape(rows, -1), x.reshape(rows, x.shape[-1]), weight.t())
    return out.reshape(*x.shape[:-1], weight.shape[0])


def attention(layer, q: torch.Tensor, cache, staged, start: int) -> torch.Tensor:
    """q (B, N, T, H) roped; the new keys are in the cache, and in `staged` (keys, values) when it is
    quantized -> (B, T, N H)."""
    attn = layer.attention
    B, N, T, H = q.shape
    if T == 1 and cache.quantized:
        out = decode_attention(q[:, :, 0], cache.keys, cache.values, start + 1, attn.window,
                               cache.key_scale, cache.value_scale)
        return out.reshape(B, 1, N * H)
    if T == 1:
        first = max(0, start + 1 - attn.window) if attn.window else 0
        out = F.scaled_dot_product_attention(q, cache.keys[:, :, first:start + 1], cache.values[:, :, first:start + 1],
                                             enable_gqa=attn.K != N)
        return out.reshape(B, 1, N * H)
    if staged is not None:
        keys, values = staged  # fresh, unquantized (prefill starts from an empty cache)
    else:
        keys, values = cache.keys[:, :, :start + T], cache.values[:, :, :start + T]
    out = prefill_attention(q, keys, values, start, attn.window)
    return out.transpose(1, 2).reshape(B, T, N * H)


def store_quantized(cache, staged: tuple, start: int) -> None:
    T = staged[0].shape[2]
    for fresh, stored, scale in zip(staged, (cache.keys, cache.values), (cache.key_scale, cache.value_scale)):
        quantized, scales = quantize_per_position(fresh, stored.dtype)
        stored[:, :, start:start + T] = quantized
        scale[:, :, start:start + T] = scales


def fused_forward(model, tokens: torch.Tensor, start: int) -> torch.Tensor:
    """tokens (B, T) at positions start .. start+T-1 -> logits (B, V) of the last position."""
    eps = model.eps
    B, T = tokens.shape
    if model.quantized_cache and T > 1 and start:
        raise ValueError("a quantized cache is prefilled from empty (start 0): chunked prefill would attend "
                         "dequantized keys, which this step does not implement")
    x = model.embed(tokens)
    for index, layer in enumerate(model.layers):
        attn = layer.attention
        h, _ = add_rms_norm(x, layer.attn_norm, eps)
        qkv = linear(h, attn.qkv)
        cache, staged = model.cache_of(index), None
        if cache.quantized:  # roped keys and values of the T new tokens, then stored quantized
            staged = tuple(torch.empty((B, attn.K, T, attn.H), dtype=x.dtype, device=x.device) for _ in range(2))
            q = rope_store(qkv, model.cos, model.sin, *staged, start, attn.N, attn.K, attn.H, cache_offset=start)
            store_quantized(cache, staged, start)
        else:
            q = rope_store(qkv, model.cos, model.sin, cache.keys, cache.values, start, attn.N, attn.K, attn.H)
        x = linear(attention(layer, q, cache, staged, start), attn.o, residual=x)
        h, _ = add_rms_norm(x, layer.mlp_norm, eps)
        x = linear(silu_mul(linear(h, layer.mlp.gate_up)), layer.mlp.down, residual=x)
    h, _ = add_rms_norm(x[:, -1].contiguous(), model.final_norm, eps)
    return linear(h, model.lm_head)


def supports(config) -> bool:
    """Dense MLPs and grouped attention: what the fused step implements."""
    from roofline.models.config import MOE
    return not config.kv_lora_rank and MOE not in config.layer_mlp
