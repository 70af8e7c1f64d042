"""Pipeline parallelism: schedules against a slot-by-slot simulation, stages against the whole model."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roofline import analyze, load_hardware, load_model
from roofline.compiled import compile_model
from roofline.model import parameter_count
from roofline.deployment import Deployment
from roofline.serving.pipeline import analyze_pipeline, idle_fraction, pass_seconds, steady_round_seconds
from roofline.sharding import stage_layers

H100 = load_hardware("h100-sxm")


def slot_schedule(stage_ticks, transfer_ticks, microbatches, steps):
    """Tick by tick: each stage works on one micro-batch at a time, first come first served; a micro-batch
    reaches the next stage `transfer_ticks` after leaving one, and its next step starts when its last ends.
    Returns the busy grid (stage x tick) and each (step, micro-batch)'s finishing tick."""
    p = len(stage_ticks)
    queue = [[] for _ in range(p)]  # (ready tick, step, micro-batch)
    queue[0] = [(0, 0, j) for j in range(microbatches)]
    running = [None] * p  # (ticks left, step, micro-batch)
    busy, finished, tick = [[] for _ in range(p)], {}, 0
    while len(finished) < steps * microbatches:
        for i in range(p):
            if running[i] is None:
                ready = sorted(q for q in queue[i] if q[0] <= tick)
                if ready:
                    queue[i].remove(ready[0])
                    running[i] = [stage_ticks[i], ready[0][1], ready[0][2]]
            busy[i].append(running[i] is not None)
        tick += 1
        for i in range(p):
            if running[i] is not None:
                running[i][0] -= 1
                if running[i][0] == 0:
                    _, step, j = running[i]
                    running[i] = None
                    if i + 1 < p:
                        queue[i + 1].append((tick + transfer_ticks, step, j))
                    else:
                        finished[step, j] = tick
                        if step + 1 < steps:
                            queue[0].append((tick, step + 1, j))
    return np.array([row[:tick] for row in busy]), finished


@pytest.mark.parametrize("p, m", [(2, 1), (4, 1), (4, 4), (4, 8), (8, 3), (3, 16)])
def test_a_flushed_pass_idles_p_minus_1_over_m_plus_p_minus_1_of_the_slots(p, m):
    busy, finished = slot_schedule([1] * p, 0, m, steps=1)
    assert busy.shape[1] == max(finished.values()) == pass_seconds([1] * p, 0, m) == m + p - 1
    assert 1 - busy.mean() == pytest.approx((p - 1) / (m + p - 1))
    assert idle_fraction([1] * p, m, pass_seconds([1] * p, 0, m)) == pytest.approx((p - 1) / (m + p - 1))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.integers(0, 3), st.integers(1, 6))
def test_pass_makespan_and_idle_share_match_the_slot_schedule_for_uneven_stages(ticks, transfer, m):
    busy, finished = slot_schedule(ticks, transfer, m, steps=1)
    makespan = max(finished.values())
    assert makespan == pass_seconds(ticks, transfer, m)
    assert 1 - busy.sum() / busy.size == pytest.approx(idle_fraction(ticks, m, makespan))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.integers(0, 3), st.integers(1, 6))
