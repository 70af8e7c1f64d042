"""Invariants over random valid configs (hypothesis): finite, monotone, linear where physics says so."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roofline import ModelConfig, Precision, analyze
from roofline.compiled import compile_model

DTYPES = ["fp32", "bf16", "fp8", "int8", "int4"]


@st.composite
def configs(draw):
    n_kv = draw(st.sampled_from([1, 2, 4, 8]))
    heads = n_kv * draw(st.sampled_from([1, 2, 4]))
    layers = draw(st.integers(1, 6))
    moe = draw(st.booleans())
    window = draw(st.sampled_from([0, 0, 64, 4096]))
    return ModelConfig(
        name="random", family="llama", d_model=draw(st.sampled_from([64, 256, 1024, 4096])), n_layers=layers,
        n_heads=heads, n_kv_heads=n_kv, head_dim=draw(st.sampled_from([32, 64, 128, 256])),
        d_ff=draw(st.sampled_from([128, 1024, 14336])), vocab_size=draw(st.sampled_from([1000, 32000])),
        window=window, n_experts=8 if moe else 0, top_k=2 if moe else 0, d_expert=512 if moe else 0,
        tied_embeddings=draw(st.booleans()),
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs(), st.sampled_from(DTYPES), st.sampled_from(DTYPES))
def test_metrics_are_finite_and_monotone_in_batch_and_context(config, weights, kv):
    precision = Precision(weights=weights, kv=kv)
    batches = [1, 2, 8, 64, 512]
    small = analyze(config, "h100-sxm", batch=batches, prompt=128, gen=16, precision=precision).metrics
    large = analyze(config, "h100-sxm", batch=batches, prompt=8192, gen=16, precision=precision).metrics
    for frame in (small, large):
        numbers = frame.select_dtypes("number").to_numpy(dtype=float)
        assert np.isfinite(numbers).all()
        assert (np.diff(frame["tpot_s"]) >= -1e-15).all()
        assert (np.diff(frame["ttft_s"]) >= -1e-15).all()
    assert (large["tpot_s"].to_numpy() >= small["tpot_s"].to_numpy() - 1e-15).all()


@settings(max_examples=20, deadline=None)
@given(configs(), st.integers(1, 512), st.integers(1, 4096))
def test_kv_memory_is_linear_in_batch_and_in_context_inside_the_window(config, batch, context):
    cache = compile_model(config).kv_cache
    per_token = cache(1, 1, 2.0)
    assert cache(batch, 1, 2.0) == batch * per_token
    if config.window == 0 or context <= config.window:
        assert cache(batch, context, 2.0) == batch * context * per_token
    else:
        assert cache(batch, context, 2.0) < batch * context * per_token
