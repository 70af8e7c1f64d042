"""`roofline speculate | crossovers | simulate | parallel`: serving what-ifs, as text or JSON.

The JSON is a contract: one object, SI base units, plain numbers (never NaN: a value that is not
finite becomes null); a crossover's symbolic expression rides next to it as `<key>_expression`;
the one list, simulate's `batch_trace`, holds [seconds, sequences] pairs.
Bad input raises ValueError naming the flag; the dispatcher turns it into exit code 2.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import sympy as sp

from ..models.config import check_context, load_model
from ..deployment import Deployment
from ..precision import Precision
from ..serving.batching import MAX_REQUESTS
from ..views.fmt import fmt_bytes, fmt_number, fmt_seconds, plain
from ..study.report_whatifs import MTP_COST, draft_model
from .analyze import add_precision, add_prefill_chunk, precision_of, prefill_chunk
from . import args as parse
from .engines import CALIBRATION_HELP, engine_choice


def _precision(args) -> Precision:
    return precision_of(args)


def _common(parser: argparse.ArgumentParser, model_default="llama-2-13b", prompt: bool = True) -> None:
    parser.add_argument("--model", default=model_default,
                        help="bundled name (data/models), a config.json path or a snapshot directory holding one")
    parser.add_argument("--hardware", metavar="HW", default="h100-sxm", help="bundled id or a JSON path")
    if prompt:
        parser.add_argument("--prompt", metavar="S", default="1024", help="tokens already in context (default %(default)s)")
    add_precision(parser)
    parser.add_argument("--calibration", metavar="NAME|FILE", default=None, help=CALIBRATION_HELP)
    parser.add_argument("--engine", metavar="NAME|FILE", default=None,
                        help="an engine profile (data/engines) or a YAML path: its achievable roofs and fixed costs")
    parser.add_argument("--allow-beyond-window", action="store_true",
                        help="price contexts longer than the model's context window instead of refusing them")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _tp(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tp", metavar="t", default="1", help="tensor-parallel degree (default %(default)s)")


def _deployment(args, **degrees):
    """The flags' Deployment: the one resolver (roofline.deployment.Deployment.of) turns the names into objects."""
    return Deployment.of(args.model, args.hardware, precision=_precision(args), engine=engine_choice(args),
                         **degrees)


def _emit(args, record: dict, lines: list[str]) -> int:
    if args.json:
        print(json.dumps({k: plain(v) for k, v in record.items()}, indent=2, allow_nan=False))
    else:
        print("\n".join(lines))
    return 0


# --- speculate ---------------------------------------------------------------------------------

def add_speculate(parser: argparse.ArgumentParser) -> None:
    _common(parser, "llama-2-70b")
    parser.add_argument("--draft", default=None,
                        help="draft model (name or path), or a number in (0, 1]: its cost as a share of a target step "
                             "(default: the smallest bundled model of the target's family and vocabulary, else "
                             f"{MTP_COST:g}, an MTP-style head); the draft runs at the target's --tp")
    parser.add_argument("--gamma", metavar="G", default="4", help="drafted tokens per iteration (>= 1)")
    parser.add_argument("--alpha", metavar="A", default="0.8", help="per-token acceptance rate in [0, 1]")
    parser.add_argument("--batch", metavar="B", default="1", help="sequences decoded together (default %(default)s)")
    _tp(parser)


def _draft(text: str | None, target) -> tuple:
    """The draft and why it was picked: --draft as given (a model, or a cost share in (0, 1]), else the
    smallest bundled model sharing the target's family and vocabulary (as `report` picks), else an MTP head."""
    if text is None:
        draft = draft_model(target)
        if draft is None:
            return MTP_COST, f" of a target step (an MTP-style head: no smaller bundled model shares {target.name}'s vocabulary)"
        return draft, f" (the smallest bundled {target.family} model with V = {target.vocab_size})"
    try:
        float(text)
    except ValueError:
        return load_model(text), ""
    return parse.number(text, "--draft", low=0, high=1), " of a target step"


