"""Tensor parallelism: the TP degree where all-reduces cancel the memory time a split saves.

The split itself (roofline.sharding) and its all-reduces, priced as ops of the step
(roofline.deployment), are what `analyze(..., tp=, replicas=)` and every what-if use; this module
solves where adding GPUs stops paying, in letters.
"""
from __future__ import annotations

from dataclasses import replace

import sympy as sp

from ..bounds import total
from .crossovers import Crossover
from ..deployment import Deployment
from ..model import DECODE, decode_context
from ..sharding import ALLREDUCES_PER_LAYER, allreduce_time, link

t_sym = sp.Symbol("t", positive=True)


def tp_crossovers(d: Deployment, batch: int = 1, prompt: int = 1024) -> dict[str, Crossover]:
    """TP degrees where all-reduces cancel the memory time saved, and where decode is fastest.

    With m one GPU's decode memory time (at the deployment's achieved bandwidth, unsplit) and
    comm(t) = 2L[λ + 2(t−1)/t · X/β], X = B·D·b_a, λ the engine's all-reduce latency where its profile has one:
    breakeven m(1 − 1/t) = comm(t) (TPOT back at its t = 1 value); fastest d/dt [m/t + comm(t)] = 0,
    which has no root: the ring traffic is bounded and the latency constant, so TPOT keeps falling
    with t while m > 4LX/β (fastest = oo: as much TP as the heads allow), else t = 1 is fastest.
    Both take every byte as divided by t (KV replication and norms ignored): an upper estimate.
    """
    config = d.config
    m, L_, X, beta, lam = sp.symbols("m L X beta lambda", positive=True)
    comm = ALLREDUCES_PER_LAYER * L_ * allreduce_time(X, t_sym, beta, lam)
    roots = [r for r in sp.solve(sp.Eq(m * (1 - 1 / t_sym), comm), t_sym) if r != 1]
    breakeven = roots[0] if roots else sp.oo
    slope = sp.factor(sp.diff(m / t_sym + comm, t_sym) * t_sym ** 2)  # sign of d TPOT / dt
    fastest = sp.Piecewise((sp.oo, slope < 0), (1, True))
    single = replace(d, tp=1, pp=1, ep=1, replicas=1)
    bandwidth, latency = single.link()
    assumed = single.engine.allreduce_latency_s is None and link(d.hardware)[2]
    memory_s = single.step(DECODE, float(batch), float(decode_context(prompt))).memory_s
    given = {m: float(total(memory_s)), L_: config.n_layers,
             X: batch * config.d_model * d.precision.activation_bytes, beta: bandwidth, lam: latency}
    source = ("assumed" if assumed else "from the hardware file" if d.engine.allreduce_latency_s is None
              else f"from the {d.engine.name} engine profile")
    note = f"link latency {latency:g} s {source}"
    named = {str(k): v for k, v in given.items()}
    return {name: Crossover(name, sp.Eq(t_sym, expr), float(expr.xreplace(given)), named, note)
            for name, expr in (("tp_breakeven", breakeven), ("tp_fastest", fastest))}
