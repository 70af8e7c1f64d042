"""A tiny CPU sweep end to end: rows on disk, resume, torn lines, out-of-memory, then the fit."""
import io
import json

import pandas as pd
import pytest
import torch

from validation import records, sweep
from validation.ceilings import CeilingReading
from validation.cli import PRESETS, main

CEILINGS = CeilingReading(copy_bandwidth=50e9, read_bandwidth=25e9, matmul_flops={"fp32": 100e9})
SPEC = sweep.SweepSpec(device="cpu", model=PRESETS["tiny"], batches=(1, 2), contexts=(16, 32), steps=2,
                       prefill_repeats=1, prefill_token_limit=64)


def run(path, spec=SPEC):
    return sweep.run_sweep(spec, path, CEILINGS, sweep.Progress(1, io.StringIO()))


def test_a_rerun_skips_finished_points_and_remeasures_only_a_torn_last_row(tmp_path):
    path = tmp_path / "m.csv"
    assert run(path)[records.OK] == 8  # 2 batches x 2 contexts x (decode, prefill)
    rows = records.read_rows(path)
    assert {(r["phase"], r["batch"], r["context"]) for r in rows} == {
        (p, b, s) for p in ("decode", "prefill") for b in ("1", "2") for s in ("16", "32")}
    assert all(r["threads"] == str(torch.get_num_threads()) and r["torch_version"] for r in rows)
    assert run(path)[records.OK] == 0
    text = path.read_text()
    path.write_text(text[: len(text) - 25])  # the last row torn, as by a kill mid-write
    with pytest.warns(UserWarning, match="corrupt trailing line"):
        assert run(path)[records.OK] == 1
    assert len(records.read_rows(path)) == 8


def test_out_of_memory_is_recorded_as_does_not_fit_and_larger_batches_are_not_tried(tmp_path, monkeypatch):
    path = tmp_path / "m.csv"
    measured = []
    real_time_on = sweep.time_on

    def time_on(device, fn, repeats, warmup=1, graph=True):
        batch = sweep_batch[0]
        measured.append(batch)
        if batch >= 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_time_on(device, fn, repeats, warmup, graph)

    sweep_batch = [0]
    original = sweep._measure

    def measure(model, spec, phase, batch, context, row):
        sweep_batch[0] = batch
        return original(model, spec, phase, batch, context, row)

    monkeypatch.setattr(sweep, "time_on", time_on)
    monkeypatch.setattr(sweep, "_measure", measure)
    spec = sweep.SweepSpec(**{**SPEC.__dict__, "batches": (1, 2, 4), "contexts": (16,)})
    run(path, spec)
    rows = {(r["phase"], r["batch"]): r for r in records.read_rows(path)}
    assert rows[("decode", "1")]["status"] == records.OK
    assert rows[("decode", "2")]["status"] == records.DOES_NOT_FIT
    assert rows[("decode", "4")]["status"] == records.DOES_NOT_FIT
    assert int(rows[("decode", "2")]["predicted_max_batch"]) > 0
    assert 4 not in measured  # known not to fit once batch 2 did not


def test_a_device_fault_names_its_point_keeps_earlier_rows_and_is_not_retried(tmp_path, monkeypatch):
    path = tmp_path / "m.csv"
    calls = []
    real_time_on = sweep.time_on

    def time_on(device, fn, repeats, warmup=1, graph=True):
        calls.append(1)
        if len(calls) == 3:  # decode and prefill at batch 1 went through; decode at batch 2 faults
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real_time_on(device, fn, repeats, warmup, graph)

    monkeypatch.setattr(sweep, "time_on", time_on)
    spec = sweep.SweepSpec(**{**SPEC.__dict__, "batches": (1, 2, 4), "contexts": (16,)})
    with pytest.raises(sweep.MeasurementError, match=r"decode B=2 S=16 .*illegal memory access"):
        run(path, spec)
    assert len(calls) == 3
    assert {(r["phase"], r["batch"]) for r in records.read_rows(path)} == {("decode", "1"), ("prefill", "1")}


def test_points_the_library_predicts_cannot_fit_are_not_attempted(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "free_memory", lambda device: 1.0)
    monkeypatch.setattr(sweep, "_measure", lambda *a: pytest.fail("measured a point that cannot fit"))
    run(tmp_path / "m.csv")
    assert {r["status"] for r in records.read_rows(tmp_path / "m.csv")} == {records.DOES_NOT_FIT}


