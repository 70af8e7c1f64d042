"""roofline.views.fmt: the only place units convert. Exact strings, flat, one behaviour per test."""
import math

import pytest

from roofline.views.fmt import fmt_bytes, fmt_count, fmt_flops, fmt_rate, fmt_seconds, plural


@pytest.mark.parametrize("value, text", [
    (0, "0 B"),
    (512, "512 B"),
    (0.5, "0.50 B"),
    (0.001, "0.001 B"),
    (819_200, "819.20 kB"),
    (26.87e9, "26.87 GB"),
    (80e9, "80.00 GB"),
    (999_999, "1.00 MB"),  # rounds up into the next prefix, not "1000.00 kB"
    (241.59e9, "241.59 GB"),
    (1e30, "1000000.00 YB"),
    (-26.87e9, "-26.87 GB"),
])
def test_fmt_bytes_uses_si_prefixes_with_two_decimals(value, text):
    assert fmt_bytes(value) == text


@pytest.mark.parametrize("value, text", [
    (0, "0 s"),
    (8.02e-3, "8.02 ms"),
    (1.037, "1.04 s"),
    (35.1e-6, "35.1 µs"),
    (0.5, "500 ms"),
    (0.9997, "1.00 s"),  # not "1000 ms"
    (2, "2.00 s"),
    (1e-10, "100 ps"),  # issue 21: was "0.1 ns"
    (1e-12, "1.00 ps"),
    (-8.02e-3, "-8.02 ms"),
])
def test_fmt_seconds_keeps_three_significant_figures(value, text):
    assert fmt_seconds(value) == text


@pytest.mark.parametrize("value, text", [
    (59.97, "1.00 min"),  # 60.0 s after rounding: the next unit
    (90, "1.50 min"),
    (3600, "1.00 h"),  # issue 21: was "3600 s"
    (5400, "1.50 h"),
    (2 * 86400, "2.00 days"),
    (1.59e10, "504 years"),  # issue 21: was "15900000000 s"
    (1e20, "3.17e+12 years"),
    (-5400, "-1.50 h"),
])
def test_fmt_seconds_reads_long_durations_in_minutes_hours_days_and_years(value, text):
    assert fmt_seconds(value) == text


@pytest.mark.parametrize("value, text", [
    (1.33e-19, "1.33e-19 s"),  # issue 21: was "1.33e-10 ns"
    (-2.5e-15, "-2.5e-15 s"),
])
def test_fmt_seconds_gives_sub_picosecond_durations_in_seconds_with_an_exponent(value, text):
    assert fmt_seconds(value) == text


@pytest.mark.parametrize("n, text", [(0, "0 candidates"), (1, "1 candidate"), (2, "2 candidates")])
def test_plural_adds_an_s_except_for_one(n, text):
    assert plural(n, "candidate") == text


@pytest.mark.parametrize("value, text", [
    (0, "0 FLOP"),
    (512, "512 FLOP"),
    (1.5, "1.50 FLOP"),
    (26.5e9, "26.5 GFLOP"),
    (26.414e12, "26.4 TFLOP"),
    (3.1e24, "3.10 YFLOP"),
    (1e27, "1000 YFLOP"),
    (-26.5e9, "-26.5 GFLOP"),
])
def test_fmt_flops_uses_si_prefixes(value, text):
    assert fmt_flops(value) == text


@pytest.mark.parametrize("value, text", [
    (0, "0"),
    (-3, "-3"),
    (0.5, "0.5"),
    (124.67, "124.7"),
    (2689.2, "2689"),
    (9999.7, "10.00 k"),
    (999_960, "1.000 M"),
    (13_015_864_320, "13.02 B"),
    (405.9e9, "405.9 B"),
    (1e15, "1000 T"),
])
def test_fmt_count_keeps_four_significant_figures_in_short_scale(value, text):
    assert fmt_count(value) == text


@pytest.mark.parametrize("value, unit, text", [
    (124.67, "tokens/s", "124.7 tokens/s"),
    (2689.2, "tokens/s", "2689 tokens/s"),
    (35e3, "tokens/s", "35.00 k tokens/s"),
    (3.35e12, "B/s", "3.35 TB/s"),
    (989.4e12, "FLOP/s", "989 TFLOP/s"),
    (0, "B/s", "0 B/s"),
    (-3.35e12, "B/s", "-3.35 TB/s"),
])
def test_fmt_rate_prefixes_bytes_and_flops_and_counts_everything_else(value, unit, text):
    assert fmt_rate(value, unit) == text


@pytest.mark.parametrize("fmt", [fmt_bytes, fmt_seconds, fmt_flops, fmt_count, lambda v: fmt_rate(v, "tokens/s"),
                                 lambda v: fmt_rate(v, "B/s")])
def test_every_formatter_reads_nan_and_none_as_na_and_keeps_the_sign_of_infinity(fmt):
    assert fmt(math.nan) == "n/a"
    assert fmt(None) == "n/a"
    assert fmt(math.inf) == "inf"
    assert fmt(-math.inf) == "-inf"
