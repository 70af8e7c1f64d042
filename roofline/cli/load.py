"""`roofline analyze --rate R` / `--concurrency C`: the deployment as a continuous-batching server under load.

Without either flag `analyze` prices an offline batch whose requests arrive together (its TTFT is the
whole batch's prefill, `prefill_batch_s`). With one, each row is one load: TTFT (arrival to first token
under that load), TPOT (mean time between a running request's tokens), E2E, in flight, goodput, and the
rate where the server saturates (roofline.serving.load). A rate beyond it prints "saturated: the deployment
serves at most X requests/s" in place of latencies.
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from ..kv_memory import ON_DEMAND
from ..scheduler import MIXED, PREFILL_FIRST
from ..serving.load import Policy, at_load, kv_sequences, LoadModel
from ..views.fmt import fmt_count, fmt_seconds, plain
from . import args as parse

DEFAULT_MAX_NUM_SEQS = 256  # vLLM's max_num_seqs default (vllm/config: SchedulerConfig); TensorRT-LLM max_batch_size
STEPS = {MIXED: "decode + prefill chunks", PREFILL_FIRST: "prompt tokens in prefill steps of their own, first"}
TAKEN_ON_DEMAND = ", taken on demand at prompt + half the output each"  # roofline.kv_memory's admission
DEFINITIONS = {
    "ttft_s": "arrival to first token under the stated load: waiting for the step in progress and for the token "
              "budget, then the prompt's prefill chunks riding in mixed steps, plus the engine's per-request cost and "
              "the request's and its first chunk's turns through the server's front end, shared with the other streams",
    "tpot_s": "mean time between a running request's tokens under the stated load (its steps carry the others' "
              "prefill chunks)",
    "e2e_s": "TTFT + (gen - 1) x TPOT",
    "ttft_alone_s": "TTFT of a lone request on an idle server (its prompt's chunks, no queue)",
    "ttft_batch_wait_s": "with --batch-wait: the steps a prompt is held for others to run beside it",
    "ttft_first_wave_s": "with --requests: what the run's first wave (C requests sent together at t = 0) adds to its "
                         "mean TTFT over the steady state's",
}


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", metavar="R,R,...", default=None,
                        help="open-loop arrival rates, requests/s: the server under load (TTFT, TPOT, goodput)")
    parser.add_argument("--concurrency", metavar="C,C,...", default=None,
                        help="closed loop: C requests in flight, a new one as one ends (how serving benchmarks run)")
    parser.add_argument("--requests", metavar="N", default=None,
                        help="with --concurrency: the requests a benchmark run sends (e.g. 10 x C); TTFT is then the "
                             "run's mean, its first wave (C requests sent together at t = 0) included")
    parser.add_argument("--token-budget", metavar="N", default=None,
                        help="tokens a step carries, decode + prefill chunks (vLLM max_num_batched_tokens, TensorRT-LLM "
                             "max_num_tokens; default: the --prefill-chunk value)")
    parser.add_argument("--max-num-seqs", metavar="N", default=str(DEFAULT_MAX_NUM_SEQS),
                        help="running sequences at most (vLLM max_num_seqs; default %(default)s)")
    parser.add_argument("--block-size", metavar="N", default=None,
                        help="KV block, tokens: the pool holds whole blocks (default: the engine's; vLLM 16, "
                             "TensorRT-LLM 32)")
    parser.add_argument("--batch-wait", metavar="T,R", default=None,
                        help="TensorRT-LLM's batch wait: prompts held up to T steps, or until their tokens and the "
                             "decoders' reach R of the token budget, to run together (batch_wait_timeout_iters, "
                             "batch_wait_max_tokens_ratio; default off)")
    parser.add_argument("--explain", action="store_true", help="with --rate: the closed forms with their numbers")


def under_load(args) -> bool:
    return args.rate is not None or args.concurrency is not None


def policy_of(args, d, prompt: int, gen: int, default_budget) -> tuple[Policy, int]:
    budget = parse.number(args.token_budget if args.token_budget is not None else default_budget or 8192,
                          "--token-budget", whole=True, example="8192")
    max_seqs = parse.number(args.max_num_seqs, "--max-num-seqs", whole=True, example="256")
    block = (d.engine.memory.block_tokens if args.block_size is None
             else parse.number(args.block_size, "--block-size", whole=True, example="16 (vLLM's)"))
    if budget <= max_seqs:
        raise ValueError(f"--token-budget: {budget} tokens cannot carry one decode batch of --max-num-seqs {max_seqs} "
                         f"plus a prefill chunk; fix: a budget above {max_seqs}, or fewer --max-num-seqs")
    pool = kv_sequences(d, prompt, gen, block, budget)
    if pool < 1:
        raise ValueError(f"--prompt, --gen: not one sequence of {prompt + gen} tokens fits beside the weights on "
                         f"{d.hardware.id!r}; fix: more --tp, a smaller model or shorter sequences")
    steps, ratio = 0, 0.0
    if args.batch_wait is not None:
        parts = str(args.batch_wait).split(",")
        if len(parts) != 2:
            raise ValueError(f"--batch-wait: expected T,R (steps, a share of the budget), got {args.batch_wait!r}; "
                             "fix: e.g. --batch-wait 20,0.9")
        steps = parse.number(parts[0], "--batch-wait", whole=True, example="20,0.9")
        ratio = parse.number(parts[1], "--batch-wait", high=1.0, example="20,0.9")
    return Policy(budget, max_seqs, pool, batch_wait_steps=steps, batch_wait_ratio=ratio), block


def run_load(args, analysis, prompt: int, gen: int) -> int:
    d = analysis.deployment
    policy, block = policy_of(args, d, prompt, gen, analysis.prefill_chunk)
    if args.rate is not None and args.concurrency is not None:
        raise ValueError("--rate, --concurrency: give one (open loop or closed loop)")
    rate = None if args.rate is None else np.array(parse.numbers(args.rate, "--rate", example="2,5,10"))
    concurrency = None if args.concurrency is None else np.array(
        parse.numbers(args.concurrency, "--concurrency", low=1, inclusive=True, example="8,32,64"))
    if args.requests is not None and concurrency is None:
        raise ValueError("--requests: a run's request count belongs to a closed loop; fix: give --concurrency too")
    requests = None if args.requests is None else parse.number(args.requests, "--requests", whole=True, example="320")
    if requests is not None and requests < concurrency.max():
        raise ValueError(f"--requests: a run sends at least its concurrency's requests (its first wave), got {requests} "
                         f"for --concurrency {concurrency.max():g}; fix: e.g. {10 * int(concurrency.max())} (10 x C)")
    out = at_load(d, prompt, gen, rate, concurrency, policy, requests)
    rows = records(analysis, out, policy, block, prompt, gen)
    if args.json:
        print(json.dumps(rows, indent=2, allow_nan=False))
        return 0
    print(render(analysis, rows, policy))
    if args.explain and rate is not None:
        print("\n" + "\n".join(explain_lines(LoadModel(d, prompt, gen, policy).terms(float(rate[0]) / d.replicas))))
    return 0


def saturated_line(rate: float) -> str:
    return f"saturated: the deployment serves at most {rate:.4g} requests/s"


def records(analysis, out: dict, policy: Policy, block: int, prompt: int, gen: int) -> list[dict]:
    d = analysis.deployment
    keys = ("rate", "ttft_s", "tpot_s", "e2e_s", "in_flight", "tpot_inflation", "ttft_queue_s", "ttft_front_end_s",
            "ttft_prefill_s", "ttft_batch_wait_s",
            "decode_step_s", "mixed_step_s", "goodput_tokens_per_s", "goodput_requests_per_s")
    rows = []
    for i in range(len(out["rate"])):
        row = {"model": d.config.name, "hardware": d.hardware.id, "engine": d.engine.name, "prompt_len": prompt,
               "gen_len": gen, "load": "closed" if "concurrency" in out else "open",
               "concurrency": float(out["concurrency"][i]) if "concurrency" in out else None,
               "queued": float(out["queued"][i]) if "queued" in out else 0.0,
               "requests": float(out["requests"][i]) if "requests" in out else None,
               "ttft_first_wave_s": _wave(out, i) if "ttft_first_wave_s" in out else None,
               **{k: plain(float(out[k][i])) for k in keys}, "saturated": bool(out["saturated"][i]),
               "saturation_rate": out["saturation_rate"], "ttft_alone_s": out["ttft_alone_s"],
               "token_budget": policy.token_budget, "max_num_seqs": policy.max_batch, "block_size": block,
               "kv_sequences": policy.kv_sequences, "tp": d.tp, "replicas": d.replicas, "definitions": DEFINITIONS}
        row["note"] = saturated_line(out["saturation_rate"]) if row["saturated"] else None
        rows.append(row)
    return rows


def _wave(out: dict, i: int):
    """The first wave's share of row i's TTFT; below 1e-4 of the TTFT it is the wave's stepping error, not a wave
    (a closed loop of one sends its wave alone: the run's mean is the steady state's)."""
    wave, ttft = float(out["ttft_first_wave_s"][i]), float(out["ttft_s"][i])
    return plain(0.0 if abs(wave) < 1e-4 * abs(ttft) else wave)


COLUMNS = (("rate/s", "rate", lambda v: f"{v:.4g}"), ("in flight", "in_flight", lambda v: f"{v:.1f}"),
           ("TTFT", "ttft_s", fmt_seconds), ("queue", "ttft_queue_s", fmt_seconds),
           ("front end", "ttft_front_end_s", fmt_seconds), ("TPOT", "tpot_s", fmt_seconds),
           ("TPOT +chunks", "tpot_inflation", lambda v: f"{100 * v:+.0f}%"), ("E2E", "e2e_s", fmt_seconds),
           ("goodput tok/s", "goodput_tokens_per_s", fmt_count))


def render(analysis, rows: list[dict], policy: Policy) -> str:
    d, first = analysis.deployment, rows[0]
    steps = policy.for_engine(d).step_policy
    closed = first["load"] == "closed"
    columns = ((("concurrency", "concurrency", lambda v: f"{v:g}"),) if closed else ()) + COLUMNS
    if first.get("ttft_first_wave_s") is not None:  # the run's mean TTFT: say what its first wave adds
        signed = lambda v: ("-" if v < 0 else "+") + fmt_seconds(abs(v))  # noqa: E731 (past the pool it can shorten)
        columns = columns[:4] + (("first wave", "ttft_first_wave_s", signed),) + columns[4:]
    cells = [[h for h, _, _ in columns]]
    for row in rows:
        if row["saturated"]:
            cells.append([f"{row['rate']:.4g}" if not closed else f"{row['concurrency']:g}", row["note"]])
        else:
            cells.append([fmt(row[key]) for _, key, fmt in columns])
    widths = [max(len(line[i]) for line in cells if len(line) == len(columns)) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(line, widths)) if len(line) == len(columns)
             else "  ".join([line[0].rjust(widths[0]), line[1]]) for line in cells]
    header = [f"model     {d.config.name} on {d.hardware.id} (tp {d.tp}, {d.replicas} replica(s)), engine {d.engine.name}",
              f"workload  prompt {first['prompt_len']} tokens, gen {first['gen_len']} tokens, "
              + ("closed loop: C requests in flight, a new one as one ends" if closed else "open loop: Poisson arrivals")
              + (f"; {first['requests']:g} requests a run, TTFT their mean" if first.get("requests") else ""),
              f"server    continuous batching: {policy.token_budget} tokens a step ({STEPS[steps]}), at most "
              f"{policy.max_batch} running, KV pool {policy.kv_sequences:g} sequences in {first['block_size']}-token "
              f"blocks{TAKEN_ON_DEMAND if d.engine.memory.admission == ON_DEMAND else ''} ({d.engine.name}'s KV rule on "
              f"{d.hardware.capacity_bytes / 1e9:.1f} GB the runtime sees)",
              f"limits    saturates at {first['saturation_rate']:.4g} requests/s; a lone request's TTFT "
              f"{fmt_seconds(first['ttft_alone_s'])}"]
    wave = [f"first wave: {DEFINITIONS['ttft_first_wave_s']}."] if first.get("ttft_first_wave_s") is not None else []
    footer = [f"TTFT: {DEFINITIONS['ttft_s']}.", *wave, f"TPOT: {DEFINITIONS['tpot_s']}; +chunks: its inflation over a "
              "decode-only step.", f"E2E: {DEFINITIONS['e2e_s']}."]
    if steps == PREFILL_FIRST:
        footer.append(f"Prefill first ({d.engine.name}'s scheduler): prompts run in steps of their own, the decoders "
                      "paused for them (their +chunks); a closed loop keeps one cohort, its prompts prefilled together.")
    return "\n".join(header + [""] + lines + [""] + footer)


def explain_lines(t: dict) -> list[str]:
    ms = lambda s: fmt_seconds(s)  # noqa: E731
    lines = prefill_first_lines(t, ms) if t.get("step_policy") == PREFILL_FIRST else mixed_lines(t, ms)
    if not t["front_end_idle"]:  # roofline.serving.front_end
        lines.append(f"  front end            w = a + (1 + ⌈(G − 1) / s⌉) b = {ms(t['front_end_work_s'])} a request "
                     f"(s = {t['stream_interval']}), busy ρ = λ w = {t['front_end_busy']:.3f}; TTFT + (a + (1 + m / s) b) "
                     f"/ (1 − ρ) = {ms(t['front_end_s'])}; capacity 1 / w = {t['front_end_capacity']:.4g} requests/s")
    return lines


def mixed_lines(t: dict, ms) -> list[str]:
    """The mixed steady state's terms (roofline.serving.mixed_policy's docstring)."""
    return [
        f"closed forms at {t['rate']:.4g} requests/s a replica (prompt P = {t['prompt']}, gen G = {t['gen']}, "
        f"budget Tb = {t['token_budget']}):",
        f"  decoders a step      m = λ (G − 1) τ̄ = {t['decoders_mean']:.2f}",
        f"  prefill a step       π = λ τ̄ P = {t['prefill_tokens_per_step']:.0f} tokens; chunks a prompt "
        f"k = ⌈P / (Tb − m)⌉ = {t['chunks']:.0f}",
        f"  steps with prefill   φ = max(1 − e^(−λ k τ̄), π / (Tb − m)) = {t['prefill_share']:.3f}",
        f"  mean step            τ̄ = (1 − φ) τ_decode + φ τ_mixed = {ms(t['step_s'])} "
        f"(decode-only {ms(t['decode_step_s'])}, with chunks {ms(t['mixed_step_s'])})",
        f"  TPOT                 steps weighted by their decoders: {t['decoders']:.1f} seen; {ms(t['tpot_s'])}",
        f"  TTFT                 residual E[τ²]/2τ̄ {ms(t['residual_s'])} + budget wait {ms(t['budget_wait_s'])} + "
        + (f"batched ahead s τ̄ {ms(t['scheduled_ahead_s'])} + " if t["scheduled_ahead_s"] else "")
        + f"own chunks {ms(t['own_prefill_s'])} + request {ms(t['request_overhead_s'])}",
        f"  saturation (budget)  λ_max = Tb / ((P + G − 1) τ_full) = {t['budget_saturation']:.4g} requests/s, every step "
        f"{t['full_decoders']:.0f} decode + {t['full_prefill']:.0f} prefill tokens",
    ]


def prefill_first_lines(t: dict, ms) -> list[str]:
    """The prefill-first steady state's terms (roofline.serving.prefill_first's docstring)."""
    return [
        f"prefill first (SGLang's steps) at {t['rate']:.4g} requests/s a replica (prompt P = {t['prompt']}, gen "
        f"G = {t['gen']}, chunk Tc = {t['token_budget']}):",
        f"  steps with prompts   φ = {t['prefill_share']:.3f}, each {t['prefill_tokens_per_step']:.0f} prompt tokens "
        f"({ms(t['prefill_step_s'])}); a prompt in k = ⌈P / Tc⌉ = {t['chunks']:.0f}",
        f"  mean step            τ̄ = (1 − φ) τ_decode + φ τ_prefill = {ms(t['step_s'])}",
        f"  TPOT                 a decode step of {t['decoders']:.1f} seen ({ms(t['decode_step_s'])}) + the prefill "
        f"steps that pause it: {ms(t['tpot_s'])}",
        f"  TTFT                 residual E[τ²]/2τ̄ {ms(t['residual_s'])} + budget wait {ms(t['budget_wait_s'])} + "
        f"own prefill {ms(t['own_prefill_s'])} + request {ms(t['request_overhead_s'])}",
        f"  saturation (flat out) λ_max = B / (B P / Tc · τ_p(Tc) + (G − 1) τ_d(B)) = {t['budget_saturation']:.4g} "
        "requests/s",
    ]
