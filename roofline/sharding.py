"""How a model is split over GPUs, and what moving activations between them costs.

Tensor parallelism of degree t (Megatron-LM, Shoeybi et al. 2019) gives each GPU N/t query heads,
max(K/t, 1) KV heads (a KV head is replicated when t > K), F/t of every MLP (and of every expert),
and V/t vocabulary rows; norms, the residual stream and an MLA latent cache are replicated. Each
layer adds two all-reduces of the B·T·D activations, priced as a ring: 2(t−1)/t · bytes / link
bandwidth + latency, on the critical path. Pipeline stages take contiguous runs of layers; expert
parallelism spreads routed experts (roofline.deployment prices both). Left out: sequence
parallelism, uneven padding of F and V beyond ceil division. The bytes each GPU holds follow the
same split (stage_memory_bytes, routed_params).
"""
from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

import numpy as np
import sympy as sp

from .models.config import CHUNKED, WINDOW, ModelConfig
from .hardware import Hardware
from .model import DECODE, Options, layer_group, phase_ops, routed_parameter_count
from .ops import EXPERT_MATMUL
from .precision import Precision
from .symbols import B, b_kv

# One small all-reduce inside an NVLink node takes ~6-10 us whatever the GPU count (NCCL's tree/NVLS
# protocols): ~6 us on 2 H100s with NVLS and CUDA graphs (NVIDIA/nccl#1259), 10.14 us on 2 A100s
# (NVIDIA/nccl#583, the a100-40gb entry). An assumption where a hardware file gives none.
DEFAULT_LINK_LATENCY_S = 10e-6
ALLREDUCES_PER_LAYER = 2  # after attention's output projection and after the MLP's down projection
ALLTOALLS_PER_MOE_LAYER = 2  # dispatch tokens to their experts, combine the outputs back
ROUTED_OPS = ("experts.gate_up", "experts.up", "experts.act", "experts.down")  # ops.moe_block's routed experts


