"""Device kernel roofs: read off the project's own kernel profile, bounded curves, and the engines priced on them."""
import dataclasses
import json
import math

import numpy as np
import pytest

from roofline import kernel_roofs
from roofline.bounds import Roofs
from roofline.cli import main
from roofline.deployment import Deployment
from roofline.engine import EFFICIENCIES, load_engine
from roofline.hardware import DATA_DIR, load_hardware
from roofline.precision import Precision
from validation.kernel_roofs_fit import derive, isotonic

H100, H200, A100 = (load_hardware(h) for h in ("h100-sxm", "h200", "a100-80gb"))
# tensorrt-llm ships on datasheet roofs (its hand-worked plan tests); its factors over the kernel roofs, as a what-if
KERNEL_TRT = dataclasses.replace(load_engine("tensorrt-llm"), roofs="kernel")
PROFILE = json.loads((DATA_DIR / "measurements" / "cuda-h100-kernels.json").read_text())["quantized"]


def test_rederiving_the_measurements_gives_the_committed_file():
    assert derive() == json.loads(kernel_roofs.KERNEL_ROOFS_FILE.read_text())


def test_the_bf16_gemm_roof_lies_between_the_profiled_shapes_at_8192_tokens():
    """Hand-read from cuda-h100-kernels.json: each shape's bf16 FLOP/s at M = 8192 over the 989.4 TFLOP/s peak."""
    shapes = [PROFILE[f"{s} M=8192"]["bf16_TFLOPs"] * 1e12 / 989.4e12 for s in ("4096x4096", "4096x22016", "11008x4096")]
    assert [round(f, 3) for f in shapes] == [0.739, 0.711, 0.761]
    assert min(shapes) < kernel_roofs.curve(H100, "gemm", "bf16")(8192) < max(shapes)


def test_fp8_gemms_reach_a_smaller_share_of_their_peak_than_bf16_and_stream_slower_at_one_row():
    """The profile: _scaled_mm at 0.25-0.52 of the fp8 peak at >= 1k tokens (cuBLAS bf16: 0.69-0.76), and at
    M = 1 it moves its 1-byte weights at 0.18-0.47 of the bandwidth where bf16's GEMV moves 0.61-0.66."""
    gemm = kernel_roofs.curve(H100, "gemm", "fp8")
    assert 0.25 < gemm(4096) < 0.52 < 0.69 < kernel_roofs.curve(H100, "gemm", "bf16")(4096)
    one_row = {f: kernel_roofs.curve(H100, "weight_stream", f)() for f in ("bf16", "fp8")}
    assert one_row["fp8"] < one_row["bf16"]
    by_hand = sum(PROFILE[f"{s} M=1"]["fp8_GBps"] * PROFILE[f"{s} M=1"]["fp8_us"] for s in
                  ("4096x4096", "4096x22016", "11008x4096")) / sum(PROFILE[f"{s} M=1"]["fp8_us"] for s in
                                                                     ("4096x4096", "4096x22016", "11008x4096"))
    assert one_row["fp8"] == pytest.approx(by_hand * 1e9 / 3.35e12, rel=1e-9)  # bytes over summed time


def test_every_curve_is_bounded_and_does_not_fall_between_or_past_its_points():
    for device in kernel_roofs.devices():
        for kind, table in kernel_roofs.all_curves(load_hardware(device)).items():
            for dtype, c in table.items():
                x = np.geomspace(c.xs[0] / 10, c.xs[-1] * 10, 200)
                values = np.broadcast_to(c(x), x.shape)
                assert np.all(np.diff(values) >= -1e-15) and np.all((values > 0) & (values <= 1)), (device, kind, dtype)
                assert c.source.strip(), (device, kind, dtype)


def test_isotonic_pools_a_fall_into_its_mean_and_keeps_a_rise():
    assert isotonic([0.3, 0.5, 0.4, 0.9]) == [0.3, 0.45, 0.45, 0.9]
    assert isotonic([0.1, 0.2]) == [0.1, 0.2]


def test_an_unmeasured_device_takes_its_stated_prior_as_fractions_of_its_own_datasheet():
    assert "prior from h100-sxm" in kernel_roofs.origin(H200) and "measured" in kernel_roofs.origin(H100)
    engine = KERNEL_TRT
    roofs = Roofs.of(H200, Precision(), engine, tokens=4096.0)
    gemm = kernel_roofs.curve(H100, "gemm", "bf16")(4096.0)
    assert roofs.weight_matmul_flops == pytest.approx(989.4e12 * gemm * engine.flops_efficiency, rel=1e-12)
    stream = kernel_roofs.curve(H100, "weight_stream", "bf16")()
    assert roofs.bandwidth == pytest.approx(4.8e12 * min(1.0, stream * engine.bandwidth_efficiency), rel=1e-12)


