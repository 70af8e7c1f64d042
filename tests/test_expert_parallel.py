"""Expert parallelism: experts touched and all-to-all bytes against simulated routing, the step against the library."""
import itertools
from dataclasses import replace

import numpy as np
import pytest

from roofline import analyze, load_hardware, load_model
from roofline.compiled import compile_model
from roofline.serving.expert_parallel import alltoall_bytes, analyze_expert_parallel, ep_sym, experts_touched_per_gpu
from roofline.symbols import B, D, E, T, b_a, k
from roofline.deployment import Deployment
from roofline.engine import IDEAL
from roofline.model import DECODE

H100 = load_hardware("h100-sxm")


def route(rng, trials, tokens, experts, top_k):
    """Each token picks top_k distinct experts uniformly: (trials, tokens, top_k) expert ids."""
    return np.argsort(rng.random((trials, tokens, experts)), axis=2)[:, :, :top_k]


@pytest.mark.parametrize("experts, top_k, gpus, tokens", [(8, 2, 2, 1), (8, 2, 8, 16), (64, 6, 8, 4),
                                                          (256, 8, 32, 24), (160, 6, 1, 8)])
def test_experts_one_gpu_reads_match_a_monte_carlo_of_routing(experts, top_k, gpus, tokens):
    rng = np.random.default_rng(experts * gpus + tokens)
    trials = 4000
    picks = route(rng, trials, tokens, experts, top_k)
    hit = np.zeros((trials, experts), dtype=bool)
    np.put_along_axis(hit, picks.reshape(trials, -1), True, axis=1)
    distinct = hit[:, :experts // gpus].sum(axis=1)  # GPU 0 holds experts 0 .. E/e - 1
    expected = float(experts_touched_per_gpu().xreplace({E: experts, k: top_k, ep_sym: gpus, B: tokens, T: 1}))
    assert abs(distinct.mean() - expected) <= 4 * distinct.std() / np.sqrt(trials) + 1e-9
    if tokens == 1:  # one token reads k/e experts per GPU, never all E/e (the wrong, dense-style count)
        assert expected == pytest.approx(top_k / gpus)


def test_alltoall_bytes_count_every_remote_expert_choice_exactly_for_a_small_case():
    experts, top_k, gpus, width = 4, 2, 2, 3  # GPU 0 owns experts 0 and 1
    choices = list(itertools.combinations(range(experts), top_k))
    remote = np.mean([sum(x >= experts // gpus for x in pick) for pick in choices])
    assert remote == 1  # {01}: 0, {02} {03} {12} {13}: 1, {23}: 2
    per_token = float(alltoall_bytes().xreplace({B: 1, T: 1, k: top_k, D: width, b_a: 2, ep_sym: gpus}))
    assert per_token == remote * width * 2


@pytest.mark.parametrize("experts, top_k, gpus, tokens", [(8, 2, 4, 32), (64, 6, 8, 16), (256, 8, 16, 8)])
def test_alltoall_bytes_match_a_brute_force_count_of_tokens_sent_away(experts, top_k, gpus, tokens):
    rng = np.random.default_rng(tokens)
    trials, width = 500, 7
    picks = route(rng, trials, gpus * tokens, experts, top_k)  # GPU g holds tokens g*n .. (g+1)*n - 1
    home = np.repeat(np.arange(gpus), tokens)[None, :, None]
    sent = ((picks // (experts // gpus)) != home).reshape(trials, gpus, tokens * top_k).sum(axis=2) * width * 2
    expected = float(alltoall_bytes().xreplace({B: tokens, T: 1, k: top_k, D: width, b_a: 2, ep_sym: gpus}))
    assert abs(sent.mean() - expected) <= 4 * sent.std() / np.sqrt(sent.size)


def test_one_gpu_is_the_librarys_decode_step():
    want = analyze("mixtral-8x7b", H100, batch=[8], prompt=512).metrics
    out = analyze_expert_parallel(Deployment.of("mixtral-8x7b", H100, ep=1), batch=8, prompt=512)
    assert out.tpot_s == float(want.tpot_s[0]) and out.comm_s == 0
    assert out.per_gpu_memory_bytes == pytest.approx(float(want.memory_bytes[0]))  # workspace included, as analyze's


def test_mixtral_on_eight_gpus_reads_a_share_of_the_touched_experts_and_pays_two_alltoalls_a_layer():
    config = load_model("mixtral-8x7b")
    out = analyze_expert_parallel(Deployment.of(config, H100, ep=8), batch=16, prompt=512)
    per_expert = 3 * 4096 * 14336 * 2  # gate, up, down of one expert in bf16
    touched = (8 / 8) * (1 - (1 - 2 / 8) ** 16)
    assert out.experts_touched_per_gpu == pytest.approx(touched)
    assert out.expert_weight_bytes_per_gpu == pytest.approx(32 * touched * per_expert)
    sent = 2 * 2 * 4096 * 2 * 7 / 8  # 2 tokens per GPU, k = 2, D, b_a, (e - 1)/e
    assert out.alltoall_bytes == pytest.approx(sent)
    assert out.comm_s == pytest.approx(2 * 32 * (10e-6 + sent / 450e9)) and out.link_latency_assumed
    expert_params = 32 * 8 * 3 * 4096 * 14336
    kv = float(compile_model(config).kv_cache(2.0, 640.0, 2.0))  # 2 sequences per GPU
    dense = compile_model(config).params - expert_params
    assert out.per_gpu_memory_bytes - out.workspace_bytes == pytest.approx(2 * (dense + expert_params / 8) + kv)
    # its 2 sequences' prefill workspace: what one GPU holding the whole model at batch 2 holds
    assert out.workspace_bytes == analyze(config, H100, batch=[2], prompt=512).metrics["workspace_bytes"].iloc[0] > 0


def test_an_engines_alltoall_cost_adds_to_each_of_the_two_alltoalls_of_every_moe_layer_by_hand():
    # Mixtral on 8 GPUs, 16 sequences: 32 MoE layers, a dispatch and a combine each; 100 us beyond the link apiece
    plain = analyze_expert_parallel(Deployment.of("mixtral-8x7b", H100, ep=8), batch=16, prompt=512)
    costly = analyze_expert_parallel(Deployment.of("mixtral-8x7b", H100, ep=8,
                                                   engine=replace(IDEAL, alltoall_overhead_s=1e-4)), batch=16, prompt=512)
    assert costly.comm_s - plain.comm_s == pytest.approx(2 * 32 * 1e-4)
    assert costly.tpot_s - plain.tpot_s == pytest.approx(2 * 32 * 1e-4)
    # tensor parallelism has no all-to-all: the cost leaves it as it was
    plain_tp, costly_tp = (Deployment.of("mixtral-8x7b", H100, tp=8, engine=e).step(DECODE, 16.0, 512.0).total_s
                           for e in (IDEAL, replace(IDEAL, alltoall_overhead_s=1e-4)))
    assert float(plain_tp) == float(costly_tp)


def test_spreading_experts_cuts_per_gpu_memory_and_decode_time():
    one = analyze_expert_parallel(Deployment.of("deepseek-v2-lite", H100, ep=1), batch=64)
    eight = analyze_expert_parallel(Deployment.of("deepseek-v2-lite", H100, ep=8), batch=64)
    assert eight.per_gpu_memory_bytes < one.per_gpu_memory_bytes / 3
    assert eight.tpot_s < one.tpot_s and eight.tokens_per_s > one.tokens_per_s


@pytest.mark.parametrize("kwargs, field", [({"model": "llama-2-7b"}, "MoE"), ({"ep": 3}, "ep"), ({"batch": 4}, "ep"),
                                           ({"ep": 0}, "ep"), ({"hardware": "cpu"}, "interconnect")])
def test_bad_expert_parallel_input_is_a_clear_error(kwargs, field):
    args = {"model": "mixtral-8x7b", "hardware": "h100-sxm", "ep": 8, "batch": 8, **kwargs}
    batch = args.pop("batch")
    with pytest.raises(ValueError, match=field):
        analyze_expert_parallel(Deployment.of(**args), batch)


def _flops(d: Deployment, phase, batch: float, context: float) -> tuple[float, float]:
    """(non-expert, routed-expert) FLOPs of the busiest GPU's step, from the pricer's own counts."""
    from roofline.sharding import is_routed
    compiled = d.phase(phase)
    counts = d.components(compiled, batch, context)
    rows = [(is_routed(name), float(np.sum(c[0]))) for name, c in zip(compiled.ops, counts)]
    return sum(f for routed, f in rows if not routed), sum(f for routed, f in rows if routed)


def test_one_prompt_under_expert_parallelism_runs_its_dense_work_on_one_rank_and_spreads_its_experts():
    # Mixtral-8x7B (D 4096, F 14336, k 2 of 8 experts) over e = 8 GPUs, one prompt of 2048 tokens
    prompt, e = 2048.0, 8
    one, eight = (Deployment.of("mixtral-8x7b", H100, ep=n) for n in (1, e))
    dense_one, experts_one = _flops(one, "prefill", 1.0, prompt)
    dense_eight, experts_eight = _flops(eight, "prefill", 1.0, prompt)
    assert experts_one == pytest.approx(32 * prompt * 2 * 3 * 2 * 4096 * 14336, rel=1e-3)  # 3 GEMMs, 2 experts a token
    assert dense_eight == pytest.approx(dense_one)  # the whole prompt's, not the mean field's 1/e of it
    assert experts_eight == pytest.approx(experts_one / e)
    # the busy rank sends its whole prompt's k rows to the all-to-all: T k D b_a (e - 1)/e bytes
    comm = eight.collectives(prompt, eight.busiest_rank_sequences(1.0, prompt) * prompt)
    sent = prompt * 2 * 4096 * 2 * 7 / 8
    assert float(comm[0][2]) == pytest.approx(2 * 32 * (10e-6 + sent / 450e9))
    # e prompts balance: one each, the mean field; decoders stay the mean field too (B/e each)
    assert _flops(eight, "prefill", 8.0, prompt)[0] == pytest.approx(dense_one)
    assert _flops(eight, "prefill", 9.0, prompt)[0] == pytest.approx(2 * dense_one)  # ⌈9/8⌉ prompts on the busiest
    assert _flops(eight, "decode", 64.0, 512.0)[0] == pytest.approx(_flops(one, "decode", 8.0, 512.0)[0])
    # a lone prompt's step is dearer than the mean field's (1/e of e prompts' step), cheaper than e prompts'
    lone, full = (float(np.ravel(eight.step("prefill", b, prompt).total_s)[0]) for b in (1.0, 8.0))
    assert full / e < lone < full


def test_a_steps_chunks_add_their_rank_excess_until_they_fill_every_rank():
    from roofline.serving.mixed_step import rank_excess_per_token, rank_excess_seconds
    assert rank_excess_seconds(1.0, 8, 800.0, 1.0) == pytest.approx(700.0)  # one chunk: all but its 1/e share
    assert rank_excess_seconds(1.0, 8, 800.0, 2.0) == pytest.approx(300.0)  # 400 on the busiest, 100 its share
    assert rank_excess_seconds(1.0, 8, 800.0, 8.0) == 0.0 and rank_excess_seconds(1.0, 8, 800.0, 16.0) == 0.0
    assert rank_excess_per_token(Deployment.of("mixtral-8x7b", H100, ep=1), 2048) == 0.0
    assert rank_excess_per_token(Deployment.of("mixtral-8x7b", H100, ep=8), 2048) > 0.0


def test_only_rows_under_expert_parallelism_pin_the_alltoall_cost():
    from types import SimpleNamespace

    from roofline.fitting.engine_fit import identified
    from roofline.fitting.published import read_rows
    published = read_rows()  # one GPU or tensor parallel: none has an all-to-all
    assert identified(["alltoall_overhead_s"], published) == []
    spread = SimpleNamespace(**{**vars(published[0]), "model": "mixtral-8x7b", "ep": 2})
    assert identified(["alltoall_overhead_s"], [*published, spread]) == ["alltoall_overhead_s"]
