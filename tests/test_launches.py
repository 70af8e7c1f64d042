"""The serving rows' launch facts (data/published/serving-launches.csv): the file reads and names real row groups
(Hopper's in serving-hopper.csv, the kept-aside Blackwell ones in AIConfigurator's silicon sample), a
launched row takes its KV format, and the measured queue of TensorRT-LLM's Llama-3.3-70B rows says the pool they ran
was an fp8 cache's (the module docstring's evidence, from the rows themselves)."""
import csv
import os
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from roofline.engine import load_engine
from roofline.fitting.launches import LAUNCHES, launch_of, measured_date, read_launches
from roofline.fitting.published_serving import _deployment, read_serving_rows, read_serving_table
from roofline.serving.load import kv_sequences
from serving_sample import TAIL, write_sample

SERVING_HOPPER = Path(__file__).resolve().parents[2] / "shared" / "published" / "serving-hopper.csv"
SILICON = Path(os.environ.get("AIC_SILICON_SAMPLE", "/nonexistent"))  # kept-aside rows: read, never fitted
HOPPER, BLACKWELL = ("h100_sxm", "h200_sxm"), ("b200_sxm", "b300_sxm")
HEADER = ("backend,model_path,system,measured,kv_cache_dtype,memory_fraction,token_budget,left_out,length_ratio,script,"
          "commit,evidence\n")
LLAMA_70B_FP8 = "2026_04_06_llama_3_1_70b_h200_sxm_trtllm_fp8_agg_1024x8192_c{}_tp1_ep1"


def test_every_launch_line_reads_and_cites_a_commit():
    table = read_launches(LAUNCHES)
    assert table
    for (backend, _, system, measured), launch in table.items():
        assert backend in ("trtllm", "vllm", "sglang") and system in (*HOPPER, *BLACKWELL)
        assert len(measured) == 10 and "@" in launch.script and len(launch.script.split("@")[1]) == 40


def aggregated_groups(path: Path) -> Counter:
    groups = Counter()
    with path.open(newline="") as handle:
        for raw in csv.DictReader(handle):
            if raw["mode"] == "agg":
                groups[(raw["backend"], raw["model_path"], raw["system"], measured_date(raw))] += 1
    return groups


@pytest.mark.skipif(not SERVING_HOPPER.is_file(), reason="../shared/published/serving-hopper.csv not beside the repo")
def test_every_hopper_launch_group_names_aggregated_rows_of_the_file():
    groups = aggregated_groups(SERVING_HOPPER)
    for key in [k for k in read_launches(LAUNCHES) if k[2] in HOPPER]:
        assert groups[key] > 0, f"{key} names no aggregated row of serving-hopper.csv"


@pytest.mark.skipif(not SILICON.is_file(), reason="AIC_SILICON_SAMPLE: the path of aiconfigurator-core 0.12.0's "
                                                  "systems/silicon_sample.csv (README, Transfer to Blackwell)")
def test_every_blackwell_launch_group_names_aggregated_rows_of_the_silicon_sample():
    groups = aggregated_groups(SILICON)
    blackwell = [k for k in read_launches(LAUNCHES) if k[2] in BLACKWELL]
    assert blackwell
    for key in blackwell:
        assert groups[key] > 0, f"{key} names no aggregated row of silicon_sample.csv"


def test_a_launched_row_takes_the_scripts_kv_format_and_others_keep_16_bit(tmp_path):
    launches = tmp_path / "launches.csv"
    launches.write_text(HEADER + "vllm,meta-llama/Llama-3.1-70B,h200_sxm,2025-10-29,fp8,0.95,C+P+64 in 64s,,0.8,b.sh,"
                        + "a" * 40 + ",kv fp8\n")
    launched = {"backend": "vllm", "model_path": "meta-llama/Llama-3.1-70B", "system": "h200_sxm",
                "silicon_data_source": "source_file=x.csv; measured=2025-10-29T00:00:00.000Z"}
    launch = launch_of(launched, launches)
    assert launch.kv_cache_dtype == "fp8" and launch.memory_fraction == 0.95
    engine = load_engine("vllm")
    assert launch.engine(engine).memory.fraction == 0.95 and launch.engine(engine).memory.rule == engine.memory.rule
    assert launch.budget(64, 1024) == 1152 and launch.budget(65, 1024) == 1216  # ceil((C + P + 64) / 64) 64s
    # lengths uniform over [819, 1024] and [6553, 8192]: means 921.5 and 7372.5, to the nearest token
    assert launch.mean_length(1024) == 922 and launch.mean_length(8192) == 7373 and launch.mean_length(1000) == 900
    assert launch_of({**launched, "backend": "trtllm"}, launches) is None
    assert launch_of({**launched, "silicon_data_source": "source_file=x.csv"}, launches) is None  # no date: none
    # through the reader, with the shipped file: the 70B H200 vLLM rows of that date are fp8, an undated row 16-bit
    line = ("{},source_file=2026-04-06.csv; measured={}T00:00:00.000Z,vllm,0.11,{},h200_sxm,"
            "fp8,agg,1024,1024,fp8,fp8,8,1,1,1,1,1" + TAIL + ",{},20.0")
    read = read_serving_table(write_sample(tmp_path, [line.format("a", "2025-10-29", "meta-llama/Llama-3.1-70B", 200),
                                                      line.format("b", "2024-01-01", "meta-llama/Llama-3.1-70B", 210)]))
    assert [r.precision.kv for r in read.rows] == ["fp8", "bf16"]
    assert read.rows[0].launch is not None and read.rows[1].launch is None
    # the launched row at its client's mean lengths and its script's budget; the other as stated, the profile's
    assert [(r.prompt, r.gen, r.token_budget) for r in read.rows] == [(922, 922, 8192), (1024, 1024, None)]
    # a launch that is not what its rows state leaves them out, counted
    bug = line.replace("h200_sxm", "h100_sxm")
    read = read_serving_table(write_sample(tmp_path, [bug.format("c", "2025-12-05", "openai/gpt-oss-120b", 200)]))
    assert not read.rows and read.left_out["launch"] == 1


