"""Pipeline parallelism: layers split into p stages, decode latency, throughput and bubbles.

Stage i holds a contiguous run of layers (the first L mod p stages one more), the embedding on the
first stage and the head on the last (a tied embedding is held by both). A micro-batch's decode
step runs the stages in turn, handing its B·D activations to the next stage over the interconnect
(latency + bytes / link bandwidth, not overlapped with that micro-batch's work). Stage times are the
library's per-op roofline times, op by op, for the layers the stage holds. With the batch split into
m micro-batches:
  one pass (prefill, or a decode step flushed before the next): the flow-shop makespan
      Σ t_i + (p−1)·x + (m−1)·max t_i, whose idle share is (p−1)/(m+p−1) for equal stages (GPipe);
  steady decode (each micro-batch's next token waits only on its own last one): a round every
      max(Σ t_i + (p−1)·x, m·max t_i): the chain of one micro-batch, or the busiest stage.
So at m = 1 the pipeline adds (p−1) hand-offs to TPOT and only relieves memory; micro-batches fill
the stages, but in weight-bound decode each micro-batch re-reads the stage's weights, so the gain
comes from the larger batch the freed memory admits. Left out: the sampled token's trip back to the
first stage, activation workspace in memory, interleaved (virtual) stages, calibration overheads.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import sympy as sp

from .bounds import Roofs, step_times
from .config import WINDOW, ModelConfig, load_model
from .evaluate import compile_model
from .hardware import Hardware, load_hardware
from .model import DECODE, Options, phase_ops
from .parallel import communication_seconds, link, shard
from .precision import Precision
from .symbols import B, b_kv


def _whole(name: str, value, low: int = 1) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name}: must be a whole number >= {low}, got {value!r}")
    return int(value)


def stage_layers(n_layers: int, pp: int) -> list[range]:
    """Contiguous layer indices of each stage; the first n_layers mod pp stages take one more."""
    pp = _whole("pp", pp)
    if pp > n_layers:
        raise ValueError(f"pp: {pp} stages for {n_layers} layers leaves a stage with none")
    sizes = [n_layers // pp + (i < n_layers % pp) for i in range(pp)]
    starts = np.cumsum([0] + sizes)
    return [range(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]


def pass_seconds(stage_s, transfer_s: float, microbatches: int) -> float:
    """Makespan of m identical micro-batches through the stages in order (a flushed pass)."""
    stage_s = np.asarray(stage_s, dtype=float)
    return float(stage_s.sum() + (len(stage_s) - 1) * transfer_s + (microbatches - 1) * stage_s.max())


def steady_round_seconds(stage_s, transfer_s: float, microbatches: int) -> float:
    """Time for every micro-batch to advance one decode step, once the pipeline runs steadily."""
    stage_s = np.asarray(stage_s, dtype=float)
    return float(max(stage_s.sum() + (len(stage_s) - 1) * transfer_s, microbatches * stage_s.max()))


def idle_fraction(stage_s, microbatches: int, elapsed: float) -> float:
    """Share of the p GPUs' time not spent on stage work while m micro-batches take `elapsed`."""
    stage_s = np.asarray(stage_s, dtype=float)
    return float(1 - microbatches * stage_s.sum() / (len(stage_s) * elapsed))


def _layer_key(config: ModelConfig, index: int) -> str:
    return f"layers[{config.layer_attention[index]},{config.layer_mlp[index]}]"  # model.symbolic_ops' group


def _per_op_seconds(config, hw, precision, options, batch, context) -> dict[str, float]:
    """Roofline seconds of each decode op group: per layer for layer groups, whole for embed and head."""
    cm = compile_model(config, options)
    widths = (precision.weight_bytes, precision.activation_bytes, precision.kv_bytes)
    times = step_times(cm.decode.parts(float(batch), float(context), widths), cm.decode, Roofs.of(hw, precision))
    out: dict[str, float] = {}
    for name, count, c, m in zip(cm.decode.names, cm.decode.counts, times.compute_s, times.memory_s):
        group = name.split(".", 1)[0]
        per = count if group.startswith("layers[") else 1
        out[group] = out.get(group, 0.0) + float(np.max(np.maximum(c, m))) / per
    return out


def stage_seconds(config: ModelConfig, hw: Hardware, pp: int, batch: float, context: float,
                  precision: Precision = Precision(), options: Options = Options(), tp: int = 1) -> list[float]:
    """Decode-step seconds of each stage for `batch` sequences at `context` keys, TP all-reduces included."""
    local = shard(config, tp)
    seconds = _per_op_seconds(local, hw, precision, options, batch, context)
    allreduces = communication_seconds(config, hw, tp, batch, precision.activation_bytes) / config.n_layers
    stages = stage_layers(config.n_layers, pp)
    out = [sum(seconds[_layer_key(config, j)] for j in layers) + len(layers) * float(allreduces) for layers in stages]
    out[0] += seconds["embed"]
    out[-1] += seconds["head"]
    return out


