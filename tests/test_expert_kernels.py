"""The routed experts' own kernel terms: Engine.expert_flops_efficiency (the share of its GEMMs' flops efficiency the
grouped expert GEMMs compute at, prefill's side of expert_bandwidth_efficiency) and Engine.expert_layer_overhead_s
(a floor per MoE layer per step). Checked against Mixtral-8x7B and DeepSeek-V3 steps worked by hand from their
configs."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from roofline.bounds import Roofs
from roofline.cli import main
from roofline.deployment import Deployment
from roofline.engine import Engine, load_engine
from roofline.fitting.engine_fit import identified
from roofline.hardware import load_hardware
from roofline.models.config import load_model
from roofline.precision import Precision
from roofline.serving.gap import decode_gap

H100 = load_hardware("h100-sxm")
MIXTRAL = load_model("mixtral-8x7b")
EXPERT_MATMULS = ("experts.gate_up", "experts.down")
NEW = ("expert_flops_efficiency", "expert_layer_overhead_s")


def mixtral_prefill_expert_flops(tokens: int) -> dict:
    """Mixtral-8x7B (config.json: hidden 4096, intermediate 14336, 32 layers, top-2 of 8 experts): each token's 2
    experts run gate and up (2 x 2 x 4096 x 14336 FLOPs each) and down (2 x 14336 x 4096). At 4096 tokens:
    gate_up 32 x 4096 x 2 x 4 x 4096 x 14336 = 61,572,651,155,456; down half of it."""
    d, fe, layers, k = 4096, 14336, 32, 2
    return {"experts.gate_up": layers * tokens * k * 2 * 2 * d * fe, "experts.down": layers * tokens * k * 2 * fe * d}


def prefill_step(engine: Engine, tokens: int = 4096):
    step = Deployment(MIXTRAL, H100, engine=engine).step("prefill", 1, tokens)
    return {str(op): (float(c), float(m), float(t))
            for op, c, m, t in zip(step.ops, step.compute_s, step.memory_s, step.time_s)}, float(step.total_s)


def test_the_expert_gemms_compute_at_the_share_at_prefill_and_nothing_else_moves():
    """A 4096-token prompt gives each of Mixtral's 8 experts 1024 rows: compute-bound. Each expert GEMM takes its
    FLOPs over 0.5 x the bf16 peak x the share; at share 0.5 twice as long. Every other op (attention, the dense
    projections, the router) is priced exactly as before, and the step grows by the expert GEMMs' extra alone."""
    base = Engine(name="base", bandwidth_efficiency=0.8, flops_efficiency=0.5)
    slow = dataclasses.replace(base, name="slow", expert_flops_efficiency=0.5)
    (ops, total), (slow_ops, slow_total) = prefill_step(base), prefill_step(slow)
    by_hand = mixtral_prefill_expert_flops(4096)
    assert by_hand == {"experts.gate_up": 61_572_651_155_456, "experts.down": 30_786_325_577_728}
    peak = H100.peak("bf16")
    extra = 0.0
    for name, (compute, memory, time) in ops.items():
        matched = [m for m in EXPERT_MATMULS if name.endswith(m)]
        if matched:
            assert compute == pytest.approx(by_hand[matched[0]] / (0.5 * peak), rel=1e-12)
            assert compute > memory  # compute-bound: the share reaches the op's time
            assert slow_ops[name][0] == pytest.approx(2 * compute, rel=1e-12)
            assert slow_ops[name][1] == memory and slow_ops[name][2] == pytest.approx(2 * time, rel=1e-12)
            extra += slow_ops[name][2] - time
        else:
            assert slow_ops[name] == (compute, memory, time), name
    assert slow_total - total == pytest.approx(extra, rel=1e-9)
    assert extra == pytest.approx(sum(by_hand.values()) / (0.5 * peak), rel=1e-12)


def test_a_decode_step_at_batch_1_does_not_see_the_flops_share():
    """One token streams the experts' weights: memory-bound, so the compute share leaves the step unchanged."""
    base = Engine(name="base", bandwidth_efficiency=0.8, flops_efficiency=0.5)
    one = Deployment(MIXTRAL, H100, engine=base).step("decode", 1, 1025)
    slow = Deployment(MIXTRAL, H100, engine=dataclasses.replace(base, expert_flops_efficiency=0.5)).step(
        "decode", 1, 1025)
    assert float(slow.total_s) == float(one.total_s)


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_the_moe_layer_floor_adds_its_layers_times_the_value_once_whatever_the_split(tp):
    """DeepSeek-V3 (config.json: 61 layers, first_k_dense_replace 3): 58 MoE layers x 40 us = 2.32 ms a step, on
    every GPU of the tensor-parallel group (each runs every layer's chain): not divided by tp."""
    config = load_model("deepseek-v3")
    base = Engine(name="base", bandwidth_efficiency=0.8, flops_efficiency=0.5, layer_overhead_s=5e-6)
    floored = dataclasses.replace(base, expert_layer_overhead_s=4e-5)
    before, after = (Deployment(config, H100, Precision(weights="fp8"), engine=e, tp=tp).step(
        "decode", np.array([1.0, 64.0]), 2049.0) for e in (base, floored))
    np.testing.assert_allclose(after.total_s - before.total_s, 58 * 4e-5, rtol=1e-12)
    rows = {str(op): (count, float(np.ravel(seconds)[0])) for op, count, seconds in zip(after.ops, after.counts,
                                                                                        after.time_s)}
    assert rows["overhead.moe layers"] == (58, pytest.approx(2.32e-3, rel=1e-12))
    assert rows["overhead.layers"] == (61, pytest.approx(61 * 5e-6, rel=1e-12))


