"""W4A4 NVFP4 (activations nvfp4 on Blackwell's FP4 tensor cores) and the routed experts' own input dtype,
checked against numbers worked by hand from the configs and NVIDIA's datasheet figures, not the library's sums."""
from __future__ import annotations

import pytest

from roofline import Precision, load_hardware
from roofline.cli import main
from roofline.deployment import Deployment
from roofline.model import PREFILL

NVFP4 = 4.5 / 8  # E2M1 (4 bits) + one FP8 E4M3 scale per 16 values (8/16 bits); the per-tensor fp32 scale is ~0
B200_FP4, B200_FP8, B200_BF16, B200_BANDWIDTH = 9e15, 4.5e15, 2.25e15, 7.7e12  # NVIDIA's dense figures a GPU
W4A4 = Precision(weights="nvfp4", activations="nvfp4")


def _row(step, name: str) -> int:
    return next(i for i, op in enumerate(step.ops) if str(op).endswith(name))


def test_an_nvfp4_activation_costs_four_and_a_half_bits():
    assert W4A4.activation_bytes == NVFP4 and W4A4.weight_bytes == NVFP4
    assert Precision(activations="fp8").activation_bytes == 1.0  # the other widths are unchanged
    assert W4A4.weight_matmul_dtype == "nvfp4"


def test_a_w4a4_gemm_is_priced_at_the_fp4_peak_with_4_5_bit_operands_by_hand():
    """Llama-3.1-8B's down projection, one 4096-token prompt on a B200: X (T, F) @ W_down (F, D), 32 layers.
    FLOPs 2·T·F·D = 2·4096·14336·4096 = 481,036,337,152 a layer at 9 PFLOP/s: 53.448 µs, x 32 = 1.71035 ms.
    Bytes a layer: W_down F·D·4.5/8 = 33,030,144; read X T·F·4.5/8 = 33,030,144; write Y T·D·4.5/8 = 9,437,184:
    75,497,472 B at 7.7 TB/s = 9.8049 µs, x 32 = 313.76 µs."""
    step = Deployment.of("llama-3.1-8b", "b200", precision=W4A4).step(PREFILL, 1.0, 4096.0)
    down = _row(step, "mlp.down")
    assert step.compute_s[down] == pytest.approx(32 * 2 * 4096 * 14336 * 4096 / B200_FP4, rel=1e-9)
    assert step.compute_s[down] == pytest.approx(1.71035e-3, rel=1e-5)
    assert step.memory_s[down] == pytest.approx(32 * 75_497_472 / B200_BANDWIDTH, rel=1e-9)


def test_w4a4_is_twice_the_fp8_rate_not_priced_at_the_fp8_peak():
    """The old pricing (NVFP4 weights against fp8 activations, W4A8) would give the same GEMM twice the time."""
    def down_compute(precision):
        step = Deployment.of("llama-3.1-8b", "b200", precision=precision).step(PREFILL, 1.0, 4096.0)
        return step.compute_s[_row(step, "mlp.down")]
    w4a8 = down_compute(Precision(weights="nvfp4", activations="fp8"))
    assert w4a8 == pytest.approx(32 * 2 * 4096 * 14336 * 4096 / B200_FP8, rel=1e-9)
    assert down_compute(W4A4) == pytest.approx(w4a8 / 2, rel=1e-12)


@pytest.mark.parametrize("device", ["h100-sxm", "h200", "a100-80gb", "mi300x"])
def test_w4a4_on_a_device_without_fp4_tensor_cores_is_refused_in_one_line_naming_format_device_and_fix(device):
    with pytest.raises(ValueError) as err:
        Deployment.of("llama-3.1-8b", device, precision=W4A4)
    message = str(err.value)
    assert "\n" not in message and device in message and "nvfp4" in message and "fix:" in message
    assert "activations bf16" in message  # the weight-only form every engine runs NVFP4 checkpoints in there
    with pytest.raises(ValueError, match="no FP4 tensor cores"):
        load_hardware(device).peak("nvfp4")  # never the fp8 units' peak in its place


def test_nvfp4_weights_with_16_bit_activations_still_price_weight_only_on_hopper():
    step = Deployment.of("llama-3.1-8b", "h100-sxm", precision=Precision(weights="nvfp4")).step(PREFILL, 1.0, 4096.0)
    assert step.compute_s[_row(step, "mlp.down")] == pytest.approx(32 * 2 * 4096 * 14336 * 4096 / 989.4e12, rel=1e-9)


@pytest.mark.parametrize("weights", ["int4", "mxfp4", "q4_0"])
def test_nvfp4_activations_against_another_4_bit_weight_format_are_refused(weights):
    with pytest.raises(ValueError, match=f"activations: nvfp4 .* {weights}"):
        Precision(weights=weights, activations="nvfp4")


def test_the_cli_runs_w4a4_on_a_b200_and_refuses_it_on_an_h100_with_exit_2(capsys):
    assert main(["analyze", "--model", "llama-3.1-8b", "--hardware", "b200", "--weights", "nvfp4",
                 "--act", "nvfp4", "--json"]) == 0
    capsys.readouterr()
    assert main(["analyze", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--weights", "nvfp4",
                 "--act", "nvfp4"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "h100-sxm" in error and "fix:" in error


def test_expert_activations_set_the_experts_matmuls_alone():
    """gpt-oss-120b's MXFP4 experts against MXFP8 inputs (TensorRT-LLM, SGLang on Blackwell) run at the fp8 peak,
    2x the bf16 one; its bf16 attention and router keep the bf16 peak, and no op's bytes change."""
    bf16_inputs = Deployment.of("gpt-oss-120b", "b200", precision=Precision(experts="mxfp4"))
    fp8_inputs = Deployment.of("gpt-oss-120b", "b200", precision=Precision(experts="mxfp4", expert_activations="fp8"))
    before, after = (d.step(PREFILL, 1.0, 4096.0) for d in (bf16_inputs, fp8_inputs))
    for i, op in enumerate(before.ops[:len(before.compute_s)]):
        assert after.memory_s[i] == before.memory_s[i]
        expected = 0.5 if ".experts." in str(op) and before.compute_s[i] > 0 else 1.0
        assert after.compute_s[i] == pytest.approx(expected * before.compute_s[i], rel=1e-12), op
    assert Precision(experts="mxfp4", expert_activations="fp8").expert_matmul_dtype == "fp8"
    with pytest.raises(ValueError, match="expert_activations: nvfp4"):
        Precision(experts="mxfp4", expert_activations="nvfp4")
