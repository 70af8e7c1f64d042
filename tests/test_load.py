"""The steady state at an offered load against the simulator running the same scheduler, hand numbers and limits."""
from dataclasses import replace

import numpy as np
import pytest

from roofline import load_hardware, load_model
from roofline.deployment import Deployment
from roofline.engine import load_engine
from roofline.kv_memory import ON_DEMAND
from roofline.memory import workspace
from roofline.model import DECODE, PREFILL, QUERIES
from roofline.scheduler import MIXED
from roofline.serving.batching import StepCost, Workload, engine_terms, simulate_continuous
from roofline.serving.load import LoadModel, Policy, kv_sequences
from roofline.serving.mixed_step import StepTable, dense_seconds, mixed_step_seconds
from varied_outputs import varied_outputs_simulated

MODEL, H100 = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
TRT = Deployment(MODEL, H100, engine=load_engine("tensorrt-llm"))
IDEAL = Deployment(MODEL, H100)
BUDGET = 2048
REQUESTS, WARM = 3000, 300  # the first and last WARM requests see an emptier server: left out of the means


def simulated(d, prompt, gen, rate, seed=1, max_batch=256):
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / rate, REQUESTS)) if np.isfinite(rate) else np.zeros(REQUESTS)
    work = Workload(arrivals, np.full(REQUESTS, prompt), np.full(REQUESTS, gen))
    return work, simulate_continuous(work, StepCost(d), max_batch, chunk_tokens=BUDGET,
                                     request_overhead_s=d.engine.request_overhead_s)


def test_a_mixed_step_of_decoders_alone_is_the_pricers_decode_step():
    for batch, context in ((1, 700), (37, 1500)):
        decode = float(IDEAL.step(DECODE, float(batch), float(context)).total_s)
        assert mixed_step_seconds(IDEAL, [context] * batch) == pytest.approx(decode, rel=1e-9)


def test_a_mixed_step_of_one_whole_prompt_is_the_pricers_prefill():
    prefill = float(TRT.step(PREFILL, 1.0, 900.0).total_s)
    assert mixed_step_seconds(TRT, [], [(900, 900)]) == pytest.approx(prefill, rel=1e-9)


def test_the_dense_part_of_a_mixed_step_counts_two_flops_a_parameter_a_token_by_hand():
    # Llama-3.1-8B: 8,030,261,248 parameters, of which the 128,256 x 4096 embedding is a lookup and the
    # untied head runs on one row a sequence (logits for the last token): here 4096 + 30 tokens, 31 sequences.
    tokens, sequences = 4096 + 30, 31
    body = 8_030_261_248 - 2 * 128256 * 4096
    by_hand = 2 * body * tokens + 2 * 128256 * 4096 * sequences
    step = IDEAL.step(QUERIES, float(sequences), 1.0, tokens / sequences)
    dense = sum(float(np.ravel(op[0])[0]) for op, reads in zip(step.components, step.reads_context) if not reads)
    assert dense == pytest.approx(by_hand, rel=0.002)  # norms, SiLU and residual adds: a few FLOPs an element
    assert float(dense_seconds(IDEAL, sequences, tokens)) >= by_hand / H100.peak("bf16")


def test_the_step_table_is_the_pricer_between_its_points():
    table = StepTable(TRT, BUDGET)
    for sequences, tokens in ((1, 1), (12, 530), (40, 2000)):
        assert float(table.dense(sequences, tokens)) == pytest.approx(float(dense_seconds(TRT, sequences, tokens)),
                                                                      rel=0.005)


@pytest.mark.parametrize("prompt, gen", [(512, 128), (3000, 200)])  # one chunk a prompt; two chunks a prompt
def test_the_steady_state_agrees_with_the_simulators_means_below_saturation(prompt, gen):
    model = LoadModel(TRT, prompt, gen, Policy(token_budget=BUDGET))
    top = model.saturation()
    for share in (0.2, 0.5, 0.8):
        steady = model.at_rate([share * top])
        _, sim = simulated(TRT, prompt, gen, share * top)
        middle = slice(WARM, REQUESTS - WARM)
        assert float(steady["tpot_s"][0]) == pytest.approx(float(np.mean(sim.tpot_s[middle])), rel=0.05), share
        assert float(steady["ttft_s"][0]) == pytest.approx(float(np.mean(sim.ttft_s[middle])), rel=0.05), share


