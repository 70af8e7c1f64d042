"""One fitter for every engine profile: named physical parameters against log errors (scipy's least squares).

Published rows (roofline.fitting.engine_fit) and the harness's measurements (validation/fit.py) both hand it a
prior Engine, the parameters to fit, and a function giving log(predicted / measured) per row for an Engine.
- Each parameter moves in its own unit inside its physical range (scipy.optimize.least_squares, trust-region
  reflective: real bounds, no change of variable to keep it physical). Latencies move in log10 seconds:
  rows pin a fixed cost to a factor, not to a nanosecond, and the step from 1 us to 1 ms is one of scale.
  A corner's sharpness p moves as 1/p in [0, 1]: where compute and memory meet an op takes 2^(1/p) of the
  larger, so 1/p is what rows see (0: the sharp roofline, exactly; 1: no overlap).
- A weak pull towards the prior, one residual a parameter: PRIOR_WEIGHT x (value - prior) / PRIOR_WIDTH,
  so a parameter one width from its prior costs what one row PRIOR_WEIGHT off does, and a parameter the rows
  do not constrain stays where its prior put it.
- A robust loss (soft_l1, f_scale = ROBUST_SCALE): a row within a few percent counts as in plain least squares,
  a row far off counts linearly, so one outlying published figure does not drag a whole profile.
- The 68% range of each parameter from the Jacobian at the fit (scipy's, the loss's weights included): its
  covariance sigma^2 (J'J)^-1 with sigma the rows' scatter about the fit, at least ROW_NOISE_FLOOR.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
from scipy.optimize import least_squares

from ..engine import EFFICIENCIES, PARAMETERS, Engine, is_format_share, with_values

LOSS = "soft_l1"
ROBUST_SCALE = 0.10  # |log error| beyond ~10% counts linearly: a fit's rows scatter 2-5% about it (fit-engine: 2-4%)
PRIOR_WEIGHT = 0.05  # a parameter one PRIOR_WIDTH from its prior weighs as one row 5% off
PRIOR_WIDTH = {"fraction": 0.25, "share": 0.25, "s": 0.5, "p": 0.25}  # s: in decades (log10 seconds); p: in 1/p
FRACTION_FLOOR = 1e-3  # of a roof: below it a measurement is broken, not slow
LATENCY_FLOOR_S = 1e-9  # a fixed cost under a nanosecond is none: a fit there reports 0
ALLREDUCE_START_S = 10e-6  # a latency left to the hardware starts from NCCL's ~10 us
ROW_NOISE_FLOOR = 0.01  # published figures carry 2-4 significant digits: no fit knows its rows better than ~1%
WEAKLY_PINNED = 0.5  # spread after the fit / the prior's, above which the prior still holds >= 1/4 of its precision


@dataclasses.dataclass(frozen=True)
class Pinning:
    low: float  # the 68% range, in the parameter's own unit
    high: float
    weak: bool  # its spread is over WEAKLY_PINNED of the prior's: other parameters trade against it


@dataclasses.dataclass(frozen=True)
class Fitted:
    engine: Engine
    ranges: dict  # parameter -> Pinning
    rows_rms: float  # the rows' scatter about the fit: rms of their log errors


def unit(name: str) -> str:
    return "fraction" if is_format_share(name) else PARAMETERS[name][0]


def get(engine: Engine, name: str) -> float:
    if is_format_share(name):
        return engine.format_share(name)
    value = getattr(engine, name)
    if value is None:  # the all-reduce latency left to the hardware; the attention corner left to `corner`
        return ALLREDUCE_START_S if name == "allreduce_latency_s" else engine.corner
    return value


def variable_bounds(name: str, fraction_high: float = 1.0) -> tuple[float, float]:
    """fraction_high: 1 for fractions of a datasheet roof; Engine.fraction_high for factors over a kernel roof."""
    kind = unit(name)
    if kind == "s":
        return np.log10(LATENCY_FLOOR_S), np.log10(PARAMETERS[name][2])
    name = name.split(".", 1)[0] if is_format_share(name) else name  # a format's share: bounded as its scalar
    if kind == "p":
        return 0.0, 1.0  # 1/p
    if kind == "fraction" and name in PARAMETERS and name not in EFFICIENCIES:  # a share of another efficiency
        return FRACTION_FLOOR, PARAMETERS[name][2]
    return (FRACTION_FLOOR if kind == "fraction" else 0.0), (fraction_high if kind == "fraction" else 1.0)


def to_variable(name: str, value: float, fraction_high: float = 1.0) -> float:
    low, high = variable_bounds(name, fraction_high)
    kind = unit(name)
    x = np.log10(max(value, LATENCY_FLOOR_S)) if kind == "s" else 1 / value if kind == "p" else value
    return float(min(max(x, low), high))


def from_variable(name: str, x: float) -> float:
    """The parameter's value; a latency at the floor the rows cannot resolve is none."""
    low, _ = variable_bounds(name)
    if unit(name) == "s":
        return 0.0 if x <= low + 1e-9 else float(10 ** x)
    if unit(name) == "p":
        return float("inf") if x <= 1e-12 else float(1 / x)
    return float(x)


