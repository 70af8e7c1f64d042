"""CPU oracle: the validation decoder computes the same logits as Hugging Face's LlamaForCausalLM."""
import numpy as np
import pytest
import torch

from roofline import ModelConfig, load_model
from validation.decoder import build_decoder

transformers = pytest.importorskip("transformers")

# GQA (8 query heads on 2 KV heads) and a head_dim (24) that is not hidden / heads (64 / 8 = 8).
TINY = ModelConfig(name="tiny-gqa", family="llama", d_model=64, n_layers=2, n_heads=8, n_kv_heads=2,
                   head_dim=24, d_ff=96, vocab_size=101)
TOLERANCE = dict(atol=1e-4, rtol=1e-4)  # fp32 on CPU: only summation order differs


def copy_outer(ours, hf) -> None:
    """Embedding, final norm and LM head: the same names in every Hugging Face causal LM here."""
    hf.model.embed_tokens.weight.copy_(ours.embed.weight)
    hf.model.norm.weight.copy_(ours.final_norm)
    hf.lm_head.weight.copy_(ours.lm_head.weight)


def copy_norms(mine, theirs) -> None:
    theirs.input_layernorm.weight.copy_(mine.attn_norm)
    theirs.post_attention_layernorm.weight.copy_(mine.mlp_norm)


def copy_mlp_and_norms(mine, theirs, d_ff: int) -> None:
    """Our fused [gate | up] projection into Hugging Face's separate gate_proj and up_proj."""
    gate, up = mine.mlp.gate_up.weight.split((d_ff, d_ff))
    theirs.mlp.gate_proj.weight.copy_(gate)
    theirs.mlp.up_proj.weight.copy_(up)
    theirs.mlp.down_proj.weight.copy_(mine.mlp.down.weight)
    copy_norms(mine, theirs)


def hugging_face_twin(config: ModelConfig, ours) -> torch.nn.Module:
    hf_config = transformers.LlamaConfig(
        hidden_size=config.d_model, num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads, head_dim=config.head_dim, intermediate_size=config.d_ff,
        vocab_size=config.vocab_size, rms_norm_eps=ours.eps, rope_theta=ours.rope_theta,
        tie_word_embeddings=False, attn_implementation="eager")
    hf = transformers.LlamaForCausalLM(hf_config).eval()
    H, N, K, Fd = config.head_dim, config.n_heads, config.n_kv_heads, config.d_ff
    with torch.no_grad():
        copy_outer(ours, hf)
        for mine, theirs in zip(ours.layers, hf.model.layers):
            q, k, v = mine.attention.qkv.weight.split((N * H, K * H, K * H))
            theirs.self_attn.q_proj.weight.copy_(q)
            theirs.self_attn.k_proj.weight.copy_(k)
            theirs.self_attn.v_proj.weight.copy_(v)
            theirs.self_attn.o_proj.weight.copy_(mine.attention.o.weight)
            copy_mlp_and_norms(mine, theirs, Fd)
    return hf


def assert_logits_match(ours, hf, tokens: torch.Tensor, prompt: int) -> None:
    """A prefill of `prompt` tokens, then one decode step per remaining token, each through both
    models' caches: our last-position logits equal Hugging Face's at every step."""
    ours.allocate_cache(tokens.shape[0], tokens.shape[1])
    with torch.no_grad():
        out = hf(tokens[:, :prompt], use_cache=True)
        torch.testing.assert_close(ours(tokens[:, :prompt]), out.logits[:, -1], **TOLERANCE)
        for j in range(prompt, tokens.shape[1]):
            out = hf(tokens[:, j:j + 1], past_key_values=out.past_key_values, use_cache=True)
            torch.testing.assert_close(ours(tokens[:, j:j + 1], start=j), out.logits[:, -1], **TOLERANCE)


