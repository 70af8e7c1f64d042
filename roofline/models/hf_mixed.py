"""The Hugging Face keys of the families whose attention layers are not all one shape or kind: Gemma 4, MiMo-V2-Flash,
Step-3.7, MiniMax-M3.

Each parser takes the fields `decoder_fields` read (the base shape, layer_types, window) and returns what its
family changes: a second head shape for one attention kind (attention_shapes), keys reused as values, sinks on one
kind only, a per-head output gate, block-sparse layers, the MoE pattern. Sources: transformers 5.24's models/gemma4,
mimo_v2_flash, step3p7 and minimax_m3_vl (the classes each docstring names). Multi-token-prediction layers are not
counted (transformers does not build them into the model, as for DeepSeek-V3).
"""
from __future__ import annotations

from .hf_config import _bad, _flag, _int_list, _optional, _require, decoder_fields
from .layer_kinds import COMPRESSED_SPARSE, DENSE, GLOBAL, HEAVILY_COMPRESSED, MOE, SPARSE, WINDOW, share_text


def gemma4_fields(hf: dict, fields: dict, name: str) -> dict:
    """Gemma 4's text model (Gemma4TextAttention, Gemma4TextDecoderLayer): sliding layers of num_key_value_heads x
    head_dim, global layers of num_global_key_value_heads x global_head_dim whose values are their keys (attention_k_eq_v:
    no v_proj, V = a weightless RMSNorm of K, both cached), q/k/v norms, 4 norms a layer; the MoE models
    (enable_moe_block, 26B-A4B) run the experts beside the dense MLP on every layer."""
    for key, feature in (("hidden_size_per_layer_input", "per-layer input embeddings (Gemma 4 E2B/E4B)"),
                         ("num_kv_shared_layers", "layers that reuse an earlier layer's KV cache (Gemma 4 E2B/E4B)")):
        if _optional(hf, key, name):
            raise _bad(name, key, hf[key], "0", f"{feature} are not modelled; price Gemma 4 26B-A4B or 31B")
    kv_heads, head_dim = fields["n_kv_heads"], fields["head_dim"]
    keys_are_values = _flag(hf, "attention_k_eq_v", name)
    global_kv = (_optional(hf, "num_global_key_value_heads", name, minimum=1) if keys_are_values else 0) or kv_heads
    global_dim = _optional(hf, "global_head_dim", name, default=512, minimum=1)
    if global_kv > kv_heads or kv_heads % global_kv:
        raise _bad(name, "num_global_key_value_heads", global_kv, f"a divisor of num_key_value_heads ({kv_heads})",
                   "give the global layers' KV head count from the published config.json")
    bias = _flag(hf, "attention_bias", name)
    out = dict(qk_norm="rms_v", norms_per_layer=4, qkv_bias=bias, out_bias=bias,
               attention_shapes=((GLOBAL, "1", share_text(global_kv, kv_heads), share_text(global_dim, head_dim)),),
               values_are_keys=(GLOBAL,) if keys_are_values else ())
    if _flag(hf, "enable_moe_block", name):
        out.update(layer_mlp=(MOE,) * fields["n_layers"], dense_beside_moe=True,
                   n_experts=_require(hf, "num_experts", name), top_k=_require(hf, "top_k_experts", name),
                   d_expert=_require(hf, "moe_intermediate_size", name))
    return out


