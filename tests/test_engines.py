"""Engine profiles: bounded physical parameters, priced through the Deployment, fitted to published rows."""
import dataclasses
import json
import warnings

import numpy as np
import pytest
import yaml

import roofline
from roofline.cli import main
from roofline.deployment import Deployment
from roofline.engine import Engine, load_engine
from roofline.fitting.engine_fit import fit_engine, get, leave_one_out, pinning, summary
from roofline.evaluate import evaluate
from roofline.hardware import load_hardware
from roofline.models.config import load_model
from roofline.fitting.published import read_rows

A100 = load_hardware("a100-80gb")
GPT_FAST_LIKE = Engine(name="truth", framework="gpt-fast", bandwidth_efficiency=0.7, layer_overhead_s=20e-6,
                       allreduce_latency_s=15e-6, quantized_efficiency={"int8": 0.75, "int4": 0.5})


def test_the_ideal_engine_changes_no_number_and_names_itself():
    plain = roofline.analyze("llama-2-7b", "h100-sxm", batch=[1, 64]).metrics
    ideal = roofline.analyze("llama-2-7b", "h100-sxm", batch=[1, 64], engine="ideal").metrics
    assert plain.drop(columns="engine").equals(ideal.drop(columns="engine"))
    assert (ideal["engine"] == "ideal").all() and (ideal["ideal_tpot_s"] == ideal["tpot_s"]).all()


def test_an_engine_is_slower_than_the_ideal_bound_and_keeps_the_bound_beside_it():
    m = roofline.analyze("llama-2-7b", "a100-80gb", batch=[1, 64], engine="gpt-fast").metrics
    assert (m["tpot_s"] > m["ideal_tpot_s"]).all() and (m["ttft_s"] > m["ideal_ttft_s"]).all()
    assert (m["engine"] == "gpt-fast").all()


def test_each_engine_term_reaches_the_step_where_it_belongs():
    model = load_model("llama-2-7b")

    def metrics(engine, tp=1):
        return evaluate(Deployment(model, A100, tp=tp, engine=engine), 1, 512, 16, parallel_columns=True)
    base = metrics(Engine(name="base", bandwidth_efficiency=0.8))
    request = metrics(Engine(name="request", bandwidth_efficiency=0.8, request_overhead_s=0.01))
    assert float(request["ttft_s"] - base["ttft_s"]) == pytest.approx(0.01) and request["tpot_s"] == base["tpot_s"]
    layers = metrics(Engine(name="layers", bandwidth_efficiency=0.8, layer_overhead_s=10e-6))
    assert float(layers["tpot_s"] - base["tpot_s"]) == pytest.approx(32 * 10e-6)
    slow_link = metrics(Engine(name="link", bandwidth_efficiency=0.8, allreduce_latency_s=100e-6), tp=2)
    fast_link = metrics(Engine(name="link", bandwidth_efficiency=0.8, allreduce_latency_s=10e-6), tp=2)
    assert float(slow_link["comm_s"] - fast_link["comm_s"]) == pytest.approx(2 * 32 * 90e-6)
    int4 = Deployment(model, A100, roofline.Precision(weights="int4"), engine=Engine(
        name="q", bandwidth_efficiency=0.8, quantized_efficiency={"int4": 0.5}))
    assert int4.roofs.bandwidth == pytest.approx(0.4 * A100.memory_bandwidth)


def test_gqa_rereads_read_the_cache_once_per_query_head_at_one():
    """Decode attention's memory time, by hand: L layers x B·S keys x 2·K·H values x 2 bytes, read 1 + r(N/K − 1)
    times at the engine's attention bandwidth. Llama-2-70B has N/K = 8; Llama-2-7B (MHA) has no group to re-read."""
    batch, context = 16, 2049
    for name, group in (("llama-2-70b", 8), ("llama-2-7b", 1)):
        model = load_model(name)
        cache = model.n_layers * batch * context * 2 * model.n_kv_heads * model.head_dim * 2 / (0.8 * A100.memory_bandwidth)

        def attention_memory_s(rereads, model=model):
            engine = Engine(name="g", attention_bandwidth_efficiency=0.8, gqa_rereads=rereads)
            step = Deployment(model, A100, engine=engine).step("decode", batch, context)
            [row] = [i for i, op in enumerate(step.ops) if op.op == "attention"]
            return float(step.memory_s[row])
        once = attention_memory_s(0.0)
        assert once == pytest.approx(cache, rel=0.01)  # the rest: reading Q, writing O
        for rereads in (0.5, 1.0):
            assert attention_memory_s(rereads) - once == pytest.approx(once * rereads * (group - 1), rel=1e-9)


