"""Engine.expert_bandwidth_efficiency: the share of an engine's weight bandwidth efficiency its routed experts'
grouped GEMMs stream at. Checked against a decode step of Mixtral-8x7B worked by hand from its config."""
from __future__ import annotations

import dataclasses
import json

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
from roofline.sharding import is_routed

H100 = load_hardware("h100-sxm")
MIXTRAL = load_model("mixtral-8x7b")
EXPERT_MATMULS = ("experts.gate_up", "experts.down")


def mixtral_batch1_expert_weight_bytes() -> dict:
    """Mixtral-8x7B (config.json: hidden 4096, intermediate 14336, 32 layers, top-2 of 8 experts), bf16, one
    token: each layer reads 2 experts' gate and up (2 x 4096 x 14336 x 2 bytes) and down (14336 x 4096 x 2 bytes).
    gate_up: 32 x 2 x 234,881,024 = 15,032,385,536 bytes; down: 32 x 2 x 117,440,512 = 7,516,192,768 bytes."""
    d, fe, layers, k = 4096, 14336, 32, 2
    return {"experts.gate_up": layers * k * 2 * d * fe * 2, "experts.down": layers * k * fe * d * 2}


def decode_step(engine: Engine, precision: Precision = Precision()):
    step = Deployment(MIXTRAL, H100, precision, engine=engine).step("decode", 1, 1025)
    return {str(op): (float(c), float(m), float(t))
            for op, c, m, t in zip(step.ops, step.compute_s, step.memory_s, step.time_s)}, float(step.total_s)


def test_the_routed_experts_weights_stream_at_the_share_and_nothing_else_moves():
    """Batch-1 decode is memory-bound: an expert matmul's time is its bytes over 0.8 x 3.35 TB/s x the share.
    At 0.5 the two expert matmuls take twice as long; every other op (attention, dense projections, the router,
    the experts' activation, which is no GEMM) is priced exactly as before."""
    base = Engine(name="base", bandwidth_efficiency=0.8)
    slow = dataclasses.replace(base, name="slow", expert_bandwidth_efficiency=0.5)
    (ops, total), (slow_ops, slow_total) = decode_step(base), decode_step(slow)
    by_hand = mixtral_batch1_expert_weight_bytes()
    assert by_hand == {"experts.gate_up": 15_032_385_536, "experts.down": 7_516_192_768}
    extra = 0.0
    for name, (compute, memory, time) in ops.items():
        matched = [m for m in EXPERT_MATMULS if name.endswith(m)]
        if matched:
            # the rest of the op's bytes: its input and output activations, ~3e-4 of the weights
            assert memory == pytest.approx(by_hand[matched[0]] / (0.8 * H100.memory_bandwidth), rel=1e-3)
            assert slow_ops[name][1] == pytest.approx(2 * memory, rel=1e-12)
            assert slow_ops[name][0] == compute
            extra += slow_ops[name][2] - time
        else:
            assert slow_ops[name] == (compute, memory, time), name
    assert slow_total - total == pytest.approx(extra, rel=1e-9)
    assert extra == pytest.approx(sum(by_hand.values()) / (0.8 * H100.memory_bandwidth), rel=1e-3)


def test_absent_is_todays_pricing_bit_for_bit(tmp_path):
    """A profile without the key prices with the share 1: the roofs carry no separate expert bandwidth (the
    dense weights'), and a shipped profile's MoE step is the same number as with the share written as 1."""
    document = load_engine("vllm").as_document()
    del document["expert_bandwidth_efficiency"]
    (tmp_path / "absent.yaml").write_text(yaml.safe_dump(document))
    vllm = load_engine(str(tmp_path / "absent.yaml"))
    assert vllm.expert_bandwidth_efficiency == 1.0 and Engine().expert_bandwidth_efficiency == 1.0
    fp8 = Precision(weights="fp8")
    assert Roofs.of(H100, fp8, vllm).expert_bandwidth is None
    assert Roofs.of(H100, fp8, vllm).bandwidth == H100.memory_bandwidth * vllm.weight_bandwidth_efficiency("fp8")
    written = dataclasses.replace(vllm, expert_bandwidth_efficiency=1.0)
    assert decode_step(vllm, fp8) == decode_step(written, fp8)
    kernel = load_engine("gpt-fast")  # roofs: kernel, the device's profiled weight stream times the engine's factor
    roofs, halved = Roofs.of(H100, Precision(), kernel), Roofs.of(
        H100, Precision(), dataclasses.replace(kernel, expert_bandwidth_efficiency=0.5))
    assert halved.expert_bandwidth == pytest.approx(0.5 * roofs.expert_bandwidth, rel=1e-15)
    assert (halved.bandwidth, halved.attention_bandwidth) == (roofs.bandwidth, roofs.attention_bandwidth)


