"""The one step pricer: every what-if sees the engine and the tensor-parallel split it is given.

Each estimate is priced by `Deployment.step`. A what-if that rebuilt the chain by hand and left the
engine or the split out would return the same number with and without them: these tests fail then.
"""
import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from roofline import Engine, Precision, analyze, load_hardware, load_model, speculate, sweep
from roofline.api import analysis_of
from roofline.engine import load_engine
from roofline.serving.gap import decode_gap
from roofline.planning.forms import largest_batch, tp_breakeven
from roofline.serving import crossovers as x
from roofline.serving.batching import Workload, simulate
from roofline.deployment import Deployment
from roofline.serving.expert_parallel import analyze_expert_parallel
from roofline.model import DECODE, PREFILL, QUERIES, decode_context
from roofline.serving.paging import thought_tree
from roofline.serving.tensor_parallel import tp_crossovers
from roofline.serving.pipeline import analyze_pipeline
from roofline.views.fmt import fmt_seconds
from roofline.serving.throughput_factor import compare_table, throughput_factor

H100 = load_hardware("h100-sxm")
HALF_BANDWIDTH = Engine("half bandwidth", bandwidth_efficiency=0.5, attention_bandwidth_efficiency=0.5)
MODEL = "llama-2-13b"


def _values(result) -> np.ndarray:
    """Every number an estimate returns, flattened (dataclasses, dicts, frames, crossovers alike)."""
    if isinstance(result, pd.DataFrame):
        return result.select_dtypes("number").to_numpy(float).ravel()
    if isinstance(result, x.Crossover):
        return np.array([result.value, *result.given.values()], dtype=float)
    if isinstance(result, dict):
        return np.concatenate([_values(v) for v in result.values()])
    if isinstance(result, list) and result and dataclasses.is_dataclass(result[0]):
        return np.concatenate([_values(v) for v in result])
    if dataclasses.is_dataclass(result):
        return np.concatenate([_values(v) for v in vars(result).values()])
    return np.ravel(np.asarray(result, dtype=float))


CONFIG = load_model(MODEL)
WORK = Workload(np.array([0.0, 0.01]), np.array([300, 500]), np.array([20, 30]))
WHAT_IFS = {  # name -> estimate of a Deployment of MODEL on H100
    "analyze": lambda d: analysis_of(d, [1, 64], 1024, 128).metrics,
    "analysis.at": lambda d: analysis_of(d, [1], 1024, 128).at([1, 64]).metrics,
    "sweep": lambda d: sweep(MODEL, H100, batch=[1, 64], context=[512, 4096], tp=d.tp, engine=d.engine),
    "op_table": lambda d: analysis_of(d, [1], 1024, 128).op_table(8, 1024),
    "decode_terms": lambda d: analysis_of(d, [1], 1024, 128).decode_terms(8, 1024),
    "speculate": lambda d: speculate(d, "llama-2-7b", 4, 0.8),
    "pipeline": lambda d: analyze_pipeline(dataclasses.replace(d, pp=2), batch=8),
    "simulate": lambda d: simulate(d, WORK).summary(),
    "thought_tree": lambda d: thought_tree(d, 4, 512, 8),
    "throughput_factor": lambda d: throughput_factor(d, [64, 512]),
    "compare_table": lambda d: compare_table(d, largest=64),
    "max_batch": lambda d: x.max_batch(d),
    "saturation_batch": lambda d: x.saturation_batch(d),
    "diminishing_batch": lambda d: x.diminishing_batch(d),
    "elasticities": lambda d: x.elasticities(d, batch=64),
    "tp_crossovers": lambda d: tp_crossovers(d, 8),
    "largest_batch_within_tpot": lambda d: largest_batch(d, 1024, 128, 0.03),
}
MEMORY_ONLY = {"max_batch"}  # bytes that fit: no bandwidth in it, so an engine rightly leaves it alone
RATIOS = {"compare_table"}  # throughput over batch 1's: a bandwidth scaled alike for every op cancels
SPLIT_ONLY = {"tp_crossovers"}  # where a split stops paying: priced unsplit, whatever tp it is asked from


