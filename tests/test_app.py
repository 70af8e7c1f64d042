"""The dashboard through Streamlit's AppTest: every view runs, each lever moves the numbers to the library's
own, bad input is an error message (never a traceback), and a rerun does no symbolic work."""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the app extra is not installed: pip install -e '.[app]'")
import sympy as sp  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

import roofline  # noqa: E402
from roofline import load_model  # noqa: E402
from roofline import engine as engines  # noqa: E402
from roofline.models.config import GLOBAL, MODELS_DIR, WINDOW  # noqa: E402
from roofline.views import plots  # noqa: E402
from roofline.views.fmt import fmt_bytes, fmt_rate, fmt_seconds  # noqa: E402
from roofline.precision import Precision  # noqa: E402
from roofline.symbols import S, T  # noqa: E402
from roofline.deployment import Deployment
from test_fuzz_inputs import broken_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "app.py"
PAGES = ("Roofline", "Latency–throughput", "Memory", "Per-op table", "Regime map", "Derivation", "Compare", "Validation")
EVERY_PAGE = (*PAGES, "Plan")
DEFAULT = dict(model="llama-2-13b", hardware="h100-sxm", batch=[1], prompt=1024, gen=128)


def analyze(*args, **kwargs):
    """The library call the app makes: a context beyond the model's window is priced and flagged, not refused."""
    return roofline.analyze(*args, allow_beyond_window=True, **kwargs)


def start() -> AppTest:
    return AppTest.from_file(str(APP), default_timeout=180).run()


