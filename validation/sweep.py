"""Sweeps that lose nothing: every finished point is one flushed CSV row; a rerun skips them.

Order: KV-head variant, dtype, context, batch; decode then prefill at each point. With a probe
(validation.probe, the CPU default), the ceilings are measured around every point. A point that
runs out of memory (or that the library predicts cannot fit) is recorded as does-not-fit with the
predicted capacity, and larger batches at that context are not tried. Ctrl-C loses nothing:
rows already written stay, the interrupted point is simply not there.
"""
from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from roofline import Hardware, ModelConfig
from roofline.models.config import MEASURED_DIMS, MEASURED_OPTIONAL_DIMS, MOE, uniform_layers
from roofline.deployment import Deployment
from roofline.evaluate import evaluate

from . import records
from .ceilings import CeilingReading
from .decoder import attention_kernel, build_decoder, default_kernels, torch_dtype
from .linear import matmul_kernel
from .probe import SteadyProbe
from .quantized import quantize_decoder
from .timing import time_on

DECODE, PREFILL = "decode", "prefill"


class MeasurementError(RuntimeError):
    """A point failed for a reason other than memory (a CUDA fault, a kernel error): named, not retried."""


@dataclass(frozen=True)
class SweepSpec:
    device: str  # "cpu" or "cuda"
    model: ModelConfig
    dtypes: tuple = ("fp32",)
    batches: tuple = (1, 2, 4)
    contexts: tuple = (128, 1024)
    kv_heads: tuple = ()  # n_kv_heads variants (MHA/GQA/MQA); empty: the model's own
    steps: int = 10  # timed decode steps per point
    prefill_repeats: int = 3
    prefill_token_limit: int = 2048  # prefill is measured where batch * context <= this
    kv_dtype: str | None = None  # the cache's dtype (fp8 and int8: quantized); None: the row's dtype
    weight_format: str | None = None  # validation.quantized.FORMATS; None: the row's dtype
    kernels: str = "auto"  # "torch" (eager), "triton" (the fused step), "auto": triton where it runs


# The fields every hash covers: ModelConfig's when the committed serve runs were measured (883375f). A field added
# since counts only where a config sets it away from its default, so adding a field (a new family's) leaves every
# older config's hash, and the runs keyed by it, as they were.
HASHED_FIELDS = frozenset((
    "attention_sinks", "attn_output_gate", "chunk", "cla_factor", "conv_kernel", "d_expert", "d_ff", "d_model",
    "dt_rank", "expert_bias", "family", "gated_mlp", "head_dim", "index_head_dim", "index_heads", "index_topk",
    "kv_lora_rank", "layer_attention", "layer_mlp", "layer_norm", "learned_positions", "max_positions",
    "mlp_bias", "moe_latent", "n_experts", "n_heads", "n_kv_heads", "n_layers", "n_shared_experts",
    "norms_per_layer", "out_bias", "q_lora_rank", "qk_nope_dim", "qk_norm", "qk_rope_dim", "qkv_bias",
    "router_bias", "router_param_bias", "shared_expert_gate", "shared_expert_width", "ssm_chunk",
    "ssm_conv_bias", "ssm_gated_norm", "ssm_groups", "ssm_heads", "ssm_inner", "ssm_proj_bias", "ssm_state",
    "state_bytes", "text_tower_of", "tied_embeddings", "top_k", "v_head_dim", "vocab_size", "window"))


def config_hash(config: ModelConfig) -> str:
    defaults = {f.name: f.default for f in fields(ModelConfig)}
    shape = {k: v for k, v in asdict(config).items() if k not in ("name", "source_hash")
             and (k in HASHED_FIELDS or v != defaults[k])}
    return hashlib.sha256(json.dumps(shape, sort_keys=True, default=list).encode()).hexdigest()[:12]


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "cpu") if Path("/proc/cpuinfo").is_file() else "cpu"
    return f"{model} ({torch.get_num_threads()} threads)"


def device_slug(device: str) -> str:
    return records.device_slug_of(device, device_name(device))


