"""The fused GPU step's Triton kernels against plain torch, and the fused decoder against the eager one.

Without CUDA they run in Triton's interpreter (tests/conftest.py): the arithmetic is checked here,
the speed only on a GPU (validation/README.md).
"""
import pytest
import torch
import torch.nn.functional as F

from validation.cli import PRESETS
from validation.decoder import build_decoder
from validation.functional import rms_norm, rotate

kernels = pytest.importorskip("validation.kernels.fused", reason="needs triton (the dev extra)")
from validation.kernels.decode_attention import decode_attention, n_splits_for, quantize_per_position  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# compiled, the attention kernel feeds the tensor cores bf16 (fp32 accumulation); interpreted, fp32
ATTENTION_TOLERANCE = dict(atol=3e-2, rtol=3e-2) if DEVICE == "cuda" else dict(atol=2e-3, rtol=2e-3)


def reference_attention(q, keys, values):
    """q (B, N, H) against (B, K, S, H) through SDPA with enable_gqa: Hugging Face's head grouping."""
    return F.scaled_dot_product_attention(q[:, :, None].float(), keys.float(), values.float(), enable_gqa=True)[:, :, 0]


@pytest.mark.parametrize("heads, kv_heads", [(8, 8), (8, 2), (8, 1)])
def test_split_kv_decode_attention_equals_sdpa_for_mha_gqa_and_mqa(heads, kv_heads):
    B, S, H = 2, 700, 32  # 700 keys: several splits of uneven length, the last one partial
    q = torch.randn(B, heads, H, device=DEVICE)
    keys, values = torch.randn(B, kv_heads, 800, H, device=DEVICE), torch.randn(B, kv_heads, 800, H, device=DEVICE)
    expected = reference_attention(q, keys[:, :, :S], values[:, :, :S])
    torch.testing.assert_close(decode_attention(q, keys, values, S), expected, **ATTENTION_TOLERANCE)
    assert n_splits_for(B * kv_heads, S, 132) > 1  # the merge of partial softmaxes is exercised


def test_split_kv_decode_attention_reads_only_the_last_window_of_keys():
    q, keys, values = (torch.randn(*shape, device=DEVICE) for shape in ((1, 4, 32), (1, 2, 300, 32), (1, 2, 300, 32)))
    keys[:, :, :200] = float("nan")  # outside the window: must never be read
    expected = reference_attention(q, keys[:, :, 236:300], values[:, :, 236:300])
    torch.testing.assert_close(decode_attention(q, keys, values, 300, window=64), expected, **ATTENTION_TOLERANCE)


@pytest.mark.parametrize("dtype", [torch.int8, torch.float8_e4m3fn])
def test_a_quantized_cache_is_dequantized_on_load_to_what_its_scales_say(dtype):
    q, keys, values = (torch.randn(*shape, device=DEVICE) for shape in ((2, 8, 32), (2, 2, 300, 32), (2, 2, 300, 32)))
    (kq, ks), (vq, vs) = quantize_per_position(keys, dtype), quantize_per_position(values, dtype)
    dequantized = reference_attention(q, kq.float() * ks[..., None], vq.float() * vs[..., None])
    got = decode_attention(q, kq, vq, 300, k_scale=ks, v_scale=vs)
    torch.testing.assert_close(got, dequantized, **ATTENTION_TOLERANCE)
    # and the quantization itself is close to the original: int8 ~0.4% of absmax, e4m3 ~6%
    assert (got - reference_attention(q, keys, values)).abs().max() < (0.02 if dtype == torch.int8 else 0.15)


def test_add_rms_norm_equals_the_eager_norm_of_the_sum_in_bf16():
    x, r, w = (torch.randn(*shape, dtype=torch.bfloat16, device=DEVICE) for shape in ((3, 5, 96), (3, 5, 96), (96,)))
    normed, total = kernels.add_rms_norm(x, w, 1e-5, residual=r)
    torch.testing.assert_close(total, x + r, atol=0.02, rtol=0.01)  # bf16 rounding of the sum
    torch.testing.assert_close(normed, rms_norm(x + r, w, 1e-5), atol=0.07, rtol=0.02)