def clean(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def metric(at: AppTest, label: str) -> str:
    """A metric by its label; with replicas the tokens/s label says it counts them all."""
    values = [m.value for m in at.metric if m.label == label or (label == "tokens/s" and m.label.startswith("tokens/s ("))]
    assert values, f"no metric {label!r} among {[m.label for m in at.metric]}"
    return values[0]


def shown(at: AppTest) -> dict:
    """The headline as displayed: TPOT, TTFT, tokens/s, E2E, memory, max batch and the binding resource."""
    labels = ("TPOT", "TTFT", "tokens/s", "E2E", "max batch", "binding resource")
    memory = [m for m in at.metric if m.label in ("memory", "memory per GPU")]
    return {**{label: metric(at, label) for label in labels}, "memory": [(m.value, m.delta) for m in memory]}


def expected(analysis) -> dict:
    """The same headline from the library's numbers, formatted by the library."""
    m = analysis.records()[0]
    return {"TPOT": fmt_seconds(m["tpot_s"]), "TTFT": fmt_seconds(m["ttft_s"]), "E2E": fmt_seconds(m["e2e_s"]),
            "tokens/s": fmt_rate(m["tokens_per_s"], "tokens/s"), "max batch": str(m["max_batch"]),
            "binding resource": m["decode_bound"],
            "memory": [(fmt_bytes(m["memory_bytes"]), f"of {fmt_bytes(analysis.hardware.memory_bytes)}")]}


def widget(at: AppTest, kind: str, label: str):
    """A widget by its label (model-specific widgets carry the model in their key)."""
    found = [w for w in getattr(at, kind) if w.label == label]
    assert found, f"no {kind} {label!r} among {[w.label for w in getattr(at, kind)]}"
    return found[0]


def test_default_page_shows_the_library_tpot():
    at = clean(start())
    assert not at.error, [e.value for e in at.error]
    assert shown(at) == expected(analyze(**DEFAULT))
    assert metric(at, "TPOT") == "7.93 ms"  # the lecture's Llama-2-13B on an H100: ~26 GB / 3.35 TB/s


@pytest.mark.parametrize("model", ["llama-2-13b", "deepseek-v2-lite", "mixtral-8x7b", "gemma-2-9b", "gpt2",
                                   "llama-4-scout", "gpt-oss-20b"])
def test_every_view_runs_without_exception_or_error(model):
    at = start()
    at.selectbox(key="model").set_value(model).run()
    for page in PAGES:
        at.radio(key="page").set_value(page).run()
        clean(at)
        assert not at.error, (page, [e.value for e in at.error])
    assert shown(at) == expected(analyze(model, "h100-sxm", batch=[1], prompt=1024, gen=128))
    beyond = [w.value for w in at.warning if "Beyond the context window" in w.value]
    assert bool(beyond) == (model == "gpt2"), beyond  # GPT-2's 1024 positions: 1024 + 128 is flagged, not hidden


CHANGES = [  # (what the user does, the library call that must give the numbers shown)
    (lambda at: at.number_input(key="batch").set_value(64), dict(batch=[64])),
    (lambda at: at.number_input(key="prompt").set_value(8192), dict(prompt=8192)),
    (lambda at: at.number_input(key="gen").set_value(2048), dict(gen=2048)),
    (lambda at: at.number_input(key="prefill_chunk").set_value(0), dict(prefill_chunk=None)),  # max batch 56 -> 52
    (lambda at: at.selectbox(key="hardware").set_value("h200"), dict(hardware="h200")),
    (lambda at: at.selectbox(key="kv").set_value("int8"), dict(precision=Precision(kv="int8"))),
    (lambda at: at.selectbox(key="weights").set_value("int4"), dict(precision=Precision(weights="int4"))),
    # activations as served by default: fp8 weights on an H100 multiply fp8 activations (W8A8); picked, as picked
    (lambda at: at.selectbox(key="weights").set_value("fp8"),
     dict(precision=Precision(weights="fp8", activations="fp8"))),
    (lambda at: (at.selectbox(key="weights").set_value("fp8"), at.selectbox(key="activations").set_value("bf16")),
     dict(precision=Precision(weights="fp8"))),
    (lambda at: widget(at, "selectbox", "KV heads K").set_value(8), dict(n_kv_heads=8)),
    (lambda at: widget(at, "selectbox", "CLA factor (layers sharing one KV cache)").set_value(2), dict(cla_factor=2)),
    (lambda at: window_every_layer(at, 512), dict(window=512, layer_attention=(WINDOW,) * 40)),
]


def window_every_layer(at: AppTest, size: int):
    widget(at, "radio", "Sliding window (model: all global)").set_value("every layer windowed").run()
    return widget(at, "number_input", "window W (tokens)").set_value(size)


@pytest.mark.parametrize("change, library", CHANGES)
def test_changing_a_widget_changes_the_numbers_to_the_library_values(change, library):
    at = clean(start())
    before = shown(at)
    change(at)
    at.run()
    clean(at)
    assert not at.error, [e.value for e in at.error]
    assert shown(at) == expected(analyze(**{**DEFAULT, **library}))
    assert shown(at) != before


def test_tensor_parallelism_and_replicas_reach_the_library():
    at = start()
    at.selectbox(key="tp").set_value(2).run()
    at.number_input(key="replicas").set_value(3).run()
    clean(at)
    library = analyze(**DEFAULT, tp=2, replicas=3)
    assert shown(at) == expected(library)
    assert metric(at, "GPUs") == "6"
    assert metric(at, "tokens/s (all 3 replicas)") == fmt_rate(library.records()[0]["tokens_per_s"], "tokens/s")
    assert metric(at, "all-reduce per decode step") == fmt_seconds(library.records()[0]["comm_s"])
    for page in PAGES:
        at.radio(key="page").set_value(page).run()
        clean(at)
        assert not at.error, (page, [e.value for e in at.error])


@pytest.mark.parametrize("model, label, value, override", [
    ("mixtral-8x7b", "MoE top-k (experts per token)", 1, dict(top_k=1)),
    ("deepseek-v2-lite", "MLA latent rank C (kv_lora_rank)", 128, dict(kv_lora_rank=128)),
])
def test_moe_top_k_and_mla_latent_rank_reach_the_library(model, label, value, override):
    at = start()
    at.selectbox(key="model").set_value(model).run()
    before = shown(at)
    kind = "slider" if "top-k" in label else "number_input"
    widget(at, kind, label).set_value(value).run()
    clean(at)
    assert shown(at) == expected(analyze(model, "h100-sxm", batch=[1], prompt=1024, gen=128, **override))
    assert shown(at) != before


def test_a_windowed_model_can_drop_or_resize_its_window():
    at = start()
    at.selectbox(key="model").set_value("gemma-2-9b").run()
    config = load_model("gemma-2-9b")
    label = f"Sliding window (model: 21 of {config.n_layers} layers windowed)"
    widget(at, "radio", label).set_value("none (every layer global)").run()
    common = dict(batch=[1], prompt=1024, gen=128)
    assert shown(at) == expected(analyze(config, "h100-sxm", **common, window=0, layer_attention=(GLOBAL,) * 42))
    widget(at, "radio", label).set_value("model's own").run()
    at.number_input(key="prompt").set_value(8192).run()
    widget(at, "number_input", "window W (tokens)").set_value(1024).run()
    clean(at)
    assert shown(at) == expected(analyze(config, "h100-sxm", batch=[1], prompt=8192, gen=128, window=1024))


@pytest.mark.parametrize("choice", sorted(engines.harness_profiles()))
def test_a_harness_fit_picked_as_the_engine_gives_its_library_numbers(choice):
    at = start()
    at.selectbox(key="engine").set_value(choice).run()
    clean(at)
    assert shown(at) == expected(analyze(**DEFAULT, engine=choice))


def test_an_mla_model_offers_the_latent_rank_instead_of_kv_heads():
    at = start()
    at.selectbox(key="model").set_value("deepseek-v2-lite").run()
    labels = [w.label for w in at.selectbox] + [w.label for w in at.number_input]
    assert "MLA latent rank C (kv_lora_rank)" in labels and "KV heads K" not in labels
    at.selectbox(key="model").set_value("llama-2-13b").run()
    assert any("not modelled" in c.value for c in at.caption)  # MLA on/off for a non-MLA model: said, not faked


@pytest.mark.parametrize("content, reason", [
    (b"{not json", "not a JSON file"),
    (b"\xff\xfe\x00garbage", "not a JSON file"),
    (b"[1, 2, 3]", "expected a JSON object"),
    (json.dumps({"model_type": "bert", "hidden_size": 768}).encode(), "model_type 'bert' is not supported"),
    (json.dumps({"model_type": "llama", "hidden_size": 4096}).encode(), "missing field 'num_hidden_layers'"),
    (json.dumps({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                 "num_key_value_heads": 5, "intermediate_size": 11008, "vocab_size": 32000}).encode(),
     "must be divisible by n_kv_heads"),
    # issue 15: these two were tracebacks that replaced the whole page, sidebar included
    (json.dumps({**json.loads((MODELS_DIR / "deepseek-v2-lite.json").read_text()), "moe_layer_freq": 0}).encode(),
     "field 'moe_layer_freq' must be a positive integer, got 0"),
    (json.dumps({**json.loads((MODELS_DIR / "deepseek-v2-lite.json").read_text()), "first_k_dense_replace": "3"}).encode(),
     "field 'first_k_dense_replace' must be a non-negative integer, got '3'"),
    # issue 21: 200,000 nested [ was a RecursionError traceback in the uploader
    (b"[" * 200_000, "nested more than 64 levels"),
    (b'{"model_type": "llama", "hidden_size": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nested more than 64 levels"),
])
def test_a_malformed_upload_is_one_error_naming_the_file_and_the_fix_on_every_page(content, reason):
    at = clean(start())
    at.file_uploader(key="upload").set_value(("my-config.json", content, "application/json")).run()
    for page in EVERY_PAGE:
        at.radio(key="page").set_value(page).run()
        clean(at)
        errors = [e.value for e in at.error]
        assert len(errors) == 1 and "my-config.json" in errors[0] and reason in errors[0] \
            and "**Fix:**" in errors[0], (page, errors)
        assert at.selectbox(key="model").value == DEFAULT["model"] and f"**{DEFAULT['model']}**" in errors[0]
    assert shown(at) == expected(analyze(**DEFAULT))  # the bundled model the selector shows, meanwhile


def test_an_uploaded_config_is_analyzed_like_the_bundled_file():
    at = start()
    content = (MODELS_DIR / "llama-3-8b.json").read_bytes()
    at.file_uploader(key="upload").set_value(("my-llama.json", content, "application/json")).run()
    clean(at)
    assert not at.error, [e.value for e in at.error]
    assert shown(at) == expected(analyze("llama-3-8b", "h100-sxm", batch=[1], prompt=1024, gen=128))


def test_the_model_selector_always_names_the_model_analysed():
    """Issue 21: an upload silently replaced the picked model while the selector still showed the bundled one."""
    at = start()
    content = (MODELS_DIR / "mixtral-8x7b.json").read_bytes()
    at.file_uploader(key="upload").set_value(("my-mixtral.json", content, "application/json")).run()
    clean(at)
    mixtral = expected(analyze("mixtral-8x7b", "h100-sxm", batch=[1], prompt=1024, gen=128))
    assert at.selectbox(key="model").value == "my-mixtral (uploaded my-mixtral.json)" and shown(at) == mixtral
    assert any("my-mixtral (" in c.value for c in at.caption)  # the headline names it too
    at.selectbox(key="model").set_value("gpt2").run()  # a bundled model, the upload still there: gpt2 is analysed
    clean(at)
    assert at.selectbox(key="model").value == "gpt2"
    assert shown(at) == expected(analyze("gpt2", "h100-sxm", batch=[1], prompt=1024, gen=128))
    at.selectbox(key="model").set_value("my-mixtral (uploaded my-mixtral.json)").run()
    assert shown(at) == mixtral
    at.file_uploader(key="upload").set_value(None).run()  # the upload removed: back to a bundled model, shown
    clean(at)
    assert at.selectbox(key="model").value == DEFAULT["model"] and shown(at) == expected(analyze(**DEFAULT))


def test_an_impossible_combination_shows_the_reason_and_other_views_keep_working():
    at = start()
    at.selectbox(key="hardware").set_value("custom numbers").run()
    assert shown(at) == expected(analyze(**DEFAULT))  # the custom numbers start from the H100's datasheet
    at.number_input(key="hw_bf16_tflops").set_value(0.0).run()  # no peak FLOP/s at all
    clean(at)
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "no sourced peak FLOP/s" in errors[0] and "**Fix:**" in errors[0], errors
    assert not at.metric
    at.radio(key="page").set_value("Validation").run()
    clean(at)


def test_a_tensor_parallel_degree_that_does_not_split_the_heads_is_an_error_not_a_traceback():
    at = start()
    at.selectbox(key="tp").set_value(16).run()  # Llama-2-13B has 40 query heads
    clean(at)
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "does not divide the 40 query heads" in errors[0] and "**Fix:**" in errors[0], errors
    at.selectbox(key="hardware").set_value("cpu").run()
    at.selectbox(key="tp").set_value(2).run()
    assert "no interconnect bandwidth" in " ".join(e.value for e in at.error)
    at.selectbox(key="tp").set_value(1).run()
    assert not at.error and metric(at, "TPOT") == fmt_seconds(analyze(**{**DEFAULT, "hardware": "cpu"}).records()[0]["tpot_s"])


def test_compare_shows_b_as_the_library_computes_it():
    at = start()
    at.radio(key="page").set_value("Compare").run()
    at.selectbox(key="b_kv_heads").set_value(8).run()
    at.selectbox(key="b_hardware").set_value("h200").run()
    clean(at)
    other = analyze("llama-2-13b", "h200", batch=[1], prompt=1024, gen=128, n_kv_heads=8)
    assert metric(at, "B: TPOT") == fmt_seconds(other.records()[0]["tpot_s"])
    assert metric(at, "TPOT") == expected(analyze(**DEFAULT))["TPOT"]  # A stays the sidebar's


@pytest.mark.parametrize("calibrated", [False, True])
def test_the_waterfall_terms_add_up_to_the_tpot_of_each_side(calibrated):
    from roofline import Engine

    # A rounded corner too: op times are then not max(compute, memory), and no residual may absorb the gap.
    engine = Engine("test", 0.8, 0.6, step_overhead_s=2e-5, layer_overhead_s=1e-6, corner=3.0) if calibrated else Engine()
    for overrides in ({}, {"n_kv_heads": 8}):
        analysis = analyze(**DEFAULT, engine=engine, **overrides)
        terms = analysis.decode_terms(1, 1024)
        assert terms.sum() == pytest.approx(analysis.metrics["tpot_s"].iloc[0], rel=1e-12)
        assert {"qkv_proj", "attention", "o_proj", "mlp.gate_up", "mlp.down", "head.lm_head"} <= set(terms.index)
        assert ({"overhead.step", "overhead.layers"} <= set(terms.index)) == calibrated
        assert not any(name.startswith("overhead") for name in terms.index) or calibrated


def test_the_derivation_shows_the_lectures_formulas_and_limits():
    at = start()
    at.radio(key="page").set_value("Derivation").run()
    clean(at)
    latex = " ".join(block.value for block in at.latex)
    assert sp.latex(S * T / (S + T)) in latex  # attention intensity S·T/(S+T)
    assert r"\xrightarrow{D,\,F\to\infty} B T" in latex  # MLP intensity -> B·T, so decode (T = 1) -> B
    assert "295" in latex  # the H100's critical batch, 989.4e12 / 3.35e12 = 295


def test_the_serving_levers_are_in_the_sidebar():
    at = start()
    assert [w for w in at.sidebar.selectbox if w.label == "tensor parallel"]
    assert [t for t in at.sidebar.toggle if t.label == "Speculative decoding"]


def test_speculative_decoding_under_tensor_parallelism_is_the_librarys_tp_speculation():
    from roofline.serving import speculation
    at = start()
    at.selectbox(key="tp").set_value(2).run()
    [toggle] = [t for t in at.sidebar.toggle if t.label == "Speculative decoding"]
    toggle.set_value(True).run()
    clean(at)
    split = speculation.speculate(Deployment.of("llama-2-13b", "h100-sxm", tp=2), 0.1, 4, 0.8, batch=1, prompt=1024)
    alone = speculation.speculate(Deployment.of("llama-2-13b", "h100-sxm"), 0.1, 4, 0.8, batch=1, prompt=1024)
    assert metric(at, "TPOT with speculation") == fmt_seconds(split.tpot_s) != fmt_seconds(alone.tpot_s)


def test_speculative_decoding_shows_the_librarys_effective_tpot():
    from roofline.serving import speculation as speculative
    at = start()
    [toggle] = [t for t in at.sidebar.toggle if t.label == "Speculative decoding"]
    toggle.set_value(True).run()
    clean(at)
    result = speculative.speculate(Deployment.of("llama-2-13b", "h100-sxm"), 0.1, 4, 0.8, batch=1, prompt=1024)
    assert metric(at, "TPOT with speculation") == fmt_seconds(result.tpot_s)
    assert metric(at, "TPOT") == expected(analyze(**DEFAULT))["TPOT"]


def test_validation_view_shows_the_fits_held_out_error():
    files = sorted((ROOT / "data" / "measurements").glob("*.csv"))
    if not files:
        pytest.skip("no measurements in data/measurements (the no-measurements message is tested below)")
    at = start()
    at.radio(key="page").set_value("Validation").run()
    clean(at)
    shown = Path(at.selectbox(key="measurements/h100-sxm").value)
    assert shown.name.startswith("cuda-h100-")  # the sidebar's device's measurements
    [(name, raw)] = [(name, profile.harness_fit) for name, profile in engines.harness_profiles().items()
                     if shown.name in profile.harness_fit["sources"]]  # and of those, a harness fit's own data
    # the error the committed fit recorded for its leave-one-context-out, not a refit on each visit
    assert metric(at, "decode: held-out median |error|") == f"{raw['decode']['heldout_median_abs_err']:.1%}"
    assert any(f"data/engines/{name}.yaml" in c.value for c in at.caption)
    from validation import records
    frame = records.load_frame([shown])
    measured = frame[frame["status"] == "ok"]
    variants = {f"{m}, K={k}" for m, k in zip(measured["model"], measured["n_kv_heads"])}
    assert set(at.radio(key="val_variant").options) == variants  # one model's curves at a time, not a blend
    at.radio(key="val_variant").set_value(sorted(variants)[-1]).run()
    clean(at)


def test_the_committed_fit_scores_its_own_file_exactly_as_it_recorded():
    """What the Validation page shows for a harness profile's source: its parameters turned back into the fit's
    own fractions of the measured ceilings reproduce the in-sample error and MBU written when it was fitted."""
    from roofline import load_hardware
    from validation import fit, records
    for name, profile in engines.harness_profiles().items():
        raw = profile.harness_fit
        datasheet = None if profile.hardware == "measured" else load_hardware(profile.hardware)
        fitted = fit.measured_fractions(profile, datasheet)
        frame = records.load_frame([ROOT / "data" / "measurements" / raw["sources"][0]])
        summary = fit.score(frame, fitted).summary
        for phase in ("decode", "prefill"):
            assert summary[phase]["insample_median_abs_err"] == pytest.approx(
                raw[phase]["insample_median_abs_err"], rel=1e-6), (name, phase)
        assert summary["mbu_batch1"] == pytest.approx(raw["mbu_batch1"], rel=1e-9)
        assert 0 < fitted.bandwidth_efficiency <= 1 and 0 < fitted.flops_efficiency <= 1


def test_validation_opens_on_the_sidebar_device_and_each_file_shows_within_two_seconds():
    """Issue 21: 9 s on the first visit and 8.3 s a file switch (a leave-one-context-out refit each time)."""
    files = sorted((ROOT / "data" / "measurements").glob("*.csv"))
    if not files:
        pytest.skip("no measurements in data/measurements")
    at = start()
    began = time.perf_counter()
    at.radio(key="page").set_value("Validation").run()
    first = time.perf_counter() - began
    clean(at)
    switches = []
    for path in files:
        began = time.perf_counter()
        at.selectbox(key="measurements/h100-sxm").set_value(path).run()
        switches.append(time.perf_counter() - began)
        clean(at)
        assert not at.error, (path.name, [e.value for e in at.error])
    # The budget is 2 s: measured 0.2-0.5 s a file on the idle 2-core VM, 0.5-1.7 s at load average 8 (a refit
    # was 6-10 s). The single runs get twice the budget so a busy CI machine does not flake; the median does not.
    assert statistics.median(switches) < 2.0 and first < 4.0 and max(switches) < 4.0, (first, switches)
    at.selectbox(key="hardware").set_value("cpu").run()
    assert Path(at.selectbox(key="measurements/cpu").value).name.startswith("cpu-")
    at.selectbox(key="hardware").set_value("mi300x").run()  # nothing measured on it: said, and another shown
    assert any("No measurements of AMD Instinct MI300X" in c.value for c in at.caption)


def test_a_file_no_committed_fit_covers_shows_the_ideal_roofline_and_fits_only_when_asked():
    from validation import fit, records
    covered = {s for profile in engines.harness_profiles().values() for s in profile.harness_fit["sources"]}
    uncovered = [p for p in sorted((ROOT / "data" / "measurements").glob("*.csv")) if p.name not in covered
                 and not engines.transfer_profile(str(records.load_frame([p])["device_name"].iloc[0]), p.name)]
    if not uncovered:
        pytest.skip("every measurement file is covered by a committed fit")
    path = min(uncovered, key=lambda p: p.stat().st_size)  # the quickest to fit
    at = start()
    at.radio(key="page").set_value("Validation").run()
    at.selectbox(key="measurements/h100-sxm").set_value(path).run()
    clean(at)
    ideal = fit.score(records.load_frame([path]), engines.IDEAL).summary
    assert metric(at, "decode: ideal roofline median |error|") == f"{ideal['decode']['heldout_median_abs_err']:.1%}"
    at.toggle(key=f"refit/{path.name}").set_value(True).run()
    clean(at)
    fitted = fit.fit(records.load_frame([path]), path.stem).summary
    assert metric(at, "decode: held-out median |error|") == f"{fitted['decode']['heldout_median_abs_err']:.1%}"


def test_a_file_the_committed_fit_never_saw_is_scored_by_it_not_refitted():
    from validation import fit, records
    unseen = [p for p in sorted((ROOT / "data" / "measurements").glob("*.csv"))
              if engines.transfer_profile(str(records.load_frame([p])["device_name"].iloc[0]), p.name)]
    if not unseen:
        pytest.skip("every committed measurement file was fitted on: no transfer test to show")
    at = start()
    at.radio(key="page").set_value("Validation").run()
    at.selectbox(key="measurements/h100-sxm").set_value(unseen[0]).run()
    clean(at)
    frame = records.load_frame([unseen[0]])
    expected = fit.score(frame, engines.transfer_profile(str(frame["device_name"].iloc[0]), unseen[0].name))
    assert metric(at, "decode: held-out median |error|") == f"{expected.summary['decode']['heldout_median_abs_err']:.1%}"
    assert any("nothing refitted" in caption.value for caption in at.caption)


def test_validation_view_without_measurements_says_so(tmp_path):
    source = APP.read_text()
    line = 'MEASUREMENTS_DIR = Path(__file__).resolve().parent / "data" / "measurements"'
    assert line in source, "the app's measurements directory moved: update this test"
    at = AppTest.from_string(source.replace(line, f"MEASUREMENTS_DIR = Path({str(tmp_path)!r})"), default_timeout=180)
    at.run()
    at.radio(key="page").set_value("Validation").run()
    clean(at)
    assert any("No measurements yet" in i.value for i in at.info)


def test_a_rerun_does_no_symbolic_work_and_the_default_page_rerenders_fast(monkeypatch):
    """Each interaction reuses the compiled evaluators and cached derivations: no sympy on a rerun."""
    at = start()
    for page in PAGES:  # warm every view's caches once
        at.radio(key="page").set_value(page).run()
    calls = []
    for name in ("lambdify", "solve", "limit", "simplify"):
        real = getattr(sp, name)
        monkeypatch.setattr(sp, name, lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k))
    for page in PAGES:
        at.radio(key="page").set_value(page).run()
        at.number_input(key="batch").set_value(3).run()
        at.number_input(key="batch").set_value(1).run()
        clean(at)
    assert calls == []
    at.radio(key="page").set_value(PAGES[0]).run()
    times = []
    for batch in range(2, 9):
        began = time.perf_counter()
        at.number_input(key="batch").set_value(batch).run()
        times.append(time.perf_counter() - began)
    # The budget is 200 ms (measured ~120 ms on a shared 2-core VM); the guard is loose so a busy CI machine
    # does not flake, and still catches a compile, a fit or constrained-layout rendering creeping into a rerun.
    assert statistics.median(times) < 1.0, times


def test_the_memory_page_says_what_the_activation_workspace_assumes():
    at = start()
    at.radio(key="page").set_value("Memory").run()
    assert any("Activations here: one 8192-token prefill chunk" in c.value for c in clean(at).caption)
    at.number_input(key="prefill_chunk").set_value(0).run()
    assert any("every prompt of the batch prefilled at once" in c.value for c in clean(at).caption)
    # 56 (52 before issue 23: the H100's datasheet 80e9 bytes in place of the 85.5e9 CUDA shows, less 1 GiB)
    assert metric(at, "max batch") == str(analyze(**DEFAULT, prefill_chunk=None).records()[0]["max_batch"]) == "56"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_config())
