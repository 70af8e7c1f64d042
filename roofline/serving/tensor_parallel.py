"""Tensor parallelism: the TP degree where all-reduces cancel the memory time a split saves.

The split itself (roofline.sharding) and its all-reduces, priced as ops of the step
(roofline.deployment), are what `analyze(..., tp=, replicas=)` and every what-if use; this module
solves where adding GPUs stops paying, in letters.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import sympy as sp
from scipy.optimize import brentq, minimize_scalar

from ..bounds import total
from .crossovers import Crossover
from ..deployment import Deployment
from ..model import DECODE, decode_context
from ..allreduce import RING, one_shot_time, ring_time
from ..sharding import ALLREDUCES_PER_LAYER, link

t_sym = sp.Symbol("t", positive=True)
LARGEST_GROUP = 1024  # GPUs: the numeric search's reach, past any NVLink domain


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
    An engine whose all-reduce is the one-or-two-shot kernel (roofline.allreduce) pays λ' + (t−1)X/sβ for a
    message up to its one-shot size (a decode step's, at any t), else 2λ' + 2(t−1)/t·X/sβ, λ' = λ + δ·log2(t/2): the
    one shot's traffic grows with t, so decode has a fastest degree even without δ. Both solved numerically.
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
    source = ("assumed" if assumed else "from the hardware file" if d.engine.allreduce_latency_s is None
              else f"from the {d.engine.name} engine profile")
    note = f"link latency {latency:g} s {source}" + (f", +{doubling:g} s a doubling past 2 GPUs" if doubling else "")
    if d.engine.allreduce.algorithm != RING:
        given[delta] = doubling
        return _one_or_two_shot_crossovers(d, m, L_, X, beta, lam, delta, given, note)
    flat = ALLREDUCES_PER_LAYER * L_ * ring_time(X, t_sym, beta, lam)
    # a root at or below 1 GPU (the latencies alone outweigh all the memory time): splitting never pays
    roots = [r for r in sp.solve(sp.Eq(m * (1 - 1 / t_sym), flat), t_sym) if r != 1 and float(r.xreplace(given)) > 1]
    breakeven = roots[0] if roots else sp.oo
    if doubling > 0:
        given[delta] = doubling
        comm = ALLREDUCES_PER_LAYER * L_ * ring_time(X, t_sym, beta, lam + delta * sp.log(t_sym / 2, 2))
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
    named = {str(k): v for k, v in given.items()}
    values = {"tp_breakeven": value if isinstance(breakeven, sp.Eq) else float(breakeven.xreplace(given))}
    if math.isinf(values["tp_breakeven"]):  # no degree wins back one GPU's TPOT: one GPU is the fastest
        fastest, note = sp.Integer(1), note + "; no split pays back its all-reduces"
    values["tp_fastest"] = float(fastest.xreplace(given))
    return {name: Crossover(name, expr if isinstance(expr, sp.Eq) else sp.Eq(t_sym, expr), values[name], named, note)
            for name, expr in (("tp_breakeven", breakeven), ("tp_fastest", fastest))}


def _one_or_two_shot_crossovers(d: Deployment, m, L_, X, beta, lam, delta, given: dict, note: str) -> dict:
    """tp_crossovers for the one-or-two-shot kernel: the shot a decode step's X bytes take (one up to the kernel's
    largest, whatever t), at the kernel's share s of the link; the break-even the first root past 1 GPU, the fastest
    degree the least TPOT past 2 (1 where none beats one GPU), both numeric."""
    kernel, share = d.engine.allreduce, sp.Symbol("s", positive=True)
    given[share] = kernel.bandwidth_share
    shot = kernel.shot(given[X])

    def comm(doublings):  # a step's 2L all-reduces, the latency grown by `doublings`
        return ALLREDUCES_PER_LAYER * L_ * shot(X, t_sym, share * beta, lam + delta * doublings)
    priced = comm(sp.Max(0, sp.log(t_sym / 2, 2)))  # the doubling term from 2 GPUs on, as the ring's
    gain = sp.lambdify(t_sym, (m * (1 - 1 / t_sym) - priced).xreplace(given))
    tpot = sp.lambdify(t_sym, (m / t_sym + priced).xreplace(given))
    grid = np.geomspace(1 + 1e-9, LARGEST_GROUP, 4097)
    ahead = np.flatnonzero(np.array([gain(t) for t in grid]) >= 0)
    breakeven = brentq(gain, grid[ahead[0] - 1], grid[ahead[0]]) if ahead.size and ahead[0] > 0 else math.inf
    best = int(np.argmin([tpot(t) if t >= 2 else math.inf for t in grid]))
    if best == grid.size - 1:  # still falling at the search's reach: as much TP as the heads allow, as the ring's
        fastest = math.inf
    else:
        window = (max(grid[best - 1], 2.0), grid[best + 1])
        fastest = float(minimize_scalar(tpot, bounds=window, method="bounded", options={"xatol": 1e-9}).x)
    named = {str(k): v for k, v in given.items()}
    note += f"; {kernel.algorithm} all-reduce, {'one shot' if shot is one_shot_time else 'two shots'} at X"
    if not math.isfinite(breakeven) or tpot(min(fastest, LARGEST_GROUP)) >= given[m]:  # none beats one GPU's TPOT
        note += "; no split pays back its all-reduces"
        breakeven, fastest = math.inf, 1.0
    return {"tp_breakeven": Crossover("tp_breakeven", sp.Eq(m * (1 - 1 / t_sym), priced), breakeven, named, note),
            "tp_fastest": Crossover("tp_fastest", sp.Eq(0, sp.diff(m / t_sym + comm(sp.log(t_sym / 2, 2)), t_sym)),
                                    fastest, named, note)}
