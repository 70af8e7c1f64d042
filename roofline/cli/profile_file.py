"""A fitted engine profile as the YAML `roofline fit-engine` writes: each fitted parameter with its 68% range."""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

from ..engine import FORMAT_SHARES, is_format_share


def fitted_document(result) -> dict:
    """A fit's profile as YAML-ready data: each fitted parameter with its 68% range, weak ones flagged (stderr too)."""
    fitted = result.engine
    document = fitted.as_document()
    for name, pinned in result.ranges.items():
        if is_format_share(name):
            prefix, fmt = name.split(".", 1)
            entry = document[FORMAT_SHARES[prefix][0]][fmt]
        else:
            entry = document[name]
        entry["range_68"] = [pinned.low, pinned.high]
        if pinned.weak:
            entry["weakly_pinned"] = "the rows trade it against other parameters: its prior still matters"
            print(f"roofline fit-engine: warning: the rows pin {name} only weakly (68% range {pinned.low:.4g} to "
                  f"{pinned.high:.4g}); its prior {fitted.priors.get(name)!r} still matters", file=sys.stderr)
    return document


def write_profile(document: dict, out: str | None, what: str) -> int:
    """The profile's YAML to `out` (one line saying what was fitted), else to stdout."""
    text = yaml.safe_dump(document, sort_keys=False)
    if out:
        Path(out).write_text(text)
        print(f"{out}: {what}")
    else:
        print(text)
    return 0