def test_gqa_rereads_slow_softmax_attention_and_leave_constant_state_scans_alone():
    """Nemotron-Nano-9B-v2 has both: 4 attention layers of 40 query heads over 8 KV heads (a group of 5) and
    27 Mamba-2 layers, whose state is read once a step whatever the engine's attention kernel does."""
    model = load_model("nemotron-nano-9b-v2")

    def memory_s(rereads):
        step = Deployment(model, A100, engine=Engine(name="g", attention_bandwidth_efficiency=0.8,
                                                     gqa_rereads=rereads)).step("decode", 16, 4097)
        return {op.op: float(t) for op, t in zip(step.ops, step.memory_s) if op.op in ("attention", "ssd_scan")}
    once, per_head = memory_s(0.0), memory_s(1.0)
    assert per_head["attention"] == pytest.approx(once["attention"] * 5)
    assert per_head["ssd_scan"] == once["ssd_scan"]


def test_the_corner_rounds_the_roofline_where_compute_and_memory_meet():
    """p = 1: an op takes compute + memory (no overlap); p = inf: the sharp roofline's max."""
    model = load_model("llama-2-7b")

    def step(corner):
        return Deployment(model, A100, engine=Engine(name="c", flops_efficiency=0.9, corner=corner)).step(
            "prefill", 1, 128)
    sharp, none, soft = step(float("inf")), step(1.0), step(2.0)
    c, m = np.array(sharp.compute_s[:-1], dtype=float), np.array(sharp.memory_s[:-1], dtype=float)
    assert np.array(none.time_s[:-1], dtype=float) == pytest.approx(c + m)
    assert np.array(soft.time_s[:-1], dtype=float) == pytest.approx(np.hypot(c, m))
    assert float(sharp.total_s) < float(soft.total_s) < float(none.total_s)