def _changes(name, base: Deployment, changed: Deployment) -> bool:
    one, two = _values(WHAT_IFS[name](base)), _values(WHAT_IFS[name](changed))
    return one.shape != two.shape or not np.allclose(one, two, equal_nan=True)


@pytest.mark.parametrize("name", sorted(set(WHAT_IFS) - MEMORY_ONLY - RATIOS))
def test_an_engine_that_halves_bandwidth_changes_every_what_if(name):
    assert _changes(name, Deployment(CONFIG, H100), Deployment(CONFIG, H100, engine=HALF_BANDWIDTH))


@pytest.mark.parametrize("name", sorted(set(WHAT_IFS) - MEMORY_ONLY))
def test_an_engine_changes_every_what_if(name):
    """TensorRT-LLM's profile (its efficiencies, launch and host costs) must reach every estimate."""
    assert _changes(name, Deployment(CONFIG, H100), Deployment.of(CONFIG, H100, engine="tensorrt-llm"))


@pytest.mark.parametrize("name", sorted(set(WHAT_IFS) - SPLIT_ONLY))
def test_two_way_tensor_parallelism_changes_every_what_if(name):
    assert _changes(name, Deployment(CONFIG, H100), Deployment(CONFIG, H100, tp=2))


def test_tp_crossovers_price_the_engines_all_reduce_latency():
    """plan --explain's TP break-even used the link's assumed 10 us where the engine's profile fits its own."""
    engine = load_engine("tensorrt-llm")
    found = tp_crossovers(Deployment.of(CONFIG, H100, engine=engine, tp=2), 8)["tp_breakeven"]
    assert found.given["lambda"] == engine.allreduce_latency_s != load_hardware("h100-sxm").interconnect_latency
    assert "tensorrt-llm" in found.note
    explained = tp_breakeven(Deployment.of(CONFIG, H100, engine=engine, tp=2), 8, 1024)
    assert explained.given["lambda"] == engine.allreduce_latency_s


def test_deployment_of_resolves_names_and_files_once():
    d = Deployment.of(MODEL, "h100-sxm", weights="int8", kv="fp8", engine="gpt-fast", tp=2, replicas=3, n_kv_heads=8)
    assert d == Deployment(CONFIG.with_overrides(n_kv_heads=8), H100, Precision(weights="int8", kv="fp8"), tp=2,
                           replicas=3, engine=load_engine("gpt-fast"))
    assert analyze(MODEL, "h100-sxm", batch=[4], engine="gpt-fast", tp=2).deployment == \
        Deployment.of(MODEL, "h100-sxm", engine="gpt-fast", tp=2)


def test_deployment_of_refuses_formats_given_twice():
    with pytest.raises(ValueError, match="kv: given beside precision"):
        Deployment.of(MODEL, "h100-sxm", kv="fp8", precision=Precision())


def test_analysis_at_other_batches_is_analyze_at_those_batches():
    shown = analyze(MODEL, H100, batch=[1], prompt=700, gen=60, engine="tensorrt-llm", tp=2, prefill_chunk=512)
    direct = analyze(MODEL, H100, batch=[1, 32], prompt=700, gen=60, engine="tensorrt-llm", tp=2, prefill_chunk=512)
    pd.testing.assert_frame_equal(shown.at([1, 32]).metrics, direct.metrics)


def test_every_engine_parameter_a_decode_step_reads_is_one_term_of_the_gap():
    """A parameter added to Engine and left out of gap.TERMS would be priced in no stage (or hide in another)."""
    from roofline.engine import FORMAT_SHARES, PARAMETERS
    from roofline.serving.gap import NOT_IN_DECODE, TERMS
    named = [p for _, fields in TERMS for p in fields]
    assert len(named) == len(set(named))  # each in one term
    keyed = {key for key, _, _ in FORMAT_SHARES.values()}  # the shares keyed by a weight format
    assert set(named) | set(NOT_IN_DECODE) == set(PARAMETERS) | keyed | {"roofs"}  # roofs: what they are of