def run_speculate(args: argparse.Namespace) -> int:
    """Speculative decoding: tokens per iteration, effective TPOT, speedup and the best lookahead."""
    from ..serving.speculation import speculate
    gamma = parse.number(args.gamma, "--gamma", whole=True)
    alpha = parse.number(args.alpha, "--alpha", low=0, inclusive=True, high=1)
    d = _deployment(args, tp=parse.number(args.tp, "--tp", whole=True))
    draft, why = _draft(args.draft, d.config)
    result = speculate(d, draft, gamma, alpha, batch=parse.number(args.batch, "--batch", whole=True),
                       prompt=parse.number(args.prompt, "--prompt", whole=True),
                       allow_beyond_window=args.allow_beyond_window)
    record = {"model": args.model, "draft": draft if isinstance(draft, float) else draft.name, "hardware": args.hardware,
              **{k: getattr(result, k) for k in result.__dataclass_fields__}}
    lines = [f"target {args.model}, draft {record['draft']}{why} on {args.hardware}: γ={gamma}, α={alpha}, "
             f"batch {result.batch}, context {result.prompt}; the draft runs at the target's tp ({d.tp})",
             f"expected tokens per iteration  {result.expected_tokens_per_iteration:.3f}  ((1 − α^(γ+1)) / (1 − α))",
             f"iteration                      {fmt_seconds(result.iteration_s)}  (draft {fmt_seconds(result.draft_s)}"
             f" + verify {fmt_seconds(result.verify_s)})",
             f"TPOT                           {fmt_seconds(result.tpot_s)}  (plain decode {fmt_seconds(result.baseline_tpot_s)})",
             f"speedup                        {result.speedup:.3f}x",
             f"best γ                         {result.best_gamma} ({result.best_speedup:.3f}x; 0 = do not speculate)"
             + (f"; {result.best_gamma} is the search cap: a longer lookahead may be faster still"
                if result.best_gamma_is_search_cap else "")]
    return _emit(args, record, lines)


# --- crossovers --------------------------------------------------------------------------------

def add_crossovers(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--gen", metavar="G", default="128",
                        help="generated tokens, for the KV memory behind max batch, as in analyze (default %(default)s)")
    parser.add_argument("--batch", metavar="B", default="1", help="batch for the TPOT elasticities (default %(default)s)")
    _tp(parser)
    add_prefill_chunk(parser)


def _equation(expr) -> str:
    return f"{sp.sstr(expr.lhs)} = {sp.sstr(expr.rhs)}" if isinstance(expr, sp.Eq) else sp.sstr(expr)


def run_crossovers(args: argparse.Namespace) -> int:
    """Critical batch, KV = weights context, max batch and 90% saturation batch, solved symbolically."""
    from ..serving import crossovers as x
    d = _deployment(args, tp=parse.number(args.tp, "--tp", whole=True))
    config, hw, precision = d.config, d.hardware, d.precision
    prompt, gen = parse.number(args.prompt, "--prompt", whole=True), parse.number(args.gen, "--gen", whole=True)
    batch = parse.number(args.batch, "--batch", whole=True)
    check_context(config, prompt + gen, allow=args.allow_beyond_window)
    chunk = prefill_chunk(args.prefill_chunk)
    found = {"critical_batch": x.critical_batch(d),
             **({"expert_critical_batch": x.expert_critical_batch(d)} if config.n_experts else {}),
             "kv_equals_weights_context": x.kv_equals_weights_context(d),
             "max_batch": x.max_batch(d, prompt, gen, prefill_chunk=chunk),
             "saturation_batch_90": x.saturation_batch(d, prompt, 0.9)}
    found.update({c.name: c for c in x.elasticities(d, batch, prompt).values()})
    record = {"model": config.name, "hardware": hw.id, "prompt": prompt, "gen": gen, "batch": batch, "prefill_chunk": chunk,
              "weights": precision.weights, "kv": precision.kv}
    lines = [f"{config.name} on {hw.id}, weights {precision.weights}, KV {precision.kv}, context {prompt}, "
             f"gen {gen} (max batch holds prompt + gen tokens of KV per sequence)"]
    for key, c in found.items():
        record[key] = c.value
        record[f"{key}_expression"] = _equation(c.expression)
        lines.append(f"{key:32s} {fmt_number(c.value, 6):>12}   {_equation(c.expression)}" + (f"   ({c.note})" if c.note else ""))
    return _emit(args, record, lines)


# --- simulate ----------------------------------------------------------------------------------

