"""`roofline plan`: the cheapest deployments that meet TTFT and TPOT targets at a request rate.

Exit status: 0 when some candidate is feasible, 1 when none is (the one-sentence reason is printed, like
grep's "no match"), 2 for bad input.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd
import sympy as sp

from ..planning.plan import DEFAULT_ENGINE, Targets, Workload, candidates_as_data, load_prices, plan, verdict
from ..precision import normalize_dtype
from ..planning.workload import MAX_RATE, parse_lengths
from ..views.fmt import fmt_count, fmt_number, fmt_seconds, plural
from . import args as parse
from .analyze import add_experts, experts_of, prefill_chunk

SHOWN = ("hardware", "tp", "pp", "ep", "weights", "kv", "engine", "batch", "capacity_batch", "binding", "replicas",
         "gpus", "usd_per_million_tokens", "capacity_tokens_per_s_per_gpu", "ttft_s", "tpot_s", "ideal_ttft_s",
         "ideal_tpot_s", "decode_bound")
# every column the table or --json can show, defined once (the README's plan section says the same)
COLUMNS = {
    "hardware, tp, pp, ep": "the device and its tensor-, pipeline- and expert-parallel degrees (one replica)",
    "weights, experts, kv": "the weight, routed-expert and KV-cache formats",
    "engine": "the fitted engine profile the row is priced with (data/engines)",
    "batch": "requests in flight a replica holds at the offered rate (mean, rate / replicas x E2E)",
    "capacity_batch": "the running-sequence cap: the largest batch meeting TPOT at the mean context within memory",
    "max_batch": "the sequences of the mean length that fit a GPU's memory",
    "binding": "what sets capacity_batch: memory, TPOT or the batch cap",
    "replicas, gpus": "the fewest model copies meeting the targets under load, and replicas x tp x pp x ep",
    "usd_per_million_tokens": "gpus x $/GPU-hour / output tokens an hour at the offered rate, x 1e6",
    "capacity_tokens_per_s_per_gpu": "output tokens/s a GPU could serve at capacity_batch (the headroom)",
    "ttft_s, tpot_s, e2e_s": "mean seconds under load at rate / replicas (roofline.serving.load)",
    "ttft_alone_s, tpot_at_capacity_s": "a lone request's TTFT; the decode step at capacity_batch",
    "ideal_ttft_s, ideal_tpot_s": "the same layout and load under the ideal engine: the bound, never ranked",
    "sim_ttft_s, sim_tpot_s": "the percentile from the request-by-request simulation ('unsimulated': not run)",
    "decode_bound": "the resource binding the decode step at capacity_batch",
    "mode": "aggregated (one pool) or disaggregated (a prefill pool and a decode pool; --no-disaggregated: none)",
    "prefill_tp, prefill_workers, decode_workers": "disaggregated: the prefill pool's tp and workers (sized by TTFT), "
                                                   "the decode workers (by TPOT; tp, ep and replicas are theirs)",
    "kv_transfer_s, link": "disaggregated: one request's KV between the pools, over nvlink or the network",
}
DISAGGREGATED_SHOWN = ("mode", "prefill_tp", "prefill_workers")


def _dtypes(text: str, flag: str) -> tuple:
    """Distinct formats, aliases folded (`bf16,bfloat16` is one candidate)."""
    return tuple(dict.fromkeys(normalize_dtype(v, flag) for v in parse.items(text, flag)))


def _degrees(text: str, flag: str) -> tuple:
    return tuple(dict.fromkeys(parse.numbers(text, flag, whole=True, example="1,2,4,8")))


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as err:
        raise ValueError(f"{path}: cannot read ({err.strerror}); give a CSV of token lengths") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = ("columns:\n" + "\n".join(f"  {name:34} {text}" for name, text in COLUMNS.items())
                     + "\n\nexit status: 0 when some candidate meets the targets, 1 when none does (the reason in "
                     "one sentence), 2 for bad input")
    lengths = "N, fixed:N, exp:MEAN (exponential) or csv:FILE[:COLUMN]; the search uses the mean"
    parser.add_argument("--model", default="llama-3-8b", help="bundled name or a config.json path")
    parser.add_argument("--rate", default="10", help="requests per second (default %(default)s)")
    parser.add_argument("--prompt", default="1024", help=f"prompt tokens per request: {lengths} (default %(default)s)")
    parser.add_argument("--gen", default="256", help=f"output tokens per request: {lengths} (default %(default)s)")
    parser.add_argument("--ttft", default="0.5", help="TTFT target, seconds (default %(default)s)")
    parser.add_argument("--tpot", default="0.05", help="TPOT target, seconds (default %(default)s)")
    parser.add_argument("--e2e", help="end-to-end latency target per request, seconds (default: none)")
    parser.add_argument("--percentile", "--slo-percentile", dest="percentile", default="90",
                        help="targets hold for this percentile of requests (e.g. 90 or p90): the frontier is simulated "
                             "(default %(default)s)")
    parser.add_argument("--fast", action="store_true", help="skip the simulation: the targets hold for the means")
    parser.add_argument("--objective", default="cost", choices=("cost", "gpus", "throughput-per-gpu"),
                        help="rank by $ per million output tokens, by GPUs, or by tokens/s a GPU could serve "
                             "(default %(default)s)")
    parser.add_argument("--replicas", default="fewest",
                        help="candidate replica counts, 'fewest' for the fewest meeting the targets (default %(default)s)")
    parser.add_argument("--allow-beyond-window", action="store_true",
                        help="price prompt + gen beyond the model's context window")
    parser.add_argument("--hardware", help="candidate devices (default: every device in the price sheet)")
    parser.add_argument("--tp", default="1,2,4,8", help="candidate tensor-parallel degrees (default %(default)s)")
    parser.add_argument("--pp", default="1", help="candidate pipeline stages (default %(default)s)")
    parser.add_argument("--ep", default="1", help="candidate expert-parallel degrees, MoE only (default %(default)s)")
    parser.add_argument("--weights", default="bf16,fp8,int8,int4", help="candidate weight formats (default %(default)s)")
    parser.add_argument("--kv", default="bf16", help="candidate KV-cache formats (default %(default)s)")
    add_experts(parser)
    parser.add_argument("--engine", default=DEFAULT_ENGINE,
                        help="candidate engines, fitted profiles (data/engines names or YAML paths; default %(default)s)"
                             "; the ideal bound is shown beside every row")
    parser.add_argument("--max-batch", default="none", help="candidate batch caps, 'none' for memory's (default %(default)s)")
    parser.add_argument("--prefill-chunk", "--chunk", dest="prefill_chunk", default="8192",
                        help="candidate prefill chunks (tokens; 'all' for none), which size the workspace (default %(default)s)")
    parser.add_argument("--max-gpus", help="at most this many GPUs in all (default: no limit)")
    parser.add_argument("--disaggregated", action=argparse.BooleanOptionalAction, default=True,
                        help="also price disaggregated serving (default: on; --no-disaggregated for one pool "
                             "alone): a prefill pool and a decode pool of any two tp layouts, the KV moved between "
                             "them, ranked with the rest (one wins only where it is cheaper under the same "
                             "targets; the percentile check simulates each pool)")
    parser.add_argument("--prices", help="$/GPU-hour YAML (default data/prices.yaml, each price with its source)")
    parser.add_argument("--frontier", default="2", help="with --percentile: deployments kept per hardware (default %(default)s)")
    parser.add_argument("--requests", default="400", help="with --percentile: requests simulated per candidate")
    parser.add_argument("--top", default="10", help="feasible deployments shown (default %(default)s)")
    parser.add_argument("--explain", action="store_true",
                        help="show the closed forms: the largest batch within TPOT and the TP break-even")
    parser.add_argument("--json", action="store_true", help="every candidate as JSON, rejected ones with the reason")
    parser.add_argument("--emit", choices=("vllm", "sglang", "trtllm"),
                        help="print the launch command of the best deployment for this engine (flags checked "
                             "against its documented CLI: roofline.planning.emit)")


def _percentile(text) -> float | None:
    if text is None:
        return None
    value = parse.number(str(text).lower().lstrip("p"), "--percentile", example="90")
    if value >= 100:
        raise ValueError(f"--percentile: expected a percentile below 100 such as 90 or p90, got {text!r}")
    return value


def _progress_bar():
    """A bar on a terminal's stderr for the frontier's simulations; none when stderr is not a terminal."""
    if not sys.stderr.isatty():
        return None

    def draw(done: int, total: int) -> None:
        filled = 24 * done // max(total, 1)
        sys.stderr.write(f"\rsimulate frontier [{'#' * filled}{'.' * (24 - filled)}] {done}/{total} requests")
        sys.stderr.write("\n" if done >= total else "")
        sys.stderr.flush()
    return draw


WHOLE = ("tp", "pp", "ep", "replicas", "replicas_asked", "gpus", "capacity_batch", "max_batch", "max_batch_cap",
         "prefill_chunk", "prefill_tp", "prefill_ep", "prefill_workers", "decode_workers")


def _json_value(key: str, value):
    """null for a number not computed, integers as integers, the rest as they are."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if key in WHOLE and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _equation(expr) -> str:
    return f"{sp.sstr(expr.lhs)} = {sp.sstr(expr.rhs)}" if isinstance(expr, sp.Eq) else sp.sstr(expr)


