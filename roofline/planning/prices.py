"""The $/GPU-hour sheet `plan` ranks by: hardware id -> {usd_per_gpu_hour, source} (data/prices.yaml)."""
from __future__ import annotations

import math
from pathlib import Path

from ..hardware import DATA_DIR
from ..userfile import parse_yaml

PRICES = DATA_DIR / "prices.yaml"


def load_prices(path: str | Path | None = None) -> dict[str, float]:
    path = Path(path) if path else PRICES
    try:
        content = path.read_bytes()
    except OSError as err:
        raise ValueError(f"prices {str(path)!r}: cannot read it ({err.strerror}); fix: pass a readable price sheet "
                         f"(data/prices.yaml)") from None
    raw = parse_yaml(content, f"prices {str(path)!r}", "write it as hardware id -> {usd_per_gpu_hour: ..., source: "
                     "...} (data/prices.yaml)")
    if not isinstance(raw, dict):
        raise ValueError(f"prices {str(path)!r}: expected hardware id -> {{usd_per_gpu_hour: ...}}")
    out = {}
    for hw, entry in raw.items():
        value = entry.get("usd_per_gpu_hour") if isinstance(entry, dict) else entry
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(f"prices {str(path)!r}: {hw}.usd_per_gpu_hour must be a positive number, got {value!r}")
        out[str(hw)] = float(value)
    return out
