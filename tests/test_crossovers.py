"""Crossovers solved with sympy, checked by substitution and against brute-force sweeps of the library's metrics."""
import dataclasses
import math

import numpy as np
import pytest
import sympy as sp

from roofline import Precision, load_hardware, load_model
from roofline.bounds import Roofs, step_times
from roofline.serving.crossovers import (critical_batch, diminishing_batch, elasticities, kv_equals_weights_context, max_batch,
                                 memory_bound_model, saturation_batch)
from roofline.compiled import compile_model
from roofline.deployment import Deployment
from roofline.evaluate import evaluate

H100 = load_hardware("h100-sxm")


def tokens_per_s(config, hw, batches, prompt, precision=Precision()):
    values = evaluate(Deployment(config, hw, precision), np.asarray(batches, dtype=float), float(prompt), 1.0,
                      prefill=False)
    return values["tokens_per_s"]


@pytest.mark.parametrize("weights", ["bf16", "fp8", "int8"])
def test_critical_batch_puts_the_decode_weight_intensity_on_the_ridge(weights):
    precision = Precision(weights=weights, activations=weights if weights != "int8" else "int8")
    c = critical_batch(Deployment(load_model("llama-2-13b"), H100, precision))
    ridge = H100.peak(precision.weight_matmul_dtype) / H100.memory_bandwidth
    assert 2 * c.value / precision.weight_bytes == pytest.approx(ridge)
    assert sp.simplify(c.expression.rhs.xreplace({sp.Symbol(k, positive=True): v for k, v in c.given.items()})
                       - c.value) == 0


def test_kv_equals_weights_context_balances_the_compiled_decode_bytes():
    config = load_model("llama-3.1-8b")
    c = kv_equals_weights_context(Deployment(config, H100))
    parts = np.array(compile_model(config).decode(1.0, c.value, (2.0, 2.0, 2.0, 2.0)))
    assert parts[:, 4].sum() == pytest.approx(parts[:, 1].sum(), rel=1e-6)  # KV read == weights read


@pytest.mark.parametrize("model, prompt", [("llama-2-13b", 1024), ("llama-3.1-8b", 8192), ("mistral-7b-v0.1", 32768),
                                           ("deepseek-v2-lite", 4096)])
def test_closed_form_max_batch_is_the_largest_batch_that_fits(model, prompt):
    config = load_model(model)
    c = max_batch(Deployment.of(config, H100), prompt=prompt)
    fits = evaluate(Deployment(config, H100), np.array([c.value, c.value + 1.0]), float(prompt), 0.0,
                    prefill=False)["fits"]
    assert c.value > 0 and bool(fits[0]) and not bool(fits[1])


def test_saturation_batch_is_the_first_batch_of_a_brute_force_sweep_past_ninety_percent():
    for model in ("llama-2-13b", "llama-3.1-8b", "mixtral-8x7b"):
        config = load_model(model)
        batches = np.arange(1, 4097)
        rates = tokens_per_s(config, H100, batches, 2048)
        asymptote = tokens_per_s(config, H100, [1e12], 2048)[0]
        expected = int(batches[np.argmax(rates >= 0.9 * asymptote)])
        assert saturation_batch(Deployment.of(config, H100), prompt=2048).value == expected, model


def test_with_unlimited_compute_saturation_is_the_napkins_nine_a_over_b():
    fast = dataclasses.replace(H100, peak_flops={"bf16": 1e30})
    config = load_model("llama-2-13b")
    model = memory_bound_model(Deployment.of(config, fast))
    assert saturation_batch(Deployment.of(config, fast)).value == math.ceil(9 * model["a"] / model["b"])
    assert sp.simplify(model["saturation"].subs(sp.Symbol("f", positive=True), sp.Rational(9, 10))
                       - 9 * sp.Symbol("a", positive=True) / sp.Symbol("b", positive=True)) == 0


def test_memory_bound_line_passes_through_the_compiled_decode_bytes_at_two_batches():
    config = load_model("llama-2-13b")
    model = memory_bound_model(Deployment.of(config, H100), prompt=1024)
    one, two = (np.array(compile_model(config).decode(b, 1025.0, (2.0, 2.0, 2.0, 2.0)))[:, 1:].sum() for b in (1.0, 2.0))
    assert model["b"] == pytest.approx((two - one) / H100.memory_bandwidth)
    assert model["a"] == pytest.approx((2 * one - two) / H100.memory_bandwidth)  # the weights read once a step


