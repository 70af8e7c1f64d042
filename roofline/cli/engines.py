"""`roofline fit-engine` (an engine profile from measured rows) and `roofline accuracy` (how close it is)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from ..engine import ENGINES_DIR, QUANTIZED, load_engine
from ..fitting.engine_fit import accuracy, fit_profile, leave_one_out, summary
from ..fitting.published import PUBLISHED, errors, read_rows, rows_for


# What `--calibration NAME` named before calibrations became engine profiles ('default': the one transferable fit).
RENAMED = {"default": "harness", "cuda-nvidia-h100-80gb-hbm3": "harness", "cpu-amd-epyc-2-threads": "harness-cpu"}
CALIBRATION_HELP = "deprecated: an engine profile now; use --engine (default -> harness, the H100 harness fit)"


def engine_choice(args: argparse.Namespace) -> str | None:
    """--engine, or the deprecated --calibration standing for it (with a note on stderr)."""
    old = getattr(args, "calibration", None)
    if old is None:
        return args.engine
    if args.engine is not None:
        raise ValueError("--calibration and --engine: both set the achievable roofs; give --engine only "
                         "(--calibration is deprecated)")
    new = RENAMED.get(old, old)
    try:  # a bad value is one line naming the flag, before the deprecation note
        load_engine(new)
    except ValueError as err:
        raise ValueError(f"--calibration {old!r} (deprecated; use --engine): {err}") from None
    print(f"roofline: note: --calibration is deprecated: a calibration is an engine profile now; "
          f"use --engine {new}", file=sys.stderr)
    return new


def rows_of(engine, path: Path) -> list:
    chosen = rows_for(engine.framework, path)
    if not chosen:
        raise ValueError(f"{str(path)!r}: no row's framework starts with engine {engine.name!r}'s "
                         f"{engine.framework!r}; frameworks there: {sorted({r.framework for r in read_rows(path)})}")
    return chosen


def writable_file(flag: str, path: Path) -> None:
    """Refuse, in one line, a file path that cannot be written: tried now (and removed again if new)."""
    existed = path.exists()
    try:
        with open(path, "ab"):
            pass
    except OSError as err:
        raise ValueError(f"{flag} {str(path)!r}: cannot write there ({err.strerror}); give a file path in a "
                         "writable folder") from None
    if not existed:
        path.unlink()


def add_fit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", default=str(PUBLISHED), help="published rows (data/published/README.md)")
    parser.add_argument("--engine", required=True, help="bundled engine (data/engines) or YAML: its prior and fit list")
    parser.add_argument("--out", help="where to write the fitted YAML (default: print it)")
    parser.add_argument("--serving", metavar="CSV", default=None,
                        help="fit to serving-hopper.csv's aggregated rows of the engine's backend (its `framework`) "
                             "under the load model, instead of published rows")


def run_fit(args: argparse.Namespace) -> int:
    """Fit an engine's physical parameters to measured rows, with leave-one-out error per family."""
    if args.out:
        writable_file("--out", Path(args.out))
    if args.serving:
        from .serving_fit import run_serving_fit
        return run_serving_fit(args)
    prior = load_engine(args.engine).prior()  # a fitted profile refits from its priors, not its last fit
    rows = rows_of(prior, Path(args.file))
    result = fit_profile(prior, rows, list(prior.fit), f"{len(rows)} rows of {Path(args.file).name} "
                                                       f"(lines {', '.join(str(r.line) for r in rows)})")
    fitted = result.engine
    document = fitted.as_document()
    for name, pinned in result.ranges.items():
        entry = document[QUANTIZED][name.split(".", 1)[1]] if name.startswith(QUANTIZED + ".") else document[name]
        entry["range_68"] = [pinned.low, pinned.high]
        if pinned.weak:
            entry["weakly_pinned"] = "the rows trade it against other parameters: its prior still matters"
            print(f"roofline fit-engine: warning: the rows pin {name} only weakly (68% range {pinned.low:.4g} to "
                  f"{pinned.high:.4g}); its prior {fitted.priors.get(name)!r} still matters", file=sys.stderr)
    document["accuracy"] = {"in_sample": summary(rows, errors(rows, fitted)),
                            "leave_one_out": summary(rows, leave_one_out(fitted, rows, list(prior.fit)))}
    text = yaml.safe_dump(document, sort_keys=False)
    if args.out:
        Path(args.out).write_text(text)
        print(f"{args.out}: {len(rows)} rows, fitted {', '.join(prior.fit)}")
    else:
        print(text)
    return 0


def add_accuracy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", nargs="?", default=str(PUBLISHED), help="published rows (data/published/README.md)")
    parser.add_argument("--engine", action="append",
                        help="engines to score (repeatable; default: every bundled engine with rows in the file)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--plot", metavar="PNG", help="also draw measured against leave-one-out predicted, with a ±10%% band")
    parser.add_argument("--serving", metavar="CSV", default=None,
                        help="score serving-hopper.csv's aggregated rows (TTFT, TPOT per backend) under the load model: "
                             "each backend's profile in sample, leave-one-model-out and leave-one-device-out; with "
                             "--engine, that engine on every row, its offline estimates before and the load model after, "
                             "then the disaggregated rows as two pools")
    parser.add_argument("--backend", metavar="NAME", default=None,
                        help="with --serving: score only this backend's rows (trtllm, vllm, sglang): one profile's "
                             "held-out splits, a third of the time of all three")


