"""Numbers for people: the one place units convert from SI base units (bytes, seconds, FLOPs) to text.

Bytes keep two decimals after an SI prefix ("26.87 GB"); seconds, FLOPs and SI rates keep three
significant figures ("8.02 ms", "26.5 GFLOP", "3.35 TB/s"); counts keep four with short-scale
suffixes ("13.02 B"). Durations past a minute read in minutes, hours, days or years. Negative values keep
their minus sign; NaN and None read "n/a", infinities "inf" / "-inf". Like rich's filesize.py: tiny, flat and
tested on its own. `plain` makes a value JSON-safe (the one converter the CLI and the report writer share).
"""
from __future__ import annotations

import math

import pandas as pd
import sympy as sp

SI = ((1e24, "Y"), (1e21, "Z"), (1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"),
      (1.0, ""))
SUBUNIT = ((1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"), (1e-12, "p"))
LONG_DURATIONS = ((60.0, "min"), (3600.0, "h"), (86400.0, "days"), (365.25 * 86400, "years"))
SHORT_SCALE = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))
SI_RATE_UNITS = ("B/s", "FLOP/s")  # rates whose unit takes an SI prefix; others ("tokens/s") scale like counts
COUNT_PLAIN_BELOW = 10_000  # counts below this print in full: "2689", not "2.689 k"


def _special(value) -> str | None:
    """The text of a value that has no magnitude to scale (None, NaN, infinity), else None."""
    if value is None or math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    return None


def _round_sig(x: float, digits: int) -> float:
    return float(f"{x:.{digits}g}")


def _sig_text(mantissa: float, digits: int) -> str:
    """mantissa (>= 1 after scaling) with `digits` significant figures, trailing zeros kept."""
    if mantissa < 1:  # below the smallest prefix
        return f"{mantissa:.{digits}g}"
    decimals = max(digits - 1 - math.floor(math.log10(round(mantissa, 9))), 0)
    return f"{mantissa:.{decimals}f}"


def _pick(x: float, prefixes) -> tuple[float, str]:
    """The largest prefix not above x (the smallest one for tiny x)."""
    for factor, prefix in prefixes:
        if x >= factor:
            return factor, prefix
    return prefixes[-1]


def _significant(value: float, unit: str, prefixes, digits: int) -> str:
    special = _special(value)
    if special:
        return special
    sign, x = ("-" if value < 0 else ""), _round_sig(abs(float(value)), digits)
    if x == 0:
        return f"0 {unit}"
    factor, prefix = _pick(x, prefixes)
    if prefix == "" and x == int(x) and unit != "s":
        return f"{sign}{int(x)} {unit}"  # a whole number of FLOPs, not "512.00 FLOP"
    return f"{sign}{_sig_text(x / factor, digits)} {prefix}{unit}"


def fmt_bytes(n: float) -> str:
    """Bytes with an SI prefix and two decimals: 26_870_000_000 -> '26.87 GB'; 512 -> '512 B'."""
    special = _special(n)
    if special:
        return special
    sign, x = ("-" if n < 0 else ""), abs(float(n))
    if x == 0:
        return "0 B"
    index = next((i for i, (factor, _) in enumerate(SI) if x >= factor), len(SI) - 1)
    if index > 0 and round(x / SI[index][0], 2) >= 1000:  # 999.999 kB rounds up to 1.00 MB
        index -= 1
    factor, prefix = SI[index]
    if prefix == "" and x == int(x):
        return f"{sign}{int(x)} B"
    if x < 0.01:  # a fraction of a byte that two decimals would show as 0.00
        return f"{sign}{x:.2g} B"
    return f"{sign}{x / factor:.2f} {prefix}B"


def fmt_seconds(s: float) -> str:
    """A duration to three significant figures: 8.02e-3 -> '8.02 ms', 3.51e-5 -> '35.1 µs', 5400 -> '1.50 h',
    1.59e10 -> '504 years'; below a picosecond (no physical step is that short) in seconds, '1.33e-19 s'."""
    special = _special(s)
    if special:
        return special
    sign, x = ("-" if s < 0 else ""), _round_sig(abs(float(s)), 3)
    if 0 < x < SUBUNIT[-1][0]:
        return f"{sign}{x:.3g} s"
    if x < LONG_DURATIONS[0][0]:
        return _significant(s, "s", SUBUNIT, 3)
    factor, unit = _pick(x, LONG_DURATIONS[::-1])
    if x / factor >= 1000:  # past a thousand years: still three figures, in powers of ten
        return f"{sign}{x / factor:.2e} {unit}"
    return f"{sign}{_sig_text(x / factor, 3)} {unit}"


def fmt_number(value: float, digits: int = 3) -> str:
    """A plain number (a ratio, a closed form's value) to `digits` significant figures: 0.0493 -> '0.0493';
    NaN and None read 'n/a'."""
    special = _special(value)
    return special if special else f"{float(value):.{digits}g}"


def plural(n: int, noun: str) -> str:
    """'1 candidate', '3 candidates' (nouns that take an s)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fmt_flops(n: float) -> str:
    """FLOPs to three significant figures with an SI prefix: 26.5e9 -> '26.5 GFLOP'."""
    return _significant(n, "FLOP", SI, 3)


def fmt_count(n: float) -> str:
    """A count to four significant figures, short scale: 13_015_864_320 -> '13.02 B'; 2689 -> '2689'."""
    special = _special(n)
    if special:
        return special
    sign, x = ("-" if n < 0 else ""), _round_sig(abs(float(n)), 4)
    if x < COUNT_PLAIN_BELOW:
        return sign + (str(int(x)) if x == int(x) else f"{x:.4g}")
    factor, suffix = _pick(x, SHORT_SCALE)
    return f"{sign}{_sig_text(x / factor, 4)} {suffix}"


def fmt_rate(n: float, unit: str) -> str:
    """A rate: SI-prefixed for bytes and FLOPs ('3.35 TB/s', '989 TFLOP/s'), else as a count ('124.7 tokens/s')."""
    if unit in SI_RATE_UNITS:
        return _significant(n, unit, SI, 3)
    text = fmt_count(n)
    return text if _special(n) else f"{text} {unit}"


def plain(value):
    """JSON-safe: numpy scalars to Python, NaN and infinities to None, sympy to its string."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, pd.DataFrame):
        return plain(value.to_dict(orient="records"))
    if isinstance(value, sp.Basic):
        return str(value)
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
