"""`roofline plan` picks what a hand calculation picks, for the reason it gives: each candidate priced under its
load by a fitted engine. The first two cases price the TensorRT-LLM 0.x profile (data/engines/tensorrt-llm.yaml),
named explicitly, from its datasheet fractions; the others price the default, tensorrt-llm-1
(data/engines/tensorrt-llm-1.yaml), the last by hand with its overlap scheduler and per-request cost."""
import math

import pytest

from roofline.planning.plan import Targets, Workload, load_prices, plan

WORK = Workload(rate=3, prompt=2000, gen=500)
TARGETS = Targets(ttft_s=1.0, tpot_s=0.040)

# The tensorrt-llm profile's fitted parameters (data/engines/tensorrt-llm.yaml), rounded as the hand work uses them
BANDWIDTH = 0.7748 * 3.35e12  # its weight GEMVs' share of the H100's 3.35 TB/s: 2.596 TB/s
ATTENTION_BANDWIDTH = 0.8762 * 3.35e12  # decode attention's: 2.935 TB/s
FLOPS = 0.7778 * 989.4e12  # its large GEMMs' share of the bf16 peak
CORNER = 1.331  # an op takes (compute^p + memory^p)^(1/p)
GQA_REREADS = 0.4119  # of a KV group's other 7 query heads, the share that read its K/V again
ALLREDUCE_S, LAYER_S, REQUEST_S = 47.74e-6, 5e-6, 2.279e-3
HANDOFF_S = 1.2032227783940064  # disaggregated serving's prefill-to-decode handoff (roofline.fitting.disagg_handoff)


def decode_step_h100_tp8(batch: float) -> float:
    """Llama-3.1-70B bf16 on 8 H100s at the mean context 2250, from the profile's parameters (the docstring below)."""
    weights_memory = 141.1e9 / 8 / BANDWIDTH  # 6.80 ms
    weights_compute = 2 * 141.1e9 / 2 / 8 * batch / FLOPS  # 2 FLOPs a parameter a token
    weights = (weights_compute ** CORNER + weights_memory ** CORNER) ** (1 / CORNER)
    kv = 2250 * 2 * 80 * 1 * 128 * 2 * (1 + GQA_REREADS * 7) / ATTENTION_BANDWIDTH  # one KV head a GPU
    allreduce_bytes = 160 * 2 * 7 / 8 * 8192 * 2 / 450e9  # ring all-reduce of a token's activations, NVLink
    norms = 2.7e-6  # two RMS norms and the SiLU's reads and writes, 80 layers (0.45 ms at batch 166)
    return weights + 160 * ALLREDUCE_S + 80 * LAYER_S + batch * (kv + allreduce_bytes + norms)


