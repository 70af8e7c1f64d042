"""Ceilings measured around every point, waiting out a machine that runs below its usual roofs.

A shared CPU's memory bandwidth wanders: on the 2-core CI machine the copy bandwidth sat at ~78 GB/s
most of the time and at ~46 GB/s for stretches of tens of seconds (another tenant, presumably), and a
decode step measured in the slow stretch is 40% slower. A point is measured when the probe is back
within `tolerance` of the best copy bandwidth seen so far (or after `patience_s`, measured anyway),
and measured again when the probes before and after it disagree by more than `tolerance`, or when
its own repeats spread more than `spread` (p90 / p10 - 1: something else ran meanwhile). Each row
keeps the mean of its two probes, so the fit prices it against the roofs it actually had.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from .ceilings import CeilingReading


class SteadyProbe:
    def __init__(self, measure: Callable[[], CeilingReading], tolerance: float = 0.1, patience_s: float = 120.0,
                 pause_s: float = 2.0, retries: int = 2, spread: float = 0.2, clock=time.monotonic, sleep=time.sleep):
        self.measure, self.tolerance, self.patience_s, self.pause_s = measure, tolerance, patience_s, pause_s
        self.spread = spread
        self.retries, self.clock, self.sleep = retries, clock, sleep
        self.best = 0.0  # the highest copy bandwidth probed in this run: the machine's usual state

    def probe(self) -> CeilingReading:
        ceilings = self.measure()
        self.best = max(self.best, ceilings.copy_bandwidth)
        return ceilings

    def steady(self) -> CeilingReading:
        """A reading once the machine is back near its best (or patience ran out)."""
        ceilings, start = self.probe(), self.clock()
        while ceilings.copy_bandwidth < (1 - self.tolerance) * self.best and self.clock() - start < self.patience_s:
            self.sleep(self.pause_s)
            ceilings = self.probe()
        return ceilings

    def around(self, measure_point: Callable[[], dict]) -> dict:
        """measure_point between two probes, again while they disagree or its repeats spread; the row gets
        the probes' mean."""
        for _ in range(self.retries + 1):
            before = self.steady()
            row = measure_point()
            if row.get("status") != "ok":
                return row
            after = self.probe()
            drift = after.copy_bandwidth / before.copy_bandwidth - 1
            spread = float(row["time_p90_s"]) / float(row["time_p10_s"]) - 1
            if abs(drift) <= self.tolerance and spread <= self.spread:
                break
        return {**row, **before.mean(after).as_row(), "ceiling_drift": drift}
