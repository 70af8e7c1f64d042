"""Narrow slices of each routed expert under tensor parallelism (Engine.expert_slice_half_columns).

Oracle: NVIDIA's profile of TensorRT-LLM 1.3.0rc20's fused MoE on an H200 (AIConfigurator 0.12.0,
systems/data/h200_sxm/moe/trtllm/1.3.0rc20), DeepSeek-V3's experts (7168 x 2048, 256 of them, top 8), block-scaled
fp8, 8192 tokens, experts loaded evenly: 0.28, 0.20, 0.13 and 0.07 of the fp8 peak with each expert whole on a GPU
and split over 2, 4 and 8 (hand-read from the profile; validation/expert_slice_fit.py fits N_half over every shape).
"""
import dataclasses

import pytest

from roofline.bounds import Roofs
from roofline.deployment import Deployment
from roofline.engine import engine_from_document, load_engine
from roofline.hardware import load_hardware
from roofline.model import PREFILL
from roofline.models.config import load_model
from roofline.ops import EXPERT_MATMUL
from roofline.precision import Precision

PROFILED = {1: 0.28, 2: 0.20, 4: 0.13, 8: 0.07}  # moe_tp -> fraction of the fp8 peak, DeepSeek-V3's experts
FP8 = Precision(weights="fp8", activations="fp8")
# validation/expert_slice_fit.py on the same package: TensorRT-LLM 1.3.0rc20's block-scaled fp8 fused MoE, all its
# shapes on H100 and H200 at >= 8192 tokens, no expert parallelism
TRTLLM_HALF_COLUMNS = 1169.0


def trtllm_sliced():
    return dataclasses.replace(load_engine("tensorrt-llm-1"), expert_slice_half_columns=TRTLLM_HALF_COLUMNS)


def test_the_share_is_a_saturation_in_the_slice_width():
    engine = dataclasses.replace(load_engine("ideal"), expert_slice_half_columns=1169.0)
    assert engine.expert_slice_share(256) == pytest.approx(256 / (256 + 1169), rel=1e-12)
    assert engine.expert_slice_share(1169) == pytest.approx(0.5, rel=1e-12)
    assert load_engine("ideal").expert_slice_share(256) == 1.0  # no loss stated: none priced
    assert engine.expert_slice_share(None) == 1.0  # a dense model: no expert slice


def test_tensorrt_llms_half_width_reproduces_its_profiled_moe_under_tp():
    """The model's tp-split over whole-expert ratio against the profile's, per split: within 15%."""
    engine = trtllm_sliced()
    deepseek = load_model("deepseek-v3")
    whole = engine.expert_slice_share(deepseek.d_expert)
    for tp, fraction in PROFILED.items():
        modelled = engine.expert_slice_share(deepseek.d_expert / tp) / whole
        assert modelled == pytest.approx(fraction / PROFILED[1], rel=0.15), tp