def whole(name: str, value, low: int = 1, note: str = "", fix: str = "") -> int:
    """The one check of a count (a degree, a batch, tokens): a whole number >= low, no bool, no float."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name}: must be a whole number >= {low}{note}, got {value!r}" + (f"; fix: {fix}" if fix else ""))
    return int(value)


@lru_cache(maxsize=128)  # a new ModelConfig validates itself (~0.2 ms): an analysis at tp > 1 paid it per call
def shard(config: ModelConfig, tp: int) -> ModelConfig:
    """The part of the model one GPU holds and runs under tensor parallelism of degree tp."""
    whole("tp", tp)
    n, k = config.n_heads, config.n_kv_heads
    if n % tp:
        raise ValueError(f"tp: {tp} does not divide the {n} query heads of {config.name!r}")
    if config.has_kv_heads and (k % tp if tp <= k else tp % k):
        raise ValueError(f"tp: {tp} and the {k} KV heads of {config.name!r} must divide one another "
                         "(KV heads are split when tp <= K and replicated evenly when tp > K)")
    if config.o_groups and config.o_groups % tp:
        raise ValueError(f"tp: {tp} does not divide the {config.o_groups} output-projection groups of {config.name!r} "
                         "(each GPU keeps whole groups of heads)")
    if tp == 1:
        return config
    heads = n // tp
    kv_heads = max(k // tp, 1) if config.has_kv_heads else heads
    return replace(config, name=f"{config.name}/tp{tp}", n_heads=heads, n_kv_heads=kv_heads,
                   d_ff=math.ceil(config.d_ff / tp), vocab_size=math.ceil(config.vocab_size / tp),
                   d_expert=math.ceil(config.d_expert / tp) if config.d_expert else 0,
                   o_groups=config.o_groups // tp,
                   shared_expert_width=math.ceil(config.shared_expert_width / tp),  # Fs: split as d_ff is
                   **_state_shard(config, tp))


def _state_shard(config: ModelConfig, tp: int) -> dict:
    """Constant-state mixers split by their heads (vLLM's MambaMixer2, GatedDeltaNet): Di and Nh by tp, the
    B/C groups (DeltaNet key heads) by tp or replicated when tp > G; the conv and state follow."""
    if not config.ssm_heads:  # Mamba-1 (Jamba): the Di channels split evenly; lightning attention follows N
        if config.ssm_inner and config.ssm_inner % tp:
            raise ValueError(f"tp: {tp} must divide the {config.ssm_inner} Mamba channels of {config.name!r}")
        return dict(ssm_inner=config.ssm_inner // tp) if config.ssm_inner else {}
    heads, groups = config.ssm_heads, config.ssm_groups
    if heads % tp or (groups % tp if tp <= groups else tp % groups):
        raise ValueError(f"tp: {tp} must divide the {heads} state heads of {config.name!r} and divide (or be a "
                         f"multiple of) its {groups} groups")
    return dict(ssm_inner=config.ssm_inner // tp, ssm_heads=heads // tp, ssm_groups=max(groups // tp, 1))


def stage_layers(n_layers: int, pp: int) -> list[range]:
    """Contiguous layer indices of each pipeline stage; the first n_layers mod pp stages take one more."""
    pp = whole("pp", pp)
    if pp > n_layers:
        raise ValueError(f"pp: {pp} stages for {n_layers} layers leaves a stage with none; use pp <= {n_layers}")
    sizes = [n_layers // pp + (i < n_layers % pp) for i in range(pp)]
    starts = np.cumsum([0] + sizes)
    return [range(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]


def is_routed(op_name) -> bool:
    return op_name.op in ROUTED_OPS


def alltoall_send_bytes(tokens, top_k, row_bytes, gpus):
    """Bytes one GPU sends in one all-to-all: its `tokens` rows each routed to `top_k` experts, less the share
    staying on it under uniform routing, (e − 1)/e. Works on numbers, arrays and sympy symbols alike."""
    return tokens * top_k * row_bytes * (gpus - 1) / gpus


def link(hw: Hardware) -> tuple[float, float, bool]:
    """(bandwidth, latency, latency_assumed) of the GPU-to-GPU interconnect."""
    if not hw.interconnect_bandwidth:
        raise ValueError(f"hardware {hw.id!r}: no interconnect bandwidth in its file; splitting a model over "
                         "GPUs (tp, pp, ep > 1) needs one")
    if hw.interconnect_latency is None:
        return hw.interconnect_bandwidth, DEFAULT_LINK_LATENCY_S, True
    return hw.interconnect_bandwidth, hw.interconnect_latency, False


def routed_params(config: ModelConfig, options: Options) -> int:
    """Weight elements of the routed experts, the part expert parallelism splits (and Precision.experts prices)."""
    return routed_parameter_count(config, options)


@lru_cache(maxsize=32)
def _layer_storage(config: ModelConfig, options: Options, kv_bytes: float = 1.0) -> tuple[dict, dict, dict, dict, dict]:
    """Per layer group: weight elements, KV elements per token, constant-state bytes per sequence (SSM and
    linear-attention layers, at `kv_bytes` where the state follows the KV's width); embed/head weight elements;
    per layer group, the routed experts' weight elements (b_e wide) among its weight elements."""
    params, kv, ends, state, routed = {}, {}, {}, {}, {}
    for p in phase_ops(config, options, DECODE):
        if p.op_name.in_layers:
            params[p.group] = params.get(p.group, 0) + int(p.op.params)
            if p.op.matmul == EXPERT_MATMUL:
                routed[p.group] = routed.get(p.group, 0) + int(p.op.params)
            if p.op.state != 0:  # read and written whole every step: held once per sequence, not per token
                state[p.group] = state.get(p.group, 0.0) + float(sp.sympify(p.op.state).xreplace({b_kv: kv_bytes}))
                continue
            # A decode step writes each new token's K/V once per layer: kv_write at B = 1, b_kv = 1.
            kv_one = sp.sympify(p.op.cost.kv_write).xreplace({B: 1, b_kv: 1})
            kv[p.group] = kv.get(p.group, 0) + float(kv_one)
        else:
            ends[p.group] = ends.get(p.group, 0) + int(p.op.params)
    return params, kv, ends, state, routed


def stage_memory_bytes(local: ModelConfig, config: ModelConfig, pp: int, batch, tokens, precision: Precision,
                       options: Options) -> list[float]:
    """Weights and KV cache (batch sequences of `tokens` tokens) each stage's GPU holds; `local` is one
    tensor-parallel shard of `config`."""
    params, kv, ends, state, routed = _layer_storage(local, options, precision.kv_bytes)
    out = []
    for layers in stage_layers(config.n_layers, pp):
        groups = [layer_group(config.layer_attention[j], config.layer_mlp[j]) for j in layers]
        weights = sum(params[g] for g in groups)
        experts = sum(routed.get(g, 0) for g in groups)
        stored = sum(kv[g] * (min(tokens, config.window) if config.layer_attention[j] == WINDOW
                              else min(tokens, config.chunk) if config.layer_attention[j] == CHUNKED else tokens)
                     for j, g in zip(layers, groups))
        held = sum(state.get(g, 0.0) for g in groups)  # a constant state per sequence, flat in the tokens
        out.append(precision.held_weight_bytes(weights, experts) + batch * (stored * precision.kv_bytes + held))
    out[0] += ends["embed"] * precision.weight_bytes
    out[-1] += ends["head"] * precision.weight_bytes
    if local.tied_embeddings and pp > 1:  # the last stage keeps its own copy of the shared table
        out[-1] += local.vocab_size * local.d_model * precision.weight_bytes
    return out