def test_llama_31_70b_at_3_requests_per_second_is_cheapest_on_eight_h100s_achievable_under_load():
    """Llama-3.1-70B, bf16 weights and KV, 3 requests/s of 2000-token prompts and 500-token outputs,
    TTFT <= 1 s, TPOT <= 40 ms, H100 SXM or H200 at tp 1, 2, 4, 8, priced by the tensorrt-llm profile.

    Weights: 70.55B parameters = 141.1 GB in bf16 (q, o 2 x 8192^2, k, v 2 x 8192 x 1024, MLP 3 x 8192 x
    28672, x 80 layers, plus embedding and head 2 x 128256 x 8192). KV: 2 x 80 layers x 8 heads x 128 x 2 B =
    327,680 B a token; a sequence of 2500 tokens 819 MB.
    Memory, the engine's rule (roofline.kv_memory): TensorRT-LLM gives the KV pool 0.9 of what is free after
    the weights and a prefill chunk's workspace. H200 tp=1: (149.68 - 141.1 - 1.5) x 0.9 / 0.819 = 7 sequences
    (it was 8 under the ideal engine's whole-room rule). H100 tp=1 holds no copy of the weights.

    Capacity batch on 8 H100s (one KV head a GPU), each term from the profile:
      weights    17.64 GB a GPU / 2.596 TB/s = 6.80 ms; their GEMMs' compute 8.82 G params x 2 x B / 769.5
                 TFLOP/s = 22.9 us x B, the two combined at the corner p = 1.331 (9.0 ms at B = 166);
      all-reduces  2 a layer x 80 x 47.7 us = 7.64 ms, plus 160 x 2 x 7/8 x 8192 x 2 B / 450 GB/s = 10.2 us a
                 sequence; kernel launches 80 x 5 us = 0.40 ms;
      KV         2250 x 2 x 80 x 128 x 2 B = 92.2 MB a sequence, read 1 + 0.412 x 7 = 3.88 times (GQA
                 rereads) at 2.935 TB/s: 0.1218 ms a sequence;
    so t(B) = 9.0 + 8.04 + B x 0.1347 ms, 39.5 ms at B = 166: 40 ms is crossed at B ~ 168 (the search: 166).
    Under load at 3 requests/s on one replica (roofline.serving.load, every prompt one 2000-token chunk within
    the 8192-token budget): decoders m = 3 x 499 x tau, a decode step t(m), a step carrying a prompt
    86.2 ms (its prefill alone: the TTFT of a lone request, 88.5 ms, less the 2.3 ms request cost) plus the
    decoders' m x 0.135 ms, carried by a share phi = 1 - exp(-3 tau) of the steps. The fixed point: tau = 25.6
    ms, m = 38.3, t(m) = 20.3 ms, mixed 91.5 ms, phi = 0.074: (1 - phi) x 20.3 + phi x 91.5 = 25.6 ms;
    TPOT ~ 25.6 ms (the model, weighting steps by their decoders: 26.6). TTFT = the wait for the step in
    progress, E[t^2] / 2 tau with the prompts' spread (0.926 x 20.3^2 + 0.074 x (91.5^2 + 71.1^2)) / 51.2 = 26.9
    ms, plus its own step 91.5 ms, plus the prompts arriving in the same step, 3/s x E[t^2]/tau x 2000 = 322
    tokens at 43 us (13.9 ms), plus 2.3 ms: 134.6 ms (the model: 135.8). In flight: 3/s x (0.135 + 499 x
    0.0266) = 40 requests, not the capacity 166.
    One replica of 8 H100s ($3.24 an hour each) serves it: 8 x 3.24 / (3 x 500 x 3600) x 1e6 = $4.80 a million.
    Two H200 tp=4 replicas (8 x $4.00) and four H100 tp=2 (8 GPUs but 4 replicas, each 9 sequences) cost more
    or hold less; the ideal engine would price the same layout at a third of the TPOT: a bound, not a row.
    """
    prices = load_prices()
    frame = plan("llama-3.1-70b", WORK, TARGETS, hardware=("h100-sxm", "h200"), tp=(1, 2, 4, 8), weights=("bf16",),
                 engines=("tensorrt-llm",))
    assert set(frame["engine"]) == {"tensorrt-llm"}  # the profile this hand work prices; ideal is only ideal_* columns
    best = frame.iloc[0]
    assert (best["hardware"], best["tp"], best["replicas"], best["gpus"]) == ("h100-sxm", 8, 1, 8)
    assert best["usd_per_million_tokens"] == pytest.approx(8 * prices["h100-sxm"] / (3 * 500 * 3600) * 1e6)
    # the capacity batch where the hand's t(B) crosses 40 ms
    crossing = next(b for b in range(1, 400) if decode_step_h100_tp8(b + 1) > TARGETS.tpot_s)
    assert crossing == pytest.approx(168, abs=2)
    assert best["capacity_batch"] == pytest.approx(crossing, rel=0.03) and best["binding"] == "TPOT"
    assert best["tpot_at_capacity_s"] == pytest.approx(decode_step_h100_tp8(best["capacity_batch"]), rel=0.02)
    # under load: the fixed point tau = (1 - phi) t(m) + phi (prefill + m x per-sequence), m = 3 x 499 x tau
    per_sequence = decode_step_h100_tp8(1) - decode_step_h100_tp8(0)
    tau = 0.02
    for _ in range(50):
        m, phi = 3 * 499 * tau, -math.expm1(-3 * tau)
        mixed = 0.0862 + m * per_sequence
        tau = (1 - phi) * decode_step_h100_tp8(m) + phi * mixed
    assert tau == pytest.approx(0.0256, rel=0.01)
    assert best["tpot_s"] == pytest.approx(tau, rel=0.05) and best["tpot_s"] > decode_step_h100_tp8(m)
    second_moment = (1 - phi) * decode_step_h100_tp8(m) ** 2 + phi * (mixed ** 2 + (mixed - decode_step_h100_tp8(m)) ** 2)
    beside = 3 * second_moment / tau * 2000 * (0.0862 / 2000)  # prompts arriving in its step: their tokens x 43 us
    ttft = second_moment / (2 * tau) + mixed + beside + REQUEST_S
    assert best["ttft_s"] == pytest.approx(ttft, rel=0.08) and best["ttft_alone_s"] == pytest.approx(0.0885, rel=0.02)
    assert best["batch"] == pytest.approx(3 * (best["ttft_s"] + 499 * best["tpot_s"]))  # Little, ~40 in flight
    assert best["batch"] == pytest.approx(40, abs=2) and best["capacity_batch"] > 4 * best["batch"]
    assert best["ideal_tpot_s"] < best["tpot_s"] / 2  # the bound beside the row
    tp1 = frame[(frame["hardware"] == "h100-sxm") & (frame["tp"] == 1)].iloc[0]
    assert not tp1["feasible"] and tp1["rejected"].startswith("memory")
    tp1 = frame[(frame["hardware"] == "h200") & (frame["tp"] == 1)].iloc[0]
    assert tp1["feasible"] and tp1["max_batch"] == 7


