"""The disaggregation handoff: one more term in a disaggregated TTFT, fitted where the prefill pool is lightly
loaded (the median excess of measured over modelled TTFT), and held out by model and by configuration."""
import dataclasses

import numpy as np
import pytest

from roofline.engine import load_engine
from roofline.fitting.disagg_handoff import LOW_LOAD, fit_handoff, held_out
from roofline.fitting.published_disagg import DisaggRow, Pool, predict, price
from roofline.precision import Precision

ENGINE = dataclasses.replace(load_engine("tensorrt-llm"), disagg_handoff_s=0.0)  # the model without the handoff


def _row(name: str, concurrency: int, configuration: str, model: str = "llama-3.1-8b") -> DisaggRow:
    # one tp-1 prefill worker, one tp-1 decode worker of an H100 holding at most 64 sequences; times set later
    return DisaggRow(name, "trtllm", model, "h100-sxm", "bf16", None, Pool(1, 1, 1, None), Pool(1, 1, 1, 64),
                     concurrency, 4096, 128, 1.0, 0.01, Precision(weights="bf16"), configuration)


def _measured(rows: list[DisaggRow], excess: list[float]) -> list[DisaggRow]:
    """The rows with a measured TTFT of the model's (no handoff) plus `excess` seconds."""
    modelled = predict(rows, ENGINE)["ttft"]
    return [dataclasses.replace(r, ttft_s=float(t + e)) for r, t, e in zip(rows, modelled, excess)]


def test_one_request_in_flight_pays_the_handoff_once_beside_the_prefill_and_the_kv():
    row = _row("a", 1, "1")
    engine = dataclasses.replace(ENGINE, disagg_handoff_s=0.5)
    without, with_handoff = (price(row, e).at_concurrency([1.0]) for e in (ENGINE, engine))
    # the closed loop inverts an interpolated curve: C = 1 holds to ~1e-4 of a request (so a 25 us wait)
    assert with_handoff["ttft_s"][0] - without["ttft_s"][0] == pytest.approx(0.5, abs=1e-4)
    assert with_handoff["handoff_s"][0] == 0.5 and without["handoff_s"][0] == 0.0
    assert with_handoff["tpot_s"][0] == pytest.approx(without["tpot_s"][0], rel=1e-9)  # decode is untouched


def test_the_fit_is_the_median_excess_of_the_lightly_loaded_rows_alone():
    rows = [_row("a", 1, "1"), _row("b", 2, "1"), _row("c", 3, "1"), _row("busy", 64, "1")]
    busy = predict(rows, ENGINE)["prefill_busy"]
    assert (busy[:3] <= LOW_LOAD).all() and busy[3] > LOW_LOAD  # the premise: three light rows, one loaded
    # excesses 0.2, 0.3, 0.9 s at low load (median 0.3), 5 s under load: the loaded row's queue may hide anything
    value, pinning = fit_handoff(_measured(rows, [0.2, 0.3, 0.9, 5.0]), ENGINE)
    assert pinning == 3 and value == pytest.approx(0.3, abs=1e-9)


def test_a_measured_ttft_below_the_model_pins_the_handoff_at_its_lower_bound_zero():
    value, pinning = fit_handoff(_measured([_row("a", 1, "1"), _row("b", 1, "2")], [-0.1, -0.2]), ENGINE)
    assert (value, pinning) == (0.0, 2)


def test_each_configuration_is_priced_with_the_handoff_the_others_pin():
    rows = _measured([_row("a", 1, "1"), _row("b", 1, "2"), _row("c", 1, "2")], [0.2, 0.6, 0.6])
    predicted = held_out(rows, ENGINE, "configuration")
    modelled = predict(rows, ENGINE)["ttft"]
    # configuration 1 gets configuration 2's 0.6 s, and 2 gets 1's 0.2 s (one request in flight: no queue moves)
    assert predicted["ttft"] - modelled == pytest.approx(np.array([0.6, 0.2, 0.2]), abs=1e-4)
    assert held_out(rows, ENGINE, "model") is None  # one model: leave-one-model-out has nothing to hold out
