"""`roofline validate` (measure a sweep on this machine) and `roofline fit` (an engine profile from its CSVs);
`serve-bench` and `serve-score` live in validation/serve_cli.py."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from roofline import ModelConfig, load_hardware, load_model
from roofline.cli import args as parse
from roofline.hardware import DATA_DIR, hardware_id_for_gpu

from . import records, serve_cli

MEASUREMENTS_DIR = DATA_DIR / "measurements"
ENGINES_DIR = DATA_DIR / "engines"
PRESETS = {
    # Llama-shaped, GQA; sized so the full CPU sweep (batch 1..64, context 128..4096) takes minutes.
    "cpu-small": ModelConfig(name="cpu-small", family="llama", d_model=1024, n_layers=8, n_heads=16, n_kv_heads=4,
                             head_dim=64, d_ff=2816, vocab_size=32000),
    # cpu-small's 8 layers at trivial widths: every kernel is tiny, so its step time is the fixed
    # per-layer cost (Python, dispatch, kernel calls) the fit must tell apart from bandwidth.
    "cpu-overhead": ModelConfig(name="cpu-overhead", family="llama", d_model=64, n_layers=8, n_heads=4, n_kv_heads=1,
                                head_dim=16, d_ff=128, vocab_size=256),
    # cpu-small with Mixtral-style MoE MLPs: 8 experts of half the width, 2 per token. Its decode
    # reads the experts the batch touches, E (1 - (1 - k/E)^B) of them (2 at B = 1, ~7.2 at B = 8).
    "cpu-moe": ModelConfig(name="cpu-moe", family="mixtral", d_model=1024, n_layers=8, n_heads=16, n_kv_heads=4,
                           head_dim=64, d_ff=1408, vocab_size=32000, n_experts=8, top_k=2, d_expert=1408),
    # cpu-small with a 512-token sliding window on every layer (Mistral-style): past 512 tokens of
    # context, decode reads no more of the cache.
    "cpu-window": ModelConfig(name="cpu-window", family="mistral", d_model=1024, n_layers=8, n_heads=16, n_kv_heads=4,
                              head_dim=64, d_ff=2816, vocab_size=32000, window=512),
    # cpu-small's MLP under DeepSeek's latent attention: 16 heads (Hn 64 + R 32 for scores, Hv 64)
    # over a 256-wide latent; the cache holds C + R = 288 values per token and layer (GQA's: 512).
    "cpu-mla": ModelConfig(name="cpu-mla", family="deepseek_v2", d_model=1024, n_layers=8, n_heads=16, n_kv_heads=16,
                           head_dim=96, d_ff=2816, vocab_size=32000, kv_lora_rank=256, qk_rope_dim=32, qk_nope_dim=64,
                           v_head_dim=64),
    "tiny": ModelConfig(name="tiny", family="llama", d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                        d_ff=128, vocab_size=256),
}
DEFAULTS = {"cpu": dict(batches="1,2,4,8,16,32,64", contexts="128,256,512,1024,2048,4096", steps=10,
                        prefill_token_limit=2048, prefill_repeats=3),
            "cuda": dict(batches="1,2,4,8,16,32,64,128,256,512", contexts="128,512,1024,2048,4096,8192,16384,32768",
                         steps=50, prefill_token_limit=32768, prefill_repeats=10)}


def integers(text: str, name: str) -> tuple:
    return tuple(parse.numbers(text, f"--{name}", whole=True))


def model_config(name: str, layers: int | None) -> ModelConfig:
    config = PRESETS[name] if name in PRESETS else load_model(name)
    return config.with_overrides(n_layers=layers, layer_attention=(), layer_mlp=()) if layers else config


def add_validate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--model", default="cpu-small", help=f"a preset ({', '.join(PRESETS)}), bundled model or config.json")
    parser.add_argument("--layers", type=int, help="override the layer count (a shorter model, same shape)")
    parser.add_argument("--dtype", default=None, help="comma-separated: fp32,bf16,fp16 (default: fp32 on cpu, bf16 on cuda)")
    parser.add_argument("--kv-dtype", help="the cache's dtype: bf16, fp16, fp32, or quantized fp8 / int8 (a scale per "
                                           "position, read by the split-KV kernel); default: --dtype")
    parser.add_argument("--weights", help="weight format: bf16, int8, int4-g32, int4-g128 (weight-only) or fp8 "
                                          "(W8A8, CUDA); default: --dtype")
    parser.add_argument("--kernels", choices=("auto", "torch", "triton"), default="auto",
                        help="eager torch, or the fused Triton step (default: triton on CUDA where it applies)")
    parser.add_argument("--batches", help="comma-separated batch sizes")
    parser.add_argument("--contexts", help="comma-separated context lengths (tokens already cached)")
    parser.add_argument("--kv-heads", help="comma-separated KV head counts to sweep (MHA/GQA/MQA); default: the model's")
    parser.add_argument("--steps", type=int, help="timed decode steps per point")
    parser.add_argument("--prefill-token-limit", type=int, help="measure prefill where batch * context <= this")
    parser.add_argument("--out", default=str(MEASUREMENTS_DIR), help="directory for <device>-<date>.csv")
    parser.add_argument("--csv", help="append to (and resume) this file instead")
    parser.add_argument("--threads", type=int, help="CPU threads (recorded with every row)")
    parser.add_argument("--quick-ceilings", action="store_true", help="tiny ceiling measurements (smoke tests)")
    parser.add_argument("--probe-each-point", action=argparse.BooleanOptionalAction, default=None,
                        help="measure the ceilings again around every point (default: on for cpu, whose shared "
                             "memory bandwidth wanders; off for cuda)")


def run_validate(args: argparse.Namespace) -> int:
    """Measure decode and prefill step times over a batch x context sweep on this machine."""
    try:
        import torch  # the validate extra; the fit needs no torch
    except ModuleNotFoundError:
        raise ValueError("validate: needs torch; install the extra: pip install -e '.[validate]' "
                         "(torch==2.13.0)") from None

    from .ceilings import measure_ceilings
    from .probe import SteadyProbe
    from .sweep import MeasurementError, SweepSpec, default_csv, run_sweep
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is visible to torch")
    if args.threads:
        torch.set_num_threads(args.threads)
    defaults = DEFAULTS[args.device]
    dtypes = tuple((args.dtype or ("fp32" if args.device == "cpu" else "bf16")).split(","))
    spec = SweepSpec(
        device=args.device, model=model_config(args.model, args.layers), dtypes=dtypes,
        batches=integers(args.batches or defaults["batches"], "batches"),
        contexts=integers(args.contexts or defaults["contexts"], "contexts"),
        kv_heads=integers(args.kv_heads, "kv-heads") if args.kv_heads else (),
        steps=args.steps or defaults["steps"], prefill_repeats=defaults["prefill_repeats"],
        kv_dtype=args.kv_dtype, weight_format=args.weights, kernels=args.kernels,
        prefill_token_limit=args.prefill_token_limit or defaults["prefill_token_limit"])
    path = Path(args.csv) if args.csv else default_csv(Path(args.out), args.device)
    ceilings = measure_ceilings(args.device, dtypes, "quick" if args.quick_ceilings else None)
    print(f"device ceilings: copy {ceilings.copy_bandwidth / 1e9:.1f} GB/s (read+write), read "
          f"{ceilings.read_bandwidth / 1e9:.1f} GB/s, matmul "
          + ", ".join(f"{d} {f / 1e9:.0f} GFLOP/s" for d, f in ceilings.matmul_flops.items()), file=sys.stderr)
    probed = args.device == "cpu" if args.probe_each_point is None else args.probe_each_point
    probe_size = "quick" if args.quick_ceilings else "probe"
    probe = SteadyProbe(lambda: measure_ceilings(args.device, dtypes, probe_size),
                        patience_s=0.0 if args.quick_ceilings else 120.0) if probed else None  # quick: not waited on
    try:
        written = run_sweep(spec, path, ceilings, probe=probe)
    except MeasurementError as err:
        print(f"roofline validate: error: {err} ({path})", file=sys.stderr)
        return 1
    print(f"{path}: {written[records.OK]} measured, {written[records.DOES_NOT_FIT]} do not fit, "
          f"{written['skipped']} skipped (already there or prefill over the token limit)")
    return 0


def add_fit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", help="measurement CSVs of one device")
    parser.add_argument("--out", help="engine profile YAML (default: data/engines/harness-<device>.yaml; the "
                                      "committed H100 fit is data/engines/harness.yaml)")
    parser.add_argument("--hardware", help="datasheet entry the fractions are relative to (default: from a GPU's "
                                           "name; 'measured' for the measured ceilings, the CPU default)")
    parser.add_argument("--plots", help="PNG path for the figures (default: next to the first CSV)")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the fit summary as JSON")
    parser.add_argument("--points", metavar="POINTS.csv",
                        help="also write every point: measured, fitted and held-out time, error, MBU and MFU")
    parser.add_argument("--score", metavar="PROFILE.yaml",
                        help="fit nothing: predict every row with this harness profile (fitted on other "
                             "measurements of the same device, hardware: measured) and report the error")


def datasheet_for(device: str, device_name: str, choice: str | None):
    """The datasheet the fitted fractions are relative to; None: the measured ceilings. A CPU has no
    datasheet here (the `cpu` entry holds one machine's measured ceilings), so its fractions are of its own ceilings."""
    if choice == "measured" or (device == "cpu" and not choice):
        return None
    if choice:
        return load_hardware(choice)
    match = hardware_id_for_gpu(device_name)  # the datasheet entry torch's device name denotes
    return load_hardware(match) if match else None


def run_fit(args: argparse.Namespace) -> int:
    """Fit a device's engine profile (bandwidth, FLOP/s, overheads) to measurements; report held-out error."""
    from roofline.cli.engines import writable_file

    from .fit import engine_document, fit

    paths = [Path(f) for f in args.files]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise ValueError(f"fit: no such file {', '.join(missing)}")
    frame = records.load_frame(paths)
    if args.score:
        return score_profile(frame, Path(args.score), args.json, args.points)
    first = frame.iloc[0]
    slug = records.device_slug_of(str(first["device"]), str(first["device_name"]))
    out = Path(args.out) if args.out else ENGINES_DIR / f"harness-{slug}.yaml"
    datasheet = datasheet_for(str(first["device"]), str(first["device_name"]), args.hardware)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass  # writable_file says why in one line
    writable_file("--out", out)  # before the fit, not after it
    result = fit(frame, out.stem)
    document = engine_document(result, datasheet, [p.name for p in paths])
    out.write_text(yaml.safe_dump(document, sort_keys=False))
    if args.points:
        write_points(result.points, Path(args.points))
    if not args.no_plots:
        from .plots import save_validation_plots
        plot = Path(args.plots) if args.plots else paths[0].with_suffix(".png")
        models = ", ".join(frame["model"].unique())
        save_validation_plots(result.points, plot, f"{slug}: {models} ({', '.join(frame['dtype'].unique())})")
    summary = result.summary
    if args.json:
        decode = summary.get("decode", {})
        print(json.dumps({"n_points": len(result.points), "params": document["harness_fit"]["achieved"] | {
            "step_overhead_s": result.engine.step_overhead_s, "layer_overhead_s": result.engine.layer_overhead_s,
            "engine": {"hardware": document["hardware"], **{k: document[k]["value"] for k in (
                "bandwidth_efficiency", "flops_efficiency")}}},
            "heldout_median_abs_err": decode.get("heldout_median_abs_err"),
            "heldout_p90_abs_err": decode.get("heldout_p90_abs_err"),
            "mbu_batch1": summary["mbu_batch1"], "engine_file": str(out),
            "by_phase": {k: v for k, v in summary.items() if isinstance(v, dict)}}, indent=2))
    else:
        print(report(result, document, out))
    return 0


POINT_COLUMNS = ("model", "n_kv_heads", "dtype", "phase", "batch", "context", "time_s", "predicted_s",
                 "heldout_predicted_s", "heldout_error", "mbu", "mbu_copy", "mfu", "read_bandwidth")


def write_points(points, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    points[list(POINT_COLUMNS)].to_csv(path, index=False)


def score_profile(frame, path: Path, as_json: bool, points_csv: str | None = None) -> int:
    from roofline.engine import MEASURED, load_engine

    from .fit import score
    engine = load_engine(str(path))
    if engine.hardware != MEASURED:
        raise ValueError(f"--score {str(path)!r}: its fractions are of {engine.hardware or 'a datasheet'!r}'s "
                         "roofs; scoring applies fractions of the measured ceilings (a fit with hardware: measured)")
    result = score(frame, engine)
    if points_csv:
        write_points(result.points, Path(points_csv))
    phases = {k: v for k, v in result.summary.items() if isinstance(v, dict)}
    if as_json:
        print(json.dumps({"n_points": len(result.points), "engine_file": str(path), "by_phase": phases}, indent=2))
        return 0
    print(f"{len(result.points)} points predicted with {path} (nothing refitted)")
    for phase, s in phases.items():
        print(f"  {phase}: |error| median {s['heldout_median_abs_err']:.1%}, p90 {s['heldout_p90_abs_err']:.1%} "
              f"({s['n_points']} points)")
    return 0


def report(result, document: dict, out: Path) -> str:
    achieved, e = document["harness_fit"]["achieved"], result.engine
    lines = [f"fit of {len(result.points)} points -> {out} (fractions of {document['hardware']!r})",
             f"  achieved bandwidth {achieved['bandwidth_bytes_per_s'] / 1e9:.1f} GB/s, "
             + ", ".join(f"{d} {f / 1e9:.0f} GFLOP/s" for d, f in achieved["flops_per_s"].items())
             + f", overhead {e.step_overhead_s * 1e6:.1f} us/step + {e.layer_overhead_s * 1e6:.1f} us/layer"]
    for phase in ("decode", "prefill"):
        s = result.summary.get(phase)
        if s:
            lines.append(f"  {phase}: held-out |error| median {s['heldout_median_abs_err']:.1%}, "
                         f"p90 {s['heldout_p90_abs_err']:.1%} ({s['n_heldout']} points)")
    lines.append(f"  MBU at batch 1 (decode, median): {result.summary['mbu_batch1']:.2f} of read bandwidth, "
                 f"{result.summary['mbu_copy_batch1']:.2f} of copy bandwidth")
    return "\n".join(lines)


def add_fit_roofs_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=None, help="where to write (default: data/kernel_roofs.json)")
    parser.add_argument("--check", action="store_true", help="write nothing: exit 1 if the committed file differs")


def run_fit_roofs(args: argparse.Namespace) -> int:
    """Derive the device kernel roofs (H100, CPU and the stated priors) from data/measurements."""
    from roofline.cli.engines import writable_file
    from roofline.kernel_roofs import KERNEL_ROOFS_FILE

    from .kernel_roofs_fit import derive

    out = Path(args.out) if args.out else KERNEL_ROOFS_FILE
    text = json.dumps(derive(), indent=1) + "\n"
    if args.check:
        same = out.is_file() and out.read_text() == text
        print(f"{out}: {'as derived' if same else 'differs from what the measurements give'}")
        return 0 if same else 1
    writable_file("--out", out)
    out.write_text(text)
    print(f"{out}: kernel roofs of h100-sxm and cpu (measured) and their priors")
    return 0


COMMANDS = [("validate", add_validate_arguments, run_validate), ("fit", add_fit_arguments, run_fit),
            ("fit-roofs", add_fit_roofs_arguments, run_fit_roofs),
            *serve_cli.COMMANDS]


def main(argv: list[str] | None = None) -> int:
    """Both commands without the `roofline` entry point (python -m validation.cli validate ...)."""
    parser = argparse.ArgumentParser(prog="python -m validation.cli")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, add_arguments, run in COMMANDS:
        add_arguments(sub.add_parser(name, help=run.__doc__.splitlines()[0]))
    args = parser.parse_args(argv)
    try:
        return {n: r for n, _, r in COMMANDS}[args.command](args)
    except ValueError as err:
        print(f"roofline {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
