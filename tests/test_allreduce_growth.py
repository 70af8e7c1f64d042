"""A tensor-parallel all-reduce's latency grows with its group (Engine.allreduce_doubling_s), by hand; and what the
serving rows' tp sweep leaves beside the all-reduce TensorRT-LLM's kernel profile gives."""
import csv
import math
from pathlib import Path

import pytest

from roofline.deployment import Deployment
from roofline.engine import Engine
from roofline.hardware import load_hardware
from roofline.model import DECODE
from roofline.sharding import ALLREDUCES_PER_LAYER

SERVING_HOPPER = Path(__file__).resolve().parents[2] / "shared" / "published" / "serving-hopper.csv"


def allreduce_row_s(engine: Engine, tp: int, batch: float = 8.0) -> float:
    """The seconds of one step's tensor-parallel all-reduce row, Llama-3.1-70B on an H200."""
    d = Deployment.of("llama-3.1-70b", "h200", engine=engine, tp=tp)
    step = d.step(DECODE, batch, 1024.0)
    return float(next(t for op, t in zip(step.ops, step.time_s) if str(op) == "tp.all-reduce"))


def test_each_doubling_of_the_group_adds_its_latency_to_every_all_reduce():
    """By hand: 2 x 80 all-reduces a step; over 2, 4, 8 GPUs each costs 10, 15, 20 us of latency plus the ring's
    2(t − 1)/t x 8 rows x 8192 values x 2 bytes over the link, the same with or without the doubling term."""
    flat = Engine(name="flat", allreduce_latency_s=10e-6)
    growing = Engine(name="growing", allreduce_latency_s=10e-6, allreduce_doubling_s=5e-6)
    link = load_hardware("h200").interconnect_bandwidth
    count = ALLREDUCES_PER_LAYER * 80
    for tp, latency in ((2, 10e-6), (4, 15e-6), (8, 20e-6)):
        ring = 2 * (tp - 1) / tp * 8 * 8192 * 2 / link
        assert allreduce_row_s(growing, tp) == pytest.approx(count * (latency + ring))
        assert allreduce_row_s(flat, tp) == pytest.approx(count * (10e-6 + ring))


def implied_allreduce_s(tpot_s: dict[int, float], all_reduces: int, fixed_s: float) -> dict[int, float]:
    """Per all-reduce, what a row at tp t spends beyond its tp = 1 step split t ways: T_t − (T_1 − f)/t − f, over
    the step's all-reduces (f: the part of the step no split shrinks, the host's and the launches')."""
    return {tp: (t - (tpot_s[1] - fixed_s) / tp - fixed_s) / all_reduces for tp, t in tpot_s.items() if tp > 1}


# NVIDIA's profile of TensorRT-LLM's own all-reduce (AIConfigurator 0.12.0, systems/data/h200_sxm/comm/trtllm/
# 1.3.0rc20/custom_allreduce_perf.parquet), 65,536 bf16 values (8 rows of 8192: the step below): 3.14, 4.18, 6.39 us
PROFILED_ALLREDUCE_S = {2: 3.14e-6, 4: 4.18e-6, 8: 6.39e-6}


@pytest.mark.skipif(not SERVING_HOPPER.is_file(), reason="../shared/published/serving-hopper.csv not beside the repo")
def test_the_rows_tp_sweep_leaves_a_per_layer_cost_beside_the_profiled_all_reduce():
    """TensorRT-LLM, Llama-3.1-70B fp8 on H200 at concurrency 8, 1024 in, 8192 out (decode-bound: a prompt every
    ~1000 steps): TPOT 21.46, 12.89, 8.44, 6.85 ms at tp 1, 2, 4, 8. Split t ways, the tp = 1 step leaves ~12, 16,
    23 us per all-reduce (160 a step, 0.6 ms of host work unsplit). Read as all-reduce alone, it grows ~5 us a
    doubling, but the kernel's own profile takes 3-6 us. The rest is a cost each layer pays on every GPU whatever the
    split (its 8 kernels' fixed time, ~4 us each here; Engine.op_overhead_s, 6.2 us fitted over every row), which
    the split leaves whole: c (1 − 1/t) a layer beyond the (T_1 − f)/t share. The rows give the same c at every t:
    one cost, not an all-reduce growing with t."""
    with SERVING_HOPPER.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["backend"] == "trtllm" and r["mode"] == "agg"
                and r["model_path"] == "meta-llama/Llama-3.1-70B" and r["system"] == "h200_sxm"
                and (r["isl"], r["osl"], r["batch_size"]) == ("1024", "8192", "8")]
    tpot = {int(r["tp_size"]): float(r["silicon_tpot_ms"]) / 1e3 for r in rows}
    assert sorted(tpot) == [1, 2, 4, 8]
    implied = implied_allreduce_s(tpot, ALLREDUCES_PER_LAYER * 80, fixed_s=0.6e-3)
    assert all(implied[2 * tp] - implied[tp] > 3e-6 for tp in (2, 4))  # as an all-reduce, ~5 us a doubling
    per_layer = {tp: ALLREDUCES_PER_LAYER * (implied[tp] - PROFILED_ALLREDUCE_S[tp]) / (1 - 1 / tp) for tp in implied}
    mean = sum(per_layer.values()) / len(per_layer)
    assert 25e-6 < mean < 50e-6 and all(math.isclose(c, mean, rel_tol=0.15) for c in per_layer.values()), per_layer