@pytest.mark.parametrize("prompt, gen", [(512, 128), (3000, 200)])
def test_the_steady_state_and_the_simulator_saturate_at_the_same_rate(prompt, gen):
    model = LoadModel(TRT, prompt, gen, Policy(token_budget=BUDGET))
    work, sim = simulated(TRT, prompt, gen, np.inf)  # every request at once: the server runs flat out
    finished = np.sort(sim.e2e_s + work.arrivals)
    served = (REQUESTS - 2 * WARM) / (finished[-WARM] - finished[WARM])
    assert model.saturation() == pytest.approx(served, rel=0.03)
    assert model.at_rate([1.05 * model.saturation()])["saturated"][0]
    assert not model.at_rate([0.95 * model.saturation()])["saturated"][0]


def test_when_the_budget_binds_the_saturating_rate_is_its_closed_form():
    model = LoadModel(TRT, 3000, 200, Policy(token_budget=BUDGET))
    assert model.saturation() == pytest.approx(model.budget_saturation(), rel=0.01)


def test_at_a_vanishing_rate_tpot_is_the_decode_step_of_one_and_ttft_a_lone_prefill():
    model = LoadModel(TRT, 900, 64, Policy(token_budget=BUDGET))
    out = model.at_rate([1e-6])
    decode = float(TRT.step(DECODE, 1.0, 900 + 32).total_s)
    assert float(out["tpot_s"][0]) == pytest.approx(decode, rel=0.01)
    lone = float(TRT.step(PREFILL, 1.0, 900.0).total_s) + TRT.engine.request_overhead_s
    assert float(out["ttft_s"][0]) == pytest.approx(lone + decode / 2, rel=0.01)  # + half a step in progress


def test_prefill_chunks_inflate_tpot_more_as_the_load_grows():
    model = LoadModel(TRT, 2000, 100, Policy(token_budget=BUDGET))
    out = model.at_rate(np.array([0.1, 0.4, 0.8]) * model.saturation())
    assert np.all(np.diff(out["tpot_inflation"]) > 0) and out["tpot_inflation"][0] > 0
    assert np.allclose(out["in_flight"], out["rate"] * out["e2e_s"])  # Little's law


def test_closed_loop_holds_its_concurrency_and_past_the_kv_pool_the_rest_queue():
    model = LoadModel(TRT, 1000, 100, Policy(token_budget=BUDGET, kv_sequences=6))
    out = model.at_concurrency([4, 6, 46])
    assert out["rate"][0] * out["e2e_s"][0] == pytest.approx(4, rel=0.01)
    assert out["queued"].tolist() == [0, 0, 40]
    assert out["tpot_s"][2] == pytest.approx(out["tpot_s"][1], rel=1e-6)  # the running batch stops growing
    assert out["ttft_s"][2] - out["ttft_s"][1] == pytest.approx(40 / out["rate"][1], rel=1e-6)


def test_a_lone_client_finds_the_server_idle_and_decodes_alone():
    """A closed loop of one: the request sees no other (the arrival theorem, roofline.serving.steady_loop), so its TTFT
    is a lone request's prefill and request cost and its TPOT the decode step of one sequence, no prompt riding in
    it; the loop completes one request an E2E. Pricing the loop at its own rate counted its own prompt in its steps."""
    model = LoadModel(TRT, 900, 64, Policy(token_budget=BUDGET, step_policy=MIXED))
    out = model.at_concurrency([1.0])
    lone = float(TRT.step(PREFILL, 1.0, 900.0).total_s) + TRT.engine.request_overhead_s
    assert float(out["ttft_s"][0]) == pytest.approx(lone, rel=1e-3)
    assert float(out["tpot_s"][0]) == pytest.approx(float(TRT.step(DECODE, 1.0, 900 + 32).total_s), rel=1e-3)
    assert float(out["rate"][0] * out["e2e_s"][0]) == pytest.approx(1.0, rel=1e-9)
    own_rate = model.at_rate(out["rate"])
    assert float(own_rate["tpot_s"][0]) > 1.05 * float(out["tpot_s"][0])


@pytest.mark.parametrize("clients", [4, 16])
def test_a_closed_loop_decodes_beside_the_others_prompts_as_the_simulator_does(clients):
    """8000-token prompts whose outputs vary (uniform in [160, 200]): each decode step a request sees carries the other
    C − 1 clients' prompts, never its own (the arrival theorem, roofline.serving.steady_loop). TPOT within 5% of the
    simulator running the scheduler request by request; the open loop at the loop's own rate, which counts the
    request's own prompt among those riding in its steps, is 25% over it or more (16.8 against 12.2 ms at 4 clients)."""
    ttft, tpot, gen = varied_outputs_simulated(TRT, clients, BUDGET, mixed=True, prompt=8000)
    model = LoadModel(TRT, 8000, gen, Policy(token_budget=BUDGET, step_policy=MIXED), lengths_vary=True)
    out = model.at_concurrency([clients])
    assert float(out["tpot_s"][0]) == pytest.approx(tpot, rel=0.05)
    assert float(model.at_rate(out["rate"])["tpot_s"][0]) > 1.25 * tpot
    assert float(out["rate"][0] * out["e2e_s"][0]) == pytest.approx(clients, rel=1e-9)


