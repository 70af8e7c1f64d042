"""The Hugging Face keys of hybrid and constant-state families, read for `ModelConfig.from_hf_config` only.

mamba2 (Mamba-2 layers only), qwen3_next (gated DeltaNet + gated attention, MoE), nemotron_h (one op
per layer: Mamba-2 M, attention *, MLP -, MoE E). Each returns the fields of a ModelConfig; a field
it cannot read names itself, the file and the fix (hf_config._bad). Attention dimensions of a model
without attention layers are set to the mixer's heads and head dim: no op reads them.
"""
from __future__ import annotations

import math

from .layer_kinds import DELTANET, DENSE, GLOBAL, LINEAR, MAMBA, MAMBA2, MOE, NONE, PARALLEL, _whole
from .hf_config import _bad, _flag, _max_positions, _optional, _require, kv_heads_and_head_dim

STATE_FAMILIES = ("mamba2", "qwen3_next", "nemotron_h", "granitemoehybrid", "jamba", "falcon_h1", "minimax",
                  "minimax_m1",  # minimax_m1: MiniMax's own config.json (remote code) for the same architecture
                  "qwen3_5", "qwen3_5_moe")  # Qwen3.5: Qwen3-Next's layers in a vision-language config's text_config
LIGHTNING_BLOCK = 256  # MiniMax's lightning-attention block (HF MiniMaxConfig.block_size default)
DELTA_RULE_CHUNK = 64  # FLA's chunk_gated_delta_rule (and HF's torch_chunk_gated_delta_rule) chunk length
NEMOTRON_KINDS = {"M": (MAMBA2, NONE), "*": (GLOBAL, NONE), "-": (NONE, DENSE), "E": (NONE, MOE)}
NEMOTRON_BLOCKS = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-",
                   "moe": "E"}


def state_family_fields(hf: dict, family: str, name: str) -> dict:
    return {"mamba2": _mamba2, "qwen3_next": _qwen3_next, "nemotron_h": _nemotron_h, "granitemoehybrid": _granite,
            "jamba": _jamba, "falcon_h1": _falcon_h1, "minimax": _minimax, "minimax_m1": _minimax,
            "qwen3_5": _qwen3_5, "qwen3_5_moe": _qwen3_5}[family](hf, name)


def _qwen3_5(hf: dict, name: str) -> dict:
    """Qwen3.5 (and 3.6): Qwen3-Next's gated DeltaNet and gated attention layers (in_proj split in four, the
    same weights), MoE with a gated shared expert (qwen3_5_moe) or a dense MLP (qwen3_5). The language model
    sits in text_config beside a vision tower: priced as text decode, the vision encoder left out."""
    text = hf.get("text_config")
    if not isinstance(text, dict):
        raise _bad(name, "text_config", text, "an object (the language model's config)",
                   "a qwen3_5 config holds its language model in text_config; copy it from the published file")
    if "tie_word_embeddings" in hf and "tie_word_embeddings" not in text:
        text = {**text, "tie_word_embeddings": hf["tie_word_embeddings"]}
    return _qwen3_next(text, name, dense=hf["model_type"] == "qwen3_5")


def _attention_dims(hf: dict, name: str) -> dict:
    """The decoder's attention and MLP dimensions, as every hybrid family spells them."""
    d_model = _require(hf, "hidden_size", name)
    n_heads = _require(hf, "num_attention_heads", name)
    return dict(d_model=d_model, n_layers=_require(hf, "num_hidden_layers", name), n_heads=n_heads,
                **kv_heads_and_head_dim(hf, name, d_model, n_heads),
                vocab_size=_require(hf, "vocab_size", name), max_positions=_max_positions(hf, name),
                tied_embeddings=_flag(hf, "tie_word_embeddings", name, False),
                qkv_bias=_flag(hf, "attention_bias", name), out_bias=_flag(hf, "attention_bias", name))


