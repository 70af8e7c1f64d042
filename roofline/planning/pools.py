"""Disaggregated candidates for `plan`: a prefill pool sized by TTFT and a decode pool sized by TPOT, from the
search's own Deployments (roofline.planning.search.Core: one per layout, priced once).

For each device, weight, KV format and engine, every pair (prefill layout, decode layout) of pp = 1 layouts is a
candidate (roofline.serving.disaggregated prices it). The pools are sized apart, each vectorized over its worker
count once per layout and the pairs then combined:
  decode  y = the fewest decode workers whose steady state at rate / y meets TPOT (decode steps alone, the
          running-sequence cap the layout's capacity batch, as in the aggregated search);
  prefill x = the fewest prefill workers whose TTFT at rate / x (M/D/1 queueing and the prompt's prefill step)
          plus the KV transfer meets TTFT; the transfer over NVLink when x tp_p + y tp_d GPUs fit
          one node (the hardware's gpus_per_node), else over the network.
GPUs = x tp_p + y tp_d; cost per million output tokens as for every row. A pair wins only where it is cheaper
under the same targets: it is ranked with the aggregated rows by the same objective.
Left out: a percentile check (the simulator serves one aggregated pool: these rows stay 'unsimulated', their
targets met by the means), pipeline stages within a pool, and mixed devices between pools.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..bounds import BOUNDS
from ..serving.disaggregated import DecodePool, PrefillPool, kv_transfer_s, transfer_link

MOST_WORKERS = 64  # worker counts tried a pool


def _counts(rate: float, alone_s: float) -> np.ndarray:
    """Worker counts to try: up to 4x the busy-time estimate (rate x a lone request's seconds) + 16."""
    top = min(MOST_WORKERS, 4 * math.ceil(rate * max(alone_s, 1e-9)) + 16)
    return np.arange(1, top + 1)


def prefill_ttft(core, work) -> tuple[np.ndarray, np.ndarray, float]:
    """(worker counts, TTFT before the transfer at rate / count, NaN where it saturates; the requests/s one worker
    holds) of a prefill layout."""
    pool = PrefillPool(core.d, max(int(round(work.prompt_mean)), 1))
    counts = _counts(work.rate, pool.service_s)
    return counts, pool.at_rate(work.rate / counts)["ttft_s"], pool.saturation()


def decode_tpot(core, work, chunk) -> tuple[np.ndarray, np.ndarray, int]:
    """(worker counts, TPOT at rate / count, the running-sequence cap) of a decode layout."""
    cap = min(core.best_batch, core.max_batch[chunk])
    if cap < 1:
        return np.arange(1, 2), np.array([np.nan]), 0
    prompt, gen = max(int(round(work.prompt_mean)), 1), max(int(round(work.gen_mean)), 1)
    pool = DecodePool(core.d, prompt, gen, cap, batches=core.grid, step_s=core.tpot_s)
    counts = _counts(work.rate, gen * float(pool.step(cap)) / cap)
    return counts, pool.at_rate(work.rate / counts)["tpot_s"], cap


def _fewest(counts: np.ndarray, values: np.ndarray, target: float) -> int | None:
    meets = np.flatnonzero(values <= target)
    return int(counts[meets[0]]) if meets.size else None


def disaggregated_rows(cores: dict, work, targets, prices: dict, chunk, max_gpus: int | None) -> list[dict]:
    """One row per (prefill layout, decode layout) pair within each (hardware, weights, kv, engine) group of
    `cores` ({(hardware id, tp, pp, ep, weights, kv, engine): Core}); priced pools only."""
    groups: dict = {}
    for (h, t, p, e, w, k, eng), c in cores.items():
        if p == 1 and c.d is not None and c.max_batch is not None and h in prices and c.max_batch[chunk] >= 1:
            groups.setdefault((h, w, k, eng), []).append(((t, e), c))
    rows = []
    for (h, w, k, eng), layouts in groups.items():
        prefill = {key: prefill_ttft(c, work) for key, c in layouts if c.ttft_s <= targets.ttft_s}
        decode = {key: decode_tpot(c, work, chunk) for key, c in layouts}
        cores_of = dict(layouts)
        for pkey, dkey in itertools.product(prefill, decode):  # (tp, ep) of the prefill and the decode layout
            pc, dc = cores_of[pkey], cores_of[dkey]
            base = {"mode": "disaggregated", "hardware": h, "tp": dkey[0], "pp": 1, "ep": dkey[1], "weights": w,
                    "experts": dc.d.precision.experts or w, "kv": k, "engine": eng,
                    "prefill_tp": pkey[0], "prefill_ep": pkey[1], "prefill_chunk": chunk, "max_batch_cap": None,
                    "feasible": False, "deployment": dc.d, "prefill_deployment": pc.d}
            rows.append(_pair(base, pc, dc, prefill[pkey], *decode[dkey], work, targets, prices[h], max_gpus))
    return rows


def _pair(row, pc, dc, prefill, dcounts, tpots, cap, work, targets, price, max_gpus) -> dict:
    """A pair's pools sized (decode by TPOT, prefill by TTFT with the transfer), or the reason it fails."""
    pcounts, ttfts, prefill_saturation = prefill
    decode_workers = _fewest(dcounts, tpots, targets.tpot_s)
    row.update(capacity_batch=cap, max_batch=dc.max_batch[row["prefill_chunk"]], ttft_alone_s=pc.ttft_s,
               prefill_max_batch=pc.max_batch[row["prefill_chunk"]])
    if decode_workers is None:
        best = np.nanmin(tpots) if np.isfinite(tpots).any() else math.nan
        row.update(tpot_s=best, rejected=f"TPOT: decode pool of tp={row['tp']} saturates at every worker count tried"
                   if best != best else f"TPOT: decode pool {best * 1e3:.1f} ms > {targets.tpot_s * 1e3:g} ms at "
                   f"{int(dcounts[-1])} workers of tp={row['tp']}")
        return row
    decode_gpus = decode_workers * dc.d.gpus_per_replica
    per_prefill = pc.d.gpus_per_replica
    handoff = pc.d.engine.disagg_handoff_s  # the engine's, once a request, beside the KV bytes
    ttfts = ttfts + handoff
    try:  # the link as if one prefill worker joined the decode pool; past one node, again over the network
        link = transfer_link(pc.d.hardware, decode_gpus + per_prefill)
        transfer = kv_transfer_s(pc.d, dc.d, work.prompt_mean, link)
        prefill_workers = _fewest(pcounts, ttfts + transfer, targets.ttft_s)
        if prefill_workers is not None and transfer_link(pc.d.hardware, prefill_workers * per_prefill
                                                         + decode_gpus).name != link.name:
            link = transfer_link(pc.d.hardware, prefill_workers * per_prefill + decode_gpus)
            transfer = kv_transfer_s(pc.d, dc.d, work.prompt_mean, link)
            prefill_workers = _fewest(pcounts, ttfts + transfer, targets.ttft_s)
    except ValueError as err:
        row["rejected"] = f"layout: {err}"
        return row
    if prefill_workers is None:
        best = np.nanmin(ttfts) if np.isfinite(ttfts).any() else math.nan
        row["rejected"] = (f"TTFT: prefill pool {(best + transfer) * 1e3:.1f} ms (KV transfer {transfer * 1e3:.2f} ms, "
                           f"handoff {handoff * 1e3:.0f} ms) "
                           f"> {targets.ttft_s * 1e3:g} ms at {int(pcounts[-1])} workers of tp={row['prefill_tp']}"
                           if best == best else f"TTFT: prefill pool of tp={row['prefill_tp']} saturates")
        return row
    gpus = prefill_workers * per_prefill + decode_gpus
    ttft = float(ttfts[prefill_workers - 1] + transfer)
    tpot = float(tpots[decode_workers - 1])
    e2e = ttft + (work.gen_mean - 1) * tpot
    rate_per_decoder = work.rate / decode_workers
    row.update(prefill_workers=prefill_workers, decode_workers=decode_workers, replicas=decode_workers, gpus=gpus,
               ttft_s=ttft, tpot_s=tpot, e2e_s=e2e, kv_transfer_s=transfer, link=link.name,
               batch=rate_per_decoder * (work.gen_mean - 1) * tpot, tpot_at_capacity_s=float(np.interp(
                   cap, dc.grid, dc.tpot_s)))
    if targets.e2e_s is not None and e2e > targets.e2e_s:
        row["rejected"] = f"E2E: {e2e:.2f} s > {targets.e2e_s:g} s"
        return row
    if max_gpus is not None and gpus > max_gpus:
        row["rejected"] = (f"GPUs: {gpus} needed ({prefill_workers} prefill x {per_prefill} + {decode_workers} "
                           f"decode x {dc.d.gpus_per_replica}) > {max_gpus}")
        return row
    tokens_per_s = work.rate * work.gen_mean
    decode_capacity = cap / (work.gen_mean * row["tpot_at_capacity_s"]) * decode_workers  # requests/s
    row.update(feasible=True, rejected="", usd_per_hour=gpus * price,
               usd_per_million_tokens=gpus * price / (tokens_per_s * 3600) * 1e6,
               tokens_per_s_per_gpu=tokens_per_s / gpus,
               capacity_tokens_per_s_per_gpu=min(decode_capacity, prefill_saturation * prefill_workers)
               * work.gen_mean / gpus,
               ttft_headroom=1 - ttft / targets.ttft_s, tpot_headroom=1 - tpot / targets.tpot_s, binding="TPOT"
               if cap < dc.max_batch[row["prefill_chunk"]] else "memory", simulated=False,
               decode_bound=BOUNDS[int(dc.bound[min(int(np.searchsorted(dc.grid, cap)), len(dc.grid) - 1)])])
    row.update(_ideal(pc, dc, row, work, transfer, prefill_workers, decode_workers))
    return row


def _ideal(pc, dc, row, work, transfer, prefill_workers, decode_workers) -> dict:
    """The same pools, load and transfer under the ideal engine: the bound beside the row."""
    if pc.ideal is None or dc.ideal is None:
        return {}
    prompt, gen = max(int(round(work.prompt_mean)), 1), max(int(round(work.gen_mean)), 1)
    ttft = PrefillPool(pc.ideal, prompt).at_rate([work.rate / prefill_workers])["ttft_s"][0] + transfer
    tpot = DecodePool(dc.ideal, prompt, gen, int(row["capacity_batch"])).at_rate([work.rate / decode_workers])
    return {"ideal_ttft_s": float(ttft), "ideal_tpot_s": float(tpot["tpot_s"][0])}



def explain_pools(row, work, targets) -> list[str]:
    """How the cheapest disaggregated candidate's pools were sized: decode by TPOT, prefill by TTFT less the KV."""
    kv = float(row["prefill_deployment"].compiled.kv_cache(1.0, float(work.prompt_mean),
                                                           row["prefill_deployment"].precision.kv_bytes))
    per_worker = work.rate / row["decode_workers"]
    handoff = row["prefill_deployment"].engine.disagg_handoff_s
    return [
        "disaggregated pools (roofline.planning.pools), the cheapest pair:",
        f"  decode  {int(row['decode_workers'])} x tp={int(row['tp'])}: the fewest workers whose TPOT at "
        f"{per_worker:.3g} requests/s each meets {targets.tpot_s * 1e3:g} ms: TPOT = t(n + 1), n = rate x (G - 1) x "
        f"TPOT = {row['batch']:.1f} decoders, TPOT {row['tpot_s'] * 1e3:.2f} ms (cap {int(row['capacity_batch'])} "
        "sequences, decode steps alone)",
        f"  prefill {int(row['prefill_workers'])} x tp={int(row['prefill_tp'])}: the fewest workers whose TTFT at "
        f"{work.rate / row['prefill_workers']:.3g} requests/s each plus the handoff and the KV transfer meets "
        f"{targets.ttft_s * 1e3:g} ms: {(row['ttft_s'] - row['kv_transfer_s'] - handoff) * 1e3:.1f} ms queueing and "
        f"prefill (alone {row['ttft_alone_s'] * 1e3:.1f} ms) + {handoff * 1e3:.0f} ms handoff (the engine's "
        f"disagg_handoff_s) + {row['kv_transfer_s'] * 1e3:.2f} ms KV = "
        f"{row['ttft_s'] * 1e3:.1f} ms",
        f"  KV transfer: {kv / 1e6:.1f} MB a prefill GPU holds for a {work.prompt_mean:.0f}-token prompt, over "
        f"{row['link']} (each GPU its own port; latency as sourced, 0 where the hardware file has none)",
        f"  GPUs {int(row['prefill_workers'])} x {int(row['prefill_tp'])} + {int(row['decode_workers'])} x "
        f"{int(row['tp'] * row['ep'])} = {int(row['gpus'])}; the percentile check simulates one worker of each "
        "pool (roofline.planning.frontier)",
    ]
