"""A closed-loop benchmark's start (roofline.serving.first_wave) against the simulator's closed loop, and the run's mean."""
import numpy as np
import pytest

from roofline import load_hardware, load_model
from roofline.deployment import Deployment
from roofline.engine import load_engine
from roofline.serving.batching import StepCost, Workload, simulate_continuous
from roofline.serving.first_wave import first_wave, run_mean_ttft
from roofline.serving.load import LoadModel, Policy
from roofline.serving.mixed_step import mixed_step_seconds

TRT = Deployment(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), engine=load_engine("tensorrt-llm"))
BUDGET, GEN = 2048, 200


def simulated_first_wave(prompt: int, clients: int) -> np.ndarray:
    """The simulator's closed loop of `clients`, its first `clients` requests' TTFT."""
    requests = 2 * clients
    work = Workload(np.zeros(requests), np.full(requests, prompt), np.full(requests, GEN))
    result = simulate_continuous(work, StepCost(TRT), 256, chunk_tokens=BUDGET, clients=clients,
                                 request_overhead_s=TRT.engine.request_overhead_s)
    return result.ttft_s[:clients]


@pytest.mark.parametrize("prompt", [512, 3000])  # whole prompts a step; every prompt in two chunks
@pytest.mark.parametrize("clients", [1, 4, 16, 48])
def test_the_first_wave_is_the_simulators_first_c_requests(prompt, clients):
    model = LoadModel(TRT, prompt, GEN, Policy(BUDGET))
    wave = first_wave(model, clients)
    assert len(wave) == clients
    assert wave == pytest.approx(simulated_first_wave(prompt, clients), rel=0.02)


def test_a_wave_of_one_is_a_lone_prefill_and_of_four_whole_prompts_one_step_by_hand():
    model = LoadModel(TRT, 512, GEN, Policy(BUDGET))
    lone = TRT.engine.request_overhead_s + mixed_step_seconds(TRT, [], [(512, 512)])
    assert first_wave(model, 1) == pytest.approx([lone], rel=0.005)
    # 4 x 512 = the budget: all four in the first step, one step of four prompts
    together = TRT.engine.request_overhead_s + mixed_step_seconds(TRT, [], [(512, 512)] * 4)
    assert first_wave(model, 4) == pytest.approx([together] * 4, rel=0.005)
    # 8 prompts: the first 4 in step 1; step 2 carries them as decoders and 2044 tokens: 3 prompts and 500 of the 8th
    eight = first_wave(model, 8)
    assert eight[:4] == pytest.approx([together] * 4, rel=0.005) and eight[4] == eight[6] > eight[3]
    assert eight[7] > eight[6]


def test_a_runs_mean_ttft_weighs_the_first_wave_by_c_over_n():
    model = LoadModel(TRT, 3000, GEN, Policy(BUDGET))
    clients = 16
    wave = first_wave(model, clients)
    steady = float(model.at_concurrency([clients])["ttft_s"][0])
    assert wave.mean() > 2 * steady  # 16 prompts of 3000 queue behind a 2048-token budget: ~12 steps, ~23 for the last
    for requests in (16, 160, 1600):
        out = model.at_concurrency([clients], [requests])
        expected = (wave.sum() + (requests - clients) * steady) / requests
        assert float(out["ttft_s"][0]) == pytest.approx(expected, rel=1e-9)
        assert float(out["ttft_first_wave_s"][0]) == pytest.approx(expected - steady, rel=1e-9)
    assert run_mean_ttft(model, clients, clients, steady) == pytest.approx(wave.mean())


def test_a_lone_client_never_waits_for_the_budget_the_arrival_theorem():
    """A closed-loop request arrives to the other C − 1 (mean value analysis): one client finds the server empty.
    The open-loop M/D/1 wait at the same rate, which the closed loop priced before, is above zero."""
    model = LoadModel(TRT, 3000, GEN, Policy(BUDGET))
    one = model.at_concurrency([1.0])
    # (what is left: the open loop's wait at the curve's lowest rate, a request in ~10^6 in flight)
    assert float(one["ttft_queue_s"][0]) < 1e-4 * float(one["ttft_s"][0])
    assert float(model.at_rate(one["rate"], closed_loop=True)["ttft_queue_s"][0]) > 0.01 * float(one["ttft_s"][0])
    many = model.at_concurrency([8.0, 32.0])
    assert np.all(many["ttft_queue_s"] > 0)
    assert many["rate"] * many["e2e_s"] == pytest.approx([8.0, 32.0], rel=1e-3)  # Little's law still holds