def _mamba_prefixed(hf: dict, name: str, d_model: int, inner_key: str = "") -> dict:
    """Mamba-2 dims spelled mamba_n_heads, mamba_d_head, ... (Granite-4.0-H, Falcon-H1). The width is
    mamba_n_heads x mamba_d_head and must equal HF's (inner_key, e.g. mamba_d_ssm, else mamba_expand x hidden)."""
    heads, head_dim = _require(hf, "mamba_n_heads", name), _require(hf, "mamba_d_head", name)
    width = hf.get(inner_key) if inner_key and hf.get(inner_key) is not None else None
    if width is None:
        expand = hf.get("mamba_expand", 2)
        width, inner_key = (expand * d_model if isinstance(expand, int) else None), "mamba_expand"
    if width != heads * head_dim:
        raise _bad(name, inner_key, hf.get(inner_key), f"a width equal to mamba_n_heads x mamba_d_head "
                   f"({heads} x {head_dim})", "fix it, mamba_n_heads or mamba_d_head to the published config's values")
    groups = _optional(hf, "mamba_n_groups", name, default=1, minimum=1)
    if heads % groups:
        raise _bad(name, "mamba_n_groups", groups, f"a divisor of the {heads} heads")
    return dict(ssm_inner=width, ssm_heads=heads, ssm_groups=groups, ssm_state=_require(hf, "mamba_d_state", name),
                conv_kernel=_optional(hf, "mamba_d_conv", name, default=4, minimum=1),
                ssm_chunk=_optional(hf, "mamba_chunk_size", name, default=256, minimum=1),
                ssm_conv_bias=_flag(hf, "mamba_conv_bias", name, True), ssm_proj_bias=_flag(hf, "mamba_proj_bias", name))


def _listed(value, allowed, length: int) -> bool:
    """A list of `length` entries, each one of `allowed` (strings or whole numbers; no bools, no lists)."""
    return (isinstance(value, list) and len(value) == length
            and all(isinstance(t, (str, int)) and not isinstance(t, bool) and t in allowed for t in value))


def _kinds(hf: dict, name: str, key: str, n_layers: int, mapping: dict) -> tuple:
    types = hf.get(key)
    if not _listed(types, mapping, n_layers):
        raise _bad(name, key, types, f"a list of {n_layers} entries from {', '.join(map(str, mapping))}")
    return tuple(mapping[t] for t in types)


def _granite(hf: dict, name: str) -> dict:
    """Granite-4.0-H: Mamba-2 and attention layers, each followed by MoE experts plus one shared MLP
    (shared_intermediate_size), or by the shared MLP alone when there are no experts."""
    fields = _attention_dims(hf, name)
    key = "layer_types" if "layer_types" in hf else "layers_block_type"
    kinds = {"mamba": MAMBA2, "linear_attention": MAMBA2, "attention": GLOBAL, "full_attention": GLOBAL}
    n_layers = fields["n_layers"]
    experts = _optional(hf, "num_local_experts", name)
    shared = _require(hf, "shared_intermediate_size", name)
    fields.update(layer_attention=_kinds(hf, name, key, n_layers, kinds), **_mamba_prefixed(hf, name, fields["d_model"]))
    if experts:
        fields.update(layer_mlp=(MOE,) * n_layers, n_experts=experts, top_k=_require(hf, "num_experts_per_tok", name),
                      d_expert=_require(hf, "intermediate_size", name), d_ff=_require(hf, "intermediate_size", name),
                      shared_expert_width=shared)
    else:
        fields.update(layer_mlp=(DENSE,) * n_layers, d_ff=shared)
    return fields


def _jamba(hf: dict, name: str) -> dict:
    """Jamba: Mamba-1 layers with attention every attn_layer_period (at its offset), MoE every expert_layer_period."""
    fields = _attention_dims(hf, name)
    n_layers, d_model = fields["n_layers"], fields["d_model"]
    period = {k: _optional(hf, k, name, default=d, minimum=m) for k, d, m in
              (("attn_layer_period", 8, 1), ("attn_layer_offset", 4, 0), ("expert_layer_period", 2, 1),
               ("expert_layer_offset", 1, 0))}
    experts = _optional(hf, "num_experts", name, default=16)
    rank = hf.get("mamba_dt_rank", "auto")
    rank = math.ceil(d_model / 16) if rank == "auto" else rank
    if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
        raise _bad(name, "mamba_dt_rank", hf.get("mamba_dt_rank"), "a positive integer or \"auto\"")
    expand = hf.get("mamba_expand", 2)
    if not isinstance(expand, int) or isinstance(expand, bool) or expand <= 0:
        raise _bad(name, "mamba_expand", expand, "a positive integer")
    moe = [experts > 1 and i % period["expert_layer_period"] == period["expert_layer_offset"] for i in range(n_layers)]
    fields.update(
        d_ff=_require(hf, "intermediate_size", name),
        layer_attention=tuple(GLOBAL if i % period["attn_layer_period"] == period["attn_layer_offset"] else MAMBA
                              for i in range(n_layers)),
        layer_mlp=tuple(MOE if m else DENSE for m in moe),
        ssm_inner=expand * d_model, ssm_state=_optional(hf, "mamba_d_state", name, default=16, minimum=1),
        conv_kernel=_optional(hf, "mamba_d_conv", name, default=4, minimum=1), dt_rank=rank,
        ssm_conv_bias=_flag(hf, "mamba_conv_bias", name, True), ssm_proj_bias=_flag(hf, "mamba_proj_bias", name))
    if any(moe):
        fields.update(n_experts=experts, top_k=_optional(hf, "num_experts_per_tok", name, default=2, minimum=1),
                      d_expert=fields["d_ff"])
    return fields