def mimo_v2_flash_fields(hf: dict, fields: dict, name: str) -> dict:
    """MiMo-V2-Flash (MiMoV2FlashAttention, MiMoV2FlashMoE): sliding-window layers of swa_num_key_value_heads (twice the
    full layers' KV heads) with attention sinks, full layers where hybrid_layer_pattern is 0, keys 192 wide and values
    128 (v_head_dim), DeepSeek-V3's sigmoid router (a bias buffer) over routed experts without a shared one, dense
    layers where moe_layer_freq is 0. The window is sliding_window_size + 1 keys: the reference (SGLang) attends to
    sliding_window_size previous tokens plus the query (transformers' MiMoV2FlashConfig)."""
    n_layers, heads, kv_heads = fields["n_layers"], fields["n_heads"], fields["n_kv_heads"]
    head_dim, v_dim = fields["head_dim"], _require(hf, "v_head_dim", name)
    swa = dict(n_heads=_optional(hf, "swa_num_attention_heads", name, default=heads, minimum=1),
               n_kv_heads=_optional(hf, "swa_num_key_value_heads", name, default=2 * kv_heads, minimum=1),
               head_dim=_optional(hf, "swa_head_dim", name, default=head_dim, minimum=1),
               v_head_dim=_optional(hf, "swa_v_head_dim", name, default=v_dim, minimum=1))
    if swa["head_dim"] * v_dim != head_dim * swa["v_head_dim"] or swa["n_kv_heads"] % kv_heads:
        raise _bad(name, "swa_v_head_dim", swa["v_head_dim"], "the sliding layers' value width in the same ratio to "
                   "swa_head_dim as v_head_dim to head_dim, and swa_num_key_value_heads a multiple of the full layers'",
                   "copy both from the published config.json")
    pattern = hf.get("hybrid_layer_pattern")
    if pattern is None:  # transformers' default: full attention on the first layer and every sixth
        pattern = [0 if i == 0 or (i + 1) % 6 == 0 else 1 for i in range(n_layers)]
    if not isinstance(pattern, list) or len(pattern) != n_layers or set(pattern) - {0, 1}:
        raise _bad(name, "hybrid_layer_pattern", pattern, f"a list of {n_layers} values, 1 (sliding) or 0 (full)")
    moe = hf.get("moe_layer_freq")
    moe = [0] + [1] * (n_layers - 1) if moe is None else moe
    if not isinstance(moe, list) or len(moe) != n_layers or set(moe) - {0, 1}:
        raise _bad(name, "moe_layer_freq", moe, f"a list of {n_layers} values, 1 (MoE) or 0 (dense)")
    window = _optional(hf, "sliding_window_size", name, minimum=1)
    window = window + 1 if window else _require(hf, "sliding_window", name)
    if _optional(hf, "n_shared_experts", name):
        raise _bad(name, "n_shared_experts", hf["n_shared_experts"], "null or 0 (MiMo-V2-Flash has no shared expert)")
    sinks = ((WINDOW,) if _flag(hf, "add_swa_attention_sink_bias", name, True) else ()) + (
        (GLOBAL,) if _flag(hf, "add_full_attention_sink_bias", name) else ())
    return dict(swa, window=window, layer_attention=tuple(WINDOW if p else GLOBAL for p in pattern),
                attention_shapes=((GLOBAL, share_text(heads, swa["n_heads"]), share_text(kv_heads, swa["n_kv_heads"]),
                                   share_text(head_dim, swa["head_dim"])),),
                sink_kinds=sinks, qkv_bias=_flag(hf, "attention_bias", name), out_bias=False,
                layer_mlp=tuple(MOE if m else DENSE for m in moe), n_experts=_require(hf, "n_routed_experts", name),
                top_k=_require(hf, "num_experts_per_tok", name), d_expert=_require(hf, "moe_intermediate_size", name),
                router_bias=True)


