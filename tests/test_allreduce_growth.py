"""A tensor-parallel all-reduce's latency grows with its group (Engine.allreduce_doubling_s): by hand, and as the
serving rows show it."""
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


@pytest.mark.skipif(not SERVING_HOPPER.is_file(), reason="../shared/published/serving-hopper.csv not beside the repo")
def test_the_rows_all_reduce_grows_about_five_microseconds_a_doubling():
    """TensorRT-LLM, Llama-3.1-70B fp8 on H200 at concurrency 8, 1024 in, 8192 out (decode-bound: a prompt every
    ~1000 steps): TPOT 21.46, 12.89, 8.44, 6.85 ms at tp 1, 2, 4, 8. Split t ways, the tp = 1 step leaves ~12, 16,
    23 us per all-reduce (160 a step, 0.6 ms of host and launches unsplit): ~5 us more a doubling, as vLLM's custom
    all-reduce on H100 at 256 KB (12.9, 20.6, 24.1 us over 2, 4, 8 GPUs; sglang PR #2904). A flat latency (the
    term left out) would leave the three equal."""
    with SERVING_HOPPER.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["backend"] == "trtllm" and r["mode"] == "agg"
                and r["model_path"] == "meta-llama/Llama-3.1-70B" and r["system"] == "h200_sxm"
                and (r["isl"], r["osl"], r["batch_size"]) == ("1024", "8192", "8")]
    tpot = {int(r["tp_size"]): float(r["silicon_tpot_ms"]) / 1e3 for r in rows}
    assert sorted(tpot) == [1, 2, 4, 8]
    implied = implied_allreduce_s(tpot, ALLREDUCES_PER_LAYER * 80, fixed_s=0.6e-3)
    doublings = [(implied[2 * tp] - implied[tp]) for tp in (2, 4)]
    assert all(3e-6 < step < 8e-6 for step in doublings), implied
    assert 8e-6 < implied[2] < 15e-6  # the 2-GPU latency: nccl-tests' ~10 us on NVLink
    assert math.isclose(sum(doublings) / 2, 5.5e-6, rel_tol=0.3)
