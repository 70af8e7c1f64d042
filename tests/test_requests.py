"""Requests checked against the model and the machine (issue 15): nothing impossible is answered silently,
and figures say their scope."""
import json

import pytest

from roofline import analyze, load_model, speculate
from roofline.serving.batching import MAX_REQUESTS, poisson_workload
from roofline.cli import main
from roofline.deployment import Deployment


@pytest.mark.parametrize("model, prompt, window", [
    ("llama-2-13b", 1_000_000_000, 4096),  # printed a TTFT of 414,000,000 s
    ("gpt2", 5000, 1024),  # learned positions: n_positions
    ("llama-3.1-8b", 131072, 131072),  # rope-scaled (llama3, x8): 131072 positions, and prompt + gen exceeds it
])
def test_a_context_beyond_the_window_is_refused_naming_the_window_and_the_override(model, prompt, window):
    with pytest.raises(ValueError, match=rf"exceed the {window}-token context window.*allow_beyond_window"):
        analyze(model, "h100-sxm", prompt=prompt, gen=128)


def test_rope_scaling_extends_the_window_and_the_override_prices_beyond_it():
    assert load_model("llama-3.1-8b").max_positions == 131072 and load_model("llama-3-8b").max_positions == 8192
    assert load_model("deepseek-v3").max_positions == 163840  # yarn: 40 x 4096
    analyze("llama-3.1-8b", "h100-sxm", prompt=120_000, gen=128)  # inside the scaled window: no error
    row = analyze("llama-2-13b", "h100-sxm", prompt=8192, gen=128, allow_beyond_window=True).metrics.iloc[0]
    assert row["ttft_s"] > 0


def test_yarn_without_an_original_length_scales_max_position_embeddings():
    from roofline.models.config import ModelConfig, MODELS_DIR
    raw = json.loads((MODELS_DIR / "qwen2.5-7b-instruct.json").read_text())
    raw["rope_scaling"] = {"type": "yarn", "factor": 4.0}
    assert ModelConfig.from_hf_config(raw).max_positions == 4 * 32768


@pytest.mark.parametrize("args", [
    ["analyze", "--prompt", "1000000000"],
    ["analyze", "--model", "gpt2", "--prompt", "5000"],
    ["crossovers", "--prompt", "5000"],
    ["speculate", "--prompt", "5000"],
    ["parallel", "--prompt", "5000"],
    ["simulate", "--model", "llama-2-7b", "--prompt-mean", "5000", "--requests", "10"],
])
def test_the_cli_refuses_a_context_beyond_the_window_with_exit_2(capsys, args):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "context window" in err and "--allow-beyond-window" in err, err


