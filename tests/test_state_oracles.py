"""Constant-state families against Hugging Face modules (tests/hf_reference.py measures them).

What HF's FlopCounterMode sees of a Mamba-2 / gated-DeltaNet layer (transformers 5.23, torch 2.13,
the torch reference paths that run without mamba_ssm, causal_conv1d or fla):
  * aten.mm: every projection (in_proj, out_proj, attention, MLP, experts, router, LM head): ours, exactly.
  * aten.convolution: the depthwise conv, over T + Kc - 1 output positions in prefill (padding on
    both sides, then cut) and 2 in decode (the Kc cached inputs and the new one); ours counts T.
  * aten.bmm: eager attention, plus the chunked scan's einsums in prefill. HF's Mamba-2 reference
    computes C B^T per head (the kernel: per group) and the inter-chunk recurrence as a dense
    (chunks+1)^2 einsum (the kernel: a sequential pass); its delta rule pads T to the 64-token chunk
    and solves the WY system with solve_triangular (no FLOP formula). The recurrent decode step is
    elementwise in HF (not counted) except Mamba-2's readout y = h C (one bmm, 2 B Di Ns).
State bytes equal HF's conv_states + recurrent_states (float32 recurrent state, model-dtype conv).
"""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hf_reference import STATE_CASES, TINY_CONFIGS, hf_cache_bytes, hf_flops_by_op  # noqa: E402

from roofline import ModelConfig, Options  # noqa: E402
from roofline.compiled import FLOPS_ROW, compile_model  # noqa: E402
from roofline.ops import ATTENTION_MATMUL, EXPERT_MATMUL, WEIGHT_MATMUL  # noqa: E402

HF_LIKE = Options(attention="eager", logits="all", mla_form="naive")
SCANS = ("ssd_scan", "delta_rule", "selective_scan", "lightning_attention")
CONV_CASES = tuple(c for c in STATE_CASES if c != "minimax")
SSD_CASES = ("mamba2", "nemotron-h", "granite-h", "falcon-h1")


def config(case: str) -> ModelConfig:
    return ModelConfig.from_hf_config(TINY_CONFIGS[case], name=case)


def ours_by_kind(cfg: ModelConfig, phase: str, batch: int, prompt: int) -> dict[str, float]:
    """Our FLOPs split as HF's counter splits them: projections, conv, attention, scan."""
    compiled = compile_model(cfg, HF_LIKE)
    step, context = (compiled.prefill, prompt) if phase == "prefill" else (compiled.decode, prompt + 1)
    flops = step(batch, context, (4.0, 4.0, 4.0, 4.0))[:, FLOPS_ROW]
    out = {"mm": 0.0, "conv": 0.0, "attention": 0.0, "scan": 0.0}
    for name, matmul, value in zip(step.ops, step.matmul, flops):
        kind = ("conv" if name.op == "conv1d" else "scan" if name.op in SCANS
                else "mm" if matmul in (WEIGHT_MATMUL, EXPERT_MATMUL) else "attention" if matmul == ATTENTION_MATMUL else None)
        if kind:
            out[kind] += float(value)
    return out


@pytest.mark.parametrize("case", STATE_CASES)
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_projection_flops_equal_the_flop_counter(case, phase):
    hf = hf_flops_by_op(TINY_CONFIGS[case], 2, 16, phase)
    assert ours_by_kind(config(case), phase, 2, 16)["mm"] == hf["aten.mm"]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("phase, positions", [("prefill", lambda t, kc: t + kc - 1), ("decode", lambda t, kc: 2)])
def test_conv_flops_equal_the_flop_counter_over_its_padded_positions(case, phase, positions):
    cfg, tokens = config(case), 16 if phase == "prefill" else 1
    ours = ours_by_kind(cfg, phase, 2, 16)["conv"]
    hf = hf_flops_by_op(TINY_CONFIGS[case], 2, 16, phase)["aten.convolution"]
    assert ours * positions(tokens, cfg.conv_kernel) / tokens == hf


def ssd_layers(cfg: ModelConfig) -> int:
    return sum(kind in ("mamba2", "parallel") for kind in cfg.layer_attention)


@pytest.mark.parametrize("case", SSD_CASES)
def test_ssd_scan_equals_the_reference_einsums_less_their_per_head_and_dense_recurrence_extras(case):
    cfg, batch, tokens = config(case), 2, 16  # 16 = two chunks of 8
    ours = ours_by_kind(cfg, "prefill", batch, tokens)
    hf = hf_flops_by_op(TINY_CONFIGS[case], batch, tokens, "prefill")["aten.bmm"] - ours["attention"]
    layers = ssd_layers(cfg)
    chunks = tokens // cfg.ssm_chunk
    per_head_cb = 2 * batch * tokens * cfg.ssm_chunk * (cfg.ssm_heads - cfg.ssm_groups) * cfg.ssm_state
    dense_recurrence = 2 * batch * (chunks + 1) ** 2 * cfg.ssm_inner * cfg.ssm_state
    assert hf == ours["scan"] + layers * (per_head_cb + dense_recurrence)