def decode_step_at(batch: float, context: float) -> float:
    """decode_step_h100_tp8 at another mean context: only the KV term a sequence reads scales with it."""
    kv_read = (context - 2250) * 2 * 80 * 128 * 2 * (1 + GQA_REREADS * 7) / ATTENTION_BANDWIDTH
    return decode_step_h100_tp8(batch) + batch * kv_read


def test_disaggregated_pools_win_for_long_prompts_under_a_tight_tpot_as_the_hand_sizes_them():
    """Llama-3.1-70B bf16 on H100s at tp 8, 1 request/s of 16,000-token prompts and 300-token outputs, TTFT <= 3 s,
    TPOT <= 30 ms, tensorrt-llm's profile.

    Aggregated, every prompt's two 8192-token chunks ride in the decoders' steps: one replica misses TPOT under
    load, and the search needs 3 (24 GPUs). Disaggregated:
      prefill, one prompt alone on 8 GPUs: its GEMMs 2 x 68.45 G (non-embedding) parameters x 16,000 tokens / 8
               / 769.5 TFLOP/s = 356 ms; causal attention 2 matmuls x 2 x 16000^2 / 2 x 8192 x 80 layers / 8 /
               769.5 TFLOP/s = 54.5 ms; norms and the SiLU read and write the activations (3 x 0.202 ms ... 42.8
               ms); 160 all-reduces of 16000 x 8192 x 2 B x 2 x 7/8 at 450 GB/s + 47.7 us = 171 ms; launches 0.4
               ms: S = 625 ms (the pricer: 673 ms, its rounded corner adds the GEMMs' weight reads and attention
               runs whole tiles on the diagonal);
      queueing, M/D/1 at rho = 1/s x S: rho S / 2(1 - rho); TTFT = S + wait + 2.3 ms + the engine's
               disaggregation handoff (disagg_handoff_s, 1.20 s) + the KV transfer;
      KV      16,000 tokens x 2 x 80 layers x 1 KV head a GPU x 128 x 2 B = 655.4 MB a GPU; 8 + 8 GPUs span two
               nodes of 8 (DGX H100), so over one 400 Gb/s NDR port a GPU, 50 GB/s: 13.1 ms;
      decode  TPOT = t(n + 1), n = 1/s x 299 x TPOT decoders, t the step at context 16,150 (0.875 ms of KV a
               sequence): 21.4 ms, within 30 ms on one worker.
    16 GPUs ($48 a million) against the aggregated 24: disaggregation wins, as the hand says."""
    work, targets = Workload(rate=1, prompt=16000, gen=300), Targets(ttft_s=3.0, tpot_s=0.030)
    frame = plan("llama-3.1-70b", work, targets, hardware=("h100-sxm",), tp=(8,), weights=("bf16",),
                 engines=("tensorrt-llm",), disaggregated=True)
    best = frame.iloc[0]
    aggregated = frame[frame["mode"] == "aggregated"].iloc[0]
    assert best["mode"] == "disaggregated" and best["feasible"]
    assert (best["prefill_workers"], best["decode_workers"], best["gpus"]) == (1, 1, 16)
    assert aggregated["feasible"] and aggregated["gpus"] == 24 > best["gpus"]
    kv_per_gpu = 16000 * 2 * 80 * 1 * 128 * 2
    assert best["link"] == "network" and best["kv_transfer_s"] == pytest.approx(kv_per_gpu / 50e9, rel=1e-9)
    gemms = 2 * 68.45e9 * 16000 / 8 / FLOPS
    attention = 2 * 2 * 16000 ** 2 / 2 * 8192 * 80 / 8 / FLOPS
    norms = 80 * (2 * 16000 * 8192 * 2 * 2 + 16000 * 3584 * 3 * 2) / BANDWIDTH
    allreduces = 160 * (16000 * 8192 * 2 * 2 * 7 / 8 / 450e9 + ALLREDUCE_S)
    prefill = gemms + attention + norms + allreduces + 80 * LAYER_S
    assert prefill == pytest.approx(0.625, rel=0.01)
    service = best["ttft_alone_s"] - REQUEST_S
    assert service == pytest.approx(prefill, rel=0.10)
    busy = work.rate * service
    ttft = service + busy * service / (2 * (1 - busy)) + REQUEST_S + HANDOFF_S + kv_per_gpu / 50e9
    assert best["ttft_s"] == pytest.approx(ttft, rel=1e-6)
    tpot = 0.02
    for _ in range(60):
        tpot = decode_step_at(1 * 299 * tpot + 1, 16150)
    assert tpot == pytest.approx(0.0214, rel=0.02)
    assert best["tpot_s"] == pytest.approx(tpot, rel=0.03)
    assert best["usd_per_million_tokens"] == pytest.approx(16 * load_prices()["h100-sxm"] / (300 * 3600) * 1e6)


