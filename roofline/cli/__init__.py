"""The `roofline` command: one subcommand per module, errors as one line and exit code 2.

`validate` and `fit` belong to the measurement harness (the `validation` package, torch for `validate`):
the library never imports it; the command line loads it only when one of them is asked for.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from . import analyze, engines, plan, report, roofs, serving

# Each module lists COMMANDS = [(name, add_arguments(parser), run(args) -> int)].
MODULES = (analyze, report, serving, engines, plan, roofs)
HARNESS = "validation.cli"  # its COMMANDS: validate, fit, fit-roofs, serve-bench, serve-score
HARNESS_COMMANDS = {"validate": "Measure a real batched torch decode on this device (the validation harness).",
                    "fit": "Fit an engine profile's roofs to measured CSVs (the validation harness).",
                    "fit-roofs": "Derive the device kernel roofs from the kernel measurements (the harness).",
                    "serve-bench": "Serve Poisson traffic with a real continuous-batching torch server (the harness).",
                    "serve-score": "Score the simulator against serve-bench's measured requests (the harness)."}


def _harness():
    """The harness's command module, or None with the reason when it is not installed beside the library."""
    try:
        return importlib.import_module(HARNESS), ""
    except ImportError as err:
        return None, f"the validation harness is not installed ({err}); fix: pip install -e '.[validate]'"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    asked = next((a for a in argv if not a.startswith("-")), None)
    harness, missing = _harness() if asked in HARNESS_COMMANDS else (None, "")
    # No abbreviations: `report --tp 4` would silently be `--tpot 4` (report has no --tp).
    parser = argparse.ArgumentParser(prog="roofline", description="Analytic roofline and cost model for LLM inference.",
                                     allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)
    runners = {}
    for module in MODULES + ((harness,) if harness else ()):
        for name, add_arguments, run in module.COMMANDS:
            summary = (run.__doc__ or "").strip().splitlines()[0]
            add_arguments(sub.add_parser(name, help=summary.replace("%", "%%"), allow_abbrev=False))  # help: % formats
            runners[name] = run
    for name, summary in HARNESS_COMMANDS.items():  # listed in --help; their flags load with the harness
        if name not in runners:
            sub.add_parser(name, help=summary, add_help=False).add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command not in runners:
        print(f"roofline {args.command}: error: {missing}", file=sys.stderr)
        return 2
    engines.NOTES.clear()
    try:
        code = runners[args.command](args) or 0
        for note in engines.NOTES:
            print(note, file=sys.stderr)
        return code
    except ValueError as err:
        print(f"roofline {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"roofline {args.command}: interrupted", file=sys.stderr)
        return 130
