"""The routed experts' grouped-GEMM share keyed by the experts' weight format (Engine.expert_flops_efficiency_by_format,
fitted as "expert_flops_efficiency.FORMAT"): each format's share scales only its own experts' GEMMs, a format not
listed takes the scalar expert_flops_efficiency, and a profile without the key prices as before. Checked against a
Mixtral-8x7B prefill worked by hand from its config, once with fp8 experts and once with mxfp4 experts."""
from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from roofline.bounds import Roofs
from roofline.cli import main
from roofline.deployment import Deployment
from roofline.engine import Engine, load_engine, with_values
from roofline.fitting.engine_fit import pinned_formats
from roofline.fitting.least_squares import FRACTION_FLOOR, get, variable_bounds
from roofline.fitting.published_serving import ServingRow
from roofline.hardware import load_hardware
from roofline.models.config import load_model
from roofline.precision import Precision

H100 = load_hardware("h100-sxm")
MIXTRAL = load_model("mixtral-8x7b")
FP8_EXPERTS = Precision(weights="fp8")  # every weight fp8, the experts' GEMMs in the bf16 activations' dtype
MXFP4_EXPERTS = Precision(weights="bf16", experts="mxfp4")  # gpt-oss's form: dequantized to bf16 on Hopper
# Mixtral-8x7B (config.json: hidden 4096, intermediate 14336, 32 layers, top-2 of 8 experts), 4096 prompt tokens:
# gate_up 32 x 4096 x 2 x (2 x 2 x 4096 x 14336) FLOPs, down half of it.
EXPERT_FLOPS = {"experts.gate_up": 61_572_651_155_456, "experts.down": 30_786_325_577_728}
BASE = Engine(name="base", bandwidth_efficiency=0.8, flops_efficiency=0.5)
BY_FORMAT = dataclasses.replace(BASE, name="by-format", expert_flops_efficiency_by_format={"fp8": 0.5, "mxfp4": 0.25})


def prefill_ops(engine: Engine, precision: Precision) -> dict:
    step = Deployment(MIXTRAL, H100, precision, engine=engine).step("prefill", 1, 4096)
    return {str(op): (float(c), float(m), float(t)) for op, c, m, t in zip(step.ops, step.compute_s, step.memory_s,
                                                                             step.time_s)}


def expert_op(name: str) -> str | None:
    return next((m for m in EXPERT_FLOPS if name.endswith(m)), None)


@pytest.mark.parametrize("precision, share", [(FP8_EXPERTS, 0.5), (MXFP4_EXPERTS, 0.25)])
def test_each_formats_share_scales_only_its_own_expert_gemms(precision, share):
    """The 1024 rows an expert gets make its GEMMs compute-bound: each takes its FLOPs over 0.5 x the experts'
    dtype's peak x its format's share (bf16 for both: fp8 weights with bf16 activations, mxfp4 dequantized).
    Every other op is priced as without the shares."""
    assert MIXTRAL.n_experts == 8
    ops, base = prefill_ops(BY_FORMAT, precision), prefill_ops(BASE, precision)
    peak = H100.peak(precision.expert_matmul_dtype)
    assert precision.expert_matmul_dtype == "bf16"
    seen = 0
    for name, (compute, memory, time) in ops.items():
        matmul = expert_op(name)
        if matmul is None:
            assert (compute, memory, time) == base[name], name
            continue
        seen += 1
        assert compute == pytest.approx(EXPERT_FLOPS[matmul] / (0.5 * peak * share), rel=1e-12)
        assert base[name][0] == pytest.approx(EXPERT_FLOPS[matmul] / (0.5 * peak), rel=1e-12)
        assert memory == base[name][1] and compute > memory
    assert seen == 2


