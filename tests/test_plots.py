"""Figures: pure functions of library outputs, deterministic PNGs, and they show what the numbers say."""
import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection, QuadMesh
from matplotlib.figure import Figure

from roofline import analyze, load_hardware, sweep
from roofline import plots

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def lecture():
    return analyze("llama-2-13b", "h100-sxm", batch=[1, 64, 256], prompt=1024)


def scatter_points(fig: Figure) -> int:
    return sum(len(c.get_offsets()) for c in fig.axes[0].collections if isinstance(c, PathCollection))


def test_roofline_chart_has_a_point_for_every_op_with_flops_and_a_roof_per_distinct_peak(lecture):
    ops = pd.concat([lecture.op_table(b, 1024).assign(batch=b) for b in (1, 256)], ignore_index=True)
    fig = plots.roofline_chart(lecture.hardware, ops)
    assert isinstance(fig, Figure) and isinstance(fig.canvas, FigureCanvasAgg)
    assert scatter_points(fig) == int((ops["flops"] > 0).sum()) < len(ops)  # norms and embeddings have no FLOPs
    peaks = set(lecture.hardware.peak_flops.values())  # H100: fp32, tf32, bf16 = fp16, fp8 = int8
    assert len(fig.axes[0].lines) == len(peaks) == 4
    attained = np.concatenate([c.get_offsets()[:, 1] for c in fig.axes[0].collections])
    assert attained.max() <= max(peaks) * (1 + 1e-9)  # no op above its roof


def test_latency_throughput_marks_the_memory_wall_at_the_largest_batch_that_fits(lecture):
    curve = sweep("llama-2-13b", "h100-sxm", batch=[1, 2, 4, 8, 16, 32, 52, 64, 128, 256], context=1024, e2e=False)
    fig = plots.latency_throughput({"H100": curve}, marks=(1, 64, 256))
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "H100: memory wall, B=52" in labels
    assert int(lecture.metrics["max_batch"].iloc[0]) == 52
    solid = fig.axes[0].lines[0]  # the batches that fit
    assert len(solid.get_xdata()) == int(curve["fits"].sum())


def test_memory_breakdown_stacks_to_the_librarys_memory(lecture):
    metrics = lecture.metrics
    fig = plots.memory_breakdown(metrics, {"H100": 80e9})
    bars = [p for p in fig.axes[0].patches]
    tops = np.zeros(len(metrics))
    for i, bar in enumerate(bars):
        tops[i % len(metrics)] = max(tops[i % len(metrics)], bar.get_y() + bar.get_height())
    assert tops * 1e9 == pytest.approx(metrics["memory_bytes"].to_numpy(), rel=1e-9)
    assert [line.get_ydata()[0] for line in fig.axes[0].lines] == [80.0]


def test_regime_map_colours_each_cell_by_its_bound_and_out_of_memory_wins():
    frame = sweep("llama-3-8b", "h100-sxm", batch=[1, 16, 256, 1024], context=[128, 4096, 65536], e2e=False)
    fig = plots.regime_map(frame, marks=[(16, 4096)])
    cells = next(c for c in fig.axes[0].collections if isinstance(c, QuadMesh)).get_array().reshape(3, 4)
    expected = np.where(frame["fits"], frame["decode_bound"].astype(str), plots.OUT_OF_MEMORY)
    codes = np.array([plots.REGIMES.index(r) for r in expected]).reshape(4, 3).T  # frame rows: batch-major
    assert (cells == codes).all()
    assert plots.REGIMES.index(plots.OUT_OF_MEMORY) in codes and (codes != codes[0, 0]).any()


def test_measured_vs_predicted_draws_one_point_per_measurement():
    frame = pd.DataFrame({"predicted_s": [1e-3, 2e-3, 4e-3], "measured_s": [1.1e-3, 2.5e-3, 3.9e-3],
                          "label": ["decode", "decode", "prefill"]})
    fig = plots.measured_vs_predicted(frame)
    assert scatter_points(fig) == 3


def test_png_bytes_are_the_same_for_the_same_figure(lecture):
    first = plots.png_bytes(plots.memory_breakdown(lecture.metrics, {"H100": 80e9}))
    second = plots.png_bytes(plots.memory_breakdown(lecture.metrics, {"H100": 80e9}))
    assert first.startswith(PNG) and first == second
    assert b"Software" not in first  # no matplotlib version stamped into the file


def test_roofline_chart_works_for_every_bundled_device_with_a_peak():
    from roofline import bundled_hardware
    for hw_id, hw in bundled_hardware().items():
        if not hw.peak_flops:
            continue  # no sourced peak: analyze itself refuses (data/HARDWARE.md)
        ops = analyze("gpt2", hw_id, batch=[4], prompt=128).op_table(4, 128)
        fig = plots.roofline_chart(load_hardware(hw_id), ops)
        assert len(fig.axes[0].lines) == len({v for d, v in hw.peak_flops.items() if d in plots.ROOF_DTYPES})


def test_latency_throughput_says_so_when_no_batch_fits():
    curve = sweep("llama-3.1-405b", "h100-sxm", batch=[1, 8, 64], context=1024, e2e=False)  # 810 GB of weights
    fig = plots.latency_throughput({"H100": curve})
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert labels == ["H100: does not fit at any batch"]
