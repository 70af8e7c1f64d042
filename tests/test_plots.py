"""Figures: pure functions of library outputs, deterministic PNGs, and they show what the numbers say."""
import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection, QuadMesh
from matplotlib.figure import Figure

from roofline import analyze, load_hardware, sweep
from roofline.views import plots
from roofline.precision import Precision
from roofline.deployment import Deployment

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
    curve = sweep("llama-2-13b", "h100-sxm", batch=[1, 2, 4, 8, 16, 32, 61, 64, 128, 256], context=1024, e2e=False)
    fig = plots.latency_throughput({"H100": curve}, marks=(1, 64, 256))
    labels = fig.axes[0].get_legend_handles_labels()[1]
    # 61 with one 8192-token prefill chunk (56 with no chunking); 56 and 52 before issue 23, on the datasheet's
    # 80e9 bytes in place of the 85.5e9 an H100 shows CUDA (less a 1 GiB runtime reserve)
    assert "H100: memory wall, B=61" in labels
    assert int(lecture.metrics["max_batch"].iloc[0]) == 61
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


def test_tpot_waterfall_bars_step_from_tpot_a_to_tpot_b_through_each_terms_change():
    a = analyze("llama-2-13b", "h100-sxm", batch=[1], prompt=1024)
    b = analyze("llama-2-13b", "h200", batch=[1], prompt=1024, n_kv_heads=8, precision=Precision(kv="int8"))
    terms_a, terms_b = a.decode_terms(1, 1024), b.decode_terms(1, 1024)
    fig = plots.tpot_waterfall(terms_a, terms_b)
    bars = fig.axes[0].patches
    first, steps, last = bars[0], bars[1:-1], bars[-1]
    assert first.get_height() == pytest.approx(a.metrics["tpot_s"].iloc[0] * 1e3, rel=1e-9)
    assert last.get_height() == pytest.approx(b.metrics["tpot_s"].iloc[0] * 1e3, rel=1e-9)
    assert sum(bar.get_height() for bar in steps) == pytest.approx(last.get_height() - first.get_height(), rel=1e-9)
    for before, bar in zip([first, *steps], steps):  # each step floats on the level the previous one left
        assert bar.get_y() == pytest.approx(before.get_y() + before.get_height() if before is not first
                                            else first.get_height(), rel=1e-9)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels[0] == "TPOT A" and labels[-1] == "TPOT B" and "attention" in labels
    changes = plots.term_changes(terms_a, terms_b)
    assert list(changes.abs()) == sorted(changes.abs(), reverse=True) and (changes != 0).all()


def test_term_changes_count_a_term_missing_on_one_side_as_zero():
    a = pd.Series({"mlp": 3.0, "attention": 1.0})
    b = pd.Series({"mlp": 3.0, "attention": 0.5, "all-reduce": 0.2})
    assert plots.term_changes(a, b).to_dict() == {"attention": -0.5, "all-reduce": 0.2}


def test_regime_map_draws_the_critical_batch_and_the_kv_equals_weights_curve_where_given():
    from roofline.serving import crossovers
    frame = sweep("llama-2-13b", "h100-sxm", batch=[1, 16, 256, 1024], context=[128, 4096, 65536], e2e=False)
    critical = crossovers.critical_batch(Deployment.of("llama-2-13b", "h100-sxm")).value
    kv_context = crossovers.kv_equals_weights_context(Deployment.of("llama-2-13b", "h100-sxm")).value
    assert len(plots.regime_map(frame).axes[0].lines) == 0
    fig = plots.regime_map(frame, critical_batch=critical, kv_equals_weights_context=kv_context)
    vertical, curve = fig.axes[0].lines
    assert list(vertical.get_xdata()) == [critical, critical] and critical == pytest.approx(295, abs=1)
    x, y = curve.get_xdata(), curve.get_ydata()
    assert x * y == pytest.approx(np.full(len(x), kv_context))  # B·S = the context where KV = weights at B = 1
    assert (x[0], x[-1]) == pytest.approx(fig.axes[0].get_xlim())  # spans the map
    assert len(plots.regime_map(frame, critical_batch=float("nan"), kv_equals_weights_context=None).axes[0].lines) == 0


