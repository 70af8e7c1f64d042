"""The `roofline` command: one subcommand per module, errors as one line and exit code 2."""
from __future__ import annotations

import argparse
import sys

from validation import cli as cli_validation

from . import analyze, engines, plan, report, serving

# Each module lists COMMANDS = [(name, add_arguments(parser), run(args) -> int)].
MODULES = (analyze, report, serving, engines, plan, cli_validation)


def main(argv: list[str] | None = None) -> int:
    # No abbreviations: `report --tp 4` would silently be `--tpot 4` (report has no --tp).
    parser = argparse.ArgumentParser(prog="roofline", description="Analytic roofline and cost model for LLM inference.",
                                     allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)
    runners = {}
    for module in MODULES:
        for name, add_arguments, run in module.COMMANDS:
            summary = (run.__doc__ or "").strip().splitlines()[0]
            add_arguments(sub.add_parser(name, help=summary.replace("%", "%%"), allow_abbrev=False))  # help: % formats
            runners[name] = run
    args = parser.parse_args(argv)
    try:
        return runners[args.command](args) or 0
    except ValueError as err:
        print(f"roofline {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"roofline {args.command}: interrupted", file=sys.stderr)
        return 130
