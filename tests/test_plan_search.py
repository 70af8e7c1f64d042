"""`plan`'s search axes, closed forms, length distributions, percentile frontier and one-sentence verdicts."""
import json
import math
import re
from pathlib import Path

import pytest

from roofline.cli import main
from roofline.models.config import load_model
from roofline.deployment import Deployment
from roofline.engine import load_engine
from roofline.hardware import load_hardware
from roofline.planning.plan import Targets, Workload, plan, verdict
from roofline.planning import forms
from roofline.planning.search import core
from roofline.planning.workload import EXPONENTIAL, Lengths, lengths_from_csv, parse_lengths
from roofline.precision import Precision

WORK = Workload(rate=10, prompt=1024, gen=256)


@pytest.mark.parametrize("hw, tp, weights, tpot", [("h200", 4, "bf16", 0.015), ("h100-sxm", 8, "bf16", 0.015),
                                                   ("h100-sxm", 4, "bf16", 0.03), ("h100-sxm", 8, "int4", 0.02)])
def test_the_closed_form_largest_batch_agrees_with_the_search(hw, tp, weights, tpot):
    """Under the ideal engine (the sharp roofline the form assumes; a fitted engine's rounded corner is the
    search's alone), the form and the search's 1-D solve find the same batch."""
    c = core(load_model("llama-3.1-70b"), load_hardware(hw), tp, 1, 1, weights, "bf16", "ideal", WORK.prompt_mean,
             WORK.gen_mean, tpot, (8192,))
    assert 0 < c.best_batch < c.max_batch[8192]  # the target, not memory, sets the batch: the form must find it
    d = Deployment(load_model("llama-3.1-70b"), load_hardware(hw), Precision(weights=weights), tp=tp)
    form = forms.largest_batch(d, WORK.prompt_mean, WORK.gen_mean, tpot)
    assert form.value == c.best_batch
    if tpot == 0.015 and weights == "bf16":  # every op memory-bound there: the napkin's letters, kv(S) the model's
        assert form.expression == forms.NAPKIN and "kv(S)" in form.given and "S" in form.note