def add_simulate(parser: argparse.ArgumentParser) -> None:
    _common(parser, "llama-3.1-8b", prompt=False)
    parser.add_argument("--rate", metavar="R", default="10", help="Poisson arrivals, requests/s (default %(default)s)")
    parser.add_argument("--requests", metavar="N", default="1000",
                        help=f"requests simulated, at most {MAX_REQUESTS} (default %(default)s)")
    parser.add_argument("--policy", metavar="{static,continuous}", default="continuous", help="batching policy")
    parser.add_argument("--block-size", metavar="b", default="16",
                        help="KV block tokens, or 'contiguous' (reserve the longest sequence per request)")
    parser.add_argument("--prompt-mean", "--prompt", metavar="P", dest="prompt_mean", default="512",
                        help="mean prompt tokens (geometric; --prompt is the same flag)")
    parser.add_argument("--output-mean", metavar="G", default="128", help="mean output tokens (geometric)")
    parser.add_argument("--max-batch", metavar="B", default="256", help="sequences per iteration at most")
    parser.add_argument("--chunk", "--prefill-chunk", metavar="T", dest="chunk", default=None,
                        help="chunked prefill: tokens per iteration at most (default: none)")
    parser.add_argument("--seed", metavar="s", default="0", help="random seed (default %(default)s)")
    _tp(parser)


TRACE_POINTS = 200


def batch_trace(times, batches, points: int = TRACE_POINTS) -> list[list]:
    """[[t_s, batch], ...]: the iterations cut into at most `points` consecutive runs, each given by its
    end time and its largest batch (a thinned trace that still shows the peak concurrency)."""
    runs = np.array_split(np.arange(len(times)), min(points, len(times)))
    return [[float(times[run[-1]]), int(np.max(np.asarray(batches)[run]))] for run in runs]


def _progress_bar(total: int, every: float = 0.01):
    """A bar on a terminal's stderr, redrawn each 1% of the requests; none when stderr is not a terminal."""
    if not sys.stderr.isatty() or total < 2000:
        return None
    step, drawn = max(int(total * every), 1), [0]

    def draw(done: int, total: int) -> None:
        if done - drawn[0] < step and done != total:
            return
        drawn[0] = done
        filled = 24 * done // total
        sys.stderr.write(f"\rsimulate [{'#' * filled}{'.' * (24 - filled)}] {done}/{total} requests")
        sys.stderr.write("\n" if done == total else "")
        sys.stderr.flush()
    return draw


def run_simulate(args: argparse.Namespace) -> int:
    """Serve Poisson traffic with static or continuous batching: throughput and latency percentiles."""
    from ..serving.batching import POLICIES, poisson_workload, simulate
    if args.policy not in POLICIES:
        raise ValueError(f"--policy: unknown value {args.policy!r}; use one of {', '.join(POLICIES)}")
    block = None if args.block_size == "contiguous" else parse.number(args.block_size, "--block-size", whole=True)
    chunk = None if args.chunk is None else parse.number(args.chunk, "--chunk", whole=True)
    requests = parse.number(args.requests, "--requests", whole=True)
    rate = parse.number(args.rate, "--rate", low=0)
    prompt_mean = parse.number(args.prompt_mean, "--prompt-mean", low=1, inclusive=True)
    output_mean = parse.number(args.output_mean, "--output-mean", low=1, inclusive=True)
    max_batch = parse.number(args.max_batch, "--max-batch", whole=True)
    d = _deployment(args, tp=parse.number(args.tp, "--tp", whole=True))
    check_context(d.config, prompt_mean + output_mean, "--prompt-mean + --output-mean", args.allow_beyond_window)
    seed = parse.number(args.seed, "--seed", whole=True, low=0, inclusive=True)
    work = poisson_workload(requests, rate, prompt_mean, output_mean, seed)
    result = simulate(d, work, args.policy, max_batch, block, chunk, progress=_progress_bar(requests))
    summary = result.summary()
    record = {"model": args.model, "hardware": args.hardware, "policy": args.policy, "rate": rate,
              "requests": len(work.arrivals), "prompt_mean": prompt_mean, "output_mean": output_mean,
              "max_batch": max_batch, "block_size": block, "chunk": chunk, "seed": int(args.seed), **summary,
              "batch_trace": batch_trace(result.trace_s, result.trace_batch)}
    lines = [f"{args.model} on {args.hardware}: {args.policy} batching, {record['requests']} requests at {rate:g}/s",
             (f"workload         Poisson arrivals over {work.arrivals.max():.1f} s; prompt mean {prompt_mean:g}, "
              f"output mean {output_mean:g} tokens (geometric); max batch {max_batch}, "
              f"KV blocks {block or 'contiguous'}, prefill chunk {chunk or 'none'}, seed {record['seed']}"),
             f"throughput       {summary['throughput_tokens_per_s']:.1f} tokens/s of {summary['offered_tokens_per_s']:.1f} "
             f"offered, max concurrency {summary['max_concurrency']}"
             + (f", padding {summary['padded_fraction']:.1%}" if args.policy == "static" else "")]
    if summary["overloaded"]:
        lines.append(f"WARNING          overloaded: arrivals ask for {summary['offered_tokens_per_s']:.1f} tokens/s, the "
                     f"server returns {summary['throughput_tokens_per_s']:.1f}; the queue grows for as long as "
                     f"requests arrive, so the latencies below grow with --requests. Lower --rate or raise --max-batch.")
    for name in ("ttft", "tpot", "e2e"):
        lines.append(f"{name.upper():5s} p50/p90/p99  " + " / ".join(f"{fmt_seconds(summary[f'{name}_p{q}_s'])}"
                                                                   for q in (50, 90, 99)))
    return _emit(args, record, lines)


