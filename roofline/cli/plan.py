"""`roofline plan`: the cheapest deployments that meet TTFT and TPOT targets at a request rate."""
from __future__ import annotations

import argparse
import json
import math

from ..plan import Targets, Workload, load_prices, plan
from .analyze import add_prefill_chunk, prefill_chunk

SHOWN = ("hardware", "tp", "weights", "engine", "batch", "replicas", "gpus", "usd_per_million_tokens",
         "capacity_tokens_per_s_per_gpu", "ttft_s", "tpot_s", "decode_bound")


def _list(text: str, flag: str, kind=str) -> tuple:
    try:
        values = tuple(kind(v.strip()) for v in str(text).split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{flag}: expected a comma-separated list, got {text!r}") from None
    if not values:
        raise ValueError(f"{flag}: give at least one value")
    return values


def _positive(text, flag: str, kind=float):
    try:
        value = kind(text)
    except ValueError:
        value = -1
    if not value > 0:
        raise ValueError(f"{flag}: expected a positive number, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="llama-3-8b", help="bundled name or a config.json path")
    parser.add_argument("--rate", default="10", help="requests per second (default %(default)s)")
    parser.add_argument("--prompt", default="1024", help="prompt tokens per request (default %(default)s)")
    parser.add_argument("--gen", default="256", help="output tokens per request (default %(default)s)")
    parser.add_argument("--ttft", default="0.5", help="TTFT target, seconds (default %(default)s)")
    parser.add_argument("--tpot", default="0.05", help="TPOT target, seconds (default %(default)s)")
    parser.add_argument("--hardware", default="h100-sxm,a100-80gb", help="candidate devices (default %(default)s)")
    parser.add_argument("--tp", default="1,2,4,8", help="candidate tensor-parallel degrees (default %(default)s)")
    parser.add_argument("--weights", default="bf16,fp8,int8,int4", help="candidate weight formats (default %(default)s)")
    parser.add_argument("--engine", default="ideal", help="candidate engines, data/engines names or YAML paths")
    parser.add_argument("--prices", help="$/GPU-hour YAML (default data/prices.yaml, each price with its source)")
    add_prefill_chunk(parser)
    parser.add_argument("--top", default="10", help="feasible deployments shown (default %(default)s)")
    parser.add_argument("--json", action="store_true", help="every candidate as JSON, rejected ones with the reason")


def run(args: argparse.Namespace) -> int:
    """The cheapest deployments (hardware, tp, weights, engine) that meet TTFT and TPOT at a request rate."""
    work = Workload(_positive(args.rate, "--rate"), _positive(args.prompt, "--prompt", int),
                    _positive(args.gen, "--gen", int))
    targets = Targets(_positive(args.ttft, "--ttft"), _positive(args.tpot, "--tpot"))
    frame = plan(args.model, work, targets, _list(args.hardware, "--hardware"), _list(args.tp, "--tp", int),
                 _list(args.weights, "--weights"), _list(args.engine, "--engine"),
                 load_prices(args.prices), prefill_chunk(args.prefill_chunk))
    if args.json:
        records = [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
                   for row in frame.to_dict(orient="records")]
        print(json.dumps(records, indent=2, default=str))
        return 0
    feasible = frame[frame["feasible"]].head(_positive(args.top, "--top", int))
    print(f"{args.model}: {work.rate:g} requests/s, prompt {work.prompt}, gen {work.gen}; targets TTFT "
          f"{targets.ttft_s * 1e3:g} ms, TPOT {targets.tpot_s * 1e3:g} ms; ranked by $ per million output tokens")
    if feasible.empty:
        print("no candidate meets the targets")
    else:
        print(feasible[list(SHOWN)].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    rejected = frame.loc[~frame["feasible"], "rejected"].str.split(":").str[0].value_counts()
    if len(rejected):
        print("rejected: " + ", ".join(f"{n} by {reason}" for reason, n in rejected.items())
              + " (--json lists each with its numbers)")
    return 0


COMMANDS = [("plan", add_arguments, run)]
