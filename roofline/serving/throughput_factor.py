"""The batch throughput factor tokens/s(B) / tokens/s(1), derived from the roofline, against hand tables.

Serving schedulers carry hand-written tables of how much a batch speeds decoding up, such as
{B 2-4: 1.8x, 5-8: 2.5x, 9-16: 3.5x, 17-32: 5x, above: 6x}. The roofline gives the factor per
model, hardware, precision and context: in the memory-bound regime t(B) = a + b·B, so the factor is
B(a + b) / (a + b·B), near B while weights dominate (a >> bB) and bounded by (a + b)/b. A table
entry is "right" for a model when it lies between the factor's values at the ends of its bucket.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..deployment import Deployment
from ..model import DECODE, decode_context

# (first batch, last batch, factor): a table in use in inference engines' schedulers.
HANDWRITTEN = ((2, 4, 1.8), (5, 8, 2.5), (9, 16, 3.5), (17, 32, 5.0), (33, None, 6.0))


def throughput_factor(d: Deployment, batches, prompt: int = 1024) -> np.ndarray:
    """tokens/s at each batch over tokens/s at batch 1, decoding with `prompt` tokens cached."""
    batches = np.asarray(batches, dtype=float)
    every = np.concatenate([[1.0], np.ravel(batches)])
    rates = every / d.step(DECODE, every, float(decode_context(prompt))).total_s
    return (rates[1:] / rates[0]).reshape(batches.shape)


@dataclass(frozen=True)
class Bucket:
    first: int
    last: int  # the table's open end is capped at `largest`
    table: float
    derived_low: float  # the roofline factor at `first`
    derived_high: float  # ... at `last`
    right: bool  # the table's value lies within [derived_low, derived_high]
    worst_error: float  # largest |table / derived − 1| over the bucket's batches


def compare_table(d: Deployment, prompt: int = 1024, table=HANDWRITTEN, largest: int = 256) -> list[Bucket]:
    """Each bucket of a hand table against the derived factor at every batch it covers."""
    buckets = []
    for first, last, value in table:
        last = largest if last is None else last
        factors = throughput_factor(d, np.arange(first, last + 1), prompt)
        low, high = float(factors.min()), float(factors.max())
        buckets.append(Bucket(first, last, value, float(factors[0]), float(factors[-1]), low <= value <= high,
                              float(np.max(np.abs(value / factors - 1)))))
    return buckets