def environment(device: str) -> dict:
    return {"device": device, "device_name": device_name(device), "torch_version": torch.__version__,
            "cuda_version": torch.version.cuda or "", "threads": torch.get_num_threads()}


def free_memory(device: str) -> float:
    if device == "cuda":  # memory torch holds in its cache but does not use is free to it
        return float(torch.cuda.mem_get_info()[0] + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return float(meminfo["MemAvailable"].split()[0]) * 1024


def total_memory(device: str) -> float:
    if device == "cuda":
        return float(torch.cuda.mem_get_info()[1])
    meminfo = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    return float(meminfo["MemTotal"].split()[0]) * 1024


def measured_hardware(device: str, ceilings: CeilingReading) -> Hardware:
    """The device as measured: its measured roofs (the fit's: the read stream, GEMM FLOP/s), not a datasheet."""
    roofs = ceilings.roofs()
    return Hardware(id=f"measured-{device}", name=device_name(device), memory_bytes=total_memory(device),
                    memory_bandwidth=roofs.bandwidth, peak_flops=roofs.peak_flops)


def is_out_of_memory(err: BaseException) -> bool:
    text = str(err).lower()
    return isinstance(err, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(err, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text))


def points(spec: SweepSpec) -> list[tuple]:
    variants = spec.kv_heads or (spec.model.n_kv_heads,)
    return [(k, dtype, context, batch) for k in variants for dtype in spec.dtypes
            for context in sorted(spec.contexts) for batch in sorted(spec.batches)]


class Progress:
    """A one-line-per-point progress bar on stderr: prediction first, then the measurement."""

    def __init__(self, total: int, stream=sys.stderr):
        self.total, self.done, self.stream = total, 0, stream

    def start(self, label: str, predicted_s: float) -> None:
        filled = int(20 * self.done / max(self.total, 1))
        print(f"[{'#' * filled}{'.' * (20 - filled)}] {self.done}/{self.total} {label}: "
              f"predicted {predicted_s * 1e3:.2f} ms", end="", file=self.stream, flush=True)

    def finish(self, outcome: str) -> None:
        self.done += 1
        print(f", {outcome}", file=self.stream, flush=True)


def run_sweep(spec: SweepSpec, path: Path, ceilings: CeilingReading, progress: Progress | None = None,
              probe: SteadyProbe | None = None) -> dict:
    """Measure every point not already in `path`; returns counts of rows written by status.

    ceilings: measured once, for predictions and for rows without a probe; probe: measures them
    again around each point, on a steady machine."""
    if not uniform_layers(spec.model):
        raise ValueError(f"model {spec.model.name!r}: its layers mix attention or MLP kinds, which a measurement "
                         "row cannot record (it keeps one window and one expert count); use a uniform model")
    finished = {records.point_key(row) for row in records.repair(path)}
    hardware = measured_hardware(spec.device, ceilings)
    base = {**environment(spec.device), **ceilings.as_row(), "ceiling_drift": "",  # "": not probed
            "timing_method": "cuda-graph+events" if spec.device == "cuda" else "perf_counter"}
    todo = points(spec)
    progress = progress or Progress(2 * len(todo))
    written = {records.OK: 0, records.DOES_NOT_FIT: 0, "skipped": 0}
    for n_kv_heads, dtype in dict.fromkeys((k, d) for k, d, _, _ in todo):
        config = spec.model if n_kv_heads == spec.model.n_kv_heads else spec.model.with_overrides(n_kv_heads=n_kv_heads)
        identity = {"model": spec.model.name, "config_hash": config_hash(config), "dtype": dtype,
                    "matmul_kernel": matmul_kernel(spec.device, torch_dtype(dtype)),
                    **{f: getattr(config, f) for f in (*MEASURED_DIMS, *MEASURED_OPTIONAL_DIMS)}}
        kernels = default_kernels(config, spec.device) if spec.kernels == "auto" else spec.kernels
        kv_dtype, weight_format = spec.kv_dtype or dtype, spec.weight_format or dtype
        identity.update(kernels=kernels, kv_dtype=kv_dtype, weight_format=weight_format)
        model = build_decoder(config, dtype, spec.device, kv_dtype=kv_dtype, kernels=kernels)
        if weight_format != dtype:
            quantize_decoder(model, weight_format)
        deployment = Deployment(config, hardware, records.row_precision(identity))
        too_big = set()  # contexts where a smaller batch already did not fit
        for k, d, context, batch in todo:
            if (k, d) != (n_kv_heads, dtype):
                continue
            predicted = evaluate(deployment, batch, context, 1, e2e=False)
            for phase in (DECODE, PREFILL):
                row = {**base, **identity, "phase": phase, "batch": batch, "context": context,
                       "attention": attention_kernel(config, spec.device, phase, dtype),
                       "predicted_max_batch": int(predicted["max_batch"]),
                       "predicted_ideal_s": float(predicted["tpot_s" if phase == DECODE else "ttft_s"])}
                if records.point_key(row) in finished or (phase == PREFILL and batch * context > spec.prefill_token_limit):
                    progress.done += 1
                    written["skipped"] += 1
                    continue
                progress.start(f"{phase} kv={n_kv_heads} {dtype} B={batch} S={context}", row["predicted_ideal_s"])
                need = float(predicted["memory_bytes"] - predicted["weight_bytes"])  # the weights are loaded already
                if context in too_big or need > 1.05 * free_memory(spec.device):
                    outcome = _does_not_fit(row)
                elif probe:
                    outcome = probe.around(functools.partial(_measure, model, spec, phase, batch, context, row))
                else:
                    outcome = _measure(model, spec, phase, batch, context, row)
                if outcome["status"] == records.DOES_NOT_FIT:
                    too_big.add(context)
                stamp = {"timestamp": datetime.datetime.now().isoformat(timespec="seconds"),
                         "load_average": os.getloadavg()[0]}  # other processes on the machine skew timings
                records.append_row(path, {**outcome, **stamp})
                written[outcome["status"]] += 1
                progress.finish(f"measured {outcome['time_s'] * 1e3:.2f} ms" if outcome["status"] == records.OK
                                else f"does not fit (predicted max batch {row['predicted_max_batch']})")
        del model
        _release(spec.device)
    return written


def _does_not_fit(row: dict) -> dict:
    return {**row, "status": records.DOES_NOT_FIT, "steps": 0, "time_s": "", "time_p10_s": "", "time_p90_s": ""}


def _release(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()


def _measure(model, spec: SweepSpec, phase: str, batch: int, context: int, row: dict) -> dict:
    """Time one phase at one point: decode at a fixed position (the cache holds `context` tokens)."""
    device = spec.device
    try:
        with torch.inference_mode():
            if phase == DECODE:
                model.allocate_cache(batch, context + 1)
                tokens = torch.randint(0, model.config.vocab_size, (batch, 1), device=device)
                graph_safe = MOE not in model.config.layer_mlp  # routing picks experts on the host
                timing = time_on(device, lambda: model(tokens, start=context), spec.steps, warmup=2, graph=graph_safe)
            else:
                model.allocate_cache(batch, context)
                tokens = torch.randint(0, model.config.vocab_size, (batch, context), device=device)
                graph_safe = MOE not in model.config.layer_mlp  # graphed too: eager small prefills were launch bound
                timing = time_on(device, lambda: model(tokens), spec.prefill_repeats, warmup=1, graph=graph_safe)
    except Exception as err:
        if not is_out_of_memory(err):  # a CUDA fault is not retried: it names its point and stops the sweep
            raise MeasurementError(f"{phase} B={batch} S={context} ({row['model']}, kv heads {row['n_kv_heads']}, "
                                   f"{row['dtype']}): {type(err).__name__}: {err}; the rows before it are kept") from err
        model.release_cache()
        _release(device)
        return _does_not_fit(row)
    finally:
        model.release_cache()
    if device == "cuda":
        row = {**row, "timing_method": timing.method}
    return {**row, "status": records.OK, "steps": timing.n, "time_s": timing.median_s,
            "time_p10_s": timing.p10_s, "time_p90_s": timing.p90_s}


def default_csv(out_dir: Path, device: str) -> Path:
    return Path(out_dir) / f"{device_slug(device)}-{datetime.date.today().isoformat()}.csv"

