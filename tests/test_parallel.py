"""Tensor parallelism and replicas: shards against parameter and cache counts, a simulated ring all-reduce."""
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import analyze, load_hardware, load_model, sweep
from roofline.allreduce import ring_time
from roofline.compiled import compile_model
from roofline.model import parameter_count
from roofline.models.config import MOE
from roofline.serving.tensor_parallel import tp_crossovers
from roofline.sharding import ALLREDUCES_PER_LAYER, DEFAULT_LINK_LATENCY_S, shard
from roofline.deployment import Deployment
from roofline.engine import load_engine

H100 = load_hardware("h100-sxm")


def metrics_of(model, hardware, **kwargs) -> dict[str, np.ndarray]:
    """analyze's metrics as arrays, one per column."""
    return {name: column.to_numpy() for name, column in analyze(model, hardware, **kwargs).metrics.items()}


def simulated_ring_allreduce(vectors: np.ndarray, bandwidth: float, latency: float) -> tuple[np.ndarray, float]:
    """Reduce-scatter then all-gather around a ring, chunk by chunk; returns every GPU's result and the time."""
    t = len(vectors)
    chunks = [np.array_split(v.astype(float), t) for v in vectors]
    elapsed = 0.0
    for step in range(t - 1):  # reduce-scatter: GPU i sends chunk (i - step) to GPU i + 1, which adds it
        sent = [(i, (i - step) % t, chunks[i][(i - step) % t].copy()) for i in range(t)]
        for i, c, data in sent:
            chunks[(i + 1) % t][c] += data
        elapsed += latency + max(d.nbytes for _, _, d in sent) / bandwidth
    for step in range(t - 1):  # all-gather: GPU i forwards its finished chunk (i + 1 - step)
        sent = [(i, (i + 1 - step) % t, chunks[i][(i + 1 - step) % t].copy()) for i in range(t)]
        for i, c, data in sent:
            chunks[(i + 1) % t][c] = data
        elapsed += latency + max(d.nbytes for _, _, d in sent) / bandwidth
    return np.array([np.concatenate(c) for c in chunks]), elapsed


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_ring_allreduce_traffic_matches_a_simulated_ring_and_latency_is_paid_once(gpus):
    rng = np.random.default_rng(gpus)
    vectors = rng.normal(size=(gpus, 1024))
    result, elapsed = simulated_ring_allreduce(vectors, 450e9, 0.0)
    assert np.allclose(result, vectors.sum(axis=0))
    assert elapsed == pytest.approx(ring_time(vectors[0].nbytes, gpus, 450e9, 0.0))
    with_latency = ring_time(vectors[0].nbytes, gpus, 450e9, 3e-6)
    assert with_latency == pytest.approx(elapsed + 3e-6)


@pytest.mark.parametrize("model, tp", [("llama-2-70b", 2), ("llama-2-70b", 8), ("llama-2-13b", 4), ("qwen2.5-7b", 4)])
def test_shards_hold_every_weight_once_except_the_replicated_norms(model, tp):
    config = load_model(model)
    norms = (2 * config.n_layers + 1) * config.d_model  # RMSNorm weights live on every GPU
    assert tp * parameter_count(shard(config, tp)) - parameter_count(config) == (tp - 1) * norms


def test_a_shared_expert_of_its_own_width_is_split_as_the_dense_mlp():
    """Granite-4.0-H's one shared gated MLP (width Fs): tp GPUs hold 3 D Fs weights between them once; it was whole
    on every GPU, overstating each GPU's weights and reads at tp > 1."""
    config = load_model("granite-4.0-h-tiny")
    d, fs = config.d_model, config.shared_expert_width
    assert shard(config, 2).shared_expert_width == fs // 2
    moe_layers = sum(kind == MOE for kind in config.layer_mlp)
    shared = 3 * d * fs * moe_layers  # gate, up (D x Fs) and down (Fs x D) beside each layer's experts
    whole_mlp = replace(config, shared_expert_width=0)
    assert parameter_count(config) - parameter_count(whole_mlp) == shared
    assert parameter_count(shard(config, 2)) - parameter_count(shard(whole_mlp, 2)) == shared // 2


@pytest.mark.parametrize("model, tp, divisor", [
    ("llama-2-70b", 8, 8),  # 8 KV heads, one per GPU
    ("llama-2-13b", 8, 8),  # MHA: 40 KV heads, 5 per GPU
    ("tinyllama-1.1b-chat-v1.0", 8, 4),  # 4 KV heads on 8 GPUs: each head replicated twice
    ("deepseek-v2-lite", 4, 1),  # MLA: the latent cache is replicated on every GPU
])
def test_kv_cache_per_gpu_is_split_by_kv_heads_and_replicated_past_them(model, tp, divisor):
    config = load_model(model)
    full = compile_model(config).kv_cache(1.0, 1000.0, 2.0)
    assert compile_model(shard(config, tp)).kv_cache(1.0, 1000.0, 2.0) == pytest.approx(full / divisor)


