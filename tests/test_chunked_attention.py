"""Chunked attention (Llama 4): pairs, keys read and cache against transformers' own chunked mask,
their closed-form limits, and the bundled Scout's cache.

The mask (tests/hf_reference.py, hf_visible_keys) is the oracle: Hugging Face's eager attention computes
every score and masks it, so FlopCounterMode cannot see the chunking; a masked kernel does the pairs the
mask lets through.
"""
import pytest
import sympy as sp

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_reference import hf_visible_keys  # noqa: E402

from roofline import load_model  # noqa: E402
from roofline.models.config import CHUNKED  # noqa: E402
from roofline.model import kv_cache_expr  # noqa: E402
from roofline.ops import causal_pairs, chunk_keys, chunk_pairs  # noqa: E402
from roofline.symbols import B, S, T, W, Wc, b_kv  # noqa: E402

CASES = [(8, 20, 20), (8, 20, 1), (8, 20, 5), (8, 16, 16), (8, 17, 1), (8, 7, 7), (5, 23, 9), (16, 100, 37)]


def at(expr, chunk, context, queries):
    return int(expr.subs({Wc: chunk, S: context, T: queries}))


@pytest.mark.parametrize("chunk, context, queries", CASES)
def test_chunk_pairs_and_keys_equal_the_transformers_chunked_mask(chunk, context, queries):
    pairs, keys = hf_visible_keys("chunked", chunk, context, queries)
    assert (at(chunk_pairs(), chunk, context, queries), at(chunk_keys(), chunk, context, queries)) == (pairs, keys)


@pytest.mark.parametrize("window, context, queries", [(8, 20, 20), (8, 20, 1), (5, 23, 9)])
def test_the_mask_oracle_agrees_with_the_sliding_window_pairs_we_already_count(window, context, queries):
    pairs, _ = hf_visible_keys("sliding", window, context, queries)
    assert int(causal_pairs(True).subs({W: window, S: context, T: queries})) == pairs


def test_within_one_chunk_the_pairs_are_causal():
    for context in range(1, 9):
        for queries in range(1, context + 1):
            assert at(chunk_pairs(), 8, context, queries) == queries * context - queries * (queries - 1) // 2


def test_a_long_prefill_sees_about_half_a_chunk_per_query():
    chunk, context = 8192, 8192 * 50
    assert at(chunk_pairs(), chunk, context, context) == 50 * chunk * (chunk + 1) // 2
    assert at(chunk_pairs(), chunk, context, context) == pytest.approx(context * (chunk + 1) / 2)


def test_decode_keys_are_a_sawtooth_between_one_and_the_chunk():
    keys = [at(chunk_keys(), 8, context, 1) for context in range(1, 26)]
    assert keys == [(context - 1) % 8 + 1 for context in range(1, 26)]
    assert min(keys) == 1 and max(keys) == 8


def test_a_prefill_reads_every_key_once():
    assert sp.simplify(chunk_keys().subs(T, S)) == S


def test_scout_cache_caps_chunked_layers_at_the_chunk_and_keeps_global_ones_whole():
    config = load_model("llama-4-scout")
    chunked = sum(kind == CHUNKED for kind in config.layer_attention)
    per_token_layer = 2 * config.n_kv_heads * config.head_dim * 2  # K and V, bf16
    cache = kv_cache_expr(config).subs({B: 1, b_kv: 2})
    context = 100_000
    expected = per_token_layer * (chunked * config.chunk + (config.n_layers - chunked) * context)
    assert (chunked, config.chunk) == (36, 8192)
    assert int(cache.subs(S, context)) == expected


def test_the_oracle_catches_chunked_layers_counted_as_global():
    config = load_model("llama-4-scout")
    as_global = config.with_overrides(layer_attention=("global",) * config.n_layers, chunk=0)
    context = 100_000
    ours = kv_cache_expr(config).subs({B: 1, S: context})
    wrong = kv_cache_expr(as_global).subs({B: 1, S: context})
    assert wrong > 3 * ours