def test_doubling_past_the_diminishing_batch_gains_exactly_the_fraction_in_the_memory_bound_model():
    config = load_model("llama-3.1-8b")
    c = diminishing_batch(Deployment.of(config, H100), gain=0.1)
    a, b, x = c.given["a"], c.given["b"], c.value
    assert (2 * x / (a + 2 * b * x)) / (x / (a + b * x)) == pytest.approx(1.1)


def _tpot(config, hw, batch, prompt, kv_bytes=2.0):
    phase = compile_model(config).decode
    return step_times(phase.parts(float(batch), float(prompt + 1), (2.0, 2.0, kv_bytes, 2.0)), phase,
                      Roofs.of(hw, Precision())).roofline_s


@pytest.mark.parametrize("batch, prompt", [(1, 1024), (64, 4096), (512, 256)])
def test_elasticities_match_finite_differences_of_the_roofline(batch, prompt):
    config, h = load_model("llama-3.1-8b"), 1e-4
    e = elasticities(Deployment.of(config, H100), batch=batch, prompt=prompt)

    def log_slope(f):
        return (np.log(f(1 + h)) - np.log(f(1 - h))) / (2 * h)
    bw = lambda s: _tpot(config, dataclasses.replace(H100, memory_bandwidth=H100.memory_bandwidth * s), batch, prompt)
    assert e["bandwidth"].value == pytest.approx(log_slope(bw), abs=1e-3)
    assert e["kv_bits"].value == pytest.approx(log_slope(lambda s: _tpot(config, H100, batch, prompt, 2.0 * s)), abs=1e-3)
    assert e["batch"].value == pytest.approx(log_slope(lambda s: _tpot(config, H100, batch * s, prompt)), abs=1e-3)


def test_a_memory_bound_step_has_bandwidth_elasticity_minus_one_and_a_compute_bound_one_less():
    config = load_model("llama-3.1-8b")
    assert elasticities(Deployment.of(config, H100), batch=1)["bandwidth"].value == pytest.approx(-1)
    assert elasticities(Deployment.of(config, H100), batch=2048, prompt=128)["bandwidth"].value > -0.5


def test_bad_fraction_is_a_clear_error():
    with pytest.raises(ValueError, match="fraction"):
        saturation_batch(Deployment.of(load_model("llama-2-7b"), H100), fraction=1.0)


# --- the batch throughput factor -------------------------------------------------------------

def test_throughput_factor_is_one_at_batch_one_never_superlinear_and_monotone():
    from roofline.serving.throughput_factor import throughput_factor
    batches = np.arange(1, 513)
    factors = throughput_factor(Deployment.of("llama-3.1-8b", H100), batches, prompt=2048)
    assert factors[0] == pytest.approx(1)
    assert np.all(factors <= batches + 1e-9) and np.all(np.diff(factors) >= -1e-12)


def test_throughput_factor_is_the_memory_bound_closed_form_without_a_compute_roof():
    from roofline.serving.throughput_factor import throughput_factor
    fast = dataclasses.replace(H100, peak_flops={"bf16": 1e30})
    config = load_model("llama-2-13b")
    model = memory_bound_model(Deployment.of(config, fast), prompt=1024)
    a, b = model["a"], model["b"]
    batches = np.array([2, 7, 30, 200])
    assert np.allclose(throughput_factor(Deployment.of(config, fast), batches, prompt=1024),
                       batches * (a + b) / (a + b * batches))


def test_the_hand_table_underestimates_short_contexts_and_overestimates_long_mha_contexts():
    from roofline.serving.throughput_factor import compare_table
    short = compare_table(Deployment.of("llama-3.1-8b", H100), prompt=512)
    long = compare_table(Deployment.of("llama-2-13b", H100), prompt=32768)
    assert all(b.derived_low > b.table for b in short)  # GQA, short context: weights dominate, batching is cheap
    assert all(b.derived_high < b.table for b in long[1:])  # MHA at 32k: each sequence's KV costs what the weights do
    assert all(not b.right and b.worst_error > 0.3 for b in short + long[1:])
