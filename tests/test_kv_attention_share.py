"""Decode attention's share keyed by the KV cache's format (Engine.attention_bandwidth_efficiency_by_kv, fitted as
"attention_bandwidth_efficiency.FORMAT"): it slows only attention over a cache of that format, a format not listed
reads at attention's own efficiency, a profile without the key prices as before, and only rows holding the format
pin it. Checked against Llama-3.1-8B's decode attention worked by hand from its config."""
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
LLAMA_8B = load_model("llama-3.1-8b")
BASE = Engine(name="base", bandwidth_efficiency=0.8, attention_bandwidth_efficiency=0.9)
BY_KV = dataclasses.replace(BASE, name="by-kv", attention_bandwidth_efficiency_by_kv={"fp8": 0.5})
# Llama-3.1-8B (config.json: 32 layers, 8 KV heads of 128): K and V of one cached token, one layer, in fp8: 2 x 8 x 128
# bytes; 8 sequences at 4096 tokens over the 32 layers of a step: 32 x 8 x 4096 x 2048 bytes read, and the step's
# queries and outputs (0.2% more).
KV_BYTES = 32 * 8 * 4096 * 2 * 8 * 128


def decode_ops(engine: Engine, kv: str) -> dict:
    step = Deployment(LLAMA_8B, H100, Precision(weights="bf16", kv=kv), engine=engine).step("decode", 8, 4096)
    return {str(op): (float(m), float(t)) for op, m, t in zip(step.ops, step.memory_s, step.time_s)}


def test_an_fp8_caches_share_slows_only_attention_over_it():
    """Memory-bound at 8 sequences: attention streams its bytes at 0.9 x 0.5 of the bandwidth with the share, at 0.9
    without; every other op, and attention over a 16-bit cache, priced as without the share."""
    shared, base = decode_ops(BY_KV, "fp8"), decode_ops(BASE, "fp8")
    attention = "layers[global,dense].attention"
    assert shared[attention][0] == pytest.approx(2 * base[attention][0], rel=1e-12)
    assert base[attention][0] == pytest.approx(KV_BYTES / (0.9 * H100.memory_bandwidth), rel=0.01)
    assert {k: v for k, v in shared.items() if k != attention} == {k: v for k, v in base.items() if k != attention}
    assert decode_ops(BY_KV, "bf16") == decode_ops(BASE, "bf16")


def test_the_share_multiplies_attention_for_its_format_alone():
    """(Its fit name, file entry and bound: tests/test_format_shares.py, with every keyed share.)"""
    assert BY_KV.kv_attention_efficiency("fp8") == pytest.approx(0.45) and BY_KV.kv_attention_efficiency("bf16") == 0.9


def test_only_rows_holding_the_kv_format_pin_its_share():
    row = ServingRow("r", "vllm", "llama-3.1-8b", "h100-sxm", "bf16", 1, 8, 1024, 128, 0.1, 0.01)
    fp8_row = dataclasses.replace(row, formats=Precision(weights="bf16", kv="fp8"))
    names = ["bandwidth_efficiency", "attention_bandwidth_efficiency.fp8"]
    assert pinned_formats(names, [row]) == ["bandwidth_efficiency"]
    assert pinned_formats(names, [row, fp8_row]) == names


def test_vllm_fits_its_fp8_cache_share_and_the_other_profiles_hold_none():
    assert "attention_bandwidth_efficiency.fp8" in load_engine("vllm").fit
    for name in ("tensorrt-llm-1", "sglang", "tensorrt-llm", "gpt-fast"):
        assert not load_engine(name).attention_bandwidth_efficiency_by_kv, name
