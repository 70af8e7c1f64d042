"""The Hugging Face keys of the attention families, read for `ModelConfig.from_hf_config` only.

llama, mistral, mixtral, qwen2, gemma2, deepseek_v2/v3, gpt2, and issue 14's qwen3, qwen3_moe, gemma3,
glm4_moe, kimi_k2, llama4 and gpt_oss: one small parser per family, each returning the fields of a
ModelConfig. A field that cannot be read names itself, the file and the fix (`_bad`); the hybrid and
constant-state families' keys are in config_state.py, which shares these readers.
"""
from __future__ import annotations

from .layer_kinds import (CHUNKED, DENSE, GLOBAL, MAX_DIMENSION, MAX_LAYERS, MOE, NONE, SHARED_SPARSE, SPARSE, WINDOW, _whole,
                     dense_of_width)

# Multimodal configs whose language model sits in `text_config`, and that model's type. Vision-language
# models (Qwen3-VL, Kimi-K2.5) are priced as their text tower: text decode, no image tokens, no vision encoder.
TEXT_CONFIG_OF = {"gemma3": "gemma3_text", "gemma4": "gemma4_text", "minimax_m3_vl": "minimax_m3_vl_text",
                  "llama4": "llama4_text", "qwen3_vl": "qwen3_vl_text",
                  "qwen3_vl_moe": "qwen3_vl_moe_text", "kimi_k25": "kimi_k2"}
# Keys a reference checkpoint's config.json leaves to its transformers class default (the defaults of
# Gemma3TextConfig and Llama4TextConfig name those checkpoints: gemma-3 and Llama-4-Scout).
CLASS_DEFAULTS = {"gemma3_text": {"vocab_size": 262_208, "max_position_embeddings": 131_072,
                                  "tie_word_embeddings": True, "head_dim": 256, "sliding_window_pattern": 6},
                  "llama4_text": {"vocab_size": 202_048, "head_dim": 128, "intermediate_size_mlp": 16_384,
                                  "attention_chunk_size": 8192, "no_rope_layer_interval": 4, "use_qk_norm": True,
                                  "interleave_moe_layer_step": 1, "num_local_experts": 16, "num_experts_per_tok": 1}}
# Hugging Face's per-layer attention kinds (config.json `layer_types`) and ours.
LAYER_TYPES = {"full_attention": GLOBAL, "sliding_attention": WINDOW, "chunked_attention": CHUNKED}
SPARSE_LAYER_TYPES = ("indexed_attention", "deepseek_sparse_attention")  # DSA layers: indexer_types says which kind
# A text_config's model_type other than the one TEXT_CONFIG_OF names, for the same architecture (NVIDIA's
# Kimi-K2.5 checkpoints name DeepSeek-V3, whose architecture Kimi K2 ships).
TEXT_CONFIG_ALIASES = {"kimi_k25": ("deepseek_v3",)}


def _bad(name: str, key: str, value, expected: str, fix: str = "") -> ValueError:
    """The one shape of a bad-field message: the file, the field, what was found, what is expected, the fix."""
    fix = fix or f"set {key!r} to {expected} as in the model's published config.json, or remove it if optional"
    return ValueError(f"config {name!r}: field {key!r} must be {expected}, got {value!r}; fix: {fix}")


def _require(hf: dict, key: str, name: str):
    value = hf.get(key)
    if value is None:
        raise ValueError(f"config {name!r}: missing field {key!r}; fix: add it (a positive integer) from the "
                         f"model's published config.json")
    if not _whole(value) or value <= 0 or value > _ceiling(key):
        raise _bad(name, key, value, f"a positive integer up to {_ceiling(key)}")
    return value


def _ceiling(key: str) -> int:
    return MAX_LAYERS if key in ("num_hidden_layers", "n_layer") else MAX_DIMENSION


def _optional(hf: dict, key: str, name: str, default: int = 0, minimum: int = 0, fix: str = "") -> int:
    value = hf.get(key)
    if value is None:
        return default
    if not _whole(value) or not minimum <= value <= MAX_DIMENSION:
        raise _bad(name, key, value, "a positive integer" if minimum == 1 else "a non-negative integer", fix)
    return value


