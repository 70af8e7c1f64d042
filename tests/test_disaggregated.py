"""Disaggregated serving (roofline.serving.disaggregated): the link a request's KV takes, the prefill pool's
queueing against the request-by-request simulator, and the closed loop's bookkeeping."""
import dataclasses

import numpy as np
import pytest

from roofline.deployment import Deployment
from roofline.hardware import load_hardware
from roofline.serving.batching import StepCost, Workload as Requests, simulate_continuous
from roofline.serving.disaggregated import Disaggregated, PrefillPool, kv_transfer_s, transfer_link


def test_kv_moves_over_nvlink_inside_a_node_and_over_the_network_past_it():
    h100 = load_hardware("h100-sxm")
    assert transfer_link(h100, 8).name == "nvlink" and transfer_link(h100, 8).bandwidth == 450e9
    assert transfer_link(h100, 9).name == "network" and transfer_link(h100, 9).bandwidth == 50e9  # 400 Gb/s NDR


def test_a_deployment_past_one_node_without_a_network_figure_is_refused_naming_the_field():
    bare = dataclasses.replace(load_hardware("h100-sxm"), network_bandwidth=None)
    with pytest.raises(ValueError, match="network.bytes_per_s"):
        transfer_link(bare, 16)


def test_the_larger_shard_binds_the_transfer_gqa_kv_split_by_tp_not_sized_by_query_heads():
    """Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B a token; a prefill worker of tp 1
    sends it all, a decode worker of tp 4 receives a quarter a GPU: 1000 tokens' whole cache over 450 GB/s."""
    prefill = Deployment.of("llama-3.1-8b", "h100-sxm", tp=1)
    decode = Deployment.of("llama-3.1-8b", "h100-sxm", tp=4)
    link = transfer_link(prefill.hardware, 5)
    assert kv_transfer_s(prefill, decode, 1000, link) == pytest.approx(1000 * 131072 / 450e9, rel=1e-9)
    both_split = Deployment.of("llama-3.1-8b", "h100-sxm", tp=2)
    assert kv_transfer_s(both_split, decode, 1000, link) == pytest.approx(1000 * 131072 / 2 / 450e9, rel=1e-9)


@pytest.mark.parametrize("busy", [0.3, 0.6])
def test_prefill_pool_queueing_matches_the_simulator_serving_one_prompt_at_a_time(busy):
    """M/D/1 (Pollaczek-Khinchine) against simulate_continuous: Poisson arrivals, prompts served one a step
    (max batch 1), one output token each; the mean TTFT within 6% over 4000 requests."""
    d = Deployment.of("llama-3.1-8b", "h100-sxm", engine="tensorrt-llm")
    pool = PrefillPool(d, 1000)
    rate = busy / pool.service_s
    rng = np.random.default_rng(1)
    n = 4000
    requests = Requests(np.cumsum(rng.exponential(1 / rate, n)), np.full(n, 1000), np.full(n, 1))
    result = simulate_continuous(requests, StepCost(d), 1, request_overhead_s=d.engine.request_overhead_s)
    predicted = float(pool.at_rate([rate])["ttft_s"][0])
    assert predicted == pytest.approx(float(np.mean(result.ttft_s)), rel=0.06)


def test_closed_loop_holds_littles_law_and_queues_past_what_the_pools_hold():
    prefill = Deployment.of("llama-3.1-8b", "h100-sxm", engine="tensorrt-llm")
    decode = Deployment.of("llama-3.1-8b", "h100-sxm", engine="tensorrt-llm")
    pools = Disaggregated(prefill, decode, 1, 1, 1000, 200, decode_max_batch=32)
    out = pools.at_concurrency([4.0, 16.0, 400.0])
    assert np.allclose(out["rate"] * out["e2e_s"], out["concurrency"], rtol=1e-3)
    assert out["queued"][0] == 0 and out["queued"][2] > 300  # the decode cap holds 32, the rest wait
    assert np.all(np.diff(out["tpot_s"]) > 0) and np.all(np.diff(out["ttft_s"]) > 0)


def test_plan_cli_shows_sizes_and_emits_both_pools_of_a_disaggregated_winner(capsys):
    import json

    from roofline.cli import main
    flags = ["plan", "--model", "llama-3.1-70b", "--rate", "1", "--prompt", "16000", "--gen", "300", "--ttft", "3",
             "--tpot", "0.03", "--hardware", "h100-sxm", "--tp", "8", "--weights", "bf16", "--disaggregated", "--fast",
             "--engine", "tensorrt-llm"]  # test_plan_hand's disaggregated winner, sized under the 0.x profile
    assert main(flags + ["--explain", "--emit", "trtllm"]) == 0
    out = capsys.readouterr().out
    assert "Cheapest: 16 x h100-sxm disaggregated prefill 1 x tp=8 + decode 1 x tp=8" in out
    assert "prefill 1 x tp=8: the fewest workers whose TTFT" in out and "over network" in out
    assert out.count("trtllm-serve llama-3.1-70b --tp_size 8") == 2 and "trtllm-serve disaggregated -c" in out
    assert "cache_transceiver_config:" in out and "disable_overlap_scheduler: true" in out
    assert main(flags + ["--json"]) == 0
    best = json.loads(capsys.readouterr().out)[0]
    assert (best["mode"], best["prefill_workers"], best["decode_workers"], best["link"]) == \
        ("disaggregated", 1, 1, "network")


def test_past_the_prefill_knee_the_closed_loop_holds_littles_law_and_each_request_adds_one_service_interval():
    """One prefill worker of Llama-3.1-8B (a 4000-token prompt in ~93 ms: ~10.8 requests/s) feeding four decode
    workers: from C = 100 on the prefill pool is the bottleneck. A closed loop there completes X = its throughput
    whatever C is, so Little's law (C = X E2E) makes every request past the knee add 1 / X to TTFT (the closed
    loop's asymptote, Denning & Buzen 1978). Interpolating a coarse open-loop curve instead froze TTFT at ~1.7 s
    with 32 requests accounted for at every C from 50 to 500."""
    prefill = Deployment.of("llama-3.1-8b", "h100-sxm", engine="tensorrt-llm")
    decode = Deployment.of("llama-3.1-8b", "h100-sxm", engine="tensorrt-llm")
    pools = Disaggregated(prefill, decode, 1, 4, 4000, 200, decode_max_batch=256)
    throughput = pools.prefill_pool.saturation()
    assert pools.saturation() == throughput  # the prefill pool binds
    out = pools.at_concurrency([100.0, 500.0])
    assert out["rate"] * out["e2e_s"] == pytest.approx(out["concurrency"], rel=1e-9)
    assert (out["queued"] == 0).all() and (out["prefill_busy"] > 0.99).all()
    assert out["ttft_s"][1] - out["ttft_s"][0] == pytest.approx(400 / throughput, rel=0.01)
