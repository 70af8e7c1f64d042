"""The Hugging Face keys of hybrid and constant-state families, read for `ModelConfig.from_hf_config` only.

mamba2 (Mamba-2 layers only), qwen3_next (gated DeltaNet + gated attention, MoE), nemotron_h (one op
per layer: Mamba-2 M, attention *, MLP -, MoE E). Each returns the fields of a ModelConfig; a field
it cannot read names itself, the file and the fix (config._bad). Attention dimensions of a model
without attention layers are set to the mixer's heads and head dim: no op reads them.
"""
from __future__ import annotations

from .config import (DELTANET, DENSE, GLOBAL, MAMBA2, MOE, NONE, _bad, _flag, _max_positions, _optional,
                     _require)

STATE_FAMILIES = ("mamba2", "qwen3_next", "nemotron_h")
DELTA_RULE_CHUNK = 64  # FLA's chunk_gated_delta_rule (and HF's torch_chunk_gated_delta_rule) chunk length
NEMOTRON_KINDS = {"M": (MAMBA2, NONE), "*": (GLOBAL, NONE), "-": (NONE, DENSE), "E": (NONE, MOE)}
NEMOTRON_BLOCKS = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-",
                   "moe": "E"}


def state_family_fields(hf: dict, family: str, name: str) -> dict:
    return {"mamba2": _mamba2, "qwen3_next": _qwen3_next, "nemotron_h": _nemotron_h}[family](hf, name)


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
        if not all(b in NEMOTRON_BLOCKS for b in blocks):
            raise _bad(name, "layers_block_type", blocks, f"a list of {', '.join(NEMOTRON_BLOCKS)}")
        pattern = "".join(NEMOTRON_BLOCKS[b] for b in blocks)
    if not isinstance(pattern, str) or len(pattern) != n_layers or set(pattern) - set(NEMOTRON_KINDS):
        raise _bad(name, "hybrid_override_pattern", pattern, f"a string of {n_layers} characters from M (Mamba-2), "
                   f"* (attention), - (MLP), E (MoE), one per layer")
    return pattern


def _nemotron_h(hf: dict, name: str) -> dict:
    d_model = _require(hf, "hidden_size", name)
    n_layers = _require(hf, "num_hidden_layers", name)
    pattern = _nemotron_pattern(hf, name, n_layers)
    n_heads = _require(hf, "num_attention_heads", name)
    fields = dict(
        d_model=d_model, n_layers=n_layers, n_heads=n_heads, vocab_size=_require(hf, "vocab_size", name),
        n_kv_heads=_optional(hf, "num_key_value_heads", name) or n_heads,
        head_dim=_optional(hf, "head_dim", name) or d_model // n_heads,
        d_ff=_require(hf, "intermediate_size", name), gated_mlp=False,  # relu^2 MLP: up, down
        tied_embeddings=_flag(hf, "tie_word_embeddings", name, False), max_positions=_max_positions(hf, name),
        qkv_bias=_flag(hf, "attention_bias", name), out_bias=_flag(hf, "attention_bias", name),
        mlp_bias=_flag(hf, "mlp_bias", name),
        layer_attention=tuple(NEMOTRON_KINDS[c][0] for c in pattern), layer_mlp=tuple(NEMOTRON_KINDS[c][1] for c in pattern),
        **_mamba2_dims(hf, name, d_model, prefix="mamba_"),
    )
    if "E" in pattern:
        fields.update(n_experts=_require(hf, "n_routed_experts", name), top_k=_require(hf, "num_experts_per_tok", name),
                      d_expert=_require(hf, "moe_intermediate_size", name),
                      n_shared_experts=_optional(hf, "n_shared_experts", name))
    return fields


def _qwen3_next(hf: dict, name: str) -> dict:
    d_model = _require(hf, "hidden_size", name)
    n_layers = _require(hf, "num_hidden_layers", name)
    n_heads = _require(hf, "num_attention_heads", name)
    types = hf.get("layer_types")
    if types is None:  # transformers' default: every full_attention_interval-th layer is full attention
        every = _optional(hf, "full_attention_interval", name, default=4, minimum=1)
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n_layers)]
    if (not isinstance(types, list) or len(types) != n_layers
            or set(types) - {"full_attention", "linear_attention"}):
        raise _bad(name, "layer_types", types, f"a list of {n_layers} entries, each \"full_attention\" or "
                   f"\"linear_attention\"")
    experts = _require(hf, "num_experts", name)
    d_expert = _require(hf, "moe_intermediate_size", name)
    shared = _optional(hf, "shared_expert_intermediate_size", name)
    if shared % d_expert:
        raise _bad(name, "shared_expert_intermediate_size", shared, f"a multiple of moe_intermediate_size ({d_expert})")
    sparse_step = _optional(hf, "decoder_sparse_step", name, default=1, minimum=1)
    dense_layers = hf.get("mlp_only_layers") or []
    if not isinstance(dense_layers, list) or not all(isinstance(i, int) for i in dense_layers):
        raise _bad(name, "mlp_only_layers", dense_layers, "a list of layer indices")
    value_heads = _require(hf, "linear_num_value_heads", name)
    key_heads = _require(hf, "linear_num_key_heads", name)
    if value_heads % key_heads:
        raise _bad(name, "linear_num_value_heads", value_heads, f"a multiple of linear_num_key_heads ({key_heads})")
    return dict(
        d_model=d_model, n_layers=n_layers, n_heads=n_heads, vocab_size=_require(hf, "vocab_size", name),
        n_kv_heads=_optional(hf, "num_key_value_heads", name) or n_heads,
        head_dim=_optional(hf, "head_dim", name) or d_model // n_heads,
        d_ff=_require(hf, "intermediate_size", name), max_positions=_max_positions(hf, name),
        tied_embeddings=_flag(hf, "tie_word_embeddings", name, False),
        qkv_bias=_flag(hf, "attention_bias", name), out_bias=_flag(hf, "attention_bias", name),
        qk_norm=True, attn_output_gate=True, shared_expert_gate=shared > 0,
        layer_attention=tuple(GLOBAL if t == "full_attention" else DELTANET for t in types),
        layer_mlp=tuple(MOE if i not in dense_layers and (i + 1) % sparse_step == 0 else DENSE for i in range(n_layers)),
        n_experts=experts, top_k=_require(hf, "num_experts_per_tok", name), d_expert=d_expert,
        n_shared_experts=shared // d_expert,
        ssm_inner=value_heads * _require(hf, "linear_value_head_dim", name), ssm_heads=value_heads,
        ssm_groups=key_heads, ssm_state=_require(hf, "linear_key_head_dim", name),
        conv_kernel=_require(hf, "linear_conv_kernel_dim", name), ssm_chunk=DELTA_RULE_CHUNK,
    )
