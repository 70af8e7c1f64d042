"""SGLang's prefill-first scheduler (roofline.serving.prefill_first): hand-worked steps, the steady state and the closed
loop against the simulator running the same policy, and the engine file's `step_policy`."""
import numpy as np
import pytest
import yaml

from roofline import load_hardware, load_model
from roofline.cli import main
from roofline.deployment import Deployment
from roofline.engine import ENGINES_DIR, load_engine
from roofline.model import DECODE
from roofline.scheduler import MIXED, PREFILL_FIRST
from roofline.planning.under_load import policy_of
from roofline.serving.batching import StepCost, Workload, engine_terms, simulate, simulate_continuous
from roofline.serving.load import LoadModel, Policy
from roofline.serving.mixed_step import mixed_step_seconds
from varied_outputs import varied_outputs_simulated

MODEL, H100 = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
TRT = Deployment(MODEL, H100, engine=load_engine("tensorrt-llm"))
IDEAL = Deployment(MODEL, H100)
CHUNK = 2048
REQUESTS, WARM = 3000, 300  # the first and last WARM requests see an emptier server: left out of the means


def prefill_first(d, prompt, gen, **policy):
    return LoadModel(d, prompt, gen, Policy(token_budget=CHUNK, step_policy=PREFILL_FIRST, **policy))


def simulated(d, prompt, gen, rate=None, clients=None, seed=1):
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1 / rate, REQUESTS)) if rate else np.zeros(REQUESTS)
    work = Workload(arrivals, np.full(REQUESTS, prompt), np.full(REQUESTS, gen))
    return simulate_continuous(work, StepCost(d), 256, chunk_tokens=CHUNK, clients=clients, mixed=False,
                               request_overhead_s=d.engine.request_overhead_s)


def test_a_closed_loop_of_two_is_one_prefill_step_then_decode_steps_by_hand():
    # Llama-3.1-8B on the ideal H100 (each op at the slower of its FLOPs and its bytes, ops one after another):
    # 2 prompts of 512 run in one prefill step of 1024 tokens. Its GEMMs are compute-bound, 2 FLOPs a body parameter
    # a token (8,030,261,248 less the embedding and the untied head, 2 x 128256 x 4096); causal attention 4 N H
    # S(S + 1)/2 FLOPs a prompt a layer; the head, on one row a prompt, reads its weights; the two RMSNorms (read and
    # write T x D) and SiLU-and-mul (read 2 T x F, write T x F) move bf16 activations. Then 2 decoders a step,
    # memory-bound: the body's and the head's weights (the embedding is a lookup) and 2 caches of ~514 tokens.
    body, head, layers = 8_030_261_248 - 2 * 128256 * 4096, 128256 * 4096, 32
    attention = 2 * layers * 4 * 32 * 128 * 512 * 513 / 2
    elementwise = layers * 2 * (2 * 2 * 1024 * 4096 + 3 * 1024 * 14336)
    prefill = (2 * body * 1024 + attention) / H100.peak("bf16") + (2 * head + elementwise) / H100.memory_bandwidth
    cache = 2 * layers * 8 * 128 * 2 * (512 + 1.5) * 2  # K and V, 8 KV heads of 128, bf16, mean context, 2 decoders
    decode = (2 * (body + head) + cache) / H100.memory_bandwidth
    out = prefill_first(IDEAL, 512, 3).at_concurrency([2])
    assert float(out["ttft_s"][0]) == pytest.approx(prefill, rel=0.02)  # both first tokens at the prefill step's end
    assert float(out["tpot_s"][0]) == pytest.approx(decode, rel=0.02)  # no prompt waits: decode steps alone
    assert float(out["rate"][0]) == pytest.approx(2 / (prefill + 2 * decode), rel=0.02)  # Little: C / E2E


def test_a_cohorts_prefill_steps_pause_its_decoders_and_the_last_first_token_waits_for_all():
    # 8 prompts of 512 over a chunk of 2048: two full prefill steps; the first four wait one, the last four two
    model = prefill_first(TRT, 512, 65)
    step = mixed_step_seconds(TRT, [], [(512, 512)] * 4)
    decode = float(TRT.step(DECODE, 8.0, 512 + 65 / 2).total_s)
    out = model.at_concurrency([8])
    overhead = TRT.engine.request_overhead_s
    assert float(out["ttft_s"][0]) == pytest.approx(overhead + 1.5 * step, rel=0.01)
    assert float(out["tpot_s"][0]) == pytest.approx(decode + 0.5 * step / 64, rel=0.01)  # the 2nd step pauses half


@pytest.mark.parametrize("prompt, gen", [(512, 128), (3000, 200)])  # four prompts a prefill step; two steps a prompt
def test_the_prefill_first_steady_state_agrees_with_the_simulators_means_below_saturation(prompt, gen):
    model = prefill_first(TRT, prompt, gen)
    top = model.saturation()
    for share in (0.2, 0.5, 0.8):
        steady = model.at_rate([share * top])
        sim = simulated(TRT, prompt, gen, rate=share * top)
        middle = slice(WARM, REQUESTS - WARM)
        assert float(steady["tpot_s"][0]) == pytest.approx(float(np.mean(sim.tpot_s[middle])), rel=0.05), share
        assert float(steady["ttft_s"][0]) == pytest.approx(float(np.mean(sim.ttft_s[middle])), rel=0.05), share


@pytest.mark.parametrize("prompt", [512, 3000])
@pytest.mark.parametrize("clients", [1, 5, 64])
def test_the_prefill_first_closed_loop_is_the_simulators_cohort(prompt, clients):
    model = prefill_first(TRT, prompt, 200)
    out = model.at_concurrency([clients], [10 * clients])
    sim = simulated(TRT, prompt, 200, clients=clients)
    assert float(out["ttft_s"][0]) == pytest.approx(float(np.mean(sim.ttft_s)), rel=0.01)
    assert float(out["tpot_s"][0]) == pytest.approx(float(np.nanmean(sim.tpot_s)), rel=0.01)
    assert float(out["rate"][0]) == pytest.approx(REQUESTS / sim.makespan_s, rel=0.02)