def test_allow_beyond_window_prices_it(capsys):
    assert main(["analyze", "--prompt", "8192", "--batch", "1", "--allow-beyond-window", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["prompt_len"] == 8192


def test_speculation_refuses_a_draft_with_another_vocabulary():
    with pytest.raises(ValueError, match="draft: 'gpt2' has a 50257-token vocabulary.*32000.*fix:"):
        speculate(Deployment.of("llama-2-70b", "h100-sxm"), "gpt2", 4, 0.8)


def test_speculation_refuses_a_draft_not_smaller_than_the_target():
    with pytest.raises(ValueError, match="not smaller than the target.*fix:"):
        speculate(Deployment.of("llama-2-13b", "h100-sxm"), "llama-2-70b", 4, 0.8)
    with pytest.raises(ValueError, match="not smaller"):
        speculate(Deployment.of("llama-2-7b", "h100-sxm"), "llama-2-7b", 4, 0.8)


def test_a_best_gamma_at_the_search_cap_says_so(capsys):
    capped = speculate(Deployment.of("llama-2-70b", "h100-sxm"), 0.01, 4, 0.9)
    assert capped.best_gamma == 16 and capped.best_gamma_is_search_cap
    inside = speculate(Deployment.of("llama-2-70b", "h100-sxm"), 0.01, 4, 0.9, max_gamma=64)
    assert 16 < inside.best_gamma < 64 and not inside.best_gamma_is_search_cap
    assert not speculate(Deployment.of("llama-2-70b", "h100-sxm"), "llama-2-7b", 4, 0.8).best_gamma_is_search_cap
    assert main(["speculate", "--draft", "0.01", "--alpha", "0.99"]) == 0
    assert "16 is the search cap" in capsys.readouterr().out


def test_simulate_uses_prompt_as_the_mean_prompt_and_echoes_the_workload(capsys):
    assert main(["simulate", "--prompt", "64", "--output-mean", "8", "--requests", "50", "--rate", "1", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["prompt_mean"] == 64 and record["output_mean"] == 8 and record["requests"] == 50
    assert main(["simulate", "--prompt", "64", "--output-mean", "8", "--requests", "50", "--rate", "1"]) == 0
    out = capsys.readouterr().out
    assert "prompt mean 64" in out and "output mean 8" in out and "overloaded" not in out


def test_simulate_warns_when_arrivals_exceed_capacity(capsys):
    args = ["simulate", "--requests", "400", "--rate", "400", "--max-batch", "8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "WARNING          overloaded" in out and "offered" in out
    assert main([*args, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["overloaded"] is True and record["throughput_tokens_per_s"] < 0.5 * record["offered_tokens_per_s"]


def test_simulate_bounds_the_number_of_requests(capsys):
    with pytest.raises(ValueError, match=f"at most {MAX_REQUESTS}"):
        poisson_workload(MAX_REQUESTS + 1, 10.0)
    assert main(["simulate", "--requests", "10000000"]) == 2
    assert f"at most {MAX_REQUESTS}" in capsys.readouterr().err


def test_tensor_parallel_sizes_are_labelled_per_gpu_and_in_total(capsys):
    assert main(["analyze", "--model", "llama-2-70b", "--tp", "4", "--replicas", "2", "--batch", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    single = analyze("llama-2-70b", "h100-sxm", batch=[1]).metrics.iloc[0]
    assert row["params_total"] == single["params"] and row["params_per_gpu"] == row["params"] < single["params"] / 3.9
    assert row["weight_bytes_total"] == pytest.approx(2 * single["weight_bytes"])
    assert row["memory_bytes_total"] == pytest.approx(8 * row["memory_bytes_per_gpu"])
    assert main(["analyze", "--model", "llama-2-70b", "--tp", "4", "--replicas", "2", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "per GPU" in out and "68.98 B in the model, 17.25 B per GPU" in out and "memory/GPU" in out
    assert "tensor parallel 4 x 2 replicas = 8 GPUs" in out and "batch x 2 replicas / TPOT" in out


@pytest.mark.parametrize("model, prompt, gen", [("llama-2-13b", 1024, 128), ("llama-2-13b", 1024, 2048),
                                                 ("llama-3.1-8b", 8192, 512), ("deepseek-v2-lite", 2048, 1)])
def test_crossovers_and_analyze_agree_on_max_batch_for_the_same_workload(capsys, model, prompt, gen):
    common = ["--model", model, "--prompt", str(prompt), "--gen", str(gen), "--json"]
    assert main(["crossovers", *common]) == 0
    crossed = json.loads(capsys.readouterr().out)
    assert main(["analyze", "--batch", "1", *common]) == 0
    analyzed = json.loads(capsys.readouterr().out)[0]
    assert crossed["gen"] == gen and crossed["max_batch"] == analyzed["max_batch"] > 0


def test_crossovers_default_gen_is_analyzes(capsys):
    assert main(["crossovers", "--json"]) == 0
    crossed = json.loads(capsys.readouterr().out)
    assert main(["analyze", "--batch", "1", "--json"]) == 0
    assert crossed["max_batch"] == json.loads(capsys.readouterr().out)[0]["max_batch"]


def test_the_moe_critical_batch_counts_tokens_per_touched_expert():
    from roofline import load_hardware
    from roofline.serving.crossovers import critical_batch, expert_critical_batch
    hw, config = load_hardware("h100-sxm"), load_model("deepseek-v3")
    dense = critical_batch(Deployment(config, hw))
    experts = expert_critical_batch(Deployment(config, hw))
    b, e, top = experts.value, config.n_experts, config.top_k

    def per_expert(batch):
        return batch * top / (e * (1 - (1 - top / e) ** batch))

    assert per_expert(b) >= dense.value > per_expert(b - 1)  # the first batch whose experts cross
    assert b > 25 * dense.value  # 8 of 256 experts: ~E/k = 32 times the dense figure, not the dense figure
    assert "expert_critical_batch" in dense.note
    assert not critical_batch(Deployment(load_model("llama-2-13b"), hw)).note


def test_crossovers_lists_the_expert_critical_batch_for_moe_models_only(capsys):
    assert main(["crossovers", "--model", "deepseek-v3", "--weights", "fp8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["expert_critical_batch"] > 1000
    assert main(["crossovers", "--json"]) == 0
    assert "expert_critical_batch" not in json.loads(capsys.readouterr().out)


def test_the_report_gives_an_moe_model_its_expert_critical_batch():
    from roofline.serving.crossovers import expert_critical_batch
    from roofline.study.report import build_study
    study = build_study("mixtral-8x7b", ["h200"], batch=[1], plots=False)
    rows = study.devices[0].crossovers.set_index("quantity")["value"]
    expert = rows.filter(like="expert critical batch")
    assert len(expert) == 1
    assert expert.iloc[0] == expert_critical_batch(Deployment.of("mixtral-8x7b", "h200")).value
    dense = build_study("llama-2-13b", ["h100-sxm"], batch=[1], plots=False).devices[0].crossovers
    assert not dense["quantity"].str.contains("expert critical").any()


def test_simulate_reports_progress_as_requests_complete():
    from roofline.serving.batching import simulate
    seen = []
    for policy in ("continuous", "static"):
        seen.clear()
        simulate(Deployment.of("llama-3.1-8b", "h100-sxm"), poisson_workload(60, 20.0, 64, 8), policy,
                 progress=lambda done, total: seen.append((done, total)))
        assert seen[-1] == (60, 60) and all(b[0] >= a[0] for a, b in zip(seen, seen[1:])), policy