def test_fast_png_is_laid_out_at_fixed_margins_without_constrained_layout_and_keeps_every_label_inside(lecture):
    from matplotlib.layout_engine import ConstrainedLayoutEngine
    curve = sweep("llama-2-13b", "h100-sxm", batch=[1, 4, 16, 64, 256], context=1024, e2e=False)
    figures = [plots.roofline_chart(lecture.hardware, lecture.op_table(1, 1024)),
               plots.latency_throughput({"H100": curve}), plots.memory_breakdown(lecture.metrics, {"H100": 80e9}),
               plots.regime_map(curve)]
    for fig in figures:
        assert isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)  # the report's nicer layout
        assert plots.png_bytes(fig, fast=True).startswith(PNG)
        assert fig.get_layout_engine() is None  # not even a placeholder, which makes savefig draw twice
        labels = [t.get_text() for t in fig.axes[0].get_yticklabels() + fig.axes[0].get_xticklabels()]
        assert not any("$" in label for label in labels)  # no mathtext to parse on each new figure
        assert list(fig.axes[0].get_position().bounds) == pytest.approx(plots.FAST_AXES_BOX)
        drawn = fig.axes[0].get_tightbbox(fig.canvas.get_renderer())  # title, axis labels, tick labels, legend
        assert fig.bbox.x0 <= drawn.x0 and drawn.x1 <= fig.bbox.x1 and fig.bbox.y0 <= drawn.y0 \
            and drawn.y1 <= fig.bbox.y1, (fig.axes[0].get_title(), drawn, fig.bbox)
    roof = figures[0].axes[0]
    assert len(roof.xaxis.get_minorticklocs()) == 0 and len(roof.yaxis.get_minorticklocs()) == 0  # long log axes
    assert "10¹⁵" in [t.get_text() for t in roof.get_yticklabels()]


def test_latency_throughput_labels_only_minor_ticks_at_2_and_5_so_they_do_not_overlap():
    curve = sweep("llama-2-13b", "h100-sxm", batch=[1, 2, 4, 8, 16, 32, 52, 64, 128], context=1024, e2e=False)
    for fast in (False, True):
        fig = plots.latency_throughput({"H100": curve})
        plots.png_bytes(fig, fast=fast)
        axis = fig.axes[0].xaxis
        low, high = fig.axes[0].get_xlim()
        shown = [t for t in axis.get_minor_ticks() if t.label1.get_text() and low <= t.get_loc() <= high]
        mantissas = {round(t.get_loc() / 10 ** np.floor(np.log10(t.get_loc())), 6) for t in shown}
        assert shown and mantissas <= {2.0, 5.0}, mantissas  # kept under the fast layout too
        renderer = fig.canvas.get_renderer()
        boxes = sorted((t.label1.get_window_extent(renderer) for t in [*shown, *axis.get_major_ticks()]
                        if t.label1.get_text() and low <= t.get_loc() <= high), key=lambda b: b.x0)
        assert all(left.x1 < right.x0 for left, right in zip(boxes, boxes[1:]))  # no two labels overlap


