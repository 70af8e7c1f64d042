"""The closed forms behind a plan's numbers, solved from the Deployment's own step.

Largest batch within a TPOT target tau. At a fixed context every model op's compute and memory times are
lines in B (FLOPs and bytes are), and so are the collectives (latency + B-proportional bytes) and the fixed
overheads, so the step is t(B) = sum_i max(c0_i + c1_i B, m0_i + m1_i B) + f0 + f1 B: piecewise linear,
rising. On the piece where it crosses tau, t(B) = t_0 + t_1 B and
    B* = floor((tau - t_0) / t_1),
and where every op is memory-bound there (the napkin), t_0 = W / beta + t_f and t_1 = (kv(S) + a) / beta + c:
    B* = floor((beta (tau - t_f) - W) / (kv(S) + a + beta c)),
with W the bytes read once a step (weights), kv(S) one sequence's KV bytes at S keys (the model's own
expression), a its other per-sequence bytes (activations), beta the achieved bandwidth, t_f the fixed
times (overheads, collective latencies), c the collectives' seconds per sequence. The lines come from
the step at B = 1 and 2. Left out: an engine's rounded roofline corner (the form takes the sharp max;
the search prices the corner), MoE expert reads (not lines in B: the search's 1-D solve on the step stands).
TP break-even: roofline.serving.tensor_parallel.tp_crossovers, the degree where the all-reduces cancel
the memory time a split saves, for the plan's device and formats.
"""
from __future__ import annotations

import math

import sympy as sp

from ..deployment import Deployment
from ..model import decode_context
from ..serving.crossovers import Crossover
from ..serving.tensor_parallel import tp_crossovers
from ..step_lines import StepLines
from ..symbols import B, S, b_kv

tau, t_0, t_1, t_f, W, a, beta, beta_a, c = sp.symbols("tau t_0 t_1 t_f W a beta beta_a c", positive=True)
kv_S = sp.Function("kv")(S)
PIECE = sp.Eq(B, sp.floor((tau - t_0) / t_1))
# beta streams the weights, beta_a the KV cache (an engine's attention reads at its own efficiency): kv(S) costs
# kv(S) / beta_a seconds a sequence, i.e. kv(S) beta / beta_a bytes at the weights' rate; a is the rest a sequence reads
NAPKIN = sp.Eq(B, sp.floor((beta * (tau - t_f) - W) / (kv_S * beta / beta_a + a + beta * c)))


def largest_batch(d: Deployment, prompt: float, gen: float, tpot_s: float) -> Crossover:
    """B* = floor((tau - t_0) / t_1) on the piece of the step where it crosses tau (the napkin form when memory-bound)."""
    context = decode_context(prompt + gen / 2)
    lines = StepLines.of(d, context)
    if lines is None:
        return Crossover("largest_batch_within_tpot", PIECE, math.nan, {"tau": tpot_s},
                         "MoE: expert reads are not lines in B; the search's 1-D solve on the step stands")
    first = next(lines.pieces())
    if (tpot_s - first.t_0) / first.t_1 < 1:
        return Crossover("largest_batch_within_tpot", PIECE, 0, {"tau": tpot_s, "t_0": first.t_0, "t_1": first.t_1},
                         "even batch 1 misses the target")
    found = lines.solve(lambda piece: (tpot_s - piece.t_0) / piece.t_1)
    if found is None:
        return Crossover("largest_batch_within_tpot", PIECE, math.nan, {"tau": tpot_s}, "not reached")
    piece, root = found
    if piece.compute_bound.any():
        share = int(round(100 * piece.compute_bound.mean()))
        return Crossover("largest_batch_within_tpot", PIECE, math.floor(root + 1e-9),
                         {"tau": tpot_s, "t_0": piece.t_0, "t_1": piece.t_1},
                         f"{share}% of the ops compute-bound on this piece")
    return _napkin(d, context, tpot_s, lines, math.floor(root + 1e-9))


def _napkin(d: Deployment, context: float, tpot_s: float, lines: StepLines, value: int) -> Crossover:
    """The memory-bound piece in the napkin's letters, kv(S) the model's own expression."""
    bandwidth = d.roofs.bandwidth
    attention = d.roofs.attention_bandwidth or bandwidth
    kv_expr = d.compiled.kv_cache_expr.xreplace({B: 1})
    kv_bytes = float(kv_expr.xreplace({S: context, b_kv: d.precision.kv_bytes}))
    given = {"tau": tpot_s, "beta": bandwidth, "beta_a": attention, "t_f": lines.rest[0],
             "W": lines.memory[:, 0].sum() * bandwidth, "kv(S)": kv_bytes,
             "a": lines.memory[:, 1].sum() * bandwidth - kv_bytes * bandwidth / attention, "c": lines.rest[1], "S": context}
    return Crossover("largest_batch_within_tpot", NAPKIN, value, given,
                     f"memory-bound: kv(S) = {sp.sstr(kv_expr)} bytes")


def tp_breakeven(d: Deployment, batch: int, prompt: float) -> Crossover:
    """The TP degree where the all-reduces cancel the memory time saved (roofline.serving.tensor_parallel)."""
    return tp_crossovers(d, batch, int(prompt))["tp_breakeven"]


def explain(frame, work, targets, rows: int = 3) -> list[tuple[dict, Crossover, Crossover]]:
    """For the cheapest feasible deployment of each hardware (at most `rows`): (its row, B*, TP break-even),
    each solved on the Deployment the candidate was priced with."""
    out = []
    best = frame[frame["feasible"]].drop_duplicates("hardware").head(rows)
    for _, row in best.iterrows():
        d = row["deployment"]
        out.append((row.to_dict(), largest_batch(d, work.prompt_mean, work.gen_mean, targets.tpot_s),
                    tp_breakeven(d, int(row["capacity_batch"]), work.prompt_mean)))
    return out