def test_decode_communication_is_two_ring_allreduces_per_layer():
    out = metrics_of("llama-2-70b", H100, tp=8, batch=[1, 32])
    per_allreduce = DEFAULT_LINK_LATENCY_S + 2 * 7 * np.array([1, 32]) * 8192 * 2 / 8 / 450e9
    assert np.allclose(out["comm_s"], ALLREDUCES_PER_LAYER * 80 * per_allreduce)
    assert np.all(out["link_latency_assumed"])
    single = metrics_of("llama-2-70b", H100, tp=1, batch=[1, 32])
    assert np.all(single["comm_s"] == 0) and not np.any(single["link_latency_assumed"])


def test_a_measured_link_latency_is_used_when_the_hardware_file_has_one():
    out = metrics_of("llama-2-13b", load_hardware("a100-40gb"), tp=2, batch=[1])  # measured 10.14 us
    assert not np.any(out["link_latency_assumed"])
    assert out["comm_s"][0] == pytest.approx(2 * 40 * (1.014e-5 + 2 * 5120 * 2 / 2 / 300e9))


def test_replicas_multiply_throughput_and_leave_latency_alone():
    one = metrics_of("llama-2-70b", H100, tp=4, replicas=1, batch=[1, 16])
    three = metrics_of("llama-2-70b", H100, tp=4, replicas=3, batch=[1, 16])
    assert np.allclose(three["tokens_per_s"], 3 * one["tokens_per_s"])
    for key in ("tpot_s", "ttft_s", "e2e_s", "per_gpu_memory_bytes", "max_batch"):
        assert np.allclose(three[key], one[key]), key
    assert np.all(three["gpus"] == 12) and np.all(three["tp"] == 4)


def test_tp_shrinks_per_gpu_memory_and_raises_max_batch():
    out = {t: metrics_of("llama-2-70b", H100, tp=t, batch=[8]) for t in (1, 2, 4, 8)}
    memory = [out[t]["per_gpu_memory_bytes"][0] for t in (1, 2, 4, 8)]
    assert memory == sorted(memory, reverse=True) and memory[0] / memory[3] > 7
    assert out[1]["max_batch"][0] == 0 and out[8]["max_batch"][0] > out[4]["max_batch"][0] > 0


def test_tp_breakeven_and_fastest_degree_solve_their_equations():
    found = tp_crossovers(Deployment.of("llama-2-70b", H100))
    g = found["tp_breakeven"].given
    m, L, X, beta, lam = g["m"], g["L"], g["X"], g["beta"], g["lambda"]
    comm = lambda t: 2 * L * (lam + 2 * (t - 1) / t * X / beta)
    t = found["tp_breakeven"].value
    assert m * (1 - 1 / t) == pytest.approx(comm(t))
    tpot = lambda t: m / t + comm(t)
    # Bounded ring traffic and a constant latency: TPOT falls with every doubling of t.
    assert found["tp_fastest"].value == float("inf")
    assert tpot(2 * t) < tpot(t) and tpot(64) < tpot(8) < tpot(2) and 1 < t < 2


def _tpot(given: dict, t):
    """TPOT at t GPUs from a crossover's numbers, by hand: m/t plus 2L all-reduces of latency λ + δ·log2(t/2)."""
    m, L, X, beta, lam, delta = (given[k] for k in ("m", "L", "X", "beta", "lambda", "delta"))
    return m / t + 2 * L * (lam + delta * np.log2(t / 2) + 2 * (t - 1) / t * X / beta)


def test_an_all_reduce_growing_with_the_group_gives_decode_a_fastest_tp_degree():
    d = Deployment.of("llama-3.1-70b", H100, engine=replace(load_engine("vllm"), allreduce_doubling_s=1e-5))
    found = tp_crossovers(d)
    g = found["tp_fastest"].given
    grid = np.geomspace(2, 512, 200_001)
    fastest = found["tp_fastest"].value
    # the closed form ln2 (m − 4LX/β) / (2Lδ) is the grid's least TPOT, and more GPUs past it cost time
    assert fastest == pytest.approx(grid[np.argmin(_tpot(g, grid))], rel=1e-3)
    assert 8 < fastest < 512 and _tpot(g, 2 * fastest) > _tpot(g, fastest) < _tpot(g, fastest / 2)


