"""The `roofline` command: one subcommand per module, errors as one line and exit code 2."""
from __future__ import annotations

import argparse
import sys

from . import cli_analyze

SUBCOMMANDS = [cli_analyze]  # each module: NAME, add_arguments(parser), run(args) -> int
OPTIONAL = ("roofline.cli_report", "roofline.cli_serving", "validation.cli")  # present when their issue has landed


def _modules():
    import importlib
    found = list(SUBCOMMANDS)
    for name in OPTIONAL:
        try:
            found.append(importlib.import_module(name))
        except ModuleNotFoundError as err:
            if err.name not in (name, name.rsplit(".", 1)[0]):
                raise
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="roofline", description="Analytic roofline and cost model for LLM inference.")
    sub = parser.add_subparsers(dest="command", required=True)
    runners = {}
    for module in _modules():
        for name, add_arguments, run in module.COMMANDS:
            add_arguments(sub.add_parser(name, help=(run.__doc__ or "").strip().splitlines()[0]))
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


if __name__ == "__main__":
    sys.exit(main())
