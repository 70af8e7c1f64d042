"""Blackwell rows of AIConfigurator's silicon sample (issue 24, item 3), read onto bundled devices and formats and
scored with the Hopper-fitted profiles, never fitted. The package's file is not in the repository: these rows are
written here in its columns, each a shape the file holds."""
import json
import os
from pathlib import Path

import pytest

from roofline.cli import main
from roofline.fitting.published_serving import predict, read_serving_rows, read_serving_table
from roofline.fitting.transfer import FITTED, HOPPER_PROFILES, read_blackwell_row, score_transfer
from roofline.engine import load_engine
from serving_sample import HEADER, TAIL, write_sample


# meta-llama/Llama-3.1-70B: 70.55e9 parameters (its safetensors total), of which the 128,256 x 8,192 input embedding
# is only looked up; every other weight is read once a decode step
LLAMA_70B_READ = 70.55e9 - 128256 * 8192


def row(name, model, system="b200_sxm", gemm="nvfp4", moe="nvfp4", tp=1, dp="", moe_tp=1, moe_ep=1, backend="trtllm",
        mode="agg", batch=16, ttft=None, tpot="20.0"):
    # a TTFT of its own by default: rows that agree to 6 us in TTFT and TPOT are one measurement (fitting.copies)
    ttft = f"{300 + sum(map(ord, name)) / 100:.2f}" if ttft is None else ttft
    return (f"{name},silicon_concurrency={batch},{backend},1.2,{model},{system},x,{mode},1024,256,{gemm},{moe},{batch},"
            f"{tp},1,{dp},{moe_tp},{moe_ep}{TAIL},{ttft},{tpot}")


def write(tmp_path, *lines):
    return write_sample(tmp_path, lines, "silicon_sample.csv")


def fields(line):
    return read_blackwell_row(dict(zip(HEADER.split(","), line.split(","))))


def test_blackwell_systems_map_onto_the_bundled_devices_and_hopper_rows_are_the_fits_own():
    assert {s: fields(row("r", "meta-llama/Llama-3.1-70B", system=s))["hardware"]
            for s in ("b200_sxm", "b300_sxm", "gb200", "gb300")} == {
        "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200", "gb300": "gb300"}
    assert fields(row("r", "meta-llama/Llama-3.1-70B", system="h200_sxm")) == FITTED
    assert fields(row("r", "meta-llama/Llama-3.1-70B", system="mi355x")) == "device"


def test_an_nvfp4_row_is_an_nvfp4_checkpoint_unless_the_model_ships_in_four_bits():
    llama = fields(row("r", "meta-llama/Llama-3.1-70B"))["formats"]
    # W4A4 (issue 24: it was W4A8 at the fp8 peak before Precision took nvfp4 activations), 4.5 bits a weight
    assert (llama.weights, llama.activations, llama.weight_bytes) == ("nvfp4", "nvfp4", 0.5625)
    assert llama.weight_matmul_dtype == "nvfp4"
    deepseek = fields(row("r", "deepseek-ai/DeepSeek-R1", tp=8, moe_tp=8))["formats"]
    assert deepseek.weights == "nvfp4"  # not the bundled config's shipped block fp8
    assert fields(row("r", "nvidia/DeepSeek-R1-NVFP4", tp=8, moe_tp=8))["model"] == "deepseek-v3"
    gpt_oss = fields(row("r", "openai/gpt-oss-120b", tp=4, moe_tp=4))["formats"]
    assert (gpt_oss.weights, gpt_oss.expert_format) == ("bf16", "mxfp4")  # its checkpoint as shipped
    assert (gpt_oss.activations, gpt_oss.expert_matmul_dtype) == ("bf16", "fp8")  # TensorRT-LLM: MXFP4 x MXFP8 MoE
    sglang = fields(row("r", "openai/gpt-oss-120b", tp=4, moe_tp=4, backend="sglang"))["formats"]
    vllm = fields(row("r", "openai/gpt-oss-120b", tp=4, moe_tp=4, backend="vllm"))["formats"]
    assert (sglang.expert_matmul_dtype, vllm.expert_matmul_dtype) == ("fp8", "bf16")  # vLLM's default: bf16 inputs
    fp8 = fields(row("r", "deepseek-ai/DeepSeek-R1", gemm="fp8", moe="fp8", tp=8, moe_tp=8))["formats"]
    assert fp8.weights == "fp8"


