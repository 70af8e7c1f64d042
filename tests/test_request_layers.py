"""A request's first pass dispatched layer by layer: paid once, in TTFT, beside the steps (Deployment.request_s)."""
from dataclasses import replace

import numpy as np
import pytest

from roofline import load_hardware, load_model
from roofline.deployment import Deployment
from roofline.engine import Engine, load_engine
from roofline.model import DECODE, PREFILL
from roofline.serving.batching import StepCost, Workload, simulate_continuous
from roofline.serving.load import LoadModel, Policy

MODEL, H100 = load_model("llama-3.1-8b"), load_hardware("h100-sxm")  # 32 layers
FLAT = Engine(name="flat", bandwidth_efficiency=0.8, flops_efficiency=0.6, request_overhead_s=0.004)
LAYERED = replace(FLAT, name="layered", request_layer_overhead_s=0.0015)


def test_the_request_cost_is_the_flat_cost_and_one_dispatch_a_layer_whatever_the_split():
    assert Deployment(MODEL, H100, engine=LAYERED).request_s == pytest.approx(0.004 + 32 * 0.0015)
    # a pipeline's two stages dispatch their 16 layers each, one after the other: still 32
    assert Deployment(MODEL, H100, engine=LAYERED, tp=2, pp=2).request_s == pytest.approx(0.004 + 32 * 0.0015)
    assert Deployment(load_model("llama-3.1-70b"), H100, engine=LAYERED, tp=8).request_s == pytest.approx(
        0.004 + 80 * 0.0015)


def test_at_a_vanishing_rate_it_adds_to_ttft_alone_and_leaves_the_steps_as_they_were():
    flat, layered = (LoadModel(Deployment(MODEL, H100, engine=e), 900, 64, Policy(token_budget=2048))
                     for e in (FLAT, LAYERED))
    a, b = flat.at_rate([1e-6]), layered.at_rate([1e-6])
    assert float(b["ttft_s"][0] - a["ttft_s"][0]) == pytest.approx(32 * 0.0015, rel=1e-3)
    assert float(b["tpot_s"][0]) == pytest.approx(float(a["tpot_s"][0]), rel=1e-9)
    d = Deployment(MODEL, H100, engine=LAYERED)
    lone = float(d.step(PREFILL, 1.0, 900.0).total_s) + 0.004 + 32 * 0.0015
    decode = float(d.step(DECODE, 1.0, 900 + 32).total_s)
    assert float(b["ttft_s"][0]) == pytest.approx(lone + decode / 2, rel=0.01)  # + half a step in progress


def test_the_simulator_pays_it_once_a_request_as_the_load_model_does():
    d = Deployment(MODEL, H100, engine=LAYERED)
    arrivals = np.arange(20) * 1.0  # one a second: nothing queues
    work = Workload(arrivals, np.full(20, 900), np.full(20, 8))
    out = simulate_continuous(work, StepCost(d), 8, chunk_tokens=2048, request_overhead_s=d.request_s)
    prefill = float(d.step(PREFILL, 1.0, 900.0).total_s)
    assert np.allclose(out.ttft_s, prefill + d.request_s, rtol=1e-9)  # alone: its prompt's step and the dispatch


def test_a_dispatch_past_ten_milliseconds_a_layer_is_refused_as_unphysical():
    with pytest.raises(ValueError, match="request_layer_overhead_s"):
        replace(FLAT, request_layer_overhead_s=0.02)


def test_the_tensorrt_llm_1_profile_fits_it_from_a_sourced_prior_within_its_bounds():
    engine = load_engine("tensorrt-llm-1")
    assert "request_layer_overhead_s" in engine.fit and "PR #1166" in engine.prior_sources["request_layer_overhead_s"]
    # the fitted dispatch: a millisecond or two a layer, as the floor over its rows' layers says (32: ~0-30 ms, 94:
    # 120-200 ms); a request's own cost back to a front end's few ms
    assert 0.5e-3 < engine.request_layer_overhead_s < 5e-3 and engine.request_overhead_s < 0.02