def test_tp_breakeven_past_two_gpus_solves_the_equation_with_its_doubling_term():
    d = Deployment.of("llama-3.1-70b", H100, engine=load_engine("vllm"))
    g = tp_crossovers(d)["tp_breakeven"].given
    m, L, X, beta = g["m"], g["L"], g["X"], g["beta"]
    latency = m * (1 - 1 / 4) / (2 * L) - 2 * (3 / 4) * X / beta  # without the doubling term: break even at t = 4
    engine = replace(load_engine("vllm"), allreduce_latency_s=latency, allreduce_doubling_s=1e-6)
    found = tp_crossovers(replace(d, engine=engine))["tp_breakeven"]
    t = found.value
    assert 4 < t < 5 and _tpot(found.given, t) == pytest.approx(m, rel=1e-9)  # TPOT back at one GPU's
    # latencies that outweigh the memory time: no degree pays, and one GPU is the fastest
    slow = tp_crossovers(replace(d, engine=replace(engine, allreduce_latency_s=10 * latency)))
    assert slow["tp_breakeven"].value == float("inf") and slow["tp_fastest"].value == 1


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["llama-2-7b", "llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b"]), st.sampled_from([1, 2, 4]),
       st.integers(1, 256), st.integers(1, 4092))  # within every window (Llama-2: 4096)
def test_per_gpu_memory_falls_with_tp_and_comm_is_nonnegative(model, tp, batch, prompt):
    base = metrics_of(model, H100, tp=1, batch=[batch], prompt=prompt, gen=4)
    sharded = metrics_of(model, H100, tp=tp, batch=[batch], prompt=prompt, gen=4)
    assert sharded["per_gpu_memory_bytes"][0] <= base["per_gpu_memory_bytes"][0] + 1
    assert sharded["per_gpu_memory_bytes"][0] * tp >= base["weight_bytes"][0]
    assert sharded["comm_s"][0] >= 0 and np.isfinite(sharded["tpot_s"][0])


@pytest.mark.parametrize("kwargs, field", [
    ({"tp": 3}, "tp"),  # 64 query heads
    ({"tp": 0}, "tp"),
    ({"tp": 2, "replicas": 0}, "replicas"),
    ({"tp": 2, "hardware": "cpu"}, "interconnect"),
])
def test_bad_parallel_input_is_a_clear_error(kwargs, field):
    args = {"model": "llama-2-70b", "hardware": "h100-sxm", **kwargs}
    with pytest.raises(ValueError, match=field):
        metrics_of(**args)


def test_tp_that_does_not_split_kv_heads_evenly_is_refused():
    with pytest.raises(ValueError, match="KV heads"):
        shard(load_model("qwen2.5-7b"), 14)  # 14 divides the 28 query heads, but not the 4 KV heads nor they it


@pytest.mark.parametrize("experts, top_k, tokens", [(8, 2, 1), (8, 2, 4), (64, 6, 16), (256, 8, 32)])
def test_expected_distinct_experts_matches_a_monte_carlo_of_top_k_routing(experts, top_k, tokens):
    """The count that sizes expert-parallel weight reads: each token picks k distinct experts uniformly."""
    from roofline.ops import expected_experts_touched
    from roofline.symbols import B, E, T, k
    rng = np.random.default_rng(experts + tokens)
    trials = 4_000
    picks = np.argsort(rng.random((trials, tokens, experts)), axis=2)[:, :, :top_k]
    hit = np.zeros((trials, experts), dtype=bool)
    np.put_along_axis(hit, picks.reshape(trials, -1), True, axis=1)
    distinct = hit.sum(axis=1)
    expected = float(expected_experts_touched().xreplace({E: experts, k: top_k, B: tokens, T: 1}))
    assert abs(distinct.mean() - expected) <= 4 * distinct.std() / np.sqrt(trials) + 1e-9


def test_all_reduces_become_the_binding_resource_when_they_wait_longest():
    # Llama-2-7B split 8 ways at batch 1: 1.7 GB of weights per GPU read in ~0.5 ms; 64 all-reduces of
    # ~10 us take ~0.64 ms. Llama-2-13B: 3.3 GB per GPU (~1 ms) against 80 all-reduces (~0.8 ms).
    small = analyze("llama-2-7b", H100, batch=[1], tp=8).metrics.iloc[0]
    assert small["comm_s"] > small["decode_bound_s"] and small["decode_bound"] == "communication"
    large = analyze("llama-2-13b", H100, batch=[1], tp=8).metrics.iloc[0]
    assert large["comm_s"] < large["decode_bound_s"] and large["decode_bound"] == "weight-bandwidth"


def test_a_parallel_sweep_matches_parallel_analyses():
    grid = sweep("llama-2-70b", H100, batch=[1, 64], context=[1024, 8192], gen=[16], tp=8, prefill=False)
    for _, point in grid.iterrows():
        one = analyze("llama-2-70b", H100, batch=[int(point["batch"])], prompt=int(point["prompt_len"]), gen=16,
                      tp=8, allow_beyond_window=True).metrics.iloc[0]  # sweeps do not check the window
        assert point["tpot_s"] == pytest.approx(one["tpot_s"])
        assert point["decode_bound"] == one["decode_bound"]