def step3p7_fields(hf: dict, fields: dict, name: str) -> dict:
    """Step-3.7-Flash's text model (Step3p7Attention, Step3p7SparseMoeBlock): GQA with q/k RMSNorm per head and a
    sigmoid gate per query head (g_proj), full and sliding layers (layer_types), the sliding ones with their own
    query-head count where num_sliding_attention_heads (or attention_other_setting) gives one; dense MLPs on the first
    first_k_dense_replace layers (or where moe_layers_enum leaves them out), then routed experts beside one shared
    expert of share_expert_dim, a sigmoid router with a bias buffer."""
    n_layers, heads = fields["n_layers"], fields["n_heads"]
    moe_layers = hf.get("moe_layers_enum")
    if isinstance(hf.get("mlp_layer_types"), list):  # transformers' own spelling: "sparse" (MoE) or "dense" per layer
        moe_layers = [i for i, kind in enumerate(hf["mlp_layer_types"]) if kind == "sparse"]
    if isinstance(moe_layers, str):
        moe_layers = [int(i) for i in moe_layers.split(",") if i.strip().isdigit()]
    if moe_layers is None:
        first_dense = _optional(hf, "first_k_dense_replace", name, default=3)
        moe_layers = list(range(first_dense, n_layers))
    moe = set(_int_list({"moe_layers_enum": moe_layers}, "moe_layers_enum", name, n_layers))
    if _optional(hf, "n_shared_experts", name, default=1) != 1:
        raise _bad(name, "n_shared_experts", hf["n_shared_experts"], "1 (Step-3.7 has one shared expert)")
    other = hf.get("attention_other_setting") or {}
    sliding_heads = hf.get("num_sliding_attention_heads") or other.get("num_attention_heads") or heads
    if not isinstance(sliding_heads, int) or sliding_heads <= 0 or sliding_heads % fields["n_kv_heads"]:
        raise _bad(name, "num_sliding_attention_heads", sliding_heads,
                   f"a positive multiple of num_key_value_heads ({fields['n_kv_heads']})")
    experts = hf.get("n_routed_experts", hf.get("num_experts", hf.get("moe_num_experts")))
    bias = _flag(hf, "attention_bias", name)
    return dict(qk_norm="rms", head_gate=True, qkv_bias=bias, out_bias=bias,
                attention_shapes=((WINDOW, share_text(sliding_heads, heads), "1", "1"),) if sliding_heads != heads else (),
                layer_mlp=tuple(MOE if i in moe else DENSE for i in range(n_layers)),
                n_experts=_require({"n_routed_experts": experts}, "n_routed_experts", name),
                top_k=_require(hf, "num_experts_per_tok", name), d_expert=_require(hf, "moe_intermediate_size", name),
                shared_expert_width=_require(hf, "share_expert_dim", name), router_bias=True,
                mlp_bias=_flag(hf, "mlp_bias", name))


def minimax_m3_fields(hf: dict, fields: dict, name: str) -> dict:
    """MiniMax-M3 (MiniMaxM3VLAttention, MiniMaxM3VLIndexer, MiniMaxM3VLSparseMoeBlock): GQA with q/k RMSNorm per head;
    where sparse_attention_freq is 1 a block indexer (index heads x index dim, its own key cache) keeps each KV head's
    top sparse_topk_blocks blocks of sparse_block_size keys; dense MLPs of dense_intermediate_size where moe_layer_freq
    is 0, else routed experts of intermediate_size beside one shared expert of shared_intermediate_size, a sigmoid
    router with a bias buffer. The MTP modules are not counted (transformers does not build them)."""
    n_layers = fields["n_layers"]
    sparse = hf.get("sparse_attention_config") or {}
    if not isinstance(sparse, dict):
        raise _bad(name, "sparse_attention_config", sparse, "an object (MiniMax-M3's block-sparse attention settings)")
    if _flag(hf, "attention_output_gate", name):
        raise _bad(name, "attention_output_gate", True, "false", "a gated attention output is not modelled for MiniMax-M3")
    if hf.get("qk_norm_type", "per_head") != "per_head" and _flag(hf, "use_qk_norm", name, True):
        raise _bad(name, "qk_norm_type", hf["qk_norm_type"], "\"per_head\"", "only MiniMax-M3's per-head q/k norm is modelled")
    sparse_layers = sparse.get("sparse_attention_freq", [0] * n_layers)
    if not _flag(sparse, "use_sparse_attention", name, True):
        sparse_layers = [0] * n_layers
    moe_layers = hf.get("moe_layer_freq", [1] * n_layers)
    for key, value in (("sparse_attention_config.sparse_attention_freq", sparse_layers), ("moe_layer_freq", moe_layers)):
        if not isinstance(value, list) or len(value) != n_layers or set(value) - {0, 1}:
            raise _bad(name, key, value, f"a list of {n_layers} values, 0 or 1")
    if _optional(hf, "n_shared_experts", name, default=1) != 1:
        raise _bad(name, "n_shared_experts", hf["n_shared_experts"], "1 (one shared expert of shared_intermediate_size)")
    index_heads = _optional(sparse, "sparse_num_index_heads", name, default=4, minimum=1)
    if 1 in sparse_layers and index_heads != fields["n_kv_heads"]:  # one block pick per KV head's query group
        raise _bad(name, "sparse_attention_config.sparse_num_index_heads", index_heads,
                   f"num_key_value_heads ({fields['n_kv_heads']}): each index head picks one KV head's blocks")
    block = _optional(sparse, "sparse_block_size", name, default=128, minimum=1)
    top_blocks = _optional(sparse, "sparse_topk_blocks", name, default=16, minimum=1)
    return dict(
        qk_norm="rms" if _flag(hf, "use_qk_norm", name, True) else "", d_ff=_require(hf, "dense_intermediate_size", name),
        layer_attention=tuple(SPARSE if f else GLOBAL for f in sparse_layers),
        index_heads=index_heads,
        index_head_dim=_optional(sparse, "sparse_index_dim", name, default=128, minimum=1),
        index_topk=block * top_blocks, index_block=block,
        layer_mlp=tuple(MOE if f else DENSE for f in moe_layers),
        n_experts=_require(hf, "num_local_experts", name), top_k=_require(hf, "num_experts_per_tok", name),
        d_expert=_require(hf, "intermediate_size", name),
        shared_expert_width=_optional(hf, "shared_intermediate_size", name, default=3072, minimum=1),
        router_bias=_flag(hf, "use_routing_bias", name, True))


