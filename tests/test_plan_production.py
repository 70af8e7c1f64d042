"""`roofline plan` for production (issue 26): the achievable engine by default with the ideal bound beside it,
objectives and replicas as axes, and clean edges (context window, rate, JSON types, defined columns)."""
import json
import math
from pathlib import Path

import pytest

from roofline.cli import main
from roofline.cli.plan import COLUMNS, SHOWN
from roofline.planning.plan import DEFAULT_ENGINE, Targets, Workload, plan, verdict
from roofline.planning.workload import lengths_from_csv

WORK = Workload(rate=3, prompt=2000, gen=500)
TARGETS = Targets(ttft_s=1.0, tpot_s=0.04)
SPACE = dict(hardware=("h100-sxm", "h200"), tp=(2, 4, 8), weights=("bf16", "fp8"))


def test_ideal_is_a_bound_beside_every_row_never_a_candidate():
    with pytest.raises(ValueError, match="engines: 'ideal' is a bound, not a deployable engine"):
        plan("llama-3.1-70b", WORK, TARGETS, engines=("ideal", "tensorrt-llm"))
    frame = plan("llama-3.1-70b", WORK, TARGETS, **SPACE)
    kept = frame[frame["feasible"]]
    assert DEFAULT_ENGINE == "tensorrt-llm-1"  # the TensorRT-LLM 1.x profile fitted under load (README, roofline plan)
    assert set(kept["engine"]) == {DEFAULT_ENGINE} and f" {DEFAULT_ENGINE}, " in verdict(frame, TARGETS)
    # the bound is faster than what the engine achieves at the same layout and load, on every row
    assert (kept["ideal_tpot_s"] < kept["tpot_s"]).all() and (kept["ideal_ttft_s"] < kept["ttft_s"]).all()


def test_each_objective_ranks_by_its_own_measure():
    by_cost = plan("llama-3.1-70b", WORK, TARGETS, **SPACE)
    by_gpus = plan("llama-3.1-70b", WORK, TARGETS, objective="gpus", **SPACE)
    by_rate = plan("llama-3.1-70b", WORK, TARGETS, objective="throughput-per-gpu", **SPACE)
    kept = by_cost[by_cost["feasible"]]
    assert by_cost.iloc[0]["usd_per_million_tokens"] == kept["usd_per_million_tokens"].min()
    assert by_gpus.iloc[0]["gpus"] == kept["gpus"].min()
    assert by_rate.iloc[0]["capacity_tokens_per_s_per_gpu"] == kept["capacity_tokens_per_s_per_gpu"].max()
    assert verdict(by_gpus, TARGETS, objective="gpus").startswith("Fewest GPUs:")
    with pytest.raises(ValueError, match="objective: 'speed' is not one of cost, gpus, throughput-per-gpu"):
        plan("llama-3.1-70b", WORK, TARGETS, objective="speed", **SPACE)


def test_replicas_are_an_axis_and_the_fewest_meeting_the_targets_is_the_default():
    frame = plan("llama-3.1-70b", Workload(6, 2000, 500), TARGETS, hardware=("h100-sxm",), tp=(4,), weights=("fp8",),
                 replicas=(None, 1, 2, 3, 4))
    frame = frame[frame["mode"] == "aggregated"]  # the disaggregated pools beside it (one prefill, one decode worker)
    fewest = frame[frame["replicas_asked"].isna()].iloc[0]
    fixed = frame[frame["replicas_asked"].notna()].set_index("replicas_asked")
    meeting = fixed.index[fixed["feasible"]]
    assert fewest["feasible"] and fewest["replicas"] == min(meeting)
    assert fixed.loc[min(meeting), "ttft_s"] == pytest.approx(fewest["ttft_s"])
    # more replicas, less load on each: TTFT and TPOT fall towards the lone request's
    more = fixed.loc[[r for r in fixed.index if r >= min(meeting)]]
    assert more["ttft_s"].is_monotonic_decreasing and more["tpot_s"].is_monotonic_decreasing
    assert (more["ttft_s"] > more["ttft_alone_s"]).all()
    assert (fixed.loc[~fixed["feasible"], "rejected"].str.contains("under load")).all()
    assert (fixed["gpus"] == fixed.index * 4).all()


def test_the_context_window_is_enforced_and_a_file_beyond_it_is_named_by_line(tmp_path, capsys):
    long = Workload(1, 100_000, 500)
    with pytest.raises(ValueError, match="exceed the 8192-token context window of 'llama-3-8b'"):
        plan("llama-3-8b", long, Targets(60.0, 0.05), hardware=("h100-sxm",), tp=(8,), weights=("bf16",))
    beyond = plan("llama-3-8b", long, Targets(60.0, 0.05), hardware=("h100-sxm",), tp=(8,), weights=("bf16",),
                  allow_beyond_window=True, disaggregated=False)
    assert len(beyond) == 1
    prompts = tmp_path / "prompts.csv"
    prompts.write_text("prompt\n1000\n9000\n2000\n")
    assert main(["plan", "--model", "llama-3-8b", "--prompt", f"csv:{prompts}", "--fast"]) == 2
    err = capsys.readouterr().err
    assert f"{prompts}, line 3: prompt 9000 + gen 256" in err and err.count("\n") == 1
    assert lengths_from_csv(prompts.read_text(), "p.csv").lines == (2, 3, 4)