def fit(prior: Engine, names: list[str], log_errors: Callable[[Engine], np.ndarray], *, anchor: dict | None = None,
        starts: tuple = ({},), prior_weight: float = PRIOR_WEIGHT, loss: str = LOSS, diff_step: float | None = None,
        tolerance: float = 1e-10) -> Fitted:
    """`prior` with `names` fitted: the lowest of the fits from each start (name -> value over the prior's).

    anchor: the values the prior pull is towards (default: the prior's own). diff_step: the Jacobian's
    finite-difference step relative to each variable (None: scipy's ~1e-8), larger where the errors come from a
    solver whose own precision is coarser (the load model's); tolerance: scipy's xtol, ftol and gtol."""
    anchor = {n: get(prior, n) for n in names} | (anchor or {})
    top = prior.fraction_high
    centre = np.array([to_variable(n, anchor[n], top) for n in names])
    width = np.array([PRIOR_WIDTH[unit(n)] for n in names])
    low, high = (np.array(b) for b in zip(*(variable_bounds(n, top) for n in names)))

    def engine_at(x):
        return with_values(prior, names, [from_variable(n, v) for n, v in zip(names, x)])

    def residual(x):
        return np.r_[log_errors(engine_at(x)), prior_weight * (x - centre) / width]

    best = None
    for start in starts:
        x0 = np.array([to_variable(n, start.get(n, get(prior, n)), top) for n in names])
        x0 = np.clip(x0, low + 1e-9 * (high - low), high - 1e-9 * (high - low))  # strictly inside, as trf needs
        result = least_squares(residual, x0, bounds=(low, high), loss=loss, f_scale=ROBUST_SCALE, method="trf",
                               xtol=tolerance, ftol=tolerance, gtol=tolerance, diff_step=diff_step)
        if best is None or result.cost < best.cost:
            best = result
    rows = best.fun[:-len(names)]
    sigma = max(float(np.sqrt(rows @ rows / max(len(rows) - len(names), 1))), ROW_NOISE_FLOOR)
    return Fitted(engine_at(best.x), _ranges(names, best, sigma, width / prior_weight, low, high),
                  float(np.sqrt(np.mean(rows ** 2))))


def _ranges(names, result, sigma, prior_spread, low, high) -> dict:
    """Each parameter's 68% range: sigma sqrt(diag (J'J)^-1) about the fit, clipped to its physical range."""
    jacobian = result.jac
    spread = sigma * np.sqrt(np.diag(np.linalg.pinv(jacobian.T @ jacobian)))
    out = {}
    for i, name in enumerate(names):
        ends = sorted(from_variable(name, float(np.clip(result.x[i] + s, low[i], high[i]))) for s in (-spread[i], spread[i]))
        out[name] = Pinning(ends[0], ends[1], weak=bool(spread[i] > WEAKLY_PINNED * sigma * prior_spread[i]))
    return out
