"""A closed-loop benchmark's start: C requests sent together at t = 0 to an idle server, and what that first wave
adds to the mean TTFT of a run of N requests.

The wave is prefilled FCFS under the token budget Tb, as the scheduler runs it (roofline.serving.batching): step j
carries the d_j wave members already past their prompt as decoders and up to Tb − d_j prompt tokens, oldest first;
member i (1..C) has its first token at the end of the step whose prompt tokens so far reach i·P, about
⌈i·P / (Tb − d)⌉ steps in, so the wave's mean TTFT is ~(C·P / Tb + 1) / 2 full steps. Stepped, not a closed form
(at most ⌈C·P / (Tb − C)⌉ + 1 steps), each priced by the load model's StepTable, so it is the steady state's step.
Over a run, TTFT = (C · wave mean + (N − C) · steady TTFT) / N: the later requests at the steady state's.
Left out: members that finish during the wave (they need a wave longer than G − 1 steps) and the waves after the
first, which the deterministic simulator keeps as cohorts (roofline.serving.batching, `clients`) and the serving
rows do not show (validation/README.md, "The closed loop").
"""
from __future__ import annotations

import math

import numpy as np


def first_wave(model, clients: int) -> np.ndarray:
    """Seconds from t = 0 to each of the first `clients` requests' first token (the engine's request cost included),
    the wave capped at what the scheduler runs at once (max_batch, the KV pool's sequences); `model` a
    roofline.serving.load.LoadModel (its step table, policy and workload)."""
    P, budget = model.P, model.policy.token_budget
    members = int(min(clients, model.policy.max_batch, model.policy.kv_sequences))
    chunks = math.ceil(P / budget)
    per_token = float(model.prefill_attention(np.array([chunks]))[0]) / P  # a prompt's attention, a token's share
    firsts: list = []
    now, prefilled = model.request_overhead_s, 0.0
    while len(firsts) < members:
        decoders = len(firsts)
        take = min(budget - decoders, members * P - prefilled)
        prompts = math.ceil((prefilled + take) / P) - math.floor(prefilled / P)  # prompts this step touches
        now += float(model.table.dense(float(decoders + prompts), float(decoders + take))
                     + (model.decoders_attention(float(decoders)) if decoders else 0.0) + take * per_token
                     + model.rank_excess(float(take), float(prompts)))
        prefilled += take
        firsts += [now] * (int(prefilled // P) - len(firsts))
    return np.array(firsts)


def run_mean_ttft(model, clients: float, requests: float, steady_ttft: float) -> float:
    """Mean TTFT over a run of `requests` requests from `clients` clients: the first wave at its own TTFT, the rest
    at the steady state's."""
    wave = first_wave(model, max(int(round(clients)), 1))
    members = len(wave)
    if requests <= members:
        return float(np.mean(wave[:max(int(requests), 1)]))
    return float((wave.sum() + (requests - members) * steady_ttft) / requests)
