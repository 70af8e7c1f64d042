"""Engine profiles fitted to serving rows under the load model, and scored on rows the fit never saw.

The rows are serving-hopper.csv's (roofline.fitting.published_serving): a closed-loop benchmark at a
concurrency, measured mean TTFT and TPOT. Each row's two errors, log(predicted / measured) of TTFT and of TPOT
under the steady state (published_serving.predict, the one path that prices them), go to the one fitter
(roofline.fitting.least_squares: bounded, a weak pull to each prior, a robust loss). A row the load model
cannot price under the prior (its KV pool holds no sequence) is left out of the fit and its scores.
Held out: leave-one-model-out (fit without a model's rows, predict them) and leave-one-device-out (fit on one
GPU's rows, predict the other's); a split where the rows hold one model (device) is not scored.
Hopper rows alone are fitted and scored: the same sample's Blackwell rows (b200, b300, gb200, gb300) are kept
aside to score transfer to a new generation (issue 24), whatever read_serving_rows returns.
"""
from __future__ import annotations

import dataclasses
from concurrent.futures import ProcessPoolExecutor
from typing import Callable

import numpy as np

from ..engine import Engine
from .engine_fit import pinned_formats
from .least_squares import Fitted, fit, get
from .published_serving import ServingRow, predict

METRICS = ("ttft", "tpot")
UNPRICED_PENALTY = 3.0  # a row the load model stops pricing mid-fit counts as e^3 ~ 20x off: never a reward
# The load model solves its steady state by bisection and interpolation (roofline.serving.load): its errors move
# smoothly over steps of ~1e-3 of a parameter, not ~1e-8 (scipy's default finite-difference step).
DIFF_STEP = 1e-3
TOLERANCE = 1e-4  # the fit stops once a step changes the cost or the parameters by under 0.01%
FIT_DEVICES = ("h100-sxm", "h200")  # Hopper; every other device's rows are kept aside, never fitted
SPLITS = {"leave_one_model_out": "model", "leave_one_device_out": "hardware"}


def _errors(rows: list[ServingRow], engine: Engine) -> np.ndarray:
    """log(predicted / measured): every row's TTFT, then every row's TPOT (NaN where not priced)."""
    predicted = predict(rows, engine)
    return np.concatenate([np.log(predicted[f"{m}_after"] / np.array([getattr(r, f"{m}_s") for r in rows]))
                           for m in METRICS])


def priced(rows: list[ServingRow], engine: Engine) -> list[ServingRow]:
    """The Hopper rows the load model prices under `engine` (the others' KV pool holds no sequence)."""
    rows = [r for r in rows if r.hardware in FIT_DEVICES]
    if not rows:
        return []
    errors = _errors(rows, engine).reshape(len(METRICS), -1)
    return [row for row, ok in zip(rows, np.isfinite(errors).all(axis=0)) if ok]


def log_errors(rows: list[ServingRow]) -> Callable[[Engine], np.ndarray]:
    """What the fit makes small: each row's log TTFT and log TPOT error."""
    return lambda engine: np.nan_to_num(_errors(rows, engine), nan=UNPRICED_PENALTY)


def fit_serving(prior: Engine, rows: list[ServingRow], names: list[str], note: str = "") -> Fitted:
    """`prior` with `names` fitted to `rows` (none: the prior), the pinning notes and first priors kept; a share
    keyed by a format none of the rows hold keeps its prior (a held-out fold without the format's one model)."""
    names = pinned_formats(names, rows)
    if not rows or not names:
        return Fitted(prior, {}, float("nan"))
    result = fit(prior, names, log_errors(rows), anchor={n: v for n, v in prior.priors.items() if n in names},
                 diff_step=DIFF_STEP, tolerance=TOLERANCE)
    note = note or f"{len(rows)} serving rows"
    priors = {**{n: get(prior, n) for n in names}, **prior.priors}
    engine = dataclasses.replace(result.engine, pinned_by={**prior.pinned_by, **{n: note for n in names}},
                                 priors=priors)
    return dataclasses.replace(result, engine=engine)


def held_out(rows: list[ServingRow], key: str, fit_rows: Callable[[list[ServingRow]], Engine] | None,
             fitted: dict | None = None) -> dict:
    """Each row predicted by an engine fitted without every row sharing its `key` (model, hardware):
    {'ttft_after', 'tpot_after'} arrays aligned with `rows`. `fitted`: those engines already fitted, by held-out value
    (folds), else each is fitted here."""
    out = {f"{m}_after": np.full(len(rows), np.nan) for m in METRICS}
    for value in dict.fromkeys(getattr(r, key) for r in rows):
        held = [i for i, r in enumerate(rows) if getattr(r, key) == value]
        engine = fitted[value] if fitted is not None else fit_rows([r for r in rows if getattr(r, key) != value])
        predicted = predict([rows[i] for i in held], engine)
        for name in out:
            out[name][held] = predicted[name]
    return out


