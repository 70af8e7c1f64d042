"""Today's numbers stay today's: `roofline analyze --json` against tests/golden/analyze.json.

A difference is either a bug or a fixed silent drop; the latter is regenerated on purpose
(tests/golden/make_analyze.py) and named in its commit. New keys are allowed; lost ones are not.
"""
from __future__ import annotations

import json
import math

import pytest

from golden.make_analyze import GOLDEN, cases, key, run

RELATIVE = 1e-9
GOLDEN_ROWS = json.loads(GOLDEN.read_text())


def differences(expected: list[dict], actual: list[dict]) -> list[str]:
    found = []
    for row, (want, got) in enumerate(zip(expected, actual)):
        for name, value in want.items():
            if name not in got:
                found.append(f"row {row}: {name} is gone")
            elif isinstance(value, float) and isinstance(got[name], (int, float)):
                if not math.isclose(value, got[name], rel_tol=RELATIVE, abs_tol=1e-15):
                    found.append(f"row {row}: {name} {value!r} -> {got[name]!r}")
            elif value != got[name]:
                found.append(f"row {row}: {name} {value!r} -> {got[name]!r}")
    if len(expected) != len(actual):
        found.append(f"{len(expected)} rows -> {len(actual)}")
    return found


def test_the_golden_file_covers_every_case():
    assert sorted(GOLDEN_ROWS) == sorted(key(*case) for case in cases())


@pytest.mark.parametrize("case", cases(), ids=lambda case: key(*case))
def test_analyze_json_matches_the_golden_file(case):
    assert differences(GOLDEN_ROWS[key(*case)], run(*case)) == []
