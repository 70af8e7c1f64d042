"""A step that reads every routed expert (Options.experts_read 'all'): the bytes by hand, and the measured rows that
price so (serving_rows.EXPERTS_READ_WHOLE_SOURCES) against the rows themselves."""
import csv
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from roofline.deployment import Deployment
from roofline.model import DECODE, Options
from roofline.sharding import is_routed
from roofline.fitting.serving_rows import EXPERTS_READ_WHOLE_SOURCES, experts_read, source_file

SERVING_HOPPER = Path(__file__).resolve().parents[2] / "shared" / "published" / "serving-hopper.csv"
MOSTLY_DECODE = 500  # output tokens from which a request's steps are mostly decode, whatever the prompt's chunks


FLOPS, WEIGHTS = 0, 1  # Deployment.components' columns


def _routed(d: Deployment, batch: float, column: int) -> float:
    """The routed experts' FLOPs or weight bytes of one decode step (all layers), from the pricer's own counts."""
    compiled = d.phase(DECODE)
    counts = d.components(compiled, batch, 512.0)
    return sum(float(np.sum(c[column])) for name, c in zip(compiled.ops, counts) if is_routed(name))


def test_reading_every_expert_streams_all_e_experts_where_routing_touches_k():
    # Mixtral-8x7B: 32 layers, 8 experts of 3 x 4096 x 14336 bf16 weights, 2 a token. One token touches exactly 2.
    expert_bytes = 32 * 3 * 4096 * 14336 * 2
    routed = Deployment.of("mixtral-8x7b", "h100-sxm")
    whole = Deployment.of("mixtral-8x7b", "h100-sxm", options=Options(experts_read="all"))
    assert _routed(routed, 1.0, WEIGHTS) == pytest.approx(2 * expert_bytes, rel=1e-9)
    assert _routed(whole, 1.0, WEIGHTS) == pytest.approx(8 * expert_bytes, rel=1e-9)
    assert _routed(whole, 64.0, WEIGHTS) == pytest.approx(8 * expert_bytes, rel=1e-9)  # flat in the batch
    # the experts' FLOPs stay the tokens' (B k rows): a read, not a computation, of the untouched experts
    assert _routed(whole, 4.0, FLOPS) == pytest.approx(_routed(routed, 4.0, FLOPS))


def test_a_bad_experts_read_names_the_field():
    with pytest.raises(ValueError, match="experts_read"):
        Options(experts_read="some")


def _decode_tpot(path: Path) -> dict:
    """(backend, version, source, model, GPUs, attention tp) -> [(concurrency, TPOT ms)] of the aggregated rows whose
    requests are mostly decode (osl >= MOSTLY_DECODE); GPUs = moe_tp x moe_ep, the experts' span."""
    groups = defaultdict(list)
    with path.open(newline="") as handle:
        for raw in csv.DictReader(handle):
            if raw["mode"] != "agg" or int(raw["osl"]) < MOSTLY_DECODE or not raw["moe_ep_size"].strip():
                continue  # a dense model's rows state no experts' span
            gpus = int(float(raw["moe_tp_size"] or 1)) * int(float(raw["moe_ep_size"]))
            key = (raw["backend"], raw["backend_version"], source_file(raw), raw["model_path"], raw["system"], gpus,
                   int(float(raw["tp_size"])))
            groups[key].append((int(raw["batch_size"]), float(raw["silicon_tpot_ms"])))
    return groups


@pytest.mark.skipif(not SERVING_HOPPER.is_file(), reason="../shared/published/serving-hopper.csv not beside the repo")
def test_the_marked_source_decodes_flat_in_concurrency_where_its_own_engines_later_release_does_not():
    groups = _decode_tpot(SERVING_HOPPER)
    (backend, source), = EXPERTS_READ_WHOLE_SOURCES
    marked = {key: rows for key, rows in groups.items() if (key[0], key[2]) == (backend, source)}
    # vLLM 0.12.0's Qwen3-235B-A22B-FP8 on H200: on 2 GPUs (attention tp 1 or 2) C 6-20, where uniform routing of C x 8
    # choices touches 32% -> 73% of the 128 experts, TPOT stays within 15%, and the two attention layouts nearly agree
    two = [rows for key, rows in marked.items() if key[5] == 2 and len(rows) >= 4]
    assert len(two) == 2
    concurrency, tpot = np.concatenate([np.array(rows) for rows in two]).T
    assert concurrency.max() >= 3 * concurrency.min()
    assert tpot.max() / tpot.min() <= 1.15
    medians = [np.median(np.array(rows)[:, 1]) for rows in two]
    assert max(medians) / min(medians) <= 1.15  # data-parallel attention's dispatch and combine a layer: ~5 ms more
    # and on 4 GPUs at attention tp 4, C 14-48 (touched 59% -> 95%), within 10%
    four, = (np.array(rows) for key, rows in marked.items() if key[5] == 4 and key[6] == 4)
    assert four[:, 0].max() >= 3 * four[:, 0].min() and four[:, 1].max() / four[:, 1].min() <= 1.10
    # the same engine's later release on a MoE rises with the load as the touched experts do (vLLM 0.18.0,
    # MiniMax-M2.5 fp8 on 8 H200s, 1024 in and out: C 4 -> 128, 256 experts, 8 a token)
    with SERVING_HOPPER.open(newline="") as handle:
        later = np.array([(int(r["batch_size"]), float(r["silicon_tpot_ms"])) for r in csv.DictReader(handle)
                          if r["mode"] == "agg" and r["backend_version"] == "0.18.0" and "MiniMax" in r["model_path"]
                          and r["system"] == "h200_sxm" and r["isl"] == r["osl"] == "1024"])
    low, high = (later[later[:, 0] == c, 1].mean() for c in (later[:, 0].min(), later[:, 0].max()))
    assert later[:, 0].max() >= 16 * later[:, 0].min() and high >= 1.8 * low


def test_only_the_marked_source_reads_every_expert():
    assert experts_read({"backend": "vllm", "silicon_data_source": "source_file=Qwen_Qwen3-235B-A22B-FP8.csv; "
                         "silicon_concurrency=8"}) == "all"
    assert experts_read({"backend": "sglang", "silicon_data_source": "source_file=Qwen_Qwen3-235B-A22B-FP8.csv"}) == "routed"
    assert experts_read({"backend": "vllm", "silicon_data_source": "source_file=2026-04-06.csv"}) == "routed"
