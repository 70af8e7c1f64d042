"""The weight, routed-expert and KV formats a checkpoint ships in, read from its quantization configs.

Two sources, the second winning: `quantization_config` in config.json (or its text_config), and NVIDIA
ModelOpt's `hf_quant_config.json` beside it. What each spells:
- fp8 (DeepSeek, Qwen, MiniMax, GLM "-FP8"): E4M3 weights with one scale per 128 x 128 block (1/16384 of a
  byte a weight, left out); KV not quantized.
- mxfp4 (gpt-oss): routed experts MXFP4, everything in modules_to_not_convert (attention, router) bf16.
- compressed-tensors (Kimi-K2.5): int weights of num_bits with one bf16 scale per group_size; the modules it
  ignores (attention, shared experts, dense MLPs) stay bf16: experts INT4 g32, 4.5 bits.
- modelopt NVFP4: E2M1 values with one FP8 (E4M3) scale per 16 and one fp32 scale per tensor, 4.5 bits;
  FP8; MIXED_PRECISION lists each layer's algorithm. kv_cache_quant_algo (or kv_cache_scheme) FP8: an fp8 KV.
Precision has one format for every weight that is not a routed expert: an MoE checkpoint that leaves its
attention unquantized (exclude_modules naming it) is priced with all non-expert weights bf16, one that
quantizes every linear layer with them all in the shipped format; a dense model takes its MLP's format
throughout. The embeddings and LM head follow the same rule.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..precision import Precision

MODELOPT_FORMATS = {"NVFP4": "nvfp4", "W4A16_NVFP4": "nvfp4", "FP8": "fp8", "W4A16_AWQ": "int4", "INT4_AWQ": "int4",
                    "W4A8_AWQ": "int4", "MXFP4": "mxfp4", "W4A16_MXFP4": "mxfp4",
                    "MXFP8": "fp8"}  # MXFP8: E4M3 with an 8-bit exponent per 32 (1/32 byte a weight, left out)
# compressed-tensors weight (type, num_bits) -> our format; a float 4-bit group is MXFP4 (Kimi-K3's uint8 scales)
COMPRESSED_FORMATS = {("int", 4): "int4", ("int", 8): "int8", ("float", 4): "mxfp4", ("float", 8): "fp8"}
EXPERT_COUNT_KEYS = ("n_routed_experts", "num_experts", "num_local_experts")
# Names of attention (and other mixer) projections in the exclusion lists: when these stay unquantized, so do
# (in our one-format approximation) the other non-expert weights.
ATTENTION_NAMES = ("self_attn", "q_proj", "q_a_proj", "kv_a_proj", "linear_attn", "in_proj", "attn")


def _bad(source: str, key: str, value, expected: str) -> ValueError:
    return ValueError(f"{source}: field {key!r} must be {expected}, got {value!r}; fix: correct the quantization "
                      f"config, or price the formats yourself with --weights/--experts/--kv")


def shipped_precision(hf: dict, quant: dict | None = None, name: str = "config.json") -> Precision | None:
    """The Precision a checkpoint ships in, None when its configs state no quantization (bf16, as before)."""
    if quant is not None:
        source = f"{name} (hf_quant_config.json)"
        body = quant.get("quantization", quant) if isinstance(quant, dict) else quant
        if not isinstance(body, dict):
            raise _bad(source, "quantization", body, "an object with quant_algo")
        return _modelopt(body, source, hf)
    text = hf.get("text_config") if isinstance(hf.get("text_config"), dict) else {}
    config = hf.get("quantization_config") or text.get("quantization_config")
    if not config:
        return None
    if not isinstance(config, dict):
        raise _bad(name, "quantization_config", config, "an object")
    method = config.get("quant_method")
    if method == "fp8":
        return Precision(weights="fp8")
    if method == "mxfp4":
        return Precision(weights="bf16", experts="mxfp4")
    if method == "compressed-tensors":
        return _compressed_tensors(config, name)
    if method == "modelopt":
        return _modelopt(config, name, hf)
    raise _bad(name, "quantization_config.quant_method", method, "one of fp8, mxfp4, compressed-tensors, modelopt")


def _compressed_tensors(config: dict, name: str) -> Precision:
    groups = config.get("config_groups")
    groups = groups if isinstance(groups, dict) else {}
    weights = [g.get("weights") for g in groups.values() if isinstance(g, dict) and isinstance(g.get("weights"), dict)]
    if len(weights) != 1 or (weights[0].get("type", "int"), weights[0].get("num_bits")) not in COMPRESSED_FORMATS:
        raise _bad(name, "quantization_config.config_groups", groups,
                   "one group of 4- or 8-bit int weights, or 4-bit float (MXFP4) weights")
    fmt = COMPRESSED_FORMATS[weights[0].get("type", "int"), weights[0]["num_bits"]]
    group = weights[0].get("group_size") if weights[0].get("strategy") == "group" else None
    if group is not None and (not isinstance(group, int) or isinstance(group, bool) or group <= 0):
        raise _bad(name, "quantization_config.config_groups.weights.group_size", group, "a positive integer")
    ignored = _names(config.get("ignore"))
    if any(a in ignored for a in ATTENTION_NAMES):  # Kimi-K2.5: only the routed experts are int4
        return Precision(weights="bf16", experts=fmt, expert_group_size=group)
    return Precision(weights=fmt, weight_group_size=group)


def _modelopt(config: dict, source: str, hf: dict) -> Precision:
    algo = config.get("quant_algo")
    kv_algo = config.get("kv_cache_quant_algo")
    scheme = config.get("kv_cache_scheme")
    kv_fp8 = kv_algo == "FP8" or isinstance(scheme, dict) and scheme.get("num_bits") == 8
    kv = "fp8" if kv_fp8 else "bf16"
    if algo == "MIXED_PRECISION":
        experts, others = _mixed_formats(config.get("quantized_layers"), source)
    elif algo in MODELOPT_FORMATS:
        experts = others = MODELOPT_FORMATS[algo]
        excluded = _names(config.get("exclude_modules") or config.get("ignore"))
        if any(a in excluded for a in ATTENTION_NAMES):
            others = "bf16"
    else:
        raise _bad(source, "quant_algo", algo, f"one of {', '.join(MODELOPT_FORMATS)} or MIXED_PRECISION")
    if not _has_experts(hf):  # a dense model: its MLP's format, most of its bytes, for every weight
        return Precision(weights=experts, kv=kv)
    return Precision(weights=others, experts=experts, kv=kv)


def _names(modules) -> str:
    """A module list (exclude_modules, ignore) as one string to search; anything else names nothing."""
    return " ".join(str(m) for m in modules) if isinstance(modules, list) else ""


def _has_experts(hf: dict) -> bool:
    text = hf.get("text_config") if isinstance(hf.get("text_config"), dict) else hf
    return any(isinstance(text.get(k), int) and text.get(k) > 1 for k in EXPERT_COUNT_KEYS)


def _mixed_formats(layers, source: str) -> tuple[str, str]:
    """(routed experts' format, other weights' format) from MIXED_PRECISION's per-layer list: the experts' (or,
    in a dense model, the MLP's) algorithm, and the attention projections' (bf16 when none is listed)."""
    if not isinstance(layers, dict) or not layers:
        raise _bad(source, "quantized_layers", layers, "an object of layer name -> {quant_algo}")
    def of(names):
        found = [v.get("quant_algo") for k, v in layers.items() if isinstance(v, dict) and any(n in k for n in names)]
        for algo in found:
            if algo not in MODELOPT_FORMATS:
                raise _bad(source, "quantized_layers.quant_algo", algo, f"one of {', '.join(MODELOPT_FORMATS)}")
        return MODELOPT_FORMATS[max(set(found), key=found.count)] if found else None
    experts = of(("experts",)) or of(("up_proj", "down_proj"))
    return experts or "bf16", of(("q_proj", "qkv", "in_proj", "o_proj")) or "bf16"


def quant_config_beside(config_path: Path) -> dict | None:
    """The hf_quant_config.json shipped with a config.json: `hf_quant_config.json` in its folder, or
    `<stem>_hf_quant_config.json` beside a `<stem>_config.json` (NVIDIA aiconfigurator's naming)."""
    for candidate in (config_path.with_name("hf_quant_config.json"),
                      config_path.with_name(config_path.name.replace("_config.json", "_hf_quant_config.json"))):
        if candidate != config_path and candidate.is_file():
            return json.loads(candidate.read_text())
    return None


def load_shipped_precision(name_or_path: str) -> Precision | None:
    """The shipped formats of a bundled model, a config.json path, or a snapshot directory holding one."""
    from .config import MODELS_DIR
    path = Path(name_or_path)
    path = path / "config.json" if path.is_dir() else path if path.is_file() else MODELS_DIR / f"{name_or_path}.json"
    if not path.is_file():
        raise ValueError(f"model: unknown model {name_or_path!r}; fix: use a bundled name or a config.json path")
    try:
        return shipped_precision(json.loads(path.read_text()), quant_config_beside(path), path.name)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"model config {str(path)!r}: cannot read JSON ({err}); fix: pass a Hugging Face "
                         f"config.json and its hf_quant_config.json") from None