def test_roofline_chart_marks_each_op_kind_differently_so_coinciding_decode_ops_stay_apart(lecture):
    ops = lecture.op_table(1, 1024)
    decode = ops[(ops["phase"] == "decode") & (ops["flops"] > 0)]
    assert decode["intensity"].max() / decode["intensity"].min() < 1.01  # B = 1: all near intensity 1
    fig = plots.roofline_chart(lecture.hardware, decode)
    kinds = set(decode["term"].map(plots.op_kind))
    assert kinds == set(plots.OP_KINDS)
    collections = [c for c in fig.axes[0].collections if isinstance(c, PathCollection)]
    at_one = [c for c in collections if np.allclose(c.get_offsets()[:, 0], 1, rtol=0.01)]
    assert len(at_one) == len(kinds)  # a collection per kind, not one dot
    assert len({tuple(map(tuple, c.get_paths()[0].vertices.round(3))) for c in at_one}) == len(kinds)  # shapes
    sizes = [c.get_sizes()[0] for c in sorted(at_one, key=lambda c: c.get_zorder())]
    assert sizes == sorted(sizes, reverse=True)  # the largest underneath: nested, all visible
    labels = fig.axes[0].get_legend_handles_labels()[1] + [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert set(plots.OP_KINDS) | {"decode"} <= set(labels)


def test_validation_curves_draw_measured_and_predicted_per_context_through_the_median_of_repeats():
    frame = pd.DataFrame({"batch": [1, 1, 1, 8, 1, 8], "context": [128, 128, 128, 128, 1024, 1024],
                          "measured_s": [1e-3, 2e-3, 9e-3, 4e-3, 3e-3, 6e-3],
                          "predicted_s": [1.5e-3, 1.5e-3, 1.5e-3, 5e-3, 2.5e-3, 7e-3]})
    fig = plots.validation_curves(frame)
    ax = fig.axes[0]
    assert scatter_points(fig) == len(frame)  # every run a point
    measured_128, predicted_128, measured_1024, predicted_1024 = ax.lines
    assert list(measured_128.get_ydata()) == pytest.approx([2.0, 4.0])  # median of 1, 2, 9 ms at B = 1
    assert list(predicted_1024.get_ydata()) == pytest.approx([2.5, 7.0])
    assert measured_128.get_linestyle() == "-" and predicted_128.get_linestyle() == "--"
    assert measured_128.get_color() != measured_1024.get_color()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["S=128", "S=1024", "measured", "predicted"]
    with_ideal = plots.validation_curves(frame.assign(ideal_s=frame["predicted_s"] / 2))
    assert len(with_ideal.axes[0].lines) == 6 and "ideal roofline" in [t.get_text() for t in
                                                                        with_ideal.axes[0].get_legend().get_texts()]


@pytest.mark.parametrize("model, batches", [("llama-2-13b", (1, 256)), ("deepseek-v2-lite", (1, 64)),
                                            ("gpt-oss-20b", (1,))])
def test_no_op_marker_covers_a_roof_label(model, batches):
    """Issue 21: prefill ops near the highest intensity sat under the right-aligned roof labels."""
    analysis = analyze(model, "h100-sxm", batch=list(batches), prompt=1024)
    ops = pd.concat([analysis.op_table(b, 1024).assign(batch=b) for b in batches], ignore_index=True)
    for fast in (False, True):
        fig = plots.roofline_chart(analysis.hardware, ops)
        plots.png_bytes(fig, fast=fast)
        ax, renderer = fig.axes[0], fig.canvas.get_renderer()
        labels = [t.get_window_extent(renderer) for t in ax.texts]
        assert len(labels) == len(plots._roofs(analysis.hardware))
        for collection in (c for c in ax.collections if isinstance(c, PathCollection)):
            radius = np.sqrt(collection.get_sizes().max()) / 2 * fig.dpi / 72  # points to pixels
            for x, y in ax.transData.transform(collection.get_offsets()):
                for box in labels:
                    assert not (box.x0 - radius < x < box.x1 + radius and box.y0 - radius < y < box.y1 + radius), \
                        (model, (x, y), box)


def test_the_roofline_legend_draws_prefill_hollow_and_decode_filled_as_the_app_caption_says(lecture):
    ops = lecture.op_table(1, 1024)
    legend = {t.get_text(): h for t, h in zip(plots.roofline_chart(lecture.hardware, ops).axes[0].get_legend().get_texts(),
                                              plots.roofline_chart(lecture.hardware, ops).axes[0].get_legend().legend_handles)}
    assert legend["prefill"].get_facecolor()[:3] == (1.0, 1.0, 1.0)  # hollow
    assert legend["decode"].get_facecolor()[:3] != (1.0, 1.0, 1.0)  # filled
    from pathlib import Path
    app = (Path(__file__).resolve().parents[1] / "app.py").read_text()
    assert "prefill (hollow)" in app and "decode step (filled)" in app and "triangles" not in app


def test_the_cache_against_context_keeps_its_byte_labels_inside_the_figure_under_either_layout():
    """Issue 21: under the app's fast layout the y labels were cut to "00.00 MB"."""
    from roofline import load_model
    from roofline.serving.constant_state import cache_against_context
    frame = cache_against_context(load_model("nemotron-nano-9b-v2"), 2 ** np.arange(10, 21))
    for fast in (False, True):
        fig = plots.cache_against_context(frame)
        plots.png_bytes(fig, fast=fast)
        ax, renderer = fig.axes[0], fig.canvas.get_renderer()
        labels = [t for t in ax.get_yticklabels() if t.get_text()]
        assert labels and all(t.get_window_extent(renderer).x0 >= 0 for t in labels), [t.get_text() for t in labels]
        drawn = ax.get_tightbbox(renderer)
        assert fig.bbox.x0 <= drawn.x0 and drawn.x1 <= fig.bbox.x1


def test_a_device_has_one_colour_in_every_figure_whatever_else_is_drawn(lecture):
    h100, h200 = load_hardware("h100-sxm"), load_hardware("h200")
    curves = {name: lecture.metrics for name in (h100.name, h200.name)}
    alone = plots.latency_throughput({h200.name: lecture.metrics}).axes[0].lines[0].get_color()
    both = {line.get_label(): line.get_color() for line in plots.latency_throughput(curves).axes[0].lines}
    assert alone == both[h200.name] == plots.device_color("h200") == plots.device_color(h200.name)
    assert both[h100.name] == plots.device_color("h100-sxm") != plots.device_color("h200")
    labelled = plots.latency_throughput({"llama on H200": lecture.metrics}, devices={"llama on H200": "h200"})
    assert labelled.axes[0].lines[0].get_color() == plots.device_color("h200")
    from roofline import bundled_hardware
    assert len({plots.device_color(d) for d in bundled_hardware()}) == len(bundled_hardware())  # all distinct


def test_a_long_title_is_set_smaller_until_it_fits_the_figure(lecture):
    """Issue 21's screenshots: the Memory page's title ran past the figure's right edge for a long model name."""
    title = "nemotron-nano-9b-v2: memory at S=1024+128 tokens (B = 1, yours, the wall)"
    for fast in (False, True):
        fig = plots.memory_breakdown(lecture.metrics, {"H100": 80e9}, title=title)
        plots.png_bytes(fig, fast=fast)
        box = fig.axes[0].title.get_window_extent(fig.canvas.get_renderer())
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, (fast, box)
        assert fig.axes[0].title.get_fontsize() >= 7
