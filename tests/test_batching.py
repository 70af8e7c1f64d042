"""Batching simulations against hand-enumerated schedules, the library's single-request metrics, and invariants."""
import dataclasses
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import Precision, load_hardware, load_model
from roofline.serving.batching import StepCost, Workload, poisson_workload, simulate, simulate_continuous, simulate_static
from roofline.deployment import Deployment
from roofline.engine import load_engine
from roofline.evaluate import evaluate

MODEL, H100 = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
COST = StepCost(Deployment(MODEL, H100))


def work(arrivals, prompts, outputs) -> Workload:
    return Workload(np.array(arrivals, dtype=float), np.array(prompts), np.array(outputs))


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_a_lone_request_gets_the_librarys_ttft_and_e2e(policy):
    result = simulate(Deployment.of(MODEL, H100), work([0.0], [700], [50]), policy)
    lib = evaluate(Deployment(MODEL, H100, Precision()), 1.0, 700.0, 50.0)
    assert result.ttft_s[0] == pytest.approx(float(lib["ttft_s"]), rel=1e-9)
    assert result.e2e_s[0] == pytest.approx(float(lib["e2e_s"]), rel=1e-3)  # contexts bucketed to 16 tokens


def test_static_schedule_matches_a_hand_enumeration():
    w = work([0.0, 0.0, 0.0], [10, 20, 30], [2, 5, 3])
    result = simulate_static(w, COST, max_batch=2)
    t_first = COST.iteration((), [(20, 20)] * 2)  # requests 0, 1 padded to 20 prompt tokens
    t_end = t_first + sum(COST.iteration([20 + j] * 2) for j in range(1, 5))  # until the longest output (5)
    t_second = t_end + COST.iteration((), [(30, 30)])
    t_done = t_second + sum(COST.iteration([30 + j]) for j in range(1, 3))
    assert np.allclose(result.ttft_s, [t_first, t_first, t_second])
    assert np.allclose(result.e2e_s, [t_end, t_end, t_done])
    padding = (20 - 10) + (5 - 2) + 0  # prompt slots of request 0, decode slots of request 0
    assert result.padded_fraction == pytest.approx(padding / (2 * 25 + 1 * 33))


def test_continuous_schedule_matches_a_hand_enumeration():
    w = work([0.0, 1e-9], [8, 4], [3, 3])
    result = simulate_continuous(w, COST, max_batch=8)
    t1 = COST.iteration((), [(8, 8)])  # A prefills alone: B has not arrived when the step starts
    t2 = t1 + COST.iteration([9], [(4, 4)])  # A decodes at 9 keys while B prefills
    t3 = t2 + COST.iteration([10, 5])  # both decode; A's third token ends it
    t4 = t3 + COST.iteration([6])
    assert np.allclose(result.ttft_s, [t1, t2 - 1e-9])
    assert np.allclose(result.e2e_s, [t3, t4 - 1e-9])
    assert list(result.trace_batch) == [1, 2, 2, 1]


def test_a_closed_loop_sends_each_request_as_one_ends_and_its_cohorts_stay_together():
    """Two clients, identical requests: both prompts share a step, both end in the same step, and the two sent
    then share a step again (a serving benchmark's fixed concurrency keeps its cohorts); arrivals are ignored."""
    w = work([5.0, 6.0, 7.0, 8.0, 9.0], [8] * 5, [2] * 5)
    result = simulate_continuous(w, COST, max_batch=8, clients=2)
    prefill, decode = COST.iteration((), [(8, 8)] * 2), COST.iteration([9, 9])
    cycle = prefill + decode
    lone = COST.iteration((), [(8, 8)]) + COST.iteration([9])  # the fifth request, its partner never sent
    assert np.allclose(result.ttft_s, [prefill] * 4 + [COST.iteration((), [(8, 8)])])
    assert np.allclose(result.e2e_s, [cycle] * 4 + [lone])
    assert result.makespan_s == pytest.approx(2 * cycle + lone) and list(result.trace_batch) == [2, 2] * 2 + [1, 1]