def _refit(prior: Engine, names: list[str], subset: list[ServingRow]) -> Engine:
    """One fold's fit from the priors (a module-level function, so a worker process can run it)."""
    return fit_serving(prior, subset, names).engine if subset else prior


def folds(rows: list[ServingRow], prior: Engine, names: list[str], jobs: int = 1) -> dict:
    """Every held-out split's engines, {(split, held-out value): engine fitted without those rows}: the folds are
    independent fits, run `jobs` at a time in worker processes (1: here, one after another)."""
    tasks = {(split, value): [r for r in rows if getattr(r, key) != value]
             for split, key in SPLITS.items() if len({getattr(r, key) for r in rows}) > 1
             for value in dict.fromkeys(getattr(r, key) for r in rows)}
    if jobs == 1:
        return {fold: _refit(prior, names, subset) for fold, subset in tasks.items()}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {fold: pool.submit(_refit, prior, names, subset) for fold, subset in tasks.items()}
        return {fold: future.result() for fold, future in futures.items()}


def summary(rows: list[ServingRow], predicted: dict) -> dict:
    """Per metric: the count, median and p90 of |predicted / measured - 1| (rows priced)."""
    out = {}
    for m in METRICS:
        error = np.abs(predicted[f"{m}_after"] / np.array([getattr(r, f"{m}_s") for r in rows]) - 1)
        error = error[np.isfinite(error)]
        out[m] = {"n": int(error.size), "median": float(np.median(error)) if error.size else None,
                  "p90": float(np.quantile(error, 0.9)) if error.size else None}
    return out


def held_out_predictions(profile: Engine, rows: list[ServingRow], jobs: int = 1) -> tuple[list[ServingRow], dict]:
    """(the rows the profile's prior prices, kind -> predictions aligned with them): the prior's, in sample (the profile
    as shipped) and each held-out split's (None where the rows hold one model or one device), each split refitting
    from the profile's priors (its fitted values saw every row); `jobs` folds fitted at a time."""
    prior = profile.prior()
    chosen = priced(rows, prior)
    engines = folds(chosen, prior, list(profile.fit), jobs)
    predicted = {"prior": predict(chosen, prior), "in_sample": predict(chosen, profile)}
    for split, key in SPLITS.items():
        fitted = {value: engine for (name, value), engine in engines.items() if name == split}
        predicted[split] = held_out(chosen, key, None, fitted) if fitted else None
    return chosen, predicted


def serving_accuracy(profile: Engine, rows: list[ServingRow], jobs: int = 1,
                     predictions: tuple[list[ServingRow], dict] | None = None) -> dict:
    """A profile on its rows: each kind's scores (held_out_predictions; `predictions`: those already made)."""
    chosen, predicted = predictions or held_out_predictions(profile, rows, jobs)
    return {"rows": len(chosen), "unpriced": len(rows) - len(chosen),
            **{kind: None if p is None else summary(chosen, p) for kind, p in predicted.items()}}


def held_out_table(rows: list[ServingRow], predicted: dict) -> list[dict]:
    """One record a row: what it ran, measured TTFT and TPOT (ms), and each kind's prediction and its error
    (predicted / measured - 1; empty where a kind does not apply or a row is not priced): where the held-out
    scores' tails come from."""
    table = []
    for i, r in enumerate(rows):
        record = {"id": r.id, "backend": r.backend, "model": r.model, "hardware": r.hardware, "tp": r.tp, "ep": r.ep,
                  "concurrency": r.concurrency, "isl": r.prompt, "osl": r.gen,
                  "ttft_ms": round(r.ttft_s * 1e3, 4), "tpot_ms": round(r.tpot_s * 1e3, 4)}
        for kind, p in predicted.items():
            for m in METRICS:
                value = np.nan if p is None else float(p[f"{m}_after"][i])
                ok = np.isfinite(value)
                record[f"{m}_{kind}_ms"] = round(value * 1e3, 4) if ok else ""
                record[f"{m}_{kind}_error"] = round(value / getattr(r, f"{m}_s") - 1, 4) if ok else ""
        table.append(record)
    return table
