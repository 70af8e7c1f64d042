"""ModelConfig: the architecture facts a cost model needs, built from a Hugging Face config.json.

Only `from_hf_config` reads Hugging Face key names, through the parsers it alone calls (hf_config.py
for the attention families, config_state.py for the hybrid ones). head_dim is always explicit (Gemma's 256 is not
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

from ..hardware import DATA_DIR
# The layer kinds live in roofline.models.layer_kinds (the HF readers share them); the config re-exports them.
from .layer_kinds import (ATTENTION_KINDS, CHUNKED, COMPRESSED_SPARSE, HEAVILY_COMPRESSED,  # noqa: F401
                          DELTANET, DENSE, GLOBAL, LINEAR, MAMBA, MAMBA2,  # noqa: F401
                          MAX_DIMENSION, MAX_LAYERS, MIXER_KINDS, MLP_KINDS, MOE, NONE, PARALLEL, QK_NORMS,
                          SHARED_SPARSE, SPARSE, STATE_MIXERS, WIDTH_SEPARATOR, WINDOW, _whole, dense_fraction,
                          dense_of_width, parse_share)
from .config_state import STATE_FAMILIES, state_family_fields  # the hybrid families' keys
from .hf_config import (CLASS_DEFAULTS, TEXT_CONFIG_OF, decoder_fields, gpt2_fields, language_model,
                        nemotron_nas_fields)
from .hf_mixed import deepseek_v4_fields, gemma4_fields, mimo_v2_flash_fields, minimax_m3_fields, step3p7_fields
from .hub import config_path, is_hub_id
from ..userfile import parse_json

MODELS_DIR = DATA_DIR / "models"
FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "gemma2", "deepseek_v2", "deepseek_v3", "gpt2",
            "qwen3", "qwen3_moe", "gemma3", "gemma3_text", "glm4_moe", "kimi_k2", "llama4", "llama4_text", "gpt_oss",
            "minimax_m2", "deepseek_v32", "glm_moe_dsa", "kimi_k25", "qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe",
            "qwen3_vl_moe_text", "nemotron-nas", "gemma4", "gemma4_text", "mimo_v2_flash", "step3p7", "mimo",
            "minimax_m3", "minimax_m3_vl", "minimax_m3_vl_text", "deepseek_v4", "deepseek_ref")
# Families whose attention layers are not all one shape: their keys on top of decoder_fields' (hf_mixed.py).
MIXED_FAMILIES = {"gemma4_text": gemma4_fields, "mimo_v2_flash": mimo_v2_flash_fields, "step3p7": step3p7_fields,
                  "minimax_m3": minimax_m3_fields, "minimax_m3_vl_text": minimax_m3_fields}
# Families served in late 2026 that are known but not modelled yet: the one feature each still lacks
# (issue 25; the configs are those NVIDIA's aiconfigurator-core 0.12.0 bundles).
UNMODELLED = {
    "kimi_k3": "Kimi-K3's Kimi Delta Attention layers (linear_attn_config.kda_layers: a delta rule with a per-channel "
               "decay gate) and block attention residuals (attn_res_block_size), neither built by transformers 5.24",
}


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
    # The multimodal model_type whose language model this is ("" for a text model): its vision encoder is not
    # priced, every estimate is text decode (Qwen3-VL, Qwen3.5, Kimi-K2.5, Gemma 3, Llama 4).
    text_tower_of: str = field(default="", compare=False)
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
    # DeepSeek Sparse Attention's lightning indexer (0 = not used): its heads, head dim, and the keys kept.
    index_heads: int = 0  # Ni
    index_head_dim: int = 0  # Hi
    index_topk: int = 0  # Kt: keys each query's attention reads (2048 in V3.2 and GLM-5)
    moe_latent: int = 0  # Dl: the routed experts' width in a latent MoE (Nemotron-3 Super/Ultra; 0 = D)
    # MiniMax-M3's indexer picks blocks of this many keys, per KV head, on GQA attention (0: DeepSeek's per-key pick
    # on MLA); index_topk counts keys (its top blocks x the block).
    index_block: int = 0
    # Attention kinds whose layers have their own head shape: ((kind, N share, K share, H share), ...), each share
    # of the base N, K, H as "p/q" text (Hv follows H). Gemma 4's global layers (2 KV heads of 512 beside the sliding
    # layers' 8 of 256), MiMo-V2-Flash's full layers (half the sliding layers' KV heads). Shares, not counts, so a
    # tensor-parallel shard (N/tp, K/tp) shrinks every kind with it; the base is the kind with the most KV heads.
    attention_shapes: tuple = ()
    values_are_keys: tuple = ()  # attention kinds without v_proj: V is the projected K (Gemma 4's attention_k_eq_v)
    sink_kinds: tuple = ()  # attention kinds with gpt-oss's sinks where not every layer has them (MiMo-V2-Flash)
    head_gate: bool = False  # Step-3.7: a sigmoid gate per query head (g_proj, D -> N) on the attention output
    # DeepSeek-V4 (roofline/compressed_ops.py; 0 = not used): tokens per compressed entry of its compressed sparse (Mc)
    # and heavily compressed (Mh) layers, its hyper-connections' residual streams (Nc), its grouped output projection.
    compress_sparse: int = 0  # Mc
    compress_heavy: int = 0  # Mh
    hc_streams: int = 0  # Nc
    o_groups: int = 0  # Go
    o_lora_rank: int = 0  # Ro
    dense_beside_moe: bool = False  # Gemma 4 26B-A4B: a dense MLP and the routed experts side by side on each layer

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
            named = {k for k in pattern if name == "layer_mlp" and dense_fraction(k) is not None}
            if len(pattern) != self.n_layers or set(pattern) - set(allowed) - named:
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
        self._check_sparse()

    def _check_sparse(self):
        for name in ("index_heads", "index_head_dim", "index_topk", "moe_latent", "index_block"):
            value = getattr(self, name)
            if not _whole(value) or not 0 <= value <= MAX_DIMENSION:
                raise ValueError(f"model {self.name!r}: {name} must be a non-negative integer up to {MAX_DIMENSION}, "
                                 f"got {value!r}")
        sparse = {SPARSE, SHARED_SPARSE} & set(self.layer_attention)
        indexer_input = (self.q_lora_rank and self.is_mla) or (self.index_block and not self.is_mla)
        if sparse and not (self.index_heads and self.index_head_dim and self.index_topk and indexer_input):
            raise ValueError(f"model {self.name!r}: sparse layers need index_n_heads, index_head_dim and index_topk > 0, "
                             f"and MLA with q_lora_rank (DSA) or GQA with index_block (MiniMax-M3's block indexer)")
        if SHARED_SPARSE in self.layer_attention and self.layer_attention[0] != SPARSE:
            raise ValueError(f"model {self.name!r}: the first layer must run its own indexer (indexer_types[0] "
                             f"'full'): a shared layer reuses an earlier layer's top-k")
        self._check_shapes()

    def _check_shapes(self):
        for name in ("attention_shapes", "values_are_keys", "sink_kinds"):
            object.__setattr__(self, name, tuple(tuple(e) if isinstance(e, list) else e for e in getattr(self, name)))
        for entry in self.attention_shapes:
            if (not isinstance(entry, tuple) or len(entry) != 4 or entry[0] not in (GLOBAL, WINDOW, CHUNKED)
                    or not all(parse_share(share) for share in entry[1:])):
                raise ValueError(f"model {self.name!r}: attention_shapes entries must be (kind, N share, K share, "
                                 f"H share) with kind global, window or chunked and shares like \"1/4\", got {entry!r}")
        for name in ("values_are_keys", "sink_kinds"):
            if set(getattr(self, name)) - {GLOBAL, WINDOW, CHUNKED}:
                raise ValueError(f"model {self.name!r}: {name} must list attention kinds among global, window and "
                                 f"chunked, got {getattr(self, name)!r}")
        if (self.attention_shapes or self.values_are_keys or self.head_gate) and self.is_mla:
            raise ValueError(f"model {self.name!r}: per-kind head shapes, K=V and head gates apply to GQA "
                             f"attention, not MLA")
        self._check_compressed()
        if self.dense_beside_moe and MOE not in self.layer_mlp:
            raise ValueError(f"model {self.name!r}: dense_beside_moe needs MoE layers (the experts beside the MLP)")

    def _check_compressed(self):
        names = ("compress_sparse", "compress_heavy", "hc_streams", "o_groups", "o_lora_rank")
        for name in names:
            value = getattr(self, name)
            if not _whole(value) or not 0 <= value <= MAX_DIMENSION:
                raise ValueError(f"model {self.name!r}: {name} must be a non-negative integer up to {MAX_DIMENSION}, "
                                 f"got {value!r}")
        kinds = set(self.layer_attention)
        if self.hc_streams and not (self.o_groups and self.o_lora_rank and self.q_lora_rank and self.window
                                    and not self.is_mla and self.n_heads % self.o_groups == 0):
            raise ValueError(f"model {self.name!r}: DeepSeek-V4 layers (hc_streams > 0) need o_groups dividing the "
                             f"heads, o_lora_rank, q_lora_rank and a sliding window > 0")
        if (COMPRESSED_SPARSE in kinds and not (self.compress_sparse and self.index_heads and self.index_head_dim
                                                and self.index_topk)) or (HEAVILY_COMPRESSED in kinds
                                                                          and not self.compress_heavy):
            raise ValueError(f"model {self.name!r}: compressed layers need their compression ratio (compress_sparse, "
                             f"compress_heavy) and, for compressed sparse ones, the indexer's heads, dim and top-k")
        if (kinds & {COMPRESSED_SPARSE, HEAVILY_COMPRESSED}) and not self.hc_streams:
            raise ValueError(f"model {self.name!r}: compressed attention layers are DeepSeek-V4's; set hc_streams")

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
        if isinstance(family, str) and family in UNMODELLED:
            raise ValueError(f"config {name!r}: model_type {family!r} is not modelled yet: {UNMODELLED[family]} "
                             f"is missing; fix: price a supported model (see README 'Model families')")
        if family not in FAMILIES + STATE_FAMILIES:
            raise ValueError(f"config {name!r}: model_type {family!r} is not supported; supported: "
                             f"{', '.join(FAMILIES + STATE_FAMILIES)}")
        digest = hashlib.sha256(json.dumps(hf, sort_keys=True).encode()).hexdigest()[:12]
        tower = family if family in TEXT_CONFIG_OF or "text_config" in hf and family in STATE_FAMILIES else ""
        if family in STATE_FAMILIES:
            fields = state_family_fields(hf, family, name)
        else:
            if family in TEXT_CONFIG_OF or family in CLASS_DEFAULTS:
                hf, family = language_model(hf, family, name)
            fields = (gpt2_fields(hf, name) if family == "gpt2" else nemotron_nas_fields(hf, name)
                      if family == "nemotron-nas" else deepseek_v4_fields(hf, name)
                      if family in ("deepseek_v4", "deepseek_ref") else decoder_fields(hf, family, name))
            if family in MIXED_FAMILIES:
                fields.update(MIXED_FAMILIES[family](hf, fields, name))
        return cls(name=name, family=family, source_hash=digest, text_tower_of=tower, **fields)


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


@lru_cache(maxsize=1)
def _bundled_names() -> tuple:
    return tuple(sorted(p.stem for p in MODELS_DIR.glob("*.json")))


def bundled_models() -> list[str]:
    return list(_bundled_names())


def load_model(name_or_path: str | ModelConfig) -> ModelConfig:
    """A bundled name (a file stem in data/models, e.g. 'llama-2-13b'), a path to a config.json, a
    Hugging Face snapshot directory holding one, or a Hugging Face id ('Qwen/Qwen3-8B', fetched: roofline.models.hub)."""
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
        if not path.is_file() and is_hub_id(text):  # 'Qwen/Qwen3-8B': the hub's config.json, cached
            return config_from_json(config_path(text).read_bytes(), text, name=text)
        if not path.is_file():
            raise ValueError(f"model: unknown model {text!r}; fix: use a bundled name ({', '.join(bundled_models())}), "
                             f"a Hugging Face id (owner/name), a config.json path or a snapshot directory holding one")
    try:
        content = path.read_bytes()
    except OSError as err:
        raise ValueError(f"model config {str(path)!r}: cannot read it ({err.strerror}); fix: pass a readable "
                         f"Hugging Face config.json") from None
    return config_from_json(content, str(path), name=path.stem if path.parent == MODELS_DIR else text)


def config_from_json(content: str | bytes, where: str, name: str) -> ModelConfig:
    """A model from a config.json's text (a file, an upload, a hub download); any fault is one ValueError
    naming `where`."""
    raw = parse_json(content, f"model config {where!r}", "pass a Hugging Face config.json")
    return ModelConfig.from_hf_config(raw, name=name)
