"""`roofline fit-engine` (an engine profile from measured rows) and `roofline accuracy` (how close it is)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


from ..engine import ENGINES_DIR, load_engine
from ..fitting.engine_fit import accuracy, fit_profile, leave_one_out, summary
from ..fitting.published import PUBLISHED, errors, read_rows, rows_for
from . import args as parse
from .profile_file import fitted_document, write_profile


# What `--calibration NAME` named before calibrations became engine profiles ('default': the one transferable fit).
RENAMED = {"default": "harness", "cuda-nvidia-h100-80gb-hbm3": "harness", "cpu-amd-epyc-2-threads": "harness-cpu"}
CALIBRATION_HELP = "deprecated: an engine profile now; use --engine (default -> harness, the H100 harness fit)"


# Notes a command leaves for stderr (a deprecated flag's), printed once it succeeds: a refused command's answer is
# its one error line (roofline.cli.main).
NOTES: list[str] = []


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
    NOTES.append(f"roofline: note: --calibration is deprecated: a calibration is an engine profile now; "
                 f"use --engine {new}")
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
    document = fitted_document(result)
    document["accuracy"] = {"in_sample": summary(rows, errors(rows, fitted)),
                            "leave_one_out": summary(rows, leave_one_out(fitted, rows, list(prior.fit)))}
    return write_profile(document, args.out, f"{len(rows)} rows, fitted {', '.join(prior.fit)}")


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
    parser.add_argument("--transfer", action="store_true",
                        help="with --serving: score the file's Blackwell rows (AIConfigurator's silicon_sample.csv) "
                             "with the Hopper-fitted vllm, sglang and tensorrt-llm-1 profiles; nothing is fitted")
    parser.add_argument("--load", action="store_true",
                        help="score the public rows measured under load (data/published/trtllm-perf-overview.csv, "
                             "mlperf.csv, sglang-benchmarks.csv, or the FILE given) with the load model, a section a file")
    parser.add_argument("--backend", metavar="NAME", default=None,
                        help="with --serving: score only this backend's rows (trtllm, vllm, sglang): one profile's "
                             "held-out splits, a third of the time of all three")
    parser.add_argument("--jobs", metavar="N", default="1",
                        help="with --serving and no --engine: fit N held-out folds at a time, each in its own process "
                             "(default 1; at most the machine's cores help)")
    parser.add_argument("--rows", metavar="CSV", default=None,
                        help="with --serving: also write each aggregated row, one line a row: with --engine, measured "
                             "beside predicted (before and after) and its error; without, measured beside each "
                             "backend's prior, in-sample and held-out predictions (a column pair a split) and errors")


def run_accuracy(args: argparse.Namespace) -> int:
    """Median and p90 of |predicted / measured - 1| per family: ideal, in-sample and leave-one-out."""
    if args.transfer and not args.serving:
        raise ValueError("--transfer: score which rows? fix: --serving PATH of AIConfigurator's silicon_sample.csv "
                         "(README, Transfer to Blackwell)")
    if args.rows and (not args.serving or args.transfer):
        raise ValueError("--rows: a row table of which rows? fix: add --serving PATH of serving-hopper.csv (with "
                         "--engine NAME: that engine's estimates; without: each backend's held-out predictions)")
    if args.serving:
        return run_serving_accuracy(args)
    if args.load:
        from .scored import run_load_accuracy
        return run_load_accuracy(args)
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
    if args.transfer:
        from .scored import run_transfer
        return run_transfer(path, args.json)
    if args.rows:  # before the pricing: a place the table cannot go is known now
        writable_file("--rows", Path(args.rows))
    if not args.engine:
        from .serving_fit import run_held_out
        jobs = parse.number(args.jobs, "--jobs", whole=True, example="2")
        return run_held_out(path, args.json, args.backend, jobs, Path(args.rows) if args.rows else None)
    engine = load_engine(args.engine[0])
    read = read_serving_table(path)
    rows, left_out = read.rows, read.left_out
    if args.backend is not None:
        rows = [r for r in rows if r.backend == args.backend]
        if not rows:
            raise ValueError(f"--backend: no aggregated row of backend {args.backend!r} in {path.name}; fix: one of "
                             f"{', '.join(sorted({r.backend for r in read.rows}))}")
    predicted = predict(rows, engine)
    if args.rows:
        write_row_table(Path(args.rows), rows, predicted)
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


def write_row_table(path: Path, rows: list, predicted: dict) -> None:
    """One line a row: what it ran, measured and predicted TTFT and TPOT (ms) and predicted / measured − 1 under the
    load (empty where a row is not priced): the scores' rows, to find where a profile misses."""
    from ..fitting.published_serving import row_table
    from .serving_fit import write_table
    write_table(path, row_table(rows, predicted))