def _falcon_h1(hf: dict, name: str) -> dict:
    """Falcon-H1: every layer runs attention and Mamba-2 side by side on one normed input, then a gated MLP.
    The muP multipliers scale activations only (no parameters, no FLOPs counted)."""
    fields = _attention_dims(hf, name)
    if _flag(hf, "projectors_bias", name) != _flag(hf, "mamba_proj_bias", name):
        raise _bad(name, "projectors_bias", hf.get("projectors_bias"), "equal to mamba_proj_bias",
                   "a bias on the Mamba out_proj but not in_proj (or the reverse) is not modelled; set both alike")
    n_layers = fields["n_layers"]
    fields.update(d_ff=_require(hf, "intermediate_size", name), mlp_bias=_flag(hf, "mlp_bias", name),
                  layer_attention=(PARALLEL,) * n_layers, layer_mlp=(DENSE,) * n_layers,
                  ssm_gated_norm=_flag(hf, "mamba_rms_norm", name, False),
                  **_mamba_prefixed(hf, name, fields["d_model"], inner_key="mamba_d_ssm"))
    return fields


def _minimax(hf: dict, name: str) -> dict:
    """MiniMax-Text-01: lightning (linear) attention layers with softmax attention between them; MoE everywhere."""
    fields = _attention_dims(hf, name)
    n_layers = fields["n_layers"]
    if hf.get("layer_types"):
        kinds = _kinds(hf, name, "layer_types", n_layers, {"full_attention": GLOBAL, "linear_attention": LINEAR})
    elif hf.get("attn_type_list"):  # MiniMax's own config: 1 softmax attention, 0 lightning attention
        kinds = _kinds(hf, name, "attn_type_list", n_layers, {1: GLOBAL, 0: LINEAR})
    else:  # transformers' default: even layers full attention
        kinds = tuple(GLOBAL if i % 2 == 0 else LINEAR for i in range(n_layers))
    experts = _require(hf, "num_local_experts", name)
    d_expert = _require(hf, "intermediate_size", name)
    fields.update(d_ff=d_expert, layer_attention=kinds, layer_mlp=(MOE,) * n_layers, n_experts=experts,
                  top_k=_require(hf, "num_experts_per_tok", name), d_expert=d_expert,
                  ssm_chunk=_optional(hf, "block_size", name, default=LIGHTNING_BLOCK, minimum=1),
                  state_bytes=0)  # HF's MiniMaxCache keeps the lightning state in the model dtype, like the KV
    return fields


def _mamba2_dims(hf: dict, name: str, d_model: int, prefix: str = "") -> dict:
    """Mamba-2 mixer dims: heads x head_dim channels. HF's Mamba2 sizes its projections by expand x hidden,
    which must agree; Nemotron-H (prefix "mamba_") sizes them by heads x head_dim alone."""
    heads = _require(hf, f"{prefix}num_heads", name)
    head_dim = _require(hf, f"{prefix}head_dim", name)
    expand = hf.get("expand", 2)
    if not prefix and (not isinstance(expand, int) or isinstance(expand, bool) or expand * d_model != heads * head_dim):
        raise _bad(name, "expand", expand, f"a whole number with expand x hidden_size ({d_model}) = heads x head_dim "
                   f"({heads} x {head_dim})", "fix expand, num_heads or head_dim to the published config's values")
    groups = _optional(hf, "n_groups", name, default=1, minimum=1)
    if heads % groups:
        raise _bad(name, "n_groups", groups, f"a divisor of the {heads} heads")
    return dict(ssm_inner=heads * head_dim, ssm_heads=heads, ssm_groups=groups,
                ssm_state=_require(hf, "state_size" if not prefix else "ssm_state_size", name),
                conv_kernel=_optional(hf, "conv_kernel", name, default=4, minimum=1),
                ssm_chunk=_optional(hf, "chunk_size", name, default=256, minimum=1),
                ssm_conv_bias=_flag(hf, "use_conv_bias", name, True),
                ssm_proj_bias=_flag(hf, "use_bias" if not prefix else "mamba_proj_bias", name, False))