@pytest.mark.parametrize("n_kv_heads", [8, 2, 1])  # MHA, GQA, MQA
def test_prefill_and_decode_logits_match_hugging_face_llama(n_kv_heads):
    config = TINY.with_overrides(n_kv_heads=n_kv_heads)
    ours = build_decoder(config, "fp32", seed=1)
    with torch.no_grad():  # non-trivial norm weights, so a missing norm weight would show
        for layer in ours.layers:
            layer.attn_norm.uniform_(0.5, 1.5)
            layer.mlp_norm.uniform_(0.5, 1.5)
    hf = hugging_face_twin(config, ours)
    tokens = torch.randint(0, config.vocab_size, (3, 11), generator=torch.Generator().manual_seed(2))
    assert_logits_match(ours, hf, tokens, prompt=7)


def test_a_chunk_after_cached_tokens_matches_one_long_prefill():
    ours = build_decoder(TINY, "fp32", seed=3)
    tokens = torch.randint(0, TINY.vocab_size, (2, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ours.allocate_cache(2, 12)
        whole = ours(tokens)
        ours.allocate_cache(2, 12)
        ours(tokens[:, :5])
        torch.testing.assert_close(ours(tokens[:, 5:], start=5), whole, **TOLERANCE)


def test_unsupported_architectures_are_refused_by_name():
    with pytest.raises(ValueError, match="shared experts"):
        build_decoder(TINY.with_overrides(n_experts=4, top_k=2, d_expert=32, n_shared_experts=1, layer_mlp=()))
    with pytest.raises(ValueError, match="shared experts"):  # DeepSeek's MoE: shared experts, its own routing
        build_decoder(load_model("deepseek-v2-lite").with_overrides(n_layers=1, layer_attention=(), layer_mlp=()))


def test_sliding_window_logits_match_hugging_face_mistral():
    """W = 4 over a 7-token prompt and 4 decode steps: the window masks prefill and trims decode."""
    config = TINY.with_overrides(name="tiny-window", window=4, layer_attention=())
    ours = build_decoder(config, "fp32", seed=21)
    twin = hugging_face_twin(config.with_overrides(window=0, layer_attention=()), ours)  # Llama's weights ...
    hf_config = transformers.MistralConfig(**{**twin.config.to_dict(), "sliding_window": 4, "architectures": None})
    hf_config._attn_implementation = "eager"
    hf = transformers.MistralForCausalLM(hf_config).eval()
    hf.load_state_dict(twin.state_dict())  # ... in Mistral, whose layout is Llama's plus the window
    tokens = torch.randint(0, config.vocab_size, (2, 11), generator=torch.Generator().manual_seed(22))
    assert_logits_match(ours, hf, tokens, prompt=7)
    with torch.no_grad():  # and the window matters: full attention over the same cache differs
        full = hugging_face_twin(config.with_overrides(window=0, layer_attention=()), ours)(tokens).logits[:, -1]
        assert not torch.allclose(ours(tokens[:, -1:], start=tokens.shape[1] - 1), full, **TOLERANCE)


MLA = ModelConfig(name="tiny-mla", family="deepseek_v2", d_model=64, n_layers=2, n_heads=4, n_kv_heads=4,
                  head_dim=24, d_ff=96, vocab_size=101, kv_lora_rank=40, qk_rope_dim=8, qk_nope_dim=16, v_head_dim=12)


def deepseek_twin(config: ModelConfig, ours) -> torch.nn.Module:
    """Hugging Face's DeepseekV2 (dense MLPs, no yarn) with our weights."""
    hf_config = transformers.DeepseekV2Config(
        hidden_size=config.d_model, num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads, intermediate_size=config.d_ff, vocab_size=config.vocab_size,
        kv_lora_rank=config.kv_lora_rank, q_lora_rank=config.q_lora_rank or None, qk_rope_head_dim=config.qk_rope_dim,
        qk_nope_head_dim=config.qk_nope_dim, v_head_dim=config.v_head_dim, first_k_dense_replace=config.n_layers,
        rms_norm_eps=ours.eps, rope_theta=ours.rope_theta, tie_word_embeddings=False, attn_implementation="eager")
    hf = transformers.DeepseekV2ForCausalLM(hf_config).eval()
    Fd = config.d_ff
    with torch.no_grad():
        copy_outer(ours, hf)
        for mine, theirs in zip(ours.layers, hf.model.layers):
            attention, reference = mine.attention, theirs.self_attn
            if config.q_lora_rank:
                reference.q_a_proj.weight.copy_(attention.q_a.weight)
                reference.q_a_layernorm.weight.copy_(attention.q_norm)
                reference.q_b_proj.weight.copy_(attention.q_b.weight)
            else:
                reference.q_proj.weight.copy_(attention.q.weight)
            reference.kv_a_proj_with_mqa.weight.copy_(attention.kv_a.weight)
            reference.kv_a_layernorm.weight.copy_(attention.kv_norm)
            reference.kv_b_proj.weight.copy_(attention.kv_b.weight)
            reference.o_proj.weight.copy_(attention.o.weight)
            copy_mlp_and_norms(mine, theirs, Fd)
    return hf


@pytest.mark.parametrize("q_lora_rank", [0, 24])  # V2-Lite's plain queries, V2/V3's compressed ones
def test_mla_prefill_naive_and_absorbed_decode_logits_match_hugging_face_deepseek(q_lora_rank):
    config = MLA.with_overrides(q_lora_rank=q_lora_rank)
    ours = build_decoder(config, "fp32", seed=31)
    with torch.no_grad():  # non-trivial latent norms, so a missing one would show
        for layer in ours.layers:
            layer.attention.kv_norm.uniform_(0.5, 1.5)
    hf = deepseek_twin(config, ours)
    tokens = torch.randint(0, config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(32))
    assert_logits_match(ours, hf, tokens, prompt=6)


MOE = TINY.with_overrides(name="tiny-moe", n_experts=6, top_k=2, d_expert=40, layer_mlp=())  # every layer MoE


def mixtral_twin(config: ModelConfig, ours) -> torch.nn.Module:
    """Hugging Face's Mixtral with our weights: attention as in Llama, experts stacked (E, 2Fe, D)."""
    hf_config = transformers.MixtralConfig(
        hidden_size=config.d_model, num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
        num_key_value_heads=config.n_kv_heads, head_dim=config.head_dim, intermediate_size=config.d_expert,
        num_local_experts=config.n_experts, num_experts_per_tok=config.top_k, vocab_size=config.vocab_size,
        rms_norm_eps=ours.eps, rope_theta=ours.rope_theta, sliding_window=None, tie_word_embeddings=False,
        attn_implementation="eager")
    hf = transformers.MixtralForCausalLM(hf_config).eval()
    H, N, K = config.head_dim, config.n_heads, config.n_kv_heads
    with torch.no_grad():
        copy_outer(ours, hf)
        for mine, theirs in zip(ours.layers, hf.model.layers):
            q, k, v = mine.attention.qkv.weight.split((N * H, K * H, K * H))
            for proj, weight in (("q_proj", q), ("k_proj", k), ("v_proj", v), ("o_proj", mine.attention.o.weight)):
                getattr(theirs.self_attn, proj).weight.copy_(weight)
            theirs.mlp.gate.weight.copy_(mine.mlp.router.weight)
            for e, expert in enumerate(mine.mlp.experts):
                theirs.mlp.experts.gate_up_proj[e].copy_(expert.gate_up.weight)
                theirs.mlp.experts.down_proj[e].copy_(expert.down.weight)
            copy_norms(mine, theirs)
    return hf


def test_moe_prefill_and_decode_logits_match_hugging_face_mixtral():
    ours = build_decoder(MOE, "fp32", seed=11)
    hf = mixtral_twin(MOE, ours)
    tokens = torch.randint(0, MOE.vocab_size, (3, 10), generator=torch.Generator().manual_seed(12))
    assert_logits_match(ours, hf, tokens, prompt=7)


def test_a_moe_step_runs_only_the_experts_its_tokens_chose(monkeypatch):
    ours = build_decoder(MOE.with_overrides(n_layers=1, layer_attention=(), layer_mlp=()), "fp32", seed=13)
    ran = []
    for e, expert in enumerate(ours.layers[0].mlp.experts):
        monkeypatch.setattr(expert, "forward", lambda x, e=e, f=expert.forward: ran.append(e) or f(x))
    ours.allocate_cache(1, 4)
    with torch.no_grad():
        ours(torch.tensor([[5]]), start=3)
    assert len(ran) == MOE.top_k == len(set(ran))  # batch 1: k experts, each once


def matmul_attention(q, keys, values):
    scores = q @ keys.transpose(-1, -2) * q.shape[-1] ** -0.5
    return torch.softmax(scores, dim=-1) @ values


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("groups, head_dim", [(1, 64), (4, 24), (16, 128)])  # MHA, GQA, MQA-like
def test_the_native_cpu_decode_attention_equals_softmax_attention(groups, head_dim, dtype):
    from validation import native_attention
    if native_attention.kernel() is None:
        pytest.skip("no C compiler here: the decoder uses its matmul attention (covered by the HF tests)")
    generator = torch.Generator().manual_seed(7)
    cache = torch.randn(2, 3, 2, 50, head_dim, generator=generator).to(dtype)  # (K|V, B, K, capacity, H)
    keys, values = cache[0, :, :, :37], cache[1, :, :, :37]  # a filled prefix of a larger static cache
    q = torch.randn(3, 2, groups, head_dim, generator=generator).to(dtype)
    assert native_attention.supports(q, keys)
    expected = matmul_attention(q.float(), keys.float(), values.float())  # the same bf16 inputs, in fp32
    tolerance = TOLERANCE if dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)  # the bf16 output rounding
    torch.testing.assert_close(native_attention.decode_attention(q, keys, values).float(), expected, **tolerance)


def test_loading_the_native_kernel_leaves_subnormals_alone():
    """A -ffast-math build turned on flush-to-zero for the whole process when it loaded (crtfastmath.o): torch's
    CPU kernels then flushed subnormals and hypothesis refused to draw floats in later tests."""
    from validation import native_attention
    if native_attention.kernel() is None:
        pytest.skip("no C compiler: the native kernel is not built")
    tiny = torch.tensor([1e-40], dtype=torch.float32)  # below float32's smallest normal, 1.18e-38
    assert (tiny * 1.0).item() > 0
    assert np.nextafter(0.0, 1.0) * 1.0 > 0


def test_without_the_native_kernel_decode_falls_back_to_matmuls_and_says_so(monkeypatch):
    from validation import decoder, native_attention
    monkeypatch.setattr(native_attention, "kernel", lambda: None)
    q, keys, values = torch.randn(2, 2, 4, 16), torch.randn(2, 2, 9, 16), torch.randn(2, 2, 9, 16)
    assert not native_attention.supports(q, keys)
    torch.testing.assert_close(decoder.grouped_decode_attention(q, keys, values), matmul_attention(q, keys, values),
                               **TOLERANCE)
    assert decoder.attention_kernel(TINY, "cpu", "decode", "fp32") == "eager"
    assert decoder.attention_kernel(TINY, "cpu", "prefill", "fp32") == "flash"


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_every_dtype_decodes_on_the_cpu_and_agrees_with_fp32(dtype):
    """oneDNN cannot pack fp16 on most x86 CPUs: the projection falls back to F.linear, never fails."""
    reference = build_decoder(TINY, "fp32", seed=5)
    low = build_decoder(TINY, dtype, seed=5)
    low.load_state_dict({name: value.to(low.lm_head.weight.dtype) for name, value in reference.state_dict().items()})
    tokens = torch.randint(0, TINY.vocab_size, (2, 6), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        for model in (reference, low):
            model.allocate_cache(2, 7)
            model(tokens)
        expected, got = reference(tokens[:, -1:], start=6), low(tokens[:, -1:], start=6).float()
    assert torch.nn.functional.cosine_similarity(expected, got, dim=-1).min() > 0.99