def test_mixed_formats_multiply_the_share_onto_the_experts_own_format():
    """gpt-oss's mxfp4 experts beside bf16 weights: 0.8 x mxfp4's 0.6 x the share 0.5 = 0.24 of the bandwidth."""
    engine = Engine(name="e", bandwidth_efficiency=0.8, quantized_efficiency={"mxfp4": 0.6},
                    expert_bandwidth_efficiency=0.5)
    roofs = Roofs.of(H100, Precision(weights="bf16", experts="mxfp4"), engine)
    assert roofs.expert_bandwidth == pytest.approx(0.24 * H100.memory_bandwidth, rel=1e-12)
    assert roofs.bandwidth == pytest.approx(0.8 * H100.memory_bandwidth, rel=1e-12)


def test_the_gap_names_the_experts_term_and_a_dense_model_has_none():
    engine = Engine(name="e", bandwidth_efficiency=0.8, expert_bandwidth_efficiency=0.5)
    gap = decode_gap(Deployment(MIXTRAL, H100, engine=engine), 1, 1024)
    by_hand = sum(mixtral_batch1_expert_weight_bytes().values()) / (0.8 * H100.memory_bandwidth)
    assert gap["routed experts"] == pytest.approx(by_hand, rel=1e-3)
    dense = decode_gap(Deployment(load_model("llama-2-7b"), H100, engine=engine), 1, 1024)
    assert dense["routed experts"] == 0.0


def test_analyze_shows_the_share_beside_the_engines_other_terms(tmp_path, capsys):
    document = {**load_engine("vllm").as_document(), "expert_bandwidth_efficiency": 0.45}
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["analyze", "--model", "mixtral-8x7b", "--hardware", "h100-sxm", "--engine", str(path)]) == 0
    text = capsys.readouterr().out
    assert "routed experts x0.45" in text and "routed experts +" in text
    assert main(["analyze", "--model", "mixtral-8x7b", "--hardware", "h100-sxm", "--engine", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["engine"] == "vllm"


@pytest.mark.parametrize("value, bound", [(1.5, r"in \(0, 1\]"), (0.0, r"in \(0, 1\]"), ("fast", "must be a number")])
def test_a_bad_share_in_a_profile_is_one_line_naming_the_file_and_field(tmp_path, capsys, value, bound):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**load_engine("vllm").as_document(), "expert_bandwidth_efficiency": value}))
    with pytest.raises(ValueError, match=f"expert_bandwidth_efficiency.*{bound}"):
        load_engine(str(path))
    assert main(["analyze", "--model", "mixtral-8x7b", "--engine", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.yaml" in err and "expert_bandwidth_efficiency" in err


def test_only_moe_rows_pin_the_share():
    from roofline.fitting.published import read_rows
    dense = read_rows()
    assert dense and not any(load_model(r.model).n_experts for r in dense)
    moe = dataclasses.replace(dense[0], model="mixtral-8x7b")
    assert identified(["expert_bandwidth_efficiency"], dense) == []
    assert identified(["expert_bandwidth_efficiency"], [*dense, moe]) == ["expert_bandwidth_efficiency"]


def test_the_step_scales_with_the_share_at_any_batch():
    """Vectorized: the expert matmuls' memory time over a batch sweep is 1/share times the share-1 one."""
    base = Engine(name="b", bandwidth_efficiency=0.8)
    batches = np.array([1.0, 8.0, 64.0])
    steps = [Deployment(MIXTRAL, H100, engine=dataclasses.replace(base, expert_bandwidth_efficiency=s)).step(
        "decode", batches, 2049.0) for s in (1.0, 0.25)]
    for op, one, quarter in zip(steps[0].ops, steps[0].memory_s, steps[1].memory_s):
        factor = 4.0 if is_routed(op) and str(op).endswith(EXPERT_MATMULS) else 1.0
        np.testing.assert_allclose(np.broadcast_to(quarter, batches.shape),
                                   factor * np.broadcast_to(one, batches.shape), rtol=1e-12)
