"""Expert parallelism: a MoE model's routed experts split across e GPUs, with two all-to-alls per MoE layer.

Each of the e GPUs holds E/e routed experts and a full copy of everything else (attention, dense
MLPs, shared experts, router, embedding, head), and runs attention for its own B/e of the batch's
sequences (data-parallel attention, as DeepSeek-V3's decode deployment does; a prefill's prompts are whole on
their ranks, the busiest one setting the step: Deployment.busiest_rank_sequences). Under uniform top-k
routing of the batch's B·T tokens, a GPU's expert work is 1/e of the whole batch's: B·T·k/e token
rows, and (E/e)·(1 − (1 − k/E)^(B·T)) distinct experts read, never all E/e at batch 1. Around each
MoE layer a dispatch and a combine all-to-all move the rows whose expert lives on another GPU:
(B·T/e)·k·D·b_a·(e−1)/e bytes sent per GPU each, priced latency + bytes / link bandwidth (every GPU
sends at once on a switched fabric). The Deployment prices it all (ep=e), the engine included.
Left out: combining EP with TP or PP, de-duplicating a token sent to two experts on one GPU, routing
imbalance and capacity factors, overlap of communication with compute.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sympy as sp

from ..models.config import MOE
from ..deployment import Deployment
from ..memory import DEFAULT_PREFILL_CHUNK, memory
from ..model import DECODE, decode_context
from ..ops import expected_experts_touched
from ..sharding import alltoall_send_bytes, is_routed, whole
from ..symbols import B, D, E, T, b_a, k

ep_sym = sp.Symbol("e_p", positive=True)  # expert-parallel GPUs


def experts_touched_per_gpu() -> sp.Expr:
    """Expected distinct experts one GPU reads when B·T tokens each choose k of E: (E/e)(1 − (1 − k/E)^(B·T))."""
    return expected_experts_touched() / ep_sym


def alltoall_bytes() -> sp.Expr:
    """Bytes one GPU sends in one all-to-all: its B·T tokens' k rows, less those staying on it."""
    return alltoall_send_bytes(B * T, k, D * b_a, ep_sym)


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
    per_gpu_memory_bytes: float  # weights + KV cache at prompt + gen + one prefill chunk's workspace (roofline.memory)
    fits: bool
    link_latency_assumed: bool
    workspace_bytes: float = 0.0  # one prefill chunk's activations, in per_gpu_memory_bytes


def analyze_expert_parallel(d: Deployment, batch: int = 1, prompt: int = 1024, gen: int = 128,
                            prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK) -> ExpertParallelResult:
    """Decode of `batch` sequences with `prompt` tokens cached, experts spread over the Deployment's `ep` GPUs."""
    config, ep, precision = d.config, d.ep, d.precision
    for name, value in (("batch", batch), ("prompt", prompt), ("gen", gen)):
        whole(name, value)
    moe_layers = config.layer_mlp.count(MOE)
    if not moe_layers:
        raise ValueError(f"ep: model {config.name!r} has no MoE layers to spread")
    if config.n_experts % ep or batch % ep:
        raise ValueError(f"ep: {ep} must divide the {config.n_experts} experts and the batch of {batch}")
    step = d.step(DECODE, float(batch), float(decode_context(prompt)))
    values = {B: batch // ep, T: 1, k: config.top_k, E: config.n_experts, D: config.d_model,
              b_a: precision.activation_bytes, ep_sym: ep}
    touched = float(experts_touched_per_gpu().xreplace({**values, B: batch}))
    held = memory(d, float(batch), float(prompt), float(gen), prefill_chunk)
    per_gpu = float(held["memory_bytes"])
    tpot = float(step.total_s)
    routed = [c for name, c in zip(step.ops, step.components) if is_routed(name)]
    return ExpertParallelResult(
        ep=ep, batch=batch, per_gpu_batch=batch // ep, experts_per_gpu=config.n_experts // ep,
        experts_touched_per_gpu=touched, expert_weight_bytes_per_gpu=float(sum(np.sum(c[1]) for c in routed)),
        alltoall_bytes=float(alltoall_bytes().xreplace(values)), comm_s=float(step.communication_s), tpot_s=tpot,
        tokens_per_s=batch / tpot, per_gpu_memory_bytes=per_gpu, fits=bool(held["fits"]),
        workspace_bytes=float(held["workspace_bytes"]),
        link_latency_assumed=d.link_latency_assumed)
