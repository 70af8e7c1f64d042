"""The disaggregation handoff (Engine.disagg_handoff_s) fitted to serving-hopper.csv's disaggregated rows, and
scored on rows the fit never saw.

What pins it: TTFT at low load. Where the modelled prefill pool is at most LOW_LOAD busy, M/D/1's wait is under a
quarter of one prefill, so what the measured TTFT holds beyond the modelled one (prefill, request cost, KV
transfer, that small wait) is the handoff. The value is the median of those rows' excess (one odd row moves a
median little), held within the parameter's bounds (roofline.engine.PARAMETERS). The TensorRT-LLM rows show an
excess of 0.2-0.6 s at the lowest concurrencies of a configuration, growing with concurrency well before the
modelled prefill queue does (to 1-5 s at 300-800 requests in flight): a constant handoff leaves that growth
unexplained. It is not a client counting one completion interval E2E / C into TTFT: the excess rises with C
(correlation with log C +0.57 over the 25 TensorRT-LLM rows) where E2E / C falls (-0.38).
Held out: leave-one-model-out and leave-one-configuration-out (the source's config_id: one deployment measured at
several concurrencies), each group priced with the value fitted on the other groups' low-load rows; a split
whose rows hold one group is not scored.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..engine import PARAMETERS, Engine
from .published_disagg import DisaggRow, predict

LOW_LOAD = 1 / 3  # prefill busy: the M/D/1 wait rho / 2(1 - rho) is then at most a quarter of one prefill
SPLITS = {"leave_one_model_out": "model", "leave_one_configuration_out": "configuration"}


def without_handoff(engine: Engine) -> Engine:
    return dataclasses.replace(engine, disagg_handoff_s=0.0)


def excess_at_low_load(rows: list[DisaggRow], engine: Engine) -> np.ndarray:
    """Per row: measured TTFT less the modelled TTFT without a handoff, seconds; NaN where the prefill pool is
    modelled more than LOW_LOAD busy or the row is not priced."""
    predicted = predict(rows, without_handoff(engine))
    excess = np.array([r.ttft_s for r in rows]) - predicted["ttft"]
    with np.errstate(invalid="ignore"):
        return np.where(predicted["prefill_busy"] <= LOW_LOAD, excess, np.nan)


def handoff_from(excess: np.ndarray) -> tuple[float, int]:
    """(the handoff the low-load rows' excess pins, seconds, or NaN where none; how many rows pin it)."""
    pinning = excess[np.isfinite(excess)]
    if not pinning.size:
        return math.nan, 0
    _, low, high, _ = PARAMETERS["disagg_handoff_s"]
    return float(np.clip(np.median(pinning), low, high)), int(pinning.size)


def fit_handoff(rows: list[DisaggRow], engine: Engine) -> tuple[float, int]:
    """The handoff `rows` pin under `engine`'s other parameters: (seconds, rows pinning it)."""
    return handoff_from(excess_at_low_load(rows, engine))


def held_out(rows: list[DisaggRow], engine: Engine, key: str) -> dict | None:
    """TTFT and TPOT of each row priced with the handoff fitted without every row sharing its `key`; None where
    the rows hold one value of it. A group whose other rows pin nothing is left unpriced (NaN)."""
    groups = list(dict.fromkeys(getattr(r, key) for r in rows))
    if len(groups) < 2:
        return None
    excess = excess_at_low_load(rows, engine)
    out = {name: np.full(len(rows), np.nan) for name in ("ttft", "tpot")}
    for group in groups:
        inside = np.array([getattr(r, key) == group for r in rows])
        value, pinning = handoff_from(excess[~inside])
        if not pinning:
            continue
        predicted = predict([r for r, i in zip(rows, inside) if i],
                            dataclasses.replace(engine, disagg_handoff_s=value))
        for name in out:
            out[name][inside] = predicted[name]
    return out