@pytest.mark.parametrize("engine", ["tensorrt-llm", "gpt-fast", "llama.cpp", "hf-eager",
                                    Engine("scheduler", 0.8, 0.6, step_overhead_s=2e-5, sequence_overhead_s=4e-5)])
def test_the_engine_gap_terms_are_exactly_the_steps_rows(engine):
    """Each term of the waterfall is one step row's difference from the ideal; none is left as "efficiency"."""
    d = Deployment.of(CONFIG, H100, engine=engine, tp=2)
    gap = decode_gap(d, 8, 1024)
    step = d.step(DECODE, 8.0, float(decode_context(1024)))
    ideal = dataclasses.replace(d, engine=load_engine(None)).step(DECODE, 8.0, float(decode_context(1024)))
    rows = {op.term if op.group in ("tp", "overhead") else "model": 0.0 for op in step.ops}
    for op, seconds in zip(step.ops, step.time_s):
        rows[op.term if op.group in ("tp", "overhead") else "model"] += float(np.ravel(seconds)[0])
    for op, seconds in zip(ideal.ops, ideal.time_s):
        rows[op.term if op.group in ("tp", "overhead") else "model"] -= float(np.ravel(seconds)[0])
    kernel_terms = ("kernel roofs", "efficiency", "corner", "GQA re-reads", "quantized kernels", "routed experts",
                    "expert GEMMs")
    row_terms = {"overhead.layers": "launch", "overhead.step": "host", "overhead.sequences": "host per sequence",
                 "overhead.moe layers": "MoE layer floor", "tp.all-reduce": "collectives"}
    assert set(rows) - {"model"} <= set(row_terms)  # a new kind of row must get a term of its own
    assert gap[list(kernel_terms)].sum() == pytest.approx(rows["model"], rel=1e-9)
    for row, term in row_terms.items():
        assert gap[term] == pytest.approx(rows.get(row, 0.0), rel=1e-9, abs=1e-15), term
    assert set(gap.index) == set(kernel_terms) | set(row_terms.values())
    assert gap.sum() == pytest.approx(float(step.total_s - ideal.total_s), rel=1e-12)


def test_expert_parallelism_sees_the_engine_and_refuses_a_tensor_split_it_does_not_model():
    ideal = analyze_expert_parallel(Deployment.of("mixtral-8x7b", H100, ep=2), batch=8)
    halved = analyze_expert_parallel(Deployment.of("mixtral-8x7b", H100, ep=2, engine=HALF_BANDWIDTH), batch=8)
    assert halved.tpot_s > 1.5 * (ideal.tpot_s - ideal.comm_s)
    with pytest.raises(ValueError, match="ep"):
        Deployment(load_model("mixtral-8x7b"), H100, tp=2, ep=2)


def test_tp_crossovers_see_the_engines_bandwidth():
    ideal = tp_crossovers(Deployment(CONFIG, H100))
    halved = tp_crossovers(Deployment(CONFIG, H100, engine=HALF_BANDWIDTH))
    assert halved["tp_breakeven"].given["m"] == pytest.approx(2 * ideal["tp_breakeven"].given["m"])


@pytest.mark.parametrize("engine", [Engine(),
                                    Engine("rounded", 0.8, 0.6, step_overhead_s=2e-5, layer_overhead_s=1e-6, corner=2.5,
                                           attention_bandwidth_efficiency=0.7)])