def _flag(hf: dict, key: str, name: str, default: bool = False) -> bool:
    value = hf.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(name, key, value, "true or false")
    return value


def _trained_positions(hf: dict, name: str) -> int:
    """max_position_embeddings; absent is unknown (no window check), 0 would silently turn the check off."""
    return _optional(hf, "max_position_embeddings", name, minimum=1,
                     fix="give the trained context length in tokens (e.g. 8192), or remove the field if unknown")


def _max_positions(hf: dict, name: str) -> int:
    """Trained positions, extended by rope scaling (linear, dynamic, yarn: factor x the original length;
    llama3-style files already list the extended length as max_position_embeddings)."""
    trained = _trained_positions(hf, name)
    scaling = hf.get("rope_scaling")
    if scaling is None:
        return trained
    if not isinstance(scaling, dict):
        raise _bad(name, "rope_scaling", scaling, "an object such as {\"rope_type\": \"yarn\", \"factor\": 4.0} or null")
    factor = scaling.get("factor", 1.0)
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 1 <= factor < 1e6:
        raise _bad(name, "rope_scaling.factor", factor, "a number >= 1")
    original = _optional(scaling, "original_max_position_embeddings", name)
    kind = scaling.get("rope_type", scaling.get("type"))
    if original:
        return max(trained, int(factor * original))
    return int(factor * trained) if kind in ("linear", "dynamic", "yarn") else trained


def kv_heads_and_head_dim(hf: dict, name: str, d_model: int, n_heads: int) -> dict:
    """KV heads and head width. Absent, they are transformers' defaults (multi-head attention, hidden / heads);
    present, they must be positive: a 0 is a typo, not a request for those defaults."""
    return dict(
        n_kv_heads=_optional(hf, "num_key_value_heads", name, default=n_heads, minimum=1,
                             fix="give the KV head count (e.g. 8 for GQA), or remove the field for multi-head attention"),
        head_dim=_optional(hf, "head_dim", name, default=d_model // n_heads, minimum=1,
                           fix="give the per-head width (e.g. 128), or remove the field for hidden_size / heads"))


def decoder_fields(hf: dict, family: str, name: str) -> dict:
    d_model = _require(hf, "hidden_size", name)
    n_layers = _require(hf, "num_hidden_layers", name)
    n_heads = _require(hf, "num_attention_heads", name)
    fields = dict(
        d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        **kv_heads_and_head_dim(hf, name, d_model, n_heads),
        d_ff=_require(hf, "intermediate_size", name),
        vocab_size=_require(hf, "vocab_size", name),
        tied_embeddings=_flag(hf, "tie_word_embeddings", name, family == "gemma2"),
        max_positions=_max_positions(hf, name),
    )
    if family in ("llama", "mistral", "mixtral"):
        bias = _flag(hf, "attention_bias", name)
        fields.update(qkv_bias=bias, out_bias=bias, mlp_bias=_flag(hf, "mlp_bias", name))
    if family in ("qwen2", "mimo"):
        # Qwen2 architecture: q/k/v projections carry a bias, o_proj none. MiMo-7B is Qwen2's decoder plus
        # multi-token-prediction layers (num_nextn_predict_layers), not counted here, as DeepSeek-V3's are not.
        fields.update(qkv_bias=True)
    fields.update(_attention_pattern(hf, family, n_layers, name))
    if family == "gemma2":
        fields.update(norms_per_layer=4)
    if family == "mixtral":
        fields.update(n_experts=_require(hf, "num_local_experts", name), top_k=_require(hf, "num_experts_per_tok", name),
                      d_expert=fields["d_ff"])
    if family in ("deepseek_v2", "deepseek_v3"):
        fields.update(_deepseek_fields(hf, family, n_layers, name))
    if family in NEWER_FAMILIES:
        fields.update(NEWER_FAMILIES[family](hf, fields, name))
    return fields


