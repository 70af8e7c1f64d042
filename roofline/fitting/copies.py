"""Measurements the silicon sample holds more than once: one copy each is priced, the others left out as "copy".

AIConfigurator's sample gathers several dumps, and InferenceX runs appear in more than one: SGLang's DeepSeek-R1 on H200
three times (source_file=2026-03-25.csv, 2026-04-06.csv and db-dump/2026-04-27), vLLM's MiniMax-M2.5 and gpt-oss-120b,
SGLang's GLM-5 and Qwen3.5-397B, TensorRT-LLM's DeepSeek-R1 twice; the *gap-analysis.csv files are InferenceX rows
again, rounded to 0.01 ms and with their parallel layout relabelled. Scored as they come, a run counts two or three
times in a median and a fit. Two rows are one measurement when they name the same model, backend, system, lengths and
concurrency (serving_rows.concurrency; the checkpoint may differ: the db-dump names DeepSeek-R1's rows DeepSeek-V3, its
architecture; the layout may differ: the gap-analysis copies relabel it) and their mean TTFT and mean TPOT agree within
COPY_MS. Two runs do not: the nearest distinct rows of a key differ by 0.058 ms (Hopper) and 0.050 ms (Blackwell),
8x COPY_MS or more (tests/test_copies.py). The copy kept is the one whose launch is traced (a `measured=` date:
roofline.fitting.launches), else the first in the file.
"""
from __future__ import annotations

from .launches import MEASURED
from .serving_rows import MODELS, concurrency

COPY_MS = 0.006  # the gap-analysis copies' rounding to 0.01 ms, and a margin


def _key(raw: dict) -> tuple:
    # the model, not the checkpoint's name: the db-dump copies of DeepSeek-R1's rows name DeepSeek-V3, its architecture
    model = MODELS.get(raw.get("model_path"), raw.get("model_path"))
    stated = ((raw.get(name) or "").strip() for name in ("mode", "backend", "system", "isl", "osl"))
    return (model, concurrency(raw), *stated)


def _ms(raw: dict, name: str) -> float | None:
    try:  # a value that is no number is the row reader's to report, by file, row and field
        return float(raw.get(name) or "")
    except ValueError:
        return None


def _same(a: dict, b: dict) -> bool:
    pairs = [(_ms(a, name), _ms(b, name)) for name in ("silicon_ttft_ms", "silicon_tpot_ms")]
    return all(x is not None and y is not None and abs(x - y) <= COPY_MS for x, y in pairs)


def copies(raws: list[dict]) -> set[str]:
    """The ids of the rows that repeat a measurement another row keeps (the module docstring)."""
    traced_first = sorted(range(len(raws)),
                          key=lambda i: not MEASURED.search(raws[i].get("silicon_data_source") or ""))
    kept: dict[tuple, list[dict]] = {}
    repeated = set()
    for i in traced_first:
        raw = raws[i]
        group = kept.setdefault(_key(raw), [])
        if any(_same(raw, other) for other in group):
            repeated.add(raw["id"])
        else:
            group.append(raw)
    return repeated
