"""Replicas and tensor parallelism: per-GPU shards, all-reduce time, and the TP degree where it stops paying.

Tensor parallelism of degree t (Megatron-LM, Shoeybi et al. 2019) gives each GPU N/t query heads,
max(K/t, 1) KV heads (a KV head is replicated when t > K), F/t of every MLP (and of every expert),
and V/t vocabulary rows; norms, the residual stream and an MLA latent cache are replicated. The
per-GPU work is then exactly the model with those dimensions, so the library's own evaluation
prices it. Each layer adds two all-reduces of the B·T·D activations, priced as a ring:
2(t−1)/t · bytes / link bandwidth + 2(t−1) · latency, on the critical path (not overlapped).
Replicas M multiply throughput and leave latency as it is. Pipeline and expert parallelism live in
`pipeline` and `expert_parallel`. Left out: sequence parallelism, uneven padding of F and V beyond
ceil division.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import sympy as sp

from .bounds import COMMUNICATION, IDEAL, Calibration, to_shape
from .config import ModelConfig, load_model
from .crossovers import Crossover
from .evaluate import compile_model
from .hardware import Hardware, load_hardware
from .inference import evaluate
from .model import Options
from .precision import Precision

# One small all-reduce inside an NVLink node takes ~6-10 us whatever the GPU count (NCCL's tree/NVLS
# protocols): ~6 us on 2 H100s with NVLS and CUDA graphs (NVIDIA/nccl#1259), 10.14 us on 2 A100s
# (NVIDIA/nccl#583, the a100-40gb entry). An assumption where a hardware file gives none.
DEFAULT_LINK_LATENCY_S = 10e-6
ALLREDUCES_PER_LAYER = 2  # after attention's output projection and after the MLP's down projection


def shard(config: ModelConfig, tp: int) -> ModelConfig:
    """The part of the model one GPU holds and runs under tensor parallelism of degree tp."""
    if not isinstance(tp, (int, np.integer)) or tp < 1:
        raise ValueError(f"tp: must be a whole number >= 1, got {tp!r}")
    n, k = config.n_heads, config.n_kv_heads
    if n % tp:
        raise ValueError(f"tp: {tp} does not divide the {n} query heads of {config.name!r}")
    if not config.is_mla and (k % tp if tp <= k else tp % k):
        raise ValueError(f"tp: {tp} and the {k} KV heads of {config.name!r} must divide one another "
                         "(KV heads are split when tp <= K and replicated evenly when tp > K)")
    if tp == 1:
        return config
    heads = n // tp
    kv_heads = heads if config.is_mla else max(k // tp, 1)
    return replace(config, name=f"{config.name}/tp{tp}", n_heads=heads, n_kv_heads=kv_heads,
                   d_ff=math.ceil(config.d_ff / tp), vocab_size=math.ceil(config.vocab_size / tp),
                   d_expert=math.ceil(config.d_expert / tp) if config.d_expert else 0)


def allreduce_time(message, gpus, link_bandwidth, latency):
    """Latency + size / bandwidth: one small all-reduce's latency, plus the ring's traffic of
    reduce-scatter then all-gather, 2(t−1) steps each moving message/t bytes per GPU.
    Works on numbers, arrays and sympy symbols alike."""
    return latency + 2 * (gpus - 1) / gpus * message / link_bandwidth


def allreduce_seconds(message_bytes, gpus: int, link_bandwidth: float, latency: float):
    """allreduce_time in seconds; a single GPU reduces nothing."""
    message = np.asarray(message_bytes, dtype=float)
    return np.zeros_like(message) if gpus == 1 else allreduce_time(message, gpus, link_bandwidth, latency)


def link(hw: Hardware) -> tuple[float, float, bool]:
    """(bandwidth, latency, latency_assumed) of the GPU-to-GPU interconnect."""
    if not hw.interconnect_bandwidth:
        raise ValueError(f"hardware {hw.id!r}: no interconnect bandwidth in its file; tensor parallelism needs one")
    if hw.interconnect_latency is None:
        return hw.interconnect_bandwidth, DEFAULT_LINK_LATENCY_S, True
    return hw.interconnect_bandwidth, hw.interconnect_latency, False


def communication_seconds(config: ModelConfig, hw: Hardware, tp: int, tokens, activation_bytes: float):
    """All-reduce time of one step over `tokens` = B·T activation rows."""
    if tp == 1:
        return np.zeros_like(np.asarray(tokens, dtype=float))
    bandwidth, latency, _ = link(hw)
    message = np.asarray(tokens, dtype=float) * config.d_model * activation_bytes
    return ALLREDUCES_PER_LAYER * config.n_layers * allreduce_seconds(message, tp, bandwidth, latency)


def with_communication(values: dict, config: ModelConfig, hw: Hardware, tp: int, replicas: int, prompt, gen,
                       activation_bytes: float) -> dict:
    """`inference.evaluate` output for one shard, turned into the metrics of `replicas` tp-way groups.

    Adds tp, replicas, gpus, per_gpu_memory_bytes, comm_s (all-reduce time within one decode step),
    prefill_comm_s and link_latency_assumed; tpot_s, ttft_s and e2e_s include communication;
    tokens_per_s counts every replica; max_batch stays per replica.
    """
    if not isinstance(replicas, (int, np.integer)) or replicas < 1:
        raise ValueError(f"replicas: must be a whole number >= 1, got {replicas!r}")
    out = dict(values)
    batch = np.asarray(out["batch"], dtype=float)
    comm = communication_seconds(config, hw, tp, batch, activation_bytes)
    prefill_comm = communication_seconds(config, hw, tp, batch * np.asarray(prompt, dtype=float), activation_bytes)
    out.update(tp=tp, replicas=replicas, gpus=tp * replicas, per_gpu_memory_bytes=out["memory_bytes"],
               comm_s=comm, link_latency_assumed=tp > 1 and hw.interconnect_latency is None)
    out["tpot_s"] = out["tpot_s"] + comm
    # All-reduces are their own resource: they bind when they take longer than any other one waits.
    out["decode_bound"] = np.where(comm > out["decode_bound_s"], COMMUNICATION, out["decode_bound"])
    out["tokens_per_s"] = replicas * batch / out["tpot_s"]
    if "ttft_s" in out:
        out["prefill_comm_s"] = prefill_comm
        out["ttft_s"] = out["ttft_s"] + prefill_comm
    if "e2e_s" in out:  # a decode step's all-reduces do not depend on the context
        out["e2e_s"] = out["e2e_s"] + prefill_comm + np.maximum(np.asarray(gen, dtype=float) - 1, 0) * comm
    shape = np.shape(out["tpot_s"])
    return {name: to_shape(value, shape) for name, value in out.items()}


def analyze_parallel(model: str | ModelConfig, hardware: str | Hardware, tp: int = 1, replicas: int = 1, batch=(1,),
                     prompt: int = 1024, gen: int = 128, precision: Precision = Precision(),
                     options: Options = Options(), calibration: Calibration = IDEAL) -> dict[str, np.ndarray]:
    """Metrics of `replicas` copies of a tp-way sharded model as arrays; batch is per replica."""
    from .api import analyze
    frame = analyze(model, hardware, batch=batch, prompt=prompt, gen=gen, precision=precision, options=options,
                    calibration=calibration, tp=tp, replicas=replicas).metrics
    return {name: column.to_numpy() for name, column in frame.items()}


t_sym = sp.Symbol("t", positive=True)


def tp_crossovers(model: str | ModelConfig, hardware: str | Hardware, batch: int = 1, prompt: int = 1024,
                  precision: Precision = Precision()) -> dict[str, Crossover]:
    """TP degrees where all-reduces cancel the memory time saved, and where decode is fastest.

    With m one GPU's decode memory time and comm(t) = 2L[λ + 2(t−1)/t · X/β], X = B·D·b_a:
    breakeven m(1 − 1/t) = comm(t) (TPOT back at its t = 1 value); fastest d/dt [m/t + comm(t)] = 0,
    which has no root: the ring traffic is bounded and the latency constant, so TPOT keeps falling
    with t while m > 4LX/β (fastest = oo: as much TP as the heads allow), else t = 1 is fastest.
    Both take every byte as divided by t (KV replication and norms ignored): an upper estimate.
    """
    config, hw = load_model(model), load_hardware(hardware)
    m, L_, X, beta, lam = sp.symbols("m L X beta lambda", positive=True)
    comm = ALLREDUCES_PER_LAYER * L_ * allreduce_time(X, t_sym, beta, lam)
    roots = [r for r in sp.solve(sp.Eq(m * (1 - 1 / t_sym), comm), t_sym) if r != 1]
    breakeven = roots[0] if roots else sp.oo
    slope = sp.factor(sp.diff(m / t_sym + comm, t_sym) * t_sym ** 2)  # sign of d TPOT / dt
    fastest = sp.Piecewise((sp.oo, slope < 0), (1, True))
    bandwidth, latency, assumed = link(hw)
    single = evaluate(compile_model(config), hw, precision, float(batch), float(prompt), 1.0, prefill=False)
    given = {m: float(single["decode_bytes"]) / hw.memory_bandwidth, L_: config.n_layers,
             X: batch * config.d_model * precision.activation_bytes, beta: bandwidth, lam: latency}
    note = f"link latency {latency:g} s {'assumed' if assumed else 'from the hardware file'}"
    named = {str(k): v for k, v in given.items()}
    return {name: Crossover(name, sp.Eq(t_sym, expr), float(expr.xreplace(given)), named, note)
            for name, expr in (("tp_breakeven", breakeven), ("tp_fastest", fastest))}