def readable(table):
    """The table as people read it: durations through fmt_seconds, counts whole, requests in flight to a tenth,
    a missing value 'n/a' (a column already in words is left as it is)."""
    table = table.copy()
    for column in table.columns:
        if not pd.api.types.is_numeric_dtype(table[column]):  # already words ("unsimulated"), or names
            continue
        if column.endswith("_s"):
            table[column] = table[column].map(fmt_seconds)
        elif column == "batch":  # requests in flight at the offered rate: a mean, not a whole number
            table[column] = table[column].map(lambda v: f"{v:.1f}" if v == v else "n/a")
        elif column in ("capacity_batch", "replicas", "gpus", "replicas_asked", "prefill_tp", "prefill_workers",
                        "decode_workers"):
            table[column] = table[column].map(lambda v: fmt_count(v) if v == v else "n/a")
        elif table[column].dtype.kind == "f":
            table[column] = table[column].map(lambda v: f"{v:.4g}" if v == v else "n/a")
    return table


def _corner(row, batch) -> str:
    """Why the form's sharp roofline and the search can disagree: the engine's rounded corner, priced by the search."""
    if batch.value == row["capacity_batch"] or not math.isfinite(row["deployment"].engine.corner):
        return ""
    return (f"; the search's {int(row['capacity_batch'])} prices {row['engine']}'s rounded roofline corner "
            f"(p = {row['deployment'].engine.corner:.3g}), the form the sharp one")


