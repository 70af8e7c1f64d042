"""The public rows measured under load (data/published/README.md, "More public rows"): each read under its engine's
profile or left out by reason, and priced by the load model within the physics nobody here wrote: Little's law
for a server row's throughput, the datasheet compute roof for an offline one."""
import math

import numpy as np
import pytest

from roofline.cli import main
from roofline.fitting.published_load import (LOAD_FILES, SHAREGPT_PROMPT, engine_for, predict, read_load_rows,
                                             scores)
from roofline.hardware import load_hardware

HEADER = ("source_url_or_repo_path,framework,model,gpu,num_gpus,dtype_weights,dtype_kv,batch,input_len,output_len,"
          "metric,value,unit,notes")
# Llama-3.1-8B's parameters, the safetensors total of meta-llama/Llama-3.1-8B (its model card: 8.03B)
LLAMA_8B_PARAMETERS = 8.03e9


def write(tmp_path, *lines):
    path = tmp_path / "rows.csv"
    path.write_text("\n".join((HEADER,) + lines) + "\n")
    return path


def line(framework="vLLM 0.6.0", gpu="H100 80GB HBM3 (SXM)", batch="max", prompt="1000", gen="1000",
         metric="offline_output_tokens_per_s_per_gpu", value="5000", unit="tokens/s", weights="fp8", tp=1):
    return f"src,{framework},llama-3.1-8b,{gpu},{tp},{weights},unstated,{batch},{prompt},{gen},{metric},{value},{unit},n"


@pytest.mark.parametrize("framework, engine", [
    ("TensorRT-LLM 0.17.0 (C++ engine, trtllm-bench)", "tensorrt-llm"),
    ("TensorRT-LLM 1.0 (PyTorch backend, trtllm-bench)", "tensorrt-llm-1"),
    ("TensorRT-LLM (NVIDIA MLPerf v4.1 harness)", "tensorrt-llm"),  # August 2024: before 1.0
    ("SGLang 0.3.0", "sglang"), ("vLLM 0.6.0 (--num-scheduler-steps 10)", "vllm"),
    ("vLLM (AMD MLPerf v4.1 harness, ROCm)", "vllm"), ("llama.cpp", None)])
def test_a_rows_framework_and_version_choose_its_engine_profile(framework, engine):
    assert engine_for(framework) == engine


def test_the_shipped_files_are_read_or_left_out_by_reason():
    counts = {path.name: read_load_rows(path) for path in LOAD_FILES}
    assert len(counts["trtllm-perf-overview.csv"].rows) == 113
    assert len(counts["sglang-benchmarks.csv"].rows) == 20
    # MLPerf's logs state no prompt length (OpenOrca's mean is not in them): every row left out, by that reason
    assert not counts["mlperf.csv"].rows and counts["mlperf.csv"].left_out["length"] == 12
    engines = {r.engine for r in counts["trtllm-perf-overview.csv"].rows}
    assert engines == {"tensorrt-llm", "tensorrt-llm-1"}
    b200 = [r for r in counts["trtllm-perf-overview.csv"].rows if r.hardware == "b200"]
    assert b200 and all(r.precision.weight_bytes == 0.5625 for r in b200)  # NVFP4: 4 bits + an fp8 scale per 16
    assert all(r.precision.weight_matmul_dtype == "nvfp4" for r in b200)  # W4A4 on the B200's FP4 tensor cores


def test_nvfp4_weights_run_w4a4_where_the_device_has_fp4_tensor_cores_and_weight_only_where_not(tmp_path):
    path = write(tmp_path, line(weights="nvfp4", gpu="B200"), line(weights="nvfp4", gpu="H100 SXM"))
    b200, h100 = (r.precision for r in read_load_rows(path).rows)
    assert (b200.activations, b200.activation_bytes) == ("nvfp4", 0.5625)
    assert (h100.activations, h100.weight_matmul_dtype) == ("bf16", "bf16")  # Hopper: dequantized, no fallback


def test_sharegpt_rows_take_the_datasets_mean_prompt_and_others_unstated_are_left_out(tmp_path):
    path = write(tmp_path, line(prompt="~prompt (unstated; ShareGPT)"), line(prompt="~prompt (unstated; OpenOrca)"))
    read = read_load_rows(path)
    assert [r.prompt for r in read.rows] == [SHAREGPT_PROMPT] and read.left_out["length"] == 1


def test_a_server_rows_throughput_is_its_rate_times_output_per_gpu_and_nan_past_saturation(tmp_path):
    path = write(tmp_path, line(batch="poisson 2/s", metric="server_output_tokens_per_s_per_gpu", tp=2),
                 line(batch="poisson 5000/s", metric="server_output_tokens_per_s_per_gpu"),
                 line(batch="poisson 2/s", metric="server_median_tpot", value="20", unit="ms"))
    rows = read_load_rows(path).rows
    predicted = predict(rows)
    assert predicted[0] == pytest.approx(2 * 1000 / 2)  # Little: what arrives leaves, over 2 GPUs
    assert math.isnan(predicted[1])  # 5000 requests/s of 2000 tokens saturate one H100: no number
    assert 0 < predicted[2] < 1  # seconds
    report = scores(rows, predicted)
    assert report["vllm: server throughput"]["n"] == 2 and report["vllm: server throughput"]["priced"] == 1


def test_an_offline_prediction_stays_under_the_datasheet_compute_roof():
    rows = [r for r in read_load_rows(LOAD_FILES[0]).rows if r.model == "llama-3.1-8b" and r.tp == 1]
    predicted = predict(rows)
    for row, tokens_per_s in zip(rows, predicted):
        # every prompt and output token multiplies each weight once: 2 FLOPs a parameter, at the fp8 or fp16 peak
        flops = tokens_per_s * (row.prompt + row.gen) / row.gen * 2 * LLAMA_8B_PARAMETERS
        # (the prefill-heavy rows reach 0.58 of it: a prediction doubled by a slip breaks it)
        assert flops <= load_hardware(row.hardware).peak(row.precision.weight_matmul_dtype)
    assert np.all(np.isfinite(predicted))


def test_bad_rows_are_refused_naming_the_file_line_and_fix(tmp_path, capsys):
    path = write(tmp_path, line(metric="median_latency"))
    assert main(["accuracy", str(path), "--load"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "line 2" in err and "'median_latency'" in err
    path = write(tmp_path, line(batch="poisson fast"))
    assert main(["accuracy", str(path), "--load"]) == 2
    assert "'batch'" in capsys.readouterr().err


def test_accuracy_load_prints_a_section_for_the_file(tmp_path, capsys):
    path = write(tmp_path, line(), line(prompt="~prompt (unstated; OpenOrca)"))
    assert main(["accuracy", str(path), "--load", "--json"]) == 0
    import json
    report = json.loads(capsys.readouterr().out)["rows.csv"]
    assert report["rows"] == 1 and report["left_out"]["length"] == 1
    assert report["scores"]["vllm: offline throughput"]["priced"] == 1
