"""`roofline roofs DEVICE`: the device's kernel roofs (data/kernel_roofs.json), curve by curve, with sources."""
from __future__ import annotations

import argparse
import json

from .. import kernel_roofs
from ..hardware import load_hardware
from ..views.fmt import fmt_rate as rate

# curve kind -> what its x is, and the datasheet roof its fractions multiply
X_LABEL = {"gemm": "tokens", "decode_attention": "K/V bytes a layer"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("device", help="a bundled hardware id (roofline analyze --hardware's) or a JSON path")
    parser.add_argument("--json", action="store_true", help="print the curves as JSON")


def _roof(hw, kind: str, dtype: str) -> float:
    return hw.memory_bandwidth if kind in ("weight_stream", "decode_attention") else hw.peak(dtype)


def run(args: argparse.Namespace) -> int:
    """Print a device's kernel roofs: each curve's fractions of the datasheet, what they reach, and the source."""
    hw = load_hardware(args.device)
    curves = kernel_roofs.all_curves(hw)
    if args.json:
        print(json.dumps({"device": hw.id, "origin": kernel_roofs.origin(hw), "curves": {
            kind: {dtype: {"x": list(c.xs), "fraction": list(c.fractions), "source": c.source}
                   for dtype, c in table.items()} for kind, table in curves.items()}}, indent=2))
        return 0
    print(f"{hw.name} ({hw.id}): kernel roofs, fractions of the datasheet ({kernel_roofs.origin(hw)})")
    for kind, table in curves.items():
        for dtype, c in sorted(table.items()):
            unit = "B/s" if kind in ("weight_stream", "decode_attention") else "FLOP/s"
            try:
                roof = _roof(hw, kind, dtype)
            except ValueError:  # no sourced peak for this dtype on this device: the fraction alone
                roof = None
            points = "  ".join(f"{x:.4g}: {f:.3f}" + (f" ({rate(f * roof, unit)})" if roof else "")
                               for x, f in zip(c.xs, c.fractions)) if kind in X_LABEL else \
                f"{c.fractions[0]:.3f}" + (f" ({rate(c.fractions[0] * roof, unit)})" if roof else "")
            label = f" by {X_LABEL[kind]}" if kind in X_LABEL else ""
            print(f"  {kind:17s} {dtype:6s}{label}: {points}")
            print(f"  {'':17s} {'':6s} source: {c.source}")
    return 0


COMMANDS = [("roofs", add_arguments, run)]
