"""Tensor parallelism: the TP degree where all-reduces cancel the memory time a split saves.

The split itself (roofline.sharding) and its all-reduces, priced as ops of the step
(roofline.deployment), are what `analyze(..., tp=, replicas=)` and every what-if use; this module
solves where adding GPUs stops paying, in letters.
"""
from __future__ import annotations

import math
from dataclasses import replace

import sympy as sp
from scipy.optimize import brentq

from ..bounds import total
from .crossovers import Crossover
from ..deployment import Deployment
from ..model import DECODE, decode_context
from ..sharding import ALLREDUCES_PER_LAYER, allreduce_time, link

t_sym = sp.Symbol("t", positive=True)


def tp_crossovers(d: Deployment, batch: int = 1, prompt: int = 1024) -> dict[str, Crossover]:
    """TP degrees where all-reduces cancel the memory time saved, and where decode is fastest.

    With m one GPU's decode memory time (at the deployment's achieved bandwidth, unsplit) and
    comm(t) = 2L[λ + δ·log2(t/2) + 2(t−1)/t · X/β], X = B·D·b_a, λ the all-reduce latency over 2 GPUs (the engine's
    where its profile has one) and δ what each doubling of the group adds (the engine's allreduce_doubling_s,
    Deployment.allreduce_latency; priced from t = 2 on, so δ acts only past 2 GPUs):
    breakeven m(1 − 1/t) = comm(t) (TPOT back at its t = 1 value); fastest d/dt [m/t + comm(t)] = 0.
    With δ = 0 the fastest degree has no root: the ring traffic is bounded and the latency constant, so TPOT keeps
    falling with t while m > 4LX/β (fastest = oo: as much TP as the heads allow), else t = 1 is fastest. With δ > 0
    the latency grows with log t while the memory time saved shrinks as 1/t: the slope, times t², is linear in t,
    and TPOT is least at t = ln2·(m − 4LX/β) / (2Lδ) (a real degree is a divisor of the heads near it). The
    breakeven is then the first root past 1 (numeric past t = 2: the equation is transcendental).
    Both take every byte as divided by t (KV replication and norms ignored): an upper estimate.
    """
    config = d.config
    m, L_, X, beta, lam, delta = sp.symbols("m L X beta lambda delta", positive=True)
    single = replace(d, tp=1, pp=1, ep=1, replicas=1)
    bandwidth, latency = single.link()
    doubling = d.engine.allreduce_doubling_s
    assumed = single.engine.allreduce_latency_s is None and link(d.hardware)[2]
    memory_s = single.step(DECODE, float(batch), float(decode_context(prompt))).memory_s
    given = {m: float(total(memory_s)), L_: config.n_layers,
             X: batch * config.d_model * d.precision.activation_bytes, beta: bandwidth, lam: latency}
    flat = ALLREDUCES_PER_LAYER * L_ * allreduce_time(X, t_sym, beta, lam)
    # a root at or below 1 GPU (the latencies alone outweigh all the memory time): splitting never pays
    roots = [r for r in sp.solve(sp.Eq(m * (1 - 1 / t_sym), flat), t_sym) if r != 1 and float(r.xreplace(given)) > 1]
    breakeven = roots[0] if roots else sp.oo
    if doubling > 0:
        given[delta] = doubling
        comm = ALLREDUCES_PER_LAYER * L_ * allreduce_time(X, t_sym, beta, lam + delta * sp.log(t_sym / 2, 2))
        slope = sp.expand(sp.diff(m / t_sym + comm, t_sym) * t_sym ** 2)  # sign of d TPOT / dt: linear in t
        least = sp.solve(slope, t_sym)[0]
        fastest = sp.Piecewise((1, m <= 2 * ALLREDUCES_PER_LAYER * L_ * X / beta), (sp.Max(2, least), True))
        flat_root = float(breakeven.xreplace(given))
        if flat_root > 2:  # the doubling term acts: solve the transcendental equation where it holds
            breakeven = sp.Eq(m * (1 - 1 / t_sym), comm)
            best = float(fastest.xreplace(given))
            gain = sp.lambdify(t_sym, (m * (1 - 1 / t_sym) - comm).xreplace(given))
            value = brentq(gain, 2.0, best) if math.isfinite(best) and gain(2.0) < 0 < gain(best) else math.inf
    else:
        slope = sp.factor(sp.diff(m / t_sym + flat, t_sym) * t_sym ** 2)
        fastest = sp.Piecewise((sp.oo, slope < 0), (1, True))
    source = ("assumed" if assumed else "from the hardware file" if d.engine.allreduce_latency_s is None
              else f"from the {d.engine.name} engine profile")
    note = f"link latency {latency:g} s {source}" + (f", +{doubling:g} s a doubling past 2 GPUs" if doubling else "")
    named = {str(k): v for k, v in given.items()}
    values = {"tp_breakeven": value if isinstance(breakeven, sp.Eq) else float(breakeven.xreplace(given))}
    if math.isinf(values["tp_breakeven"]):  # no degree wins back one GPU's TPOT: one GPU is the fastest
        fastest, note = sp.Integer(1), note + "; no split pays back its all-reduces"
    values["tp_fastest"] = float(fastest.xreplace(given))
    return {name: Crossover(name, expr if isinstance(expr, sp.Eq) else sp.Eq(t_sym, expr), values[name], named, note)
            for name, expr in (("tp_breakeven", breakeven), ("tp_fastest", fastest))}
