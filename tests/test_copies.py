"""A measurement the silicon sample holds twice is priced once (roofline.fitting.copies): the traced copy kept, copies
told from distinct runs by their digits, the Hopper file's copies counted."""
import csv
import itertools
from pathlib import Path

import pytest

from roofline.fitting.copies import COPY_MS, _key, copies
from roofline.fitting.published_serving import read_serving_table
from serving_sample import TAIL, write_sample

SERVING_HOPPER = Path(__file__).resolve().parents[2] / "shared" / "published" / "serving-hopper.csv"


def row(name, source, ttft, tpot="20.0", model="deepseek-ai/DeepSeek-R1", tp=8, batch=8):
    return (f"{name},{source},sglang,0.5.9,{model},h200_sxm,fp8,agg,1024,1024,fp8,fp8_block,{batch},{tp},1,1,{tp},1"
            f"{TAIL},{ttft},{tpot}")


def test_the_traced_copy_is_kept_and_a_run_that_differs_is_not_a_copy(tmp_path):
    dated = "source_file=2026-03-25.csv; measured=2026-03-25T00:00:00.000Z"
    path = write_sample(tmp_path, [
        row("gap", "source_file=qwen-gap-analysis.csv", "259.91"),  # rounded to 0.01 ms, named first
        row("traced", dated, "259.9114292766899"),
        row("dump", "db-dump/2026-04-27; measured=2026-03-25T00:00:00.000Z", "259.9114292766899",
            model="deepseek-ai/DeepSeek-V3"),  # the dump names R1's rows by their architecture
        row("other-run", dated, "259.93"),  # 19 us away: another measurement
        row("other-layout", dated, "259.91", tp=4, batch=8)])  # a relabelled layout: a copy still
    with path.open() as handle:
        raws = list(csv.DictReader(handle))
    assert copies(raws) == {"gap", "dump", "other-layout"}
    read = read_serving_table(path)
    assert [r.id for r in read.rows] == ["traced", "other-run"] and read.left_out["copy"] == 3


def test_a_value_that_is_no_number_is_left_to_the_reader(tmp_path):
    path = write_sample(tmp_path, [row("a", "s", "259.91"), row("b", "s", "n/a")])
    with path.open() as handle:
        assert copies(list(csv.DictReader(handle))) == set()
    with pytest.raises(ValueError, match="'b'.*silicon_ttft_ms"):
        read_serving_table(path)


@pytest.mark.skipif(not SERVING_HOPPER.is_file(), reason="../shared/published/serving-hopper.csv not beside the repo")
def test_distinct_runs_of_the_file_differ_by_far_more_than_a_copy():
    with SERVING_HOPPER.open() as handle:
        raws = [raw for raw in csv.DictReader(handle) if raw["mode"] == "agg"]
    repeated = copies(raws)
    assert len(repeated) == 187  # all of them beside rows the reader prices or leaves out by launch
    groups: dict = {}
    for raw in raws:
        if raw["id"] not in repeated:
            groups.setdefault(_key(raw), []).append(raw)
    nearest = min(max(abs(float(a[m]) - float(b[m])) for m in ("silicon_ttft_ms", "silicon_tpot_ms"))
                  for group in groups.values() for a, b in itertools.combinations(group, 2))
    assert nearest > 5 * COPY_MS
