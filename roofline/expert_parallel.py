"""Expert parallelism: a MoE model's routed experts split across e GPUs, with two all-to-alls per MoE layer.

Each of the e GPUs holds E/e routed experts and a full copy of everything else (attention, dense
MLPs, shared experts, router, embedding, head), and runs attention for its own B/e of the batch's
sequences (data-parallel attention, as DeepSeek-V3's decode deployment does). Under uniform top-k
routing of the batch's B·T tokens, a GPU's expert work is 1/e of the whole batch's: B·T·k/e token
rows, and (E/e)·(1 − (1 − k/E)^(B·T)) distinct experts read, never all E/e at batch 1. Around each
MoE layer a dispatch and a combine all-to-all move the rows whose expert lives on another GPU:
(B·T/e)·k·D·b_a·(e−1)/e bytes sent per GPU each, priced latency + bytes / link bandwidth (every GPU
sends at once on a switched fabric). Left out: combining EP with TP, de-duplicating a token sent to
two experts on one GPU, routing imbalance and capacity factors, overlap of communication with compute.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp

from .bounds import Roofs, step_times
from .config import MOE, ModelConfig, load_model
from .evaluate import compile_model
from .hardware import Hardware, load_hardware
from .model import DECODE, Options, phase_ops
from .ops import expected_experts_touched
from .parallel import link
from .precision import Precision
from .symbols import B, D, E, T, b_a, k

ep_sym = sp.Symbol("e_p", positive=True)  # expert-parallel GPUs
ROUTED_OPS = ("experts.gate_up", "experts.act", "experts.down")  # ops.moe_block's routed experts
ALLTOALLS_PER_MOE_LAYER = 2  # dispatch tokens to their experts, combine the outputs back


def experts_touched_per_gpu() -> sp.Expr:
    """Expected distinct experts one GPU reads when B·T tokens each choose k of E: (E/e)(1 − (1 − k/E)^(B·T))."""
    return expected_experts_touched() / ep_sym


def alltoall_bytes() -> sp.Expr:
    """Bytes one GPU sends in one all-to-all: its B·T tokens' k rows, less those staying on it."""
    return B * T * k * D * b_a * (ep_sym - 1) / ep_sym


def _routed(name: str) -> bool:
    return name.split(".", 1)[1] in ROUTED_OPS


def _expert_params(config: ModelConfig, options: Options) -> int:
    return int(sum(p.op.params * p.count for p in phase_ops(config, options, DECODE) if _routed(p.name)))


@dataclass(frozen=True)
class ExpertParallelResult:
    ep: int
    batch: int  # sequences across the e GPUs
    per_gpu_batch: int
    experts_per_gpu: int
    experts_touched_per_gpu: float  # expected, per MoE layer per decode step
    expert_weight_bytes_per_gpu: float  # routed-expert weights one GPU reads in a decode step
    alltoall_bytes: float  # one GPU's send in one all-to-all
    comm_s: float  # all-to-alls of one decode step
    tpot_s: float
    tokens_per_s: float
    per_gpu_memory_bytes: float  # weights + KV cache at prompt + gen
    fits: bool
    link_latency_assumed: bool


def analyze_expert_parallel(model: str | ModelConfig, hardware: str | Hardware, ep: int = 1, batch: int = 1,
                            prompt: int = 1024, gen: int = 128, precision: Precision = Precision(),
                            options: Options = Options()) -> ExpertParallelResult:
    """Decode of `batch` sequences with `prompt` tokens cached, experts spread over `ep` GPUs."""
    config, hw = load_model(model), load_hardware(hardware)
    for name, value in (("ep", ep), ("batch", batch), ("prompt", prompt), ("gen", gen)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: must be a whole number >= 1, got {value!r}")
    moe_layers = config.layer_mlp.count(MOE)
    if not moe_layers:
        raise ValueError(f"ep: model {config.name!r} has no MoE layers to spread")
    if config.n_experts % ep or batch % ep:
        raise ValueError(f"ep: {ep} must divide the {config.n_experts} experts and the batch of {batch}")
    cm = compile_model(config, options)
    widths = (precision.weight_bytes, precision.activation_bytes, precision.kv_bytes)
    own = cm.decode.parts(float(batch // ep), float(prompt + 1), widths)  # this GPU's sequences
    whole = cm.decode.parts(float(batch), float(prompt + 1), widths)  # the batch, for the routed experts
    parts = [tuple(v / ep for v in w) if _routed(name) else o for name, o, w in zip(cm.decode.names, own, whole)]
    compute_s = float(step_times(parts, cm.decode, Roofs.of(hw, precision)).roofline_s)

    values = {B: batch // ep, T: 1, k: config.top_k, E: config.n_experts, D: config.d_model,
              b_a: precision.activation_bytes, ep_sym: ep}
    sent = float(alltoall_bytes().xreplace(values))
    comm, assumed = 0.0, False
    if ep > 1:
        bandwidth, latency, assumed = link(hw)
        comm = ALLTOALLS_PER_MOE_LAYER * moe_layers * (latency + sent / bandwidth)
    touched = float(experts_touched_per_gpu().xreplace({**values, B: batch}))
    expert_params = _expert_params(config, options)
    weights = (cm.params - expert_params + expert_params / ep) * precision.weight_bytes
    memory = weights + float(cm.kv_cache(batch // ep, prompt + gen, precision.kv_bytes))
    tpot = compute_s + comm
    return ExpertParallelResult(
        ep=ep, batch=batch, per_gpu_batch=batch // ep, experts_per_gpu=config.n_experts // ep,
        experts_touched_per_gpu=touched,
        expert_weight_bytes_per_gpu=float(sum(np.sum(p[1]) for name, p in zip(cm.decode.names, parts) if _routed(name))),
        alltoall_bytes=sent, comm_s=comm, tpot_s=tpot, tokens_per_s=batch / tpot, per_gpu_memory_bytes=memory,
        fits=memory <= hw.memory_bytes, link_latency_assumed=assumed)