def _layer_types(hf: dict, n_layers: int, name: str) -> tuple:
    types = hf["layer_types"]
    if (not isinstance(types, list) or len(types) != n_layers
            or not all(isinstance(t, str) for t in types)):
        raise _bad(name, "layer_types", types, f"a list of {n_layers} strings (one per layer, e.g. "
                   f"\"sliding_attention\" or \"full_attention\")", "list one type per layer, or remove the field")
    for i, kind in enumerate(types):
        if kind not in LAYER_TYPES:
            raise _bad(name, f"layer_types[{i}]", kind, f"one of {', '.join(LAYER_TYPES)}",
                       "this layer kind is not modelled; use a supported one or a supported model")
    return tuple(LAYER_TYPES[t] for t in types)


def _attention_pattern(hf: dict, family: str, n_layers: int, name: str) -> dict:
    window = _optional(hf, "sliding_window", name, fix="give the window in tokens (e.g. 4096), or null for none")
    if family in ("deepseek_v32", "glm_moe_dsa") and isinstance(hf.get("layer_types"), list) and all(
            t in SPARSE_LAYER_TYPES for t in hf["layer_types"]):
        pattern = (GLOBAL,) * n_layers  # every layer DSA: _sparse_mla_fields sets the pattern from indexer_types
    elif "layer_types" in hf and hf["layer_types"]:
        pattern = _layer_types(hf, n_layers, name)
    elif family == "mistral" and window:
        pattern = (WINDOW,) * n_layers
    elif family == "gemma2":
        # transformers' Gemma2: layer i uses the sliding window when i is even, full attention when odd.
        pattern = tuple(WINDOW if i % 2 == 0 else GLOBAL for i in range(n_layers))
    elif family in ("qwen2", "qwen3", "qwen3_moe") and _flag(hf, "use_sliding_window", name) and window:
        first = _optional(hf, "max_window_layers", name, default=n_layers)
        pattern = tuple(WINDOW if i >= first else GLOBAL for i in range(n_layers))
    else:
        pattern = (GLOBAL,) * n_layers
    if WINDOW in pattern and not window:
        raise ValueError(f"config {name!r}: field 'sliding_window' must be a positive integer when layers use "
                         f"sliding-window attention, got {hf.get('sliding_window')!r}; fix: give the window in tokens "
                         f"(e.g. 4096)")
    return dict(window=window if WINDOW in pattern else 0, layer_attention=pattern)


def _leading_dense_layers(hf: dict, n_layers: int, name: str, example: int) -> int:
    """first_k_dense_replace: how many leading layers keep a dense MLP; more than the layers is a typo."""
    first_dense = _optional(hf, "first_k_dense_replace", name, fix=f"give the number of leading dense layers as a "
                            f"whole number (e.g. {example}), or remove it (0)")
    if first_dense > n_layers:
        raise _bad(name, "first_k_dense_replace", first_dense, f"at most num_hidden_layers ({n_layers})",
                   f"give the number of leading dense layers (e.g. {example}), at most {n_layers}")
    return first_dense


def _deepseek_fields(hf: dict, family: str, n_layers: int, name: str) -> dict:
    first_dense = _leading_dense_layers(hf, n_layers, name, example=3)
    every = _optional(hf, "moe_layer_freq", name, default=1, minimum=1,
                      fix="set it to 1 (every layer from first_k_dense_replace on is MoE) or remove it")
    n_experts = _optional(hf, "n_routed_experts", name)
    layer_mlp = tuple(MOE if n_experts and i >= first_dense and i % every == 0 else DENSE for i in range(n_layers))
    rope = _require(hf, "qk_rope_head_dim", name)
    nope = _require(hf, "qk_nope_head_dim", name)
    return dict(
        layer_mlp=layer_mlp, n_experts=n_experts,
        top_k=_optional(hf, "num_experts_per_tok", name), d_expert=_optional(hf, "moe_intermediate_size", name),
        n_shared_experts=_optional(hf, "n_shared_experts", name), router_bias=family == "deepseek_v3",
        kv_lora_rank=_require(hf, "kv_lora_rank", name), q_lora_rank=_optional(hf, "q_lora_rank", name),
        qk_rope_dim=rope, qk_nope_dim=nope, v_head_dim=_require(hf, "v_head_dim", name),
        head_dim=rope + nope, n_kv_heads=_require(hf, "num_attention_heads", name),
    )