def test_the_deprecated_calibration_flag_is_an_engine_alias_and_refused_beside_engine(capsys):
    assert main(["analyze", "--hardware", "cpu", "--calibration", "cpu-amd-epyc-2-threads", "--json"]) == 0
    captured = capsys.readouterr()
    aliased = json.loads(captured.out)[0]
    assert "deprecated" in captured.err and "--engine harness-cpu" in captured.err
    assert main(["analyze", "--hardware", "cpu", "--engine", "harness-cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0] == aliased and aliased["engine"] == "harness-cpu"
    assert main(["analyze", "--calibration", "default", "--engine", "gpt-fast"]) == 2
    assert "give --engine only" in capsys.readouterr().err


def test_a_bad_engine_file_names_the_parameter_and_its_bound(tmp_path):
    good = load_engine("gpt-fast").as_document()
    missing = {k: v for k, v in good.items() if k != "layer_overhead_s"}
    (tmp_path / "missing.yaml").write_text(yaml.safe_dump(missing))
    with pytest.raises(ValueError, match="layer_overhead_s.*missing"):
        load_engine(str(tmp_path / "missing.yaml"))
    above = {**good, "roofs": "datasheet", "bandwidth_efficiency": {**good["bandwidth_efficiency"], "value": 1.3}}
    (tmp_path / "above.yaml").write_text(yaml.safe_dump(above))
    with pytest.raises(ValueError, match=r"bandwidth_efficiency = 1.3 is out of its physical range: it must be in \(0, 1\]"):
        load_engine(str(tmp_path / "above.yaml"))
    # of the device's kernel roof a factor may pass 1 (a better kernel than the profiled one), not 2
    past_kernel = {**good, "roofs": "kernel", "bandwidth_efficiency": {**good["bandwidth_efficiency"], "value": 2.3}}
    (tmp_path / "past_kernel.yaml").write_text(yaml.safe_dump(past_kernel))
    with pytest.raises(ValueError, match=r"bandwidth_efficiency = 2.3 is out of its physical range: it must be in \(0, 2\]"):
        load_engine(str(tmp_path / "past_kernel.yaml"))
    negative = {**good, "step_overhead_s": -1e-3}
    (tmp_path / "negative.yaml").write_text(yaml.safe_dump(negative))
    with pytest.raises(ValueError, match=r"step_overhead_s = -0.001 is out of its physical range: it must be in \[0, 1\] s"):
        load_engine(str(tmp_path / "negative.yaml"))
    for name, value, bound in (("corner", 0.5, r"in \[1, inf\]"), ("gqa_rereads", 1.5, r"in \[0, 1\]")):
        (tmp_path / "out.yaml").write_text(yaml.safe_dump({**good, name: value}))
        with pytest.raises(ValueError, match=f"{name} = {value} is out of its physical range: it must be {bound}"):
            load_engine(str(tmp_path / "out.yaml"))


def test_an_unknown_engine_lists_the_known_ones(capsys):
    assert main(["analyze", "--engine", "vllm-9000"]) == 2
    assert ("gpt-fast, harness, harness-cpu, hf-eager, ideal, llama.cpp, sglang, tensorrt-llm, tensorrt-llm-1, vllm"
            in capsys.readouterr().err)


def test_a_malformed_published_row_names_its_line(tmp_path):
    text = (roofline.hardware.DATA_DIR / "published" / "calibration.csv").read_text().splitlines()
    header, first = text[0], text[1]
    (tmp_path / "bad.csv").write_text("\n".join([header, first, first.replace(",104.9,", ",fast,")]) + "\n")
    with pytest.raises(ValueError, match=r"line 3: column 'value' must be a number"):
        read_rows(tmp_path / "bad.csv")


def test_the_fit_recovers_an_engine_that_generated_the_rows():
    rows = [r for r in read_rows() if r.framework.startswith("gpt-fast")]
    truth = {r.line: roofline.fitting.published.predict(r, GPT_FAST_LIKE) for r in rows}
    synthetic = [roofline.fitting.published.Row(**{**r.__dict__, "value": truth[r.line]}) for r in rows]
    prior = Engine(name="prior", framework="gpt-fast", bandwidth_efficiency=0.9, layer_overhead_s=5e-6,
                   allreduce_latency_s=5e-6, quantized_efficiency={"int8": 0.9, "int4": 0.9})
    names = ["bandwidth_efficiency", "layer_overhead_s", "allreduce_latency_s", "quantized_efficiency.int8",
             "quantized_efficiency.int4"]
    fitted = fit_engine(prior, synthetic, names)
    assert fitted.bandwidth_efficiency == pytest.approx(0.7, rel=0.03)
    assert fitted.quantized_efficiency["int4"] == pytest.approx(0.5, rel=0.03)
    assert fitted.allreduce_latency_s == pytest.approx(15e-6, rel=0.1)
    assert fitted.priors["bandwidth_efficiency"] == 0.9  # the prior is kept for leave-one-out


def test_pinning_is_tight_where_rows_separate_parameters_and_weak_where_they_trade():
    """gpt-fast's int4 rows see only the product of the 16-bit and int4 GEMV efficiencies: fitted on those
    rows alone, the two trade freely (weak); the int4 share is pinned once the bf16 rows fix the other."""
    rows = [r for r in read_rows() if r.framework.startswith("gpt-fast")]
    synthetic = [roofline.fitting.published.Row(**{**r.__dict__, "value": roofline.fitting.published.predict(r, GPT_FAST_LIKE)})
                 for r in rows]
    names = ["bandwidth_efficiency", "quantized_efficiency.int4"]
    prior = dataclasses.replace(GPT_FAST_LIKE, bandwidth_efficiency=0.9,
                                quantized_efficiency={**GPT_FAST_LIKE.quantized_efficiency, "int4": 0.9})
    everything = fit_engine(prior, synthetic, names)
    pinned = pinning(everything, synthetic, names)
    assert not pinned["quantized_efficiency.int4"].weak and not pinned["bandwidth_efficiency"].weak
    assert pinned["quantized_efficiency.int4"].low <= 0.5 <= pinned["quantized_efficiency.int4"].high
    int4 = [r for r in synthetic if r.precision.weights == "int4"]
    traded = pinning(fit_engine(prior, int4, names), int4, names)
    assert traded["quantized_efficiency.int4"].weak and traded["bandwidth_efficiency"].weak


def test_fit_engine_writes_each_parameters_range_and_flags_the_weakly_pinned(tmp_path, capsys):
    assert main(["fit-engine", "--engine", "tensorrt-llm", "--out", str(tmp_path / "trt.yaml")]) == 0
    document = yaml.safe_load((tmp_path / "trt.yaml").read_text())
    low, high = document["flops_efficiency"]["range_68"]
    assert low < document["flops_efficiency"]["value"] < high and "weakly_pinned" not in document["flops_efficiency"]
    assert "weakly_pinned" in document["request_overhead_s"]  # it trades against the all-reduce latency
    assert "the rows pin request_overhead_s only weakly" in capsys.readouterr().err


def test_a_parameter_no_row_pins_keeps_its_prior_with_a_warning():
    rows = [r for r in read_rows() if r.framework.startswith("llama.cpp") and r.precision.weights == "fp16"]
    prior = load_engine("llama.cpp").prior()
    with pytest.warns(UserWarning, match="no row pins quantized_efficiency.q4_0"):
        fitted = fit_engine(prior, rows, ["bandwidth_efficiency", "quantized_efficiency.q4_0"])
    assert fitted.quantized_efficiency["q4_0"] == prior.quantized_efficiency["q4_0"]


@pytest.mark.parametrize("name", ["gpt-fast", "llama.cpp"])
def test_shipped_batch1_profiles_meet_the_leave_one_out_targets(name):
    engine = load_engine(name)
    rows = [r for r in read_rows() if r.framework.startswith(engine.framework)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = summary(rows, leave_one_out(engine, rows, list(engine.fit)))["batch-1 decode"]
    assert result["median"] <= 0.10 and result["p90"] <= 0.25
    ideal = summary(rows, roofline.fitting.published.errors(rows, Engine()))["batch-1 decode"]
    assert ideal["median"] > 0.5  # the bound alone misses these rows by far


def test_the_tensorrt_llm_profile_is_physical_and_close_on_rows_it_never_saw():
    """Batched throughput and TTFT both meet the 10% / 25% leave-one-out target."""
    engine = load_engine("tensorrt-llm")
    assert engine.allreduce_latency_s < 100e-6 and engine.layer_overhead_s < 20e-6  # no stand-in for missing terms
    assert 1 < engine.corner < 3.1 and 0 < engine.gqa_rereads < 1
    rows = [r for r in read_rows() if r.framework.startswith(engine.framework)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        held_out = summary(rows, leave_one_out(engine, rows, list(engine.fit)))
    for family in ("batched throughput", "TTFT"):
        assert held_out[family]["median"] <= 0.10 and held_out[family]["p90"] <= 0.25, family


@pytest.mark.parametrize("request_prior_s", [0.3e-3, 3e-3])
def test_the_tensorrt_llm_ttft_target_holds_over_a_decade_of_request_priors(request_prior_s):
    """The rows cannot split the per-request cost from the all-reduce latency, so the request prior
    decides between them; the target must not hang on the prior's exact value (1 ms ships)."""
    engine = load_engine("tensorrt-llm")
    priors = {**engine.priors, "request_overhead_s": request_prior_s}
    engine = dataclasses.replace(engine, priors=priors)
    rows = [r for r in read_rows() if r.framework.startswith(engine.framework)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        held_out = summary(rows, leave_one_out(engine, rows, list(engine.fit)))["TTFT"]
    assert held_out["median"] <= 0.10 and held_out["p90"] <= 0.25


@pytest.mark.parametrize("name", ["gpt-fast", "llama.cpp", "tensorrt-llm"])
def test_a_shipped_profile_is_its_priors_fitted_to_its_rows(name):
    """What `roofline fit-engine data/published/calibration.csv --engine NAME` writes is what ships:
    refitting from the priors gives back every fitted value."""
    engine = load_engine(name)
    rows = [r for r in read_rows() if r.framework.startswith(engine.framework)]
    refit = fit_engine(engine.prior(), rows, list(engine.fit))
    for parameter in engine.fit:
        assert get(refit, parameter) == pytest.approx(get(engine, parameter), rel=1e-6), parameter


def test_every_shipped_profile_is_physical_and_says_what_pins_each_fitted_parameter():
    for name in ("ideal", "harness", "harness-cpu", "hf-eager", "gpt-fast", "llama.cpp", "tensorrt-llm"):
        engine = load_engine(name)  # bounds are checked on load
        assert all(engine.pinned_by.get(p) for p in engine.fit), name
        assert set(engine.prior_sources) <= set(engine.priors), name


def test_analyze_json_carries_the_engine_and_the_ideal_times(capsys):
    assert main(["analyze", "--model", "llama-2-7b", "--hardware", "a100-80gb", "--engine", "llama.cpp",
                 "--weights", "q4_0", "--batch", "1", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["engine"] == "llama.cpp" and row["tpot_s"] > row["ideal_tpot_s"] > 0
    assert np.isfinite([row["ideal_ttft_s"], row["ideal_e2e_s"]]).all()


@pytest.mark.parametrize("engine, weights, tp", [("gpt-fast", "int4", 1), ("tensorrt-llm", "fp16", 2),
                                                ("llama.cpp", "q4_0", 1), ("harness", "bf16", 1)])
def test_the_engine_gap_is_named_terms_that_add_up_to_engine_minus_ideal(engine, weights, tp):
    a = roofline.analyze("llama-2-7b", "a100-80gb", batch=[4], prompt=512, engine=engine,
                         precision=roofline.Precision(weights=weights), tp=tp)
    gap = a.engine_gap(4, 512)
    assert list(gap.index) == ["kernel roofs", "efficiency", "corner", "GQA re-reads", "quantized kernels",
                               "routed experts", "expert GEMMs", "MoE layer floor", "launch", "host", "host per sequence",
                               "collectives"]
    m = a.metrics.iloc[0]
    assert gap.sum() == pytest.approx(m["tpot_s"] - m["ideal_tpot_s"], rel=1e-9)
    # on kernel roofs an engine's factor may pass 1 (its kernel beats the profiled one): those two terms may save time
    relative = ["efficiency", "quantized kernels"] if a.deployment.engine.roofs == "kernel" else []
    assert (gap.drop(relative) >= -1e-12).all() and (gap["quantized kernels"] != 0) == (weights in ("int4", "q4_0"))
    assert (gap["kernel roofs"] > 0) == (a.deployment.engine.roofs == "kernel")


def test_accuracy_draws_the_published_figures_against_their_predictions(tmp_path, capsys):
    assert main(["accuracy", "--engine", "llama.cpp", "--plot", str(tmp_path / "a.png")]) == 0
    assert "leave_one_out" in capsys.readouterr().out
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("command", [["speculate", "--model", "llama-2-7b", "--draft", "0.1"],
                                     ["simulate", "--model", "llama-2-7b", "--requests", "50"],
                                     ["parallel", "--model", "llama-2-7b", "--tp", "2", "--pp", "2"]])
def test_the_serving_commands_price_with_the_engine(command, capsys):
    outputs = []
    for engine in ("ideal", "gpt-fast"):
        assert main([*command, "--hardware", "a100-80gb", "--engine", engine, "--json"]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] != outputs[1]


def test_crossovers_price_the_engine(capsys):
    """They were refused with --engine (no engine in their closed forms); solved on the step's lines, they take it."""
    outputs = []
    for engine in ("ideal", "gpt-fast"):
        assert main(["crossovers", "--engine", engine, "--json"]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[1]["saturation_batch_90"] != outputs[0]["saturation_batch_90"]
    assert outputs[1]["max_batch"] == outputs[0]["max_batch"]  # memory: no engine in it


def test_the_report_gains_an_achievable_section_with_an_engine_and_only_then(tmp_path):
    from roofline.views.render import markdown
    from roofline.study.report import build_study
    plain = markdown(build_study("llama-2-7b", "a100-80gb", batch=[1, 8], plots=False))
    with_engine = markdown(build_study("llama-2-7b", "a100-80gb", batch=[1, 8], plots=False, engine="llama.cpp"))
    assert "Achievable with" not in plain and "## 8. Achievable with llama.cpp" in with_engine
    assert "+launch (ms)" in with_engine


def test_the_report_draws_the_engine_gap_as_a_waterfall(tmp_path):
    from roofline.views.render import markdown
    from roofline.study.report import build_study
    study = build_study("llama-2-7b", "a100-80gb", batch=[1], engine="tensorrt-llm")
    assert study.figures["engine-gap-a100-80gb.png"][:4] == b"\x89PNG"
    text = markdown(study)
    assert "engine-gap-a100-80gb.png" in text


def test_the_report_scores_the_engine_on_the_published_rows_as_roofline_accuracy_does(capsys):
    from roofline.views.render import markdown
    from roofline.study.report import build_study
    study = build_study("llama-2-7b", "a100-80gb", batch=[1], engine="llama.cpp")
    assert study.figures["engine-accuracy.png"][:4] == b"\x89PNG"
    assert main(["accuracy", "--engine", "llama.cpp", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)["llama.cpp"]["leave_one_out"]["batch-1 decode"]
    held_out = study.engine_accuracy["leave_one_out"]["batch-1 decode"]
    assert held_out == printed
    assert f"{held_out['median']:.1%} / {held_out['p90']:.1%}" in markdown(study)
    assert build_study("llama-2-7b", "a100-80gb", batch=[1], engine="harness", plots=False).engine_accuracy is None


@pytest.mark.parametrize("command", ["analyze", "report", "speculate", "crossovers", "simulate", "parallel",
                                     "fit-engine", "accuracy", "plan", "validate", "fit"])
def test_every_command_prints_its_help(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0 and "usage: roofline" in capsys.readouterr().out
