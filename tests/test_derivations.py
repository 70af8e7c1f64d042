"""Symbolic identities of CS336 lecture 10, derived from the calculator's own op accounting."""
import sympy as sp

from roofline import Precision, load_hardware, load_model
from roofline.derivations import (accelerator_intensity, attention_intensity, attention_limits, critical_batch,
                                  kv_equals_weights_context, matmul_intensity, mlp_intensity)
from roofline.symbols import B, S, T


def test_matmul_intensity_tends_to_batch_as_dimensions_grow():
    expr, limit = matmul_intensity()
    assert limit == B
    assert expr.free_symbols >= {B}


def test_mlp_intensity_tends_to_batch_times_tokens():
    _, limit = mlp_intensity()
    assert sp.simplify(limit - B * T) == 0


def test_attention_intensity_is_s_t_over_s_plus_t():
    assert sp.simplify(attention_intensity() - S * T / (S + T)) == 0


def test_prefill_attention_intensity_is_half_the_context():
    assert sp.simplify(attention_limits()["prefill"] - S / 2) == 0


def test_decode_attention_intensity_is_below_one_and_does_not_grow_with_batch():
    decode = attention_limits()["decode"]
    assert B not in decode.free_symbols
    assert sp.simplify(decode - S / (S + 1)) == 0
    assert attention_limits()["decode_long_context"] == 1
    for context in (1, 128, 32768):
        assert float(decode.subs(S, context)) < 1


def test_h100_accelerator_intensity_is_295():
    assert round(accelerator_intensity(load_hardware("h100-sxm"))) == 295


def test_critical_batch_follows_the_ridge_and_the_weight_bytes():
    h100 = load_hardware("h100-sxm")
    _, bf16 = critical_batch(h100)
    assert abs(bf16 - 989.4e12 / 3.35e12) < 1e-6
    _, int4 = critical_batch(h100, Precision(weights="int4"))  # weight-only int4 computes in bf16
    assert int4 < bf16 / 3  # a byte moves ~4x the weights, so compute binds ~4x sooner
    _, h200 = critical_batch(load_hardware("h200"))
    assert h200 < bf16  # same compute, more bandwidth: the ridge moves left


def test_every_bundled_hardware_has_a_bf16_critical_batch_or_says_why():
    from roofline import bundled_hardware
    for hw_id, hw in bundled_hardware().items():
        try:
            _, value = critical_batch(hw)
        except ValueError as err:
            assert hw_id in str(err) and "peak" in str(err)
        else:
            assert value > 0


def test_kv_equals_weights_context_solves_its_equation():
    config = load_model("llama-2-13b")
    expr, value = kv_equals_weights_context(config)
    # At that context one sequence's KV cache (819200 B/token in bf16) equals the weights read at batch 1.
    weights_read = (13_015_864_320 - 32000 * 5120 + 5120) * 2  # every weight but the unread embedding rows
    assert abs(value * 819_200 - weights_read) / weights_read < 1e-9


def test_a_model_whose_every_layer_is_windowed_never_reaches_its_weights_in_kv():
    _, value = kv_equals_weights_context(load_model("mistral-7b-v0.1"))
    assert value != value  # NaN: 32 layers x 4096 tokens of KV stay below 14 GB of weights