def language_model(hf: dict, family: str, name: str) -> tuple[dict, str]:
    """A multimodal config's language model (its `text_config`), with the class defaults its file leaves out."""
    if family in TEXT_CONFIG_OF:
        text = hf.get("text_config")
        if not isinstance(text, dict):
            raise _bad(name, "text_config", text, "an object (the language model's config)",
                       f"a {family!r} config holds its language model in text_config; copy it from the published file")
        family = text.get("model_type", TEXT_CONFIG_OF[family])
        if family in TEXT_CONFIG_ALIASES.get(hf["model_type"], ()):
            family = TEXT_CONFIG_OF[hf["model_type"]]
        if family != TEXT_CONFIG_OF[hf["model_type"]]:
            raise _bad(name, "text_config.model_type", family, repr(TEXT_CONFIG_OF[hf["model_type"]]))
        # A top-level tie_word_embeddings (Qwen3-VL-2B/4B) applies to the text tower unless it says otherwise.
        hf = {"tie_word_embeddings": hf["tie_word_embeddings"], **text} if "tie_word_embeddings" in hf else text
    return {**CLASS_DEFAULTS.get(family, {}), **hf}, family


def _int_list(hf: dict, key: str, name: str, below: int) -> list:
    value = hf.get(key) or []
    if not isinstance(value, list) or not all(_whole(v) and 0 <= v < below for v in value):
        raise _bad(name, key, value, f"a list of layer indices in [0, {below})")
    return value


def _qwen3_fields(hf: dict, fields: dict, name: str) -> dict:
    """Qwen3: q/k RMSNorm over each head; attention_bias on q, k, v and o."""
    bias = _flag(hf, "attention_bias", name)
    return dict(qk_norm="rms", qkv_bias=bias, out_bias=bias)


def _qwen3_moe_fields(hf: dict, fields: dict, name: str) -> dict:
    """Qwen3-MoE: layer i is MoE unless listed in mlp_only_layers or (i+1) is not a multiple of
    decoder_sparse_step (transformers' Qwen3MoeDecoderLayer); no shared expert."""
    n_layers, n_experts = fields["n_layers"], _optional(hf, "num_experts", name)
    step = _optional(hf, "decoder_sparse_step", name, default=1, minimum=1,
                     fix="set it to 1 (every layer MoE) or the spacing of MoE layers")
    dense = set(_int_list(hf, "mlp_only_layers", name, n_layers))
    layer_mlp = tuple(MOE if n_experts and i not in dense and (i + 1) % step == 0 else DENSE for i in range(n_layers))
    return dict(_qwen3_fields(hf, fields, name), layer_mlp=layer_mlp, n_experts=n_experts,
                top_k=_optional(hf, "num_experts_per_tok", name), d_expert=_optional(hf, "moe_intermediate_size", name))


def _gemma3_fields(hf: dict, fields: dict, name: str) -> dict:
    """Gemma 3: 5 sliding-window layers to 1 global (layer_types, else sliding_window_pattern), q/k norms,
    4 norms a layer; max_position_embeddings already counts the linear rope scaling of global layers."""
    n_layers = fields["n_layers"]
    if not hf.get("layer_types"):
        every = _optional(hf, "sliding_window_pattern", name, default=6, minimum=1,
                          fix="give the period of global layers (6: five sliding, then one global)")
        hf = {**hf, "layer_types": ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(n_layers)]}
    bias = _flag(hf, "attention_bias", name)
    return dict(_attention_pattern(hf, "gemma3_text", n_layers, name), qk_norm="rms", norms_per_layer=4,
                qkv_bias=bias, out_bias=bias, max_positions=_trained_positions(hf, name))


