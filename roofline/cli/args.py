"""The command line's parsers of lists and numbers, shared by every subcommand (and the harness's).

Each refuses bad text in one line that names the flag, what it expects and an example of a good value,
before anything is computed: `--batch 1,x` is an error, never a traceback, a silent NaN or a float batch.
"""
from __future__ import annotations

import math

# The largest count a flag takes: 2^53, the last whole number a float64 holds exactly. The pricing is float64
# arithmetic, and integer columns are int64: a larger count (`--replicas 10^30`) would overflow, not answer.
WHOLE_HIGH = 2 ** 53


def items(text, flag: str) -> list[str]:
    """The comma-separated values of a flag, stripped, in order and distinct (`bf16,bf16` would price every
    candidate twice)."""
    values = list(dict.fromkeys(part.strip() for part in str(text).split(",") if part.strip()))
    if not values:
        raise ValueError(f"{flag}: give at least one value, got {str(text)!r}")
    return values


def _high(high: float | None, whole: bool) -> float:
    """A flag's upper bound: the one given, else WHOLE_HIGH for a whole number and none for a number."""
    return (WHOLE_HIGH if whole else math.inf) if high is None else high


def _range(low: float, inclusive: bool, high: float) -> str:
    start = f"{low:g}" if math.isfinite(low) else "-inf"
    if high < math.inf:
        end = str(high) if isinstance(high, int) else f"{high:g}"  # a whole bound in full: 9007199254740992
        return f"in {'[' if inclusive else '('}{start}, {end}]"
    return f"{'>=' if inclusive else '>'} {start}"


def number(text, flag: str, *, whole: bool = False, low: float = 0.0, inclusive: bool = False,
           high: float | None = None, example: str | None = None) -> int | float:
    """One finite number: above `low` (at it too when `inclusive`), at most `high` (default: WHOLE_HIGH for a
    whole number, else none); an int when `whole`."""
    kind = "whole number" if whole else "number"
    high = _high(high, whole)
    try:
        value = int(str(text).strip()) if whole else float(str(text).strip())
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value > high or (value < low if inclusive else value <= low):
        good = example if example is not None else (str(max(int(low) + (not inclusive), 1)) if whole else "0.5")
        raise ValueError(f"{flag}: expected a {kind} {_range(low, inclusive, high)}, got {str(text)!r}; "
                         f"fix: e.g. {flag} {good}")
    return value


def numbers(text, flag: str, *, whole: bool = False, low: float = 0.0, inclusive: bool = False,
            high: float | None = None, example: str | None = None) -> list:
    """Comma-separated numbers, each as `number` reads it (an empty one, as in `1,,64`, is a typo: refused); the
    error quotes the whole list."""
    kind = "whole numbers" if whole else "numbers"
    good = example if example is not None else ("1,8,64" if whole else "0.5,1,2")
    high = _high(high, whole)
    try:
        return [number(part, flag, whole=whole, low=low, inclusive=inclusive, high=high)
                for part in str(text).split(",")]
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated {kind} {_range(low, inclusive, high)}, got "
                         f"{str(text)!r}; fix: e.g. {flag} {good}") from None
