"""Engine.op_overhead_s: a fixed time each op of a step's graph pays beyond its bytes and FLOPs, a row of the step
(Deployment.fixed_rows). Counted by hand from the models' configs: a layer of more kernels pays more."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from roofline.cli import main
from roofline.deployment import Deployment
from roofline.engine import Engine, load_engine
from roofline.hardware import load_hardware
from roofline.models.config import load_model
from roofline.precision import Precision
from roofline.serving.gap import decode_gap

H200 = load_hardware("h200")
BASE = Engine(name="base", bandwidth_efficiency=0.8, flops_efficiency=0.5, step_overhead_s=5e-5)
PER_OP = dataclasses.replace(BASE, op_overhead_s=4e-6)


def rows(step) -> dict:
    return {str(op): (count, float(np.ravel(seconds)[0])) for op, count, seconds in zip(step.ops, step.counts,
                                                                                        step.time_s)}


@pytest.mark.parametrize("phase, context", [("decode", 2049.0), ("prefill", 2048.0)])
@pytest.mark.parametrize("tp", [1, 4])
def test_a_llama_layer_pays_its_eight_ops_and_the_split_does_not_divide_them(phase, context, tp):
    """Llama-3.1-8B (config.json: 32 layers): a layer runs 8 ops (input norm, qkv, attention, o_proj, post-attention
    norm, gate/up, SiLU-and-multiply, down), the model 3 more (embedding, final norm, lm_head): 32 x 8 + 3 = 259
    ops, 1.036 ms at 4 us each, on every GPU of a tensor-parallel group alike."""
    config = load_model("llama-3.1-8b")
    before, after = (Deployment(config, H200, engine=e, tp=tp).step(phase, np.array([1.0, 32.0]), context)
                     for e in (BASE, PER_OP))
    np.testing.assert_allclose(after.total_s - before.total_s, 259 * 4e-6, rtol=1e-12)
    assert rows(after)["overhead.ops"] == (259, pytest.approx(1.036e-3, rel=1e-12))
    assert "overhead.ops" not in rows(before)


def test_moe_and_mla_layers_run_more_ops_than_a_dense_one():
    """The graph's ops, by hand. Llama-3.1-70B: 80 layers x 8, and 3: 643. DeepSeek-V3 (config.json: 61 layers,
    first_k_dense_replace 3): MLA runs 6 ops more than a Llama attention (q_a and kv_a fused into one GEMM as the
    serving engines run it, their two norms, q_b, the absorbed q, v_up; and no qkv): a dense layer 13, a MoE layer 18
    (its router, top-k, the shared expert's gate/up, activation and down beside the routed experts' three, in place
    of the dense MLP's three): 3 x 13 + 58 x 18 + 3 = 1086."""
    ops = {name: rows(Deployment(load_model(name), H200, Precision(weights="fp8"), engine=PER_OP)
                      .step("decode", 8.0, 1025.0))["overhead.ops"][0]
           for name in ("llama-3.1-70b", "qwen3-235b-a22b", "deepseek-v3")}
    assert ops["llama-3.1-70b"] == 80 * 8 + 3
    assert ops["deepseek-v3"] == 3 * 13 + 58 * 18 + 3
    assert 8 < ops["qwen3-235b-a22b"] / 94 < 18  # a MoE layer without MLA or a shared expert: between the two


def test_the_gap_counts_it_as_launch_and_analyze_names_it(capsys, tmp_path):
    deployment = Deployment(load_model("llama-3.1-8b"), H200, engine=PER_OP)
    assert decode_gap(deployment, 8, 1024)["launch"] == pytest.approx(259 * 4e-6, rel=1e-9)
    path = tmp_path / "per-op.yaml"
    path.write_text(yaml.safe_dump({**load_engine("vllm").as_document(), "name": "per-op", "op_overhead_s": 4e-6}))
    assert main(["analyze", "--model", "llama-3.1-8b", "--engine", str(path)]) == 0
    assert "4.00 us an op a step" in capsys.readouterr().out.replace("µ", "u")


def test_absent_from_a_file_it_is_zero():
    document = load_engine("sglang").as_document()
    assert "op_overhead_s" not in document or document["op_overhead_s"]["value"] == 0.0
    assert load_engine("sglang").op_overhead_s == 0.0


@pytest.mark.parametrize("value", [-1e-6, 2e-3])
def test_a_value_out_of_its_range_is_one_line_naming_the_file_and_field(tmp_path, capsys, value):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**load_engine("vllm").as_document(), "op_overhead_s": value}))
    assert main(["analyze", "--model", "llama-3.1-8b", "--engine", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.yaml" in err and "op_overhead_s" in err and "[0, 0.001]" in err
