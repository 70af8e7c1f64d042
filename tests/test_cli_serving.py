"""`roofline speculate | crossovers | simulate`: the JSON contract, library agreement, and exit code 2 on bad input."""
import json
import math

import numpy as np
import pytest

from roofline.cli import main
from roofline.cli.serving import batch_trace
from roofline.serving.crossovers import saturation_batch
from roofline.serving.speculation import speculate
from roofline.deployment import Deployment


def run_json(capsys, *args) -> dict:
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    for key, value in out.items():
        for item in (sum(value, []) if key == "batch_trace" else [value]):  # the one list: [t_s, batch] pairs
            assert item is None or isinstance(item, (int, float, str, bool)), key
            assert not isinstance(item, float) or math.isfinite(item), key
    return out


def test_speculate_json_has_the_contract_keys_and_the_librarys_values(capsys):
    out = run_json(capsys, "speculate", "--model", "llama-2-13b", "--draft", "tinyllama-1.1b-chat-v1.0",
                   "--hardware", "h100-sxm", "--gamma", "5", "--alpha", "0.75", "--batch", "8", "--prompt", "2048")
    want = speculate(Deployment.of("llama-2-13b", "h100-sxm"), "tinyllama-1.1b-chat-v1.0", 5, 0.75, batch=8, prompt=2048)
    for key in ("expected_tokens_per_iteration", "iteration_s", "tpot_s", "speedup", "best_gamma"):
        assert out[key] == pytest.approx(getattr(want, key)), key
    assert out["expected_tokens_per_iteration"] == pytest.approx((1 - 0.75 ** 6) / 0.25)


def test_speculate_accepts_a_draft_cost_fraction(capsys):
    out = run_json(capsys, "speculate", "--model", "llama-2-7b", "--draft", "0.05", "--gamma", "2", "--alpha", "0.9")
    assert out["draft"] == 0.05 and out["speedup"] > 1


def test_crossovers_json_has_each_value_and_its_expression(capsys):
    out = run_json(capsys, "crossovers", "--model", "llama-2-13b", "--hardware", "h100-sxm", "--prompt", "2048")
    for key in ("critical_batch", "kv_equals_weights_context", "max_batch", "saturation_batch_90"):
        assert isinstance(out[key], (int, float)) and out[key] > 0, key
        assert isinstance(out[f"{key}_expression"], str) and "=" in out[f"{key}_expression"], key
    assert out["critical_batch"] == pytest.approx(989.4e12 / 3.35e12)
    assert out["saturation_batch_90"] == saturation_batch(Deployment.of("llama-2-13b", "h100-sxm"), prompt=2048).value


def test_crossovers_that_never_happen_are_null(capsys):
    out = run_json(capsys, "crossovers", "--model", "mistral-7b-v0.1")
    assert out["kv_equals_weights_context"] is None


def test_text_output_names_every_crossover(capsys):
    assert main(["crossovers", "--model", "llama-2-7b"]) == 0
    text = capsys.readouterr().out
    assert "critical_batch" in text and "saturation_batch_90" in text


@pytest.mark.parametrize("args, flag", [
    (["speculate", "--gamma", "0"], "--gamma"),
    (["speculate", "--gamma", "two"], "--gamma"),
    (["speculate", "--alpha", "1.2"], "--alpha"),
    (["speculate", "--alpha", "-0.1"], "--alpha"),
    (["speculate", "--draft", "0"], "--draft"),
    (["speculate", "--batch", "0"], "--batch"),
    (["crossovers", "--prompt", "-5"], "--prompt"),
    (["crossovers", "--kv", "int3"], "--kv"),
])
def test_bad_input_exits_2_with_one_line_naming_the_flag(capsys, args, flag):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert flag in err and err.count("\n") == 1


SIMULATE_KEYS = ("throughput_tokens_per_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "e2e_p50_s",
                 "e2e_p99_s", "max_concurrency")


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_simulate_json_has_the_contract_keys_and_is_reproducible_by_seed(capsys, policy):
    args = ("simulate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--rate", "15", "--requests", "300",
            "--policy", policy, "--block-size", "16", "--prompt-mean", "256", "--output-mean", "64", "--seed", "7")
    first, again = run_json(capsys, *args), run_json(capsys, *args)
    assert first == again
    for key in SIMULATE_KEYS:
        assert isinstance(first[key], (int, float)) and first[key] > 0, key
    assert first["ttft_p50_s"] <= first["ttft_p99_s"] and first["e2e_p50_s"] <= first["e2e_p99_s"]
    assert isinstance(first["max_concurrency"], int)


