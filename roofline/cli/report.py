"""`roofline report`: the study of one model on one or more devices, written to a directory.

The I/O edge of `roofline.study.report` and `roofline.views.render`: parses arguments, reads harness fits and measurement files,
draws a progress bar on stderr, and writes report.md, report.html, results.csv, results.json and
the plot PNGs. Two runs with the same inputs give the same files apart from the 'Generated' line.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ..engine import ENGINES_DIR, MEASURED, Engine, engine_from_document, read_engine_file
from ..hardware import DATA_DIR, Hardware, load_hardware
from ..models.config import MAX_DIMENSION, MEASURED_DIMS, MEASURED_OPTIONAL_DIMS, measured_config
from ..planning.workload import MAX_RATE
from ..precision import Precision
from ..userfile import one_line
from ..study.report import DEFAULTS, ValidationInput, build_study
from ..views.render import html, markdown, results_frame, results_json
from . import args as parse
from .analyze import add_experts, experts_of
from .engines import NOTES

FORMATS = ("md", "html")
MEASUREMENTS_DIR = DATA_DIR / "measurements"
FITS_DIR = ENGINES_DIR
MEASUREMENT_COLUMNS = ("model", *MEASURED_DIMS, "dtype", "phase", "batch", "context", "time_s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=DEFAULTS["model"], help="bundled model name or a config.json path")
    parser.add_argument("--hardware", action="extend", nargs="+",
                        help="one or more hardware ids or JSON files (several: side by side); default h100-sxm")
    parser.add_argument("--batch", default=",".join(map(str, DEFAULTS["batch"])), help="batch sizes, e.g. 1,64,256")
    parser.add_argument("--prompt", default=str(DEFAULTS["prompt"]), help="prompt length P (tokens)")
    parser.add_argument("--gen", default=str(DEFAULTS["gen"]), help="generated tokens G")
    parser.add_argument("--weights", default="bf16", help="weight dtype (bf16, fp8, int8, int4, ...)")
    parser.add_argument("--kv", default="bf16", help="KV-cache dtype")
    add_experts(parser)
    parser.add_argument("--fit", metavar="FILE", help="a harness fit's engine profile, from `roofline fit` (default: "
                        "the data/engines profiles a harness fit wrote for the report's hardware)")
    parser.add_argument("--calibration", metavar="FILE", help="deprecated: the same as --fit")
    parser.add_argument("--measurements", action="append", help="measurement CSV from `roofline validate` (repeatable)")
    parser.add_argument("--engine", metavar="NAME|FILE", default=None,
                        help="an engine profile (data/engines) or YAML: adds its achievable times and the gap by term")
    parser.add_argument("--out", default="reports", help="output directory (created if missing)")
    parser.add_argument("--format", default="md,html", help="md, html or both (CSV, JSON and PNGs are always written)")
    parser.add_argument("--no-plots", action="store_true", help="skip the figures (faster; the HTML has no images)")
    parser.add_argument("--rate", help="requests/s: with --ttft and --tpot, adds a plan section (roofline plan)")
    parser.add_argument("--ttft", help="TTFT target, seconds, for the plan section")
    parser.add_argument("--tpot", help="TPOT target, seconds, for the plan section")
    parser.add_argument("--e2e", help="end-to-end target per request, seconds, for the plan section (optional)")


def _reference(engine: Engine) -> Hardware | None:
    """The roofs the fractions apply to: a datasheet entry, or the measured ceilings ('measured')."""
    if engine.hardware and engine.hardware != MEASURED:
        return load_hardware(engine.hardware)
    ceilings = engine.harness_fit.get("measured_ceilings") or {}
    if not ceilings.get("copy_bandwidth_bytes_per_s"):
        return None
    name = engine.harness_fit.get("device_name", "measured device")
    return Hardware(id="measured", name=f"{name} (measured ceilings)", memory_bytes=1.0,
                    memory_bandwidth=float(ceilings["copy_bandwidth_bytes_per_s"]),
                    peak_flops={d: float(v) for d, v in (ceilings.get("matmul_flops_per_s") or {}).items()})


def read_fit(path: Path) -> tuple[Engine, Hardware | None]:
    """The engine profile a `roofline fit` wrote, and the roofs its fractions apply to."""
    engine = engine_from_document(read_engine_file(path), f"harness fit {str(path)!r}", path.stem)
    if not engine.harness_fit:
        raise ValueError(f"harness fit {str(path)!r}: no harness_fit record (sources, ceilings); pass a profile "
                         "that `roofline fit` wrote")
    return engine, _reference(engine)


def read_measurements(paths: list[Path]) -> pd.DataFrame:
    """Measured rows (status ok) of validation CSVs, with the columns the comparison needs."""
    frames = []
    for path in paths:
        try:
            frame = pd.read_csv(path)
        except (OSError, ValueError) as err:
            raise ValueError(f"measurements {str(path)!r}: cannot read CSV ({one_line(err)}); fix: pass a CSV "
                             f"written by `roofline validate`") from None
        missing = [c for c in MEASUREMENT_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"measurements {str(path)!r}: missing columns {', '.join(missing)}")
        if "status" in frame.columns:
            frame = frame[frame["status"] == "ok"]
        _check_numbers(frame, path)
        optional = frame.reindex(columns=list(MEASURED_OPTIONAL_DIMS)).fillna(0)  # none, or a file from before them
        frame = frame[list(MEASUREMENT_COLUMNS)].dropna().join(optional)
        _check_models(frame, path)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=MEASUREMENT_COLUMNS)


def _check_models(frame: pd.DataFrame, path: Path) -> None:
    """Each measured model's dimensions make a model (heads dividing, widths consistent) and its dtypes are formats
    the library prices; else the file, named."""
    dims = (*MEASURED_DIMS, *MEASURED_OPTIONAL_DIMS)
    for key, group in frame.groupby(["model", *dims], sort=False):
        try:
            measured_config(str(key[0]), {d: int(v) for d, v in zip(dims, key[1:])})
            for dtype in group["dtype"].unique():
                Precision(str(dtype), str(dtype), str(dtype))
        except ValueError as err:
            raise ValueError(f"measurements {str(path)!r}: {err}; fix: re-run `roofline validate` or correct the "
                             "row") from None


def _check_numbers(frame: pd.DataFrame, path: Path) -> None:
    """Dimensions whole and positive, times finite and positive, in every measured row; else the cell, named."""
    for column in (*MEASURED_DIMS, "batch", "context", "time_s", *MEASURED_OPTIONAL_DIMS):
        if column not in frame.columns:
            continue
        values = pd.to_numeric(frame[column], errors="coerce")
        whole = column != "time_s"
        optional = column in MEASURED_OPTIONAL_DIMS
        bad = ~(values.isna() & optional) & ~((values > 0) | ((values == 0) & optional)) | ~np.isfinite(values.fillna(0))
        if whole:  # a dimension, batch or context past MAX_DIMENSION is a typo (ModelConfig refuses it too)
            bad |= values.notna() & ((values != values.round()) | (values > MAX_DIMENSION))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(f"measurements {str(path)!r}, column {column!r}, row {frame.index[row] + 2}: expected a "
                             f"{f'whole number from 1 to {MAX_DIMENSION}' if whole else 'positive number'}, got "
                             f"'{frame[column].iloc[row]}'; fix: "
                             f"re-run `roofline validate` or correct the cell")


def _sources(engine: Engine) -> list[Path]:
    names = engine.harness_fit.get("sources") or []
    return [MEASUREMENTS_DIR / Path(n).name for n in names if (MEASUREMENTS_DIR / Path(n).name).is_file()]


def _shown(path: Path) -> str:
    """A bundled file as data/..., so reports do not depend on where the checkout lives."""
    try:
        return str(path.resolve().relative_to(DATA_DIR.parent))
    except ValueError:
        return str(path)


def _fit_files() -> list[Path]:
    """The bundled profiles a harness fit wrote (those with a harness_fit record)."""
    return [p for p in sorted(FITS_DIR.glob("*.yaml")) if "harness_fit" in (read_engine_file(p) or {})]


def _calibrated(path: Path, devices: list[Hardware], explicit: bool, files: list[Path] | None):
    """(device, ValidationInput) for one harness fit, or None when it fits none of the devices."""
    cal, reference = read_fit(path)
    target = cal.hardware
    match = next((d for d in devices if d.id == target), None)
    if match is None and explicit:
        if target not in ("", MEASURED):
            raise ValueError(f"harness fit {str(path)!r}: fitted for hardware {target!r}, which is not in this "
                             f"report ({', '.join(d.id for d in devices)}); add --hardware {target}")
        match = devices[0]
    if match is None:
        return None
    files = _sources(cal) if files is None else files
    source = ", ".join(_shown(p) for p in [path, *files])
    return match, ValidationInput(cal, reference or match, cal.harness_fit, read_measurements(files), source)


def find_validation(hardware: list[str], fit_file: str | None, measurements: list[str] | None) -> dict:
    """hardware id -> ValidationInput: the harness fit given (or the bundled ones fitted for the report's
    hardware, with the measurements they name); measurements given go with the first hardware."""
    devices = [load_hardware(h) for h in hardware]
    files = [Path(m) for m in measurements] if measurements else None
    found, paths = {}, {}
    for path in [Path(fit_file)] if fit_file else _fit_files():
        pair = _calibrated(path, devices, bool(fit_file), files if fit_file else None)
        if pair and pair[0].id not in found:
            found[pair[0].id], paths[pair[0].id] = pair[1], path
    first = devices[0]
    if files and not fit_file:
        found[first.id] = (_calibrated(paths[first.id], devices, False, files)[1] if first.id in found else
                           ValidationInput(None, first, {}, read_measurements(files), ", ".join(map(_shown, files))))
    return found


def _progress(done: int, total: int, label: str) -> None:
    if not sys.stderr.isatty():
        return
    width = 24
    filled = width * done // total
    sys.stderr.write(f"\rreport [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label:<40}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _slo(args: argparse.Namespace) -> dict | None:
    """The plan section's targets: none, or --rate, --ttft and --tpot together (and --e2e if given)."""
    given = {k: getattr(args, k) for k in ("rate", "ttft", "tpot", "e2e") if getattr(args, k) is not None}
    if not given:
        return None
    missing = [f"--{k}" for k in ("rate", "ttft", "tpot") if k not in given]
    if missing:
        raise ValueError(f"{', '.join(missing)}: the plan section needs --rate, --ttft and --tpot together")
    out = {}
    for key, name in (("rate", "rate"), ("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2e", "e2e_s")):
        if key in given:
            out[name] = parse.number(given[key], f"--{key}", high=MAX_RATE if key == "rate" else math.inf,
                                     example="10" if key == "rate" else "0.5")
    return out


