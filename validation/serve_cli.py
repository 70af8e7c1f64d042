"""`roofline serve-bench` (run the continuous-batching server under Poisson load or a closed loop of clients, log
every request) and
`roofline serve-score` (the simulator's prediction of those runs, with the server's host term fitted on
other runs)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT_CSV = "serve/cpu-serve.csv"  # under data/measurements/ (its own folder: the app fits the top-level CSVs)


def numbers(text: str, flag: str, kind=float) -> tuple:
    try:
        values = tuple(kind(v) for v in str(text).split(",") if v.strip())
    except ValueError:
        raise ValueError(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise ValueError(f"{flag}: expected at least one number, got {text!r}")
    return values


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="cpu-small", help="a validation preset (python -m validation.cli validate)")
    parser.add_argument("--rate", default="1", help="comma-separated Poisson rates, requests/s (one run each)")
    parser.add_argument("--clients", help="comma-separated closed-loop concurrencies (one run each; instead of --rate): "
                        "C requests in flight from t = 0, a new one as one completes")
    parser.add_argument("--prompt", default="128", help="comma-separated prompt lengths, tokens")
    parser.add_argument("--output", type=int, default=16, help="tokens generated per request")
    parser.add_argument("--requests", type=int, default=20, help="requests per run")
    parser.add_argument("--token-budget", type=int, default=256, help="tokens one step carries (decode + prefill)")
    parser.add_argument("--max-batch", type=int, default=8, help="sequences in flight (cache slots)")
    parser.add_argument("--seed", type=int, default=0, help="arrivals and prompt tokens")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads (1: the 2 shared cores' other tenant cannot stall a thread barrier)")
    parser.add_argument("--out", help=f"CSV to append to and resume (default data/measurements/{DEFAULT_CSV})")
    parser.add_argument("--engine", default="harness-cpu", help="profile that prices the prediction printed first")


def run_bench(args: argparse.Namespace) -> int:
    """Serve Poisson load on a real continuous-batching server; log TTFT and inter-token times per request."""
    import torch

    from roofline.engine import load_engine

    from .cli import MEASUREMENTS_DIR, model_config
    from .serve_bench import ServeSpec, run
    from .serve_score import load_runs, score
    path = Path(args.out) if args.out else MEASUREMENTS_DIR / DEFAULT_CSV
    config = model_config(args.model, None)
    engine = load_engine(args.engine)
    if args.clients is None:
        loads = [(rate, 0) for rate in numbers(args.rate, "--rate")]
    else:
        loads = [(0.0, clients) for clients in numbers(args.clients, "--clients", int)]
        if min(c for _, c in loads) < 1:
            raise ValueError(f"--clients: must be whole numbers of requests in flight >= 1, got {args.clients!r}")
    specs = [ServeSpec(config, rate, prompt, args.output, args.requests, args.token_budget, args.max_batch, args.seed,
                       clients) for prompt in numbers(args.prompt, "--prompt", int) for rate, clients in loads]
    for spec in specs:
        spec.check()
    torch.set_num_threads(args.threads)
    for spec in specs:
        print(f"{spec.run_id}: ", end="", flush=True)
        if not run(spec, path):
            print("already in the file")
            continue
        done = next(r for r in load_runs([path], {config.name: config}) if r.spec.run_id == spec.run_id)
        s = score(done, engine)
        print(f"load {s['load_average']:.2f}; " + ", ".join(
            f"{name} p{q} {s[f'{name}_p{q}_measured_s'] * 1e3:.1f} ms (simulated {s[f'{name}_p{q}_error']:+.0%})"
            for name in ("ttft", "tpot") for q in (50, 90)))
    print(f"{path}")
    return 0


def add_score_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", help="serve-bench CSVs to score")
    parser.add_argument("--engine", default="harness-cpu", help="the profile that prices each step")
    parser.add_argument("--host-fit", nargs="*", default=(), metavar="CSV",
                        help="fit the server's own terms (GEMM efficiency at its thread count; host s per step + "
                             "s per sequence) on these runs' steps; never the scored files")
    parser.add_argument("--dedicated-core", action="store_true",
                        help="price each run on a core of its own, not on the CPU share it measured")
    parser.add_argument("--json", action="store_true")


def run_score(args: argparse.Namespace) -> int:
    """Predict serve-bench runs with the simulator; p50 / p90 TTFT and TPOT errors."""
    from roofline.engine import load_engine

    from .cli import PRESETS
    from .serve_score import HostCost, closed_loop, fit_server, load_runs, score
    for path in [*args.files, *args.host_fit]:
        if not Path(path).is_file():
            raise ValueError(f"serve-score: no such file {path}")
    overlap = {str(Path(p).resolve()) for p in args.files} & {str(Path(p).resolve()) for p in args.host_fit}
    if overlap:
        raise ValueError(f"--host-fit: {', '.join(sorted(overlap))} is also scored; fix: fit on separate runs")
    engine = load_engine(args.engine)
    host = HostCost()
    if args.host_fit:
        engine, host = fit_server(load_runs(args.host_fit, PRESETS), args.host_fit, engine)
    runs = load_runs(args.files, PRESETS)
    scores = [score(run, engine, host, not args.dedicated_core) for run in runs]
    closed = [closed_loop(run, engine, host) for run in runs if run.spec.clients]
    if args.json:
        print(json.dumps({"host": host.__dict__, "flops_efficiency": engine.flops_efficiency, "runs": scores,
                          "closed_loop": closed}, indent=2))
        return 0
    print(f"GEMM flops_efficiency {engine.flops_efficiency:.3f}; host term: {host.step_s * 1e3:.2f} ms/step + "
          f"{host.sequence_s * 1e3:.3f} ms/sequence ({host.source})")
    print(f"{'at':>6} {'prompt':>6} {'load':>5} {'share':>5} " + " ".join(f"{n + ' p' + str(q):>9}" for n in ("ttft", "tpot")
                                                            for q in (50, 90)))
    for s in scores:
        load = f"C={s['clients']}" if s["clients"] else f"{s['rate']:g}/s"
        print(f"{load:>6} {s['prompt_tokens']:6d} {s['load_average']:5.2f} {s['cpu_share']:5.2f} " + " ".join(
            f"{s[f'{n}_p{q}_error']:+9.1%}" for n in ("ttft", "tpot") for q in (50, 90)))
    if closed:
        print("closed loop, TTFT ms: mean / p50 / p90 / the first wave (C at t = 0) / the rest; the load model's steady "
              "state and its mean over the run's N")
        for c in closed:
            parts = [" ".join(f"{c[f'{who}_{q}_s'] * 1e3:5.0f}" for q in ("mean", "p50", "p90", "first_wave", "later"))
                     for who in ("measured", "simulated")]
            print(f"  C={c['clients']} P={c['prompt_tokens']} N={c['requests']} share {c['cpu_share']:.2f}  measured "
                  f"{parts[0]}  simulated {parts[1]}  model: first wave {c['model_first_wave_s'] * 1e3:5.0f} steady "
                  f"{c['model_steady_s'] * 1e3:5.0f} run mean {c['model_run_mean_s'] * 1e3:5.0f}")
    return 0


COMMANDS = [("serve-bench", add_bench_arguments, run_bench), ("serve-score", add_score_arguments, run_score)]