@pytest.mark.parametrize("clients", [16, 64])
def test_a_closed_loop_of_varied_outputs_waits_as_the_simulators_does_and_identical_ones_do_not(clients):
    """Outputs drawn uniformly in [160, 200] end at unrelated steps: the requests arrive as an open loop's do and wait
    for the step in progress and the prompts ahead (roofline.serving.steady_loop, lengths_vary), which the simulator
    running the mixed scheduler request by request shows (3000-token prompts at 64 clients: a quarter of a second,
    twice the prompt's own prefill), where the staggered loop of identical requests waits for nothing. Near the
    budget's saturation (128 clients) the wait grows steeply and the model holds within ~15% only."""
    ttft, tpot, gen = varied_outputs_simulated(TRT, clients, BUDGET, mixed=True)
    varied = LoadModel(TRT, 3000, gen, Policy(token_budget=BUDGET, step_policy=MIXED), lengths_vary=True)
    out = varied.at_concurrency([clients])
    # 15%: a closed loop's arrivals thin out while its own requests wait (C of them at most), which Poisson's do not
    assert float(out["ttft_s"][0]) == pytest.approx(ttft, rel=0.15)
    assert float(out["tpot_s"][0]) == pytest.approx(tpot, rel=0.08)
    assert out["rate"][0] * out["e2e_s"][0] == pytest.approx(clients, rel=0.01)
    staggered = LoadModel(TRT, 3000, gen, Policy(token_budget=BUDGET, step_policy=MIXED)).at_concurrency([clients])
    assert float(staggered["ttft_queue_s"][0]) == 0 < float(out["ttft_queue_s"][0])


def test_a_thousand_point_load_curve_is_fast():
    import time
    model = LoadModel(TRT, 1000, 200, Policy(token_budget=8192))
    rates = np.linspace(0.01, 1.0, 1000) * model.budget_saturation()
    model.at_rate(rates)  # the table and the prefill attention, once
    start = time.perf_counter()
    model.at_rate(rates)
    assert time.perf_counter() - start < 0.2  # the benchmark's target is 50 ms; CI machines are shared


def test_kv_pool_counts_whole_blocks():
    per_token = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16: 131,072 bytes
    # room for 320 tokens beside the weights, the runtime's reserve and one budget's activations
    piece, pieces = workspace(IDEAL, 17.0, 8192)  # 481 prompts of 17 tokens a budget
    usable = IDEAL.weight_bytes + IDEAL.engine.memory.reserve_bytes + float(pieces) * float(piece) + 320 * per_token
    assert kv_sequences(IDEAL, 17, 10, 16, usable_bytes=usable) == 10  # 27 tokens -> 2 blocks of 16
    assert kv_sequences(IDEAL, 17, 10, 64, usable_bytes=usable) == 5  # -> 1 block of 64
    assert kv_sequences(IDEAL, 17, 10, 1, usable_bytes=usable) == 11  # 320 // 27