def test_disaggregated_pools_lose_where_one_pool_is_cheaper():
    """The first test's workload (3/s, 2000 in, 500 out): a prefill and a decode worker of 8 H100s each meet
    the targets (16 GPUs, the KV 2000 x 40,960 B = 81.9 MB a GPU over the network, 1.64 ms) but one aggregated
    replica of 8 does too: the plan keeps the aggregated answer."""
    frame = plan("llama-3.1-70b", WORK, TARGETS, hardware=("h100-sxm",), tp=(8,), weights=("bf16",),
                 disaggregated=True)
    best = frame.iloc[0]
    pools = frame[frame["mode"] == "disaggregated"].iloc[0]
    assert best["mode"] == "aggregated" and best["gpus"] == 8
    assert pools["feasible"] and pools["gpus"] == 16
    assert pools["kv_transfer_s"] == pytest.approx(2000 * 40960 / 50e9, rel=1e-9)


# The tensorrt-llm-1 profile's fitted parameters (data/engines/tensorrt-llm-1.yaml), rounded as the hand work uses them
V1_BANDWIDTH = 0.89628 * 3.35e12  # its weight GEMVs' share of the H100's 3.35 TB/s: 3.003 TB/s
V1_ATTENTION_BANDWIDTH = 0.90094 * 3.35e12  # decode attention's: 3.018 TB/s (XQA: a GQA group's K/V read once)
V1_FLOPS, V1_ATTENTION_FLOPS = 0.54453 * 989.4e12, 0.51588 * 989.4e12  # GEMMs', prefill attention's share of the peak
V1_CORNER = 1.4864
V1_OP_S, V1_STEP_S = 6.3504e-6, 38.594e-6  # each op's fixed time, a step's host work
LLAMA_8B_OPS = 32 * 8 + 3  # 8 a layer x 32, the embedding, the final norm and the head
# a request: 11.7 ms, and its prompt's first pass dispatched op by op, 0.1721 ms each of the 259
V1_REQUEST_S = 11.726e-3 + LLAMA_8B_OPS * 0.17213e-3
V1_OVERLAP_STEPS = 1  # scheduler.overlap_steps: a new request joins the step after the next
LLAMA_8B_LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336  # q, o; k, v (8 KV heads); MLP: 218.1 M
LLAMA_8B_HEAD = 128256 * 4096  # the LM head's 525.3 M parameters