def _glm4_moe_fields(hf: dict, fields: dict, name: str) -> dict:
    """GLM-4.5: DeepSeek-V3-style MoE (first_k_dense_replace dense layers, shared experts, a routing-bias
    buffer) on GQA attention with biased q/k/v, optional q/k norms; the MTP layer is not counted."""
    n_layers, n_experts = fields["n_layers"], _optional(hf, "n_routed_experts", name)
    first_dense = _leading_dense_layers(hf, n_layers, name, example=1)
    return dict(
        qkv_bias=_flag(hf, "attention_bias", name), qk_norm="rms" if _flag(hf, "use_qk_norm", name) else "",
        layer_mlp=tuple(MOE if n_experts and i >= first_dense else DENSE for i in range(n_layers)),
        n_experts=n_experts, top_k=_optional(hf, "num_experts_per_tok", name),
        d_expert=_optional(hf, "moe_intermediate_size", name), n_shared_experts=_optional(hf, "n_shared_experts", name),
        router_bias=True,
    )


def _kimi_k2_fields(hf: dict, fields: dict, name: str) -> dict:
    """Kimi K2 ships DeepSeek-V3's architecture (DeepseekV3ForCausalLM) under model_type kimi_k2."""
    return _deepseek_fields(hf, "deepseek_v3", fields["n_layers"], name)


def _llama4_fields(hf: dict, fields: dict, name: str) -> dict:
    """Llama 4 text model: chunked attention on rope layers, a global NoPE layer every no_rope_layer_interval-th
    (no_rope_layers: 1 = rope), MoE layers every interleave_moe_layer_step-th (or moe_layers) with one shared
    expert of the experts' width, dense layers of intermediate_size_mlp, and a weightless L2 q/k norm."""
    n_layers = fields["n_layers"]
    every = _optional(hf, "no_rope_layer_interval", name, default=4, minimum=1)
    rope = hf.get("no_rope_layers") or [int((i + 1) % every != 0) for i in range(n_layers)]
    if not isinstance(rope, list) or len(rope) != n_layers or set(rope) - {0, 1}:
        raise _bad(name, "no_rope_layers", rope, f"a list of {n_layers} values 0 (NoPE) or 1 (rope)")
    if not hf.get("layer_types"):
        hf = {**hf, "layer_types": ["chunked_attention" if r else "full_attention" for r in rope]}
    attention = _layer_types(hf, n_layers, name)
    chunk = _optional(hf, "attention_chunk_size", name, fix="give the chunk length in tokens (8192 in Llama 4)")
    if CHUNKED in attention and not chunk:
        raise _bad(name, "attention_chunk_size", hf.get("attention_chunk_size"), "a positive integer when layers "
                   "use chunked attention", "give the chunk length in tokens (8192 in Llama 4)")
    step = _optional(hf, "interleave_moe_layer_step", name, default=1, minimum=1)
    moe = hf.get("moe_layers")
    moe = set(range(step - 1, n_layers, step) if moe is None else _int_list(hf, "moe_layers", name, n_layers))
    bias = _flag(hf, "attention_bias", name)
    return dict(
        d_ff=_require(hf, "intermediate_size_mlp", name), layer_attention=attention, chunk=chunk if CHUNKED in attention else 0,
        window=0, layer_mlp=tuple(MOE if i in moe else DENSE for i in range(n_layers)),
        n_experts=_require(hf, "num_local_experts", name), top_k=_require(hf, "num_experts_per_tok", name),
        d_expert=_require(hf, "intermediate_size", name), n_shared_experts=1, qkv_bias=bias, out_bias=bias,
        qk_norm="l2" if _flag(hf, "use_qk_norm", name) else "",
    )


def _gpt_oss_fields(hf: dict, fields: dict, name: str) -> dict:
    """gpt-oss: sliding-window (128) and full layers alternating (layer_types), attention sinks, biases on
    q/k/v/o, the router and every expert; every layer MoE with experts of intermediate_size."""
    bias = _flag(hf, "attention_bias", name)
    top_k = hf.get("num_experts_per_tok", hf.get("experts_per_token"))
    return dict(
        qkv_bias=bias, out_bias=bias, attention_sinks=True, router_param_bias=True, expert_bias=True,
        n_experts=_require(hf, "num_local_experts", name),
        top_k=_require({"num_experts_per_tok": top_k}, "num_experts_per_tok", name),
        d_expert=fields["d_ff"], layer_mlp=(MOE,) * fields["n_layers"],
    )