def test_simulate_matches_the_library(capsys):
    from roofline.serving.batching import poisson_workload, simulate
    out = run_json(capsys, "simulate", "--rate", "5", "--requests", "100", "--seed", "3")
    want = simulate(Deployment.of("llama-3.1-8b", "h100-sxm"), poisson_workload(100, 5.0, 512, 128, seed=3)).summary()
    assert out["throughput_tokens_per_s"] == pytest.approx(want["throughput_tokens_per_s"])
    assert out["e2e_p99_s"] == pytest.approx(want["e2e_p99_s"])


@pytest.mark.parametrize("args, flag", [
    (["simulate", "--rate", "0"], "--rate"),
    (["simulate", "--rate", "-3"], "--rate"),
    (["simulate", "--requests", "0"], "--requests"),
    (["simulate", "--policy", "fifo"], "--policy"),
    (["simulate", "--block-size", "0"], "--block-size"),
])
def test_bad_simulation_flags_exit_2(capsys, args, flag):
    assert main(args) == 2
    assert flag in capsys.readouterr().err


def test_batch_trace_keeps_each_runs_end_time_and_peak():
    times, batches = [1.0, 2.0, 3.0, 4.0, 5.0], [1, 3, 2, 5, 4]
    assert batch_trace(times, batches, points=2) == [[3.0, 3], [5.0, 5]]
    assert batch_trace(times, batches) == [[t, b] for t, b in zip(times, batches)]  # short traces stay whole


def test_simulate_json_carries_a_thinned_batch_trace_that_keeps_the_peak(capsys):
    from roofline.serving.batching import poisson_workload, simulate
    out = run_json(capsys, "simulate", "--rate", "20", "--requests", "200", "--output-mean", "64", "--seed", "4")
    result = simulate(Deployment.of("llama-3.1-8b", "h100-sxm"), poisson_workload(200, 20.0, 512, 64, seed=4))
    trace = np.array(out["batch_trace"])
    assert len(result.trace_s) > 200 == len(trace)
    assert np.all(np.diff(trace[:, 0]) > 0) and trace[-1, 0] == pytest.approx(result.trace_s[-1])
    assert trace[:, 1].max() == out["max_concurrency"] == result.trace_batch.max()
    small = run_json(capsys, "simulate", "--requests", "3", "--output-mean", "8", "--seed", "1")
    result = simulate(Deployment.of("llama-3.1-8b", "h100-sxm"), poisson_workload(3, 10.0, 512, 8, seed=1))
    assert small["batch_trace"] == [[pytest.approx(t), int(b)] for t, b in zip(result.trace_s, result.trace_batch)]


def test_parallel_json_is_the_pipeline_library_result(capsys):
    from roofline.serving.pipeline import analyze_pipeline
    out = run_json(capsys, "parallel", "--model", "llama-2-70b", "--tp", "2", "--pp", "4", "--microbatches", "4",
                   "--batch", "32", "--prompt", "2048", "--gen", "256")
    want = analyze_pipeline(Deployment.of("llama-2-70b", "h100-sxm", pp=4, tp=2), microbatches=4, batch=32, prompt=2048, gen=256)
    for key in ("per_gpu_memory_bytes", "tpot_s", "tokens_per_s", "bubble_fraction", "comm_s", "pass_bubble_fraction"):
        assert out[key] == pytest.approx(getattr(want, key)), key
    assert out["gpus"] == 8 and out["experts_touched_per_gpu"] is None


def test_parallel_json_spreads_experts_when_asked(capsys):
    from roofline.serving.expert_parallel import analyze_expert_parallel
    out = run_json(capsys, "parallel", "--model", "mixtral-8x7b", "--ep", "4", "--batch", "16")
    want = analyze_expert_parallel(Deployment.of("mixtral-8x7b", "h100-sxm", ep=4), batch=16)
    for key in ("per_gpu_memory_bytes", "tpot_s", "comm_s", "experts_touched_per_gpu", "alltoall_bytes"):
        assert out[key] == pytest.approx(getattr(want, key)), key
    assert out["gpus"] == 4 and out["bubble_fraction"] == 0 and out["transfer_s"] is None


@pytest.mark.parametrize("args, flag", [
    (["parallel", "--pp", "0"], "--pp"),
    (["parallel", "--microbatches", "3", "--batch", "8"], "microbatches"),
    (["parallel", "--model", "mixtral-8x7b", "--ep", "2", "--tp", "2"], "--ep"),
    (["parallel", "--ep", "2"], "MoE"),
])
def test_bad_parallel_flags_exit_2(capsys, args, flag):
    assert main(args) == 2
    assert flag in capsys.readouterr().err
