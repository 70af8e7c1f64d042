"""The GEMMs' share keyed by the dtype they multiply in (Engine.flops_efficiency_by_dtype, fitted as
"flops_efficiency.DTYPE"): it slows only the dense GEMMs in that dtype (not the routed experts'), a dtype not listed
computes at flops_efficiency, a profile without the key prices as before, and only rows running the dtype pin it.
Checked against Llama-3.1-8B's prefill projections worked by hand from its config."""
from __future__ import annotations

import dataclasses

import pytest

from roofline.deployment import Deployment
from roofline.engine import Engine, load_engine
from roofline.fitting.engine_fit import pinned_formats
from roofline.fitting.published_serving import ServingRow
from roofline.hardware import load_hardware
from roofline.models.config import load_model
from roofline.precision import Precision

H100 = load_hardware("h100-sxm")
BASE = Engine(name="base", flops_efficiency=0.8)
BY_DTYPE = dataclasses.replace(BASE, name="by-dtype", flops_efficiency_by_dtype={"fp8": 0.5})
W8A8 = Precision(weights="fp8", activations="fp8")
# Llama-3.1-8B (config.json: 32 layers, hidden 4096, 32 query heads and 8 KV heads of 128): the fused QKV projection
# multiplies 4096 x (4096 + 2 x 1024) weights; a 4096-token prompt over the 32 layers takes 2 x 4096 x 6144 x 4096 x 32
# FLOPs, at the H100's dense fp8 peak (1978.9 TFLOP/s) times 0.8 times the share.
QKV_FLOPS = 2 * 4096 * 6144 * 4096 * 32


def compute_s(model: str, engine: Engine, precision: Precision, tp: int = 1) -> dict:
    step = Deployment(load_model(model), H100, precision, engine=engine, tp=tp).step("prefill", 1, 4096)
    return {str(op): float(c) for op, c in zip(step.ops, step.compute_s)}


def test_an_fp8_share_slows_only_the_fp8_gemms():
    shared, base = compute_s("llama-3.1-8b", BY_DTYPE, W8A8), compute_s("llama-3.1-8b", BASE, W8A8)
    qkv = "layers[global,dense].qkv_proj"
    assert base[qkv] == pytest.approx(QKV_FLOPS / (1978.9e12 * 0.8), rel=1e-6)
    assert shared[qkv] == pytest.approx(2 * base[qkv], rel=1e-12)
    attention = "layers[global,dense].attention"  # multiplies the 16-bit cache: not an fp8 GEMM
    assert shared[attention] == base[attention] > 0
    assert compute_s("llama-3.1-8b", BY_DTYPE, Precision()) == compute_s("llama-3.1-8b", BASE, Precision())


def test_routed_experts_keep_their_own_share_by_format():
    """Qwen3-235B-A22B W8A8 at tp 8: the dense projections take the fp8 share, the experts' grouped GEMMs do not
    (expert_flops_efficiency.FORMAT is theirs)."""
    shared = compute_s("qwen3-235b-a22b", BY_DTYPE, W8A8, tp=8)
    base = compute_s("qwen3-235b-a22b", BASE, W8A8, tp=8)
    experts, projection = "layers[global,moe].experts.gate_up", "layers[global,moe].qkv_proj"
    assert shared[experts] == base[experts] > 0
    assert shared[projection] == pytest.approx(2 * base[projection], rel=1e-12)


def test_the_share_multiplies_flops_efficiency_for_its_dtype_alone():
    """(Its fit name, file entry and bound: tests/test_format_shares.py, with every keyed share.)"""
    assert BY_DTYPE.gemm_efficiency("fp8") == pytest.approx(0.4) and BY_DTYPE.gemm_efficiency("bf16") == 0.8
    assert BY_DTYPE.gemm_share("fp8") == 0.5 and BASE.gemm_share("fp8") == 1.0


def test_only_rows_running_the_dtype_pin_its_share():
    row = ServingRow("r", "trtllm", "llama-3.1-8b", "h100-sxm", "bf16", 1, 8, 1024, 128, 0.1, 0.01)
    fp8_row = dataclasses.replace(row, weights="fp8")  # a serving row's fp8 weights run W8A8
    names = ["flops_efficiency", "flops_efficiency.fp8"]
    assert pinned_formats(names, [row]) == ["flops_efficiency"]
    assert pinned_formats(names, [row, fp8_row]) == names


def test_a_profile_without_the_key_holds_none():
    for name in ("tensorrt-llm", "gpt-fast", "llama.cpp"):
        assert not load_engine(name).flops_efficiency_by_dtype, name