V4_LAYER_KINDS = {0: WINDOW, 4: COMPRESSED_SPARSE, 128: HEAVILY_COMPRESSED}  # transformers' _COMPRESS_RATIO_TO_LAYER_TYPE


def deepseek_v4_fields(hf: dict, name: str) -> dict:
    """DeepSeek-V4 (DeepseekV4DecoderLayer; deepseek_ref is sgl-project's copy of the same config): shared-KV MQA of
    head_dim over a sliding_window, layers by compress_ratios (0: window only; 4: compressed sparse, an indexer of
    index_n_heads x index_head_dim keeping index_topk entries; 128: heavily compressed), queries through q_lora_rank,
    output through o_groups of o_lora_rank, attention sinks, hc_mult residual streams, every layer MoE (routed experts
    of moe_intermediate_size beside n_shared_experts; the first num_hash_layers route by token id)."""
    fields = decoder_fields({**hf, "intermediate_size": hf.get("moe_intermediate_size")}, "deepseek_v4", name)
    n_layers = fields["n_layers"]
    ratios = hf.get("compress_ratios")
    if not isinstance(ratios, list) or len(ratios) < n_layers or set(ratios[:n_layers]) - set(V4_LAYER_KINDS):
        raise _bad(name, "compress_ratios", ratios, f"a list of at least {n_layers} values among 0, 4 and 128 (one per "
                   "layer; a trailing entry is the MTP layer's)")
    if _optional(hf, "n_shared_experts", name, default=1) != 1 or _optional(hf, "num_key_value_heads", name) != 1:
        raise _bad(name, "n_shared_experts", hf.get("n_shared_experts"), "1, with num_key_value_heads 1 (DeepSeek-V4)")
    return dict(
        fields, window=_require(hf, "sliding_window", name), layer_attention=tuple(V4_LAYER_KINDS[r] for r in ratios[:n_layers]),
        compress_sparse=4, compress_heavy=128, hc_streams=_require(hf, "hc_mult", name),
        o_groups=_require(hf, "o_groups", name), o_lora_rank=_require(hf, "o_lora_rank", name),
        q_lora_rank=_require(hf, "q_lora_rank", name), index_heads=_require(hf, "index_n_heads", name),
        index_head_dim=_require(hf, "index_head_dim", name), index_topk=_require(hf, "index_topk", name),
        layer_mlp=(MOE,) * n_layers, n_experts=_require(hf, "n_routed_experts", name),
        top_k=_require(hf, "num_experts_per_tok", name), d_expert=_require(hf, "moe_intermediate_size", name),
        n_shared_experts=1, router_bias=True)