def test_steady_decode_round_matches_the_slot_schedule(ticks, transfer, m):
    steps = 40
    _, finished = slot_schedule(ticks, transfer, m, steps)
    last = [max(finished[s, j] for j in range(m)) for s in range(steps)]
    assert (last[-1] - last[steps // 2]) / (steps - 1 - steps // 2) == pytest.approx(
        steady_round_seconds(ticks, transfer, m))


def test_one_batch_in_flight_adds_the_hand_offs_to_tpot_and_gains_no_latency():
    whole = analyze("llama-2-70b", H100, batch=[8]).metrics
    out = analyze_pipeline(Deployment.of("llama-2-70b", H100, pp=4), batch=8)
    transfer = 10e-6 + 8 * 8192 * 2 / 450e9  # assumed link latency + B·D·b_a / NVLink bandwidth
    assert out.transfer_s == pytest.approx(transfer)
    assert out.tpot_s == pytest.approx(float(whole.tpot_s[0]) + 3 * transfer, rel=1e-9)  # not whole / 4
    assert out.bubble_fraction >= 3 / 4 and out.link_latency_assumed
    # a quarter of the weights and cache, plus the one prefill chunk's workspace every GPU holds
    assert out.per_gpu_memory_bytes - out.workspace_bytes < 0.26 * float(whole.weight_bytes[0] + whole.kv_bytes[0])
    assert out.workspace_bytes == float(whole.workspace_bytes[0])


@pytest.mark.parametrize("model, tp", [("llama-2-13b", 1), ("llama-2-70b", 4), ("mixtral-8x7b", 2)])
def test_a_single_stage_is_the_librarys_tensor_parallel_step(model, tp):
    want = analyze(model, H100, batch=[16], prompt=512, tp=tp).metrics
    out = analyze_pipeline(Deployment.of(model, H100, pp=1, tp=tp), batch=16, prompt=512)
    assert out.tpot_s == pytest.approx(float(want.tpot_s[0]), rel=1e-9)
    assert out.comm_s == pytest.approx(float(want.comm_s[0]), rel=1e-9)
    assert out.bubble_fraction == pytest.approx(0, abs=1e-12)


@pytest.mark.parametrize("model, pp", [("llama-2-70b", 4), ("gemma-2-9b", 3), ("deepseek-v2-lite", 5),
                                       ("tinyllama-1.1b-chat-v1.0", 22)])
def test_stages_hold_every_weight_and_cache_entry_once_plus_a_tied_head(model, pp):
    config = load_model(model)
    stages = Deployment(config, H100, pp=pp).memory_bytes(batch=3, tokens=5000)
    kv = float(compile_model(config).kv_cache(3.0, 5000.0, 2.0))
    tied = config.vocab_size * config.d_model if config.tied_embeddings else 0  # the last stage's copy
    assert sum(stages) == pytest.approx(2 * (parameter_count(config) + tied) + kv, rel=1e-12)
    assert sum(Deployment(config, H100).memory_bytes(3, 5000)) == pytest.approx(2 * parameter_count(config) + kv,
                                                                               rel=1e-12)


def test_layers_split_contiguously_with_the_remainder_on_the_first_stages():
    assert [list(r) for r in stage_layers(7, 3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert [len(r) for r in stage_layers(80, 3)] == [27, 27, 26]
    with pytest.raises(ValueError, match="pp"):
        stage_layers(4, 5)


def test_micro_batches_fill_the_stages_but_only_pay_when_the_step_is_compute_bound():
    one = analyze_pipeline(Deployment.of("llama-2-13b", H100, pp=4), microbatches=1, batch=2048, prompt=128)
    four = analyze_pipeline(Deployment.of("llama-2-13b", H100, pp=4), microbatches=4, batch=2048, prompt=128)
    assert four.bubble_fraction < 0.1 < 0.7 < one.bubble_fraction
    assert four.tokens_per_s > 3 * one.tokens_per_s
    assert four.pass_bubble_fraction > four.bubble_fraction  # a flush between steps pays the fill and drain
    # Weight-bound: every micro-batch re-reads its stage's weights, so the stages fill for nothing.
    small = [analyze_pipeline(Deployment.of("llama-2-13b", H100, pp=4), microbatches=m, batch=4, prompt=128) for m in (1, 4)]
    assert small[1].bubble_fraction < 0.1 and small[1].tokens_per_s < 1.05 * small[0].tokens_per_s


@pytest.mark.parametrize("kwargs, field", [({"pp": 0}, "pp"), ({"microbatches": 3, "batch": 8}, "microbatches"),
                                           ({"pp": 2, "hardware": "cpu"}, "interconnect"), ({"batch": 0}, "batch")])
def test_bad_pipeline_input_is_a_clear_error(kwargs, field):
    args = {"model": "llama-2-7b", "hardware": "h100-sxm", **kwargs}
    run = {name: args.pop(name) for name in ("microbatches", "batch") if name in args}
    with pytest.raises(ValueError, match=field):
        analyze_pipeline(Deployment.of(**args), **run)