@lru_cache(maxsize=32)
def _layer_storage(config: ModelConfig, options: Options) -> tuple[dict, dict, dict]:
    """Per layer group: weight elements and KV elements per token; embed/head weight elements."""
    params, kv, ends = {}, {}, {}
    for p in phase_ops(config, options, DECODE):
        if p.group.startswith("layers["):
            params[p.group] = params.get(p.group, 0) + int(p.op.params)
            # A decode step writes each new token's K/V once per layer: kv_write at B = 1, b_kv = 1.
            kv_one = sp.sympify(p.op.cost.kv_write).xreplace({B: 1, b_kv: 1})
            kv[p.group] = kv.get(p.group, 0) + float(kv_one)
        else:
            ends[p.group] = ends.get(p.group, 0) + int(p.op.params)
    return params, kv, ends


def stage_memory_bytes(config: ModelConfig, pp: int, batch: float, tokens: float, precision: Precision = Precision(),
                       options: Options = Options(), tp: int = 1) -> list[float]:
    """Weights and KV cache (batch sequences of `tokens` tokens) each stage's GPU holds."""
    local = shard(config, tp)
    params, kv, ends = _layer_storage(local, options)
    out = []
    for layers in stage_layers(config.n_layers, pp):
        weights = sum(params[_layer_key(config, j)] for j in layers)
        stored = sum(kv[_layer_key(config, j)] * (min(tokens, config.window)
                                                 if config.layer_attention[j] == WINDOW else tokens) for j in layers)
        out.append(weights * precision.weight_bytes + batch * stored * precision.kv_bytes)
    out[0] += ends["embed"] * precision.weight_bytes
    out[-1] += ends["head"] * precision.weight_bytes
    if local.tied_embeddings and pp > 1:  # the last stage keeps its own copy of the shared table
        out[-1] += local.vocab_size * local.d_model * precision.weight_bytes
    return out


@dataclass(frozen=True)
class PipelineResult:
    tp: int
    pp: int
    microbatches: int
    gpus: int
    batch: int
    stage_layers: list  # layers per stage
    stage_s: list  # one micro-batch's decode step on each stage
    transfer_s: float  # one stage-to-stage hand-off of a micro-batch's activations
    comm_s: float  # communication on one micro-batch's chain per step: hand-offs + TP all-reduces
    tpot_s: float  # steady round: each sequence's time per output token
    tokens_per_s: float
    bubble_fraction: float  # idle share of the GPUs in steady decode
    pass_s: float  # one flushed pass of the m micro-batches (no overlap between steps)
    pass_bubble_fraction: float  # idle share during that pass: (p−1)/(m+p−1) for equal stages
    stage_memory_bytes: list
    per_gpu_memory_bytes: float  # the fullest stage
    fits: bool
    link_latency_assumed: bool


def analyze_pipeline(model: str | ModelConfig, hardware: str | Hardware, pp: int = 1, microbatches: int = 1,
                     batch: int = 1, prompt: int = 1024, gen: int = 128, tp: int = 1,
                     precision: Precision = Precision(), options: Options = Options()) -> PipelineResult:
    """Decode of `batch` sequences with `prompt` tokens cached on tp × pp GPUs, m micro-batches in flight."""
    config, hw = load_model(model), load_hardware(hardware)
    pp, microbatches, batch = _whole("pp", pp), _whole("microbatches", microbatches), _whole("batch", batch)
    prompt, gen = _whole("prompt", prompt), _whole("gen", gen)
    if batch % microbatches:
        raise ValueError(f"microbatches: {microbatches} does not divide the batch of {batch}")
    micro = batch // microbatches
    stages = stage_seconds(config, hw, pp, micro, prompt + 1, precision, options, tp)
    assumed = False
    transfer = 0.0
    if pp > 1:
        bandwidth, latency, assumed = link(hw)
        transfer = latency + micro * config.d_model * precision.activation_bytes / bandwidth
    round_s = steady_round_seconds(stages, transfer, microbatches)
    flushed = pass_seconds(stages, transfer, microbatches)
    tp_comm = float(communication_seconds(config, hw, tp, micro, precision.activation_bytes))
    memory = stage_memory_bytes(config, pp, batch, prompt + gen, precision, options, tp)
    return PipelineResult(
        tp=tp, pp=pp, microbatches=microbatches, gpus=tp * pp, batch=batch,
        stage_layers=[len(r) for r in stage_layers(config.n_layers, pp)], stage_s=stages, transfer_s=transfer,
        comm_s=(pp - 1) * transfer + tp_comm, tpot_s=round_s, tokens_per_s=batch / round_s,
        bubble_fraction=idle_fraction(stages, microbatches, round_s), pass_s=flushed,
        pass_bubble_fraction=idle_fraction(stages, microbatches, flushed), stage_memory_bytes=memory,
        per_gpu_memory_bytes=max(memory), fits=max(memory) <= hw.memory_bytes,
        link_latency_assumed=assumed or (tp > 1 and hw.interconnect_latency is None))