def writable_directory(text: str) -> tuple[Path, list[Path]]:
    """--out, created if missing and proven writable by a probe file, or one line saying why not; with the
    directories it created (removed again if the report then fails)."""
    out = Path(text)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: {text!r} exists and is not a directory; fix: name a directory (e.g. --out reports)")
    created = [p for p in (out, *out.parents) if not p.exists()][::-1]
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out):
            pass
    except OSError as err:
        _remove(created)
        raise ValueError(f"--out: cannot write in {text!r} ({err.strerror}); fix: name a directory you can write, "
                         f"e.g. --out reports") from None
    return out, created


def _remove(created: list[Path]) -> None:
    for directory in reversed(created):
        with contextlib.suppress(OSError):
            directory.rmdir()


def run(args: argparse.Namespace) -> int:
    """Write the study of a model on one or more devices (Markdown, HTML, CSV, JSON, PNG)."""
    hardware = [h for item in (args.hardware or list(DEFAULTS["hardware"])) for h in parse.items(item, "--hardware")]
    formats = parse.items(args.format, "--format")
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ValueError(f"format: unknown {', '.join(unknown)}; use md, html or md,html")
    batch = parse.numbers(args.batch, "--batch", whole=True, example="1,64,256")
    prompt, gen = parse.number(args.prompt, "--prompt", whole=True), parse.number(args.gen, "--gen", whole=True)
    if args.calibration is not None:
        if args.fit is not None:
            raise ValueError("--calibration and --fit: give --fit only (--calibration is deprecated)")
        NOTES.append("roofline report: note: --calibration is deprecated; use --fit")
    slo, experts = _slo(args), experts_of(args)
    out, created = writable_directory(args.out)  # after every flag is read, before the minutes of computing
    try:
        return _write_report(args, out, hardware, formats, batch, prompt, gen, slo, experts)
    except BaseException:
        _remove(created)  # a report refused on its inputs leaves no empty directory behind
        raise


def _write_report(args, out: Path, hardware, formats, batch, prompt, gen, slo, experts) -> int:
    fit = args.fit or args.calibration
    for path in [fit] + (args.measurements or []):
        if path and not Path(path).is_file():
            raise ValueError(f"no such file {path!r}")
    validation = find_validation(hardware, fit, args.measurements)
    study = build_study(args.model, hardware, batch, prompt, gen, args.weights, args.kv, validation,
                        plots=not args.no_plots, progress=_progress, engine=args.engine, slo=slo,
                        experts=experts)
    generated = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    written = []
    for name, data in study.figures.items():
        (out / name).write_bytes(data)
        written.append(name)
    if "md" in formats:
        (out / "report.md").write_text(markdown(study, generated))
        written.append("report.md")
    if "html" in formats:
        (out / "report.html").write_text(html(study, generated))
        written.append("report.html")
    results_frame(study).to_csv(out / "results.csv", index=False)
    (out / "results.json").write_text(results_json(study))
    print(f"wrote {len(written) + 2} files to {out}: {', '.join(sorted(written + ['results.csv', 'results.json']))}")
    return 0


COMMANDS = [("report", add_arguments, run)]
