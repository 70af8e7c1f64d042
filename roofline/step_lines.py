"""A decode step as lines in the batch, and the one walk over its pieces that the closed forms solve on.

At a fixed context every model op's FLOPs and bytes are lines in B, so its compute and memory times are
lines c0 + c1·B and m0 + m1·B; the step's other rows (collectives, fixed overheads) are one more line
r0 + r1·B. On the sharp roofline the step is t(B) = Σ max(c0 + c1 B, m0 + m1 B) + r0 + r1 B: piecewise
linear and rising, its pieces cut where an op turns from memory- to compute-bound. The lines are read
from the Deployment's own step at B = 1 and 2 (engine, calibration, split and collectives included), so
no second pricer exists. Left out: a rounded roofline corner (an engine's: the forms take the sharp max),
and routed experts, whose expected distinct count is not a line in B (`of` returns None for them).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .models.config import MOE
from .deployment import Deployment
from .model import DECODE

PROBES = np.array([1.0, 2.0])  # two batches fix a line


@dataclass(frozen=True)
class Piece:
    """One piece of t(B) = t_0 + t_1·B, for lo <= B <= hi."""
    lo: float
    hi: float
    t_0: float  # seconds
    t_1: float  # seconds per sequence
    compute_bound: np.ndarray  # per model op: whether compute binds on this piece


@dataclass(frozen=True)
class StepLines:
    """Per model op (intercept s, slope s/sequence) of its compute and memory times; the other rows' line."""
    compute: np.ndarray  # (ops, 2)
    memory: np.ndarray  # (ops, 2)
    rest: np.ndarray  # (2,): collectives and fixed overheads

    @classmethod
    def of(cls, d: Deployment, context: float) -> StepLines | None:
        """The decode step's lines at `context` keys; None when routed experts make it nonlinear in B."""
        if MOE in d.config.layer_mlp:
            return None
        step = d.step(DECODE, PROBES, float(context))
        n = len(d.compiled.decode.ops)

        def line(values) -> np.ndarray:
            at_1, at_2 = np.broadcast_to(np.asarray(values, dtype=float), (2,))
            return np.array([2 * at_1 - at_2, at_2 - at_1])
        compute = np.array([line(step.compute_s[i]) for i in range(n)])
        memory = np.array([line(step.memory_s[i]) for i in range(n)])
        rest = sum((line(seconds) for seconds in step.time_s[n:]), np.zeros(2))
        return cls(compute, memory, rest)

    @property
    def asymptotic_slope(self) -> float:
        """g = lim t(B) / B: every op on its steeper line, plus the other rows' slope."""
        return float(np.maximum(self.compute[:, 1], self.memory[:, 1]).sum() + self.rest[1])

    @property
    def memory_bound(self) -> tuple[float, float]:
        """(a, b) of t(B) = a + b·B with every op on its memory line (the napkin regime)."""
        return float(self.memory[:, 0].sum() + self.rest[0]), float(self.memory[:, 1].sum() + self.rest[1])

    def pieces(self) -> Iterator[Piece]:
        """The pieces of t(B) for B > 0, in order."""
        c, m = self.compute, self.memory
        crossings = sorted({(mi[0] - ci[0]) / (ci[1] - mi[1]) for ci, mi in zip(c, m)
                            if ci[1] != mi[1] and (mi[0] - ci[0]) / (ci[1] - mi[1]) > 0})
        edges = [0.0] + crossings + [math.inf]
        for lo, hi in zip(edges[:-1], edges[1:]):
            probe = lo + 1.0 if hi == math.inf else (lo + hi) / 2
            compute_wins = c[:, 0] + c[:, 1] * probe > m[:, 0] + m[:, 1] * probe
            chosen = np.where(compute_wins[:, None], c, m)
            yield Piece(lo, hi, float(chosen[:, 0].sum() + self.rest[0]), float(chosen[:, 1].sum() + self.rest[1]),
                        compute_wins)

    def solve(self, root) -> tuple[Piece, float] | None:
        """The first piece whose own root (`root(piece)`, or None where it has none) lies on it."""
        for piece in self.pieces():
            value = root(piece)
            if value is not None and piece.lo <= value <= piece.hi:
                return piece, value
        return None