def test_no_uploaded_config_shows_a_traceback(raw):
    at = start()
    at.file_uploader(key="upload").set_value(("config.json", json.dumps(raw, allow_nan=True).encode(),
                                              "application/json")).run()
    clean(at)  # no exception element: the page, sidebar included, is still there
    assert at.sidebar.selectbox and at.radio(key="page")
    assert all("**Fix:**" in e.value for e in at.error), [e.value for e in at.error]


def test_an_engine_gives_its_estimate_with_the_ideal_bound_and_the_gap_by_term():
    at = start()
    at.sidebar.selectbox(key="engine").set_value("gpt-fast").run()
    clean(at)
    expected_metrics = analyze(**DEFAULT, engine="gpt-fast").metrics.iloc[0]
    assert metric(at, "TPOT") == fmt_seconds(expected_metrics["tpot_s"])
    [note] = [i.value for i in at.info if "gpt-fast" in i.value]
    assert fmt_seconds(expected_metrics["ideal_tpot_s"]) in note and "launch +" in note


def test_the_plan_page_ranks_what_the_library_ranks_and_marks_its_pareto_frontier():
    from roofline.planning.plan import Targets, Workload, load_prices, pareto, plan
    at = start()
    at.radio(key="page").set_value("Plan").run()
    clean(at)
    expected_frame = plan(load_model("llama-2-13b"), Workload(10.0, 1024, 128), Targets(0.5, 0.05),
                          tuple(sorted(load_prices())))
    best = expected_frame[expected_frame["feasible"]].iloc[0]
    shown_frame = at.dataframe[0].value
    assert shown_frame["usd_per_million_tokens"].iloc[0] == pytest.approx(best["usd_per_million_tokens"])
    assert shown_frame["pareto"].sum() == pareto(expected_frame).sum() >= 1
    assert any(m.value.startswith("Cheapest:") for m in at.markdown)
    [chart] = at.get("vega_lite_chart")
    spec = json.loads(chart.proto.spec)
    [points, front, target] = spec["layer"]
    assert points["encoding"]["color"]["field"] == "hardware"  # cost against TPOT, coloured by hardware
    colors = points["encoding"]["color"]["scale"]
    assert dict(zip(colors["domain"], colors["range"])) == {d: plots.device_color(d) for d in load_prices()}
    # issue 21: the x axis ended at the TPOT target and the top point sat on the edge, cut in half
    feasible = expected_frame[expected_frame["feasible"]]
    x_domain, y_domain = points["encoding"]["x"]["scale"]["domain"], points["encoding"]["y"]["scale"]["domain"]
    assert x_domain[1] > max(50.0, feasible["tpot_s"].max() * 1e3) and \
        y_domain[1] > feasible["usd_per_million_tokens"].max()
    assert target["mark"]["type"] == "rule"  # the TPOT target drawn, inside the axis
    assert {"configuration", "batch", "gpus"} <= {t["field"] for t in points["encoding"]["tooltip"]}
    assert front["mark"]["type"] == "line"
    assert any(r"\left\lfloor" in latex.value for latex in at.latex)  # the largest batch within TPOT, in letters
    at.radio(key="plan_percentile").set_value("p90").run()
    clean(at)
    shown = at.dataframe[0].value
    assert "sim_ttft_s" in shown and (shown["sim_ttft_s"].dropna() <= 0.5).all()