@pytest.mark.parametrize("tp", [1, 4])
def test_the_step_table_adds_up_to_the_step_with_collectives_and_overheads_as_rows(engine, tp):
    d = Deployment(CONFIG, H100, engine=engine, tp=tp)
    step = d.step(DECODE, 16.0, float(decode_context(1024)))
    assert float(np.sum([np.ravel(t)[0] for t in step.time_s])) == pytest.approx(float(step.total_s), rel=1e-12)
    groups = {op.group for op in step.ops}
    assert ("tp" in groups) == (tp > 1)
    assert ("overhead" in groups) == bool(engine.step_overhead_s)
    # The soft corner makes an op slower than max(compute, memory): its row shows it, not a residual.
    model_rows = len(step.components)
    slowest = [np.ravel(t)[0] - max(np.ravel(c)[0], np.ravel(m)[0])
               for t, c, m in zip(step.time_s[:model_rows], step.compute_s, step.memory_s)]
    assert (max(slowest) > 0) == (engine.corner != np.inf)


def test_the_waterfall_terms_add_up_to_tpot_and_name_no_residual():
    rounded = Engine("rounded", 0.8, 0.6, step_overhead_s=2e-5, layer_overhead_s=1e-6, corner=2.5)
    for engine, tp in ((Engine(), 1), (rounded, 1), (rounded, 2)):
        analysis = analyze(MODEL, H100, batch=[8], engine=engine, tp=tp)
        terms = analysis.decode_terms(8, 1024)
        assert terms.sum() == pytest.approx(analysis.metrics["tpot_s"].iloc[0], rel=1e-12)
        fixed = {name for name in terms.index if name.split(".")[0] in ("tp", "overhead")}
        expected = ({"tp.all-reduce"} if tp > 1 else set()) | (
            {"overhead.step", "overhead.layers"} if engine.step_overhead_s else set())
        assert fixed == expected


def test_a_prefill_of_t_query_tokens_is_the_prefill_step():
    d = Deployment(CONFIG, H100, tp=2)
    prefill = d.step(PREFILL, 4.0, 700.0)
    queries = d.step(QUERIES, 4.0, 700.0, queries=700.0)
    assert float(queries.total_s) == pytest.approx(float(prefill.total_s), rel=1e-12)


@pytest.mark.parametrize("field, value, fix", [
    ("config", "llama-2-13b", "load_model"), ("hardware", "h100-sxm", "load_hardware"),
    ("precision", "bf16", "Precision"), ("engine", "harness", "load_engine"),
    ("tp", 3, "query heads"), ("pp", 41, "pp <= 40"), ("ep", 2, "no MoE"), ("replicas", 0, ">= 1"),
    ("tp", 2.0, "whole number")])
def test_bad_deployment_input_is_a_value_error_naming_the_field_and_the_fix(field, value, fix):
    args = {"config": CONFIG, "hardware": H100, field: value}
    with pytest.raises(ValueError, match=field) as err:
        Deployment(**args)
    assert fix in str(err.value)


def test_splitting_over_gpus_without_an_interconnect_names_the_hardware():
    with pytest.raises(ValueError, match="interconnect"):
        Deployment(CONFIG, load_hardware("cpu"), tp=2)


def test_e2e_integrates_the_decode_steps_the_deployment_prices():
    d = Deployment(CONFIG, H100, engine=Engine("c", 0.7, corner=3.0), tp=2)
    batch, prompt, gen = 8.0, 1000.0, 40.0
    first = d.step(DECODE, batch, decode_context(prompt))
    steps = sum(float(d.step(DECODE, batch, decode_context(prompt + j)).total_s) for j in range(int(gen) - 1))
    assert float(d.decode_seconds(batch, prompt, gen, first)) == pytest.approx(steps, rel=1e-3)


def test_kv_precision_reaches_the_step():
    fp8 = Deployment(CONFIG, H100, Precision(kv="fp8")).step(DECODE, 64.0, 8193.0)
    bf16 = Deployment(CONFIG, H100).step(DECODE, 64.0, 8193.0)
    assert float(fp8.total_s) < 0.75 * float(bf16.total_s)


# ---- the app: every page prices the sidebar's Deployment ----

