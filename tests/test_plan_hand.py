"""`roofline plan` picks what a hand calculation picks, for the reason it gives."""
import pytest

from roofline.plan import Targets, Workload, load_prices, plan

WORK = Workload(rate=3, prompt=2000, gen=500)
TARGETS = Targets(ttft_s=1.0, tpot_s=0.040)


def test_llama_31_70b_at_3_requests_per_second_is_cheapest_on_two_h200s_because_they_hold_190_sequences():
    """Llama-3.1-70B, bf16 weights and KV, 3 requests/s of 2000-token prompts and 500-token outputs,
    TTFT <= 1 s, TPOT <= 40 ms, H100 SXM or H200 at tp 1, 2, 4, 8 (data/hardware.json, data/prices.yaml).

    Weights. Per layer: q and o projections 2 x 8192^2 = 134.2M, k and v 2 x 8192 x 1024 = 16.8M (8 KV heads
    x 128), MLP 3 x 8192 x 28672 = 704.6M: 855.6M; x 80 layers = 68.45B; embedding and head 2 x 128256 x 8192
    = 2.10B; total 70.55B parameters = 141.1 GB in bf16.
    Memory (issue 23): what CUDA shows, less the runtime's 1 GiB (roofline.kv_memory): H100 81,559 MiB -> 84.45 GB,
    H200 143,771 MiB -> 149.68 GB (the datasheets' 80 and 141 GB undercounted the devices: this test's numbers
    before issue 23 used them). tp=1 fits no H100 (141.1 > 84.45 GB) but an H200 holds the weights and
    (149.68 - 141.1 - 1.5 of a prefill chunk's workspace) / 0.819 = 8 sequences: 1 / (500 x 0.030 / 8 + 0.28)
    = 0.47 requests/s a GPU -> 7 replicas, $28/h.
    KV per token: 2 (K, V) x 80 layers x 8 heads x 128 x 2 bytes = 327,680 B; a sequence holds 2500 tokens:
    819 MB, split over tp GPUs.
    H200 tp=2: a GPU holds 70.55 GB of weights and has 149.68 - 70.55 = 79.13 GB for KV: 79.13 / 0.410 = 193
    sequences (less a prefill chunk's workspace). Decode at the mean context 2250 reads the weights and
    each sequence's 2250 x 163,840 B = 369 MB per GPU at 4.8 TB/s: (70.55 + 191 x 0.369) GB / 4.8 TB/s =
    29.4 ms, plus 160 all-reduces' latency (2 x 80 x 10 us = 1.6 ms): ~31 ms < 40 ms, so memory binds
    the batch, not TPOT. Prefill of 2000 tokens: 2 x 35.3e9 x 2000 FLOPs / 989 TFLOP/s = 0.14 s < 1 s.
    One replica serves 1 / (500 x 0.031 / 191 + 0.14) = 4.5 requests/s >= 3: 2 GPUs x $4.00 = $8.00/h.
    H100 tp=2: (84.45 - 70.55) GB / 0.410 GB = 33 sequences: 1 / (500 x 0.024 / 33 + 0.14) = 2.0 requests/s,
    1 replica short of 3 -> 2 replicas, 4 GPUs x $3.24 = $12.96/h. H100 tp=4: (84.45 - 35.3) / 0.205 = 239
    sequences, one replica (4 GPUs, $12.96/h) serves 3 requests/s. So the two H200s win, at
    $8.00 / (3 x 500 x 3600 tokens/h) = $1.48 per million output tokens, then the four H100s at $2.40.
    The reason: the H200's 141 GB hold the 70B weights on two GPUs with room for a large batch; two H100s
    hold the weights but barely any KV.
    """
    prices = load_prices()
    frame = plan("llama-3.1-70b", WORK, TARGETS, hardware=("h100-sxm", "h200"), tp=(1, 2, 4, 8), weights=("bf16",))
    best, second = frame.iloc[0], frame.iloc[1]
    assert (best["hardware"], best["tp"], best["replicas"], best["gpus"]) == ("h200", 2, 1, 2)
    assert best["binding"] == "memory"  # the batch is what fits, and TPOT has room
    assert best["max_batch"] == pytest.approx(191, abs=4)
    assert best["tpot_s"] == pytest.approx((70.55e9 + best["batch"] * 2250 * 163840) / 4.8e12 + 1.6e-3, rel=0.08)
    assert best["tpot_s"] < TARGETS.tpot_s
    assert best["usd_per_million_tokens"] == pytest.approx(2 * prices["h200"] / (3 * 500 * 3600) * 1e6)
    assert (second["hardware"], second["tp"], second["gpus"]) == ("h100-sxm", 4, 4)
    h100_tp2 = frame[(frame["hardware"] == "h100-sxm") & (frame["tp"] == 2)].iloc[0]
    assert h100_tp2["max_batch"] == pytest.approx(33, abs=3) and h100_tp2["replicas"] == 2
    tp1 = frame[(frame["hardware"] == "h100-sxm") & (frame["tp"] == 1)].iloc[0]
    assert not tp1["feasible"] and tp1["rejected"].startswith("memory")
    tp1 = frame[(frame["hardware"] == "h200") & (frame["tp"] == 1)].iloc[0]
    assert tp1["feasible"] and tp1["max_batch"] == pytest.approx(8, abs=1) and tp1["replicas"] == 7
