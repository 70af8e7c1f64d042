"""Why an engine's decode step is slower than the ideal bound, as a sum of named terms.

Priced once per term through the one step pricer, each time adding one part of the engine profile:
  efficiency         its kernels' fractions of the roofs (16-bit GEMVs, GEMMs, attention)
  corner             its kernels overlapping compute and memory less than the sharp roofline's max
  GQA re-reads       its attention reading a GQA group's K/V again for each query head
  quantized kernels  its dequantizing GEMVs streaming slower than its 16-bit ones
  launch             its fixed cost per layer (kernels a layer x launch latency)
  host               its fixed cost per step
  collectives        its all-reduce latency against the link's
The terms add up to the engine's TPOT minus the ideal TPOT (tests/test_engines.py).
"""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from .deployment import Deployment
from .engine import Engine
from .model import DECODE, decode_context


def decode_gap(deployment: Deployment, batch: int, prompt: int) -> pd.Series:
    """Seconds each part of the engine adds to one decode step at `prompt` cached tokens."""
    engine = deployment.engine
    fixed_costs = dict(layer_overhead_s=0.0, step_overhead_s=0.0, allreduce_latency_s=None)
    stages = [("ideal", Engine()),
              ("efficiency", replace(engine, quantized_efficiency={}, corner=Engine.corner, attention_corner=None,
                                     gqa_rereads=0.0,
                                     **fixed_costs)),
              ("corner", replace(engine, quantized_efficiency={}, gqa_rereads=0.0, **fixed_costs)),
              ("GQA re-reads", replace(engine, quantized_efficiency={}, **fixed_costs)),
              ("quantized kernels", replace(engine, **fixed_costs)),
              ("launch", replace(engine, step_overhead_s=0.0, allreduce_latency_s=None)),
              ("host", replace(engine, allreduce_latency_s=None)),
              ("collectives", engine)]
    times = [float(replace(deployment, engine=e).step(DECODE, batch, decode_context(prompt)).total_s)
             for _, e in stages]
    return pd.Series({name: after - before for (name, _), before, after in zip(stages[1:], times, times[1:])},
                     name=f"{engine.name} - ideal, s")