def test_the_memory_page_breaks_a_hybrid_down_by_layer_kind_and_its_twin_moves_the_wall():
    at = start()
    at.selectbox(key="model").set_value("nemotron-nano-9b-v2").run()
    at.radio(key="page").set_value("Memory").run()
    clean(at)
    table = at.dataframe[-1].value
    assert set(table["layers"]) == {"layers[mamba2,none]", "layers[global,none]", "layers[none,dense]"}
    assert any("constant state of 144.21 MB per sequence" in c.value for c in at.caption)
    assert len(at.image) >= 2  # the memory breakdown and the cache against context
    hybrid_wall = metric(at, "max batch")
    at.checkbox(key="twin/nemotron-nano-9b-v2").check().run()
    clean(at)
    assert set(at.dataframe[-1].value["layers"]) == {"layers[global,none]", "layers[none,dense]"}
    assert metric(at, "max batch") != hybrid_wall


def test_the_experts_format_is_offered_for_moe_models_only_and_reaches_the_library():
    at = start()
    assert not [w for w in at.sidebar.selectbox if w.label == "routed experts"]  # llama-2-13b: dense
    at.selectbox(key="model").set_value("gpt-oss-120b").run()
    at.selectbox(key="experts").set_value("mxfp4").run()
    clean(at)
    assert not at.error, [e.value for e in at.error]
    assert shown(at) == expected(analyze("gpt-oss-120b", "h100-sxm", batch=[1], prompt=1024, gen=128,
                                         precision=Precision(weights="bf16", experts="mxfp4")))
    for page in PAGES:
        at.radio(key="page").set_value(page).run()
        clean(at)
        assert not at.error, (page, [e.value for e in at.error])
    at.selectbox(key="model").set_value("llama-2-13b").run()  # back to a dense model: the choice is gone, no error
    clean(at)
    assert not at.error and not [w for w in at.sidebar.selectbox if w.label == "routed experts"]
