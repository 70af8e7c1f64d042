"""An engine that batches the next step while one runs (TensorRT-LLM's overlap scheduler, roofline.scheduler
overlap_steps): worked by hand in the simulator, the steady state against the simulator, and the default unchanged."""
import dataclasses

import numpy as np
import pytest
import yaml

from roofline import load_hardware, load_model
from roofline.deployment import Deployment
from roofline.engine import ENGINES_DIR, load_engine
from roofline.scheduler import Scheduler, scheduler_from_document
from roofline.serving.batching import StepCost, Workload, simulate_continuous
from roofline.serving.load import LoadModel, Policy

MODEL, H100 = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
ENGINE = load_engine("tensorrt-llm")
OVERLAP = dataclasses.replace(ENGINE, scheduler=dataclasses.replace(ENGINE.scheduler, overlap_steps=1))
TRT, TRT_OVERLAP = Deployment(MODEL, H100, engine=ENGINE), Deployment(MODEL, H100, engine=OVERLAP)
BUDGET = 2048
REQUESTS, WARM = 3000, 300  # as tests/test_load.py: the first and last WARM requests see an emptier server


def test_tensorrt_llm_1_batches_one_step_ahead_and_other_engines_none():
    assert load_engine("tensorrt-llm-1").scheduler.overlap_steps == 1
    assert "disable_overlap_scheduler" in load_engine("tensorrt-llm-1").scheduler.sources["overlap_steps"]
    for name in ("vllm", "sglang", "tensorrt-llm", "ideal"):
        assert load_engine(name).scheduler.overlap_steps == 0
    # an engine file without the key reads 0, and writing a 0 back leaves the key out (vllm.yaml stays as it is)
    document = yaml.safe_load((ENGINES_DIR / "vllm.yaml").read_text())["scheduler"]
    assert "overlap_steps" not in scheduler_from_document(document, "vllm.yaml").as_document()


@pytest.mark.parametrize("steps", [-1, 1.5, True])
def test_a_bad_overlap_steps_names_the_key_and_the_fix(steps):
    with pytest.raises(ValueError, match=r"scheduler\.overlap_steps: .* fix: 0 or 1"):
        Scheduler(overlap_steps=steps)


def test_a_request_arriving_mid_step_joins_one_step_later_under_overlap_by_hand():
    # A (100 in, 4 out) arrives at an idle server at 0; B (100 in) arrives during A's first decode step (step 2).
    # Without overlap B prefills in step 3 beside A's decode; with it, step 3 was batched when step 2 started
    # (before B came), so B prefills in step 4 beside A's last decode.
    cost = StepCost(TRT)
    s1 = cost.iteration([], [(100, 100)])
    s2 = cost.iteration([101])
    work = lambda: Workload(np.array([0.0, s1 + s2 / 2]), np.array([100, 100]), np.array([4, 4]))  # noqa: E731
    plain = simulate_continuous(work(), cost, 8)
    ahead = simulate_continuous(work(), cost, 8, overlap_steps=1)
    assert plain.ttft_s[1] == pytest.approx(s2 / 2 + cost.iteration([102], [(100, 100)]), rel=1e-12)
    assert ahead.ttft_s[1] == pytest.approx(s2 / 2 + cost.iteration([102]) + cost.iteration([103], [(100, 100)]),
                                            rel=1e-12)
    assert ahead.ttft_s[0] == plain.ttft_s[0] == pytest.approx(s1, rel=1e-12)  # an idle engine batches at once


def test_the_steady_states_ttft_grows_by_one_mean_step_and_nothing_else_moves():
    plain, ahead = (LoadModel(d, 1000, 200, Policy(token_budget=BUDGET)) for d in (TRT, TRT_OVERLAP))
    rates = np.array([0.2, 0.5, 0.8]) * plain.saturation()
    a, b = plain.at_rate(rates), ahead.at_rate(rates)
    assert np.allclose(b["ttft_s"] - a["ttft_s"], a["step_s"], rtol=1e-12)
    assert np.allclose(b["ttft_scheduled_ahead_s"], a["step_s"], rtol=1e-12) and np.all(a["ttft_scheduled_ahead_s"] == 0)
    assert np.array_equal(a["tpot_s"], b["tpot_s"]) and np.array_equal(a["step_s"], b["step_s"])


@pytest.mark.parametrize("prompt, gen", [(512, 128), (3000, 200)])  # one chunk a prompt; two chunks a prompt
def test_the_steady_state_agrees_with_the_simulator_running_the_overlap_scheduler(prompt, gen):
    model = LoadModel(TRT_OVERLAP, prompt, gen, Policy(token_budget=BUDGET))
    top = model.saturation()
    for share in (0.2, 0.5, 0.8):
        rate = share * top
        arrivals = np.cumsum(np.random.default_rng(1).exponential(1 / rate, REQUESTS))
        work = Workload(arrivals, np.full(REQUESTS, prompt), np.full(REQUESTS, gen))
        sim = simulate_continuous(work, StepCost(TRT_OVERLAP), 256, chunk_tokens=BUDGET,
                                  request_overhead_s=OVERLAP.request_overhead_s, overlap_steps=1)
        steady, middle = model.at_rate([rate]), slice(WARM, REQUESTS - WARM)
        assert float(steady["tpot_s"][0]) == pytest.approx(float(np.mean(sim.tpot_s[middle])), rel=0.05), share
        assert float(steady["ttft_s"][0]) == pytest.approx(float(np.mean(sim.ttft_s[middle])), rel=0.05), share
