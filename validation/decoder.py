"""The decode under test: a minimal Llama-style decoder with a static KV cache, random weights.

Built from a `roofline.ModelConfig`: MHA/GQA/MQA with explicit head_dim (or DeepSeek's MLA,
validation/mla.py), a gated SiLU MLP or Mixtral-style MoE (validation/mlp.py), RMSNorm, rope, and
Mistral-style sliding windows on the layers the config marks. Left out: shared experts, router
biases, biases, LayerNorm and learned positions (the config is refused with a ValueError). The
cache is not a ring buffer: a window layer keeps every key and reads its last W. Q, K, V and
gate/up are fused into one matmul each, as serving engines run them, so a decode step at batch 1
is a handful of weight-streaming GEMVs per layer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from roofline import ModelConfig
from roofline.models.config import WINDOW

from . import fused_step, native_attention
from .functional import prefill_attention, rms_norm, rotate
from .linear import Linear
from .mla import LatentAttention
from .mlp import mlp_of

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
KV_DTYPES = {**DTYPES, "fp8": torch.float8_e4m3fn, "int8": torch.int8}  # the last two: quantized, a scale per position
KERNELS = ("torch", "triton")  # the eager decoder, or the fused step (validation/fused_step.py)


@dataclass(frozen=True)
class LayerCache:
    """One layer's view of the cache: (B, K, capacity, H) keys and values, and for a quantized cache
    the float32 scale of each (sequence, KV head, position), (B, K, capacity)."""
    keys: torch.Tensor
    values: torch.Tensor
    key_scale: torch.Tensor | None = None
    value_scale: torch.Tensor | None = None

    @property
    def quantized(self) -> bool:
        return self.key_scale is not None


def check_supported(config: ModelConfig) -> None:
    unsupported = {"shared experts": config.n_shared_experts, "router bias": config.router_bias,
                   "MLA with a sliding window": config.kv_lora_rank and config.window,
                   "LayerNorm": config.layer_norm, "plain (ungated) MLP": not config.gated_mlp,
                   "biases": config.qkv_bias or config.out_bias or config.mlp_bias,
                   "learned positions": config.learned_positions, "cross-layer KV": config.cla_factor > 1,
                   "4 norms per layer": config.norms_per_layer != 2}
    found = [name for name, present in unsupported.items() if present]
    if found:
        raise ValueError(f"model {config.name!r}: the validation decoder does not implement {', '.join(found)}")


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"dtype: {name!r} is not supported by the validation decoder; use one of {', '.join(DTYPES)}")
    return DTYPES[name]


def grouped_decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """q (B, K, G, H) against the cache (B, K, S, H): on GPU SDPA's flash kernel with the query laid out
    per query head and enable_gqa (as (B, K, G, H) its grid was B x K blocks, 8 on 132 SMs for GQA-8 at
    batch 1, reading a 32k cache at 0.33 TB/s against 2.4 TB/s this way); on CPU the native
    kernel (validation/native_attention.py, fp32 or bf16), else two batched matmuls, because the CPU flash
    kernel measured up to 10x slower at T = 1 (torch 2.13). Scores as (K_cache @ q^T)^T: the cache
    as the row-major left operand, ~25% faster at G = 4."""
    if q.is_cuda:  # one query per head, (B, N, 1, H): the flash kernel's grid covers B x N, not B x K
        B, K, G, H = q.shape
        out = F.scaled_dot_product_attention(q.reshape(B, K * G, 1, H), keys, values, enable_gqa=G > 1)
        return out.reshape(B, K, G, H)
    if native_attention.supports(q, keys):
        return native_attention.decode_attention(q, keys, values)
    scores = (keys @ q.transpose(-1, -2)).transpose(-1, -2).float() * q.shape[-1] ** -0.5  # (B, K, G, S)
    return torch.softmax(scores, dim=-1).to(q.dtype) @ values  # (B, K, G, H)


def attention_kernel(config: ModelConfig, device: str, phase: str, dtype: str) -> str:
    """How the decoder's attention runs, as roofline.Options names it (recorded with every measurement):
    decode materializes the scores with MLA (torch matmuls, absorbed) and on the CPU unless the
    native kernel runs; the rest is SDPA's flash."""
    if phase != "decode":
        return "flash"
    if config.kv_lora_rank:
        return "eager"
    native = torch_dtype(dtype) in native_attention.CACHE_DTYPES and native_attention.kernel() is not None
    return "eager" if device == "cpu" and not native else "flash"