def test_tensorrt_llm_takes_nine_tenths_of_what_is_free_in_blocks_of_32():
    pool = kv_sequences(TRT, 1000, 200)
    piece, pieces = workspace(TRT, 1000.0, 8192)
    free = 81559 * 2**20 - 2**30 - TRT.weight_bytes - float(piece) * float(pieces)
    per_sequence = 1216 * 2 * 32 * 8 * 128 * 2  # 1200 tokens -> 38 blocks of 32
    assert pool == int(0.9 * free // per_sequence)


@pytest.mark.parametrize("call, field", [
    (lambda: LoadModel(TRT, 100, 10).at_rate([0.0]), "rate"),
    (lambda: LoadModel(TRT, 100, 10).at_rate([float("inf")]), "rate"),
    (lambda: LoadModel(TRT, 100, 10).at_rate([float("nan")]), "rate"),
    (lambda: Policy(token_budget=128, max_batch=256, step_policy=MIXED), "token_budget"),
    (lambda: LoadModel(TRT, 100, 10, Policy(token_budget=128, max_batch=256)), "token_budget"),  # TRT's steps: mixed
    (lambda: kv_sequences(TRT, 100, 10, block_size=0), "block_size"),
    (lambda: LoadModel(TRT, 100, 10).at_concurrency([0]), "concurrency"),
])
def test_bad_load_input_is_one_line_naming_the_field(call, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        call()


def test_on_demand_blocks_preempt_the_newest_and_every_request_still_finishes():
    # A pool of 8 blocks of 16 tokens: 4 prompts of 20 tokens are admitted (2 blocks each); as they decode past
    # 32 tokens each needs a third block, so the newest give theirs up and prefill again later.
    n = 4
    work = Workload(np.zeros(n), np.full(n, 20), np.full(n, 30))
    cost = StepCost(IDEAL)
    demand = simulate_continuous(work, cost, 8, capacity_tokens=8 * 16, block_size=16, chunk_tokens=512,
                                 on_demand=True)
    reserved = simulate_continuous(work, cost, 8, capacity_tokens=8 * 16, block_size=16, chunk_tokens=512)
    assert any("preemptions" in note for note in demand.notes)
    assert np.all(np.isfinite(demand.e2e_s)) and demand.output_tokens == reserved.output_tokens == 4 * 30
    assert reserved.trace_batch.max() == 2  # 50 tokens reserve 4 blocks: two requests at a time
    assert demand.trace_batch.max() == 4  # on demand all four start


def test_on_demand_blocks_need_a_block_size():
    with pytest.raises(ValueError, match="^on_demand:"):
        simulate_continuous(Workload(np.zeros(1), np.array([5]), np.array([5])), StepCost(IDEAL), 4, on_demand=True)


def test_an_engine_taking_blocks_on_demand_holds_sequences_at_their_mean_size():
    per_token = 2 * 32 * 8 * 128 * 2
    piece, pieces = workspace(IDEAL, 17.0, 8192)
    usable = IDEAL.weight_bytes + IDEAL.engine.memory.reserve_bytes + float(pieces) * float(piece) + 320 * per_token
    on_demand = replace(IDEAL, engine=replace(IDEAL.engine, memory=replace(IDEAL.engine.memory, admission=ON_DEMAND)))
    assert kv_sequences(on_demand, 17, 10, 1, usable_bytes=usable) == 14  # 320 // (17 + 10 / 2)
    assert kv_sequences(on_demand, 17, 10, 16, usable_bytes=usable) == 10  # 22 tokens -> 2 blocks of 16, as 27 do
    assert kv_sequences(on_demand, 17, 30, 16, usable_bytes=usable) == 10  # 32 tokens -> 2 blocks; reserved 47 -> 3
    assert kv_sequences(IDEAL, 17, 30, 16, usable_bytes=usable) == 6


def test_vllm_and_sglang_take_blocks_on_demand_and_tensorrt_llm_reserves_them():
    for name, demand in (("vllm", True), ("sglang", True), ("tensorrt-llm-1", False), ("tensorrt-llm", False)):
        d = Deployment(MODEL, H100, engine=load_engine(name))
        assert engine_terms(d)["on_demand"] is demand, name
        assert (d.engine.memory.admission == ON_DEMAND) is demand and (demand is False or d.engine.memory.sources["admission"])


def test_a_stream_that_fits_only_on_demand_runs_unqueued_there_and_queues_when_reserved():
    """Poisson arrivals of 200 in, 200 out with ~19 in flight on average, often more: a pool of 8,000 tokens holds
    20 reserved (400 tokens each) but ~26 at their mean 300 tokens. Taking blocks on demand, the simulator runs them
    with a running batch past the reserved pool's 20 and a median TTFT near a lone prefill (a few preempted requests
    wait); reserving, the same stream queues past 20 and its TTFT is over 20 times longer."""
    prompt = gen = 200
    rng = np.random.default_rng(3)
    arrivals = np.cumsum(rng.exponential(1 / 14.0, 1500))
    work = Workload(arrivals, np.full(1500, prompt), np.full(1500, gen))
    cost, middle = StepCost(TRT), slice(WARM, 1500 - WARM)
    demand = simulate_continuous(work, cost, 256, capacity_tokens=8000, block_size=16, chunk_tokens=BUDGET,
                                 on_demand=True)
    reserved = simulate_continuous(work, cost, 256, capacity_tokens=8000, block_size=16, chunk_tokens=BUDGET)
    assert reserved.trace_batch.max() == 20 and demand.trace_batch.max() > 20
    lone = float(TRT.step(PREFILL, 1.0, float(prompt)).total_s)
    assert np.median(demand.ttft_s[middle]) < 2 * lone
    assert np.mean(demand.ttft_s[middle]) < 0.05 * np.mean(reserved.ttft_s[middle])
