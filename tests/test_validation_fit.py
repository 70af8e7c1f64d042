"""The fit recovers known roofs from synthetic measurements and scores them on held-out contexts."""
import dataclasses

import numpy as np
import pandas as pd
import pytest

from roofline import Hardware, Precision
from roofline.engine import Engine
from roofline.deployment import Deployment
from roofline.evaluate import evaluate
from validation import records
from validation.cli import PRESETS
from validation.fit import engine_document, fit

CONFIG = PRESETS["cpu-small"]
MEASURED = Hardware(id="measured", name="synthetic", memory_bytes=1e12, memory_bandwidth=60e9,
                    peak_flops={"fp32": 200e9})
TRUTH = Engine("truth", bandwidth_efficiency=0.45, flops_efficiency=0.8, layer_overhead_s=50e-6,
               attention_bandwidth_efficiency=0.5, attention_flops_efficiency=0.3)


def synthetic_frame(noise: float = 0.0, seed: int = 0, wandering: bool = False) -> pd.DataFrame:
    """Rows as the sweep writes them, timed by the library itself with the TRUTH engine profile.

    wandering: each point's machine had its own read stream (45 to 75 GB/s), recorded with the row; the
    copy bandwidth recorded beside it is lower, as on the H100's copy engines, and must not be the roof."""
    rng = np.random.default_rng(seed)
    precision = Precision(weights="fp32", activations="fp32", kv="fp32")
    grid = [(4, phase, context, batch) for phase in ("decode", "prefill") for context in (128, 512, 2048)
            for batch in (1, 4, 16, 64) if phase == "decode" or batch * context <= 8192]
    # MHA and MQA decode: G = N/K queries per cached key set the attention's intensity, so these
    # points tell its bandwidth from its FLOP/s (GQA alone has one intensity, G/2 FLOP per byte)
    grid += [(kv, "decode", context, batch) for kv in (16, 1) for context in (512, 2048) for batch in (1, 16, 64)]
    rows = []
    for n_kv_heads, phase, context, batch in grid:
        config = CONFIG.with_overrides(n_kv_heads=n_kv_heads)
        bandwidth = rng.uniform(45e9, 75e9) if wandering else MEASURED.memory_bandwidth
        machine = dataclasses.replace(MEASURED, memory_bandwidth=bandwidth)
        metrics = evaluate(Deployment(config, machine, precision, engine=TRUTH), batch, context, 1, e2e=False)
        time_s = float(metrics["tpot_s" if phase == "decode" else "ttft_s"]) * (1 + noise * rng.standard_normal())
        rows.append({**{c: "" for c in records.COLUMNS}, "device": "cpu", "device_name": "synthetic",
                     "torch_version": "x", "model": CONFIG.name, "config_hash": f"h{n_kv_heads}", "dtype": "fp32",
                     **{f: getattr(config, f) for f in ("n_layers", "d_model", "n_heads", "n_kv_heads",
                                                        "head_dim", "d_ff", "vocab_size")},
                     "phase": phase, "attention": "flash", "batch": batch, "context": context, "status": "ok",
                     "time_s": time_s, "copy_bandwidth": 0.8 * bandwidth, "read_bandwidth": bandwidth,
                     "matmul_flops_fp32": 200e9})
    frame = pd.DataFrame(rows)
    for column in ("batch", "context", "time_s", "copy_bandwidth", "read_bandwidth", "matmul_flops_fp32",
                   "n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size"):
        frame[column] = pd.to_numeric(frame[column])
    frame["matmul_flops_bf16"] = frame["matmul_flops_fp16"] = np.nan
    return frame


@pytest.mark.parametrize("wandering", [False, True])
def test_the_fit_recovers_the_roofs_and_overhead_that_generated_the_data(wandering):
    result = fit(synthetic_frame(wandering=wandering), "synthetic")
    c = result.engine
    assert c.bandwidth_efficiency == pytest.approx(0.45, rel=0.02)
    assert c.flops_efficiency == pytest.approx(0.8, rel=0.02)
    assert c.attention_bandwidth_efficiency == pytest.approx(0.5, rel=0.03)
    assert c.attention_flops_efficiency == pytest.approx(0.3, rel=0.05)
    assert c.layer_overhead_s == pytest.approx(50e-6, rel=0.05)
    for phase in ("decode", "prefill"):
        assert result.summary[phase]["heldout_p90_abs_err"] < 0.01


