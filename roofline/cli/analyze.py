"""`roofline analyze`: one model on one device at several batch sizes, as a table or as JSON.

The JSON is a contract other tools parse: a list with one object per batch size, every value in
SI base units (FLOPs, bytes, seconds) as a plain JSON number, bool or string (never NaN: a value
that is not finite becomes null). Each object carries the `Analysis.records()` keys plus `model`,
`config_hash`, `hardware`, `method`, `calibration`, the precisions, `tpot_definition`,
`napkin_tpot_s` and `roofline_tpot_s`; `tpot_s` and `tokens_per_s` are those of `--method`.
Sizes carry their scope: `params_per_gpu`/`params_total`, `weight_bytes_per_gpu`/`weight_bytes_total`,
`memory_bytes_per_gpu`/`memory_bytes_total` (`params`, `weight_bytes`, `memory_bytes` are the per-GPU
figures, kept for older readers); `tokens_per_s` counts every replica.
Bad input raises ValueError naming the flag; the dispatcher turns it into one line and exit code 2.
"""
from __future__ import annotations

import argparse
import json

from ..allreduce import RING
from ..api import METRIC_DEFINITIONS, Analysis, analyze
from ..hardware import load_hardware
from ..models.config import CHUNKED, WINDOW, load_model
from ..memory import DEFAULT_PREFILL_CHUNK
from . import args as parse
from .engines import CALIBRATION_HELP, engine_choice
from ..views.fmt import fmt_bytes, fmt_count, fmt_rate, fmt_seconds, plain
from .load import add_load_arguments, run_load, under_load
from ..model import ATTENTION_IMPLS, MLA_FORMS, Options
from ..models.checkpoint_format import load_shipped_precision
from ..precision import ACTIVATION_DTYPES, FP4_ACTIVATIONS, GROUPED_FORMATS, Precision, as_served, normalize_dtype