@pytest.mark.parametrize("rate", ["inf", "nan", "0", "-2"])
def test_a_rate_that_is_not_a_finite_positive_number_is_one_line_and_exit_2(rate, capsys):
    assert main(["plan", "--rate", rate, "--fast"]) == 2
    err = capsys.readouterr().err
    assert "--rate" in err or "rate:" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    with pytest.raises(ValueError, match="rate: must be a finite number"):
        Workload(float(rate), 100, 10).check()


def test_the_json_has_integers_as_integers_and_the_table_a_word_for_what_was_not_simulated(capsys):
    argv = ["plan", "--model", "llama-3-8b", "--rate", "4", "--hardware", "h100-sxm", "--tp", "1,2",
            "--weights", "bf16,fp8", "--requests", "60"]
    assert main(argv + ["--json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out) if r["feasible"]]
    for key in ("gpus", "replicas", "capacity_batch", "max_batch", "tp", "prefill_chunk"):
        assert all(isinstance(r[key], int) for r in rows), key
    assert any(r["sim_ttft_s"] is None for r in rows)  # null, never NaN
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "unsimulated" in out and "NaN" not in out and "nan" not in out


def test_fast_skips_the_simulation():
    argv = ["plan", "--model", "llama-3-8b", "--rate", "4", "--hardware", "h100-sxm", "--tp", "1", "--weights",
            "bf16", "--fast"]
    assert main(argv) == 0


def test_every_column_is_defined_in_the_help_and_the_readme(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    help_text = capsys.readouterr().out
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    defined = {name.strip() for names in COLUMNS for name in names.split(",")}
    for column in [*SHOWN, "sim_ttft_s", "sim_tpot_s", "ttft_alone_s", "e2e_s", "experts"]:
        assert column in defined, column
        assert f"`{column}`" in readme, column
    for names in COLUMNS:
        assert names in help_text


def test_the_load_model_sets_the_batch_not_the_capacity():
    frame = plan("llama-3.1-70b", WORK, TARGETS, **SPACE, disaggregated=False)  # one pool: batch is its in-flight
    kept = frame[frame["feasible"]]
    assert (kept["batch"] < kept["capacity_batch"]).all()
    little = WORK.rate / kept["replicas"] * (kept["ttft_s"] + (WORK.gen - 1) * kept["tpot_s"])
    assert list(kept["batch"]) == pytest.approx(list(little))
    assert not any(math.isnan(v) for v in kept["usd_per_million_tokens"])


def test_emit_writes_each_engines_launch_command_from_the_chosen_row():
    from roofline.planning.emit import launch_command
    row = {"hardware": "h100-sxm", "tp": 4, "pp": 1, "ep": 1, "capacity_batch": 149, "weights": "fp8", "kv": "fp8",
           "prefill_chunk": 8192, "replicas": 2}
    vllm = launch_command(row, "vllm", "meta-llama/Llama-3.1-70B-Instruct", 2500)
    assert ("vllm serve meta-llama/Llama-3.1-70B-Instruct --tensor-parallel-size 4 --pipeline-parallel-size 1 "
            "--max-num-seqs 149 --max-num-batched-tokens 8192 --kv-cache-dtype fp8 --quantization fp8 "
            "--gpu-memory-utilization 0.9 --max-model-len 2500") in vllm
    assert vllm.startswith("# 2 replicas of 4 x h100-sxm")
    sglang = launch_command(row, "sglang", "m", 2500)
    for flag in ("--tp 4", "--max-running-requests 149", "--chunked-prefill-size 8192", "--kv-cache-dtype fp8_e4m3",
                 "--quantization fp8", "--mem-fraction-static 0.9", "--context-length 2500"):
        assert flag in sglang
    trt = launch_command(row | {"ep": 2}, "trtllm", "m", 2500)
    assert "  dtype: fp8\n  free_gpu_memory_fraction: 0.9\n" in trt
    assert "trtllm-serve m --tp_size 4 --pp_size 1 --ep_size 2 --max_batch_size 149 --max_num_tokens 8192" in trt
    int4 = launch_command(row | {"weights": "int4", "kv": "bf16"}, "vllm", "m", 2500)
    assert "--quantization" not in int4 and "int4 checkpoint" in int4 and "--kv-cache-dtype auto" in int4
    with pytest.raises(ValueError, match="--emit sglang: its expert-parallel flag is not checked"):
        launch_command(row | {"ep": 2}, "sglang", "m", 2500)
    with pytest.raises(ValueError, match="--emit vllm: a int8 KV cache"):
        launch_command(row | {"kv": "int8"}, "vllm", "m", 2500)


def test_the_command_line_emits_the_best_rows_command(capsys):
    argv = ["plan", "--model", "llama-3-8b", "--rate", "4", "--hardware", "h100-sxm", "--tp", "1", "--weights",
            "bf16", "--fast", "--emit", "vllm"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "vllm serve llama-3-8b --tensor-parallel-size 1" in out and "--max-model-len 1280" in out