class GroupedAttention(nn.Module):
    """MHA/GQA/MQA with rope (half-split), optionally a sliding window, over a (B, K, S, H) cache."""

    def __init__(self, config: ModelConfig, attention_kind: str):
        super().__init__()
        self.window = config.window if attention_kind == WINDOW else 0  # 0: every earlier key is visible
        D, N, K, H = config.d_model, config.n_heads, config.n_kv_heads, config.head_dim
        self.N, self.K, self.H = N, K, H
        self.qkv = Linear(D, (N + 2 * K) * H, bias=False)  # [Q|K|V] = X @ W_qkv
        self.o = Linear(N * H, D, bias=False)

    def forward(self, x, cos, sin, k_cache, v_cache, start: int):
        """x (B, T, D), normalized; the T new keys go to cache positions start .. start+T-1."""
        B, T, _ = x.shape
        N, K, H = self.N, self.K, self.H
        q, k, v = self.qkv(x).split((N * H, K * H, K * H), dim=-1)
        q = rotate(q.view(B, T, N, H).transpose(1, 2), cos, sin)
        k = rotate(k.view(B, T, K, H).transpose(1, 2), cos, sin)
        k_cache[:, :, start:start + T] = k
        v_cache[:, :, start:start + T] = v.view(B, T, K, H).transpose(1, 2)
        first = max(0, start + 1 - self.window) if self.window and T == 1 else 0  # decode: the last W keys
        keys, values = k_cache[:, :, first:start + T], v_cache[:, :, first:start + T]
        if T == 1:
            # Decode: the G = N/K query heads sharing a KV head become G queries of that head, so
            # the cache is read once, never repeated to N heads; a window layer reads its last W keys.
            out = grouped_decode_attention(q.reshape(B, K, N // K, H), keys, values)
        else:
            if x.is_cuda and K != N:  # expanded to N heads, so the flash kernel is eligible (32k prefill)
                keys, values = keys.repeat_interleave(N // K, dim=1), values.repeat_interleave(N // K, dim=1)
            out = prefill_attention(q, keys, values, start, self.window)
        return self.o(out.reshape(B, N, T, H).transpose(1, 2).reshape(B, T, N * H))


class Layer(nn.Module):
    def __init__(self, config: ModelConfig, attention_kind: str, mlp_kind: str):
        super().__init__()
        D = config.d_model
        self.attn_norm = nn.Parameter(torch.ones(D))
        self.attention = LatentAttention(config) if config.kv_lora_rank else GroupedAttention(config, attention_kind)
        self.mlp_norm = nn.Parameter(torch.ones(D))
        self.mlp = mlp_of(config, mlp_kind)

    def forward(self, x, cos, sin, k_cache, v_cache, start: int, eps: float):
        """x (B, T, D); the T new keys go to cache positions start .. start+T-1."""
        x = x + self.attention(rms_norm(x, self.attn_norm, eps), cos, sin, k_cache, v_cache, start)
        return x + self.mlp(rms_norm(x, self.mlp_norm, eps))


class Decoder(nn.Module):
    """Logits of the last token only (what a serving engine computes), KV cache owned by the model."""

    def __init__(self, config: ModelConfig, rope_theta: float = 10000.0, eps: float = 1e-5, kv_dtype: str | None = None,
                 kernels: str = "torch"):
        super().__init__()
        check_supported(config)
        self.config, self.rope_theta, self.eps = config, rope_theta, eps
        self.kv_dtype, self.kernels = kv_dtype, kernels  # kv_dtype None: the weights' dtype
        check_kernels(config, kv_dtype, kernels)
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.layers = nn.ModuleList(Layer(config, attention, mlp)
                                    for attention, mlp in zip(config.layer_attention, config.layer_mlp))
        self.final_norm = nn.Parameter(torch.ones(config.d_model))
        self.lm_head = Linear(config.d_model, config.vocab_size, bias=False)
        if config.tied_embeddings:
            self.lm_head.weight = self.embed.weight
        self.k_cache = self.v_cache = self.k_scale = self.v_scale = None

    def allocate_cache(self, batch: int, capacity: int) -> None:
        """A static cache, zero-filled so its pages are touched: (L, B, K, capacity, H) for K and for
        V; with MLA, (L, B, 1, capacity, C) for the normalized latent and (.., R) for the roped key."""
        c = self.config
        heads, key_width, value_width = (1, c.kv_lora_rank, c.qk_rope_dim) if c.kv_lora_rank else (
            c.n_kv_heads, c.head_dim, c.head_dim)
        weight = self.final_norm  # its dtype and device are the model's, whatever format the projections are in
        self.k_cache = self.v_cache = self.k_scale = self.v_scale = None  # free the old cache first
        cache_dtype = KV_DTYPES[self.kv_dtype] if self.kv_dtype else weight.dtype
        self.k_cache = torch.zeros((c.n_layers, batch, heads, capacity, key_width), dtype=cache_dtype,
                                   device=weight.device)
        self.v_cache = torch.zeros((c.n_layers, batch, heads, capacity, value_width), dtype=cache_dtype,
                                   device=weight.device)
        if self.quantized_cache:
            self.k_scale = torch.ones((c.n_layers, batch, heads, capacity), dtype=torch.float32, device=weight.device)
            self.v_scale = torch.ones_like(self.k_scale)
        rotary = c.qk_rope_dim or c.head_dim
        inv_freq = 1.0 / rope_theta_powers(self.rope_theta, rotary, weight.device)
        angles = torch.outer(torch.arange(capacity, device=weight.device, dtype=torch.float32), inv_freq)
        if not c.kv_lora_rank:  # half-split rope (Llama) repeats the angles; MLA's interleaved rope takes them once
            angles = torch.cat((angles, angles), dim=-1)
        self.cos, self.sin = angles.cos().to(weight.dtype), angles.sin().to(weight.dtype)

    @property
    def quantized_cache(self) -> bool:
        return self.kv_dtype in ("fp8", "int8")

    def cache_of(self, layer: int) -> LayerCache:
        if self.quantized_cache:
            return LayerCache(self.k_cache[layer], self.v_cache[layer], self.k_scale[layer], self.v_scale[layer])
        return LayerCache(self.k_cache[layer], self.v_cache[layer])

    def release_cache(self) -> None:
        self.k_cache = self.v_cache = self.k_scale = self.v_scale = None

    def forward(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """tokens (B, T) at positions start .. start+T-1 -> logits (B, V) of the last position."""
        if self.kernels == "triton":
            return fused_step.fused_forward(self, tokens, start)
        T = tokens.shape[1]
        cos, sin = self.cos[start:start + T], self.sin[start:start + T]
        x = self.embed(tokens)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, self.k_cache[i], self.v_cache[i], start, self.eps)
        return self.lm_head(rms_norm(x[:, -1], self.final_norm, self.eps))


def rope_theta_powers(theta: float, head_dim: int, device) -> torch.Tensor:
    return theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)


def check_kernels(config: ModelConfig, kv_dtype: str | None, kernels: str) -> None:
    if kernels not in KERNELS:
        raise ValueError(f"kernels: {kernels!r} is not one of {', '.join(KERNELS)}")
    if kv_dtype is not None and kv_dtype not in KV_DTYPES:
        raise ValueError(f"kv dtype: {kv_dtype!r} is not supported; use one of {', '.join(KV_DTYPES)}")
    if kernels == "triton" and not fused_step.supports(config):
        raise ValueError(f"model {config.name!r}: the fused Triton step covers dense grouped attention; "
                         "MLA and MoE run with kernels='torch'")
    if kv_dtype in ("fp8", "int8") and kernels != "triton":
        raise ValueError(f"kv dtype {kv_dtype}: a quantized cache is read by the split-KV Triton kernel; "
                         "use kernels='triton' (a GPU, or TRITON_INTERPRET=1)")


def default_kernels(config: ModelConfig, device: str) -> str:
    """The fused Triton step where it runs (CUDA with triton) and covers the model; else eager torch."""
    from .kernels import available
    return "triton" if device == "cuda" and available() and fused_step.supports(config) else "torch"


def build_decoder(config: ModelConfig, dtype: str = "fp32", device: str = "cpu", seed: int = 0,
                  kv_dtype: str | None = None, kernels: str = "torch") -> Decoder:
    """Random weights, scaled so activations stay O(1) through every layer (no hub downloads). They are
    drawn on the CPU in float32 and then moved, so a seed gives the same model on every device."""
    torch.manual_seed(seed)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype(dtype))  # built in its dtype: a 7B model never exists in fp32
    try:
        with torch.device(device):
            model = Decoder(config, kv_dtype=kv_dtype, kernels=kernels)
    finally:
        torch.set_default_dtype(default)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:  # row by row: a 7B model's largest matrix would be 2 GB in float32 at once
                std = p.shape[-1] ** -0.5 if "embed" not in name else 1.0
                for rows in torch.arange(p.shape[0]).split(4096):
                    p[rows[0]:rows[-1] + 1] = torch.randn((len(rows), p.shape[1]), generator=generator).mul_(std).to(p)
    return model.eval().requires_grad_(False)
