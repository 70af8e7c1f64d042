"""A decode GEMV is a fixed time plus a weight stream (Engine.op_overhead_s, Engine.bandwidth_efficiency), each the
same on both Hopper devices; a plain fraction of the datasheet is not.

Oracle: NVIDIA's profile of vLLM 0.24.0's own GEMMs (AIConfigurator 0.12.0,
systems/data/{h100_sxm,h200_sxm}/gemm/vllm/0.24.0/gemm_perf.parquet), M = 1, the fastest kernel of each shape
(hand-read from the profile, N and K each 1k-16k; validation/gemv_floor_fit.py fits every shape with M <= 8, N and
K 1k-64k: t0 3.6 / 4.0 us in bf16, 5.6 / 6.0 us in fp8; f 0.88 / 0.85, 0.79 / 0.75 on H100 / H200).
"""
import numpy as np
import pytest

from roofline.bounds import Roofs
from roofline.engine import load_engine
from roofline.hardware import load_hardware
from roofline.precision import Precision
from validation.gemv_floor_fit import fixed_and_stream

# microseconds at M = 1: rows N = SIDES, columns K = SIDES, per (device, weight format)
SIDES = (1024, 2048, 4096, 8192, 16384)
PROFILED = {
    ("h100-sxm", "bf16"): [[3.94, 5.62, 7.52, 10.28, 15.0], [4.09, 6.73, 9.93, 15.42, 25.92],
                           [5.96, 8.84, 15.05, 30.25, 47.54], [9.56, 13.88, 24.06, 51.64, 104.23],
                           [13.85, 28.71, 46.02, 88.52, 207.21]],
    ("h100-sxm", "fp8"): [[7.45, 8.36, 9.2, 11.6, 17.67], [5.47, 8.25, 9.25, 13.61, 21.53],
                          [5.55, 8.17, 13.77, 18.71, 32.03], [7.6, 13.47, 16.52, 30.15, 51.15],
                          [12.09, 22.21, 27.68, 57.48, 95.17]],
    ("h200", "bf16"): [[7.62, 11.52, 6.93, 8.93, 13.59], [3.98, 6.42, 8.7, 12.97, 20.02],
                       [5.39, 7.3, 12.56, 20.8, 35.28], [6.97, 10.97, 19.1, 34.93, 74.62],
                       [10.66, 20.56, 33.91, 72.37, 125.01]],
    ("h200", "fp8"): [[7.14, 6.03, 7.66, 11.23, 17.23], [5.26, 8.2, 10.94, 14.19, 21.02],
                      [7.49, 7.31, 12.03, 16.96, 25.45], [9.32, 9.2, 13.41, 22.29, 41.16],
                      [12.91, 14.27, 24.35, 41.94, 78.07]],
}
BYTES = {"bf16": 2, "fp8": 1}


def profiled(device: str, fmt: str):
    """(weight bytes, seconds) of the hand-read shapes."""
    weight_bytes = np.outer(SIDES, SIDES).ravel() * float(BYTES[fmt])
    return weight_bytes, np.ravel(PROFILED[(device, fmt)]) * 1e-6


def test_the_fit_recovers_a_fixed_time_and_a_stream_it_was_made_from():
    weight_bytes = np.geomspace(2e6, 8e8, 9)
    fixed, stream, error = fixed_and_stream(weight_bytes, 3.5e-6 + weight_bytes / (0.85 * 4.8e12), 4.8e12)
    assert (fixed, stream, error) == (pytest.approx(3.5e-6, rel=1e-9), pytest.approx(0.85, rel=1e-9),
                                      pytest.approx(0.0, abs=1e-9))


@pytest.mark.parametrize("fmt", ["bf16", "fp8"])
def test_the_fixed_time_and_the_stream_transfer_between_the_devices_where_the_plain_fraction_does_not(fmt):
    """The H200 streams 1.43x the H100's bytes a second; the same few microseconds a GEMV cost it a larger share."""
    fits, plain = {}, {}
    for device in ("h100-sxm", "h200"):
        bandwidth = load_hardware(device).memory_bandwidth
        weight_bytes, seconds = profiled(device, fmt)
        fits[device] = fixed_and_stream(weight_bytes, seconds, bandwidth)
        plain[device] = np.median(weight_bytes / seconds / bandwidth)
        assert fits[device][2] < 0.12  # the form holds: half the shapes within 12% (the profile's own scatter)
        assert 2e-6 < fits[device][0] < 8e-6 and 0.7 < fits[device][1] <= 1.0
    (h100_fixed, h100_stream, _), (h200_fixed, h200_stream, _) = fits["h100-sxm"], fits["h200"]
    assert abs(h200_fixed - h100_fixed) < 1e-6 and abs(h200_stream - h100_stream) < 0.06
    assert plain["h100-sxm"] - plain["h200"] > 0.08


def priced_errors(device: str, fmt: str):
    """(weight bytes, priced / profiled - 1) of vLLM's decode GEMVs under the vllm profile: its fixed time an op
    plus its weight stream for the format, the two the serving fit leaves."""
    hw, engine = load_hardware(device), load_engine("vllm")
    weight_bytes, seconds = profiled(device, fmt)
    stream = Roofs.of(hw, Precision(weights=fmt, activations=fmt), engine).bandwidth
    return weight_bytes, (engine.op_overhead_s + weight_bytes / stream) / seconds - 1.0


@pytest.mark.parametrize("device", ["h100-sxm", "h200"])
def test_the_vllm_profile_prices_the_profiled_16_bit_gemvs_on_each_device(device):
    """Fitted to the serving rows alone, its fixed time (~4 us an op) and 16-bit stream (0.87) price NVIDIA's
    profile of the kernels on either device as the form's own best fit does (7-8% at the median, above)."""
    weight_bytes, errors = priced_errors(device, "bf16")
    assert np.median(np.abs(errors)) < 0.10
    assert np.all(np.abs(errors[weight_bytes >= 16e6]) < 0.15)


@pytest.mark.parametrize("device", ["h100-sxm", "h200"])
def test_its_fp8_gemvs_are_priced_fast_where_the_activations_quantization_is_not_in_the_graph(device):
    """Per-tensor fp8 GEMVs stream at quantized_efficiency.fp8 (0.88) of the 16-bit rate, as the profile's (0.79 /
    0.88, 0.75 / 0.85); their fixed time is ~2 us more than bf16's (5.6-6.0 us: vLLM quantizes the activations in
    a kernel of its own), which the step's graph does not count: within 15% over 16 MB, faster below."""
    weight_bytes, errors = priced_errors(device, "fp8")
    large = weight_bytes >= 16e6
    assert np.median(np.abs(errors[large])) < 0.15
    assert np.median(errors[~large]) < -0.15