def test_rope_store_ropes_q_and_k_and_writes_keys_and_values_at_their_positions():
    B, T, N, K, H, start = 2, 3, 4, 2, 16, 5
    qkv = torch.randn(B, T, (N + 2 * K) * H, device=DEVICE)
    angles = torch.outer(torch.arange(12.0, device=DEVICE), 1 / 10000 ** (torch.arange(0, H, 2, device=DEVICE) / H))
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    k_cache, v_cache = torch.zeros(B, K, 12, H, device=DEVICE), torch.zeros(B, K, 12, H, device=DEVICE)
    q = kernels.rope_store(qkv, cos, sin, k_cache, v_cache, start, N, K, H)
    qs, ks, vs = qkv.split((N * H, K * H, K * H), -1)
    positions = slice(start, start + T)
    torch.testing.assert_close(q, rotate(qs.view(B, T, N, H).transpose(1, 2), cos[positions], sin[positions]))
    torch.testing.assert_close(k_cache[:, :, positions], rotate(ks.view(B, T, K, H).transpose(1, 2), cos[positions],
                                                                sin[positions]))
    torch.testing.assert_close(v_cache[:, :, positions], vs.view(B, T, K, H).transpose(1, 2))
    assert k_cache[:, :, :start].abs().max() == 0 and v_cache[:, :, start + T:].abs().max() == 0


def test_silu_mul_equals_silu_of_the_gate_times_up():
    gate_up = torch.randn(2, 3, 2 * 1500, device=DEVICE)
    torch.testing.assert_close(kernels.silu_mul(gate_up), F.silu(gate_up[..., :1500]) * gate_up[..., 1500:])


@pytest.mark.parametrize("preset", ["tiny", "cpu-window"])
def test_the_fused_step_computes_what_the_eager_decoder_computes(preset):
    config = PRESETS[preset].with_overrides(n_layers=2, d_model=64, d_ff=96, vocab_size=128, layer_attention=(),
                                            layer_mlp=(), window=8 if preset != "tiny" else 0)
    eager = build_decoder(config, "fp32", DEVICE, seed=3)
    fused = build_decoder(config, "fp32", DEVICE, seed=3, kernels="triton")
    tokens = torch.randint(0, 128, (2, 12), device=DEVICE)
    with torch.inference_mode():
        for model in (eager, fused):
            model.allocate_cache(2, 13)
        prefill = [m(tokens) for m in (eager, fused)]
        decode = [m(tokens[:, :1], start=12) for m in (eager, fused)]
    torch.testing.assert_close(prefill[1], prefill[0], atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(decode[1], decode[0], atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8"])
def test_a_quantized_cache_decodes_close_to_the_full_precision_one(kv_dtype):
    config = PRESETS["tiny"].with_overrides(d_model=64, d_ff=96, vocab_size=128)
    full = build_decoder(config, "fp32", DEVICE, seed=4, kernels="triton")
    quantized = build_decoder(config, "fp32", DEVICE, seed=4, kernels="triton", kv_dtype=kv_dtype)
    tokens = torch.randint(0, 128, (2, 10), device=DEVICE)
    with torch.inference_mode():
        for model in (full, quantized):
            model.allocate_cache(2, 11)
            model(tokens)
        expected, got = full(tokens[:, :1], start=10), quantized(tokens[:, :1], start=10)
    assert quantized.k_cache.dtype == {"int8": torch.int8, "fp8": torch.float8_e4m3fn}[kv_dtype]
    error = (got - expected).norm() / expected.norm()
    assert error < (0.02 if kv_dtype == "int8" else 0.1)


def test_a_quantized_cache_needs_the_fused_kernels():
    with pytest.raises(ValueError, match="split-KV"):
        build_decoder(PRESETS["tiny"], "fp32", "cpu", kv_dtype="int8")
