"""Files whose measured rates need more prefill than any Hopper GEMM delivers (roofline.fitting.unstated_work): found
again from the file at the datasheet peaks, and left out by reason "work"."""
import csv
from collections import defaultdict
from pathlib import Path

import pytest

import roofline.fitting.serving_rows as serving_rows
from roofline.engine import load_engine
from roofline.fitting.published_serving import _deployment, read_serving_table
from roofline.fitting.serving_rows import source_file
from roofline.fitting.unstated_work import FASTEST_GEMM_SHARE, UNSTATED, prefill_floor
from roofline.model import PREFILL
from serving_sample import TAIL, write_sample

SERVING_HOPPER = Path(__file__).resolve().parents[2] / "shared" / "published" / "serving-hopper.csv"


def test_the_floor_is_the_completed_requests_times_one_prompts_prefill():
    # C 64, TTFT 125 ms, TPOT 7.5 ms over 100 tokens: E2E 0.8675 s, 73.8 requests a second; 13 ms a prompt at the peaks
    assert prefill_floor(64, 0.125, 0.0075, 100, 0.013) == pytest.approx(0.9591, abs=1e-4)
    assert FASTEST_GEMM_SHARE == pytest.approx(0.783, abs=1e-3)


def test_a_row_of_a_file_that_ran_other_prompts_is_left_out_as_work(tmp_path):
    fields = ("vllm,0.12.0,nvidia/Llama-3.1-8B-Instruct-FP8,{system},fp8,agg,4000,100,fp8,fp8,64,4,1,,1,1" + TAIL +
              ",124.6,7.5")
    lines = [f"{name},source_file=nvidia_Llama-3.1-8B-Instruct-FP8.csv; silicon_concurrency=64," +
             fields.format(system=system) for name, system in (("h200", "h200_sxm"), ("h100", "h100_sxm"))]
    read = read_serving_table(write_sample(tmp_path, lines))
    assert [r.id for r in read.rows] == ["h100"] and read.left_out["work"] == 1  # the file and system the rule names


@pytest.mark.skipif(not SERVING_HOPPER.is_file(), reason="../shared/published/serving-hopper.csv not beside the repo")
def test_only_the_named_file_needs_more_than_the_fastest_gemm(monkeypatch):
    monkeypatch.setattr(serving_rows, "unstated_work", lambda *key: False)  # read every file, the named one too
    rows = read_serving_table(SERVING_HOPPER).rows
    with SERVING_HOPPER.open() as handle:
        keys = {raw["id"]: (raw["backend"], raw["backend_version"].strip(), source_file(raw), raw["system"])
                for raw in csv.DictReader(handle)}
    ideal, floors = load_engine("ideal"), defaultdict(list)
    for r in rows:
        prompt_s = float(_deployment(r, ideal).step(PREFILL, 1.0, float(r.prompt)).total_s) / r.ep
        floors[keys[r.id]].append(prefill_floor(r.concurrency, r.ttft_s, r.tpot_s, r.gen, prompt_s))
    beyond = {key for key, values in floors.items() if max(values) > FASTEST_GEMM_SHARE}
    assert beyond == set(UNSTATED)
    (named,) = UNSTATED
    assert len(floors[named]) == 21 and sum(f > FASTEST_GEMM_SHARE for f in floors[named]) == 9
    assert max(floors[named]) > 0.95
    assert max(max(values) for key, values in floors.items() if key != named) < 0.6