def _mamba2(hf: dict, name: str) -> dict:
    d_model = _require(hf, "hidden_size", name)
    n_layers = _require(hf, "num_hidden_layers", name)
    dims = _mamba2_dims(hf, name, d_model)
    return dict(d_model=d_model, n_layers=n_layers, vocab_size=_require(hf, "vocab_size", name),
                n_heads=dims["ssm_heads"], n_kv_heads=dims["ssm_heads"], head_dim=dims["ssm_inner"] // dims["ssm_heads"],
                d_ff=dims["ssm_inner"], tied_embeddings=_flag(hf, "tie_word_embeddings", name, False),
                layer_attention=(MAMBA2,) * n_layers, layer_mlp=(NONE,) * n_layers, **dims)


def _nemotron_pattern(hf: dict, name: str, n_layers: int) -> str:
    pattern = hf.get("hybrid_override_pattern")
    if pattern is None and isinstance(hf.get("layers_block_type"), list):
        blocks = hf["layers_block_type"]
        if not _listed(blocks, NEMOTRON_BLOCKS, len(blocks)):
            raise _bad(name, "layers_block_type", blocks, f"a list of {', '.join(NEMOTRON_BLOCKS)}")
        pattern = "".join(NEMOTRON_BLOCKS[b] for b in blocks)
    if not isinstance(pattern, str) or len(pattern) != n_layers or set(pattern) - set(NEMOTRON_KINDS):
        raise _bad(name, "hybrid_override_pattern", pattern, f"a string of {n_layers} characters from M (Mamba-2), "
                   f"* (attention), - (MLP), E (MoE), one per layer")
    return pattern


def _nemotron_h(hf: dict, name: str) -> dict:
    d_model = _require(hf, "hidden_size", name)
    if hf.get("num_hidden_layers") is None and isinstance(hf.get("layers_block_type"), list):
        hf = {**hf, "num_hidden_layers": len(hf["layers_block_type"])}  # Nemotron-3 Ultra: the list is the count
    n_layers = _require(hf, "num_hidden_layers", name)
    pattern = _nemotron_pattern(hf, name, n_layers)
    n_heads = _require(hf, "num_attention_heads", name)
    fields = dict(
        d_model=d_model, n_layers=n_layers, n_heads=n_heads, vocab_size=_require(hf, "vocab_size", name),
        **kv_heads_and_head_dim(hf, name, d_model, n_heads),
        d_ff=_require(hf, "intermediate_size", name), gated_mlp=False,  # relu^2 MLP: up, down
        tied_embeddings=_flag(hf, "tie_word_embeddings", name, False), max_positions=_max_positions(hf, name),
        qkv_bias=_flag(hf, "attention_bias", name), out_bias=_flag(hf, "attention_bias", name),
        mlp_bias=_flag(hf, "mlp_bias", name),
        layer_attention=tuple(NEMOTRON_KINDS[c][0] for c in pattern), layer_mlp=tuple(NEMOTRON_KINDS[c][1] for c in pattern),
        **_mamba2_dims(hf, name, d_model, prefix="mamba_"),
    )
    if "E" in pattern:
        fields.update(_nemotron_moe(hf, name))
    return fields


