"""ModelConfig: the architecture facts a cost model needs, built from a Hugging Face config.json.

Only `from_hf_config` knows Hugging Face key names. head_dim is always explicit (Gemma's 256 is not
hidden/heads); the per-layer pattern (sliding window or global attention, dense or MoE MLP) is
spelled out layer by layer.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from .hardware import DATA_DIR

MODELS_DIR = DATA_DIR / "models"
FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "gemma2", "deepseek_v2", "deepseek_v3", "gpt2",
            "qwen3", "qwen3_moe", "gemma3", "gemma3_text", "glm4_moe", "kimi_k2", "llama4", "llama4_text", "gpt_oss")
GLOBAL, WINDOW = "global", "window"
CHUNKED = "chunked"  # Llama 4: a query sees only the keys of its own chunk of `chunk` positions
ATTENTION_KINDS = (GLOBAL, WINDOW, CHUNKED)
QK_NORMS = ("", "rms", "l2")  # per-head norm of queries and keys: none, RMSNorm (weight H), weightless L2
# Multimodal configs whose language model sits in `text_config`, and that model's type.
TEXT_CONFIG_OF = {"gemma3": "gemma3_text", "llama4": "llama4_text"}
# Keys a reference checkpoint's config.json leaves to its transformers class default (the defaults of
# Gemma3TextConfig and Llama4TextConfig name those checkpoints: gemma-3 and Llama-4-Scout).
CLASS_DEFAULTS = {"gemma3_text": {"vocab_size": 262_208, "max_position_embeddings": 131_072,
                                  "tie_word_embeddings": True, "head_dim": 256, "sliding_window_pattern": 6},
                  "llama4_text": {"vocab_size": 202_048, "head_dim": 128, "intermediate_size_mlp": 16_384,
                                  "attention_chunk_size": 8192, "no_rope_layer_interval": 4, "use_qk_norm": True,
                                  "interleave_moe_layer_step": 1, "num_local_experts": 16, "num_experts_per_tok": 1}}
MAX_LAYERS = 10_000  # the per-layer patterns are spelled out layer by layer; no published model comes near
MAX_DIMENSION = 1 << 24  # any width, count or length (16.7M): beyond it a number is a typo, not a model
DENSE, MOE = "dense", "moe"
# Hugging Face's per-layer attention kinds (config.json `layer_types`) and ours.
LAYER_TYPES = {"full_attention": GLOBAL, "sliding_attention": WINDOW, "chunked_attention": CHUNKED}
# Constant-state mixers (roofline/state_ops.py), a layer with attention and Mamba-2 side by side
# (Falcon-H1) and layers without a mixer or without an MLP (Nemotron-H's one-op layers).
MAMBA2, MAMBA, DELTANET, LINEAR, PARALLEL, NONE = "mamba2", "mamba", "deltanet", "linear", "parallel", "none"
STATE_MIXERS = (MAMBA2, MAMBA, DELTANET, LINEAR, PARALLEL)  # mixers that keep a per-sequence state
# ATTENTION_KINDS (above): mixers whose cache grows with the context (chunked: up to the chunk)
MIXER_KINDS = ATTENTION_KINDS + STATE_MIXERS + (NONE,)
MLP_KINDS = (DENSE, MOE, NONE)


@dataclass(frozen=True)
class ModelConfig:
    name: str
    family: str
    d_model: int  # D
    n_layers: int  # L
    n_heads: int  # N
    n_kv_heads: int  # K
    head_dim: int  # H
    d_ff: int  # F (dense layers)
    vocab_size: int  # V
    gated_mlp: bool = True  # SwiGLU/GeGLU (gate, up, down) vs plain (up, down)
    layer_norm: bool = False  # LayerNorm (weight + bias) instead of RMSNorm (weight)
    norms_per_layer: int = 2  # Gemma-2 has 4 (pre/post attention and MLP)
    tied_embeddings: bool = False
    learned_positions: int = 0  # P rows of a learned position table (GPT-2), 0 for rope
    qkv_bias: bool = False
    out_bias: bool = False
    mlp_bias: bool = False
    window: int = 0  # W, the sliding-window length of WINDOW layers
    layer_attention: tuple = ()  # per layer: GLOBAL or WINDOW
    layer_mlp: tuple = ()  # per layer: DENSE or MOE
    n_experts: int = 0  # E routed experts
    top_k: int = 0  # k
    d_expert: int = 0  # Fe
    n_shared_experts: int = 0  # Es, each of width Fe
    router_bias: bool = False  # DeepSeek-V3's e_score_correction_bias (E values)
    kv_lora_rank: int = 0  # C (MLA when > 0)
    q_lora_rank: int = 0  # Cq (0: queries not compressed)
    qk_rope_dim: int = 0  # R
    qk_nope_dim: int = 0  # Hn
    v_head_dim: int = 0  # Hv
    cla_factor: int = 1  # cross-layer attention: one KV cache shared by this many layers (what-if)
    source_hash: str = ""
    # Positions the model was trained for, rope scaling's extension included (0: unknown, unchecked).
    max_positions: int = field(default=0, compare=False)
    qk_norm: str = ""  # QK_NORMS: "rms" (Qwen3, Gemma 3, GLM-4.5), "l2" (Llama 4, on its chunked rope layers)
    chunk: int = 0  # Wc, the attention chunk of CHUNKED layers
    attention_sinks: bool = False  # gpt-oss: one learned softmax logit per head per layer (N parameters)
    router_param_bias: bool = False  # gpt-oss: the router linear has a learned bias (E parameters)
    expert_bias: bool = False  # gpt-oss: biases on every routed expert's projections
    # Constant-state mixers (0 = not used): Mamba-2 / DeltaNet / Mamba-1 shapes, see roofline/state_ops.py.
    ssm_inner: int = 0  # Di: Mamba d_inner (expand x D; heads x head_dim); DeltaNet value heads x value dim
    ssm_state: int = 0  # Ns: Mamba d_state; DeltaNet key head dim
    ssm_heads: int = 0  # Nh: Mamba-2 heads; DeltaNet value heads
    ssm_groups: int = 0  # G: Mamba-2 n_groups; DeltaNet key heads
    conv_kernel: int = 0  # Kc
    dt_rank: int = 0  # Rdt (Mamba-1)
    ssm_chunk: int = 0  # Q: chunk length of the prefill scan
    state_bytes: int = 4  # b_s: the recurrent state's element width (fp32 in HF and mamba_ssm); 0: the KV's (b_kv)
    ssm_conv_bias: bool = True  # Mamba's conv1d carries a bias (DeltaNet's does not)
    ssm_proj_bias: bool = False  # Mamba in_proj/out_proj bias
    attn_output_gate: bool = False  # Qwen3-Next: a sigmoid gate on the attention output, from q_proj
    shared_expert_gate: bool = False  # Qwen3-Next: a sigmoid gate (D -> 1) on the shared expert
    shared_expert_width: int = 0  # Fs: one shared gated MLP of this width beside the routed experts (Granite-4.0-H)
    ssm_gated_norm: bool = True  # Mamba-2's gated RMSNorm before out_proj (Falcon-H1: a plain gate when off)

    def __post_init__(self):
        for name in ("d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size", "cla_factor"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"model {self.name!r}: {name} must be a positive integer, got {value!r}")
            if value > (MAX_LAYERS if name == "n_layers" else MAX_DIMENSION):
                raise ValueError(f"model {self.name!r}: {name} must be at most "
                                 f"{MAX_LAYERS if name == 'n_layers' else MAX_DIMENSION}, got {value!r}")
        for name in ("window", "n_experts", "top_k", "d_expert", "n_shared_experts", "kv_lora_rank",
                     "q_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_head_dim", "learned_positions",
                     "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_DIMENSION:
                raise ValueError(f"model {self.name!r}: {name} must be a non-negative integer up to "
                                 f"{MAX_DIMENSION}, got {value!r}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"model {self.name!r}: n_heads ({self.n_heads}) must be divisible by "
                             f"n_kv_heads ({self.n_kv_heads}); pick a KV head count that divides it")
        if not self.layer_attention:
            object.__setattr__(self, "layer_attention", (WINDOW if self.window else GLOBAL,) * self.n_layers)
        if not self.layer_mlp:
            object.__setattr__(self, "layer_mlp", (MOE if self.n_experts else DENSE,) * self.n_layers)
        for name, allowed in (("layer_attention", MIXER_KINDS), ("layer_mlp", MLP_KINDS)):
            pattern = tuple(getattr(self, name))
            object.__setattr__(self, name, pattern)
            if len(pattern) != self.n_layers or set(pattern) - set(allowed):
                raise ValueError(f"model {self.name!r}: {name} must list {self.n_layers} entries from {allowed}")
        _check_state_dims(self)
        if WINDOW in self.layer_attention and self.window <= 0:
            raise ValueError(f"model {self.name!r}: window layers need window > 0")
        if MOE in self.layer_mlp and not (self.n_experts and self.d_expert and 0 < self.top_k <= self.n_experts):
            raise ValueError(f"model {self.name!r}: MoE layers need n_experts, d_expert and 0 < top_k <= n_experts "
                             f"(got {self.n_experts}, {self.d_expert}, {self.top_k})")
        if self.is_mla and not (self.qk_nope_dim and self.qk_rope_dim and self.v_head_dim):
            raise ValueError(f"model {self.name!r}: MLA needs qk_nope_head_dim, qk_rope_head_dim and v_head_dim > 0")
        if self.n_layers % self.cla_factor:
            raise ValueError(f"model {self.name!r}: cla_factor ({self.cla_factor}) must divide n_layers ({self.n_layers})")
        self._check_attention_extras()

    def _check_attention_extras(self):
        if self.qk_norm not in QK_NORMS:
            raise ValueError(f"model {self.name!r}: qk_norm must be one of {QK_NORMS}, got {self.qk_norm!r}")
        if not _whole(self.chunk) or not 0 <= self.chunk <= MAX_DIMENSION:
            raise ValueError(f"model {self.name!r}: chunk must be a non-negative integer up to {MAX_DIMENSION}, "
                             f"got {self.chunk!r}")
        if CHUNKED in self.layer_attention and self.chunk <= 0:
            raise ValueError(f"model {self.name!r}: chunked layers need chunk > 0 (attention_chunk_size)")

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def has_kv_heads(self) -> bool:
        """MLA caches one shared latent, not per-head K and V: KV-head counts do not apply to it."""
        return not self.is_mla

    @property
    def has_state(self) -> bool:
        """Whether some layer keeps a constant per-sequence state (an SSM or linear-attention mixer)."""
        return any(kind in STATE_MIXERS for kind in self.layer_attention)

    def layer_kinds(self) -> Counter:
        """How many layers have each (attention, mlp) pattern."""
        return Counter(zip(self.layer_attention, self.layer_mlp))

    def with_overrides(self, **changes) -> ModelConfig:
        """A what-if copy (e.g. n_kv_heads=8, cla_factor=2); patterns are kept."""
        if not self.has_kv_heads and "n_kv_heads" in changes:
            raise ValueError(f"n_kv_heads: model {self.name!r} uses MLA, whose cache is the latent "
                             f"(kv_lora_rank); override kv_lora_rank instead")
        unknown = set(changes) - set(self.__dataclass_fields__)
        if unknown:
            raise ValueError(f"override: unknown field(s) {', '.join(sorted(unknown))}")
        return replace(self, **changes)

    @classmethod
    def from_hf_config(cls, hf: dict, name: str = "model") -> ModelConfig:
        if not isinstance(hf, dict):
            raise ValueError(f"config {name!r}: expected a JSON object, got {type(hf).__name__}")
        family = hf.get("model_type")
        from .config_state import STATE_FAMILIES, state_family_fields  # the hybrid families' keys
        if family not in FAMILIES + STATE_FAMILIES:
            raise ValueError(f"config {name!r}: model_type {family!r} is not supported; supported: "
                             f"{', '.join(FAMILIES + STATE_FAMILIES)}")
        digest = hashlib.sha256(json.dumps(hf, sort_keys=True).encode()).hexdigest()[:12]
        if family in STATE_FAMILIES:
            fields = state_family_fields(hf, family, name)
        else:
            if family in TEXT_CONFIG_OF or family in CLASS_DEFAULTS:
                hf, family = _language_model(hf, family, name)
            fields = _gpt2_fields(hf, name) if family == "gpt2" else _decoder_fields(hf, family, name)
        return cls(name=name, family=family, source_hash=digest, **fields)


def _check_state_dims(config: ModelConfig) -> None:
    """Each constant-state mixer kind names the dimensions it needs (0 = unset)."""
    needs = {MAMBA2: ("ssm_inner", "ssm_state", "ssm_heads", "ssm_groups", "conv_kernel", "ssm_chunk"),
             PARALLEL: ("ssm_inner", "ssm_state", "ssm_heads", "ssm_groups", "conv_kernel", "ssm_chunk"),
             DELTANET: ("ssm_inner", "ssm_state", "ssm_heads", "ssm_groups", "conv_kernel", "ssm_chunk"),
             MAMBA: ("ssm_inner", "ssm_state", "conv_kernel", "dt_rank"), LINEAR: ("ssm_chunk",)}
    for name in ("ssm_inner", "ssm_state", "ssm_heads", "ssm_groups", "conv_kernel", "dt_rank", "ssm_chunk",
                 "state_bytes", "shared_expert_width"):
        value = getattr(config, name)
        if not _whole(value) or not 0 <= value <= MAX_DIMENSION:
            raise ValueError(f"model {config.name!r}: {name} must be a non-negative integer up to {MAX_DIMENSION}, "
                             f"got {value!r}")
    for kind in sorted(set(config.layer_attention) & set(needs)):
        missing = [name for name in needs[kind] if not getattr(config, name)]
        if missing:
            raise ValueError(f"model {config.name!r}: layer_attention has {kind!r} layers, which need "
                             f"{', '.join(missing)} > 0")
    if config.ssm_heads and (config.ssm_inner % config.ssm_heads or config.ssm_heads % max(config.ssm_groups, 1)):
        raise ValueError(f"model {config.name!r}: ssm_heads ({config.ssm_heads}) must divide ssm_inner "
                         f"({config.ssm_inner}) and be a multiple of ssm_groups ({config.ssm_groups})")


def check_context(config: ModelConfig, tokens, what: str = "prompt + gen", allow: bool = False) -> None:
    """Refuse a request longer than the positions the model was trained for (rope scaling included)."""
    longest = int(max(np.max(np.asarray(tokens, dtype=float)), 0))
    if allow or not config.max_positions or longest <= config.max_positions:
        return
    raise ValueError(f"{what}: {longest} tokens exceed the {config.max_positions}-token context window of "
                     f"{config.name!r} (max_position_embeddings, rope scaling included); fix: shorten the prompt "
                     f"or the output, or price it anyway with allow_beyond_window=True (CLI: --allow-beyond-window)")


# What a validation measurement records of its model: a Llama-shaped decoder, optionally with
# Mixtral-style MoE, a Mistral-style window or DeepSeek's MLA, each on every layer.
MEASURED_DIMS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size")
MEASURED_OPTIONAL_DIMS = ("n_experts", "top_k", "d_expert", "window",  # 0 (or absent, in older files): none
                          "kv_lora_rank", "q_lora_rank", "qk_rope_dim", "qk_nope_dim", "v_head_dim")


def measured_config(name: str, dims: dict) -> ModelConfig:
    """The model a measurement row describes, from its recorded dimensions."""
    optional = {f: int(dims[f]) if _recorded(dims.get(f)) else 0 for f in MEASURED_OPTIONAL_DIMS}
    family = ("deepseek_v2" if optional["kv_lora_rank"] else "mixtral" if optional["n_experts"]
              else "mistral" if optional["window"] else "llama")
    return ModelConfig(name=name, family=family, **{f: int(dims[f]) for f in MEASURED_DIMS}, **optional)


def _recorded(value) -> bool:
    return value is not None and value == value and value != ""  # NaN != NaN: an empty cell read by pandas


def uniform_layers(config: ModelConfig) -> bool:
    """Whether every layer has the same attention and MLP kind (what a measurement row can record)."""
    return len(set(config.layer_attention)) == 1 and len(set(config.layer_mlp)) == 1


def _bad(name: str, key: str, value, expected: str, fix: str = "") -> ValueError:
    """The one shape of a bad-field message: the file, the field, what was found, what is expected, the fix."""
    fix = fix or f"set {key!r} to {expected} as in the model's published config.json, or remove it if optional"
    return ValueError(f"config {name!r}: field {key!r} must be {expected}, got {value!r}; fix: {fix}")


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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


def _max_positions(hf: dict, name: str) -> int:
    """Trained positions, extended by rope scaling (linear, dynamic, yarn: factor x the original length;
    llama3-style files already list the extended length as max_position_embeddings)."""
    trained = _optional(hf, "max_position_embeddings", name)
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


def _decoder_fields(hf: dict, family: str, name: str) -> dict:
    d_model = _require(hf, "hidden_size", name)
    n_layers = _require(hf, "num_hidden_layers", name)
    n_heads = _require(hf, "num_attention_heads", name)
    fields = dict(
        d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=_optional(hf, "num_key_value_heads", name) or n_heads,
        head_dim=_optional(hf, "head_dim", name) or d_model // n_heads,
        d_ff=_require(hf, "intermediate_size", name),
        vocab_size=_require(hf, "vocab_size", name),
        tied_embeddings=_flag(hf, "tie_word_embeddings", name, family == "gemma2"),
        max_positions=_max_positions(hf, name),
    )
    if family in ("llama", "mistral", "mixtral"):
        bias = _flag(hf, "attention_bias", name)
        fields.update(qkv_bias=bias, out_bias=bias, mlp_bias=_flag(hf, "mlp_bias", name))
    if family == "qwen2":
        fields.update(qkv_bias=True)  # Qwen2 architecture: q/k/v projections carry a bias, o_proj none
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
    if "layer_types" in hf and hf["layer_types"]:
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


def _deepseek_fields(hf: dict, family: str, n_layers: int, name: str) -> dict:
    first_dense = _optional(hf, "first_k_dense_replace", name,
                            fix="give the number of leading dense layers as a whole number (e.g. 3), or remove it (0)")
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


def _language_model(hf: dict, family: str, name: str) -> tuple[dict, str]:
    """A multimodal config's language model (its `text_config`), with the class defaults its file leaves out."""
    if family in TEXT_CONFIG_OF:
        text = hf.get("text_config")
        if not isinstance(text, dict):
            raise _bad(name, "text_config", text, "an object (the language model's config)",
                       f"a {family!r} config holds its language model in text_config; copy it from the published file")
        family = text.get("model_type", TEXT_CONFIG_OF[family])
        if family != TEXT_CONFIG_OF[hf["model_type"]]:
            raise _bad(name, "text_config.model_type", family, repr(TEXT_CONFIG_OF[hf["model_type"]]))
        hf = text
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
                qkv_bias=bias, out_bias=bias, max_positions=_optional(hf, "max_position_embeddings", name))