def test_delta_rule_equals_the_reference_matmuls_less_the_triangular_solve():
    cfg, batch, tokens = config("qwen3-next"), 2, 64  # one full 64-token chunk: HF pads nothing
    ours = ours_by_kind(cfg, "prefill", batch, tokens)
    hf = hf_flops_by_op(TINY_CONFIGS["qwen3-next"], batch, tokens, "prefill")["aten.bmm"] - ours["attention"]
    solve = 2 * batch * tokens * cfg.ssm_chunk * (cfg.ssm_inner + cfg.ssm_heads * cfg.ssm_state)
    assert hf == ours["scan"] - cfg.layer_attention.count("deltanet") * solve


@pytest.mark.parametrize("case", SSD_CASES)
def test_decode_counts_the_readout_the_flop_counter_sees_and_more(case):
    cfg, batch = config(case), 2
    ours = ours_by_kind(cfg, "decode", batch, 16)
    hf = hf_flops_by_op(TINY_CONFIGS[case], batch, 16, "decode")["aten.bmm"] - ours["attention"]
    readout = 2 * batch * cfg.ssm_inner * cfg.ssm_state * ssd_layers(cfg)
    assert hf == readout
    assert ours["scan"] == pytest.approx(2 * readout, rel=0.1)  # readout + state update (+ the one-token chunk)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_selective_scan_is_twice_the_readout_matmul_the_flop_counter_sees(phase):
    cfg = config("jamba")  # HF's slow path: h = exp(dt A) h + dt B x elementwise, y = h @ C one matmul a token
    ours = ours_by_kind(cfg, phase, 2, 16)
    hf = hf_flops_by_op(TINY_CONFIGS["jamba"], 2, 16, phase)["aten.bmm"] - ours["attention"]
    assert hf == ours["scan"] / 2


def test_lightning_attention_equals_the_reference_blocks_in_prefill_and_its_state_matmuls_in_decode():
    cfg, batch = config("minimax"), 2
    prefill = ours_by_kind(cfg, "prefill", batch, 16)  # two 8-token blocks
    assert hf_flops_by_op(TINY_CONFIGS["minimax"], batch, 16, "prefill")["aten.bmm"] == prefill["attention"] + prefill["scan"]
    decode = ours_by_kind(cfg, "decode", batch, 16)
    one_token_chunk = 2 * 2 * batch * cfg.n_heads * cfg.head_dim * cfg.layer_attention.count("linear")
    hf = hf_flops_by_op(TINY_CONFIGS["minimax"], batch, 16, "decode")["aten.bmm"]
    assert hf == decode["attention"] + decode["scan"] - one_token_chunk


@pytest.mark.parametrize("case", STATE_CASES)
def test_state_bytes_equal_the_hugging_face_cache_and_stay_flat_in_the_prompt(case):
    compiled = compile_model(config(case))
    short, long = (hf_cache_bytes(TINY_CONFIGS[case], 2, prompt) for prompt in (4, 6))
    assert short["state"] == long["state"] == 2 * compiled.state_bytes(2.0)
    assert long["kv"] - short["kv"] == 2 * 2 * compiled.kv_per_token(2.0)
    assert compiled.kv_cache(2, 6, 2.0) == long["kv"] + long["state"]


def test_the_oracle_catches_a_state_sized_with_the_conv_channels_of_the_heads_alone():
    wrong = config("mamba2").with_overrides(ssm_groups=1)  # B, C not widened by the groups
    assert 2 * compile_model(wrong).state_bytes(2.0) != hf_cache_bytes(TINY_CONFIGS["mamba2"], 2, 4)["state"]


@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_projection_and_conv_flops_of_a_real_config_equal_the_flop_counter(phase):
    # The state families' torch paths call .item(), so they cannot run on the meta device: the one real
    # config small enough for a CPU forward is Falcon-H1-Tiny-90M (attention and Mamba-2 in every layer).
    import json
    from roofline.models.config import MODELS_DIR
    raw = json.loads((MODELS_DIR / "falcon-h1-tiny-90m.json").read_text())
    cfg = ModelConfig.from_hf_config(raw, name="falcon-h1-tiny-90m")
    hf = hf_flops_by_op(raw, 1, 64, phase)
    ours = ours_by_kind(cfg, phase, 1, 64)
    tokens = 64 if phase == "prefill" else 1
    positions = tokens + cfg.conv_kernel - 1 if phase == "prefill" else 2
    assert ours["mm"] == hf["aten.mm"]
    assert ours["conv"] * positions / tokens == hf["aten.convolution"]