def test_a_dense_model_has_no_floor_row_and_the_gap_names_both_terms():
    engine = Engine(name="e", bandwidth_efficiency=0.8, expert_flops_efficiency=0.5, expert_layer_overhead_s=3e-5)
    dense = Deployment(load_model("llama-2-7b"), H100, engine=engine)
    assert "overhead.moe layers" not in [str(op) for op in dense.step("decode", 4, 1025).ops]
    assert decode_gap(dense, 4, 1024)[["expert GEMMs", "MoE layer floor"]].tolist() == [0.0, 0.0]
    gap = decode_gap(Deployment(MIXTRAL, H100, engine=engine), 4, 1024)
    assert gap["MoE layer floor"] == pytest.approx(32 * 3e-5, rel=1e-12)


def test_absent_is_todays_pricing_bit_for_bit(tmp_path):
    """A profile without the keys prices with share 1 and no floor: no separate expert FLOP/s roof where the experts
    share the weights' dtype, no step row, the same step as with the values written out."""
    document = load_engine("vllm").as_document()
    for name in (*NEW, "expert_flops_efficiency_by_format"):  # the per-format shares: absent, the scalar's
        document.pop(name, None)
    (tmp_path / "absent.yaml").write_text(yaml.safe_dump(document))
    vllm = load_engine(str(tmp_path / "absent.yaml"))
    assert (vllm.expert_flops_efficiency, vllm.expert_layer_overhead_s) == (1.0, 0.0)
    assert Roofs.of(H100, Precision(weights="fp8"), vllm).expert_matmul_flops is None
    written = dataclasses.replace(vllm, expert_flops_efficiency=1.0, expert_layer_overhead_s=0.0)
    for phase, context in (("prefill", 4096), ("decode", 1025)):
        a, b = (Deployment(MIXTRAL, H100, Precision(weights="fp8"), engine=e, tp=2).step(phase, 4, context)
                for e in (vllm, written))
        assert a.ops == b.ops and float(a.total_s) == float(b.total_s)


def test_mixed_formats_multiply_the_share_onto_the_experts_own_dtype_and_kernel_roofs_too():
    """gpt-oss's mxfp4 experts beside fp8 dense weights, each GEMM at its own dtype's peak: the experts at 0.5 x the
    share 0.4 of theirs, the dense weights at 0.5 of theirs. On kernel roofs (gpt-fast) the share multiplies
    the device's GEMM curve at the experts' rows."""
    engine = Engine(name="e", flops_efficiency=0.5, expert_flops_efficiency=0.4)
    precision = Precision(weights="fp8", experts="mxfp4")
    roofs = Roofs.of(H100, precision, engine)
    assert roofs.expert_matmul_flops == pytest.approx(0.2 * H100.peak(precision.expert_matmul_dtype), rel=1e-12)
    assert roofs.weight_matmul_flops == pytest.approx(0.5 * H100.peak(precision.weight_matmul_dtype), rel=1e-12)
    kernel = load_engine("gpt-fast")
    whole, share = (Roofs.of(H100, Precision(), e, tokens=4096.0, expert_tokens=64.0)
                    for e in (kernel, dataclasses.replace(kernel, expert_flops_efficiency=0.25)))
    assert share.expert_matmul_flops == pytest.approx(0.25 * whole.expert_matmul_flops, rel=1e-12)
    assert share.weight_matmul_flops == whole.weight_matmul_flops


@pytest.mark.parametrize("name, value, bound", [("expert_flops_efficiency", 1.5, r"in \(0, 1\]"),
                                                ("expert_flops_efficiency", 0.0, r"in \(0, 1\]"),
                                                ("expert_layer_overhead_s", -1e-6, r"in \[0, 0.001\]"),
                                                ("expert_layer_overhead_s", 0.01, r"in \[0, 0.001\]")])
def test_a_bad_value_in_a_profile_is_one_line_naming_the_file_and_field(tmp_path, capsys, name, value, bound):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**load_engine("vllm").as_document(), name: value}))
    with pytest.raises(ValueError, match=f"{name}.*{bound}"):
        load_engine(str(path))
    assert main(["analyze", "--model", "mixtral-8x7b", "--engine", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.yaml" in err and name in err


def test_only_moe_rows_pin_the_expert_terms():
    from roofline.fitting.published import read_rows
    dense = read_rows()
    assert dense and not any(load_model(r.model).n_experts for r in dense)
    moe = dataclasses.replace(dense[0], model="mixtral-8x7b")
    assert identified(list(NEW), dense) == []
    assert identified(list(NEW), [*dense, moe]) == list(NEW)
