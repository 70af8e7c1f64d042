"""TensorRT-LLM's batch wait (roofline.serving.batch_wait): the hold worked by hand in its limits, the simulator's gate
by hand, the steady state against the simulator, the launch file's rule, and the measured rows that show the hold (20
decode steps at 1024 in and out below tp 8, none at tp 8 or 8192 out)."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from roofline import load_hardware, load_model
from roofline.deployment import Deployment
from roofline.engine import load_engine
from roofline.fitting.launches import LAUNCHES, read_launches
from roofline.fitting.published_serving import read_serving_rows
from roofline.serving.batch_wait import BatchWaitGate, batch_wait
from roofline.serving.batching import StepCost, Workload, engine_terms, simulate_continuous
from roofline.serving.load import LoadModel, Policy

SERVING_HOPPER = Path(__file__).resolve().parents[2] / "shared" / "published" / "serving-hopper.csv"
TRT = Deployment(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), engine=load_engine("tensorrt-llm-1"))
REQUESTS, WARM = 3000, 300  # as tests/test_load.py
LLAMA_70B = "2026_04_06_llama_3_1_70b_h200_sxm_trtllm_fp8_agg_{}_c{}_tp{}_ep1"


def test_the_hold_in_its_limits_and_closed_by_one_more_prompt_by_hand():
    step = 0.02  # 20 steps: a hold of Θ = 0.4 s at most
    # prompts rare: the first waits the whole hold, and runs alone
    wait, beside = batch_wait(1e-6, 20, 0.9, 16384, 922, step, decoders=4)
    assert float(wait) == pytest.approx(0.4, rel=1e-4) and float(beside) == pytest.approx(0.0, abs=1e-5)
    # r Tb − m = 500 − 10 = 490 tokens: two prompts of 300 close it, one more after the first. λ = 10/s, Θ = 0.3 s:
    # L = (1 − e^{−λΘ}) / λ, wait = L / (1 + λ L), beside it μ (2 + μ) / (1 + μ) for μ = λ L
    length = (1 - math.exp(-3)) / 10
    mu = 10 * length
    wait, beside = batch_wait(10.0, 3, 0.5, 1000, 300, 0.1, decoders=10)
    assert float(wait) == pytest.approx(length / (1 + mu), rel=1e-5)
    assert float(wait) == pytest.approx(0.048723, rel=1e-4)
    assert float(beside) == pytest.approx(mu * (2 + mu) / (1 + mu), rel=1e-5)
    # the first prompt reaches the tokens alone; a launch without the wait; nothing decoding; attention dp: no hold
    for args, kwargs in (((10.0, 3, 0.5, 1000, 600, 0.1), {"decoders": 10}),
                         ((10.0, 0, 0.9, 1000, 300, 0.1), {"decoders": 10}),
                         ((10.0, 3, 0.0, 1000, 300, 0.1), {"decoders": 10}),
                         ((10.0, 3, 0.5, 1000, 300, 0.1), {"decoders": 0}),
                         ((10.0, 3, 0.5, 1000, 300, 0.1), {"decoders": 10, "ranks": 8})):
        assert [float(x) for x in batch_wait(*args, **kwargs)] == [0.0, 0.0]


def test_the_simulators_gate_holds_prompts_for_the_timeout_or_the_tokens():
    gate = BatchWaitGate(steps=3, ratio=0.5, budget=1000)
    assert [gate.releases([100], 10) for _ in range(4)] == [False, False, False, True]  # 3 steps held, then run
    assert gate.releases([400, 200], 10)  # 610 tokens >= 500: run at once
    assert gate.releases([100], 0) and gate.releases([], 10)  # nothing decoding, or no prompt: nothing to hold
    assert BatchWaitGate(steps=3, ratio=0.5, budget=1000, ranks=2).releases([100], 10)  # attention dp: its own rule
    assert BatchWaitGate().releases([100], 10)  # off by default, as TensorRT-LLM's


@pytest.mark.parametrize("steps, ratio", [(-1, 0.9), (2.5, 0.9), (3, -0.1), (3, 1.5), (3, True)])
def test_a_batch_wait_that_is_not_one_is_refused_naming_the_field(steps, ratio):
    with pytest.raises(ValueError, match=r"batch_wait_(steps|ratio): .*fix: "):
        Policy(batch_wait_steps=steps, batch_wait_ratio=ratio)


@pytest.mark.parametrize("ratio", [0.9, 0.3])
@pytest.mark.parametrize("share", [0.1, 0.3])
def test_the_steady_state_agrees_with_the_simulator_holding_prompts(share, ratio):
    prompt, gen, budget = 1024, 256, 8192
    model = LoadModel(TRT, prompt, gen, Policy(token_budget=budget, batch_wait_steps=20, batch_wait_ratio=ratio))
    rate = share * model.saturation()
    arrivals = np.cumsum(np.random.default_rng(1).exponential(1 / rate, REQUESTS))
    terms = {k: v for k, v in engine_terms(TRT).items() if k != "front_end"}
    sim = simulate_continuous(Workload(arrivals, np.full(REQUESTS, prompt), np.full(REQUESTS, gen)), StepCost(TRT),
                              256, chunk_tokens=budget, batch_wait_steps=20, batch_wait_ratio=ratio, **terms)
    steady, middle = model.at_rate([rate]), slice(WARM, REQUESTS - WARM)
    assert float(steady["ttft_batch_wait_s"][0]) > 0.3 * float(steady["ttft_s"][0])  # the hold matters here
    # Released together, a hold's prompts make one long step that the steady state's Poisson chunk steps smear out:
    # at 0.6 of saturation and r 0.9 it reads 12% low in TTFT (2.5% in TPOT); a burst-aware step is not built
    assert float(steady["ttft_s"][0]) == pytest.approx(float(np.mean(sim.ttft_s[middle])), rel=0.05)
    assert float(steady["tpot_s"][0]) == pytest.approx(float(np.mean(sim.tpot_s[middle])), rel=0.03)


def test_the_launch_file_holds_llama_70b_prompts_at_1024_in_and_out_below_tp_8():
    launch = read_launches(LAUNCHES)[("trtllm", "meta-llama/Llama-3.1-70B", "h200_sxm", "2025-10-29")]
    assert [launch.batch_wait_at(1024, 1024, tp) for tp in (1, 2, 4, 8)] == [(20, 0.9)] * 3 + [(0, 0.0)]
    assert launch.batch_wait_at(1024, 8192, 1) == (0, 0.0) and launch.batch_wait_at(8192, 1024, 1) == (0, 0.0)
    held = {k for k, v in read_launches(LAUNCHES).items() if v.batch_wait is not None}
    assert {k[:2] for k in held} == {("trtllm", "meta-llama/Llama-3.1-70B")}  # no other script the rows ran sets one


@pytest.mark.parametrize("text", ["twenty steps", "0 steps or 0.9 of the budget", "20 steps or 1.5 of the budget",
                                  "20 steps or 0.9 of the budget at 1024 below tp 8"])
def test_a_bad_batch_wait_in_the_launch_file_is_refused_naming_the_line_and_field(tmp_path, text):
    line = {"backend": "trtllm", "model_path": "m", "system": "h200_sxm", "measured": "2025-10-29",
            "batch_wait": text, "script": "b.sh", "commit": "a" * 40, "evidence": "e"}
    columns = [*line, "kv_cache_dtype", "memory_fraction", "token_budget", "left_out", "length_ratio"]
    path = tmp_path / "bad.csv"
    path.write_text(",".join(columns) + "\n" + ",".join(line.get(c, "") for c in columns) + "\n")
    with pytest.raises(ValueError, match=r"line 2: field 'batch_wait' .*fix: e\.g\. '20 steps or 0\.9 of the budget'"):
        read_launches(path)


@pytest.mark.skipif(not SERVING_HOPPER.is_file(), reason="../shared/published/serving-hopper.csv not beside the repo")
def test_the_rows_show_a_hold_of_20_decode_steps_below_tp_8_and_none_at_tp_8():
    """TensorRT-LLM's Llama-3.3-70B fp8 on H200s: at C 4-16 a 1024 / 1024 prompt's TTFT exceeds a 1024 / 8192
    prompt's by 15-21 of its decode steps at tp 1, 2 and 4, where the script holds prompts 20 steps, and by none
    (within 5) at tp 8, where it does not. The hold's rows read it from the launch file."""
    rows = {r.id.rsplit("_", 1)[0]: r for r in read_serving_rows(SERVING_HOPPER)[0]}
    for tp in (1, 2, 4, 8):
        for concurrency in (4, 8, 16):
            held, free = (rows[LLAMA_70B.format(lengths, concurrency, tp)] for lengths in ("1024x1024", "1024x8192"))
            steps = (held.ttft_s - free.ttft_s) / held.tpot_s
            assert (15 <= steps <= 21) if tp < 8 else (abs(steps) <= 5), (tp, concurrency, steps)
            assert held.batch_wait == ((20, 0.9) if tp < 8 else (0, 0.0)) and free.batch_wait == (0, 0.0)


def test_analyze_under_load_holds_prompts_with_batch_wait_and_refuses_a_bad_one(capsys):
    from roofline.cli import main
    argv = ["analyze", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--engine", "tensorrt-llm-1",
            "--prompt", "1024", "--gen", "256", "--concurrency", "8", "--json"]
    assert main(argv) == 0
    free = json.loads(capsys.readouterr().out)[0]
    assert main([*argv, "--batch-wait", "20,0.9"]) == 0
    held = json.loads(capsys.readouterr().out)[0]
    assert free["ttft_batch_wait_s"] == 0.0
    # 8 in flight: prompts rare against 20 steps, so nearly the whole hold of 20 decode steps
    assert 15 * held["decode_step_s"] < held["ttft_batch_wait_s"] <= 20 * held["decode_step_s"]
    assert held["ttft_s"] > free["ttft_s"] + held["ttft_batch_wait_s"] * 0.9
    for bad in ("20", "20,1.5", "0,0.9"):
        assert main([*argv, "--batch-wait", bad]) == 2
        assert "--batch-wait: expected" in capsys.readouterr().err