def _glm4_moe_fields(hf: dict, fields: dict, name: str) -> dict:
    """GLM-4.5: DeepSeek-V3-style MoE (first_k_dense_replace dense layers, shared experts, a routing-bias
    buffer) on GQA attention with biased q/k/v, optional q/k norms; the MTP layer is not counted."""
    n_layers, n_experts = fields["n_layers"], _optional(hf, "n_routed_experts", name)
    first_dense = _optional(hf, "first_k_dense_replace", name,
                            fix="give the number of leading dense layers as a whole number (e.g. 1), or remove it")
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


NEWER_FAMILIES = {"qwen3": _qwen3_fields, "qwen3_moe": _qwen3_moe_fields, "gemma3_text": _gemma3_fields,
                  "glm4_moe": _glm4_moe_fields, "kimi_k2": _kimi_k2_fields, "llama4_text": _llama4_fields,
                  "gpt_oss": _gpt_oss_fields}


def _gpt2_fields(hf: dict, name: str) -> dict:
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


@lru_cache(maxsize=1)
def _bundled_names() -> tuple:
    return tuple(sorted(p.stem for p in MODELS_DIR.glob("*.json")))


def bundled_models() -> list[str]:
    return list(_bundled_names())


def load_model(name_or_path: str | ModelConfig) -> ModelConfig:
    """A bundled name (a file stem in data/models, e.g. 'llama-2-13b'), a path to a config.json, or a
    Hugging Face snapshot directory holding one."""
    if isinstance(name_or_path, ModelConfig):
        return name_or_path
    text = str(name_or_path)
    if text in _bundled_names():
        return _load_bundled(text)
    return _load_path(text)


@lru_cache(maxsize=None)
def _load_bundled(name: str) -> ModelConfig:
    return _load_path(name)


def _load_path(text: str) -> ModelConfig:
    path = Path(text)
    if path.is_dir():  # a Hugging Face snapshot directory: its config.json
        if not (path / "config.json").is_file():
            raise ValueError(f"model: directory {text!r} holds no config.json; fix: pass a Hugging Face snapshot "
                             f"directory (the one holding config.json next to the weights) or the config.json path")
        path = path / "config.json"
    elif not path.is_file():
        path = MODELS_DIR / f"{text}.json"
        if not path.is_file():
            raise ValueError(f"model: unknown model {text!r}; fix: use a bundled name ({', '.join(bundled_models())}), "
                             f"a config.json path or a Hugging Face snapshot directory holding config.json")
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"model config {str(path)!r}: cannot read JSON ({err}); fix: pass a Hugging Face "
                         f"config.json") from None
    return ModelConfig.from_hf_config(raw, name=path.stem if path.parent == MODELS_DIR else text)