@pytest.mark.parametrize("body, field", [
    ("vllm,m,h200_sxm,2025-10-29,fp9,,,,,b.sh,{c},e\n", "kv_cache_dtype"),
    ("vllm,m,h200_sxm,29/10/2025,fp8,,,,,b.sh,{c},e\n", "measured"),
    ("vllm,m,h200_sxm,2025-10-29,fp8,,,,,b.sh,,e\n", "script, commit"),
    ("vllm,m,h200_sxm,2025-10-29,fp8,1.5,,,,b.sh,{c},e\n", "memory_fraction"),
    ("vllm,m,h200_sxm,2025-10-29,fp8,,lots,,,b.sh,{c},e\n", "token_budget"),
    ("vllm,m,h200_sxm,2025-10-29,fp8,,,,1.2,b.sh,{c},e\n", "length_ratio"),
])
def test_a_bad_launch_line_is_refused_naming_the_line_and_field(tmp_path, body, field):
    path = tmp_path / "bad.csv"
    path.write_text(HEADER + body.format(c="a" * 40))
    with pytest.raises(ValueError, match=f"line 2: .*{field}"):
        read_launches(path)


def test_a_launch_that_schedules_ahead_sets_the_engines_overlap_and_blank_keeps_the_profiles(tmp_path):
    header = HEADER.replace("token_budget,", "token_budget,overlap_steps,")
    launches = tmp_path / "launches.csv"
    body = "vllm,meta-llama/Llama-3.1-70B,h200_sxm,{},fp8,,8192,{},,0.8,b.sh," + "a" * 40 + ",e\n"
    launches.write_text(header + body.format("2025-10-29", "1") + body.format("2025-10-30", ""))
    table, engine = read_launches(launches), load_engine("vllm")
    assert engine.scheduler.overlap_steps == 0  # vLLM's profile: no async scheduling unless launched with it
    ahead = table[("vllm", "meta-llama/Llama-3.1-70B", "h200_sxm", "2025-10-29")]
    plain = table[("vllm", "meta-llama/Llama-3.1-70B", "h200_sxm", "2025-10-30")]
    assert ahead.overlap_steps == 1 and ahead.engine(engine).scheduler.overlap_steps == 1
    assert ahead.engine(engine).scheduler.token_budget == engine.scheduler.token_budget  # the rest is the profile's
    assert plain.overlap_steps is None and plain.engine(engine) == engine
    bad = tmp_path / "bad.csv"  # another path: read_launches keeps what it read of a path
    bad.write_text(header + body.format("2025-10-29", "2"))
    with pytest.raises(ValueError, match="line 2: field 'overlap_steps' must be 0 or 1"):
        read_launches(bad)


def test_every_vllm_launch_ran_async_scheduling_and_says_why():
    """vLLM schedules step n + 1 while step n runs (async scheduling) where the script sets it or its image is v0.14.0
    or later, whose default it is (PR #27614): every vLLM line of the shipped file is one or the other."""
    with LAUNCHES.open(newline="") as handle:
        lines = list(csv.DictReader(handle))
    vllm = [raw for raw in lines if raw["backend"] == "vllm"]
    assert vllm
    for raw in vllm:
        assert raw["overlap_steps"] == "1", raw["script"]
        assert "async-scheduling: true" in raw["evidence"] or "async scheduling on by default" in raw["evidence"]
    assert all(raw["overlap_steps"] == "" for raw in lines if raw["backend"] != "vllm")  # TensorRT-LLM's is its profile's


@pytest.mark.skipif(not SERVING_HOPPER.is_file(), reason="../shared/published/serving-hopper.csv not beside the repo")
def test_the_measured_queue_of_llama_70b_on_one_h200_is_an_fp8_pools():
    """A closed loop of C clients over N running slots: each request waits (C / N − 1) x its service time, E2E
    less the wait. TensorRT-LLM reserves prompt + output at admission, so N is the pool in sequences of P + G; the
    rows' measured TTFT and TPOT at C = 64 and 128 (1024 in, 8192 out, one H200) give N, which an fp8 cache's pool
    matches within 15% and a 16-bit one's misses by half."""
    rows = {r.id.rsplit("_", 1)[0]: r for r in read_serving_rows(SERVING_HOPPER)[0]}
    light = rows[LLAMA_70B_FP8.format(32)]  # below the pool: its TTFT is the service's own
    engine = load_engine("tensorrt-llm-1")
    pools = {kv: kv_sequences(_deployment(replace(light, formats=replace(light.precision, kv=kv)), engine),
                              light.prompt, light.gen, token_budget=light.token_budget)
             for kv in ("bf16", "fp8")}
    for concurrency in (64, 128):
        row = rows[LLAMA_70B_FP8.format(concurrency)]
        service = light.ttft_s + (row.gen - 1) * row.tpot_s
        slots = concurrency / (1 + (row.ttft_s - light.ttft_s) / service)
        assert abs(slots / pools["fp8"] - 1) < 0.15, (concurrency, slots, pools)
        assert pools["bf16"] < 0.55 * slots
    assert light.precision.kv == "fp8"  # the launch file gives these rows their script's fp8 cache