def _minimax_m2_fields(hf: dict, fields: dict, name: str) -> dict:
    """MiniMax-M2: full GQA attention on every layer, one RMSNorm over all query heads and one over all key
    heads (qk_norm_type "per_layer"), every layer MoE (sigmoid router with a routing-bias buffer), no shared
    expert. The MTP modules are not counted (transformers does not build them)."""
    if _optional(hf, "shared_intermediate_size", name):
        raise _bad(name, "shared_intermediate_size", hf["shared_intermediate_size"], "0 (MiniMax-M2 has no shared "
                   "expert)", "remove it; a shared expert beside MiniMax-M2's experts is not modelled")
    norm_type = hf.get("qk_norm_type", "per_layer")
    if _flag(hf, "use_qk_norm", name, True) and norm_type != "per_layer":
        raise _bad(name, "qk_norm_type", norm_type, "\"per_layer\" (one norm over all heads)",
                   "only MiniMax-M2's per_layer q/k norm is modelled")
    d_expert = _require(hf, "intermediate_size", name)
    return dict(
        qk_norm="rms_all" if _flag(hf, "use_qk_norm", name, True) else "", layer_mlp=(MOE,) * fields["n_layers"],
        n_experts=_require(hf, "num_local_experts", name), top_k=_require(hf, "num_experts_per_tok", name),
        d_expert=d_expert, router_bias=_flag(hf, "use_routing_bias", name, True),
    )


def _indexer_types(hf: dict, n_layers: int, name: str) -> tuple:
    """Which layers run their own DSA indexer ("full") and which reuse the last one's top-k ("shared"): the
    list, else index_topk_pattern ("FSS..."), else every index_topk_freq-th layer from index_skip_topk_offset
    (transformers' GlmMoeDsaConfig; DeepSeek-V3.2 and GLM-5/5.1 index on every layer)."""
    types = hf.get("indexer_types")
    if types is None and isinstance(hf.get("index_topk_pattern"), str):
        types = [{"F": "full", "S": "shared"}.get(c, c) for c in hf["index_topk_pattern"]]
    if types is None:
        every = _optional(hf, "index_topk_freq", name, default=1) or 1
        offset = _optional(hf, "index_skip_topk_offset", name, default=2)
        types = ["full" if max(i - offset + 1, 0) % every == 0 else "shared" for i in range(n_layers)]
    if not isinstance(types, list) or len(types) != n_layers or not all(t in ("full", "shared") for t in types):
        raise _bad(name, "indexer_types", types, f"a list of {n_layers} entries, each \"full\" or \"shared\"")
    return tuple(SPARSE if t == "full" else SHARED_SPARSE for t in types)


def _sparse_mla_fields(hf: dict, fields: dict, name: str) -> dict:
    """DeepSeek-V3.2 and GLM-5 (glm_moe_dsa): DeepSeek-V3's MLA and MoE, every layer's attention sparse (DSA):
    a lightning indexer of index_n_heads x index_head_dim picks index_topk keys (sparse_ops)."""
    n_layers = fields["n_layers"]
    mla = _deepseek_fields(hf, "deepseek_v3", n_layers, name)
    dense = hf.get("mlp_layer_types")  # GLM-5's explicit per-layer list ("dense" / "sparse")
    if dense is not None:
        if not isinstance(dense, list) or len(dense) != n_layers or not all(t in ("dense", "sparse") for t in dense):
            raise _bad(name, "mlp_layer_types", dense, f"a list of {n_layers} entries, each \"dense\" or \"sparse\"")
        mla["layer_mlp"] = tuple(MOE if t == "sparse" else DENSE for t in dense)
    return dict(mla, layer_attention=_indexer_types(hf, n_layers, name),
                index_heads=_require(hf, "index_n_heads", name), index_head_dim=_require(hf, "index_head_dim", name),
                index_topk=_require(hf, "index_topk", name))