streamlit_testing = pytest.importorskip("streamlit.testing.v1", reason="the app extra is not installed")
APP = str(Path(__file__).resolve().parents[1] / "app.py")
APP_PAGES = ("Roofline", "Latency–throughput", "Memory", "Per-op table", "Regime map", "Derivation", "Compare")


def _app(engine: str = "ideal", tp: int = 1):
    at = streamlit_testing.AppTest.from_file(APP, default_timeout=180).run()
    at.sidebar.selectbox(key="engine").set_value(engine)
    at.selectbox(key="tp").set_value(tp)
    return at.run()


def _nodes(node):
    children = getattr(node, "children", None)
    for child in (children.values() if isinstance(children, dict) else ()):
        yield child
        yield from _nodes(child)


def _page_shown(at) -> list[str]:
    """What the page below the headline shows: metrics, tables, text, formulas and figures (by content hash)."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    nodes = list(_nodes(at.main))
    start = next(i for i, n in enumerate(nodes) if getattr(n, "type", None) == "radio" and n.key == "page")
    out = []
    for n in nodes[start + 1:]:
        kind = getattr(n, "type", None)
        if kind == "image":
            out.append(str(n.proto))
        elif kind in ("metric",):
            out.append(f"{n.label} {n.value} {n.proto.delta}")
        elif kind in ("dataframe", "table"):
            out.append(n.value.to_csv())
        elif kind in ("markdown", "caption", "latex", "info", "warning"):
            out.append(n.value)
    return out


def _shown_on(page: str, at) -> list[str]:
    at.radio(key="page").set_value(page).run()
    if page == "Compare":
        at.selectbox(key="b_kv").set_value("int8").run()
    return _page_shown(at)


@pytest.mark.parametrize("page", APP_PAGES)
def test_every_app_page_changes_with_the_engine_and_with_tp(page):
    plain = _shown_on(page, _app())
    assert _shown_on(page, _app(engine="tensorrt-llm")) != plain, "the engine does not reach this page"
    assert _shown_on(page, _app(tp=2)) != plain, "tensor parallelism does not reach this page"


def test_the_latency_and_memory_pages_and_the_caption_price_the_sidebars_engine():
    """The latency curve showed the ideal 7.9 ms TPOT at B=1 beside gpt-fast's 11.3 ms headline."""
    at = _app(engine="gpt-fast")
    headline = next(m.value for m in at.metric if m.label == "TPOT")
    engine = analyze(MODEL, H100, batch=[1], engine="gpt-fast", allow_beyond_window=True).records()[0]
    assert headline == fmt_seconds(engine["tpot_s"]) != fmt_seconds(engine["ideal_tpot_s"])
    assert any("engine: gpt-fast" in c.value for c in at.caption)
    at.radio(key="page").set_value("Latency–throughput").run()
    table = next(d.value for d in at.dataframe if "TPOT" in d.value.columns)
    assert table.set_index("batch").loc[1, "TPOT"] == headline


def test_compare_and_speculation_keep_the_sidebars_engine_and_split():
    at = _app(engine="tensorrt-llm", tp=2)
    at.radio(key="page").set_value("Compare").run()
    at.selectbox(key="b_kv").set_value("int8").run()
    b = analyze(MODEL, H100, batch=[1], engine="tensorrt-llm", tp=2, precision=Precision(kv="int8")).records()[0]
    assert next(m.value for m in at.metric if m.label == "B: TPOT") == fmt_seconds(b["tpot_s"])
    [toggle] = [t for t in at.sidebar.toggle if t.label == "Speculative decoding"]
    toggle.set_value(True).run()
    d = Deployment.of(MODEL, H100, engine="tensorrt-llm", tp=2)
    want = speculate(d, 0.1, 4, 0.8, batch=1, prompt=1024, allow_beyond_window=True)
    assert next(m.value for m in at.metric if m.label == "TPOT with speculation") == fmt_seconds(want.tpot_s)