@pytest.mark.parametrize("precision, own", [(FP8_EXPERTS, "fp8"), (MXFP4_EXPERTS, "mxfp4")])
def test_the_other_formats_share_leaves_a_deployment_unchanged(precision, own):
    """A profile holding both shares prices fp8 experts as one holding fp8's alone, and mxfp4's likewise: the
    step, not only the expert ops."""
    alone = dataclasses.replace(BASE, expert_flops_efficiency_by_format={own: BY_FORMAT.expert_flops_efficiency_by_format[own]})
    both, one = (Deployment(MIXTRAL, H100, precision, engine=e).step("prefill", 1, 4096) for e in (BY_FORMAT, alone))
    assert both.ops == one.ops and float(both.total_s) == float(one.total_s)


def test_a_format_not_listed_takes_the_scalar_share_and_absent_that_is_1():
    """int4 experts under {fp8: 0.5}: the scalar's 0.7; with no scalar either, the dense GEMMs' roof (no own roof)."""
    scalar = dataclasses.replace(BY_FORMAT, expert_flops_efficiency=0.7)
    int4 = Precision(weights="bf16", experts="int4")
    assert scalar.expert_gemm_efficiency("int4") == 0.7 and scalar.expert_gemm_efficiency("fp8") == 0.5
    assert Roofs.of(H100, int4, scalar).expert_matmul_flops == pytest.approx(0.5 * 0.7 * H100.peak("bf16"), rel=1e-12)
    assert Roofs.of(H100, int4, BY_FORMAT).expert_matmul_flops is None  # share 1, same dtype as the dense GEMMs
    assert Roofs.of(H100, FP8_EXPERTS, scalar).expert_matmul_flops == pytest.approx(0.25 * H100.peak("bf16"), rel=1e-12)


def test_on_kernel_roofs_the_formats_share_multiplies_the_devices_gemm_curve_at_the_experts_rows():
    kernel = load_engine("gpt-fast")
    whole, share = (Roofs.of(H100, MXFP4_EXPERTS, e, tokens=4096.0, expert_tokens=64.0)
                    for e in (kernel, dataclasses.replace(kernel, expert_flops_efficiency_by_format={"mxfp4": 0.25})))
    assert share.expert_matmul_flops == pytest.approx(0.25 * whole.expert_matmul_flops, rel=1e-12)
    assert share.weight_matmul_flops == whole.weight_matmul_flops


def without_format_shares(tmp_path, name: str = "vllm") -> Engine:
    """A shipped profile written to a file without the key."""
    document = load_engine(name).as_document()
    document.pop("expert_flops_efficiency_by_format", None)
    document["fit"] = [n for n in document["fit"] if not n.startswith("expert_flops_efficiency.")]
    document["priors"] = {n: v for n, v in document["priors"].items() if n in document["fit"]}
    document["prior_sources"] = {n: v for n, v in document["prior_sources"].items() if n in document["priors"]}
    (tmp_path / "absent.yaml").write_text(yaml.safe_dump(document))
    return load_engine(str(tmp_path / "absent.yaml"))


def test_absent_the_profiles_document_and_pricing_are_todays(tmp_path):
    """No key in a file: an empty mapping, nothing new in the profile's document, and the step priced as the same
    profile with a share of another format alone (the vllm profile, fp8 experts)."""
    vllm = without_format_shares(tmp_path)
    assert vllm.expert_flops_efficiency_by_format == {}
    assert "expert_flops_efficiency_by_format" not in vllm.as_document()
    keyed = dataclasses.replace(vllm, expert_flops_efficiency_by_format={"mxfp4": 0.3})  # another format only
    a, b = (Deployment(MIXTRAL, H100, FP8_EXPERTS, engine=e, tp=2).step("prefill", 4, 4096) for e in (vllm, keyed))
    assert a.ops == b.ops and float(a.total_s) == float(b.total_s)


