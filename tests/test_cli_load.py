"""`roofline analyze --rate / --concurrency`: the library's steady state, saturation as words, bad loads as one line."""
import json

import numpy as np
import pytest

from roofline.cli import main
from roofline.models.config import load_model
from roofline.deployment import Deployment
from roofline.engine import load_engine
from roofline.hardware import load_hardware
from roofline.serving.load import LoadModel, Policy, kv_sequences

BASE = ["analyze", "--model", "llama-3.1-8b", "--engine", "tensorrt-llm", "--prompt", "1000", "--gen", "200"]


def run_json(capsys, *args) -> list[dict]:
    assert main([*BASE, *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_rate_rows_are_the_librarys_steady_state_and_past_saturation_carry_no_latency(capsys):
    rows = run_json(capsys, "--rate", "2,10,1000")
    d = Deployment(load_model("llama-3.1-8b"), load_hardware("h100-sxm"), engine=load_engine("tensorrt-llm"))
    model = LoadModel(d, 1000, 200, Policy(8192, 256, kv_sequences(d, 1000, 200)))
    expected = model.at_rate([2.0, 10.0])
    for row, ttft, tpot in zip(rows, expected["ttft_s"], expected["tpot_s"]):
        assert row["ttft_s"] == pytest.approx(ttft) and row["tpot_s"] == pytest.approx(tpot)
        assert not row["saturated"] and row["definitions"]["ttft_s"].startswith("arrival to first token")
    last = rows[-1]
    assert last["saturated"] and last["ttft_s"] is None and last["tpot_s"] is None
    assert last["note"] == f"saturated: the deployment serves at most {model.saturation():.4g} requests/s"


def test_the_table_says_saturated_in_words_and_the_offline_batch_says_so(capsys):
    assert main([*BASE, "--rate", "1000"]) == 0
    assert "saturated: the deployment serves at most" in capsys.readouterr().out
    assert main(BASE) == 0
    assert "offline batch" in capsys.readouterr().out


def test_concurrency_rows_hold_their_concurrency_by_littles_law(capsys):
    rows = run_json(capsys, "--concurrency", "1,16")
    for row, c in zip(rows, (1, 16)):
        assert row["rate"] * row["e2e_s"] == pytest.approx(c, rel=0.01)


def test_every_serving_profile_answers_a_closed_loop_in_the_same_keys(capsys):
    """In-flight batching (vllm, tensorrt-llm-1) prices a closed loop as a steady state, SGLang's prefill-first
    scheduler as a cohort: both answer in one vocabulary, the cohort's batch wait 0 (it holds no prompt back)."""
    keys = {}
    for engine in ("vllm", "tensorrt-llm-1", "sglang"):
        assert main(["analyze", "--model", "llama-3.1-8b", "--hardware", "h200", "--engine", engine, "--prompt",
                     "2000", "--gen", "100", "--concurrency", "8,80", "--requests", "800", "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        keys[engine] = {frozenset(row) for row in rows}
        assert all(row["ttft_s"] > row["ttft_prefill_s"] > 0 and row["tpot_s"] > 0 for row in rows), engine
    assert keys["vllm"] == keys["tensorrt-llm-1"] == keys["sglang"] and len(keys["sglang"]) == 1
    assert main(["analyze", "--model", "llama-3.1-8b", "--engine", "sglang", "--concurrency", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["ttft_batch_wait_s"] == 0.0


def test_requests_make_ttft_a_runs_mean_with_its_first_wave_and_replicas_share_the_run(capsys):
    steady = run_json(capsys, "--concurrency", "8,32")
    run = run_json(capsys, "--concurrency", "8,32", "--requests", "320")
    for alone, row in zip(steady, run):
        # the wave adds to TTFT alone: the steady state's TTFT is the run's less its first wave, TPOT untouched
        assert row["ttft_s"] - row["ttft_first_wave_s"] == pytest.approx(alone["ttft_s"], rel=1e-9)
        assert row["ttft_first_wave_s"] > 0 and row["tpot_s"] == alone["tpot_s"] and row["requests"] == 320
    # a longer run dilutes its one first wave: C = 32 sends its wave once in 320 requests, once in 3200
    longer = run_json(capsys, "--concurrency", "32", "--requests", "3200")[0]
    assert longer["ttft_first_wave_s"] < run[1]["ttft_first_wave_s"]
    # two replicas share the load and the run evenly: each is one replica's half
    half = run_json(capsys, "--concurrency", "16", "--requests", "160")[0]
    twice = run_json(capsys, "--concurrency", "32", "--requests", "320", "--replicas", "2")[0]
    assert twice["ttft_s"] == pytest.approx(half["ttft_s"]) and twice["rate"] == pytest.approx(2 * half["rate"])


def test_the_offline_batch_keeps_its_whole_batch_prefill_under_its_own_key(capsys):
    rows = run_json(capsys, "--batch", "4")
    assert rows[0]["prefill_batch_s"] == rows[0]["ttft_s"]


@pytest.mark.parametrize("args, flag", [
    (["--rate", "0"], "--rate"), (["--rate", "-1"], "--rate"), (["--rate", "inf"], "--rate"),
    (["--rate", "nan"], "--rate"), (["--rate", "abc"], "--rate"), (["--concurrency", "0"], "--concurrency"),
    (["--rate", "1", "--token-budget", "200"], "--token-budget"), (["--rate", "1", "--block-size", "0"], "--block-size"),
    (["--rate", "1", "--block-size", "-16"], "--block-size"), (["--rate", "1", "--concurrency", "4"], "--rate"),
    (["--rate", "1", "--requests", "40"], "--requests"), (["--concurrency", "8", "--requests", "4"], "--requests"),
    (["--concurrency", "8", "--requests", "8.5"], "--requests"),
])
def test_bad_load_input_exits_2_with_one_line_naming_the_flag(capsys, args, flag):
    assert main([*BASE, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"error: {flag}" in err


def test_explain_prints_the_closed_forms_with_their_numbers(capsys):
    assert main([*BASE, "--rate", "5", "--explain"]) == 0
    out = capsys.readouterr().out
    assert "λ_max = Tb / ((P + G − 1) τ_full)" in out and "m = λ (G − 1) τ̄" in out
    assert np.isfinite(float(out.split("m = λ (G − 1) τ̄ = ")[1].split()[0]))
