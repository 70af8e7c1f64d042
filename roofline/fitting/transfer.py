"""Transfer to a new generation: the same silicon sample's Blackwell rows priced with the Hopper-fitted profiles.

AIConfigurator's silicon_sample.csv (aiconfigurator-core 0.12.0) holds serving-hopper.csv's H100/H200 rows and,
beside them, rows on B200 SXM, B300 SXM, GB200 and GB300 (issue 24, item 3). The shipped serving profiles
(`vllm`, `sglang`, `tensorrt-llm-1`) were fitted to the Hopper rows alone; the Blackwell rows are kept aside to
score what those profiles say on a GPU generation they never saw. Nothing here fits or tunes: it reads and
prices (published_serving.predict: the load model at each row's concurrency, TTFT and TPOT means).
How a Blackwell row reads, beside serving_rows' Hopper rule:
- systems onto data/hardware.json: b200_sxm -> b200 (HGX B200, 1,000 W), b300_sxm -> b300, gb200 -> gb200,
  gb300 -> gb300 (the NVL72 parts); one worker within 8 GPUs of one NVLink domain (serving_rows.layout);
- NVIDIA's NVFP4 checkpoints (nvidia/DeepSeek-R1-NVFP4, nvidia/DeepSeek-V3.1-NVFP4: DeepSeek-V3's architecture;
  nvidia/Qwen3-32B-NVFP4) onto their bundled configs;
- an nvfp4 quant mode is an NVFP4 checkpoint (E2M1, an fp8 scale per 16: precision.py), not the bundled config's
  shipped format, so the row's modes price it (gpt-oss's MXFP4 and Kimi-K2.5's INT4 experts, already 4-bit as
  shipped, stay as shipped). NVFP4 GEMMs run W4A4 at the FP4 peak: TensorRT-LLM, vLLM and SGLang run ModelOpt
  NVFP4 checkpoints on Blackwell with their activations quantized on the fly to NVFP4 (activations nvfp4);
- gpt-oss's MXFP4 experts take their inputs per engine (MXFP4_EXPERT_INPUTS): TensorRT-LLM quantizes them to
  MXFP8 on Blackwell (examples/models/core/gpt_oss/README.md @0ee4114c, "MoE Support Matrix": Blackwell, activation
  mxfp8, weight mxfp4, CUTLASS or TRTLLM), SGLang too (python/sglang/srt/layers/quantization/mxfp4.py @0043c43a,
  apply: mxfp8_quantize unless --flashinfer-mxfp4-moe-precision bf16): W4A8, the fp8 peak. vLLM keeps them bf16
  unless VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 (vllm/model_executor/layers/quantization/mxfp4.py @007d5005,
  get_mxfp4_backend: SM100 without that flag is SM100_FI_MXFP4_BF16, "For faster performance on SM100, consider
  setting VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1"): W4A16, the bf16 peak;
- the Hopper rows, which the profiles were fitted to, are counted as `fitted device` and never scored here.
"""
from __future__ import annotations

import csv
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..engine import load_engine
from ..models.config import MOE, load_model
from ..precision import Precision
from . import serving_rows
from .published_serving import ServingRow, predict, read_serving_table

BLACKWELL = {"b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200", "gb300": "gb300"}
NVFP4_CHECKPOINTS = {"nvidia/DeepSeek-R1-NVFP4": "deepseek-v3", "nvidia/DeepSeek-V3.1-NVFP4": "deepseek-v3",
                     "nvidia/Qwen3-32B-NVFP4": "qwen3-32b"}
HOPPER_PROFILES = {"sglang": "sglang", "trtllm": "tensorrt-llm-1", "vllm": "vllm"}  # backend -> its fitted profile
# Issue 24's targets for the Blackwell rows from profiles fitted on Hopper: |predicted / measured - 1|.
TARGETS = {"tpot": {"median": 0.15, "p90": 0.35}, "ttft": {"median": 0.20, "p90": 0.45}}
FITTED = "fitted device"  # a Hopper row: the profiles' own; not a transfer score
FOUR_BIT = ("nvfp4", "mxfp4", "int4")
UNUSED_WIDTHS = ("attention_dp_size", "moe_tp_size", "moe_ep_size")
# backend -> the dtype its Blackwell MXFP4 MoE kernels take their inputs in (the module docstring's sources)
MXFP4_EXPERT_INPUTS = {"trtllm": "fp8", "sglang": "fp8", "vllm": "bf16"}