def test_a_zero_width_reads_as_blank_and_more_than_one_node_is_left_out():
    dense = fields(row("r", "Qwen/Qwen3-32B", system="gb200", gemm="", moe="", tp=2, dp=0, moe_tp=0, moe_ep=0))
    assert (dense["tp"], dense["ep"]) == (2, 1)
    assert fields(row("r", "deepseek-ai/DeepSeek-R1", system="gb200", tp=72, moe_tp=72)) == "layout"


def test_the_fits_reader_never_takes_a_blackwell_row(tmp_path):
    path = write(tmp_path, row("b", "meta-llama/Llama-3.1-70B"), row("h", "meta-llama/Llama-3.1-70B",
                                                                        system="h200_sxm", gemm="fp8", moe="fp8"))
    rows, left_out = read_serving_rows(path)  # what fit-engine --serving reads
    assert [r.id for r in rows] == ["h"] and left_out == 1


def test_a_blackwell_decode_step_reads_every_weight_at_the_datasheet_bandwidth_at_best(tmp_path):
    path = write(tmp_path, row("b", "meta-llama/Llama-3.1-70B", batch=1))
    rows = read_serving_table(path, read=read_blackwell_row).rows
    tpot = predict(rows, load_engine("tensorrt-llm-1"))["tpot_after"][0]
    assert tpot >= LLAMA_70B_READ * 0.5625 / 7.7e12  # B200: 7.7 TB/s (HGX B200 table), NVFP4 4.5 bits a weight


def test_the_score_counts_rows_by_reason_and_prices_each_backend_with_its_hopper_profile(tmp_path):
    path = write(tmp_path, row("t", "meta-llama/Llama-3.1-70B"), row("v", "meta-llama/Llama-3.1-70B", backend="vllm"),
                 row("h", "meta-llama/Llama-3.1-70B", system="h100_sxm", gemm="fp8", moe="fp8", tp=2, moe_tp=2),
                 row("d", "meta-llama/Llama-3.1-70B", mode="disagg"), row("m", "mistralai/Mistral-7B"))
    result = score_transfer(path)
    assert result["rows"] == 2
    assert result["left_out"] == {"model": 1, "device": 0, "format": 0, "layout": 0, "launch": 0, "copy": 0, "work": 0,
                                  FITTED: 1, "disaggregated": 1}
    assert {b: r["engine"] for b, r in result["backends"].items()} == {"trtllm": "tensorrt-llm-1", "vllm": "vllm"}
    rows = read_serving_table(path, read=read_blackwell_row).rows
    for backend, r in result["backends"].items():
        mine = [x for x in rows if x.backend == backend]
        tpot = predict(mine, load_engine(HOPPER_PROFILES[backend]))["tpot_after"][0]
        assert r["systems"]["b200"]["tpot"]["bias"] == pytest.approx(tpot / 0.020 - 1)


def test_transfer_needs_the_serving_file(capsys):
    assert main(["accuracy", "--transfer"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--serving" in err


def test_accuracy_transfer_prints_the_scores_and_the_reasons(tmp_path, capsys):
    path = write(tmp_path, row("t", "meta-llama/Llama-3.1-70B"))
    assert main(["accuracy", "--serving", str(path), "--transfer", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == 1 and report["backends"]["trtllm"]["systems"]["all"]["ttft"]["n"] == 1


SILICON = Path(os.environ.get("AIC_SILICON_SAMPLE", "/nonexistent"))


@pytest.mark.skipif(not SILICON.is_file(), reason="AIC_SILICON_SAMPLE: the path of aiconfigurator-core 0.12.0's "
                                                  "systems/silicon_sample.csv (README, Transfer to Blackwell)")
def test_the_packages_blackwell_rows_are_read_but_for_multi_node_layouts():
    read = read_serving_table(SILICON, read=read_blackwell_row)
    # 116 of them claimed 16 or 64 GPUs before the ids' layout was read (serving_rows: `_tp4_ep4_`, `_tp8_ep8_`
    # DeepSeek-R1, Qwen3.5 and gpt-oss rows of source_file=2026-04-06.csv, their columns multiplied by the EP width)
    # 279 ran speculative decoding (MTP, EAGLE) by their launch scripts (data/published/serving-launches.csv), 121 of
    # them copies of the others; 495 in all repeat a measurement another row holds (fitting.copies: InferenceX runs in
    # more than one dump, the gap-analysis files' copies of them)
    assert len(read.rows) == 1128 and read.left_out["layout"] == 245 and read.left_out[FITTED] == 1593
    assert read.left_out["launch"] == 158 and read.left_out["copy"] == 495
