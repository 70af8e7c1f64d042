"""A request's first pass dispatched op by op: paid once, in TTFT, beside the steps (Deployment.request_s)."""
from dataclasses import replace

import numpy as np
import pytest

from roofline import load_hardware, load_model
from roofline.deployment import Deployment
from roofline.cli.serving_fit import PLAUSIBLE_REQUEST_S
from roofline.engine import Engine, load_engine
from roofline.model import DECODE, PREFILL
from roofline.serving.batching import StepCost, Workload, simulate_continuous
from roofline.serving.load import LoadModel, Policy

MODEL, H100 = load_model("llama-3.1-8b"), load_hardware("h100-sxm")  # 32 layers
# Llama-3.1-8B's prefill graph: 8 ops a layer (two norms, QKV, attention, O, gate-up, SiLU, down) x 32, the
# embedding, the final norm and the head
LLAMA_8B_OPS = 8 * 32 + 3
FLAT = Engine(name="flat", bandwidth_efficiency=0.8, flops_efficiency=0.6, request_overhead_s=0.004)
DISPATCHED = replace(FLAT, name="dispatched", request_op_overhead_s=0.0002)


def test_the_request_cost_is_the_flat_cost_and_one_dispatch_an_op_whatever_the_split():
    assert Deployment(MODEL, H100, engine=DISPATCHED).prefill_ops == LLAMA_8B_OPS
    assert Deployment(MODEL, H100, engine=DISPATCHED).request_s == pytest.approx(0.004 + LLAMA_8B_OPS * 0.0002)
    # a pipeline's two stages dispatch their 16 layers' ops each, one after the other; a tensor-parallel GPU all 32
    assert Deployment(MODEL, H100, engine=DISPATCHED, tp=2, pp=2).prefill_ops == LLAMA_8B_OPS
    assert Deployment(load_model("llama-3.1-70b"), H100, engine=DISPATCHED, tp=8).prefill_ops == 8 * 80 + 3


def test_a_moe_layer_dispatches_more_ops_than_a_dense_one():
    """Qwen3's layers add two norms (q_norm, k_norm); its MoE layers a router, top-k and the experts' three ops in place
    of the MLP's three: 12 a layer against Llama's 8."""
    dense = Deployment(load_model("qwen3-32b"), H100, engine=DISPATCHED)
    moe = Deployment(load_model("qwen3-235b-a22b"), H100, engine=DISPATCHED, tp=8)
    assert dense.prefill_ops == 10 * 64 + 3 and moe.prefill_ops == 12 * 94 + 3


def test_at_a_vanishing_rate_it_adds_to_ttft_alone_and_leaves_the_steps_as_they_were():
    flat, dispatched = (LoadModel(Deployment(MODEL, H100, engine=e), 900, 64, Policy(token_budget=2048))
                     for e in (FLAT, DISPATCHED))
    a, b = flat.at_rate([1e-6]), dispatched.at_rate([1e-6])
    assert float(b["ttft_s"][0] - a["ttft_s"][0]) == pytest.approx(LLAMA_8B_OPS * 0.0002, rel=1e-3)
    assert float(b["tpot_s"][0]) == pytest.approx(float(a["tpot_s"][0]), rel=1e-9)
    d = Deployment(MODEL, H100, engine=DISPATCHED)
    lone = float(d.step(PREFILL, 1.0, 900.0).total_s) + 0.004 + LLAMA_8B_OPS * 0.0002
    decode = float(d.step(DECODE, 1.0, 900 + 32).total_s)
    assert float(b["ttft_s"][0]) == pytest.approx(lone + decode / 2, rel=0.01)  # + half a step in progress


def test_the_simulator_pays_it_once_a_request_as_the_load_model_does():
    d = Deployment(MODEL, H100, engine=DISPATCHED)
    arrivals = np.arange(20) * 1.0  # one a second: nothing queues
    work = Workload(arrivals, np.full(20, 900), np.full(20, 8))
    out = simulate_continuous(work, StepCost(d), 8, chunk_tokens=2048, request_overhead_s=d.request_s)
    prefill = float(d.step(PREFILL, 1.0, 900.0).total_s)
    assert np.allclose(out.ttft_s, prefill + d.request_s, rtol=1e-9)  # alone: its prompt's step and the dispatch