def v1_op(compute: float, memory: float) -> float:
    return (compute ** V1_CORNER + memory ** V1_CORNER) ** (1 / V1_CORNER)


def decode_step_8b_h100(batch: float, context: float = 1100) -> float:
    """Llama-3.1-8B bf16 on one H100 under tensorrt-llm-1: a decode step at the mean context P + G / 2."""
    gemms = 32 * LLAMA_8B_LAYER + LLAMA_8B_HEAD  # every GEMM has 2 FLOPs a token per 2-byte parameter: one corner
    weights = v1_op(2 * gemms * batch / V1_FLOPS, 2 * gemms / V1_BANDWIDTH)
    kv = context * 2 * 32 * 8 * 128 * 2 / V1_ATTENTION_BANDWIDTH  # 131,072 B a token, read once per KV head
    norms = 32 * (4096 * 2 * 2 * 2 + 14336 * 3 * 2) / V1_BANDWIDTH  # two RMS norms and the SiLU, read and written
    return weights + LLAMA_8B_OPS * V1_OP_S + V1_STEP_S + batch * (kv + norms)


def prefill_8b_h100(tokens: int = 1000) -> float:
    """The same deployment's prefill of one prompt: GEMMs, causal attention, norms, the head for the last token."""
    gemms = v1_op(2 * 32 * LLAMA_8B_LAYER * tokens / V1_FLOPS, 2 * 32 * LLAMA_8B_LAYER / V1_BANDWIDTH)
    attention = 2 * 2 * tokens ** 2 / 2 * 4096 * 32 / V1_ATTENTION_FLOPS
    norms = 32 * (2 * tokens * 4096 * 2 * 2 + tokens * 14336 * 3 * 2) / V1_BANDWIDTH
    head = v1_op(2 * LLAMA_8B_HEAD / V1_FLOPS, 2 * LLAMA_8B_HEAD / V1_BANDWIDTH)
    return gemms + attention + norms + head + LLAMA_8B_OPS * V1_OP_S + V1_STEP_S


