"""The routed experts' own weight format (Precision.experts, the letter b_e): checked against numbers
computed by hand from the checkpoints' configs, not against the library's own sums."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

from roofline import Precision, analyze, load_hardware, load_model, sweep
from roofline import plan
from roofline.bounds import Roofs
from roofline.cli import main
from roofline.deployment import Deployment
from roofline.engine import Engine
from roofline.model import DECODE
from roofline.ops import EXPERT_MATMUL, WEIGHT_MATMUL
from roofline.planning.plan import Targets, Workload
from roofline.precision import element_bytes
from roofline.serving.crossovers import expert_critical_batch, kv_equals_weights_context
from roofline.sharding import is_routed
from roofline.symbols import b_e

MODELS = Path(__file__).parents[1] / "data" / "models"
H100 = load_hardware("h100-sxm")
MXFP4 = 4.25 / 8  # OCP MX v1.0: 32 E2M1 values (4 bits each) share one 8-bit E8M0 scale


def gpt_oss_120b_by_hand() -> tuple[int, int]:
    """(routed-expert parameters, all other parameters) of gpt-oss-120b from its config.json alone.

    D = hidden_size 2880, Fe = intermediate_size 2880, E = 128 experts, L = 36 layers, V = 201088,
    N = 64 query heads, K = 8 KV heads, H = head_dim 64; untied embeddings.
    Routed, per layer: E x (gate_up D*2Fe + bias 2Fe + down Fe*D + bias D) = 128 x 24,891,840
      = 3,186,155,520; x 36 layers = 114,701,598,720.
    Other, per layer: q D*NH + NH, k and v 2(D*KH + KH), o NH*D + D, 64 sinks, router D*E + E, two norms 2D
      = 11,800,576 + 2,950,144 + 11,799,360 + 64 + 368,768 + 5,760 = 26,924,672; x 36 = 969,288,192;
      plus embeddings V*D = 579,133,440, lm_head V*D = 579,133,440 and the final norm D = 2880:
      2,127,557,952. Total 116,829,156,672 (the model card's 116.8B).
    """
    c = json.loads((MODELS / "gpt-oss-120b.json").read_text())
    d, fe, e, layers, v = c["hidden_size"], c["intermediate_size"], c["num_local_experts"], c["num_hidden_layers"], \
        c["vocab_size"]
    n, kv, h = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    expert = d * 2 * fe + 2 * fe + fe * d + d
    routed = layers * e * expert
    attention = (d * n * h + n * h) + 2 * (d * kv * h + kv * h) + (n * h * d + d) + n
    other = layers * (attention + d * e + e + 2 * d) + 2 * v * d + d
    assert (routed, other) == (114_701_598_720, 2_127_557_952)
    return routed, other


def test_gpt_oss_120b_weights_with_mxfp4_experts_are_the_checkpoint_size_by_hand():
    """routed x 4.25/8 + other x 2 = 114,701,598,720 x 0.53125 + 2,127,557,952 x 2
    = 60,935,224,320 + 4,255,115,904 = 65,190,340,224 bytes (65.19 GB; the published checkpoint is ~65 GB,
    its expert biases kept in bf16 add 58 MB). Sanity bound: the gpt-oss model card says 120b fits a
    single 80 GB GPU; all-bf16 weights (233.7 GB) would not."""
    routed, other = gpt_oss_120b_by_hand()
    expected = routed * MXFP4 + other * 2
    assert expected == 65_190_340_224
    metrics = analyze("gpt-oss-120b", "h100-sxm", precision=Precision(weights="bf16", experts="mxfp4")).metrics
    assert metrics["weight_bytes"][0] == pytest.approx(expected, rel=1e-12)
    assert metrics["weight_bytes_total"][0] == pytest.approx(expected, rel=1e-12)
    assert metrics["params"][0] == routed + other
    assert metrics["weight_bytes"][0] < 80e9 < (routed + other) * 2
    assert bool(metrics["fits"][0])


def test_a_batch_one_decode_step_reads_top_k_experts_at_the_expert_width():
    """Batch 1 touches k = 4 of E = 128 experts a layer: 36 x 4 x 24,891,840 x 0.53125 = 1,904,225,760 bytes.
    A model reading all E experts (x32), or pricing them at b_w (x3.76), would fail."""
    d = Deployment(load_model("gpt-oss-120b"), H100, Precision(weights="bf16", experts="mxfp4"))
    step = d.step(DECODE, 1.0, 1025.0)
    read = sum(float(np.sum(c[1])) for name, c in zip(step.ops, step.components) if is_routed(name))
    assert read == pytest.approx(36 * 4 * 24_891_840 * MXFP4, rel=1e-12)
    others = sum(float(np.sum(c[1])) for name, c in zip(step.ops, step.components)
                 if not is_routed(name))
    bf16 = Deployment(load_model("gpt-oss-120b"), H100).step(DECODE, 1.0, 1025.0)
    assert others == pytest.approx(sum(float(np.sum(c[1])) for name, c in zip(bf16.ops, bf16.components)
                                       if not is_routed(name)), rel=1e-12)  # the rest stays bf16


@pytest.mark.parametrize("model, weights", [("gpt-oss-20b", "int4"), ("mixtral-8x7b", "fp8"), ("llama-3-8b", "bf16")])
def test_experts_in_the_weights_own_format_change_no_number(model, weights):
    """experts=None, or experts named as the weights' format on an MoE model: every column identical to the bit."""
    base = analyze(model, "h100-sxm", batch=(1, 64), precision=Precision(weights=weights)).metrics
    none = analyze(model, "h100-sxm", batch=(1, 64), precision=Precision(weights=weights, experts=None)).metrics
    assert base.equals(none)
    if model != "llama-3-8b":
        same = analyze(model, "h100-sxm", batch=(1, 64), precision=Precision(weights=weights, experts=weights)).metrics
        assert base.equals(same)


def test_expert_widths_follow_the_format_and_its_group():
    assert Precision(experts="mxfp4").expert_bytes == MXFP4
    assert Precision(experts="int4").expert_bytes == 0.5 + 2 / 128  # GPTQ/AWQ groups of 128, bf16 scales
    assert Precision(experts="int4", expert_group_size=32).expert_bytes == 0.5 + 2 / 32
    assert Precision(experts="fp8").expert_bytes == 1.0
    assert Precision(weights="int4", weight_group_size=64).expert_bytes == element_bytes("int4", 64)  # None: weights'
    p = Precision(weights="bf16", experts="MXFP4")
    assert (p.experts, p.expert_format, p.weight_bytes, p.byte_widths) == ("mxfp4", "mxfp4", 2.0, (2.0, 2.0, 2.0, MXFP4))
    assert Precision().expert_format == "bf16" and Precision().experts is None


@pytest.mark.parametrize("make, field", [
    (lambda: Precision(experts="fp5"), "experts"),
    (lambda: Precision(experts="int4", expert_group_size=0), "expert_group_size"),
    (lambda: Precision(experts="int4", expert_group_size=True), "expert_group_size"),
    (lambda: Precision(expert_group_size=32), "expert_group_size"),
])
def test_a_bad_expert_format_names_the_field(make, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        make()


def test_a_dense_model_with_an_expert_format_is_refused():
    """Refused, not ignored: a dense model has no routed experts, so the flag would silently change nothing."""
    with pytest.raises(ValueError, match="^experts: model 'llama-3-8b' has no routed experts"):
        analyze("llama-3-8b", "h100-sxm", precision=Precision(experts="mxfp4"))


def cli(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


def test_cli_experts_flag_prices_the_experts_and_says_so():
    code, out, _ = cli("analyze", "--model", "gpt-oss-120b", "--experts", "mxfp4", "--json")
    row = json.loads(out)[0]
    assert code == 0 and row["experts"] == "mxfp4" and row["weights"] == "bf16"
    assert row["weight_bytes"] == pytest.approx(65_190_340_224, rel=1e-12)
    code, out, _ = cli("analyze", "--model", "gpt-oss-120b", "--json")
    assert json.loads(out)[0]["experts"] == "bf16"  # None: the weights' format, named
    code, out, _ = cli("analyze", "--model", "gpt-oss-120b", "--experts", "mxfp4")
    assert "routed experts mxfp4" in out


@pytest.mark.parametrize("args, message", [
    (("analyze", "--model", "gpt-oss-20b", "--experts", "fp5"), "--experts: unknown dtype 'fp5'"),
    (("analyze", "--model", "llama-3-8b", "--experts", "mxfp4"), "experts: model 'llama-3-8b' has no routed experts"),
    (("crossovers", "--model", "llama-3-8b", "--experts", "int4"), "experts: model 'llama-3-8b' has no routed"),
])
def test_cli_bad_experts_exit_2_naming_the_field(args, message):
    code, _, err = cli(*args)
    assert code == 2 and message in err


def test_expert_matmuls_run_in_their_own_dtype_and_other_matmuls_keep_theirs():
    """W8A8 fp8 weights compute in fp8; bf16 experts beside them dequantize nothing and run in bf16."""
    p = Precision(weights="fp8", activations="fp8", experts="bf16")
    roofs = Roofs.of(H100, p)
    assert roofs.peaks((WEIGHT_MATMUL, EXPERT_MATMUL)) == [H100.peak("fp8"), H100.peak("bf16")]
    weight_only = Roofs.of(H100, Precision(weights="bf16", experts="mxfp4"))  # mxfp4 dequantizes into bf16
    assert weight_only.peaks((WEIGHT_MATMUL, EXPERT_MATMUL)) == [H100.peak("bf16")] * 2
    assert weight_only.bandwidths((WEIGHT_MATMUL, EXPERT_MATMUL)) == H100.memory_bandwidth  # one roof: a scalar


def test_an_engines_quantized_efficiency_for_the_expert_format_slows_only_the_expert_gemvs():
    engine = Engine(name="test", bandwidth_efficiency=0.8, quantized_efficiency={"mxfp4": 0.5})
    d = Deployment(load_model("gpt-oss-20b"), H100, Precision(weights="bf16", experts="mxfp4"), engine=engine)
    assert d.roofs.bandwidths((WEIGHT_MATMUL, EXPERT_MATMUL, "none")) == pytest.approx(
        [0.8 * H100.memory_bandwidth, 0.4 * H100.memory_bandwidth, 0.8 * H100.memory_bandwidth])
    step = d.step(DECODE, 1.0, 1025.0)
    for name, memory, counts in zip(step.ops, step.memory_s, step.components):
        if name.op == "experts.down":
            assert float(np.ravel(memory)[0]) == pytest.approx(sum(counts[1:]) / (0.4 * H100.memory_bandwidth))
    # all-mxfp4 weights: the engine's mxfp4 efficiency applies everywhere, as before
    whole = Deployment(load_model("gpt-oss-20b"), H100, Precision(weights="mxfp4"), engine=engine)
    assert whole.roofs.bandwidth == pytest.approx(0.4 * H100.memory_bandwidth) and whole.roofs.expert_bandwidth is None


def test_expert_parallel_and_pipeline_memory_hold_the_experts_at_their_width():
    config, p = load_model("gpt-oss-120b"), Precision(weights="bf16", experts="mxfp4")
    routed, other = gpt_oss_120b_by_hand()
    ep = Deployment(config, load_hardware("h100-sxm"), p, ep=4)
    assert ep.memory_bytes(0.0, 1024)[0] == pytest.approx(other * 2 + routed / 4 * MXFP4, rel=1e-12)
    pp = Deployment(config, load_hardware("h100-sxm"), p, pp=2)
    assert sum(pp.memory_bytes(0.0, 1024)) == pytest.approx(other * 2 + routed * MXFP4, rel=1e-12)


def test_kv_equals_weights_context_reads_the_experts_at_their_width():
    config = load_model("gpt-oss-120b")
    p = Precision(weights="bf16", experts="mxfp4")
    c = kv_equals_weights_context(Deployment(config, H100, p))
    assert b_e in c.expression.free_symbols and c.given["b_e"] == MXFP4
    assert c.value < kv_equals_weights_context(Deployment(config, H100)).value
    d = Deployment(config, H100, p)
    parts = np.array(d.compiled.decode(1.0, c.value, p.byte_widths))
    assert parts[:, 4].sum() == pytest.approx(parts[:, 1].sum(), rel=1e-6)  # KV read == weights read
    assert b_e not in kv_equals_weights_context(Deployment(config, H100)).expression.free_symbols  # None: in b_w alone, as before


def test_expert_critical_batch_uses_the_experts_width():
    """Each expert must see ridge x b_e / 2 tokens: with 4.25-bit experts fewer than with bf16 ones."""
    config = load_model("gpt-oss-120b")
    mx = expert_critical_batch(Deployment(config, H100, Precision(experts="mxfp4")))
    assert mx.given["B_crit"] == pytest.approx(H100.peak("bf16") / H100.memory_bandwidth * MXFP4 / 2)
    assert mx.value < expert_critical_batch(Deployment(config, H100)).value


def test_sweep_and_plan_carry_the_expert_format():
    frame = sweep("gpt-oss-20b", "h100-sxm", batch=(1, 8), weights=("bf16", "fp8"), experts="mxfp4", e2e=False)
    assert set(frame["experts"]) == {"mxfp4"}
    found = plan("gpt-oss-120b", Workload(1.0, 1024, 128), Targets(1.0, 0.05), hardware=("h100-sxm",), tp=(1,),
                 weights=("bf16",), experts="mxfp4", requests=20)
    assert found["feasible"].any() and set(found["experts"]) == {"mxfp4"}
    bf16 = plan("gpt-oss-120b", Workload(1.0, 1024, 128), Targets(1.0, 0.05), hardware=("h100-sxm",), tp=(1,),
                weights=("bf16",), requests=20)
    assert not bf16["feasible"].any()  # 233.7 GB of bf16 weights fit no single H100
    assert list(bf16["experts"]) == list(bf16["weights"])  # unset: the column names the weights' format
    code, out, _ = cli("plan", "--model", "gpt-oss-120b", "--rate", "1", "--hardware", "h100-sxm", "--tp", "1",
                       "--weights", "bf16", "--experts", "mxfp4", "--top", "1")
    assert code == 0 and "h100-sxm tp=1 bf16 (experts mxfp4)/bf16 tensorrt-llm" in out  # the default engine (issue 26)


def test_the_expert_width_is_one_letter_of_every_evaluator():
    from roofline.compiled import ARGS
    from roofline.symbols import BYTE_WIDTHS
    assert ARGS[-1] == b_e and BYTE_WIDTHS[-1] == b_e
    assert isinstance(b_e, sp.Symbol)


def test_a_dense_draft_of_an_moe_target_with_an_expert_format_drafts_in_the_weights_format():
    from roofline import speculate
    fast = speculate(Deployment.of("qwen3-30b-a3b", "h100-sxm", precision=Precision(experts="int4")), "qwen3-8b", 2, 0.7)
    slow = speculate(Deployment.of("qwen3-30b-a3b", "h100-sxm"), "qwen3-8b", 2, 0.7)
    assert fast.tpot_s < slow.tpot_s  # the target's experts read at int4, the dense draft unchanged
    assert fast.draft_s == pytest.approx(slow.draft_s, rel=1e-12)


def test_the_report_names_the_expert_format_and_prices_it():
    from roofline.views.render import results_frame
    from roofline.study.report import build_study
    study = build_study("gpt-oss-20b", "h100-sxm", batch=(1,), plots=False, experts="mxfp4")
    frame = results_frame(study)
    assert study.inputs["experts"] == "mxfp4" and set(frame["experts"]) == {"mxfp4"}
    plain = analyze("gpt-oss-20b", "h100-sxm", precision=Precision(experts="mxfp4")).metrics
    assert frame["weight_bytes"][0] == plain["weight_bytes"][0]