def test_the_yaml_form_round_trips_with_what_pins_each_share(tmp_path):
    document = {**without_format_shares(tmp_path).as_document(),
                "expert_flops_efficiency_by_format": {"fp8": {"value": 0.3, "pinned_by": "fp8 MoE rows"}, "int4": 0.9}}
    document["fit"] = [*document["fit"], "expert_flops_efficiency.fp8"]
    path = tmp_path / "keyed.yaml"
    path.write_text(yaml.safe_dump(document))
    engine = load_engine(str(path))
    assert engine.expert_flops_efficiency_by_format == {"fp8": 0.3, "int4": 0.9}
    assert engine.parameters()["expert_flops_efficiency.fp8"] == 0.3
    written = engine.as_document()["expert_flops_efficiency_by_format"]
    assert written["fp8"]["pinned_by"] == "fp8 MoE rows" and written["int4"]["bounds"] == [0.0, 1.0]


def test_the_fitter_sets_and_reads_a_formats_share_inside_0_1_even_on_kernel_roofs():
    kernel = load_engine("gpt-fast")  # its own efficiencies may pass 1 (factors over the kernel roofs): not a share
    assert variable_bounds("expert_flops_efficiency.mxfp4", kernel.fraction_high) == (FRACTION_FLOOR, 1.0)
    assert variable_bounds("quantized_efficiency.int4", kernel.fraction_high) == (FRACTION_FLOOR, 2.0)
    engine = with_values(dataclasses.replace(BASE, expert_flops_efficiency=0.6), ["expert_flops_efficiency.fp8"], [0.3])
    assert engine.expert_flops_efficiency_by_format == {"fp8": 0.3} and engine.expert_flops_efficiency == 0.6
    assert get(engine, "expert_flops_efficiency.fp8") == 0.3
    assert get(engine, "expert_flops_efficiency.int4") == 0.6  # the prior a fit of an unlisted format starts from


def row(model: str, precision: Precision) -> ServingRow:
    return ServingRow(id=model, backend="vllm", model=model, hardware="h200", weights=precision.weights, tp=8,
                      concurrency=4, prompt=1000, gen=1000, ttft_s=0.1, tpot_s=0.01, formats=precision)


def test_a_formats_share_is_fitted_only_where_a_moe_row_holds_experts_in_that_format():
    """Dense fp8 rows (Llama) pin no expert format; gpt-oss's rows pin mxfp4 alone; a quantized GEMV's format is
    pinned by any row with weights in it, as before."""
    names = ["flops_efficiency", "expert_flops_efficiency.fp8", "expert_flops_efficiency.mxfp4",
             "quantized_efficiency.fp8"]
    dense = [row("llama-3.1-70b", Precision(weights="fp8"))]
    assert pinned_formats(names, dense) == ["flops_efficiency", "quantized_efficiency.fp8"]
    gpt_oss = [*dense, row("gpt-oss-120b", MXFP4_EXPERTS)]
    assert pinned_formats(names, gpt_oss) == ["flops_efficiency", "expert_flops_efficiency.mxfp4",
                                              "quantized_efficiency.fp8"]
    assert pinned_formats(names, [*gpt_oss, row("qwen3-235b-a22b", FP8_EXPERTS)]) == names


@pytest.mark.parametrize("value, named", [({"fp8": 1.5}, r"expert_flops_efficiency.fp8 = 1.5 .*in \(0, 1\]"),
                                          ({"fp8": 0.0}, r"expert_flops_efficiency.fp8 = 0.0 .*in \(0, 1\]"),
                                          ({"fp8": "x"}, "expert_flops_efficiency.fp8 must be a number"),
                                          ("x", "expert_flops_efficiency_by_format must be a mapping")])
def test_a_bad_share_in_a_profile_is_one_line_naming_the_file_and_the_field(tmp_path, capsys, value, named):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**load_engine("vllm").as_document(), "expert_flops_efficiency_by_format": value}))
    assert main(["analyze", "--model", "mixtral-8x7b", "--engine", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.yaml" in err
    assert re.search(named, err), err