def explain_lines(found) -> list[str]:
    lines = ["closed forms (roofline.planning.forms), for the cheapest deployment of each hardware:"]
    for row, batch, tp in found:
        given = ", ".join(f"{k} = {v:.4g}" for k, v in batch.given.items())
        lines += [f"  {row['hardware']} tp={int(row['tp'])} {row['weights']}/{row['kv']} {row['engine']}: capacity batch "
                  f"{int(row['capacity_batch'])} ({row['binding']} binds), {row['batch']:.1f} in flight at the rate",
                  f"    largest batch within TPOT  {_equation(batch.expression)} = {fmt_number(batch.value, 6)}",
                  f"      with {given}" + (f"; {batch.note}" if batch.note else "") + _corner(row, batch),
                  f"    TP break-even             {_equation(tp.expression)} = {fmt_number(tp.value)}",
                  f"      (past it a split saves more memory time than its all-reduces cost; {tp.note})"]
    return lines


def run(args: argparse.Namespace) -> int:
    """The cheapest deployments (hardware, tp, pp, weights, KV, engine) that meet TTFT and TPOT at a request rate."""
    work = Workload(parse.number(args.rate, "--rate", high=MAX_RATE, example="3"),
                    parse_lengths(args.prompt, "--prompt", _read), parse_lengths(args.gen, "--gen", _read))
    targets = Targets(parse.number(args.ttft, "--ttft"), parse.number(args.tpot, "--tpot", example="0.04"),
                      None if args.e2e is None else parse.number(args.e2e, "--e2e"),
                      None if args.fast else _percentile(args.percentile))
    replicas = tuple(None if v.lower() == "fewest" else parse.number(v, "--replicas", whole=True, example="2 (or fewest)")
                     for v in parse.items(args.replicas, "--replicas"))
    caps = tuple(None if v.lower() == "none" else parse.number(v, "--max-batch", whole=True, example="256 (or none)")
                 for v in parse.items(args.max_batch, "--max-batch"))
    chunks = tuple(prefill_chunk(v) for v in parse.items(args.prefill_chunk, "--prefill-chunk"))
    top = parse.number(args.top, "--top", whole=True, example="5")  # every flag is read before anything is computed
    prices = load_prices(args.prices)
    hardware = tuple(prices) if args.hardware is None else tuple(parse.items(args.hardware, "--hardware"))
    frame = plan(args.model, work, targets, hardware, _degrees(args.tp, "--tp"),
                 _dtypes(args.weights, "--weights"), tuple(parse.items(args.engine, "--engine")), prices, chunks,
                 pp=_degrees(args.pp, "--pp"), ep=_degrees(args.ep, "--ep"), kv=_dtypes(args.kv, "--kv"),
                 max_batch=caps,
                 max_gpus=None if args.max_gpus is None else parse.number(args.max_gpus, "--max-gpus", whole=True),
                 frontier=parse.number(args.frontier, "--frontier", whole=True),
                 requests=parse.number(args.requests, "--requests", whole=True),
                 progress=None if targets.percentile is None else _progress_bar(), experts=experts_of(args),
                 replicas=replicas, objective=args.objective, allow_beyond_window=args.allow_beyond_window,
                 disaggregated=args.disaggregated)
    status = 0 if frame["feasible"].any() else 1
    if args.json:
        records = [{k: _json_value(k, v) for k, v in row.items()}
                   for row in candidates_as_data(frame).to_dict(orient="records")]
        print(json.dumps(records, indent=2, default=str))
        return status
    percentile = "" if targets.percentile is None else f" (p{targets.percentile:g}, simulated for the frontier)"
    print(f"{args.model}: {work.rate:g} requests/s, prompt {work.prompt}, gen {work.gen} (the search uses the means); "
          f"targets TTFT {fmt_seconds(targets.ttft_s)}, TPOT {fmt_seconds(targets.tpot_s)}"
          + ("" if targets.e2e_s is None else f", E2E {fmt_seconds(targets.e2e_s)}") + percentile
          + f"; {plural(len(frame), 'candidate')} ranked by $ per million output tokens")
    print(verdict(frame, targets, args.model, args.objective))
    feasible = frame[frame["feasible"]].head(top)
    if not feasible.empty:
        shown = list(SHOWN) + (["sim_ttft_s", "sim_tpot_s"] if targets.percentile is not None else [])
        if args.experts is not None:
            shown.insert(shown.index("weights") + 1, "experts")
        if (feasible["mode"] == "disaggregated").any():  # the pools' columns only where a pool pair is shown
            shown = list(DISAGGREGATED_SHOWN) + shown
            shown.insert(shown.index("replicas"), "decode_workers")
            shown.remove("replicas")
        table = feasible[shown].copy()
        for column in ("sim_ttft_s", "sim_tpot_s"):
            if column in table:  # the frontier alone is simulated
                table[column] = [fmt_seconds(v) if v == v else "unsimulated" for v in table[column]]
        print(readable(table).to_string(index=False))
    rejected = frame.loc[~frame["feasible"], "rejected"].str.split(":").str[0].value_counts()
    if len(rejected):
        print("rejected: " + ", ".join(f"{n} by {reason}" for reason, n in rejected.items())
              + " (--json lists each with its numbers)")
    if args.explain and not feasible.empty:
        from ..planning.forms import explain
        aggregated = frame[frame["mode"] == "aggregated"]
        if aggregated["feasible"].any():
            print("\n".join(explain_lines(explain(aggregated, work, targets))))
        pools = frame[frame["feasible"] & (frame["mode"] == "disaggregated")]
        if not pools.empty:
            from ..planning.pools import explain_pools
            print("\n".join(explain_pools(pools.iloc[0], work, targets)))
    if args.emit and not feasible.empty:
        from ..planning.emit import launch_command
        from ..planning.workload import Lengths
        longest = Lengths.of(work.prompt).longest + Lengths.of(work.gen).longest
        best = feasible.iloc[0]
        if best.get("mode") == "disaggregated":
            from ..planning.emit import launch_pools
            print(launch_pools(best, args.emit, args.model, longest))
        else:
            print(launch_command(best, args.emit, args.model, longest))
    return status


COMMANDS = [("plan", add_arguments, run)]