def test_the_napkin_form_would_catch_kv_sized_with_query_heads():
    d = Deployment(load_model("llama-3.1-70b"), load_hardware("h200"), tp=4)
    form = forms.largest_batch(d, 1024, 256, 0.015)
    given = form.given
    per_token = given["kv(S)"] / given["S"]
    assert per_token == 2 * 80 * (8 // 4) * 128 * 2  # K and V, 80 layers, 2 of the 8 KV heads per GPU, bf16
    wrong = (given["beta"] * (given["tau"] - given["t_f"]) - given["W"]) / (per_token * 8 * given["S"] + given["a"]
                                                                           + given["beta"] * given["c"])
    assert int(wrong) < form.value / 4  # query heads (64, not 8) would shrink the batch eightfold


def test_the_napkin_form_reads_the_cache_at_the_engines_attention_bandwidth():
    """An engine streams weights and the KV cache at different efficiencies: the form holds both rates, so its
    other per-sequence bytes `a` stay bytes (>= 0) and its numbers give the batch it states."""
    d = Deployment(load_model("llama-3.1-70b"), load_hardware("h200"), tp=4, engine=load_engine("tensorrt-llm-1"))
    form = forms.largest_batch(d, 2000, 500, 0.02)
    assert form.expression == forms.NAPKIN
    g = form.given
    assert g["beta_a"] != g["beta"] and g["a"] >= 0
    per_sequence = g["kv(S)"] * g["beta"] / g["beta_a"] + g["a"] + g["beta"] * g["c"]
    assert math.floor((g["beta"] * (g["tau"] - g["t_f"]) - g["W"]) / per_sequence) == form.value


def test_pipeline_expert_and_kv_axes_are_candidates_with_their_own_memory():
    frame = plan("llama-3.1-70b", WORK, Targets(1.0, 0.05), hardware=("h100-sxm",), tp=(2,), pp=(1, 2),
                 weights=("bf16",), kv=("bf16", "fp8"))
    rows = {(r.pp, r.kv): r for r in frame.itertuples()}
    assert rows[(2, "bf16")].max_batch > rows[(1, "bf16")].max_batch  # half the layers per GPU
    assert rows[(1, "fp8")].max_batch > 1.5 * rows[(1, "bf16")].max_batch  # half the KV bytes
    assert rows[(2, "bf16")].gpus % 4 == 0
    moe = plan("mixtral-8x7b", WORK, Targets(1.0, 0.05), hardware=("h100-sxm",), tp=(1,), ep=(1, 2, 3),
               weights=("bf16",))
    assert moe.loc[moe["ep"] == 3, "rejected"].iloc[0].startswith("layout")  # 3 does not divide 8 experts
    assert moe.loc[moe["ep"] == 2, "feasible"].iloc[0]


def test_batch_caps_and_prefill_chunks_clip_a_deployment_without_repricing_it():
    frame = plan("llama-3-8b", WORK, Targets(1.0, 0.05), hardware=("h100-sxm",), tp=(1,), weights=("bf16",),
                 max_batch=(None, 16), prefill_chunk=(512, 8192), disaggregated=False)
    assert len(frame) == 4
    capped = frame[frame["max_batch_cap"] == 16]
    assert (capped["capacity_batch"] == 16).all() and (capped["binding"] == "batch cap").all()
    free = frame[frame["max_batch_cap"].isna()].set_index("prefill_chunk")
    assert free.loc[512, "max_batch"] >= free.loc[8192, "max_batch"]  # a smaller chunk's workspace


def test_nothing_feasible_is_said_in_one_sentence_naming_the_reason():
    big = plan("llama-3.1-405b", WORK, Targets(1.0, 0.05), hardware=("h100-sxm",), tp=(1, 2, 4, 8), weights=("bf16",))
    sentence = verdict(big, Targets(1.0, 0.05), "llama-3.1-405b")
    assert sentence.startswith("llama-3.1-405b fits no candidate: even h100-sxm tp=8") and sentence.count(".") <= 2
    needed = int(re.search(r"needs (\d+) GB per GPU", sentence).group(1))
    assert 101 <= needed <= 104  # 810 GB of bf16 weights / 8, plus one sequence's KV and a prefill chunk
    fast = Targets(1.0, 1e-4)
    slow = plan("llama-3-8b", WORK, fast, hardware=("h100-sxm", "h200"), tp=(1, 8), weights=("bf16", "int4"))
    sentence = verdict(slow, fast)
    # under tensorrt-llm-1 an all-reduce is TensorRT-LLM's own kernel, ~4 us at batch 1 (its profile), and each layer
    # pays ~50 us whatever the split (8 ops x 6.2 us): eight H200s with int4 weights decode fastest (one did under a
    # 48 us all-reduce)
    assert sentence.startswith("No candidate meets TPOT 0.1 ms: the fastest decode step, h200 tp=8 int4")
    assert sentence.endswith("ms.") and "batch 1" in sentence


def test_lengths_are_fixed_exponential_or_sampled_and_the_search_uses_their_mean(tmp_path):
    assert parse_lengths("512", "--prompt") == Lengths("fixed", 512.0)
    assert parse_lengths("exp:300", "--gen").kind == EXPONENTIAL
    csv = tmp_path / "lengths.csv"
    csv.write_text("prompt,output\n100,10\n300,30\n")
    read = lambda path: open(path).read()  # noqa: E731
    assert parse_lengths(f"csv:{csv}:output", "--gen", read).mean == 20
    assert parse_lengths(f"csv:{csv}", "--prompt", read).mean == 200
    sampled = plan("llama-3-8b", Workload(5, parse_lengths(f"csv:{csv}", "--prompt", read), Lengths("exponential", 20)),
                   Targets(1.0, 0.05), hardware=("h100-sxm",), tp=(1,), weights=("bf16",))
    fixed = plan("llama-3-8b", Workload(5, 200, 20), Targets(1.0, 0.05), hardware=("h100-sxm",), tp=(1,),
                 weights=("bf16",))
    assert sampled["capacity_batch"][0] == fixed["capacity_batch"][0] and sampled["batch"][0] == fixed["batch"][0]


def test_a_bad_lengths_file_names_the_file_line_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("prompt\n120\nlots\n")
    with pytest.raises(ValueError, match=r"bad.csv, line 3, column 1: expected a whole number of tokens >= 1, got 'lots'"):
        lengths_from_csv(bad.read_text(), str(bad))
    with pytest.raises(ValueError, match="no column 'gen'"):
        lengths_from_csv(bad.read_text(), "bad.csv", "gen")
    assert main(["plan", "--prompt", f"csv:{bad}"]) == 2
    assert "line 3" in capsys.readouterr().err
    assert main(["plan", "--prompt", f"csv:{tmp_path / 'missing.csv'}"]) == 2
    assert "missing.csv: cannot read" in capsys.readouterr().err


def test_a_percentile_target_simulates_the_frontier_and_rejects_what_queueing_breaks():
    calls = []
    targets = Targets(0.5, 0.05, percentile=90)
    work = Workload(4, Lengths("exponential", 512), Lengths("exponential", 128))
    frame = plan("llama-3-8b", work, targets, hardware=("h100-sxm", "a100-80gb"), tp=(1, 2), weights=("bf16",),
                 frontier=1, requests=120, progress=lambda done, total: calls.append((done, total)))
    simulated = frame[frame["simulated"]]
    assert 2 <= len(simulated) <= 6 and calls and calls[-1][0] == calls[-1][1]
    kept = simulated[simulated["feasible"]]
    assert (kept["sim_ttft_s"] <= 0.5).all() and (kept["sim_tpot_s"] <= 0.05).all()
    # the mean under load is 86 ms (57 of it tensorrt-llm-1's request cost, the first pass's 259 ops dispatched
    # included); the p90 of exponential prompts, 111 ms
    tight = Targets(0.100, 0.05, percentile=90)
    frame = plan("llama-3-8b", work, tight, hardware=("h100-sxm",), tp=(1,), weights=("bf16",), frontier=1,
                 requests=120)
    reasons = frame.loc[frame["simulated"], "rejected"]
    assert reasons.str.startswith("simulated: TTFT p90").all() and len(reasons)


def test_plan_from_the_command_line_explains_and_exits_1_when_nothing_is_feasible(capsys):
    # TPOT 14 ms: the crossing lies on a piece where every op is memory-bound, so the napkin's letters are shown (at
    # 18 ms the profile refitted with its first-pass dispatch crosses at B = 131, 27% of its ops compute-bound: the
    # plain piece form)
    assert main(["plan", "--model", "llama-3.1-70b", "--hardware", "h200", "--tp", "4", "--weights", "bf16",
                 "--tpot", "0.014", "--explain", "--fast"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"Cheapest: \d+ x h200 tp=4 bf16/bf16 tensorrt-llm-1, \d+ requests in flight a replica", out)
    # the engine's rounded corner (p = 1.60 as last refitted) is slower than the sharp closed form: a smaller batch meets TPOT
    corner = f"{load_engine('tensorrt-llm-1').corner:.3g}"  # the profile's fitted p as the CLI prints it, whatever the refit
    sharp, rounded = re.search(r"B = floor\(.*?\) = (\d+).*?the search's (\d+) prices "
                               rf"tensorrt-llm-1's rounded roofline corner \(p = {corner}\)", out, re.S).groups()
    assert int(rounded) < int(sharp)
    assert "B = floor((-W + beta*(-t_f + tau))/(a + beta*c + beta*kv(S)/beta_a))" in out and "TP break-even" in out
    assert main(["plan", "--model", "llama-3-8b", "--tpot", "0.0001", "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert all(r["rejected"].startswith("TPOT") for r in rows)
    assert main(["plan", "--percentile", "100"]) == 2


def test_the_pareto_frontier_holds_every_deployment_no_other_beats_on_both_cost_and_tpot():
    from roofline.planning.plan import pareto
    frame = plan("llama-3.1-70b", WORK, Targets(1.0, 0.05), hardware=("h100-sxm", "h200", "a100-80gb"))
    kept = frame[frame["feasible"]]
    front = kept[pareto(frame)[frame["feasible"].to_numpy()]]
    assert 1 <= len(front) < len(kept)
    for _, row in kept.iterrows():
        beaten = ((kept["tpot_s"] <= row["tpot_s"]) & (kept["usd_per_million_tokens"] <= row["usd_per_million_tokens"])
                  & ((kept["tpot_s"] < row["tpot_s"]) | (kept["usd_per_million_tokens"] < row["usd_per_million_tokens"])))
        assert beaten.any() != (row.name in front.index)


def test_roofline_plan_is_the_public_function_and_its_module_still_imports():
    import roofline
    from roofline.planning.plan import Targets as T
    frame = roofline.plan("llama-3-8b", Workload(1, 128, 16), T(1.0, 0.05), hardware=("h100-sxm",), tp=(1,),
                          weights=("bf16",))
    assert frame["feasible"].all() and frame["gpus"].iloc[0] == 1


@pytest.mark.parametrize("axis, value, message", [("hardware", ("h100",), "hardware: unknown id 'h100'"),
                                                  ("weights", ("fp7",), "weights: unknown dtype 'fp7'"),
                                                  ("engines", ("vllm-9000",), "engine 'vllm-9000': unknown"),
                                                  ("tp", (), "tp: give at least one candidate")])
def test_a_bad_candidate_value_is_an_error_naming_the_axis_not_a_rejected_layout(axis, value, message):
    with pytest.raises(ValueError, match=message):
        plan("llama-3-8b", WORK, Targets(1.0, 0.05), **{axis: value})


def test_the_geometric_grid_and_its_bracket_find_the_same_batches_as_every_batch_at_once(monkeypatch):
    from roofline.planning import search
    args = ("llama-3-8b", Workload(10, 256, 64), Targets(1.0, 0.03))
    space = dict(hardware=("h100-sxm", "h200"), tp=(1, 2), weights=("bf16", "int4"), max_batch=(None, 100))
    whole = plan(*args, **space)
    assert whole["max_batch"].max() > 1000  # big enough for the geometric path to bracket
    monkeypatch.setattr(search, "WHOLE_GRID", 0)
    bracketed = plan(*args, **space)
    assert list(bracketed["capacity_batch"].fillna(-1)) == list(whole["capacity_batch"].fillna(-1))
    assert list(bracketed["tpot_s"]) == pytest.approx(list(whole["tpot_s"]), nan_ok=True)


def test_the_command_line_simulates_the_frontier_for_a_percentile(capsys):
    argv = ["plan", "--model", "llama-3-8b", "--rate", "4", "--prompt", "exp:512", "--gen", "exp:64", "--hardware",
            "h100-sxm", "--tp", "1", "--weights", "bf16", "--slo-percentile", "p90", "--requests", "80"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    # issue 21: the targets go through fmt_seconds (this read "TPOT 50 ms")
    assert "TPOT 50.0 ms (p90, simulated for the frontier)" in out and "sim_ttft_s" in out
    assert "prompt exponential mean 512" in out


def test_a_gpu_limit_rejects_deployments_that_need_more_and_says_so():
    work = Workload(40, 2000, 500)
    free = plan("llama-3.1-70b", work, Targets(1.0, 0.04), hardware=("h100-sxm",), weights=("bf16",))
    fewest = int(free["gpus"].min())
    limited = plan("llama-3.1-70b", work, Targets(1.0, 0.04), hardware=("h100-sxm",), weights=("bf16",),
                   max_gpus=fewest - 1)
    assert not limited["feasible"].any()
    assert verdict(limited, Targets(1.0, 0.04)).startswith(
        "No candidate serves the rate within the GPU limit: the fewest needed, h100-sxm ")  # one pool or two
    assert f"is {fewest} GPUs ({fewest - 1} allowed)" in verdict(limited, Targets(1.0, 0.04))


def test_a_device_from_a_json_file_is_planned_simulated_and_explained_under_its_own_id(tmp_path, capsys):
    entry = json.loads((Path(__file__).parents[1] / "data" / "hardware.json").read_text())["h100-sxm"]
    (tmp_path / "gpu.json").write_text(json.dumps({"my-gpu": entry}))
    (tmp_path / "prices.yaml").write_text("my-gpu: {usd_per_gpu_hour: 2.0}\n")
    argv = ["plan", "--model", "llama-3-8b", "--hardware", str(tmp_path / "gpu.json"), "--prices",
            str(tmp_path / "prices.yaml"), "--tp", "1", "--weights", "bf16", "--explain", "--percentile", "90",
            "--requests", "40", "--rate", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Cheapest: 1 x my-gpu tp=1" in out and "my-gpu tp=1 bf16/bf16 tensorrt-llm-1: capacity batch" in out