def test_held_out_error_reflects_measurement_noise_and_is_finite():
    result = fit(synthetic_frame(noise=0.05, seed=1), "noisy")
    decode = result.summary["decode"]
    assert decode["n_heldout"] == decode["n_points"] == 24
    assert 0.005 < decode["heldout_median_abs_err"] < 0.15


def test_mbu_counts_the_library_bytes_over_the_measured_read_stream():
    result = fit(synthetic_frame(), "synthetic")
    batch1 = result.points[(result.points["phase"] == "decode") & (result.points["batch"] == 1)]
    # decode at batch 1 is memory bound: bytes / time = 0.45 of the roof, less the small overhead;
    # long MHA caches stream at attention's own 0.5 of that roof
    assert batch1[batch1["n_kv_heads"] == 4]["mbu"].between(0.40, 0.45).all()
    assert batch1["mbu"].between(0.2, 0.5).all()
    assert batch1["mbu_copy"].to_numpy() == pytest.approx(batch1["mbu"].to_numpy() / 0.8)
    assert result.summary["mbu_batch1"] == pytest.approx(batch1["mbu"].median())


def test_the_profile_states_fractions_of_the_named_datasheet_with_ranges_and_its_record(monkeypatch):
    from roofline import engine
    result = fit(synthetic_frame(), "synthetic")
    datasheet = Hardware(id="sheet", name="sheet", memory_bytes=1e12, memory_bandwidth=120e9, peak_flops={"fp32": 400e9})
    monkeypatch.setattr(engine, "bundled_hardware", lambda: {"sheet": datasheet})  # a device the profile may name
    document = engine_document(result, datasheet, ["x.csv"])
    assert document["hardware"] == "sheet"
    assert document["bandwidth_efficiency"]["value"] == pytest.approx(0.45 * 60 / 120, rel=0.02)
    assert document["attention_bandwidth_efficiency"]["value"] == pytest.approx(0.5 * 60 / 120, rel=0.03)
    assert document["flops_efficiency"]["value"] == pytest.approx(0.8 * 200 / 400, rel=0.02)
    low, high = document["flops_efficiency"]["range_68"]
    assert low <= document["flops_efficiency"]["value"] <= high  # the range restated with the value
    assert document["harness_fit"]["sources"] == ["x.csv"] and "x.csv" in document["layer_overhead_s"]["pinned_by"]
    loaded = engine.engine_from_document(document, "test")  # what `roofline fit` writes loads as a profile
    assert loaded.hardware == "sheet" and loaded.harness_fit["n_points"] == len(result.points)


def test_a_soft_corner_spans_the_no_overlap_and_the_roofline_bounds():
    import roofline
    from roofline.engine import Engine
    sharp = roofline.analyze("llama-2-7b", "h100-sxm", batch=[256], prompt=512).metrics.iloc[0]
    summed = roofline.analyze("llama-2-7b", "h100-sxm", batch=[256], prompt=512,
                              engine=Engine("no-overlap", corner=1.0)).metrics.iloc[0]
    soft = roofline.analyze("llama-2-7b", "h100-sxm", batch=[256], prompt=512,
                            engine=Engine("soft", corner=3.0)).metrics.iloc[0]
    assert summed["tpot_s"] == pytest.approx(sharp["decode_no_overlap_s"])
    assert sharp["tpot_s"] < soft["tpot_s"] < summed["tpot_s"]


def test_the_fit_prices_each_row_with_the_kv_dtype_it_ran_and_the_dtype_where_none_is_recorded():
    from validation.fit import predict
    frame = synthetic_frame()
    decode = frame[(frame["phase"] == "decode") & (frame["context"] == 2048)].reset_index(drop=True)
    unrecorded = predict(decode, MEASURED, TRUTH)
    same = predict(decode.assign(kv_dtype="fp32"), MEASURED, TRUTH)
    narrowed = predict(decode.assign(kv_dtype="int8"), MEASURED, TRUTH)
    assert np.array_equal(unrecorded, same)
    assert np.all(narrowed <= unrecorded) and np.any(narrowed < 0.9 * unrecorded)  # compute-bound rows stay
    fitted = fit(decode.assign(kv_dtype="fp32"), "kv").engine  # a kv_dtype column the fit groups by
    assert fitted.bandwidth_efficiency == pytest.approx(fit(decode, "kv").engine.bandwidth_efficiency, rel=1e-6)