def blackwell_formats(raw: dict, model: str) -> Precision | None:
    """serving_rows.formats, except an nvfp4 row of a model not shipped in 4 bits: an NVFP4 checkpoint, its modes.
    NVFP4 GEMMs run W4A4 (NVFP4 inputs, the FP4 peak); MXFP4 experts take the engine's inputs (MXFP4_EXPERT_INPUTS)."""
    shipped = serving_rows.formats(raw, model)
    modes = {(raw.get(k) or "").strip() for k in ("gemm_quant_mode", "moe_quant_mode")}
    if shipped is None or "nvfp4" not in modes or shipped.expert_format in FOUR_BIT:
        precision = shipped
    else:
        gemm, moe = (serving_rows.QUANT_FORMATS[(raw.get(k) or "").strip()] for k in ("gemm_quant_mode", "moe_quant_mode"))
        experts = moe if MOE in load_model(model).layer_mlp and moe != gemm else None
        precision = Precision(weights=gemm, experts=experts)
    if precision is None:
        return None
    if precision.weights == "nvfp4":
        precision = replace(precision, activations="nvfp4")
    elif precision.expert_format == "nvfp4":
        precision = replace(precision, expert_activations="nvfp4")
    elif precision.expert_format == "mxfp4" and raw.get("backend") in MXFP4_EXPERT_INPUTS:
        precision = replace(precision, expert_activations=MXFP4_EXPERT_INPUTS[raw["backend"]])
    return precision


def read_blackwell_row(raw: dict) -> dict | str:
    """A Blackwell aggregated row's fields for ServingRow, or why it is left out (serving_rows.REASONS, FITTED)."""
    if raw["system"] in serving_rows.SYSTEMS:
        return FITTED
    # AIConfigurator writes 0 where a parallel width does not apply (dense Qwen3-32B's MoE widths and data
    # parallelism on GB200): a blank, as serving_rows reads one
    raw = {**raw, **{k: "" for k in UNUSED_WIDTHS if (raw.get(k) or "").strip() in ("0", "0.0")}}
    return serving_rows.read_row(raw, {**NVFP4_CHECKPOINTS, **serving_rows.MODELS}, BLACKWELL, blackwell_formats)


def disaggregated_rows(path: Path) -> int:
    """The Blackwell rows run disaggregated (prefill and decode pools): not read by the aggregated reader."""
    with Path(path).open(newline="") as handle:
        return sum(1 for raw in csv.DictReader(handle) if raw.get("mode") != "agg" and raw.get("system") in BLACKWELL)


def transfer_scores(rows: list[ServingRow]) -> dict:
    """Per backend (its Hopper-fitted profile) and system: rows, rows priced, and median, p90 and bias (median of
    predicted / measured - 1) of TTFT and TPOT under the load model."""
    report = {}
    for backend in sorted({r.backend for r in rows}):
        if backend not in HOPPER_PROFILES:
            continue
        chosen = [r for r in rows if r.backend == backend]
        predicted = predict(chosen, load_engine(HOPPER_PROFILES[backend]))
        systems = {}
        for system in sorted({r.hardware for r in chosen}) + ["all"]:
            mask = np.array([system in ("all", r.hardware) for r in chosen], dtype=bool)
            systems[system] = {"rows": int(mask.sum())}
            for metric in ("ttft", "tpot"):
                measured = np.array([getattr(r, f"{metric}_s") for r in chosen])[mask]
                error = predicted[f"{metric}_after"][mask] / measured - 1
                error = error[np.isfinite(error)]
                systems[system][metric] = {
                    "n": int(error.size), "median": float(np.median(np.abs(error))) if error.size else None,
                    "p90": float(np.percentile(np.abs(error), 90)) if error.size else None,
                    "bias": float(np.median(error)) if error.size else None}
        report[backend] = {"engine": HOPPER_PROFILES[backend], "systems": systems}
    return report


def score_transfer(path: Path) -> dict:
    """The Blackwell rows of a silicon sample, read and scored: rows read, left out by reason, the scores."""
    read = read_serving_table(path, read=read_blackwell_row)
    left_out = Counter(read.left_out)
    left_out["disaggregated"] = disaggregated_rows(path)
    return {"rows": len(read.rows), "left_out": dict(left_out), "targets": TARGETS,
            "backends": transfer_scores(read.rows)}
