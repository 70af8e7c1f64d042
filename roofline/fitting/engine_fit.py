"""Fit an engine's physical parameters to published (or a user's) measurements, and score them.

The parameters an engine's rows can pin are fitted (roofline.fitting.least_squares: scipy's least squares inside
each parameter's physical range, a weak pull to the prior, a robust loss, the Jacobian's 68% ranges); the
rest keep their prior values. Each row's error is log(predicted / measured) of the step pricer's metric.
A parameter whose range is still over half the prior's is flagged: other parameters trade against it,
and the prior holds a quarter or more of what the fit knows of it.
Accuracy: in-sample, and leave-one-out (each row predicted by a fit that never saw it).
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pandas as pd

from ..models.config import load_model
from ..engine import QUANTIZED, Engine, is_format_share
from .least_squares import Fitted, Pinning, fit, get, with_values
from .published import Row, errors

# The routed experts' own terms: only rows of a model with routed experts move them.
REQUEST_PARAMETERS = ("request_overhead_s", "request_op_overhead_s")  # paid once a request, in TTFT alone
# The server's front end (roofline.serving.front_end): only rows under load through a server pin it, the serving fit's
FRONT_END_PARAMETERS = ("frontend_request_s", "frontend_chunk_s")
EXPERT_PARAMETERS = ("expert_bandwidth_efficiency", "expert_flops_efficiency", "expert_layer_overhead_s",
                     "expert_slice_half_columns")

__all__ = ["Fitted", "Pinning", "get", "with_values", "identified", "pinned_formats", "fit_profile", "fit_engine", "pinning",
           "leave_one_out", "summary", "accuracy"]


def log_errors(rows: list[Row]):
    """log(predicted / measured) of each row under an engine: what the fit makes small."""
    return lambda engine: np.log(np.maximum(errors(rows, engine) + 1, 1e-9))


def identified(names: list[str], rows: list[Row]) -> list[str]:
    """The parameters these rows can move: a quantized format's efficiency needs a row in that format (an expert
    GEMM's format a row of a MoE model with its experts in it), an all-reduce latency a row on several GPUs (its
    growth a row on more than 2), an all-to-all's cost a row under expert parallelism, a request overhead a TTFT or
    throughput row; the front end's terms none of them (roofline.fitting.serving_fit fits those to rows under load)."""
    kept = []
    for name in pinned_formats(names, rows):
        if name == "allreduce_latency_s" and not any(row.tp > 1 for row in rows):
            continue
        if name == "allreduce_doubling_s" and not any(row.tp > 2 for row in rows):
            continue
        if name == "alltoall_overhead_s" and not any(getattr(row, "ep", 1) > 1 for row in rows):
            continue
        if name == "gqa_rereads" and not any(_grouped(row.model) for row in rows):
            continue
        if name in EXPERT_PARAMETERS and not any(load_model(row.model).n_experts for row in rows):
            continue
        if name in REQUEST_PARAMETERS and not any(row.metric != "decode_tokens_per_s" for row in rows):
            continue
        if name in FRONT_END_PARAMETERS:  # a published row is a lone request or a static batch
            continue
        kept.append(name)
    return kept


def pinned_formats(names: list[str], rows) -> list[str]:
    """`names` less the shares keyed by a format no row holds: a quantized GEMV's format among the rows' weights,
    an expert GEMM's among the routed experts' formats of the rows of a model with routed experts, decode
    attention's among the rows' KV formats, a GEMM dtype's among the rows' (published or serving rows: each has a
    model and a precision)."""
    held = {QUANTIZED: {row.precision.weights for row in rows},
            "expert_flops_efficiency": {row.precision.expert_format for row in rows if load_model(row.model).n_experts},
            "attention_bandwidth_efficiency": {row.precision.kv for row in rows},
            # a serving row's fp8 weights run W8A8 (published_serving._deployment): the weights' format counts
            "flops_efficiency": {f for row in rows for f in (row.precision.weights, row.precision.weight_matmul_dtype)}}
    return [name for name in names if not is_format_share(name) or name.split(".", 1)[1] in held[name.split(".")[0]]]


def _grouped(model: str) -> bool:
    config = load_model(model)
    return config.has_kv_heads and config.n_kv_heads < config.n_heads


def fit_profile(prior: Engine, rows: list[Row], names: list[str], pinned_note: str = "") -> Fitted:
    """The prior with `names` fitted to `rows`, and each one's 68% range; a parameter no row can move keeps
    its prior, with a warning."""
    free = identified(names, rows)
    for name in sorted(set(names) - set(free)):
        warnings.warn(f"engine {prior.name!r}: no row pins {name}; it keeps its prior {get(prior, name)!r}",
                      stacklevel=3)
    if not free or not rows:
        return Fitted(prior, {}, float("nan"))
    result = fit(prior, free, log_errors(rows), anchor={n: v for n, v in prior.priors.items() if n in free})
    note = pinned_note or f"{len(rows)} rows"
    priors = {**{n: get(prior, n) for n in free}, **prior.priors}  # the first prior stays the prior
    fitted = dataclasses.replace(result.engine, pinned_by={**prior.pinned_by, **{n: note for n in free}}, priors=priors)
    return dataclasses.replace(result, engine=fitted)


def fit_engine(prior: Engine, rows: list[Row], names: list[str], pinned_note: str = "") -> Engine:
    """The prior with `names` fitted to `rows` (fit_profile without the ranges)."""
    return fit_profile(prior, rows, names, pinned_note).engine


def pinning(engine: Engine, rows: list[Row], names: list[str]) -> dict[str, Pinning]:
    """How tightly `rows` pin each of `names` around a fitted engine's values: the fit restarted there."""
    free = identified(names, rows)
    if not free:
        return {}
    return fit(engine, free, log_errors(rows), anchor={n: v for n, v in engine.priors.items() if n in free}).ranges


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
