"""Measurement files: rows are appended and flushed one by one; a torn trailing line is dropped."""
import pytest

from validation import records


def row(**changes):
    base = {column: "" for column in records.COLUMNS}
    base.update(model="tiny", config_hash="abc", n_kv_heads=2, dtype="fp32", phase="decode", batch=1, context=16,
                status="ok", time_s=0.001)
    return {**base, **changes}


def test_rows_come_back_in_order_with_one_header(tmp_path):
    path = tmp_path / "m.csv"
    for batch in (1, 2, 4):
        records.append_row(path, row(batch=batch))
    assert [r["batch"] for r in records.read_rows(path)] == ["1", "2", "4"]
    assert path.read_text().count("device,") == 1


def test_a_torn_trailing_line_is_dropped_with_a_warning_and_cut_before_the_next_append(tmp_path):
    path = tmp_path / "m.csv"
    records.append_row(path, row(batch=1))
    records.append_row(path, row(batch=2))
    with open(path, "a") as handle:
        handle.write("cpu,AMD,2.13,,2,0.1,perf_counter,tiny,abc")  # killed mid-write: no newline
    with pytest.warns(UserWarning, match="corrupt trailing line"):
        assert len(records.read_rows(path)) == 2
    with pytest.warns(UserWarning):
        records.repair(path)
    records.append_row(path, row(batch=4))
    assert [r["batch"] for r in records.read_rows(path)] == ["1", "2", "4"]


def test_corruption_before_the_last_line_is_an_error_not_silently_skipped(tmp_path):
    path = tmp_path / "m.csv"
    records.append_row(path, row(batch=1))
    with open(path, "a") as handle:
        handle.write("garbage,line\n")
    records.append_row(path, row(batch=2))
    with pytest.raises(ValueError, match="line 3 is corrupt"):
        records.read_rows(path)


def test_a_file_from_another_column_layout_is_refused(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(ValueError, match="header"):
        records.read_rows(path)


def test_a_file_from_an_earlier_version_reads_with_its_missing_columns_empty_but_is_not_resumed(tmp_path):
    path = tmp_path / "old.csv"
    older = [c for c in records.COLUMNS if c not in ("n_experts", "top_k", "d_expert", "window", "kv_lora_rank")]
    path.write_text(",".join(older) + "\n" + ",".join(str(row(batch=8)[c]) for c in older) + "\n")
    (only,) = records.read_rows(path)
    assert only["batch"] == "8" and only["n_experts"] == ""
    with pytest.raises(ValueError, match="start a new file"):
        records.repair(path)


def test_points_differing_only_in_kv_heads_are_different_points():
    assert records.point_key(row(n_kv_heads=1)) != records.point_key(row(n_kv_heads=4))