def test_a_kernel_profile_prices_an_h100_fp8_gemm_at_the_fp8_roof_not_at_its_a100_fraction():
    """achieved = datasheet x kernel roof (device, dtype, M) x engine factor; on the datasheet, the factor alone."""
    kernel = KERNEL_TRT
    datasheet = dataclasses.replace(kernel, roofs="datasheet", **{n: min(1.0, getattr(kernel, n)) for n in EFFICIENCIES})
    fp8 = Precision(weights="fp8", activations="fp8", kv="fp8")
    on_roofs = Roofs.of(H100, fp8, kernel, tokens=8192.0)
    on_sheet = Roofs.of(H100, fp8, datasheet)
    roof = kernel_roofs.curve(H100, "gemm", "fp8")(8192.0)
    assert on_roofs.weight_matmul_flops == pytest.approx(1978.9e12 * roof * kernel.flops_efficiency, rel=1e-12)
    assert on_roofs.weight_matmul_flops < 0.5 * on_sheet.weight_matmul_flops


def test_an_a100_fp8_matmul_runs_on_the_bf16_units_and_their_roof():
    roofs = Roofs.of(A100, Precision(weights="fp8", activations="fp8"), load_engine("gpt-fast"), tokens=4096.0)
    engine = load_engine("gpt-fast")
    expected = 312e12 * min(1.0, kernel_roofs.curve(A100, "gemm", "bf16")(4096.0) * engine.flops_efficiency)
    assert roofs.weight_matmul_flops == pytest.approx(expected, rel=1e-12)


def test_gemm_roofs_follow_the_steps_tokens_and_attention_roofs_the_bytes_read():
    d = Deployment.of("llama-3-8b", "h100-sxm", engine=KERNEL_TRT)
    small, large = (d.step("prefill", 1, s) for s in (128, 8192))
    ideal = dataclasses.replace(d, engine=load_engine(None))
    ratio = [float(a.total_s / b.total_s) for a, b in ((small, ideal.step("prefill", 1, 128)),
                                                          (large, ideal.step("prefill", 1, 8192)))]
    assert ratio[0] > 1 and ratio[1] > 1
    short, long = (float(d.step("decode", 64, s).total_s) for s in (256, 32768))
    assert long > short


def test_a_device_without_kernel_roofs_is_refused_in_one_line_naming_the_curve_and_the_fix(tmp_path, capsys):
    mine = tmp_path / "my-gpu.json"
    mine.write_text(json.dumps({"my-gpu": {"name": "mine", "memory_bytes": 8e10, "memory_bandwidth_bytes_per_s": 3e12,
                                           "peak_flops": {"bf16": 9e14}}}))
    args = ["analyze", "--model", "llama-2-7b", "--hardware", str(mine), "--batch", "1"]
    assert main(args + ["--engine", "gpt-fast"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'my-gpu' has none" in err and "kernel_roofs.json" in err
    assert "roofline fit-roofs" in err and "prior" in err
    assert main(args) == 0  # the ideal engine prices the datasheet bound: it is the bound, not an estimate
    capsys.readouterr()


def test_a_dtype_without_a_curve_is_refused_naming_the_kind_and_the_dtype():
    with pytest.raises(ValueError, match=r"'h100-sxm' has no weight_stream curve for fp32.*fix:"):
        Deployment.of("llama-2-7b", "h100-sxm", weights="fp32", engine="gpt-fast").step("decode", 1, 128)
    assert math.isfinite(float(Deployment.of("llama-2-7b", "h100-sxm", weights="fp32").step("decode", 1, 128).total_s))


def test_the_roofs_command_prints_each_curve_with_its_source_and_refuses_an_unknown_device(capsys):
    assert main(["roofs", "h100-sxm"]) == 0
    out = capsys.readouterr().out
    assert "gemm" in out and "fp8" in out and "cuda-h100-kernels.json" in out and "source:" in out
    assert main(["roofs", "b300", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["origin"].startswith("prior from h100-sxm") and "nvfp4" in printed["curves"]["weight_stream"]
    assert main(["roofs", "a10g"]) == 2
    assert "kernel roofs: device 'a10g' has none" in capsys.readouterr().err


def test_blackwell_devices_carry_sourced_dense_peaks_and_nvfp4_weights_cost_four_and_a_half_bits():
    for device in ("b200", "b300", "gb200", "gb300"):
        hw = load_hardware(device)
        assert hw.peak("fp8") == 2 * hw.peak("bf16") and hw.peak_flops["nvfp4"] >= hw.peak("fp8"), device
        if device != "b200":  # the new entries: every number's source carries its address
            assert all("http" in source for source in hw.sources.values()), device
        assert hw.interconnect_bandwidth == 900e9
    assert load_hardware("b300").peak("int8") == load_hardware("b300").peak("bf16")  # no dense int8: bf16 units
    # E2M1 (4 bits) + one E4M3 scale (8 bits) per 16 values; the per-tensor fp32 scale is one number a tensor
    assert Precision(weights="nvfp4").weight_bytes * 8 == 4 + 8 / 16 == 4.5