def test_a_dispatch_past_a_millisecond_an_op_is_refused_as_unphysical():
    with pytest.raises(ValueError, match="request_op_overhead_s"):
        replace(FLAT, request_op_overhead_s=0.002)


@pytest.mark.parametrize("name", ["tensorrt-llm-1", "vllm"])
def test_the_serving_profiles_fit_it_from_a_sourced_prior_within_its_bounds(name):
    engine = load_engine(name)
    assert "request_op_overhead_s" in engine.fit and "PR #1166" in engine.prior_sources["request_op_overhead_s"]
    # the fitted dispatch: a tenth of a millisecond or so an op, as the floors over its rows' graphs say (Llama-3.1-8B's
    # 259 ops: ~0-30 ms; Qwen3-235B's 1131: 60-200 ms); a request's own cost a front end's few ms
    assert 0.04e-3 < engine.request_op_overhead_s < 0.5e-3 and engine.request_overhead_s < PLAUSIBLE_REQUEST_S


# vLLM's measured TTFT at C 4, 922 tokens in and out, over tensor parallelism (serving-hopper.csv, InferenceX
# 2026-03/04: ids *_gpt_oss_120b_{h100,h200}_sxm_vllm_fp4_agg_1024x1024_c4_tp*, *_llama_3_1_70b_*_vllm_fp8_*_c4_tp*):
# TTFT = floor + work / tp. What is left at tp -> infinity is the floor no GPU divides.
MEASURED_TTFT_MS = {  # (model, device): {tp: TTFT}
    ("gpt-oss-120b", "h100-sxm"): {2: 59.3219, 4: 40.4351, 8: 31.7776},
    ("gpt-oss-120b", "h200"): {1: 85.7369, 2: 63.8158, 4: 46.1210, 8: 36.8537},
    ("llama-3.1-70b", "h100-sxm"): {2: 121.3077, 4: 80.5001, 8: 70.4104},
    ("llama-3.1-70b", "h200"): {1: 202.7560, 2: 121.2932, 4: 90.5791, 8: 73.0003},
}


def _floor_ms(ttft: dict) -> float:
    tp = np.array(list(ttft), dtype=float)
    return float(np.linalg.lstsq(np.c_[np.ones_like(tp), 1 / tp], np.array(list(ttft.values())), rcond=None)[0][0])


def test_vllm_s_measured_ttft_floor_follows_the_model_s_ops_not_one_cost_a_request():
    """Llama-3.1-70B's floor is ~1.9x gpt-oss-120b's on both devices: nearer the ratio of their prefill graphs' ops
    (643 / 399 = 1.6) than a flat request cost's 1. The floor holds the request's own cost and the steps' fixed
    costs no GPU count divides, so the vllm profile's per-request cost sits under each floor and is most of it (a
    flat 30.2 ms, main before the op term, was 35% over gpt-oss-120b's 22 ms floor on the H100)."""
    vllm = load_engine("vllm")
    ratio_ops = (Deployment(load_model("llama-3.1-70b"), H100, engine=vllm).prefill_ops
                 / Deployment(load_model("gpt-oss-120b"), H100, engine=vllm).prefill_ops)
    for device in ("h100-sxm", "h200"):
        gpt_oss, llama = (_floor_ms(MEASURED_TTFT_MS[(m, device)]) for m in ("gpt-oss-120b", "llama-3.1-70b"))
        assert abs(llama / gpt_oss - ratio_ops) < abs(llama / gpt_oss - 1.0)
        for model, floor in (("gpt-oss-120b", gpt_oss), ("llama-3.1-70b", llama)):
            priced = Deployment(load_model(model), load_hardware(device), engine=vllm).request_s * 1e3
            assert 0.5 * floor < priced < 1.1 * floor, (model, device)  # 1.1: a floor from 3-4 points is ~10% sure
