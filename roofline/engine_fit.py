"""Fit an engine's physical parameters to published (or a user's) measurements, and score them.

The parameters an engine's rows can pin are fitted; the rest keep their prior values. Each is moved
in a space that keeps it physical: an efficiency as a logistic of a free number (so it stays in
(0, 1)), a latency as an exponential (so it stays > 0). The fit minimises the log-space error of
the step pricer's prediction against every row (Levenberg-Marquardt, numpy only) with a weak pull
towards the prior, so a parameter the rows do not constrain stays where its prior put it.
How well the rows pin each parameter: its 68% range from the cost's curvature at the fit (a Laplace
approximation, with the scatter the rows leave as their noise), and a flag where that range is still
over half the prior's: other parameters trade against it, and the prior holds a quarter or more of
what the fit knows of it.
Accuracy: in-sample, and leave-one-out (each row predicted by a fit that never saw it).
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pandas as pd

from .config import load_model
from .engine import PARAMETERS, QUANTIZED, Engine
from .least_squares import levenberg_marquardt
from .published import Row, errors

PRIOR_WEIGHT = 0.05  # pull towards the prior, in the transformed space (a few % of a typical residual)
ITERATIONS = 40
EFFICIENCY_CAP = 0.999  # logistic(x) < 1: an efficiency of exactly 1 is the ideal bound, not a fit
ROW_NOISE_FLOOR = 0.01  # published figures carry 2-4 significant digits: no fit knows its rows better than ~1%
WEAKLY_PINNED = 0.5  # spread after the fit / the prior's, above which the prior still holds >= 1/4 of its precision


def is_latency(name: str) -> bool:
    return name.endswith("_s")


def is_exponent(name: str) -> bool:
    return PARAMETERS.get(name, ("",))[0] == "p"


def get(engine: Engine, name: str) -> float:
    if name.startswith(QUANTIZED + "."):
        return engine.quantized_efficiency.get(name.split(".", 1)[1], 1.0)
    value = getattr(engine, name)
    return 10e-6 if value is None else value  # an all-reduce latency left to the hardware: start from NCCL's ~10 us


def with_values(engine: Engine, names: list[str], values) -> Engine:
    quantized = dict(engine.quantized_efficiency)
    plain = {}
    for name, value in zip(names, values):
        if name.startswith(QUANTIZED + "."):
            quantized[name.split(".", 1)[1]] = float(value)
        else:
            plain[name] = float(value)
    return dataclasses.replace(engine, quantized_efficiency=quantized, **plain)


def to_free(name: str, value: float) -> float:
    if is_latency(name):
        return float(np.log(max(value, 1e-9)))
    if is_exponent(name):  # p = 1 + e^x >= 1; the sharp roofline (inf) starts the fit at p = 1 + e^3
        return float(np.log(max(min(value, 1 + np.exp(3.0)) - 1, 1e-6)))
    value = min(max(value, 1e-4), EFFICIENCY_CAP - 1e-6)
    return float(np.log(value / (EFFICIENCY_CAP - value)))


def from_free(name: str, x: float) -> float:
    if is_latency(name):
        return float(np.exp(np.clip(x, -25, 2)))
    if is_exponent(name):
        return float(1 + np.exp(np.clip(x, -12, 6)))
    return float(EFFICIENCY_CAP / (1 + np.exp(-x)))


def identified(names: list[str], rows: list[Row]) -> list[str]:
    """The parameters these rows can move: a quantized format's efficiency needs a row in that format,
    an all-reduce latency a row on several GPUs, a request overhead a TTFT or throughput row."""
    formats = {row.precision.weights for row in rows}
    kept = []
    for name in names:
        if name.startswith(QUANTIZED + ".") and name.split(".", 1)[1] not in formats:
            continue
        if name == "allreduce_latency_s" and not any(row.tp > 1 for row in rows):
            continue
        if name == "gqa_rereads" and not any(_grouped(row.model) for row in rows):
            continue
        if name == "request_overhead_s" and not any(row.metric != "decode_tokens_per_s" for row in rows):
            continue
        kept.append(name)
    return kept


def _grouped(model: str) -> bool:
    config = load_model(model)
    return config.has_kv_heads and config.n_kv_heads < config.n_heads


def fit_engine(prior: Engine, rows: list[Row], names: list[str], pinned_note: str = "") -> Engine:
    """The prior with `names` fitted to `rows`; a parameter no row can move keeps its prior, with a warning."""
    free = identified(names, rows)
    for name in sorted(set(names) - set(free)):
        warnings.warn(f"engine {prior.name!r}: no row pins {name}; it keeps its prior {get(prior, name)!r}",
                      stacklevel=2)
    if not free or not rows:
        return prior
    x0 = np.array([to_free(n, get(prior, n)) for n in free])

    def engine_at(x):
        return with_values(prior, free, [from_free(n, v) for n, v in zip(free, x)])

    def residual(x):
        predicted_over_measured = errors(rows, engine_at(x)) + 1
        return np.r_[np.log(np.maximum(predicted_over_measured, 1e-9)), PRIOR_WEIGHT * (x - x0)]

    x = levenberg_marquardt(residual, x0, ITERATIONS, step_size=1e-5, tolerance=1e-8)
    fitted = engine_at(x)
    note = pinned_note or f"{len(rows)} rows"
    priors = {**{n: get(prior, n) for n in free}, **prior.priors}  # the first prior stays the prior
    return dataclasses.replace(fitted, pinned_by={**prior.pinned_by, **{n: note for n in free}}, priors=priors)


@dataclasses.dataclass(frozen=True)
class Pinning:
    low: float  # the 68% range, in the parameter's own unit
    high: float
    weak: bool  # its spread is over WEAKLY_PINNED of the prior's: other parameters trade against it


def pinning(engine: Engine, rows: list[Row], names: list[str]) -> dict[str, Pinning]:
    """How tightly `rows` pin each of `names` around a fitted engine's values.

    The fit minimises |log errors|^2 + w^2 |x - x0|^2 in the free space; read as -2 sigma^2 log posterior,
    its covariance there is sigma^2 (J'J + w^2)^-1 against the prior's sigma^2 / w^2, with sigma the
    rows' scatter about the fit (n - k degrees of freedom, at least ROW_NOISE_FLOOR)."""
    free = identified(names, rows)
    if not free:
        return {}
    x = np.array([to_free(n, get(engine, n)) for n in free])

    def log_errors(at):
        return np.log(np.maximum(errors(rows, with_values(engine, free, [from_free(n, v) for n, v in
                                                                          zip(free, at)])) + 1, 1e-9))
    r, step = log_errors(x), 1e-5
    jacobian = np.stack([(log_errors(x + step * e) - r) / step for e in np.eye(len(x))], axis=1)
    sigma = max(float(np.sqrt(r @ r / max(len(rows) - len(free), 1))), ROW_NOISE_FLOOR)
    spread = sigma * np.sqrt(np.diag(np.linalg.inv(jacobian.T @ jacobian + PRIOR_WEIGHT ** 2 * np.eye(len(x)))))
    prior_spread = sigma / PRIOR_WEIGHT
    return {n: Pinning(*sorted((from_free(n, v - s), from_free(n, v + s))), weak=bool(s > WEAKLY_PINNED * prior_spread))
            for n, v, s in zip(free, x, spread)}


def leave_one_out(engine: Engine, rows: list[Row], names: list[str]) -> np.ndarray:
    """predicted / measured - 1 of each row, by a fit of the others that starts from the engine's priors
    (a fitted engine's values saw every row, so starting there would leak the held-out one)."""
    prior, out = engine.prior(), []
    for i, row in enumerate(rows):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a left-out row may take away what pinned a parameter
            fitted = fit_engine(prior, rows[:i] + rows[i + 1:], names)
        out.append(errors([row], fitted)[0])
    return np.array(out)


def summary(rows: list[Row], errs: np.ndarray) -> dict:
    """Per family: the count, median and p90 of |predicted / measured - 1|."""
    out = {}
    for family in dict.fromkeys(row.family for row in rows):
        e = np.abs([err for row, err in zip(rows, errs) if row.family == family])
        out[family] = {"n": len(e), "median": float(np.median(e)), "p90": float(np.quantile(e, 0.9))}
    return out


def accuracy(engine: Engine, rows: list[Row]) -> dict:
    """How close an engine is to its rows, per family: the ideal bound's, in-sample and leave-one-out
    |predicted / measured - 1|, and each row's measured and leave-one-out predicted value ('points')."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a left-out row may take away what pinned a parameter
        held_out = leave_one_out(engine, rows, list(engine.fit))
    points = pd.DataFrame([{"label": f"{engine.name}: {row.family}", "measured": row.value,
                            "predicted": row.value * (1 + e)} for row, e in zip(rows, held_out)])
    return {"rows": len(rows), "ideal": summary(rows, errors(rows, Engine())),
            "in_sample": summary(rows, errors(rows, engine)), "leave_one_out": summary(rows, held_out),
            "points": points}
