"""`roofline accuracy --load` (the public rows measured under load, a section per file) and `roofline accuracy
--serving CSV --transfer` (a silicon sample's Blackwell rows under the Hopper-fitted profiles): scores only,
nothing fitted."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..fitting.published import PUBLISHED
from ..fitting.published_load import LOAD_FILES, predict, read_load_rows, scores
from ..fitting.transfer import score_transfer


def load_files(args: argparse.Namespace) -> list[Path]:
    """The three files of data/published/README.md's 'More public rows', or the one the command names."""
    return list(LOAD_FILES) if Path(args.file) == PUBLISHED else [Path(args.file)]


def run_load_accuracy(args: argparse.Namespace) -> int:
    report = {}
    for path in load_files(args):
        read = read_load_rows(path)
        report[path.name] = {"rows": len(read.rows), "left_out": read.left_out,
                             "scores": scores(read.rows, predict(read.rows))}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print("public rows under load: each row's engine profile by framework and version, the load model at its rate "
          "(offline: saturation); |predicted / measured - 1| median / p90, bias (median of predicted / measured - 1)")
    for name, r in report.items():
        left = ", ".join(f"{why} {n}" for why, n in r["left_out"].items() if n) or "none"
        print(f"{name}: {r['rows']} rows read (left out: {left})")
        for family, s in r["scores"].items():
            cells = (f"{s['median']:6.1%} / {s['p90']:6.1%}  bias {s['bias']:+6.1%}" if s["priced"] else "n/a")
            print(f"  {family:34s} n={s['n']:3d} priced {s['priced']:3d}  {cells}")
    return 0


def run_transfer(path: Path, as_json: bool) -> int:
    result = score_transfer(path)
    if as_json:
        print(json.dumps({"file": path.name, **result}, indent=2))
        return 0
    left = ", ".join(f"{why} {n}" for why, n in result["left_out"].items())
    targets = ", ".join(f"{m.upper()} {t['median']:.0%} / {t['p90']:.0%}" for m, t in result["targets"].items())
    print(f"{path.name}: {result['rows']} Blackwell aggregated rows priced with the Hopper-fitted profiles (left out: "
          f"{left}); |predicted / measured - 1| median / p90 (bias: median of predicted / measured - 1); targets {targets}")
    for backend, r in result["backends"].items():
        for system, s in r["systems"].items():
            cells = "  ".join(f"{m.upper()} {_cell(s[m])}" for m in ("ttft", "tpot"))
            print(f"  {backend:7s} ({r['engine']:14s}) {system:6s} n={s['rows']:4d} priced {s['tpot']['n']:4d}  {cells}")
    return 0


def _cell(score: dict) -> str:
    if not score["n"]:
        return "n/a"
    return f"{score['median']:6.1%} / {score['p90']:6.1%} ({score['bias']:+6.1%})"