@pytest.mark.parametrize("clients", [5, 64])
def test_output_lengths_that_vary_untie_the_cohort_and_requests_arrive_as_the_simulator_runs_them(clients):
    """Outputs that vary: the simulator's requests end apart and are sent again apart, so a prompt meets the step in
    progress and the prompts ahead as an open loop's does (roofline.serving.steady_loop, LoadModel's lengths_vary);
    the cohort (all prompts prefilled together) does not follow it (3000-token prompts: 2.3 s against ~0.14 s at C 64)."""
    ttft, tpot, gen = varied_outputs_simulated(TRT, clients, CHUNK, mixed=False)
    varied = LoadModel(TRT, 3000, gen, Policy(token_budget=CHUNK, step_policy=PREFILL_FIRST), lengths_vary=True)
    out = varied.at_concurrency([clients])
    assert float(out["ttft_s"][0]) == pytest.approx(ttft, rel=0.10)
    assert float(out["tpot_s"][0]) == pytest.approx(tpot, rel=0.12)
    cohort = prefill_first(TRT, 3000, gen).at_concurrency([clients])
    assert float(cohort["ttft_s"][0]) > 2.5 * ttft


def test_prefill_first_saturates_below_the_flat_out_cohort_and_its_budget_bound_is_the_simulators():
    model = prefill_first(TRT, 512, 128, max_batch=64)
    sim = simulated(TRT, 512, 128, clients=64)  # flat out: 64 decoders, their prompts in full prefill steps
    assert model.budget_saturation() == pytest.approx(REQUESTS / sim.makespan_s, rel=0.01)
    assert 0.85 * model.budget_saturation() < model.saturation() <= model.budget_saturation()
    assert model.at_rate([1.01 * model.budget_saturation()])["saturated"][0]


def test_at_a_vanishing_rate_prefill_first_is_a_lone_prefill_and_a_decode_step_of_one():
    model = prefill_first(TRT, 900, 64)
    out = model.at_rate([1e-6])
    decode = float(TRT.step(DECODE, 1.0, 900 + 32).total_s)
    lone = mixed_step_seconds(TRT, [], [(900, 900)]) + TRT.engine.request_overhead_s
    assert float(out["tpot_s"][0]) == pytest.approx(decode, rel=0.01)
    assert float(out["ttft_s"][0]) == pytest.approx(lone + decode / 2, rel=0.01)  # + half a step in progress


def test_a_mixed_closed_loop_staggers_where_prefill_first_keeps_a_cohort():
    mixed = LoadModel(TRT, 512, 200, Policy(token_budget=CHUNK)).at_concurrency([64])
    cohort = prefill_first(TRT, 512, 200).at_concurrency([64])
    assert float(cohort["ttft_s"][0]) > 3 * float(mixed["ttft_s"][0])  # 16 prefill steps to share, not one prompt's


def test_sglang_runs_prefill_first_and_the_other_profiles_stay_mixed():
    assert load_engine("sglang").scheduler.step_policy == PREFILL_FIRST
    assert "enable-mixed-chunk" in load_engine("sglang").scheduler.sources["step_policy"]
    for name in ("vllm", "tensorrt-llm-1", "tensorrt-llm"):
        assert load_engine(name).scheduler.step_policy == MIXED


def test_the_planner_and_its_simulation_run_sglangs_steps_prefill_first():
    sglang = Deployment(MODEL, H100, engine=load_engine("sglang"))
    policy = policy_of(64, 500, CHUNK, 1024)  # the engine's steps, unless named
    assert LoadModel(sglang, 1024, 32, policy).policy.step_policy == PREFILL_FIRST
    assert LoadModel(TRT, 1024, 32, policy).policy.step_policy == MIXED
    # the ideal bound beside an SGLang candidate runs SGLang's steps on the ideal engine (whose own are mixed)
    assert LoadModel(IDEAL, 1024, 32, policy).policy.step_policy == MIXED
    assert LoadModel(IDEAL, 1024, 32, policy.for_engine(sglang)).policy.step_policy == PREFILL_FIRST
    # simulate() on the sglang Deployment is the prefill-first simulator: a cohort's decoders pause for its prompts
    work = Workload(np.zeros(8), np.full(8, 1024), np.full(8, 32))
    engine_run = simulate(sglang, work, chunk_tokens=CHUNK)
    for mixed, same in ((False, True), (True, False)):
        terms = {**engine_terms(sglang), "mixed": mixed}  # the request cost (0.19 s) paid either way
        direct = simulate_continuous(work, StepCost(sglang), 256, block_size=16, chunk_tokens=CHUNK, **terms)
        assert np.allclose(engine_run.ttft_s, direct.ttft_s) == same


@pytest.mark.parametrize("value", ["prefill-first", 1, True])
def test_a_bad_step_policy_is_one_line_naming_the_file_and_the_choices(tmp_path, capsys, value):
    document = yaml.safe_load((ENGINES_DIR / "sglang.yaml").read_text())
    document["scheduler"]["step_policy"] = {"value": value, "source": "a typo"}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(document))
    assert main(["analyze", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--engine", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "scheduler.step_policy" in err[0]
    assert "mixed, prefill_first" in err[0]


def test_a_load_policy_refuses_an_unknown_step_policy():
    with pytest.raises(ValueError, match="^step_policy: unknown policy 'sglang'"):
        Policy(step_policy="sglang")