def test_the_default_engine_prices_a_lone_h100_under_load_as_the_hand_does_request_cost_and_overlap_included():
    """Llama-3.1-8B bf16 on one H100 SXM, 1 request/s of 1000-token prompts and 200-token outputs, TTFT <= 0.5 s,
    TPOT <= 20 ms, under the default engine, tensorrt-llm-1 (TensorRT-LLM 1.x fitted to serving-hopper.csv).

    Decode step at the mean context 1100 (each term from the profile): the GEMMs' 7.505 G parameters (32 layers
      x 218.1 M, the head 525.3 M) = 15.01 GB at 3.003 TB/s = 5.00 ms, their compute 15.01 G FLOPs x B / 538.8
      TFLOP/s = 27.9 us x B, combined at the corner p = 1.486; each of the step's 259 ops' fixed time, 259 x 6.35
      us = 1.64 ms, and 38.6 us of host work a step; a sequence's KV 1100 x 131,072 B = 144.2 MB at 3.018 TB/s =
      47.8 us (XQA: read once per group, no re-reads), its norms 1.3 us: t(1) = 6.73 ms; 20 ms is crossed at
      B ~ 201.
    Prefill of a prompt alone: GEMMs 2 x 6.98 G x 1000 / 538.8 TFLOP/s = 25.9 ms against 13.96 GB / 3.003 TB/s
      = 4.65 ms at the corner: 27.2 ms; causal attention 0.51 ms, norms 1.27 ms, head and the ops' fixed
      time 2.0 ms: 31.1 ms. A lone request's TTFT adds the profile's request cost, 11.7 ms and its prompt's first
      pass dispatched op by op (TensorRT-LLM runs a step carrying a prompt outside CUDA graphs), 259 x 0.172 ms:
      56.3 ms in all, 87.4 ms.
    Under load (roofline.serving.load; each prompt one chunk within the 8192-token budget): decoders m = 1/s x 199
      x tau; a prompt's step carries it and the decoders, 31.1 ms + m x 51 us, in a share phi = 1 - exp(-tau)
      of the steps: tau = (1 - phi) t(m) + phi x mixed = 6.92 ms, m = 1.38, phi = 0.0069.
      TTFT = the step in progress E[t^2] / 2 tau (4.1 ms) + one step scheduled ahead (overlap_steps 1 x tau:
      TensorRT-LLM batches step n + 1 while step n runs, 6.9 ms) + its own step 31.1 ms + 56.3 ms = 98.4 ms.
      TPOT: a running request sees itself beside the m others, t(m + 1) = 6.80 ms, and the prompts' steps phi of
      the time: 6.97 ms. In flight 1/s x (0.098 + 199 x 0.0070) = 1.5 requests, not the capacity batch.
    The same question at the 90th percentile: the simulator pays the request cost too (TTFT > 87.4 ms)."""
    work, targets = Workload(rate=1, prompt=1000, gen=200), Targets(ttft_s=0.5, tpot_s=0.020)
    frame = plan("llama-3.1-8b", work, targets, hardware=("h100-sxm",), tp=(1,), weights=("bf16",),
                 disaggregated=False)
    row = frame.iloc[0]
    assert row["engine"] == "tensorrt-llm-1" and row["feasible"] and row["replicas"] == 1
    assert decode_step_8b_h100(1) == pytest.approx(6.73e-3, rel=0.01)
    crossing = next(b for b in range(1, 1000) if decode_step_8b_h100(b + 1) > targets.tpot_s)
    assert crossing == 201 and row["binding"] == "TPOT"
    assert row["capacity_batch"] == pytest.approx(crossing, rel=0.04)
    assert row["tpot_at_capacity_s"] == pytest.approx(decode_step_8b_h100(row["capacity_batch"]), rel=0.03)
    assert prefill_8b_h100() == pytest.approx(31.1e-3, rel=0.01)
    assert row["ttft_alone_s"] == pytest.approx(prefill_8b_h100() + V1_REQUEST_S, rel=0.01)
    per_sequence = decode_step_8b_h100(1) - decode_step_8b_h100(0)
    tau = 0.006
    for _ in range(50):
        m, phi = 1 * 199 * tau, -math.expm1(-1 * tau)
        mixed = prefill_8b_h100() + m * per_sequence
        tau = (1 - phi) * decode_step_8b_h100(m) + phi * mixed
    assert tau == pytest.approx(6.92e-3, rel=0.01)
    second_moment = (1 - phi) * decode_step_8b_h100(m) ** 2 + phi * (mixed ** 2 + (mixed - decode_step_8b_h100(m)) ** 2)
    ttft = second_moment / (2 * tau) + V1_OVERLAP_STEPS * tau + mixed + V1_REQUEST_S
    # within 2%: without the step scheduled ahead (7%) or the request cost (57%) the hand would miss
    assert row["ttft_s"] == pytest.approx(ttft, rel=0.02) and ttft == pytest.approx(0.0984, rel=0.01)
    tpot = (1 - phi) * decode_step_8b_h100(m + 1) + phi * mixed
    assert row["tpot_s"] == pytest.approx(tpot, rel=0.02)
    assert row["batch"] == pytest.approx(1 * (row["ttft_s"] + 199 * row["tpot_s"])) and row["batch"] < 2
    assert row["usd_per_million_tokens"] == pytest.approx(load_prices()["h100-sxm"] / (200 * 3600) * 1e6)
    simulated = plan("llama-3.1-8b", work, Targets(ttft_s=0.5, tpot_s=0.020, percentile=90), hardware=("h100-sxm",),
                     tp=(1,), weights=("bf16",), disaggregated=False, requests=100).iloc[0]
    assert prefill_8b_h100() + V1_REQUEST_S < simulated["sim_ttft_s"] < 1.2 * ttft