def test_validate_then_fit_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "measurements"
    assert main(["validate", "--model", "tiny", "--batches", "1,2", "--contexts", "16,32", "--steps", "2",
                 "--quick-ceilings", "--out", str(out)]) == 0
    csv = next(out.glob("*.csv"))
    capsys.readouterr()
    assert main(["fit", str(csv), "--out", str(tmp_path / "cal.yaml"), "--json", "--hardware", "measured",
                 "--points", str(tmp_path / "points.csv")]) == 0
    summary = json.loads(capsys.readouterr().out)
    points = pd.read_csv(tmp_path / "points.csv")
    assert len(points) == 8 and points["mbu"].gt(0).all() and points["mfu"].gt(0).all()
    assert list(points["heldout_error"]) == pytest.approx(list(points["heldout_predicted_s"] / points["time_s"] - 1))
    assert summary["n_points"] == 8
    for key in ("heldout_median_abs_err", "heldout_p90_abs_err", "mbu_batch1"):
        assert summary[key] == summary[key] and summary[key] >= 0  # finite numbers, not NaN
    assert (tmp_path / "measurements" / csv.with_suffix(".png").name).is_file()
    # the profile applied, not refitted, to the same rows: the in-sample error, every point scored
    assert main(["fit", str(csv), "--score", str(tmp_path / "cal.yaml"), "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["n_points"] == 8 and scored["by_phase"]["decode"]["heldout_median_abs_err"] == pytest.approx(
        summary["by_phase"]["decode"]["insample_median_abs_err"], rel=1e-6)


def test_scoring_with_a_datasheet_profile_is_refused_by_name(tmp_path, capsys):
    csv = tmp_path / "m.csv"
    run(csv)
    calibration = tmp_path / "h100.yaml"
    calibration.write_text("hardware: h100-sxm\nbandwidth_efficiency: 0.8\nflops_efficiency: 0.7\n"
                           "attention_bandwidth_efficiency: 0.9\nattention_flops_efficiency: 0.5\n"
                           "layer_overhead_s: 0.0\nstep_overhead_s: 0.0\nrequest_overhead_s: 0.0\n")
    assert main(["fit", str(csv), "--score", str(calibration)]) == 2
    assert "measured ceilings" in capsys.readouterr().err


def test_bad_command_line_input_is_a_one_line_error(capsys):
    assert main(["validate", "--model", "tiny", "--batches", "1,x", "--quick-ceilings"]) == 2
    assert "--batches" in capsys.readouterr().err


def test_a_model_whose_layers_differ_is_refused_before_anything_is_measured(tmp_path):
    mixed = PRESETS["tiny"].with_overrides(n_experts=4, top_k=2, d_expert=32, layer_mlp=("dense", "moe"))
    with pytest.raises(ValueError, match="mix attention or MLP kinds"):
        run(tmp_path / "m.csv", sweep.SweepSpec(**{**SPEC.__dict__, "model": mixed}))
    assert not (tmp_path / "m.csv").exists()


def test_rows_record_what_the_fit_needs_to_rebuild_a_window_or_moe_model(tmp_path):
    from roofline.models.config import measured_config
    mla = PRESETS["tiny"].with_overrides(name="tiny-mla", family="deepseek_v2", kv_lora_rank=24, qk_rope_dim=8,
                                         qk_nope_dim=16, v_head_dim=12, head_dim=24)
    for model in (PRESETS["tiny"].with_overrides(window=8, layer_attention=()),
                  PRESETS["tiny"].with_overrides(n_experts=4, top_k=2, d_expert=32, layer_mlp=()), mla):
        path = tmp_path / f"{model.name}-{model.window}.csv"
        run(path, sweep.SweepSpec(**{**SPEC.__dict__, "model": model, "batches": (1,), "contexts": (16,)}))
        rebuilt = measured_config(model.name, records.read_rows(path)[0])
        fields = ("layer_attention", "layer_mlp", "window", "n_experts", "kv_lora_rank", "qk_rope_dim", "v_head_dim")
        assert [getattr(rebuilt, f) for f in fields] == [getattr(model, f) for f in fields]
