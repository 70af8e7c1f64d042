"""Why an engine's decode step is slower than the ideal bound, as a sum of named terms.

Priced once per term through the one step pricer, each time switching on the next part of the engine profile:
  kernel roofs       the device's own kernels for these dtypes (roofline/kernel_roofs.py), on an engine whose
                     efficiencies are relative to them (`roofs: kernel`; zero on a datasheet profile)
  efficiency         its kernels' fractions of the roofs (16-bit GEMVs, GEMMs, attention)
  corner             its kernels overlapping compute and memory less than the sharp roofline's max
  GQA re-reads       its attention reading a GQA group's K/V again for each query head
  quantized kernels  its dequantizing GEMVs streaming slower than its 16-bit ones, and its decode attention over an
                     8-bit KV cache at its own rate
  routed experts     its MoE grouped GEMMs streaming the routed experts' weights slower than its dense GEMVs
  expert GEMMs       its MoE grouped GEMMs computing below its dense GEMMs' FLOP/s (prefill-sized rows, narrow
                     slices of each expert under tp)
  MoE layer floor    its fixed cost per MoE layer (routing, permute, grouped GEMMs' kernel chain)
  launch             its fixed cost per layer (kernels a layer x launch latency)
  host               its fixed cost per step
  host per sequence  its scheduler's work for each running sequence, every step
  collectives        its all-reduce latency against the link's
The terms add up to the engine's TPOT minus the ideal TPOT. TERMS names every engine parameter a decode step
reads; a new parameter must join a term (tests/test_deployment.py fails otherwise), so none is counted
silently in another term. The per-request cost is TTFT's, not a decode step's.
"""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from ..deployment import Deployment
from ..engine import EXPERT_FLOPS_BY_FORMAT, FLOPS_BY_DTYPE, IDEAL, KV_ATTENTION_BY_FORMAT, QUANTIZED
from ..model import DECODE, decode_context

TERMS = (("kernel roofs", ("roofs",)),
         ("efficiency", ("bandwidth_efficiency", "flops_efficiency", "attention_bandwidth_efficiency",
                         "attention_flops_efficiency")),
         ("corner", ("corner", "attention_corner")), ("GQA re-reads", ("gqa_rereads",)),
         ("quantized kernels", (QUANTIZED, KV_ATTENTION_BY_FORMAT, FLOPS_BY_DTYPE)),
         ("routed experts", ("expert_bandwidth_efficiency",)),
         ("expert GEMMs", ("expert_flops_efficiency", EXPERT_FLOPS_BY_FORMAT, "expert_slice_half_columns")),
         ("MoE layer floor", ("expert_layer_overhead_s",)),
         ("launch", ("layer_overhead_s", "op_overhead_s")), ("host", ("step_overhead_s",)),
         ("host per sequence", ("sequence_overhead_s",)),
         ("collectives", ("allreduce_latency_s", "allreduce_doubling_s", "alltoall_overhead_s")))
# paid once per request, in TTFT; the front end's terms load the server's front end, not the GPUs' step
NOT_IN_DECODE = ("request_overhead_s", "request_op_overhead_s", "disagg_handoff_s", "frontend_request_s",
                 "frontend_chunk_s")


def decode_gap(deployment: Deployment, batch: int, prompt: int) -> pd.Series:
    """Seconds each part of the engine adds to one decode step at `prompt` cached tokens."""
    engine = deployment.engine
    stages, switched = [replace(IDEAL, name=engine.name)], {}
    for _, fields in TERMS:
        switched.update({name: getattr(engine, name) for name in fields})
        stages.append(replace(IDEAL, name=engine.name, **switched))
    times = [float(replace(deployment, engine=e).step(DECODE, batch, decode_context(prompt)).total_s) for e in stages]
    return pd.Series({name: after - before for (name, _), before, after in zip(TERMS, times, times[1:])},
                     name=f"{engine.name} - ideal, s")
