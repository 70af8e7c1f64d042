"""What `plan` serves: a request rate and the prompt and output lengths, each fixed, exponential or sampled.

The analytic search uses the lengths' means (a decode step at the mean context, memory for the mean
sequence); the percentile check (roofline.planning.frontier) draws every request from the distribution.
A CSV of lengths is read by the caller (`read_lengths`, at the edge) into a `Lengths` of samples.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field

import numpy as np

FIXED, EXPONENTIAL, SAMPLES = "fixed", "exponential", "samples"
# Beyond these a number is a typo, and the replica counts it implies overflow a 64-bit integer: the busiest
# public services answer ~1e5 requests/s, and no model reads 16.7M tokens of context (config.MAX_DIMENSION).
MAX_RATE = 1e9  # requests/s
MAX_TOKENS = 1 << 24


@dataclass(frozen=True)
class Lengths:
    """Token lengths: `fixed` at `mean`, `exponential` with that mean (whole tokens >= 1), or `samples` drawn from."""
    kind: str
    mean: float
    samples: tuple = ()
    origin: str = field(default="", compare=False)  # the file the samples came from
    lines: tuple = field(default=(), compare=False)  # each sample's line in it

    def __post_init__(self):
        if self.kind not in (FIXED, EXPONENTIAL, SAMPLES):
            raise ValueError(f"lengths: unknown kind {self.kind!r}; use '{FIXED}', '{EXPONENTIAL}' or '{SAMPLES}'")
        if not 1 <= self.mean <= MAX_TOKENS:
            raise ValueError(f"lengths: the mean must be between 1 and {MAX_TOKENS} tokens, got {self.mean!r}")

    @classmethod
    def of(cls, value) -> "Lengths":
        return value if isinstance(value, Lengths) else cls(FIXED, float(value))

    @classmethod
    def from_samples(cls, values, origin: str = "", lines=()) -> "Lengths":
        values = tuple(int(v) for v in values)
        if not values:
            raise ValueError("lengths: no samples given")
        return cls(SAMPLES, float(np.mean(values)), values, origin, tuple(lines))

    @property
    def longest(self) -> float:
        """The longest request the search or the simulation prices (an exponential's mean: its tail is unbounded)."""
        return float(max(self.samples)) if self.samples else self.mean

    def where_longest(self) -> str:
        """'FILE, line N: ' naming the longest sample, or '' when the lengths came from no file."""
        if not (self.origin and self.lines):
            return ""
        return f"{self.origin}, line {self.lines[int(np.argmax(self.samples))]}: "

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == FIXED:
            return np.full(n, max(int(round(self.mean)), 1))
        if self.kind == EXPONENTIAL:  # geometric: the exponential's whole-token form, mean `mean`
            return rng.geometric(1 / self.mean, n)
        return rng.choice(np.asarray(self.samples), n)

    def __str__(self) -> str:
        return {FIXED: f"{self.mean:g}", EXPONENTIAL: f"exponential mean {self.mean:g}",
                SAMPLES: f"{len(self.samples)} samples, mean {self.mean:.0f}"}[self.kind]


@dataclass(frozen=True)
class Workload:
    """Requests per second (Poisson arrivals in the simulation) and their prompt and output lengths (tokens)."""
    rate: float
    prompt: object  # a number of tokens, or Lengths
    gen: object

    @property
    def prompt_mean(self) -> float:
        return Lengths.of(self.prompt).mean

    @property
    def gen_mean(self) -> float:
        return Lengths.of(self.gen).mean

    def check(self) -> None:
        if not (math.isfinite(self.rate) and 0 < self.rate <= MAX_RATE):
            raise ValueError(f"rate: must be a finite number of requests/s in (0, {MAX_RATE:g}], got {self.rate!r}; "
                             "fix: e.g. --rate 3")
        if not (self.prompt_mean >= 1 and self.gen_mean >= 1):
            raise ValueError(f"workload: prompt >= 1 and gen >= 1 tokens are needed, got {self}")


def parse_lengths(text: str, flag: str, read=None) -> Lengths:
    """'1024' or 'fixed:1024', 'exp:1024', 'csv:FILE[:COLUMN]' (read(FILE) gives its text: the caller's I/O)."""
    kind, _, rest = str(text).partition(":")
    try:
        if not rest:
            return Lengths(FIXED, float(kind))
        if kind in ("fixed", "exp", "exponential"):
            return Lengths(FIXED if kind == "fixed" else EXPONENTIAL, float(rest))
    except ValueError as err:
        raise ValueError(f"{flag}: {err}; expected N, fixed:N, exp:MEAN or csv:FILE[:COLUMN], got {text!r}") from None
    if kind == "csv" and read is not None:
        path, _, column = rest.rpartition(":") if rest.count(":") and not rest.endswith(".csv") else (rest, "", "")
        return lengths_from_csv(read(path), path, column or None)
    raise ValueError(f"{flag}: expected N, fixed:N, exp:MEAN or csv:FILE[:COLUMN], got {text!r}")


def lengths_from_csv(text: str, name: str, column: str | None = None) -> Lengths:
    """Lengths from CSV text: one column of whole numbers, or the named column of a file with a header."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise ValueError(f"{name}: empty; expected one token length per line")
    start, index = 0, 0
    header = [cell.strip() for cell in rows[0]]
    if column is not None:
        if column not in header:
            raise ValueError(f"{name}: no column {column!r} in the header {header}; name one of them")
        start, index = 1, header.index(column)
    elif not header or not header[0].strip().lstrip("-").isdigit():
        start = 1  # a header row
    values, lines = [], []
    for line, row in enumerate(rows[start:], start=start + 1):
        if not row:
            continue
        cell = row[index].strip() if index < len(row) else ""
        field = column or f"column {index + 1}"
        if not cell.isdigit() or not 1 <= int(cell) <= MAX_TOKENS:
            raise ValueError(f"{name}, line {line}, {field}: expected a whole number of tokens >= 1, got {cell!r}; "
                             f"fix: correct that cell (1 to {MAX_TOKENS} tokens)")
        values.append(int(cell))
        lines.append(line)
    if not values:
        raise ValueError(f"{name}: no token lengths, only a header; fix: add one whole number of tokens per line")
    return Lengths.from_samples(values, name, lines)
