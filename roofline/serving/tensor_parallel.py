"""Tensor parallelism: the TP degree where all-reduces cancel the memory time a split saves.

The split itself (roofline.sharding) and its all-reduces, priced as ops of the step
(roofline.deployment), are what `analyze(..., tp=, replicas=)` and every what-if use; this module
solves where adding GPUs stops paying, in letters.
"""
from __future__ import annotations

import sympy as sp

from ..bounds import total
from ..engine import Engine, load_engine
from ..config import ModelConfig, load_model
from .crossovers import Crossover
from ..deployment import Deployment
from ..hardware import Hardware, load_hardware
from ..model import DECODE, decode_context
from ..precision import Precision
from ..sharding import ALLREDUCES_PER_LAYER, allreduce_time, link

t_sym = sp.Symbol("t", positive=True)


def tp_crossovers(model: str | ModelConfig, hardware: str | Hardware, batch: int = 1, prompt: int = 1024,
                  precision: Precision = Precision(), engine: str | Engine | None = None) -> dict[str, Crossover]:
    """TP degrees where all-reduces cancel the memory time saved, and where decode is fastest.

    With m one GPU's decode memory time (at the calibrated bandwidth) and comm(t) = 2L[λ + 2(t−1)/t · X/β], X = B·D·b_a:
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
    single = Deployment(config, hw, precision, engine=load_engine(engine)).step(DECODE, float(batch),
                                                                            float(decode_context(prompt)))
    given = {m: float(total(single.memory_s)), L_: config.n_layers,
             X: batch * config.d_model * precision.activation_bytes, beta: bandwidth, lam: latency}
    note = f"link latency {latency:g} s {'assumed' if assumed else 'from the hardware file'}"
    named = {str(k): v for k, v in given.items()}
    return {name: Crossover(name, sp.Eq(t_sym, expr), float(expr.xreplace(given)), named, note)
            for name, expr in (("tp_breakeven", breakeven), ("tp_fastest", fastest))}