# --- parallel ----------------------------------------------------------------------------------

def add_parallel(parser: argparse.ArgumentParser) -> None:
    _common(parser, "llama-2-70b")
    parser.add_argument("--gen", metavar="G", default="128", help="generated tokens, for KV memory (default %(default)s)")
    parser.add_argument("--batch", metavar="B", default="8", help="sequences decoded together (default %(default)s)")
    parser.add_argument("--tp", metavar="t", default="1", help="tensor-parallel degree (default %(default)s)")
    parser.add_argument("--pp", metavar="p", default="1", help="pipeline stages (default %(default)s)")
    parser.add_argument("--ep", metavar="e", default="1", help="expert-parallel GPUs, MoE only, alone (default 1)")
    parser.add_argument("--microbatches", metavar="m", default="1", help="micro-batches in flight (default 1)")


PARALLEL_KEYS = ("gpus", "per_gpu_memory_bytes", "fits", "tpot_s", "tokens_per_s", "bubble_fraction", "comm_s",
                 "link_latency_assumed")
PIPELINE_KEYS = ("transfer_s", "pass_s", "pass_bubble_fraction")
EXPERT_KEYS = ("experts_per_gpu", "experts_touched_per_gpu", "expert_weight_bytes_per_gpu", "alltoall_bytes")


def run_parallel(args: argparse.Namespace) -> int:
    """Decode on tp x pp GPUs with micro-batches, or with experts over ep GPUs: memory, TPOT, bubbles."""
    from ..serving.expert_parallel import analyze_expert_parallel
    from ..serving.pipeline import analyze_pipeline
    degrees = {flag: parse.number(getattr(args, flag), f"--{flag}", whole=True)
               for flag in ("tp", "pp", "ep", "microbatches")}
    batch, prompt = parse.number(args.batch, "--batch", whole=True), parse.number(args.prompt, "--prompt", whole=True)
    gen = parse.number(args.gen, "--gen", whole=True)
    if degrees["ep"] > 1 and degrees["tp"] * degrees["pp"] * degrees["microbatches"] > 1:
        raise ValueError("--ep: expert parallelism is modelled alone; leave --tp, --pp and --microbatches at 1")
    d = _deployment(args, tp=degrees["tp"], pp=degrees["pp"], ep=degrees["ep"])
    config, hw = d.config, d.hardware
    check_context(config, prompt + gen, allow=args.allow_beyond_window)
    if degrees["ep"] > 1:
        result = analyze_expert_parallel(d, batch, prompt, gen)
        values = {**vars(result), "gpus": result.ep, "bubble_fraction": 0.0}
    else:
        result = analyze_pipeline(d, degrees["microbatches"], batch, prompt, gen)
        values = vars(result)
    record = {"model": config.name, "hardware": hw.id, **degrees, "batch": batch, "prompt": prompt, "gen": gen,
              **{key: values.get(key) for key in PARALLEL_KEYS + PIPELINE_KEYS + EXPERT_KEYS}}
    shape = ", ".join(f"{flag} {n}" for flag, n in degrees.items())
    lines = [f"{config.name} on {record['gpus']} x {hw.id} ({shape}), batch {batch}, context {prompt}",
             f"per-GPU memory   {fmt_bytes(record['per_gpu_memory_bytes'])}" + ("" if record["fits"] else " (does not fit)"),
             f"TPOT             {fmt_seconds(record['tpot_s'])}  (communication {fmt_seconds(record['comm_s'])})",
             f"throughput       {record['tokens_per_s']:.1f} tokens/s, bubble {record['bubble_fraction']:.1%}"]
    return _emit(args, record, lines)


COMMANDS = [("speculate", add_speculate, run_speculate), ("crossovers", add_crossovers, run_crossovers),
            ("simulate", add_simulate, run_simulate), ("parallel", add_parallel, run_parallel)]
