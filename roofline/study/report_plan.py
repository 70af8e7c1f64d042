"""The report's plan section, when latency targets are given: `roofline.plan` over the report's devices.

The candidates are the report's devices (those without a price are listed as rejected for it), tensor
parallelism 1, 2, 4, 8, the report's weight and KV formats and its engine; the workload is the report's
prompt and generation lengths at the given request rate. The section holds the one-sentence verdict, the
cheapest deployments, the count rejected by each reason and, for the cheapest on each device, the closed
forms behind its batch (roofline.planning.forms).
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import sympy as sp

from ..planning.plan import DEFAULT_ENGINE, Targets, Workload, candidates_as_data, plan, verdict
from ..planning.forms import explain
from ..views.fmt import fmt_number, fmt_seconds

SHOWN = {"hardware": "hardware", "tp": "tp", "weights": "weights", "kv": "KV", "engine": "engine",
         "batch": "in flight", "capacity_batch": "capacity batch",
         "binding": "batch set by", "replicas": "replicas", "gpus": "GPUs",
         "usd_per_million_tokens": "$ / M output tokens", "ttft_s": "TTFT (s)", "tpot_s": "TPOT (s)",
         "ideal_ttft_s": "ideal TTFT (s)", "ideal_tpot_s": "ideal TPOT (s)",
         "ttft_headroom": "TTFT headroom", "tpot_headroom": "TPOT headroom", "decode_bound": "decode bound"}
POOLS = {"mode": "mode", "prefill_tp": "prefill tp", "prefill_workers": "prefill workers",
         "decode_workers": "decode workers"}  # shown where a disaggregated pair (two pools) is among the kept
TOP = 8


@dataclass(frozen=True)
class PlanSection:
    work: Workload
    targets: Targets
    frame: pd.DataFrame  # every candidate (roofline.plan's frame)
    sentence: str
    forms: list  # (row, largest batch Crossover, TP break-even Crossover) per device's cheapest


def _engine(name: str | None) -> str:
    """The report's engine, or the default fitted one when the report prices the ideal bound alone."""
    return DEFAULT_ENGINE if name in (None, "ideal") else name


def plan_section(config, devices, precision, inputs: dict, rate: float, ttft_s: float, tpot_s: float,
                 e2e_s: float | None = None) -> PlanSection:
    work, targets = Workload(rate, inputs["prompt"], inputs["gen"]), Targets(ttft_s, tpot_s, e2e_s)
    frame = plan(config, work, targets, tuple(devices), (1, 2, 4, 8), (precision.weights,),
                 (_engine(inputs.get("engine")),), kv=(precision.kv,), experts=precision.experts)
    aggregated = frame[frame["mode"] == "aggregated"]  # B* and the TP break-even are one pool's forms
    found = (explain(aggregated, work, targets, len(devices))
             if aggregated["feasible"].any() else [])
    return PlanSection(work, targets, frame, verdict(frame, targets, config.name), found)


def _equation(expr) -> str:
    return f"{sp.sstr(expr.lhs)} = {sp.sstr(expr.rhs)}" if isinstance(expr, sp.Eq) else sp.sstr(expr)


def plan_blocks(section: PlanSection | None, number: int) -> list:
    if section is None:
        return []
    t, w = section.targets, section.work
    e2e = "" if t.e2e_s is None else f", E2E {fmt_seconds(t.e2e_s)}"
    blocks = [("h", 2, f"{number}. Plan: what serves {w.rate:g} requests/s"),
              ("p", (f"roofline.plan over these devices at tp 1, 2, 4, 8: each candidate must fit in memory, meet "
                     f"TTFT {fmt_seconds(t.ttft_s)} and TPOT {fmt_seconds(t.tpot_s)}{e2e} (means under load: "
                     "queueing and prefill sharing steps, roofline.serving.load) with the fewest replicas that do, "
                     "the running batch capped at the largest meeting TPOT, and every pair of those layouts as a "
                     "prefill pool and a decode pool (disaggregated; roofline.planning.pools); ranked by $ per "
                     "million output tokens from data/prices.yaml (each price with its source).")),
              ("p", section.sentence)]
    kept = section.frame[section.frame["feasible"]].head(TOP)
    if len(kept):
        shown = {**POOLS, **SHOWN} if (kept["mode"] == "disaggregated").any() else SHOWN
        table = kept[list(shown)].rename(columns=shown)
        blocks.append(("table", table.map(lambda v: ("n/a" if v != v else f"{v:.4g}") if isinstance(v, float) else str(v))))
    reasons = section.frame.loc[~section.frame["feasible"], "rejected"]
    if len(reasons):
        blocks.append(("list", [f"rejected by {r}: {n}" for r, n in reasons.str.split(":").str[0].value_counts().items()]
                       + [f"e.g. {reasons.iloc[0]}"]))
    for row, batch, tp in section.forms:
        given = ", ".join(f"{k} = {v:.4g}" for k, v in batch.given.items())
        blocks.append(("list", [
            f"{row['hardware']} tp={int(row['tp'])}: largest batch within TPOT {_equation(batch.expression)} = "
            f"{fmt_number(batch.value, 6)} (with {given}{'; ' + batch.note if batch.note else ''}); capacity "
            f"batch {int(row['capacity_batch'])}, set by {row['binding']}",
            f"{row['hardware']}: TP break-even {_equation(tp.expression)} = {fmt_number(tp.value)} (past it a split saves more "
            f"memory time than its all-reduces cost; {tp.note})"]))
    return blocks


def plan_json(section: PlanSection | None) -> dict | None:
    if section is None:
        return None
    return {"rate": section.work.rate, "ttft_s": section.targets.ttft_s, "tpot_s": section.targets.tpot_s,
            "e2e_s": section.targets.e2e_s, "verdict": section.sentence, "candidates": candidates_as_data(section.frame),
            "forms": [{"hardware": row["hardware"], "largest_batch": batch.value,
                       "largest_batch_expression": _equation(batch.expression), "given": batch.given,
                       "tp_breakeven": tp.value, "tp_breakeven_expression": _equation(tp.expression)}
                      for row, batch, tp in section.forms]}