def _nemotron_moe(hf: dict, name: str) -> dict:
    """Nemotron-H's MoE layers (transformers' NemotronHMoE): relu^2 up/down experts (not gated), a routing-bias
    buffer, one shared relu^2 MLP of moe_shared_expert_intermediate_size, and (Nemotron-3 Super/Ultra) the
    routed experts run in moe_latent_size between a D -> latent and a latent -> D projection."""
    shared = _optional(hf, "n_shared_experts", name)
    width = _optional(hf, "moe_shared_expert_intermediate_size", name)
    if shared and not width:
        raise _bad(name, "moe_shared_expert_intermediate_size", hf.get("moe_shared_expert_intermediate_size"),
                   "a positive integer (the shared expert's width) when n_shared_experts > 0")
    return dict(n_experts=_require(hf, "n_routed_experts", name), top_k=_require(hf, "num_experts_per_tok", name),
                d_expert=_require(hf, "moe_intermediate_size", name), router_bias=True,
                shared_expert_width=width if shared else 0, moe_latent=_optional(hf, "moe_latent_size", name))


def _qwen3_next(hf: dict, name: str, dense: bool = False) -> dict:
    n_layers = _require(hf, "num_hidden_layers", name)
    types = hf.get("layer_types")
    if types is None:  # transformers' default: every full_attention_interval-th layer is full attention
        every = _optional(hf, "full_attention_interval", name, default=4, minimum=1)
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n_layers)]
    if not _listed(types, ("full_attention", "linear_attention"), n_layers):
        raise _bad(name, "layer_types", types, f"a list of {n_layers} entries, each \"full_attention\" or "
                   f"\"linear_attention\"")
    if dense:
        return dict(_qwen3_next_mixers(hf, name, n_layers, types), layer_mlp=(DENSE,) * n_layers,
                    d_ff=_require(hf, "intermediate_size", name))
    experts = _require(hf, "num_experts", name)
    d_expert = _require(hf, "moe_intermediate_size", name)
    shared = _optional(hf, "shared_expert_intermediate_size", name)
    if shared % d_expert:
        raise _bad(name, "shared_expert_intermediate_size", shared, f"a multiple of moe_intermediate_size ({d_expert})")
    sparse_step = _optional(hf, "decoder_sparse_step", name, default=1, minimum=1)
    dense_layers = hf.get("mlp_only_layers") or []
    if not isinstance(dense_layers, list) or not all(_whole(i) for i in dense_layers):
        raise _bad(name, "mlp_only_layers", dense_layers, "a list of layer indices")
    return dict(
        _qwen3_next_mixers(hf, name, n_layers, types), shared_expert_gate=shared > 0,
        d_ff=_optional(hf, "intermediate_size", name) or d_expert,  # Qwen3.5-MoE has no dense layer: unread
        layer_mlp=tuple(MOE if i not in dense_layers and (i + 1) % sparse_step == 0 else DENSE for i in range(n_layers)),
        n_experts=experts, top_k=_require(hf, "num_experts_per_tok", name), d_expert=d_expert,
        n_shared_experts=shared // d_expert,
    )


def _qwen3_next_mixers(hf: dict, name: str, n_layers: int, types: list) -> dict:
    """Qwen3-Next's decoder without its MLP: gated attention (q/k norms, output gate) and gated DeltaNet layers."""
    d_model = _require(hf, "hidden_size", name)
    n_heads = _require(hf, "num_attention_heads", name)
    value_heads = _require(hf, "linear_num_value_heads", name)
    key_heads = _require(hf, "linear_num_key_heads", name)
    if value_heads % key_heads:
        raise _bad(name, "linear_num_value_heads", value_heads, f"a multiple of linear_num_key_heads ({key_heads})")
    return dict(
        d_model=d_model, n_layers=n_layers, n_heads=n_heads, vocab_size=_require(hf, "vocab_size", name),
        **kv_heads_and_head_dim(hf, name, d_model, n_heads),
        max_positions=_max_positions(hf, name),
        tied_embeddings=_flag(hf, "tie_word_embeddings", name, False),
        qkv_bias=_flag(hf, "attention_bias", name), out_bias=_flag(hf, "attention_bias", name),
        qk_norm="rms", attn_output_gate=_flag(hf, "attn_output_gate", name, True),
        layer_attention=tuple(GLOBAL if t == "full_attention" else DELTANET for t in types),
        ssm_inner=value_heads * _require(hf, "linear_value_head_dim", name), ssm_heads=value_heads,
        ssm_groups=key_heads, ssm_state=_require(hf, "linear_key_head_dim", name),
        conv_kernel=_require(hf, "linear_conv_kernel_dim", name), ssm_chunk=DELTA_RULE_CHUNK,
    )
