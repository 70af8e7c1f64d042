"""A closed loop at its steady state: C clients, each sending a request as its last one ends, none in step.

Requests of a closed loop fall out of step when nothing holds them together. Two ways, two arrival patterns:
  staggered  identical requests under a mixed-step scheduler (each prompt's chunks ride beside the others' decode
             steps, so they end a step apart): each arrives as a step ends and none waits below saturation (the closed
             loop's asymptotic bound, Denning & Buzen 1978: R(C) = max(D, C·D_max − Z), met with equality without
             variability). Measured: the CPU server's closed loop, TTFT past the first wave within 8% of the own
             prefill (validation/README.md, "The closed loop").
  random     requests whose output lengths differ (a benchmark drawing them at random, `--random-range-ratio` < 1,
             or real traffic; LoadModel's lengths_vary), under any scheduler: they end at unrelated steps, so the
             requests arrive as an open loop's do, and a prompt meets the step in progress and the prompts ahead of it
             (the open loop's residual and budget wait). The simulator, running the scheduler request by request
             with outputs drawn in [0.8 G, G], agrees (tests/test_prefill_first.py, tests/test_load.py).
Either way a request sees the other C − 1 in flight, never itself: the arrival theorem of mean-value analysis (Reiser
& Lavenberg 1980, exact for product-form networks; here an approximation the simulator checks). Its wait for the step
in progress and the prompts ahead, and the others' prompts riding in its own decode steps, are those of the open loop
at the rate where λ·E2E(λ) = C − 1 (Little); the loop completes C / E2E requests a second. Pricing the loop at the
rate where λ·E2E = C instead counts each request's own prompt among those it waits for and decodes beside: 4
clients of 8000-token prompts (Llama-3.1-8B, H100; tests/test_load.py) decode at 12.2 ms in the simulator, 12.7 here,
16.8 at the loop's own rate; over vllm's 306 random-length serving rows the TPOT is 0.8% / 3.0% (median / p90) from
the simulator's, 3.6% / 7.7% before (`python -m validation.closed_loop_sim`). Past the KV pool's sequences or the
budget's saturation the rest queue and TTFT grows by (C − held) / λ. A run of N requests adds its first wave, C sent
at t = 0 (roofline.serving.first_wave).
"""
from __future__ import annotations

import numpy as np

from .first_wave import run_mean_ttft

CURVE_POINTS = 512  # the open-loop curve the closed loop inverts


def steady_closed_loop(model, concurrency: np.ndarray, requests=None) -> dict:
    """LoadModel.at_concurrency's figures for a loop out of step (`model` a roofline.serving.load.LoadModel; random
    arrivals where its lengths_vary, else staggered): what a request sees at the others' rate, where λ·E2E(λ) = C − 1,
    the loop's own rate C / E2E, beyond the KV pool's the rest queue; `requests` (N a run, per C): TTFT is the run's
    mean, its first wave beside N − C at the steady state's."""
    staggered = not model.lengths_vary
    top = model.saturation(kv_limit=False)
    # λ·E2E is smooth in log-log but steep near saturation, where the wait grows: the curve's points crowd there too
    rates = np.unique(np.concatenate((np.geomspace(top * 1e-6, top, CURVE_POINTS),
                                      top * (1 - np.geomspace(0.1, 1e-4, CURVE_POINTS // 4)))))
    curve = model.at_rate(rates, closed_loop=staggered, kv_limit=False)
    valid = ~curve["saturated"]
    # staggered, a request never waits for the budget; at random, the wait is part of its time in flight
    waiting = curve["ttft_queue_s"] if staggered else 0.0
    in_flight = rates * (curve["e2e_s"] - waiting)
    held_max = np.nanmax(np.where(valid, in_flight, np.nan))
    held = np.minimum(concurrency, min(held_max, model.policy.kv_sequences))
    others = np.maximum(held - 1.0, 0.0)  # what a request of the loop sees (the arrival theorem, above)
    seen = np.exp(np.interp(np.log(np.maximum(others, 1e-300)), np.log(in_flight[valid]), np.log(rates[valid])))
    out = model.at_rate(seen, closed_loop=staggered, kv_limit=False)
    if staggered:
        for name in ("ttft_s", "e2e_s"):
            out[name] = out[name] - out["ttft_queue_s"]
        out["ttft_queue_s"] = np.zeros_like(out["ttft_queue_s"])
    # the loop's own rate, its `held` requests each E2E long, at most what full steps complete (the budget's saturation).
    # Held by the KV pool it may pass the open loop's saturation a little: that many always run, the open loop's vary
    rate = np.minimum(held / out["e2e_s"], top)
    out.update(rate=rate, goodput_requests_per_s=rate, goodput_tokens_per_s=rate * model.G)
    queued = concurrency - held
    # Little over the loop, C = rate x (the wait + E2E): (C − held) / rate below the cap
    wait = np.maximum(concurrency / rate - out["e2e_s"], 0.0)
    out["ttft_queue_s"] = out["ttft_queue_s"] + wait
    out["ttft_s"] = out["ttft_s"] + wait
    out["e2e_s"] = out["e2e_s"] + wait
    out.update(concurrency=concurrency, in_flight=held, queued=queued, ttft_steady_s=out["ttft_s"])
    if requests is not None:
        requests = np.broadcast_to(requests, concurrency.shape)
        run = [run_mean_ttft(model, c, n, t) if np.isfinite(t) else np.nan
               for c, n, t in zip(concurrency, requests, out["ttft_s"])]
        out["ttft_first_wave_s"] = np.array(run) - out["ttft_s"]  # what the start adds to the run's mean
        out["ttft_s"] = np.array(run)
    return out
