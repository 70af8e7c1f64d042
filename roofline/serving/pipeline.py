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
comes from the larger batch the freed memory admits. Stage times are rows of the Deployment's step
(the engine's roofs, its corner and overheads included: a layer's overhead on its stage, the per-step one on
every stage's GPU). Left out: the sampled token's trip back to the first stage, activation workspace
in memory, interleaved (virtual) stages.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..models.config import ModelConfig
from ..deployment import OVERHEAD_GROUP, SEQUENCES_OP, Deployment
from ..memory import DEFAULT_PREFILL_CHUNK, memory
from ..model import DECODE, decode_context, layer_group
from ..sharding import whole


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
    return layer_group(config.layer_attention[index], config.layer_mlp[index])


def stage_seconds(d: Deployment, batch: float, context: float) -> tuple[list[float], float]:
    """Decode-step seconds of each stage for `batch` sequences at `context` keys (TP all-reduces and
    overheads included), and one hand-off between stages."""
    step = d.step(DECODE, float(batch), float(context))
    per_layer: dict[str, float] = {}  # a layer group's ops, each layer's share; every layer's all-reduces
    ends, per_stage, transfer = {"embed": 0.0, "head": 0.0}, 0.0, 0.0
    for name, count, seconds in zip(step.ops, step.counts, step.time_s):
        seconds = float(np.max(seconds))
        if name.in_layers:
            per_layer[name.group] = per_layer.get(name.group, 0.0) + seconds / count
        elif name.group in ends:
            ends[name.group] += seconds
        elif name.group == "pp":
            transfer = seconds / count
        elif name.group == OVERHEAD_GROUP and name.op == "step":
            per_stage += seconds / count
        elif name.group == OVERHEAD_GROUP and name.op == SEQUENCES_OP:  # the scheduler's, before the first stage
            ends["embed"] += seconds
        else:  # per-layer collectives and overheads
            per_layer["*"] = per_layer.get("*", 0.0) + seconds / d.config.n_layers
    out = [per_stage + sum(per_layer[_layer_key(d.config, j)] + per_layer.get("*", 0.0) for j in layers)
           for layers in d.stages]
    out[0] += ends["embed"]
    out[-1] += ends["head"]
    return out, transfer


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
    stage_memory_bytes: list  # each stage's GPU: its weights, its layers' cache, one prefill chunk's workspace
    per_gpu_memory_bytes: float  # the fullest stage
    fits: bool
    link_latency_assumed: bool
    workspace_bytes: float = 0.0  # one prefill chunk's activations (roofline.memory), in every stage's bytes


def analyze_pipeline(d: Deployment, microbatches: int = 1, batch: int = 1, prompt: int = 1024,
                     gen: int = 128, prefill_chunk: int | None = DEFAULT_PREFILL_CHUNK) -> PipelineResult:
    """Decode of `batch` sequences with `prompt` tokens cached on the Deployment's tp × pp GPUs, m micro-batches
    in flight."""
    tp, pp = d.tp, d.pp
    microbatches, batch = whole("microbatches", microbatches), whole("batch", batch)
    prompt, gen = whole("prompt", prompt), whole("gen", gen)
    if batch % microbatches:
        raise ValueError(f"microbatches: {microbatches} does not divide the batch of {batch}")
    micro = batch // microbatches
    stages, transfer = stage_seconds(d, micro, decode_context(prompt))
    round_s = steady_round_seconds(stages, transfer, microbatches)
    flushed = pass_seconds(stages, transfer, microbatches)
    one = d.step(DECODE, float(micro), float(decode_context(prompt)))
    held = memory(d, float(batch), float(prompt), float(gen), prefill_chunk)
    stage_bytes = [float(b) for b in held["stage_memory_bytes"]]
    return PipelineResult(
        tp=tp, pp=pp, microbatches=microbatches, gpus=tp * pp, batch=batch,
        stage_layers=[len(r) for r in d.stages], stage_s=stages, transfer_s=transfer,
        comm_s=float(one.communication_s), tpot_s=round_s, tokens_per_s=batch / round_s,
        bubble_fraction=idle_fraction(stages, microbatches, round_s), pass_s=flushed,
        pass_bubble_fraction=idle_fraction(stages, microbatches, flushed), stage_memory_bytes=stage_bytes,
        per_gpu_memory_bytes=max(stage_bytes), fits=bool(held["fits"]), workspace_bytes=float(held["workspace_bytes"]),
        link_latency_assumed=d.link_latency_assumed)
