"""Independent oracle: facts measured from Hugging Face ``transformers`` reference modules.

Nobody on this project wrote the modules measured here. The functions build
models from config dicts with random weights (nothing is downloaded), on CPU,
and measure parameter counts, matmul FLOPs (``torch.utils.flop_counter``) and
KV-cache bytes. The symbolic roofline model is tested against these numbers.

Facts found by experiment with the installed versions (transformers 5.23.0,
torch 2.13.0+cpu). Re-check them if either version changes.

What FlopCounterMode counts
    Only matmul-like aten ops: ``mm``, ``addmm``, ``bmm``, ``baddbmm`` (also
    ``_scaled_mm``, convolutions and the CUDA flash/efficient SDPA kernels, none of
    which run here). Each counts ``2*M*N*K``. The bias part of ``addmm``/``baddbmm``
    is not counted, and no elementwise work is counted (norms, activations, softmax,
    RoPE, residual adds, soft-capping, routing top-k). With
    ``attn_implementation="eager"``, the ops seen are ``aten.mm`` (linear layers
    without bias, LM head), ``aten.addmm`` (linear layers with bias: qwen2 q/k/v,
    every gpt2 ``Conv1D``) and ``aten.bmm`` (attention Q K^T and P V). gpt2 uses
    ``baddbmm`` only with ``reorder_and_upcast_attn=True``. RoPE frequencies are
    elementwise in this version (no ``inv_freq @ position_ids`` matmul), so they
    add nothing. With ``attn_implementation="sdpa"`` on CPU, torch 2.13 runs
    ``aten._scaled_dot_product_flash_attention_for_cpu``, which has NO flop formula:
    the attention FLOPs vanish (seen for llama). For MLA (``d_qk != d_v``) it fell back
    to the math path, which IS counted as bmm. Because of this, this module always
    uses eager attention.

Formulas matched exactly (tiny configs here, at several (B, prompt) and both phases,
and all real configs in /work/shared/models on the meta device). Let
N = tokens in the forward (B*S). Count per layer, plus ``2*N*D*V`` for the LM head.
    * linear: ``2*N*(D*H*hd + 2*D*H_kv*hd + H*hd*D)`` + dense MLP ``2*N*3*D*F``
      (gpt2: ``2*N*(3D^2 + D^2 + 2*D*4D)``);
    * attention: ``2 * 2*B*H*S*T*hd`` (see T below);
    * MoE: see below; MLA: see below.

MoE experts (mixtral, deepseek_v2, deepseek_v3)
    The experts are 3-D parameters (``gate_up_proj [E, 2F, D]``,
    ``down_proj [E, D, F]``), and the forward pass is chosen by
    ``config._experts_implementation`` (``from_config(..., experts_implementation=...)``):
    * default ``"grouped_mm"`` (used when nothing is set, also on CPU):
      ``torch.nn.functional.grouped_mm`` -> ``aten._grouped_mm``, which has no flop
      formula. Expert FLOPs are NOT counted (0).
    * ``"eager"``: the per-expert Python loop over experts that were hit, with
      ``F.linear`` -> ``aten.mm``. The count is exactly
      ``2 * tokens * top_k * 3 * D * F_e`` per MoE layer (top-k semantics, no
      dense computation over all experts).
    * ``"batched_mm"``: gathers the selected experts' weights and counts under
      ``aten.bmm``, with the same total as "eager" (top-k semantics).
    ``hf_flops`` uses ``"eager"`` by default. The switch is
    ``from_config(cfg, experts_implementation="eager")``, or the key
    ``"experts_implementation": "eager"`` in the config dict/kwargs, or
    ``model.set_experts_implementation("eager")``.
    The router (``gate``) matmul IS counted: ``2 * tokens * D * E`` per MoE layer
    (done in float32 for deepseek). DeepSeek shared experts are ONE dense MLP with
    intermediate size ``moe_intermediate_size * n_shared_experts``, run on every
    token (``2 * tokens * 3 * D * F_e * n_shared``). Layers ``< first_k_dense_replace``
    use the dense MLP with ``intermediate_size``. ``moe_layer_freq`` is ignored by HF
    (it is 1 in the real configs).
    deepseek_v3 ``e_score_correction_bias`` is a BUFFER (shape ``[E]``), not a
    parameter, so it is not in ``parameters()``. deepseek_v3 MTP layers
    (``num_nextn_predict_layers``) are NOT built, so DeepSeek-V3 has
    671,026,404,352 parameters.

Attention, KV cache, decode
    * Eager attention always computes the full ``S x T`` score matrix (one bmm for
      Q K^T and one for P V, each ``2 * B * H_q * S * T * d``). For GQA, K/V are
      repeated to ``H_q`` heads first, so attention FLOPs scale with the query heads.
    * Prefill: ``T = S = prompt_len``. Causal masking and sliding windows are
      applied only through the additive mask, so mistral/gemma2 sliding layers
      still count the full ``S*S`` in prefill, NOT the window.
    * Decode with cache, full-attention layers: the new token attends to
      ``T = prompt_len + 1`` keys.
      Sliding-window layers (mistral; gemma2 even layers ``i % 2 == 0``) use
      ``DynamicSlidingWindowLayer``, which keeps only the last ``window - 1``
      tokens, so decode attends to ``T = min(prompt_len + 1, window)`` keys. The
      sliding-window cache therefore holds ``min(len, window - 1)`` tokens.
    * The cache stores K and V of ``num_key_value_heads * head_dim`` each, so
      ``bytes/token = 2 * L * H_kv * head_dim * bytes`` for the standard families
      (gemma2 uses its explicit ``head_dim``).
    * MLA (deepseek_v2 / deepseek_v3): this transformers version caches the
      COMPRESSED latent, not the decompressed per-head K/V. Per layer and token it
      stores ``kv_a_layernorm(c_kv)`` (``kv_lora_rank``) as "keys" and the roped
      shared ``k_pe`` (``qk_rope_head_dim``) as "values". So bytes/token/layer =
      ``(kv_lora_rank + qk_rope_head_dim) * bytes``, independent of
      num_heads/qk_nope_head_dim/v_head_dim. This is NOT the older HF convention
      ``num_heads * (qk_nope + qk_rope + v_head_dim)``. There is NO weight
      absorption. After the cache read, ``kv_b_proj`` decompresses ALL ``T``
      cached positions in every forward, so a decode step counts
      ``2 * B * T * kv_lora_rank * H * (qk_nope + v_head_dim)`` per layer for
      ``kv_b_proj`` (T = prompt_len + 1), plus eager attention with per-head
      ``d_qk = qk_nope + qk_rope`` and ``d_v = v_head_dim``, ``H_kv = H_q``.
    * LM head: ``logits_to_keep`` defaults to 0 (= all positions), so a prefill
      forward computes logits for every one of the ``B * S`` positions
      (``2 * B * S * D * V``). ``generate()`` passes ``logits_to_keep=1``.
      ``hf_flops`` takes ``logits_to_keep`` (default 0, the plain-forward default).
    * gpt2: ``Conv1D`` is ``torch.addmm``, counted (bias not counted). Learned
      positions are an embedding lookup (no FLOPs). The head is tied to ``wte``
      (counted once in parameters). The head matmul is counted.

Families added in issue 14 (qwen3, qwen3_moe, gemma3, glm4_moe, kimi_k2, llama4, gpt_oss)
    * Counted the same way as above (all matched exactly, tiny CPU configs and real configs on meta).
      Not counted, because they are elementwise: the per-head q/k norms (Qwen3, Gemma 3, GLM-4.5 RMSNorm;
      Llama 4's weightless L2 norm), gpt-oss's attention sinks (one logit per head concatenated to the
      scores before the softmax; ``sinks`` IS a parameter, N per layer), gpt-oss's clamped SwiGLU, and the
      bias adds of gpt-oss's experts (``x @ W + b``: the ``@`` is an ``aten.mm``).
    * Llama 4 MoE (``Llama4TextMoe``) runs EVERY expert on every token: the input is repeated E times,
      scaled by the router's masked sigmoid scores, and multiplied with ``bmm`` against all experts. The
      counter sees ``E / k`` times the routed FLOPs; the oracle compares with ``top_k = E``. It has no
      ``experts_implementation`` switch.
    * Chunked attention (Llama 4, ``chunked_attention`` layers) and sliding windows are applied only
      through the mask: eager prefill still counts all S x S scores. The cache keeps a chunked layer in a
      ``DynamicSlidingWindowLayer`` of ``attention_chunk_size`` (only the mask differs), so decode attends
      to ``min(S, chunk)`` cached keys. What the mask lets through is measured by ``hf_visible_keys``.
    * GLM-4.5's ``e_score_correction_bias`` is a buffer (like DeepSeek-V3's); its MTP layer
      (``num_nextn_predict_layers``) is not built. gpt-oss's router bias IS a parameter.
    * Multimodal configs (``gemma3``, ``llama4``): the language model is built from ``text_config``
      (Gemma3ForCausalLM, Llama4ForCausalLM); keys the file leaves out take the class defaults
      (gemma-3-27b has no ``vocab_size``: 262208). ``kimi_k2`` is built as ``deepseek_v3``.

Constant-state families (mamba2, qwen3_next, nemotron_h, granitemoehybrid, jamba, falcon_h1, minimax)
    Without mamba_ssm, causal_conv1d or fla, transformers runs its torch reference paths, and the
    counter sees: every projection as ``aten.mm`` (equal to ours); the depthwise conv as
    ``aten.convolution`` over ``T + K_c - 1`` output positions in prefill (padded both sides, then cut)
    and 2 in decode (the ``K_c`` cached inputs plus the new one), where ours counts T; and, as
    ``aten.bmm``, the chunked scans' einsums. HF's Mamba-2 reference pads T up to ``chunk_size``,
    computes C Bᵀ per head (kernels: per group) and the inter-chunk recurrence as a dense
    ``(chunks + 1)²`` einsum (kernels: a sequential pass, elementwise); its gated delta rule pads to
    64-token chunks and solves the WY system with ``solve_triangular``, which has no FLOP formula
    (MISSED); Jamba's Mamba-1 slow path counts only the readout ``y = h C`` (the state update is
    elementwise, MISSED); MiniMax's lightning attention is counted block by block exactly. The
    recurrent decode steps are elementwise (MISSED) except Mamba-2's readout bmm and MiniMax's two
    state matmuls. tests/test_state_oracles.py states each difference as an identity. These torch
    paths call ``.item()``, so they do not run on the meta device. Caches: ``conv_states`` (B,
    channels, K_c) in the model dtype and ``recurrent_states`` in float32 (MiniMax: ``linear_cache``
    in the model dtype); see :func:`hf_cache_bytes`.

Meta device
    Every forward here also runs on ``device="meta"`` (shapes only, no memory),
    with "batched_mm" experts because the eager expert loop calls ``nonzero()``.
    It gives exactly the CPU numbers for all tiny configs, and it lets
    ``hf_flops``/``hf_kv_cache_bytes_per_token`` measure the real 7B-671B configs in
    about 1-2 s each.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM

TRANSFORMERS_VERSION = transformers.__version__

# ---------------------------------------------------------------------------
# Tiny configs (HF config.json style). Key names mirror /work/shared/models/*.json.
# Sizes are chosen so that no two "interesting" dims coincide (hidden != heads*head_dim,
# layers != heads, vocab not a power of two for most, ...), so that a formula that
# mixes up two dims gives a different number.
# ---------------------------------------------------------------------------

TINY_CONFIGS: dict[str, dict[str, Any]] = {
    # Llama MHA with explicit head_dim (24) != hidden/heads (64/4 = 16).
    "llama": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": 24,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 176,
        "max_position_embeddings": 256,
        "mlp_bias": False,
        "num_attention_heads": 4,
        "num_hidden_layers": 3,
        "num_key_value_heads": 4,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": 320,
    },
    # Llama GQA (8 q heads, 2 kv heads), explicit head_dim 20 != 128/8, llama3 rope scaling.
    "llama-gqa": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": 20,
        "hidden_act": "silu",
        "hidden_size": 128,
        "initializer_range": 0.02,
        "intermediate_size": 352,
        "max_position_embeddings": 512,
        "mlp_bias": False,
        "num_attention_heads": 8,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_scaling": {
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
            "rope_type": "llama3",
        },
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": 500,
    },
    # Mistral with a small sliding window (8), so the window matters at prompt >= 8.
    "mistral-window": {
        "architectures": ["MistralForCausalLM"],
        "model_type": "mistral",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": 24,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 224,
        "max_position_embeddings": 256,
        "num_attention_heads": 4,
        "num_hidden_layers": 3,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "sliding_window": 8,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": 384,
    },
    # Mixtral: 8 experts, top-2, GQA, explicit head_dim.
    "mixtral": {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "head_dim": 24,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 96,
        "max_position_embeddings": 256,
        "num_attention_heads": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "num_local_experts": 8,
        "output_router_logits": False,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000.0,
        "router_aux_loss_coef": 0.02,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": 352,
    },
    # Qwen2: QKV bias (an architecture fact, no config key), GQA, no sliding window.
    # Qwen2 has no head_dim key in real configs: head_dim = hidden / heads = 16.
    "qwen2": {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": 96,
        "initializer_range": 0.02,
        "intermediate_size": 160,
        "max_position_embeddings": 256,
        "max_window_layers": 2,
        "num_attention_heads": 6,
        "num_hidden_layers": 2,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "sliding_window": 256,
        "tie_word_embeddings": False,
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 448,
    },
    # Gemma2: head_dim 32 != 64/4, alternating local (even layers, window 8) / global,
    # tied embeddings, 4 RMSNorms per layer, soft-capping.
    "gemma2": {
        "architectures": ["Gemma2ForCausalLM"],
        "model_type": "gemma2",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": 50.0,
        "bos_token_id": 2,
        "cache_implementation": "hybrid",
        "eos_token_id": 1,
        "final_logit_softcapping": 30.0,
        "head_dim": 32,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 192,
        "max_position_embeddings": 256,
        "num_attention_heads": 4,
        "num_hidden_layers": 4,
        "num_key_value_heads": 2,
        "pad_token_id": 0,
        "query_pre_attn_scalar": 32,
        "rms_norm_eps": 1e-06,
        "rope_theta": 10000.0,
        "sliding_window": 8,
        "sliding_window_size": 8,
        "tie_word_embeddings": True,
        "use_cache": True,
        "vocab_size": 512,
    },
    # DeepSeek-V2-Lite-like: MLA without q compression (q_lora_rank None), softmax greedy
    # router, 2 shared experts, first layer dense.
    "deepseek-v2-lite-like": {
        "architectures": ["DeepseekV2ForCausalLM"],
        "model_type": "deepseek_v2",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "aux_loss_alpha": 0.001,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "first_k_dense_replace": 1,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 144,
        "kv_lora_rank": 40,
        "max_position_embeddings": 256,
        "moe_intermediate_size": 24,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": 8,
        "n_shared_experts": 2,
        "norm_topk_prob": False,
        "num_attention_heads": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 3,
        "num_key_value_heads": 4,
        "pretraining_tp": 1,
        "q_lora_rank": None,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 4,
            "mscale": 0.707,
            "mscale_all_dim": 0.707,
            "original_max_position_embeddings": 64,
            "type": "yarn",
        },
        "rope_theta": 10000,
        "routed_scaling_factor": 1.0,
        "scoring_func": "softmax",
        "seq_aux": True,
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "greedy",
        "use_cache": True,
        "v_head_dim": 12,
        "vocab_size": 400,
    },
    # DeepSeek-V3-like: MLA with q_lora_rank, sigmoid router with group-limited
    # (noaux_tc) routing and e_score_correction_bias, 1 shared expert, first layer dense.
    "deepseek-v3-like": {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "ep_size": 1,
        "first_k_dense_replace": 1,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 160,
        "kv_lora_rank": 32,
        "max_position_embeddings": 256,
        "moe_intermediate_size": 24,
        "moe_layer_freq": 1,
        "n_group": 4,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": 4,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 3,
        "num_key_value_heads": 4,
        "num_nextn_predict_layers": 1,
        "q_lora_rank": 48,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {
            "beta_fast": 32,
            "beta_slow": 1,
            "factor": 4,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 64,
            "type": "yarn",
        },
        "rope_theta": 10000,
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": 2,
        "topk_method": "noaux_tc",
        "use_cache": True,
        "v_head_dim": 12,
        "vocab_size": 416,
    },
    # GPT-2: learned positions, biases everywhere, LayerNorm, GELU, tied head, n_inner None (= 4*n_embd).
    "gpt2": {
        "activation_function": "gelu_new",
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "attn_pdrop": 0.1,
        "bos_token_id": 0,
        "embd_pdrop": 0.1,
        "eos_token_id": 0,
        "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05,
        "n_ctx": 128,
        "n_embd": 64,
        "n_head": 4,
        "n_inner": None,
        "n_layer": 3,
        "n_positions": 128,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.1,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "use_cache": True,
        "vocab_size": 300,
    },
}

# DeepSeek-V2 with q compression (q_lora_rank set) and group-limited greedy routing: the Lite-like
# config with only these keys changed.
TINY_CONFIGS["deepseek-v2-qlora"] = {
    **TINY_CONFIGS["deepseek-v2-lite-like"],
    "hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 6, "q_lora_rank": 48,
    "n_group": 4, "topk_group": 2, "topk_method": "group_limited_greedy", "routed_scaling_factor": 16.0,
    "n_shared_experts": 1,
}

# Families added in issue 14. Same rule: no two interesting dims coincide; windows and chunks small
# enough (8) to matter at the 16-token prompt and large enough (> 4) for the KV probe.
TINY_CONFIGS.update({
    # Qwen3: q/k RMSNorm over head_dim, explicit head_dim (24) != hidden/heads (64/4).
    "qwen3": {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
        "head_dim": 24, "hidden_size": 64, "intermediate_size": 176, "max_position_embeddings": 256,
        "num_attention_heads": 4, "num_hidden_layers": 3, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False, "use_sliding_window": False,
        "vocab_size": 352,
    },
    # Qwen3-MoE: no shared expert, layer 1 dense by mlp_only_layers, sparse step 1.
    "qwen3-moe": {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "attention_bias": False,
        "decoder_sparse_step": 1, "head_dim": 20, "hidden_size": 64, "intermediate_size": 144,
        "max_position_embeddings": 256, "mlp_only_layers": [1], "moe_intermediate_size": 40, "norm_topk_prob": True,
        "num_attention_heads": 4, "num_experts": 6, "num_experts_per_tok": 2, "num_hidden_layers": 3,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "tie_word_embeddings": False, "vocab_size": 336,
    },
    # Gemma 3 text: sliding_window_pattern 3 (two local, one global), window 8, tied, head_dim 32 != 64/4.
    "gemma3-text": {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "head_dim": 32, "hidden_size": 64,
        "intermediate_size": 160, "max_position_embeddings": 256, "num_attention_heads": 4, "num_hidden_layers": 3,
        "num_key_value_heads": 2, "query_pre_attn_scalar": 32, "sliding_window": 8, "sliding_window_pattern": 3,
        "vocab_size": 368,
    },
    # GLM-4.5: first layer dense, 8 routed + 1 shared expert, biased q/k/v, q/k norms, partial rotary.
    "glm4-moe": {
        "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "attention_bias": True,
        "first_k_dense_replace": 1, "head_dim": 24, "hidden_size": 64, "intermediate_size": 160,
        "max_position_embeddings": 256, "moe_intermediate_size": 28, "n_group": 1, "n_routed_experts": 8,
        "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 6, "num_experts_per_tok": 2,
        "num_hidden_layers": 3, "num_key_value_heads": 2, "num_nextn_predict_layers": 1,
        "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-05, "routed_scaling_factor": 1.0,
        "tie_word_embeddings": False, "topk_group": 1, "use_qk_norm": True, "vocab_size": 304,
    },
    # Llama 4 text: chunk 8, NoPE every 2nd layer, MoE every 2nd layer (interleave step 2) with a shared
    # expert, dense layers of intermediate_size_mlp, weightless L2 q/k norm.
    "llama4-text": {
        "architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text", "attention_bias": False,
        "attention_chunk_size": 8, "head_dim": 20, "hidden_size": 64, "interleave_moe_layer_step": 2,
        "intermediate_size": 48, "intermediate_size_mlp": 136, "max_position_embeddings": 256,
        "no_rope_layer_interval": 2, "num_attention_heads": 4, "num_experts_per_tok": 1, "num_hidden_layers": 4,
        "num_key_value_heads": 2, "num_local_experts": 4, "rms_norm_eps": 1e-05, "tie_word_embeddings": False,
        "use_qk_norm": True, "vocab_size": 328,
    },
    # gpt-oss: window 8 on even layers, sinks, biases on attention, router and experts, top-2 of 4.
    "gpt-oss": {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True, "head_dim": 20,
        "hidden_size": 64, "intermediate_size": 56, "layer_types": ["sliding_attention", "full_attention"] * 2,
        "max_position_embeddings": 256, "num_attention_heads": 4, "num_experts_per_tok": 2, "num_hidden_layers": 4,
        "num_key_value_heads": 2, "num_local_experts": 4, "rms_norm_eps": 1e-05, "sliding_window": 8,
        "swiglu_limit": 7.0, "tie_word_embeddings": False, "vocab_size": 296,
    },
})

# Issue 25's families. DeepSeek Sparse Attention: index_topk (4) below the 16-token prompt, so the indexer's
# choice matters (HF scores every key, then masks: eager FLOPs are dense); GLM-5.2's shared-indexer layers
# (indexer_types "shared": no indexer of their own). MiniMax-M2: q/k RMSNorm over all heads at once.
TINY_CONFIGS.update({
    "glm-moe-dsa": {
        "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "attention_bias": False,
        "first_k_dense_replace": 1, "hidden_size": 64, "index_head_dim": 16, "index_n_heads": 3, "index_topk": 4,
        "indexer_types": ["full", "shared", "full"], "intermediate_size": 144, "kv_lora_rank": 40,
        "max_position_embeddings": 256, "moe_intermediate_size": 24, "n_group": 1, "n_routed_experts": 8,
        "n_shared_experts": 1, "num_attention_heads": 4, "num_experts_per_tok": 2, "num_hidden_layers": 3,
        "num_key_value_heads": 4, "q_lora_rank": 48, "qk_nope_head_dim": 20, "qk_rope_head_dim": 8,
        "rms_norm_eps": 1e-05, "tie_word_embeddings": False, "topk_group": 1, "v_head_dim": 28, "vocab_size": 312,
    },
    "deepseek-v32": {
        "architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32", "attention_bias": False,
        "first_k_dense_replace": 1, "hidden_size": 64, "index_head_dim": 16, "index_n_heads": 5, "index_topk": 4,
        "intermediate_size": 144, "kv_lora_rank": 40, "max_position_embeddings": 256, "moe_intermediate_size": 24,
        "n_group": 1, "n_routed_experts": 8, "n_shared_experts": 1, "num_attention_heads": 4,
        "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_key_value_heads": 4, "q_lora_rank": 48,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "rms_norm_eps": 1e-06, "tie_word_embeddings": False,
        "topk_group": 1, "v_head_dim": 24, "vocab_size": 296,
    },
    # Nemotron-3's MoE layers without Mamba (so the counter sees every matmul): relu^2 experts run in a
    # latent width (24) between D -> latent -> D projections, beside a shared relu^2 MLP of its own width (36).
    "nemotron-h-latent-moe": {
        "model_type": "nemotron_h", "hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 97,
        "hybrid_override_pattern": "*E-E", "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 20,
        "intermediate_size": 88, "mamba_num_heads": 6, "mamba_head_dim": 12, "n_groups": 3, "ssm_state_size": 10,
        "conv_kernel": 4, "chunk_size": 8, "max_position_embeddings": 128, "tie_word_embeddings": False,
        "n_routed_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 28, "n_shared_experts": 1,
        "moe_shared_expert_intermediate_size": 36, "moe_latent_size": 24, "n_group": 1, "topk_group": 1,
    },
    "minimax-m2": {
        "architectures": ["MiniMaxM2ForCausalLM"], "model_type": "minimax_m2", "head_dim": 20, "hidden_size": 64,
        "intermediate_size": 40, "max_position_embeddings": 256, "num_attention_heads": 6, "num_experts_per_tok": 2,
        "num_hidden_layers": 3, "num_key_value_heads": 2, "num_local_experts": 5, "rms_norm_eps": 1e-06,
        "rotary_dim": 10, "tie_word_embeddings": False, "use_qk_norm": True, "qk_norm_type": "per_layer",
        "use_routing_bias": True, "vocab_size": 344,
    },
})

# Constant-state families (Mamba-2 SSD, gated DeltaNet, Nemotron-H's one-op layers). Dims chosen so
# that heads != groups, head_dim != state, and value heads != key heads: a formula mixing them fails.
STATE_CASES = ("mamba2", "qwen3-next", "nemotron-h", "granite-h", "jamba", "falcon-h1", "minimax", "qwen3.5-moe")
TINY_CONFIGS["mamba2"] = {
    "model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 3, "vocab_size": 101, "state_size": 16,
    "expand": 2, "head_dim": 16, "num_heads": 8, "n_groups": 2, "conv_kernel": 4, "chunk_size": 8,
    "tie_word_embeddings": True, "use_bias": False, "use_conv_bias": True,
}
TINY_CONFIGS["qwen3-next"] = {
    "model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 131,
    "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24,
    "linear_num_value_heads": 6, "linear_num_key_heads": 2, "linear_key_head_dim": 12, "linear_value_head_dim": 10,
    "linear_conv_kernel_dim": 4, "num_experts": 5, "num_experts_per_tok": 2, "decoder_sparse_step": 1,
    "moe_intermediate_size": 40, "shared_expert_intermediate_size": 40, "mlp_only_layers": [],
    "full_attention_interval": 2, "partial_rotary_factor": 0.25, "max_position_embeddings": 128,
    "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
}
# Qwen3.5: Qwen3-Next's layers (in_proj split into qkv, z, b, a) in a vision-language config's text_config.
TINY_CONFIGS["qwen3.5-moe"] = {"model_type": "qwen3_5_moe", "tie_word_embeddings": False, "text_config": {
    **{k: v for k, v in TINY_CONFIGS["qwen3-next"].items() if k != "intermediate_size"},
    "model_type": "qwen3_5_moe_text", "attn_output_gate": True}}
TINY_CONFIGS["nemotron-h"] = {
    "model_type": "nemotron_h", "hidden_size": 64, "num_hidden_layers": 5, "vocab_size": 97,
    "hybrid_override_pattern": "M-M*-", "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 20,
    "intermediate_size": 88, "mamba_num_heads": 6, "mamba_head_dim": 12, "n_groups": 3, "ssm_state_size": 10,
    "conv_kernel": 4, "chunk_size": 8, "max_position_embeddings": 128, "tie_word_embeddings": False,
}

TINY_CONFIGS["granite-h"] = {
    "model_type": "granitemoehybrid", "hidden_size": 64, "num_hidden_layers": 3, "vocab_size": 101,
    "intermediate_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
    "num_experts_per_tok": 2, "shared_intermediate_size": 56, "layer_types": ["mamba", "attention", "mamba"],
    "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_n_groups": 2, "mamba_d_state": 12, "mamba_d_conv": 4,
    "mamba_chunk_size": 8, "mamba_expand": 2, "tie_word_embeddings": False,
}
TINY_CONFIGS["jamba"] = {
    "model_type": "jamba", "hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 101, "intermediate_size": 48,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2,
    "attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2, "expert_layer_offset": 1,
    "mamba_d_state": 8, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_dt_rank": 12, "tie_word_embeddings": False,
}
TINY_CONFIGS["falcon-h1"] = {
    "model_type": "falcon_h1", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 101, "intermediate_size": 48,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 20, "mamba_d_ssm": 96, "mamba_n_heads": 8,
    "mamba_d_head": 12, "mamba_n_groups": 2, "mamba_d_state": 12, "mamba_d_conv": 4, "mamba_chunk_size": 8,
    "tie_word_embeddings": False,
}
TINY_CONFIGS["minimax"] = {
    "model_type": "minimax", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 101, "intermediate_size": 48,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 4,
    "num_experts_per_tok": 2, "layer_types": ["linear_attention", "full_attention"], "block_size": 8,
    "tie_word_embeddings": False,
}

# Late-2026 families with attention layers of two shapes (roofline/models/hf_mixed.py). Dims chosen so that the
# global and sliding layers differ in KV heads and head width, values in width from keys, and the window (8) binds.
TINY_CONFIGS["gemma4-moe"] = {"model_type": "gemma4", "tie_word_embeddings": True, "text_config": {
    "model_type": "gemma4_text", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 4, "head_dim": 16, "global_head_dim": 24, "num_global_key_value_heads": 2,
    "attention_k_eq_v": True, "intermediate_size": 96, "vocab_size": 211, "sliding_window": 8,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "enable_moe_block": True, "num_experts": 5, "top_k_experts": 2, "moe_intermediate_size": 40,
    "hidden_size_per_layer_input": 0, "num_kv_shared_layers": 0, "tie_word_embeddings": True,
    "max_position_embeddings": 256}}
TINY_CONFIGS["gemma4-dense"] = {"model_type": "gemma4", "tie_word_embeddings": True, "text_config": {
    **TINY_CONFIGS["gemma4-moe"]["text_config"], "attention_k_eq_v": False, "enable_moe_block": False,
    "num_experts": None, "top_k_experts": None, "moe_intermediate_size": None, "num_global_key_value_heads": None}}
TINY_CONFIGS["mimo-v2-flash"] = {
    "model_type": "mimo_v2_flash", "hidden_size": 64, "num_hidden_layers": 5, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 24, "v_head_dim": 16, "swa_num_attention_heads": 4,
    "swa_num_key_value_heads": 2, "swa_head_dim": 24, "swa_v_head_dim": 16, "hybrid_layer_pattern": [0, 1, 1, 0, 1],
    "moe_layer_freq": [0, 1, 1, 1, 1], "sliding_window": 7, "sliding_window_size": 7, "intermediate_size": 96,
    "moe_intermediate_size": 40, "n_routed_experts": 6, "n_shared_experts": None, "num_experts_per_tok": 2,
    "vocab_size": 199, "add_swa_attention_sink_bias": True, "add_full_attention_sink_bias": False,
    "tie_word_embeddings": False, "max_position_embeddings": 256}
TINY_CONFIGS["step3p7"] = {
    "model_type": "step3p7", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "num_sliding_attention_heads": 6, "head_dim": 24, "vocab_size": 203,
    "intermediate_size": 96, "sliding_window": 8,
    "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
    "moe_layers_enum": "1,2,3", "n_routed_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 40,
    "share_expert_dim": 56, "n_shared_experts": 1, "max_position_embeddings": 256,
    "vision_config": {"width": 32, "layers": 1, "heads": 2, "image_size": 28, "patch_size": 14}}

# MiniMax-M3: dense attention on layer 0, block-sparse (blocks of 4, top 2: 8 keys) on the others, an index head
# per KV head; dense MLP first, then experts beside a shared expert of its own width.
TINY_CONFIGS["minimax-m3"] = {
    "model_type": "minimax_m3", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 40, "dense_intermediate_size": 96,
    "shared_intermediate_size": 56, "n_shared_experts": 1, "num_local_experts": 6, "num_experts_per_tok": 2,
    "moe_layer_freq": [0, 1, 1], "vocab_size": 207, "rotary_dim": 8, "partial_rotary_factor": 0.5,
    "qk_norm_type": "per_head", "use_qk_norm": True, "tie_word_embeddings": False, "max_position_embeddings": 256,
    "bos_token_id": 1, "eos_token_id": 2,
    "sparse_attention_config": {"use_sparse_attention": True, "sparse_attention_freq": [0, 1, 1],
                                "sparse_block_size": 4, "sparse_topk_blocks": 2, "sparse_num_index_heads": 2,
                                "sparse_index_dim": 12, "sparse_local_block": 1}}

# DeepSeek-V4: a window layer, a compressed sparse one (entries of 4 tokens, top 5 kept) and a heavily compressed one
# (entries of 128 tokens: a prompt past 128 gives it entries), 2 residual streams, 2 output groups.
TINY_CONFIGS["deepseek-v4"] = {
    "model_type": "deepseek_v4", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 32, "qk_rope_head_dim": 8, "q_lora_rank": 24, "o_groups": 2,
    "o_lora_rank": 16, "index_n_heads": 3, "index_head_dim": 16, "index_topk": 5, "sliding_window": 8, "hc_mult": 2,
    "n_routed_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 40, "n_shared_experts": 1,
    "num_hash_layers": 1, "vocab_size": 211, "compress_ratios": [0, 4, 128, 4], "max_position_embeddings": 1024,
    "tie_word_embeddings": False, "bos_token_id": 0, "eos_token_id": 1}

# Keys dropped before building a config. Each is metadata that does not change the
# architecture the installed transformers builds:
#   auto_map            -- points at remote "modeling_deepseek.py" code on the Hub; the
#                          built-in deepseek_v2/_v3 classes are used instead, and
#                          dropping the key avoids any remote-code resolution.
#   quantization_config -- DeepSeek-V3's block-FP8 storage description. from_config
#                          ignores it in 5.23, but if it were applied it would add
#                          FP8 scale tensors (weight_scale_inv). We count the logical
#                          (unquantized) parameters.
#   transformers_version, torch_dtype, dtype, _name_or_path, name_or_path -- metadata;
#                          the dtype is chosen explicitly by each function.
_DROP_KEYS = (
    "auto_map",
    "quantization_config",
    "transformers_version",
    "torch_dtype",
    "dtype",
    "_name_or_path",
    "name_or_path",
)


def _hf_config(config: dict[str, Any], *, experts_implementation: str = "eager") -> transformers.PretrainedConfig:
    """Build a transformers config object from a config.json-style dict.

    Fixes applied for the installed transformers (5.23); none changes the architecture:
    * the keys in ``_DROP_KEYS`` are removed (see above);
    * legacy ``rope_scaling`` dicts (deepseek ``{"type": "yarn", ...}``, llama3) need no
      fix: 5.23 converts them to ``rope_parameters`` itself (checked for all bundled
      configs).
    """
    kw = copy.deepcopy(dict(language_model_config(config)))
    model_type = kw.pop("model_type")
    if model_type in FLAT_TEXT_CONFIGS and "text_config" not in kw:  # the hub file is the text model's keys
        kw = {"vision_config": kw.pop("vision_config", None), "text_config": kw}
    if model_type == "mimo_v2_flash":  # the hub file's per-layer lists, in transformers' spelling (it reads only these)
        if "hybrid_layer_pattern" in kw:
            kw["layer_types"] = ["sliding_attention" if p else "full_attention" for p in kw.pop("hybrid_layer_pattern")]
        if isinstance(kw.get("moe_layer_freq"), list):
            kw["mlp_layer_types"] = ["sparse" if m else "dense" for m in kw.pop("moe_layer_freq")]
    if model_type == "minimax_m1":  # MiniMax's remote-code config: transformers' minimax is the same architecture
        model_type = "minimax"
        kw["layer_types"] = ["full_attention" if t else "linear_attention" for t in kw.pop("attn_type_list")]
    for key in _DROP_KEYS:
        kw.pop(key, None)
    cfg = AutoConfig.for_model(model_type, **kw)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = experts_implementation
    return cfg


# Multimodal configs (gemma3, llama4): the language model is built from `text_config` alone, as
# Gemma3ForCausalLM / Llama4ForCausalLM (the vision tower is not counted). Kimi K2 ships DeepSeek-V3's
# modeling code (architectures: DeepseekV3ForCausalLM) under model_type "kimi_k2", which transformers 5.23
# does not register: it is built as deepseek_v3.
TEXT_CONFIG_OF = {"gemma3": "gemma3_text", "gemma4": "gemma4_text", "minimax_m3_vl": "minimax_m3_vl_text",
                  "llama4": "llama4_text", "kimi_k25": "kimi_k2",
                  "qwen3_vl": "qwen3_vl_text", "qwen3_vl_moe": "qwen3_vl_moe_text", "qwen3_5": "qwen3_5_text",
                  "qwen3_5_moe": "qwen3_5_moe_text"}
# MiMo-7B's remote code (XiaomiMiMo/MiMo-7B-Base modeling_mimo.py) is transformers' Qwen2 decoder plus MTP layers,
# which are built for training only: its decoder is transformers' qwen2 (Megatron-Bridge's MimoBridge extends Qwen2's).
# MiniMax-M3's hub file (model_type minimax_m3, remote code) is the text model transformers ships as minimax_m3_vl_text.
# sgl-project's DeepSeek-V4 FP8 configs name the same architecture deepseek_ref.
MODEL_TYPE_ALIASES = {"kimi_k2": "deepseek_v3", "mimo": "qwen2", "minimax_m3": "minimax_m3_vl_text",
                      "deepseek_ref": "deepseek_v4"}
# Step-3.7-Flash's hub config.json lists its text model's keys at the top level; transformers builds the text model
# only inside its vision-language class (Step3p7ForConditionalGeneration), from text_config.
FLAT_TEXT_CONFIGS = ("step3p7",)


def language_model_config(config: dict[str, Any]) -> dict[str, Any]:
    model_type = config.get("model_type")
    if model_type in TEXT_CONFIG_OF:
        text = {"model_type": TEXT_CONFIG_OF[model_type], **config["text_config"]}
        return language_model_config(text) if text["model_type"] in MODEL_TYPE_ALIASES else text
    if model_type in MODEL_TYPE_ALIASES:
        return {**config, "model_type": MODEL_TYPE_ALIASES[model_type]}
    return config


def _build(
    config: dict[str, Any],
    dtype: torch.dtype,
    *,
    experts_implementation: str = "eager",
    device: str | torch.device = "cpu",
) -> torch.nn.Module:
    cfg = _hf_config(config, experts_implementation=experts_implementation)
    torch.manual_seed(0)
    builder = (transformers.AutoModelForImageTextToText if cfg.model_type in FLAT_TEXT_CONFIGS
               else AutoModelForCausalLM)
    with torch.device(device):
        model = builder.from_config(
            cfg,
            dtype=dtype,
            attn_implementation="eager",
            experts_implementation=experts_implementation,
        )
    return model.eval()


def _experts_impl(experts_implementation: str | None, device: str | torch.device) -> str:
    """Default experts implementation: the per-expert loop ("eager") on real tensors.

    The loop uses ``nonzero()``, which cannot run on the meta device. On meta,
    "batched_mm" is used instead. Its FLOP total is the same (top-k semantics), but
    the expert matmuls show up under ``aten.bmm``.
    """
    if experts_implementation is not None:
        return experts_implementation
    return "batched_mm" if torch.device(device).type == "meta" else "eager"


def _vocab_size(config: dict[str, Any]) -> int:
    return int(_hf_config(config).get_text_config().vocab_size)  # the class default where the file leaves it out (gemma3)


# Vision-language configs (issue 25): transformers builds the whole model (AutoModelForImageTextToText); its
# language model and LM head are counted, its vision tower and projector are not (we price text decode).
VISION_LANGUAGE = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe", "kimi_k25", "step3p7")
VISION_PARTS = ("visual", "vision_tower", "vision_model", "mm_projector", "multi_modal_projector")


def hf_text_tower_parameter_count(config: dict[str, Any]) -> int:
    """Parameters of a vision-language model's text tower: every parameter of the full transformers model
    (meta device, tied weights once) outside its vision encoder and projector."""
    kw = {k: v for k, v in copy.deepcopy(config).items() if k not in _DROP_KEYS and k != "architectures"}
    model_type = kw.pop("model_type")
    if model_type in FLAT_TEXT_CONFIGS and "text_config" not in kw:
        kw = {"text_config": kw}
    cfg = AutoConfig.for_model(model_type, **kw)
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(cfg)
    return int(sum(p.numel() for name, p in model.named_parameters()
                   if not any(part in name.split(".") for part in VISION_PARTS)))


def hf_parameter_count(config: dict[str, Any]) -> int:
    """Number of parameters of ``AutoModelForCausalLM.from_config(config)``.

    The model is built on the meta device (no memory is allocated, so it works for
    DeepSeek-V3 671B and Llama-3.1-405B). Counted: ``sum(p.numel() for p in
    model.parameters())``. Tied weights (gemma2, gpt2 lm_head = embeddings) are counted
    once, as ``parameters()`` de-duplicates them. Buffers are NOT counted (RoPE
    ``inv_freq``, deepseek_v3 ``e_score_correction_bias``, gpt2 causal-mask buffers).
    Included: embeddings (and gpt2 learned positions), all norms (with biases for
    LayerNorm), all projection weights and biases, MoE router weights, all routed and
    shared experts, and the LM head if untied. deepseek_v3 MTP layers are not built.
    """
    if config.get("model_type") in VISION_LANGUAGE:
        return hf_text_tower_parameter_count(config)
    model = _build(config, torch.bfloat16, device="meta")
    return int(sum(p.numel() for p in model.parameters()))


def _run_counted(
    config: dict[str, Any],
    batch: int,
    prompt_len: int,
    phase: str,
    *,
    experts_implementation: str | None = None,
    logits_to_keep: int = 0,
    device: str = "cpu",
) -> FlopCounterMode:
    if phase not in ("prefill", "decode"):
        raise ValueError(f"phase must be 'prefill' or 'decode', got {phase!r}")
    if batch < 1 or prompt_len < 1:
        raise ValueError("batch and prompt_len must be >= 1")
    model = _build(
        config, torch.float32, experts_implementation=_experts_impl(experts_implementation, device), device=device
    )
    gen = torch.Generator().manual_seed(0)
    vocab = _vocab_size(config)
    prompt = torch.randint(0, vocab, (batch, prompt_len), generator=gen).to(device)
    # An explicit all-ones 2-D attention mask (no padding) is passed. It changes no matmul,
    # but without it transformers 5.23 probes position_ids for packed sequences with
    # `.all()`, which cannot run on the meta device.
    mask = torch.ones((batch, prompt_len), dtype=torch.long, device=device)
    counter = FlopCounterMode(display=False)
    with torch.no_grad():
        if phase == "prefill":
            with counter:
                model(input_ids=prompt, attention_mask=mask, use_cache=False, logits_to_keep=logits_to_keep)
        else:
            out = model(input_ids=prompt, attention_mask=mask, use_cache=True)
            new_tok = torch.randint(0, vocab, (batch, 1), generator=gen).to(device)
            mask = torch.ones((batch, prompt_len + 1), dtype=torch.long, device=device)
            with counter:
                model(
                    input_ids=new_tok,
                    attention_mask=mask,
                    use_cache=True,
                    logits_to_keep=logits_to_keep,
                    **_cache_argument(out),
                )
    return counter


def _cache_argument(out: Any) -> dict[str, Any]:
    """The cache a forward returned, as the next forward takes it.

    transformers 5.24 returns Mamba-2's cache as ``cache`` (it was ``cache_params`` before, and
    ``past_key_values`` for the other families); a cache that is not passed back is not an error
    there: the decode step silently re-runs the chunked scan and a padded conv from an empty state,
    so an oracle must never fall through to None."""
    for name in ("cache", "past_key_values", "cache_params"):
        cache = getattr(out, name, None)
        if cache is not None:
            return {name: cache}
    raise RuntimeError(f"{type(out).__name__} returned no cache (looked for cache, past_key_values, cache_params)")


def hf_flops(
    config: dict[str, Any],
    batch: int,
    prompt_len: int,
    phase: str,
    *,
    experts_implementation: str | None = None,
    logits_to_keep: int = 0,
    device: str = "cpu",
) -> int:
    """Total FLOPs that ``FlopCounterMode`` counts for one forward pass of the HF model.

    ``phase="prefill"``: one forward of ``batch x prompt_len`` tokens, no cache.
    ``phase="decode"``: a prefill of ``prompt_len`` tokens with ``use_cache=True`` is
    run first (not counted). Then ONE forward of 1 new token per sequence with that
    cache is counted.

    Setup: float32, ``torch.manual_seed(0)`` random init, ``eval()``, ``no_grad()``,
    ``attn_implementation="eager"``. ``logits_to_keep=0`` (the transformers default)
    computes LM-head logits for every position. ``experts_implementation=None``
    means "eager" (the per-expert loop, counted with top-k semantics) on CPU, and
    "batched_mm" (same total) on ``device="meta"``. Do not pass "grouped_mm"
    expecting expert FLOPs: the transformers default is NOT counted by
    FlopCounterMode.

    ``device="meta"`` runs the same forward on meta tensors. FLOPs depend only on
    shapes, so this works for the real 7B-671B configs without allocating memory
    (about 1 s each). It gives the same numbers as CPU for the tiny configs.

    Counted: only matmuls (mm/addmm/bmm/baddbmm), ``2*M*N*K`` each: all projections,
    router, experts, attention scores and P@V (full S x T, see module docstring),
    MLA kv_b_proj over all cached positions, LM head. Not counted: anything elementwise.
    """
    counter = _run_counted(
        config,
        batch,
        prompt_len,
        phase,
        experts_implementation=experts_implementation,
        logits_to_keep=logits_to_keep,
        device=device,
    )
    return int(counter.get_total_flops())


def hf_flops_by_op(
    config: dict[str, Any],
    batch: int,
    prompt_len: int,
    phase: str,
    *,
    experts_implementation: str | None = None,
    logits_to_keep: int = 0,
    device: str = "cpu",
) -> dict[str, int]:
    """Same measurement as :func:`hf_flops`, split by aten op (e.g. ``{"aten.mm": ..., "aten.bmm": ...}``).

    For debugging: with eager attention, ``aten.bmm``/``aten.baddbmm`` are the
    attention score and P@V matmuls, and ``aten.mm``/``aten.addmm`` are the linear layers
    (projections, MLP/experts, router, LM head). With ``experts_implementation="batched_mm"``,
    the experts also show up under ``aten.bmm``.
    """
    counter = _run_counted(
        config,
        batch,
        prompt_len,
        phase,
        experts_implementation=experts_implementation,
        logits_to_keep=logits_to_keep,
        device=device,
    )
    return {str(op): int(n) for op, n in counter.get_flop_counts()["Global"].items()}


def hf_visible_keys(kind: str, size: int, context: int, queries: int) -> tuple[int, int]:
    """(query-key pairs, distinct keys) that transformers' own mask functions let the last `queries`
    positions of a `context`-token sequence see, for one sequence and head.

    kind: "chunked" (``chunked_causal_mask_function``: Llama 4) or "sliding"
    (``sliding_window_causal_mask_function``: Mistral, Gemma, gpt-oss), with ``size`` the chunk or window.
    This is the mask, not the compute: eager attention multiplies the full score matrix and masks it
    (FlopCounterMode sees every pair), so the mask is the oracle for what a masked kernel must do.
    """
    from transformers import masking_utils

    if kind == "chunked":
        fn = masking_utils.chunked_causal_mask_function(size, torch.zeros(1, dtype=torch.long))
    elif kind == "sliding":
        fn = masking_utils.sliding_window_causal_mask_function(size)
    else:
        raise ValueError(f"kind must be 'chunked' or 'sliding', got {kind!r}")
    q_idx = torch.arange(context - queries, context).view(-1, 1)
    kv_idx = torch.arange(context).view(1, -1)
    zero = torch.zeros((), dtype=torch.long)
    visible = torch.as_tensor(fn(zero, zero, q_idx, kv_idx)).expand(queries, context)
    return int(visible.sum()), int(visible.any(dim=0).sum())


def _tensors_of(value: Any) -> list:
    """A cache attribute's tensors: a tensor, or a list or dict of them (linear-attention layers keep
    ``conv_states`` / ``recurrent_states`` as dicts by state index)."""
    if isinstance(value, dict):
        return list(value.values())
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _cache_tensors(cache: Any) -> list[torch.Tensor]:
    """All tensors held by a transformers cache object (5.x ``Cache`` with ``.layers``, or a legacy tuple)."""
    tensors: list[torch.Tensor] = []
    if hasattr(cache, "layers"):  # transformers >= 4.56: Cache.layers[i].keys / .values
        for layer in cache.layers:  # linear-attention layers: .conv_states / .recurrent_states (lists)
            for name in ("keys", "values", "indexer_keys", "idx_keys", "conv_states", "recurrent_states"):
                t = getattr(layer, name, None)
                for item in _tensors_of(t):
                    if isinstance(item, torch.Tensor):
                        tensors.append(item)
    elif hasattr(cache, "key_cache"):  # older DynamicCache
        tensors.extend(t for t in cache.key_cache if isinstance(t, torch.Tensor))
        tensors.extend(t for t in cache.value_cache if isinstance(t, torch.Tensor))
    else:  # legacy tuple of (k, v) per layer
        for layer in cache:
            tensors.extend(t for t in layer if isinstance(t, torch.Tensor))
    return tensors


def hf_kv_cache_bytes_per_token(
    config: dict[str, Any], dtype: torch.dtype = torch.bfloat16, *, device: str = "cpu"
) -> int:
    """KV-cache bytes per token (summed over all layers) that HF stores after a prefill.

    The model is built in ``dtype``. A prefill of batch 2 x prompt 4 runs with
    ``use_cache=True``. The bytes of every tensor in the returned cache
    (``layer.keys`` and ``layer.values`` for all layers) are summed and divided by
    ``batch * prompt_len``. A sliding-window layer keeps only the last ``window - 1``
    tokens, so the 4-token prompt must be at most ``window - 1`` (checked: window >= 5).
    Then every layer holds all tokens, and the result is the per-token cost before the
    window caps it. For MLA (deepseek) the cache holds the compressed latent:
    ``kv_lora_rank + qk_rope_head_dim`` values per layer per token (see module
    docstring); a DeepSeek Sparse Attention layer adds its indexer's key (``index_head_dim``).
    ``device="meta"`` works for the real (large) configs, as it does in :func:`hf_flops`.
    """
    batch, prompt_len = 2, 4
    config = language_model_config(config)
    window = config.get("sliding_window")
    uses_window = window is not None and not (
        config.get("model_type") == "qwen2" and not config.get("use_sliding_window", False)
    )
    if uses_window and prompt_len > int(window) - 1:
        raise ValueError(f"sliding_window {window} too small for a {prompt_len}-token probe prompt")
    model = _build(config, dtype, experts_implementation=_experts_impl(None, device), device=device)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, _vocab_size(config), (batch, prompt_len), generator=gen).to(device)
    mask = torch.ones((batch, prompt_len), dtype=torch.long, device=device)
    with torch.no_grad():
        out = model(input_ids=prompt, attention_mask=mask, use_cache=True)
    total = sum(t.numel() * t.element_size() for t in _cache_tensors(out.past_key_values))
    per_token, rem = divmod(total, batch * prompt_len)
    if rem:
        raise AssertionError(f"cache bytes {total} not divisible by {batch * prompt_len} tokens")
    return int(per_token)


def hf_cache_bytes(config: dict[str, Any], batch: int, prompt_len: int, dtype: torch.dtype = torch.bfloat16,
                   *, device: str = "cpu") -> dict[str, int]:
    """Bytes of every tensor a prefill's cache holds, by kind: ``kv`` (keys, values of attention
    layers, growing with the prompt) and ``state`` (``conv_states`` and ``recurrent_states`` of
    Mamba-2 / gated-DeltaNet layers, whatever the prompt). Found by experiment (transformers 5.23):
    Mamba-2, Nemotron-H, Granite-4.0-H and Falcon-H1 keep ``conv_states`` (B, conv channels, conv_kernel)
    in the model dtype and ``recurrent_states`` (B, heads, head_dim, d_state) in float32; Qwen3-Next keeps
    its conv state (B, 2 key_dim + value_dim, conv_kernel) and its recurrent state (B, value heads, key dim,
    value dim) in float32 too; Jamba (Mamba-1) keeps (B, d_inner, d_conv) and (B, d_inner, d_state);
    MiniMax keeps its lightning-attention state (B, heads, head_dim, head_dim) in ``cache.linear_cache``.
    DeepSeek Sparse Attention layers (deepseek_v32, glm_moe_dsa) also keep their indexer's keys
    (B, S, index_head_dim) in ``indexer_keys``, growing with the prompt: counted as ``kv``."""
    model = _build(config, dtype, device=device)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, _vocab_size(config), (batch, prompt_len), generator=gen).to(device)
    mask = torch.ones((batch, prompt_len), dtype=torch.long, device=device)
    with torch.no_grad():
        out = model(input_ids=prompt, attention_mask=mask, use_cache=True)
    cache = _cache_argument(out).popitem()[1]
    totals = {"kv": 0, "state": 0}
    for layer in cache.layers:
        for name in ("keys", "values", "indexer_keys", "idx_keys", "conv_states", "recurrent_states"):
            t = getattr(layer, name, None)
            for item in _tensors_of(t):
                if isinstance(item, torch.Tensor):
                    kind = "kv" if name in ("keys", "values", "indexer_keys", "idx_keys") else "state"
                    totals[kind] += item.numel() * item.element_size()
    for item in getattr(cache, "linear_cache", []):  # MiniMaxCache: one (B, heads, head_dim, head_dim) per layer
        if isinstance(item, torch.Tensor):
            totals["state"] += item.numel() * item.element_size()
    return totals


def hf_compressed_cache_bytes(config: dict[str, Any], prompt_len: int, dtype: torch.dtype = torch.bfloat16) -> int:
    """Bytes a DeepSeek-V4 cache holds after a prefill of one sequence, each tensor once: the window's K=V tensor
    (``keys`` and ``values`` are one storage), every layer's compressed entries, and the pooling buffers and overlap
    state of windows not yet closed (``buffer_kv``, ``buffer_gate``, ``overlap_kv``, ``overlap_gate``)."""
    model = _build(config, dtype)
    prompt = torch.randint(0, _vocab_size(config), (1, prompt_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(input_ids=prompt, attention_mask=torch.ones_like(prompt), use_cache=True)
    cache = _cache_argument(out).popitem()[1]
    seen, total = set(), 0
    for layer in cache.layers:
        tensors = [layer.keys, layer.values]
        for name in ("compressed_kv", "buffer_kv", "buffer_gate", "overlap_kv", "overlap_gate"):
            tensors += list((getattr(layer, name, None) or {}).values())
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
                seen.add(t.untyped_storage().data_ptr())
                total += t.numel() * t.element_size()
    return total


if __name__ == "__main__":
    import time

    print(f"transformers {TRANSFORMERS_VERSION}, torch {torch.__version__}")
    header = f"{'case':24s} {'params':>10s} {'prefill(2,16)':>14s} {'decode(2,16)':>13s} {'kv B/tok':>9s} {'s':>5s}"
    print(header)
    t_all = time.time()
    for name, cfg in TINY_CONFIGS.items():
        t0 = time.time()
        n = hf_parameter_count(cfg)
        fp = hf_flops(cfg, 2, 16, "prefill")
        fd = hf_flops(cfg, 2, 16, "decode")
        kv = hf_kv_cache_bytes_per_token(cfg)
        print(f"{name:24s} {n:10d} {fp:14d} {fd:13d} {kv:9d} {time.time() - t0:5.2f}")
    print(f"total {time.time() - t_all:.1f}s")