def test_continuous_batching_beats_static_under_load():
    w = poisson_workload(400, 20.0, 256, 64, seed=2)
    static, continuous = (simulate(Deployment.of(MODEL, H100), w, policy).summary() for policy in ("static", "continuous"))
    assert continuous["throughput_tokens_per_s"] > static["throughput_tokens_per_s"]
    assert continuous["ttft_p99_s"] < static["ttft_p99_s"] and continuous["e2e_p50_s"] < static["e2e_p50_s"]


def test_chunked_prefill_keeps_every_iteration_within_its_token_budget_and_smooths_tpot():
    w = poisson_workload(300, 8.0, 2000, 64, seed=4)
    plain = simulate(Deployment.of(MODEL, H100), w, chunk_tokens=None)
    chunked = simulate(Deployment.of(MODEL, H100), w, chunk_tokens=512)
    assert np.percentile(chunked.tpot_s[np.isfinite(chunked.tpot_s)], 99) < np.percentile(
        plain.tpot_s[np.isfinite(plain.tpot_s)], 99)
    assert chunked.output_tokens == plain.output_tokens


def test_paged_blocks_admit_more_sequences_than_contiguous_max_length_reservations():
    # ~2 GB of KV after the weights and the runtime's 1 GiB (a device with no CUDA-reported figure: its datasheet's)
    small = dataclasses.replace(H100, memory_bytes=19e9, usable_memory_bytes=None)
    w = poisson_workload(300, 50.0, 300, 100, seed=5)
    paged = simulate(Deployment.of(MODEL, small), w, block_size=16)
    contiguous = simulate(Deployment.of(MODEL, small), w, block_size=None)
    assert paged.trace_batch.max() > contiguous.trace_batch.max()
    assert paged.throughput_tokens_per_s > contiguous.throughput_tokens_per_s


def test_thousands_of_requests_simulate_in_seconds():
    start = time.perf_counter()
    result = simulate(Deployment.of(MODEL, H100), poisson_workload(3000, 30.0, 512, 128, seed=6))
    assert time.perf_counter() - start < 10 and result.e2e_s.size == 3000


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 0.05), st.integers(1, 300), st.integers(1, 40)), min_size=1, max_size=12),
       st.integers(1, 6))
def test_every_request_finishes_after_its_first_token_and_each_iteration_serves_one_token_per_sequence(rows, cap):
    gaps, prompts, outputs = zip(*rows)
    w = work(np.cumsum(gaps), prompts, outputs)
    for result in (simulate_continuous(w, COST, cap), simulate_static(w, COST, cap)):
        assert np.all(result.ttft_s > 0) and np.all(result.e2e_s >= result.ttft_s)
        assert result.trace_batch.max() <= cap
    continuous = simulate_continuous(w, COST, cap)
    assert continuous.trace_batch.sum() == sum(outputs)  # one prefill iteration + (output - 1) decode iterations


@pytest.mark.parametrize("call, field", [
    (lambda: poisson_workload(10, 0.0), "rate"),
    (lambda: poisson_workload(10, -1.0), "rate"),
    (lambda: poisson_workload(0, 1.0), "requests"),
    (lambda: simulate(Deployment.of(MODEL, H100), work([0], [5], [5]), "fifo"), "policy"),
    (lambda: simulate(Deployment.of(MODEL, H100), work([0], [5], [5]), block_size=0), "block_size"),
    (lambda: simulate(Deployment.of("llama-2-70b", H100), work([0], [5], [5])), "memory"),
])
def test_bad_simulation_input_is_a_clear_error(call, field):
    with pytest.raises(ValueError, match=field):
        call()


def test_simulate_pays_the_engines_request_cost_once_a_request():
    engine = load_engine("tensorrt-llm-1")
    work = Workload(np.array([0.0, 100.0]), np.array([512, 512]), np.array([8, 8]))  # two lone requests
    paid = simulate(Deployment(MODEL, H100, engine=engine), work)
    free = simulate(Deployment(MODEL, H100, engine=dataclasses.replace(engine, request_overhead_s=0.0)), work)
    assert paid.ttft_s - free.ttft_s == pytest.approx([engine.request_overhead_s] * 2, rel=1e-9)
    assert np.allclose(paid.tpot_s, free.tpot_s)
