"""Writes tests/golden/analyze.json: `roofline analyze --json` for every bundled model on three devices.

Regenerate only on purpose (a fixed silent drop), and say in the commit which numbers moved and why:
    PYTHONPATH=. python tests/golden/make_analyze.py
"""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from roofline.cli import main

GOLDEN = Path(__file__).with_name("analyze.json")
DEVICES = ("h100-sxm", "a100-80gb", "h200")
MODELS = sorted(p.stem for p in (Path(__file__).parents[2] / "data" / "models").glob("*.json"))
# Beyond the defaults: tensor parallelism with replicas, and a harness fit (an engine profile) with overheads.
EXTRA = (("llama-2-13b", "h100-sxm", ("--tp", "2", "--replicas", "2")),
         ("llama-3-8b", "h100-sxm", ("--tp", "4",)),
         ("mixtral-8x7b", "h100-sxm", ("--tp", "2",)),
         ("deepseek-v2-lite", "h100-sxm", ("--tp", "2",)),
         ("llama-2-7b", "cpu", ("--engine", "harness-cpu")))


def cases() -> list[tuple[str, str, tuple]]:
    return [(m, d, ()) for m in MODELS for d in DEVICES] + list(EXTRA)


def run(model: str, device: str, extra: tuple) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["analyze", "--model", model, "--hardware", device, "--json", "--allow-beyond-window", *extra]) == 0
    return json.loads(out.getvalue())


def key(model: str, device: str, extra: tuple) -> str:
    return " ".join((model, device) + tuple(extra))


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps({key(*c): run(*c) for c in cases()}, indent=1, sort_keys=True) + "\n")
