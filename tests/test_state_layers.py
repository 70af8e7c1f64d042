"""Constant-state layers (Mamba-2, gated DeltaNet) in the symbolic core: what the lecture says of them.

Their per-sequence state does not grow with the context: the cache and the decode step of a state
layer are flat in S, the hybrid's KV wall moves out, and a pure SSM never reaches it.
"""
import json
import math

import pytest
import sympy as sp

from roofline import ModelConfig, derivations, load_model
from roofline.compiled import compile_model
from roofline.models.config import MODELS_DIR
from roofline.serving.constant_state import attention_twin, break_even_context, cache_against_context
from roofline.evaluate import evaluate
from roofline.deployment import Deployment
from roofline.hardware import load_hardware
from roofline.model import DECODE, Options, parameter_count, phase_ops
from roofline.precision import Precision
from roofline.serving import crossovers
from roofline.symbols import B, S

HYBRIDS = ("qwen3-next-80b-a3b", "nemotron-nano-9b-v2", "jamba-1.5-mini", "minimax-m1", "granite-4.0-h-tiny",
           "falcon-h1-tiny-90m")
# Published totals, with the tolerance the source's rounding allows.
PUBLISHED = {
    # "exactly 7,285,403,648 parameters": Mistral's Codestral Mamba release, quoted at
    # https://ai-tldr.dev/models/codestral-mamba/ (the Hugging Face card's safetensors total)
    "mamba-codestral-7b": (7_285_403_648, 0.0),
    # "80B in total and 3B activated": Qwen3-Next model card / blog (e.g. https://crafiq.ai/models/language/
    # alibaba-qwen3-next-80b-a3b); the checkpoint's own header total is 79,674,391,296 (MTP layers not built)
    "qwen3-next-80b-a3b": (80e9, 0.01),
    # "9 billion parameters": NVIDIA Nemotron Nano 2, arXiv:2508.14444 (pruned from 12B)
    "nemotron-nano-9b-v2": (9e9, 0.02),
    # "Jamba 1.5 Mini: 12 billion active parameters (52B total)": AI21, arXiv:2408.12570 and
    # https://zfn9.com/inside-jamba-1-5-transformer-and-mamba-meet-in-one-architecture.html
    "jamba-1.5-mini": (52e9, 0.01),
    # "456 billion total parameters, of which 45.9 billion are activated": the MiniMax-Text-01 model card
    # (MiniMax-M1 shares the architecture and this config's dimensions), arXiv:2501.08313
    "minimax-m1": (456e9, 0.001),
    # "7 B de parâmetros no total e apenas 1 B de parâmetros ativos": IBM, Granite 4.0 Tiny announcement,
    # https://www.ibm.com/br-pt/new/announcements/ibm-granite-4-0-tiny-preview-sneak-peek
    "granite-4.0-h-tiny": (7e9, 0.01),
    # "extremely small language models (<=100M parameters)", named 90M: TII's Falcon-H1-Tiny release post
    "falcon-h1-tiny-90m": (90e6, 0.02),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_the_published_total(name):
    count, tolerance = PUBLISHED[name]
    assert parameter_count(load_model(name)) == pytest.approx(count, rel=tolerance)


@pytest.mark.parametrize("name", ("mamba-codestral-7b",) + HYBRIDS)
def test_the_state_is_held_once_per_sequence_flat_in_the_context(name):
    compiled = compile_model(load_model(name))
    state = compiled.state_bytes(2.0)
    assert state > 0
    per_token = compiled.kv_per_token(2.0)
    for context in (1, 1024, 1 << 20):
        assert compiled.kv_cache(3.0, context, 2.0) == pytest.approx(3 * (state + per_token * context))


def test_a_pure_ssm_decode_step_costs_the_same_at_every_context():
    config = load_model("mamba-codestral-7b")
    decode = compile_model(config).decode
    short, long = decode(8.0, 1025.0, (2.0, 2.0, 2.0, 2.0)), decode(8.0, 1 << 20, (2.0, 2.0, 2.0, 2.0))
    assert (short == long).all()
    assert compile_model(config).kv_per_token(2.0) == 0


def test_a_constant_state_decode_step_reads_and_writes_its_state():
    placed = phase_ops(load_model("mamba-codestral-7b"), Options(), DECODE)
    scan = next(p for p in placed if p.op.name == "ssd_scan")
    state = scan.op.state  # bytes per sequence
    assert scan.op.cost.kv_read == B * state and scan.op.cost.kv_write == B * state
    assert S not in sp.sympify(scan.op.cost.flops).free_symbols


def test_state_decode_intensity_has_neither_context_nor_batch_and_tends_to_two_over_state_bytes():
    result = derivations.state_decode_intensity()
    assert S not in result["general"].free_symbols
    # B enters only through the per-head constants (A, D, dt_bias) shared by the batch: batching leaves it flat
    large_batch = sp.limit(result["general"], B, sp.oo)
    grow = sp.Symbol("x", positive=True)
    from roofline.symbols import Di, Ns, b_s
    assert sp.limit(large_batch.xreplace({Di: grow, Ns: grow}), grow, sp.oo) == 2 / b_s == result["limit"]
    assert result["fp32_state"] == sp.Rational(1, 2)
    attention_decode = derivations.attention_limits()["decode"]
    assert S in attention_decode.free_symbols  # attention's grows with S towards 1; the state layer's does not


@pytest.mark.parametrize("name", [h for h in HYBRIDS if h != "falcon-h1-tiny-90m"])
def test_a_hybrid_reaches_the_kv_wall_later_than_its_all_attention_twin(name):
    config = load_model(name)
    _, ours = derivations.kv_equals_weights_context(config)
    _, twin = derivations.kv_equals_weights_context(attention_twin(config))
    assert ours > 3 * twin
    cache = cache_against_context(config, [1 << 17])
    assert cache["cache_bytes"].iloc[0] < cache["twin_cache_bytes"].iloc[0] / 3


def test_a_parallel_hybrid_keeps_every_layers_kv_and_adds_the_state():
    config = load_model("falcon-h1-tiny-90m")  # attention and Mamba-2 side by side in every layer
    ours, twin = compile_model(config), compile_model(attention_twin(config))
    assert ours.kv_per_token(2.0) == twin.kv_per_token(2.0) and ours.state_bytes(2.0) > 0 == twin.state_bytes(2.0)


def test_a_pure_ssm_never_reaches_the_kv_wall():
    found = crossovers.kv_equals_weights_context(Deployment.of("mamba-codestral-7b", "h100-sxm"))
    assert math.isnan(found.value) and "constant state" in found.note


def test_below_the_break_even_context_the_state_costs_more_than_the_kv_it_replaces():
    config = load_model("qwen3-next-80b-a3b")
    _, even = break_even_context(config)
    before, after = cache_against_context(config, [even / 2, even * 2]).itertuples()
    assert before.cache_bytes > before.twin_cache_bytes and after.cache_bytes < after.twin_cache_bytes


def test_memory_and_max_batch_count_the_state_once_per_sequence():
    config, hw = load_model("nemotron-nano-9b-v2"), load_hardware("h100-sxm")
    metrics = evaluate(Deployment(config, hw, Precision()), 4.0, 1000.0, 24.0)
    compiled = compile_model(config)
    assert metrics["kv_bytes"] == pytest.approx(4 * (compiled.state_bytes(2.0) + 1024 * compiled.kv_per_token(2.0)))
    assert metrics["state_bytes_per_sequence"] == compiled.state_bytes(2.0)


def test_tensor_parallelism_splits_the_state_by_heads():
    one = compile_model(load_model("qwen3-next-80b-a3b"))
    two = Deployment(load_model("qwen3-next-80b-a3b"), load_hardware("h100-sxm"), Precision(), tp=2).compiled
    assert two.state_bytes(2.0) == pytest.approx(one.state_bytes(2.0) / 2)


@pytest.mark.parametrize("field, value, fix", [
    ("hybrid_override_pattern", "M-X", "M (Mamba-2)"),
    ("mamba_num_heads", 0, "positive integer"),
    ("n_groups", 5, "divisor"),
])
def test_a_bad_hybrid_field_is_named_with_its_fix(field, value, fix):
    raw = json.loads((MODELS_DIR / "nemotron-nano-9b-v2.json").read_text())
    with pytest.raises(ValueError, match=field) as err:
        ModelConfig.from_hf_config({**raw, field: value}, name="nemotron.json")
    assert "nemotron.json" in str(err.value) and fix in str(err.value)


def test_an_unknown_layer_kind_names_the_field():
    config = load_model("llama-2-7b")
    with pytest.raises(ValueError, match="layer_attention"):
        config.with_overrides(layer_attention=("mamba3",) * config.n_layers)
    with pytest.raises(ValueError, match="ssm_inner"):
        config.with_overrides(layer_attention=("mamba2",) * config.n_layers)



def test_the_batching_simulator_admits_as_many_pure_ssm_sequences_as_states_fit():
    import numpy as np
    from roofline.serving.batching import Workload, simulate
    config = load_model("mamba-codestral-7b")
    compiled, hw = compile_model(config), load_hardware("h100-sxm")
    # what CUDA shows of an H100 less the runtime's 1 GiB (roofline.kv_memory); tokens cost nothing
    fit = int((hw.capacity_bytes - 2**30 - compiled.params * 2) // compiled.state_bytes(2.0))
    work = Workload(np.zeros(fit + 40), np.full(fit + 40, 16), np.full(fit + 40, 2))
    result = simulate(Deployment.of(config, hw), work, max_batch=4 * fit)
    assert result.trace_batch.max() == fit


def test_pipeline_stages_hold_the_state_once_per_sequence():
    from roofline.serving.pipeline import analyze_pipeline
    config = load_model("nemotron-nano-9b-v2")
    compiled = compile_model(config)
    cache = 8 * (compiled.state_bytes(2.0) + 1025 * compiled.kv_per_token(2.0))
    for pp in (1, 2):
        out = analyze_pipeline(Deployment.of(config, "h100-sxm", pp=pp), batch=8, prompt=1024, gen=1)
        # each stage's GPU also holds one prefill chunk's workspace (roofline.memory, as analyze and plan count it)
        held = sum(out.stage_memory_bytes) - pp * out.workspace_bytes
        assert held == pytest.approx(parameter_count(config) * 2 + cache, rel=1e-9)