def run_accuracy(args: argparse.Namespace) -> int:
    """Median and p90 of |predicted / measured - 1| per family: ideal, in-sample and leave-one-out."""
    if args.serving:
        return run_serving_accuracy(args)
    if args.plot:  # before any fit: a place the figure cannot go is known now, not after the computing
        writable_file("--plot", Path(args.plot))
    path = Path(args.file)
    names = args.engine or [p.stem for p in sorted(ENGINES_DIR.glob("*.yaml")) if load_engine(p.stem).framework]
    frameworks = {r.framework for r in read_rows(path)}
    skipped = [] if args.engine else [n for n in names if not any(f.startswith(load_engine(n).framework)
                                                                     for f in frameworks)]
    if skipped:
        print(f"roofline accuracy: no rows in {str(path)!r} for {', '.join(skipped)}: not scored", file=sys.stderr)
    report, points = {}, []
    for name in [n for n in names if n not in skipped]:
        engine = load_engine(name)
        scores = accuracy(engine, rows_of(engine, path))
        points.append(scores.pop("points"))
        report[engine.name] = scores
    if not report:
        raise ValueError(f"{str(path)!r}: no row's framework matches a bundled engine's; frameworks there: "
                         f"{sorted(frameworks)}; pass --engine with a profile whose framework names them")
    if args.plot:
        import pandas as pd

        from ..views import plots
        figure = plots.accuracy_scatter(pd.concat(points), "Published figures vs leave-one-out predictions")
        Path(args.plot).write_bytes(plots.png_bytes(figure))
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for name, r in report.items():
        print(f"{name} ({r['rows']} rows): |predicted / measured - 1|, median / p90")
        for family in r["ideal"]:
            cells = "  ".join(f"{kind} {r[kind][family]['median']:6.1%} / {r[kind][family]['p90']:6.1%}"
                              for kind in ("ideal", "in_sample", "leave_one_out"))
            print(f"  {family:20s} n={r['ideal'][family]['n']:2d}  {cells}")
    return 0


def run_serving_accuracy(args: argparse.Namespace) -> int:
    from ..fitting.published_serving import predict, read_serving_table, scores
    path = Path(args.serving)
    if not path.is_file():
        raise ValueError(f"--serving: no file {str(path)!r}; fix: the path of serving-hopper.csv")
    if not args.engine:
        from .serving_fit import run_held_out
        return run_held_out(path, args.json, args.backend)
    engine = load_engine(args.engine[0])
    read = read_serving_table(path)
    rows, left_out = read.rows, read.left_out
    if args.backend is not None:
        rows = [r for r in rows if r.backend == args.backend]
        if not rows:
            raise ValueError(f"--backend: no aggregated row of backend {args.backend!r} in {path.name}; fix: one of "
                             f"{', '.join(sorted({r.backend for r in read.rows}))}")
    predicted = predict(rows, engine)
    report, per_model = scores(rows, predicted), scores(rows, predicted, by="model")
    disaggregated = disaggregated_accuracy(path, engine)
    if args.json:
        print(json.dumps({"engine": engine.name, "rows": len(rows), "left_out": sum(left_out.values()),
                          "left_out_by_reason": left_out, "scores": report, "scores_by_model": per_model,
                          "disaggregated": disaggregated}, indent=2))
        return 0
    reasons = ", ".join(f"{reason} {count}" for reason, count in left_out.items())
    print(f"{path.name}: {len(rows)} aggregated rows priced with {engine.name} ({sum(left_out.values())} left out, "
          f"by reason: {reasons}); |predicted / measured - 1|, median / p90")
    print("  before: TTFT one request's prefill, TPOT the decode step at batch = concurrency; after: under the load")
    for table in (report, {name: r for name, r in per_model.items() if name != "all"}):  # "all" once
        for name, r in table.items():
            cells = "  ".join(f"{metric} {r[metric]['median']:6.1%} / {r[metric]['p90']:6.1%}" for metric in
                              ("ttft_before", "ttft_after", "tpot_before", "tpot_after") if r[metric]["n"])
            print(f"  {name:18s} n={r['ttft_before']['n']:4d}  {cells}")
    print("\n".join(disaggregated_lines(disaggregated)))
    return 0


def disaggregated_accuracy(path: Path, engine) -> dict:
    """serving-hopper.csv's disaggregated rows, two pools at the row's concurrency (roofline.fitting.published_disagg)."""
    from ..fitting.published_disagg import predict, read_disagg_rows, scores
    rows, skipped = read_disagg_rows(path)
    return {"rows": len(rows), "left_out": dict(skipped), "scores": scores(rows, predict(rows, engine))}


def disaggregated_lines(result: dict) -> list[str]:
    left = ", ".join(f"{n} {why}" for why, n in result["left_out"].items()) or "none"
    lines = [f"disaggregated: {result['rows']} rows priced as a prefill and a decode pool at their concurrency "
             f"(left out: {left}); |predicted / measured - 1|, median / p90"]
    for group, r in result["scores"].items():
        if r["ttft"]["n"]:
            lines.append(f"  {group:22s} n={r['ttft']['n']:3d}  TTFT {r['ttft']['median']:6.1%} / {r['ttft']['p90']:6.1%}"
                         f"  TPOT {r['tpot']['median']:6.1%} / {r['tpot']['p90']:6.1%}")
    return lines


COMMANDS = [("fit-engine", add_fit_arguments, run_fit), ("accuracy", add_accuracy_arguments, run_accuracy)]