NEWER_FAMILIES = {"qwen3": _qwen3_fields, "qwen3_moe": _qwen3_moe_fields, "gemma3_text": _gemma3_fields,
                  "glm4_moe": _glm4_moe_fields, "kimi_k2": _kimi_k2_fields, "llama4_text": _llama4_fields,
                  "gpt_oss": _gpt_oss_fields, "minimax_m2": _minimax_m2_fields, "deepseek_v32": _sparse_mla_fields,
                  "glm_moe_dsa": _sparse_mla_fields, "qwen3_vl_text": _qwen3_fields,
                  "qwen3_vl_moe_text": _qwen3_moe_fields}


def gpt2_fields(hf: dict, name: str) -> dict:
    d_model = _require(hf, "n_embd", name)
    n_heads = _require(hf, "n_head", name)
    positions = _require(hf, "n_positions", name)
    return dict(
        d_model=d_model, n_layers=_require(hf, "n_layer", name), n_heads=n_heads, n_kv_heads=n_heads,
        head_dim=d_model // n_heads,  # GPT-2 defines the head size as n_embd / n_head
        d_ff=_optional(hf, "n_inner", name) or 4 * d_model, vocab_size=_require(hf, "vocab_size", name),
        gated_mlp=False, layer_norm=True, tied_embeddings=_flag(hf, "tie_word_embeddings", name, True),
        learned_positions=positions, qkv_bias=True, out_bias=True, mlp_bias=True, max_positions=positions,
    )


def nemotron_nas_fields(hf: dict, name: str) -> dict:
    """Nemotron-NAS (DeciLM, Llama-3.3-Nemotron-Super-49B): a Llama decoder searched layer by layer; each of
    block_configs drops its attention (no_op: no attention, no input norm) or keeps GQA with n_heads_in_group
    query heads per KV head, and drops its MLP or sizes it by ffn_mult: F' = 2 ffn_mult D / 3 rounded up to a
    multiple of 256 (DeciLM's _ffn_mult_to_intermediate_size)."""
    n_layers = _require(hf, "num_hidden_layers", name)
    blocks = hf.get("block_configs")
    if not isinstance(blocks, list) or len(blocks) != n_layers or not all(
            isinstance(b, dict) and isinstance(b.get("attention"), dict) and isinstance(b.get("ffn"), dict) for b in blocks):
        raise _bad(name, "block_configs", blocks, f"a list of {n_layers} objects with 'attention' and 'ffn'")
    if any(b[part].get("replace_with_linear") or b[part].get("sparsify") for b in blocks for part in ("attention", "ffn")):
        raise _bad(name, "block_configs.replace_with_linear", True, "false (a block replaced by one linear layer, or "
                   "sparsified, is not modelled)")
    attention = [not b["attention"].get("no_op") for b in blocks]
    listed = [b["attention"].get("n_heads_in_group") for b, kept in zip(blocks, attention) if kept]
    n_heads = _require(hf, "num_attention_heads", name)
    groups = set(listed) if all(_whole(g) and g > 0 for g in listed) else {None, 0}
    if len(groups) > 1 or not all(n_heads % g == 0 for g in groups):
        raise _bad(name, "block_configs.attention.n_heads_in_group", sorted(map(str, listed))[:3],
                   f"one positive divisor of the {n_heads} heads, the same in every layer")
    d_model = _require(hf, "hidden_size", name)
    widths = [0 if b["ffn"].get("no_op") else _nas_width(b["ffn"].get("ffn_mult"), d_model, name) for b in blocks]
    fields = decoder_fields({**hf, "intermediate_size": max(widths) or d_model,
                             "num_key_value_heads": n_heads // (groups.pop() if groups else 1)}, "llama", name)
    return dict(fields, layer_attention=tuple(GLOBAL if kept else NONE for kept in attention),
                layer_mlp=tuple(dense_of_width(w, fields["d_ff"]) if w else NONE for w in widths))


def _nas_width(mult, d_model: int, name: str) -> int:
    if isinstance(mult, bool) or not isinstance(mult, (int, float)) or not 0 < mult < 1e3:
        raise _bad(name, "block_configs.ffn.ffn_mult", mult, "a positive number (the MLP width over 2/3 of hidden_size)")
    width = int(2 * mult * d_model / 3)
    return -(-width // 256) * 256