def test_the_pricer_reads_each_gpus_slice_from_the_layout():
    engine = trtllm_sliced()
    plain = dataclasses.replace(engine, expert_slice_half_columns=0.0)
    model, h200 = load_model("deepseek-v3"), load_hardware("h200")
    for tp, columns in ((8, 256), (1, 2048)):
        split = Deployment(model, h200, FP8, tp=tp, ep=8 // tp, engine=engine).roofs
        unsplit = Deployment(model, h200, FP8, tp=tp, ep=8 // tp, engine=plain).roofs
        assert split.peaks((EXPERT_MATMUL,))[0] == pytest.approx(
            unsplit.peaks((EXPERT_MATMUL,))[0] * columns / (columns + engine.expert_slice_half_columns), rel=1e-12)
        assert split.weight_matmul_flops == unsplit.weight_matmul_flops  # the dense GEMMs keep their rate
    # a dense model has no expert slice: bit for bit the roofs without the term
    llama = load_model("llama-3.1-8b")
    assert (Deployment(llama, h200, FP8, tp=8, engine=engine).roofs
            == Deployment(llama, h200, FP8, tp=8, engine=plain).roofs)


def test_no_width_is_bit_for_bit_the_old_pricing():
    hw = load_hardware("h100-sxm")
    engine = dataclasses.replace(load_engine("vllm"), expert_slice_half_columns=0.0)
    assert Roofs.of(hw, FP8, engine, expert_columns=192) == Roofs.of(hw, FP8, engine)


def test_a_width_out_of_range_is_one_line_naming_the_field():
    document = load_engine("vllm").as_document()
    document["expert_slice_half_columns"]["value"] = -5.0
    with pytest.raises(ValueError, match=r"expert_slice_half_columns = -5.0 is out of its physical range"):
        engine_from_document(document, "engine file 'p.yaml'")


def test_a_rows_moe_split_inside_tp_is_read_as_each_experts_slice(tmp_path):
    """TensorRT-LLM's Qwen3-235B rows run attention tp 8 with experts EP 8 (moe_tp 1): whole experts, not 1/8
    slices; DeepSeek-V3's db-dump rows split each expert 8 ways (moe_tp 8); vLLM's 0 columns state no split."""
    from roofline.fitting.published_serving import read_serving_table
    from serving_sample import TAIL, write_sample

    def line(name, model, tp, moe_tp, moe_ep):  # a TTFT of its own: equal ones would be copies (fitting.copies)
        return (f"{name},src,trtllm,1.0,{model},h200_sxm,fp8,agg,1024,128,fp8_block,fp8_block,16,{tp},1,,{moe_tp},"
                f"{moe_ep}{TAIL},{50 + len(name)}.0,8.0")
    rows = read_serving_table(write_sample(tmp_path, [
        line("ep", "Qwen/Qwen3-235B-A22B-FP8", 8, 1, 8), line("tp", "deepseek-ai/DeepSeek-V3", 8, 8, 1),
        line("both", "Qwen/Qwen3-235B-A22B-FP8", 4, 2, 2), line("unstated", "Qwen/Qwen3-235B-A22B-FP8", 4, 0, 0),
        line("dense", "Qwen/Qwen3-32B", 4, 4, 1)])).rows
    assert [(r.id, r.expert_tp) for r in rows] == [("ep", 1), ("tp", 8), ("both", 2), ("unstated", None),
                                                   ("dense", None)]


def test_the_split_sets_the_slice_and_nothing_else():
    engine = trtllm_sliced()
    model, h200 = load_model("deepseek-v3"), load_hardware("h200")
    whole = Deployment(model, h200, FP8, tp=8, expert_tp=1, engine=engine)
    sliced = Deployment(model, h200, FP8, tp=8, engine=engine)
    assert whole.expert_columns == 2048 and sliced.expert_columns == 256
    plain = dataclasses.replace(engine, expert_slice_half_columns=0.0)
    # without a slice loss the split changes nothing: the same bytes and FLOPs a GPU
    a = Deployment(model, h200, FP8, tp=8, expert_tp=1, engine=plain).step(PREFILL, 1.0, 1024.0).total_s
    b = Deployment(model, h200, FP8, tp=8, engine=plain).step(PREFILL, 1.0, 1024.0).total_s
    assert float(a) == float(b)
    assert float(whole.step(PREFILL, 1.0, 1024.0).total_s) < float(sliced.step(PREFILL, 1.0, 1024.0).total_s)


@pytest.mark.parametrize("model, expert_tp, message", [
    ("deepseek-v3", 3, r"expert_tp: 3 GPUs splitting each routed expert must divide tp = 8; use a divisor of 8"),
    ("llama-3.1-8b", 2, r"expert_tp: model 'llama-3.1-8b' has no routed experts to split"),
    ("deepseek-v3", 0, r"expert_tp")])
def test_a_split_that_cannot_be_is_one_line_naming_expert_tp(model, expert_tp, message):
    with pytest.raises(ValueError, match=message):
        Deployment(load_model(model), load_hardware("h200"), FP8, tp=8, expert_tp=expert_tp)


def test_the_derivation_recovers_a_known_half_width_from_points_on_its_curve():
    """validation/expert_slice_fit.half_columns on points drawn from f_wide x N / (N + 900), two shapes: 900."""
    import pandas as pd
    from validation.expert_slice_fit import half_columns
    columns = [128, 256, 512, 1024, 2048]
    table = pd.DataFrame({"shape": ["a"] * 5 + ["b"] * 5, "columns": columns * 2,
                          "fraction": [w * n / (n + 900) for w in (0.4, 0.3) for n in columns]})
    half, points = half_columns(table)
    assert half == pytest.approx(900, rel=1e-4) and points == 10


def test_analyze_takes_the_split_and_refuses_a_bad_one_in_one_line(capsys):
    """Qwen3-235B fp8 on 8 H200s under vllm (its slice width 464): whole experts (--expert-tp 1, 1536 columns a GPU)
    prefill faster than 1/8 slices (192 columns): the experts' FLOP/s x 0.77 against x 0.29."""
    import json

    from roofline.cli import main
    ttft = {}
    for split in ("1", "8"):
        assert main(["analyze", "--model", "qwen3-235b-a22b", "--hardware", "h200", "--tp", "8", "--engine", "vllm",
                     "--weights", "fp8", "--batch", "1", "--prompt", "4096", "--expert-tp", split, "--json"]) == 0
        ttft[split] = json.loads(capsys.readouterr().out)[0]["ttft_s"]
    assert ttft["1"] < ttft["8"]
    for bad, message in (("3", "must divide tp = 8"), ("0", "--expert-tp"), ("x", "--expert-tp")):
        assert main(["analyze", "--model", "qwen3-235b-a22b", "--hardware", "h200", "--tp", "8",
                     "--expert-tp", bad]) == 2
        err = capsys.readouterr().err
        assert message in err and "\n" not in err.strip() and "Traceback" not in err