METHODS = ("roofline", "napkin")
DEFAULT_BATCH = "1,64,256"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Values stay strings here and are checked in run(), so a bad one is a one-line error naming its flag.
    parser.add_argument("--model", default="llama-2-13b", help="bundled name (data/models) or a config.json path")
    parser.add_argument("--hardware", metavar="HW", default="h100-sxm",
                        help="bundled id (data/hardware.json) or a JSON path")
    parser.add_argument("--batch", metavar="B,B,...", default=DEFAULT_BATCH,
                        help="comma-separated batch sizes (default %(default)s)")
    parser.add_argument("--prompt", metavar="P", default="1024", help="prompt tokens (default %(default)s)")
    parser.add_argument("--gen", metavar="G", default="128", help="generated tokens (default %(default)s)")
    add_precision(parser)
    parser.add_argument("--kv-heads", metavar="K", default=None,
                        help="what-if: this many KV heads (must divide the query heads)")
    parser.add_argument("--method", metavar="{roofline,napkin}", default="roofline",
                        help="headline TPOT: roofline or napkin (default %(default)s)")
    parser.add_argument("--attention", metavar="{flash,eager}", default="flash",
                        help=f"{' or '.join(ATTENTION_IMPLS)} (default %(default)s)")
    parser.add_argument("--mla-form", metavar="{absorbed,naive,expanded}", default=None,
                        help=f"MLA models only: decode form, {', '.join(MLA_FORMS)} (default {MLA_FORMS[0]})")
    parser.add_argument("--cla", metavar="N", default=None,
                        help="what-if: one KV cache shared by N layers (cross-layer attention)")
    parser.add_argument("--calibration", metavar="NAME|FILE", default=None, help=CALIBRATION_HELP)
    parser.add_argument("--engine", metavar="NAME|FILE", default=None,
                        help="an engine profile (data/engines: ideal, harness, harness-cpu, hf-eager, gpt-fast, "
                             "llama.cpp, tensorrt-llm) or a YAML path: the times are its estimate, the ideal bound "
                             "beside them")
    parser.add_argument("--tp", metavar="T", default="1", help="tensor-parallel degree (default %(default)s)")
    parser.add_argument("--replicas", metavar="M", default="1", help="model copies (default %(default)s)")
    parser.add_argument("--expert-tp", metavar="N", default=None,
                        help="MoE only: of the --tp GPUs, how many split each routed expert; the rest hold whole "
                             "experts (expert parallelism inside tp: vLLM --enable-expert-parallel, TensorRT-LLM "
                             "moe_ep_size). Default: all --tp (each GPU a d_expert / tp slice of every expert)")
    add_prefill_chunk(parser)
    parser.add_argument("--allow-beyond-window", action="store_true",
                        help="price a prompt + gen longer than the model's context window instead of refusing it")
    parser.add_argument("--json", action="store_true", help="print a JSON list, one object per batch size")
    add_load_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Prefill, decode, memory and throughput of one model on one device at several batch sizes."""
    method = _choice("--method", args.method, METHODS)
    if under_load(args):  # the load's rows replace the batch sizes'
        args.batch = "1"
    config = load_model(args.model)
    overrides = _overrides(config, args)
    analysis = analyze(
        config, args.hardware, batch=parse_batches(args.batch),
        prompt=parse.number(args.prompt, "--prompt", whole=True), gen=parse.number(args.gen, "--gen", whole=True),
        precision=precision_of(args),
        options=Options(attention=_choice("--attention", args.attention, ATTENTION_IMPLS),
                        mla_form=_mla_form(config, args.mla_form)),
        tp=parse.number(args.tp, "--tp", whole=True), replicas=parse.number(args.replicas, "--replicas", whole=True),
        expert_tp=None if args.expert_tp is None else parse.number(args.expert_tp, "--expert-tp", whole=True),
        engine=engine_choice(args), allow_beyond_window=args.allow_beyond_window,
        prefill_chunk=prefill_chunk(args.prefill_chunk), **overrides)
    if under_load(args):
        return run_load(args, analysis, int(args.prompt), int(args.gen))
    rows = json_records(analysis, method)
    if args.json:
        print(json.dumps(rows, indent=2, allow_nan=False))
    else:
        print(render_table(analysis, rows, method, overrides))
    return 0


COMMANDS = [("analyze", add_arguments, run)]


def add_precision(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--weights", metavar="DTYPE", default=None,
                        help="weight format: bf16, fp16, fp8, int8, int4, q8_0, q4_0, mxfp4, nvfp4 (default bf16, "
                             "or the checkpoint's with --as-shipped)")
    add_experts(parser)
    parser.add_argument("--kv", metavar="DTYPE", default=None,
                        help="KV-cache dtype (default bf16, or the checkpoint's with --as-shipped)")
    parser.add_argument("--act", metavar="DTYPE", default=None,
                        help="activation dtype (default: as serving engines run the weights on this device: fp8 with "
                             "fp8 weights where it has fp8 tensor cores, W8A8, nvfp4 with nvfp4 weights on Blackwell's "
                             "FP4 units, W4A4; bf16 otherwise. --act bf16 prices a weight-only run)")
    parser.add_argument("--as-shipped", action="store_true",
                        help="weight, expert and KV formats as the checkpoint ships them (its config.json's "
                             "quantization_config and an hf_quant_config.json beside it); --weights, --experts "
                             "and --kv still override each")


def add_experts(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--experts", metavar="FORMAT", default=None,
                        help="the routed MoE experts' weight format (gpt-oss: mxfp4; Kimi-K2-Thinking: int4); "
                             "default: the --weights format. A model without routed experts refuses it")


def experts_of(args) -> str | None:
    return None if args.experts is None else normalize_dtype(args.experts, "--experts")


def precision_of(args) -> Precision:
    shipped = load_shipped_precision(args.model) if getattr(args, "as_shipped", False) else None
    base = shipped or Precision()
    weights = base.weights if args.weights is None else normalize_dtype(args.weights, "--weights")
    kv = base.kv if args.kv is None else normalize_dtype(args.kv, "--kv")
    experts = experts_of(args) if args.experts is not None else base.experts
    activations = "bf16" if args.act is None else normalize_dtype(args.act, "--act")
    if activations in GROUPED_FORMATS and activations not in FP4_ACTIVATIONS:
        raise ValueError(f"--act: {activations} is a group-quantized weight format, not a dtype activations are "
                         f"computed in; fix: --act one of {', '.join(ACTIVATION_DTYPES)} (W4A16: --weights int4 --act bf16)")
    keep = dict(weight_group_size=base.weight_group_size if weights == base.weights else None,
                expert_group_size=base.expert_group_size if experts is not None and experts == base.experts else None)
    precision = Precision(weights=weights, activations=activations, kv=kv, experts=experts, **keep)
    # no --act: the activations a serving engine takes with these weights on this device (W8A8 fp8 on Hopper)
    return precision if args.act is not None else as_served(precision, load_hardware(args.hardware).peak_flops)


def add_prefill_chunk(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prefill-chunk", "--chunk", metavar="N|all", dest="prefill_chunk",
                        default=str(DEFAULT_PREFILL_CHUNK),
                        help="prompt tokens per prefill step, which sizes the activation workspace in memory and max "
                             "batch ('all': every prompt of the batch at once; default %(default)s)")


def prefill_chunk(text) -> int | None:
    if str(text).strip().lower() == "all":
        return None
    return parse.number(text, "--prefill-chunk", whole=True, example="2048 (or all)")


def parse_batches(text: str) -> list[int]:
    """'1,64,256' -> [1, 64, 256]; anything else raises ValueError naming --batch."""
    return parse.numbers(text, "--batch", whole=True, example="1,64,256")


def _mla_form(config, text: str | None) -> str:
    """--mla-form on a model without MLA would change nothing, silently; refuse it instead."""
    if text is None:
        return MLA_FORMS[0]
    if not config.is_mla:
        raise ValueError(f"--mla-form: model {config.name!r} has no multi-head latent attention (kv_lora_rank 0), so "
                         f"the form changes nothing; fix: drop --mla-form, or pick an MLA model (deepseek-v3)")
    return _choice("--mla-form", text, MLA_FORMS)


def _choice(flag: str, value: str, allowed: tuple) -> str:
    if value not in allowed:
        raise ValueError(f"{flag}: unknown value {value!r}; use one of {', '.join(allowed)}")
    return value


def _overrides(config, args) -> dict:
    """The what-if overrides given on the command line, each checked against the model it changes."""
    overrides = {}
    for flag, field, text in (("--kv-heads", "n_kv_heads", args.kv_heads), ("--cla", "cla_factor", args.cla)):
        if text is None:
            continue
        overrides[field] = parse.number(text, flag, whole=True)
        if field == "n_kv_heads" and not config.has_kv_heads:
            raise ValueError(f"--kv-heads: model {config.name!r} uses MLA (one shared latent KV cache); "
                             "KV heads do not apply")
        try:
            config.with_overrides(**{field: overrides[field]})
        except ValueError as err:
            raise ValueError(f"{flag} {overrides[field]}: {err}") from None
    return overrides


def json_records(analysis: Analysis, method: str) -> list[dict]:
    """One plain-JSON object per batch size: the library's records plus the contract's labels."""
    p = analysis.precision
    napkin = method == "napkin"
    rows = []
    for record in analysis.records():
        row = {"model": analysis.config.name, "config_hash": analysis.config.source_hash,
               "hardware": analysis.hardware.id, "method": method,
               "calibration": analysis.engine.name,  # kept for older readers: the achievable roofs' name
               "weights": p.weights, "experts": p.expert_format, "activations": p.activations, "kv": p.kv, **record}
        row["roofline_tpot_s"] = record["tpot_s"]
        if napkin:
            row["tpot_s"] = record["napkin_tpot_s"]
            row["tokens_per_s"] = record["napkin_tokens_per_s"]
        row["tpot_definition"] = METRIC_DEFINITIONS["napkin_tpot_s" if napkin else "tpot_s"]
        row["prefill_chunk"] = analysis.prefill_chunk  # tokens per prefill step behind workspace_bytes; null: all
        row["prefill_batch_s"] = row["ttft_s"]  # the offline batch's TTFT: every prompt of the batch prefilled together
        row["arrival"] = "offline batch: the batch's requests arrive together (--rate / --concurrency: under load)"
        rows.append({k: plain(v) for k, v in row.items()})
    return rows


COLUMNS = (  # header, record key, formatter; numbers align right, words left
    ("batch", "batch", str),
    ("memory", "memory_bytes", fmt_bytes),
    ("fits", "fits", lambda v: "yes" if v else "no"),
    ("TTFT", "ttft_s", fmt_seconds),
    ("TPOT", "tpot_s", fmt_seconds),
    ("tokens/s", "tokens_per_s", fmt_count),
    ("E2E", "e2e_s", fmt_seconds),
    ("decode bound", "decode_bound", str),
)
LEFT = ("fits", "decode bound")


def render_table(analysis: Analysis, rows: list[dict], method: str, overrides: dict) -> str:
    """The human view: a header naming what was analyzed, one line per batch size, the definitions."""
    cfg, hw, p = analysis.config, analysis.hardware, analysis.precision
    first = rows[0]
    other = ("roofline TPOT", "roofline_tpot_s") if method == "napkin" else ("napkin TPOT", "napkin_tpot_s")
    columns = COLUMNS + ((other[0], other[1], fmt_seconds),)
    engine = analysis.deployment.engine
    if not engine.is_ideal:
        columns += (("ideal TTFT", "ideal_ttft_s", fmt_seconds), ("ideal TPOT", "ideal_tpot_s", fmt_seconds))
    if first["gpus"] > 1:  # label the per-GPU column
        columns = tuple(("memory/GPU", *c[1:]) if c[1] == "memory_bytes" else c for c in columns)
    cells = [[h for h, _, _ in columns]] + [[fmt(row[key]) for _, key, fmt in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    left = [h in LEFT for h, _, _ in columns]
    lines = ["  ".join(c.ljust(w) if lj else c.rjust(w) for c, w, lj in zip(line, widths, left)).rstrip()
             for line in cells]
    what_if = ", ".join(f"{k}={v}" for k, v in overrides.items())
    header = [
        f"model     {cfg.name} (config {cfg.source_hash})" + (f", what-if {what_if}" if what_if else "")
        + (f"; the text tower of {cfg.text_tower_of}: text decode, vision encoder not priced"
           if cfg.text_tower_of else ""),
        f"hardware  {hw.name} ({hw.id}): {fmt_bytes(hw.memory_bytes)}, {fmt_rate(hw.memory_bandwidth, 'B/s')}",
        (f"precision weights {p.weights}" + (f", routed experts {p.experts}" if p.experts else "") +
         f", activations {p.activations}, KV {p.kv}; "
         f"attention {analysis.options.attention}" + (f", MLA {analysis.options.mla_form}" if cfg.is_mla else "")),
        f"workload  prompt {first['prompt_len']} tokens, gen {first['gen_len']} tokens; TPOT method {method}",
        f"engine    {_engine_text(engine)}",
        f"memory    weights + KV at prompt + gen + the activation workspace of {_chunk_text(analysis.prefill_chunk)}",
    ] + _size_lines(first, _kv_text(analysis, first))
    tpot = f"TPOT: {METRIC_DEFINITIONS['tpot_s']}"
    if method == "napkin":
        tpot = f"TPOT (napkin): {METRIC_DEFINITIONS['napkin_tpot_s']}; like the roofline TPOT, excludes the first token"
    else:
        tpot += f". napkin TPOT: {METRIC_DEFINITIONS['napkin_tpot_s']}"
    replicas = first["replicas"]
    rate = f"batch x {replicas} replicas / TPOT (every replica)" if replicas > 1 else "batch / TPOT"
    if not engine.is_ideal:
        gap = analysis.engine_gap(int(first["batch"]), int(first["prompt_len"]))
        header.append(f"gap       {engine.name}'s decode step at batch {first['batch']} over the ideal bound: "
                      + ", ".join(f"{term} +{fmt_seconds(seconds)}" for term, seconds in gap.items()))
    footer = ["An offline batch: the batch's requests arrive together (--rate R or --concurrency C: a server under load).",
              f"TTFT: {METRIC_DEFINITIONS['ttft_s']}.", f"{tpot}.",
              f"tokens/s: {rate}. E2E: {METRIC_DEFINITIONS['e2e_s']}.",
              f"decode bound: {METRIC_DEFINITIONS['decode_bound']}."]
    return "\n".join(header + [""] + lines + [""] + footer)


def _engine_text(engine) -> str:
    if engine.is_ideal:
        return "ideal bound (datasheet peaks, no overhead)"
    quantized = "".join(f", {fmt} GEMV x{e:.2g}" for fmt, e in engine.quantized_efficiency.items())
    if engine.expert_bandwidth_efficiency != 1.0:
        quantized += f", routed experts x{engine.expert_bandwidth_efficiency:.2g}"
    if engine.expert_flops_efficiency != 1.0:
        quantized += f", expert GEMMs x{engine.expert_flops_efficiency:.2g}"
    quantized += "".join(f", {fmt} expert GEMMs x{e:.2g}" for fmt, e in engine.expert_flops_efficiency_by_format.items())
    quantized += "".join(f", attention over a {fmt} cache x{e:.2g}"
                         for fmt, e in engine.attention_bandwidth_efficiency_by_kv.items())
    quantized += "".join(f", {dtype} GEMMs x{e:.2g}" for dtype, e in engine.flops_efficiency_by_dtype.items())
    if engine.expert_layer_overhead_s:
        quantized += f", {fmt_seconds(engine.expert_layer_overhead_s)} a MoE layer"
    if engine.expert_slice_half_columns:
        quantized += f", expert slices {engine.expert_slice_half_columns:.0f} columns wide at half rate"
    quantized += "".join(f", {dtype} GEMMs at half rate {n:.0f} columns wide or {k:.0f} deep"
                         for dtype, (k, n) in engine.gemm_shape.halves.items())
    latency = "" if engine.allreduce_latency_s is None else f", all-reduce {fmt_seconds(engine.allreduce_latency_s)}"
    if engine.allreduce_doubling_s:
        latency += f" over 2 GPUs, +{fmt_seconds(engine.allreduce_doubling_s)} a doubling"
    if engine.alltoall_overhead_s:
        latency += f", +{fmt_seconds(engine.alltoall_overhead_s)} an expert-parallel all-to-all"
    if engine.allreduce.algorithm != RING:
        latency += (f" ({engine.allreduce.algorithm}: one shot up to {fmt_bytes(engine.allreduce.one_shot_max_bytes)}, "
                    f"{engine.allreduce.bandwidth_share:.2f} of the link)")
    ops = f"{fmt_seconds(engine.op_overhead_s)} an op a step, " if engine.op_overhead_s else ""
    sequence = f"{fmt_seconds(engine.sequence_overhead_s)} a running sequence a step, " if engine.sequence_overhead_s else ""
    if engine.request_op_overhead_s:
        latency = f" + {fmt_seconds(engine.request_op_overhead_s)} an op (its prompt's first pass){latency}"
    if engine.frontend_request_s or engine.frontend_chunk_s:  # roofline.serving.front_end
        latency += (f"; its front end {fmt_seconds(engine.frontend_request_s)} a request, "
                    f"{fmt_seconds(engine.frontend_chunk_s)} a streamed chunk")
    return (f"{engine.name}: weights stream at {engine.bandwidth_efficiency:.2f} of the bandwidth{quantized}, GEMMs at "
            f"{engine.flops_efficiency:.2f} of the peak, attention at {engine.attention_bandwidth_efficiency:.2f}; "
            f"{fmt_seconds(engine.layer_overhead_s)} a layer, {ops}{fmt_seconds(engine.step_overhead_s)} a step, {sequence}"
            f"{fmt_seconds(engine.request_overhead_s)} a request{latency} (data/engines/{engine.name}.yaml)")


def _chunk_text(chunk) -> str:
    if chunk is None:
        return "every prompt of the batch prefilled at once (--prefill-chunk all)"
    return f"one {chunk}-token prefill chunk (--prefill-chunk)"


def _kv_text(analysis: Analysis, first: dict) -> str:
    """The KV cache's size. With window or chunked layers a per-token figure would count them as global, so it
    is given at the stated context, then per token past the longest window (global layers only)."""
    config = analysis.config
    if WINDOW not in config.layer_attention and CHUNKED not in config.layer_attention:
        return f"KV cache {fmt_bytes(first['kv_bytes_per_token'])} per token"
    cache, kv_bytes = analysis.deployment.compiled.kv_cache, analysis.deployment.precision.kv_bytes
    held = max(config.window, config.chunk)  # tokens a window or chunked layer keeps at most
    context = int(first["prompt_len"] + first["gen_len"])
    state = first.get("state_bytes_per_sequence", 0)
    at_context = float(cache(1.0, float(context), kv_bytes)) - state
    growth = float(cache(1.0, held + 1.0, kv_bytes) - cache(1.0, float(held), kv_bytes))
    kinds = " and ".join(k for k in (WINDOW, CHUNKED) if k in config.layer_attention)
    return (f"KV cache {fmt_bytes(at_context)} per sequence at prompt + gen ({context} tokens; {kinds} layers keep "
            f"at most {held}), then {fmt_bytes(growth)} per token (global layers)")


def _size_lines(first: dict, kv: str) -> list[str]:
    """Sizes labelled by scope: one GPU and the whole deployment whenever they differ."""
    if first.get("state_bytes_per_sequence", 0) > 0:  # SSM / linear-attention layers: flat in the context
        kv += f" + constant state {fmt_bytes(first['state_bytes_per_sequence'])} per sequence"
    if first["gpus"] == 1:
        return [f"params {fmt_count(first['params'])}, weights {fmt_bytes(first['weight_bytes'])}, {kv}, "
                f"max batch {first['max_batch']}"]
    tp, replicas, gpus = first["tp"], first["replicas"], first["gpus"]
    return [
        (f"deployment tensor parallel {tp} x {replicas} replica{'s' if replicas > 1 else ''} = {gpus} GPUs; "
         f"batch, memory, fits and max batch are per replica (memory per GPU); tokens/s counts every replica"),
        (f"params {fmt_count(first['params_total'])} in the model, {fmt_count(first['params_per_gpu'])} per GPU; "
         f"weights {fmt_bytes(first['weight_bytes_total'])} over all {gpus} GPUs, "
         f"{fmt_bytes(first['weight_bytes_per_gpu'])} per GPU"),
        f"{kv} per GPU, max batch {first['max_batch']} per replica",
    ]
