"""A candidate priced under load: the fewest replicas whose steady state at rate / replicas meets the targets.

Each replica runs the continuous-batching scheduler of roofline.serving.load (open loop, Poisson arrivals):
its token budget is the candidate's prefill chunk (TensorRT-LLM max_num_tokens, vLLM max_num_batched_tokens),
its running-sequence cap the capacity batch (the largest batch meeting TPOT at the mean context within memory:
what max_batch_size / max_num_seqs would be set to), its KV pool the sequences that fit (roofline.memory).
TTFT, TPOT and E2E are the load model's means at the offered rate per replica, so a replica that queues or
shares its steps with other prompts' chunks pays for it; `in_flight` is the mean requests a replica holds
(Little: rate x E2E). Every replica count from 1 to SEARCHED in one vectorized call; the fewest that meet
the targets wins (TTFT and TPOT fall as replicas are added, towards the lone request's).
Left out: what the load model leaves out (preemption, spread lengths: the percentile check simulates them).
"""
from __future__ import annotations

import math

import numpy as np

from ..deployment import Deployment
from ..serving.load import LoadModel, Policy

SEARCHED = 4  # replica counts tried: up to SEARCHED x the capacity formula's count (+ 16)


def policy_of(capacity_batch: int, kv_fit: int, chunk, prompt: int) -> Policy:
    """The scheduler a replica runs: the chunk as the token budget ('all': the prompt and the batch in one step),
    its steps filled as the engine fills them (Policy.for_engine: SGLang prefill first, the others mixed)."""
    budget = int(chunk) if chunk is not None else prompt + capacity_batch + 1
    budget = max(budget, 2)
    return Policy(token_budget=budget, max_batch=max(1, min(int(capacity_batch), budget - 1)),
                  kv_sequences=float(max(kv_fit, 1)))


def load_model(d: Deployment, work, policy: Policy) -> LoadModel:
    return LoadModel(d, max(int(round(work.prompt_mean)), 1), max(int(round(work.gen_mean)), 1), policy)


def at_replicas(model: LoadModel, rate: float, replicas: np.ndarray) -> dict:
    """The load model's steady state of one replica at rate / replicas, for each replica count."""
    return model.at_rate(rate / np.asarray(replicas, dtype=float))


def fewest_replicas(model: LoadModel, rate: float, targets, guess: int, fixed: int | None = None) -> dict:
    """{'replicas', 'ttft_s', 'tpot_s', 'e2e_s', 'in_flight'} of the fewest replicas meeting the targets (or
    exactly `fixed`), or {'rejected': the reason, at the most replicas tried} when none does."""
    counts = np.array([fixed]) if fixed is not None else np.arange(1, SEARCHED * max(guess, 1) + 17)
    state = at_replicas(model, rate, counts)
    ok = ~state["saturated"] & (state["ttft_s"] <= targets.ttft_s) & (state["tpot_s"] <= targets.tpot_s)
    if targets.e2e_s is not None:
        ok &= state["e2e_s"] <= targets.e2e_s
    pick = lambda i: {k: float(state[k][i]) for k in ("ttft_s", "tpot_s", "e2e_s", "in_flight")}  # noqa: E731
    if ok.any():
        i = int(np.flatnonzero(ok)[0])
        return {"replicas": int(counts[i]), **pick(i)}
    i = len(counts) - 1
    where = f"at {rate / counts[i]:.3g} requests/s a replica ({counts[i]} replicas)"
    if state["saturated"][i]:
        return {"rejected": f"TTFT: saturated under load {where}", "replicas": int(counts[i])}
    got = pick(i)
    for label, key, target in (("TTFT", "ttft_s", targets.ttft_s), ("TPOT", "tpot_s", targets.tpot_s),
                               ("E2E", "e2e_s", targets.e2e_s)):
        if target is not None and got[key] > target:
            shown = f"{got[key]:.2f} s > {target:g} s" if key == "e2e_s" else \
                f"{got[key] * 1e3:.1f} ms > {target * 1e3:g} ms"
            return {"rejected": f"{label}: {shown} under load {where}", **got, "replicas": int(counts[i])}
    return {"rejected": f"TTFT: no steady state {where}", "replicas": int(counts[i])}


def bound_at(ideal: Deployment | None, work, policy: Policy, rate_per_replica: float) -> dict:
    """The ideal engine's TTFT and TPOT for the same layout, scheduler and load: the bound beside a row (`policy`
    names its step policy: the candidate engine's, Policy.for_engine, not the ideal engine's own)."""
    if ideal is None or not math.isfinite(rate_per_replica):
        return {}
    state = load_model(ideal, work, policy).at_rate([rate_per_replica])
    return {"ideal_ttft_s": float(state["ttft_s"][0]), "ideal_tpot_s": float(state["tpot_s"][0])}
