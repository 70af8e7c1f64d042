"""The one step pricer: every what-if sees the engine and the tensor-parallel split it is given.

Each estimate is priced by `Deployment.step`. A what-if that rebuilt the chain by hand and left the
engine or the split out would return the same number with and without them: these tests fail then.
"""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from roofline import Engine, Precision, analyze, load_hardware, load_model, speculate, sweep
from roofline.serving import crossovers as x
from roofline.serving.batching import Workload, simulate
from roofline.deployment import Deployment
from roofline.serving.expert_parallel import analyze_expert_parallel
from roofline.model import DECODE, PREFILL, QUERIES, decode_context
from roofline.serving.paging import thought_tree
from roofline.serving.tensor_parallel import tp_crossovers
from roofline.serving.pipeline import analyze_pipeline
from roofline.serving.throughput_factor import throughput_factor

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
    if dataclasses.is_dataclass(result):
        return np.concatenate([_values(v) for v in vars(result).values()])
    return np.ravel(np.asarray(result, dtype=float))


CONFIG = load_model(MODEL)
WORK = Workload(np.array([0.0, 0.01]), np.array([300, 500]), np.array([20, 30]))
WHAT_IFS = {  # name -> estimate(engine, tp)
    "analyze": lambda cal, tp: analyze(MODEL, H100, batch=[1, 64], engine=cal, tp=tp).metrics,
    "sweep": lambda cal, tp: sweep(MODEL, H100, batch=[1, 64], context=[512, 4096], engine=cal, tp=tp),
    "op_table": lambda cal, tp: analyze(MODEL, H100, engine=cal, tp=tp).op_table(8, 1024),
    "decode_terms": lambda cal, tp: analyze(MODEL, H100, engine=cal, tp=tp).decode_terms(8, 1024),
    "speculate": lambda cal, tp: speculate("llama-2-70b", H100, "llama-2-7b", 4, 0.8, engine=cal, tp=tp),
    "pipeline": lambda cal, tp: analyze_pipeline(MODEL, H100, pp=2, batch=8, engine=cal, tp=tp),
    "simulate": lambda cal, tp: simulate(MODEL, H100, WORK, engine=cal, tp=tp).summary(),
    "thought_tree": lambda cal, tp: thought_tree(MODEL, H100, 4, 512, 8, engine=cal, tp=tp),
    "throughput_factor": lambda cal, tp: throughput_factor(MODEL, H100, [64, 512], engine=cal, tp=tp),
    "max_batch": lambda cal, tp: x.max_batch(CONFIG, H100, engine=cal, tp=tp),
    "saturation_batch": lambda cal, tp: x.saturation_batch(CONFIG, H100, engine=cal, tp=tp),
    "diminishing_batch": lambda cal, tp: x.diminishing_batch(CONFIG, H100, engine=cal, tp=tp),
    "elasticities": lambda cal, tp: x.elasticities(CONFIG, H100, batch=64, engine=cal, tp=tp),
}
MEMORY_ONLY = {"max_batch"}  # bytes that fit: no bandwidth in it, so an engine rightly leaves it alone


@pytest.mark.parametrize("name", sorted(set(WHAT_IFS) - MEMORY_ONLY))
def test_an_engine_that_halves_bandwidth_changes_every_what_if(name):
    ideal, halved = _values(WHAT_IFS[name](Engine(), 1)), _values(WHAT_IFS[name](HALF_BANDWIDTH, 1))
    assert ideal.shape != halved.shape or not np.allclose(ideal, halved, equal_nan=True)


@pytest.mark.parametrize("name", sorted(WHAT_IFS))
def test_two_way_tensor_parallelism_changes_every_what_if(name):
    one, two = _values(WHAT_IFS[name](Engine(), 1)), _values(WHAT_IFS[name](Engine(), 2))
    assert one.shape != two.shape or not np.allclose(one, two, equal_nan=True)


def test_expert_parallelism_sees_the_engine_and_refuses_a_tensor_split_it_does_not_model():
    ideal = analyze_expert_parallel("mixtral-8x7b", H100, ep=2, batch=8)
    halved = analyze_expert_parallel("mixtral-8x7b", H100, ep=2, batch=8, engine=HALF_BANDWIDTH)
    assert halved.tpot_s > 1.5 * (ideal.tpot_s - ideal.comm_s)
    with pytest.raises(ValueError, match="ep"):
        Deployment(load_model("mixtral-8x7b"), H100, tp=2, ep=2)


def test_tp_crossovers_see_the_engines_bandwidth():
    ideal, halved = tp_crossovers(MODEL, H100), tp_crossovers(MODEL, H100, engine=HALF_BANDWIDTH)
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