def disaggregated_accuracy(path: Path, engine) -> dict:
    """serving-hopper.csv's disaggregated rows, two pools at the row's concurrency (roofline.fitting.published_disagg),
    with the engine's handoff as shipped, refitted on these rows, and refitted without each model and configuration."""
    from ..fitting.disagg_handoff import SPLITS, fit_handoff, held_out
    from ..fitting.published_disagg import predict, read_disagg_rows, scores
    from ..fitting.disagg_load import predict_measured
    rows, skipped = read_disagg_rows(path)
    fitted, pinning = fit_handoff(rows, engine)
    splits = {split: held_out(rows, engine, key) for split, key in SPLITS.items()}
    return {"rows": len(rows), "left_out": dict(skipped), "scores": scores(rows, predict(rows, engine)),
            "handoff": {"shipped_s": engine.disagg_handoff_s, "fitted_s": fitted, "pinning_rows": pinning,
                        **{split: None if p is None else scores(rows, p)["all"] for split, p in splits.items()}},
            "measured_load": {"throughput": _throughputs(rows, engine),
                              **{reading: {group: r["ttft"] for group, r in  # TPOT is an input there
                                           scores(rows, predict_measured(rows, engine, per_rank)).items()}
                                 for reading, per_rank in (("one_server", False), ("per_rank", True))}}}


def _throughputs(rows, engine) -> list[dict]:
    """One record per backend, model, device and prompt: a prefill worker's requests/s measured and priced."""
    from ..fitting.disagg_load import priced_throughput, worker_throughput
    priced = priced_throughput(rows, engine)
    return [{"backend": backend, "model": model, "hardware": hardware, "prompt": prompt, "measured_per_s": measured,
             "priced_per_s": {f"tp={tp} ep={ep}": rate for (*key, tp, ep), rate in priced.items()
                              if tuple(key) == (backend, model, hardware, prompt)}}
            for (backend, model, hardware, prompt), measured in worker_throughput(rows).items()]


def disaggregated_lines(result: dict) -> list[str]:
    from ..fitting.disagg_handoff import SPLITS
    left = ", ".join(f"{n} {why}" for why, n in result["left_out"].items()) or "none"
    lines = [f"disaggregated: {result['rows']} rows priced as a prefill and a decode pool at their concurrency "
             f"(left out: {left}); |predicted / measured - 1|, median / p90"]
    for group, r in result["scores"].items():
        if r["ttft"]["n"]:
            lines.append(f"  {group:22s} n={r['ttft']['n']:3d}  {_cells(r)}")
    handoff = result["handoff"]
    lines.append(f"  handoff (disagg_handoff_s): {handoff['shipped_s'] * 1e3:.0f} ms as shipped; refitted on these rows "
                 f"{handoff['fitted_s'] * 1e3:.0f} ms from {handoff['pinning_rows']} at low load "
                 "(roofline.fitting.disagg_handoff); each group priced with the value fitted without it:")
    for split in ("leave_one_model_out", "leave_one_configuration_out"):
        r = handoff[split]
        scored = f"n/a: the rows hold one {SPLITS[split]}" if r is None else f"n={r['ttft']['n']:3d}  {_cells(r)}"
        lines.append(f"  {split:27s} {scored}")
    return lines + _measured_load_lines(result["measured_load"])


def _measured_load_lines(load: dict) -> list[str]:
    """One prefill worker's throughput as the rows measured it beside the pricer's, and the rows priced with it."""
    lines = ["  prefill worker throughput, requests/s: measured (the most one worker held, C / E2E / workers) vs "
             "priced (the pricer's step):"]
    for t in load["throughput"]:
        priced = ", ".join(f"{layout} {rate:.3g}" for layout, rate in t["priced_per_s"].items())
        lines.append(f"    {t['backend']} {t['model']} {t['hardware']} prompt {t['prompt']}: "
                     f"{t['measured_per_s']:.3g} measured; priced {priced}")
    lines.append("  with that throughput and each row's TPOT in place of the pricer's steps (the queue and the "
                 "constants alone; roofline.fitting.disagg_load):")
    for reading, words in (("one_server", "a worker one server"), ("per_rank", "ep ranks, a request each")):
        for group, ttft in load[reading].items():
            if (group == "all" or group.startswith("backend ")) and ttft["n"]:
                lines.append(f"  {words + ', ' + group:42s} n={ttft['n']:3d}  TTFT {ttft['median']:6.1%} / "
                             f"{ttft['p90']:6.1%}")
    return lines


def _cells(r: dict) -> str:
    return "  ".join(f"{m.upper()} {r[m]['median']:6.1%} / {r[m]['p90']:6.1%}" for m in ("ttft", "tpot"))


COMMANDS = [("fit-engine", add_fit_arguments, run_fit), ("accuracy", add_accuracy_arguments, run_accuracy)]
