"""The disaggregated rows' closed loop read from their own measurements: what the queue does once the pricer's
prefill and decode steps are replaced by what the rows measured.

Little's law on a closed loop of C requests gives each row's rate, λ = C / (TTFT + (G − 1) TPOT), and one prefill
worker's share λ / x. A configuration whose rate stops growing with C has a saturated prefill pool, and there λ / x
is one worker's prefill throughput: the most requests/s a worker held, per engine, model, device and prompt, is that
throughput where the rows saturate a worker (a lower bound where they do not). `with_measured` reprices a row's pools
with it and the row's own TPOT in place of the pricer's steps (the same Disaggregated, two inputs changed), so what is
left is roofline.serving.disaggregated's queueing and its constants (request cost, handoff, KV transfer).
A worker is priced as one server at that throughput (`servers` 1: a prompt's own prefill 1 / throughput), or as ep
attention data-parallel ranks each serving whole requests (`servers` ep: a prompt's own prefill the whole step of ep
prompts, ep / throughput), the two readings PrefillPool can take.
"""
from __future__ import annotations

import copy

import numpy as np

from ..engine import Engine
from ..serving.disaggregated import Disaggregated
from .published_disagg import DisaggRow, price


def measured_rate(row: DisaggRow) -> float:
    """Requests/s the row's closed loop completed: C / E2E, E2E = TTFT + (G − 1) TPOT as measured."""
    return row.concurrency / (row.ttft_s + (row.gen - 1) * row.tpot_s)


def worker_throughput(rows: list[DisaggRow]) -> dict[tuple, float]:
    """{(backend, model, hardware, prompt): the most requests/s one prefill worker held in any row}."""
    most: dict[tuple, float] = {}
    for row in rows:
        key = (row.backend, row.model, row.hardware, row.prompt)
        most[key] = max(most.get(key, 0.0), measured_rate(row) / row.prefill.workers)
    return most


def priced_throughput(rows: list[DisaggRow], engine: Engine) -> dict[tuple, float]:
    """{(backend, model, hardware, prompt, prefill tp, prefill ep): requests/s the pricer's step lets one prefill
    worker of the rows' layouts hold}."""
    priced = {}
    for row in rows:
        key = (row.backend, row.model, row.hardware, row.prompt, row.prefill.tp, row.prefill.ep)
        pools = None if key in priced else price(row, engine)
        if pools is not None:
            priced[key] = pools.prefill_pool.saturation()
    return priced


def with_measured(pools: Disaggregated, worker_rate: float, tpot_s: float, servers: int = 1) -> Disaggregated:
    """`pools` with each prefill worker holding `worker_rate` requests/s over `servers` servers (a request in
    servers / worker_rate seconds) and every decode step taking `tpot_s`."""
    prefill, decode = copy.copy(pools.prefill_pool), copy.copy(pools.decode_pool)
    prefill.servers, prefill.service_s = int(servers), servers / worker_rate
    decode.step_s = np.full_like(decode.step_s, tpot_s)
    measured = copy.copy(pools)
    measured.prefill_pool, measured.decode_pool = prefill, decode
    return measured


def predict_measured(rows: list[DisaggRow], engine: Engine, per_rank: bool = False) -> dict[str, np.ndarray]:
    """Per row: TTFT (s) at its concurrency with the measured worker throughput and the row's TPOT, and how busy the
    prefill pool is; one server a worker, or (`per_rank`) ep servers a worker; NaN where the row is not priced (and
    TPOT, an input here, NaN: nothing predicted)."""
    throughput = worker_throughput(rows)
    out = {name: np.full(len(rows), np.nan) for name in ("ttft", "tpot", "prefill_busy")}
    for i, row in enumerate(rows):
        pools = price(row, engine)
        if pools is None:
            continue
        servers = row.prefill.ep if per_rank else 1
        rate = throughput[(row.backend, row.model, row.hardware, row.prompt)]
        state = with_measured(pools, rate, row.tpot_s, servers).at_concurrency([float(row.concurrency)])
        out["ttft"][i], out["prefill_busy"][i] = state["ttft_s"][0], state["prefill_busy"][0]
    return out
