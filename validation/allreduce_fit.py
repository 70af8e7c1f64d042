"""An engine's all-reduce kernel as roofline.allreduce prices it, fitted to NVIDIA's profile of the kernel.

NVIDIA's AIConfigurator ships the latency of TensorRT-LLM's and vLLM's own all-reduce on H100 and H200 over 2, 4 and
8 GPUs and messages of 128 to 2^28 bf16 values (`systems/data/<device>/comm/<engine>/<release>/
custom_allreduce_perf.parquet` in the aiconfigurator-core package; message_size counts values, latency is in ms).
vLLM's files time each size twice, `vllm_graph` (captured in a CUDA graph, as its decode steps run) and `vllm_eager`
(launched from the host, as a step carrying a prompt runs: ~15 us more at small messages); `--backend` picks one,
the graph's by default. Fitted here by least squares in log
space: one shot up to `--one-shot-max` bytes, two shots past it, the latency L = a + b·log2(t / 2) and the traffic at
a share s of the link (roofline.allreduce). The largest one-shot message is chosen by the fit's median error over a
grid of powers of two (the profile's sizes are powers of two, so only the power between two of them matters).

Run (the package is not a dependency; any venv with pandas, pyarrow and scipy reads it):
  python -m validation.allreduce_fit --aic /path/to/aiconfigurator_core/systems/data [--engine vllm]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from roofline.allreduce import ONE_OR_TWO_SHOT, AllReduceKernel
from roofline.hardware import load_hardware

from .aic_profile import DEVICES

VALUE_BYTES = 2  # bf16


GRAPHED = {"vllm": "vllm_graph"}  # engine -> the profile's backend its decode steps run, where it times several


def points(data: Path, engine: str = "trtllm", backend: str | None = None):
    """(gpus, message bytes, seconds, link bytes/s) of every bf16 point of every release's profile of `engine`'s
    kernel (`backend`: the launch mode timed, where the profile times several; default GRAPHED's)."""
    import pandas as pd  # only this script reads parquet
    frames = []
    backend = backend or GRAPHED.get(engine)
    for device, ours in DEVICES.items():
        for path in sorted((data / device / "comm" / engine).glob("*/custom_allreduce_perf.parquet")):
            table = pd.read_parquet(path)
            table = table[table.allreduce_dtype == "bfloat16"]
            if "backend" in table.columns:
                table = table[table.backend == backend]
            frames.append(pd.DataFrame({"gpus": table.num_gpus.astype(float),
                                        "bytes": table.message_size.astype(float) * VALUE_BYTES,
                                        "seconds": table.latency.astype(float) * 1e-3,
                                        "link": load_hardware(ours).interconnect_bandwidth,
                                        "release": path.parent.name, "device": ours}))
    return pd.concat(frames, ignore_index=True)


def predicted(table, latency: float, doubling: float, share: float, one_shot_max: float) -> np.ndarray:
    kernel = AllReduceKernel(ONE_OR_TWO_SHOT, share, one_shot_max, "fit")
    gpus = table["gpus"].to_numpy()
    return kernel.seconds(table["bytes"].to_numpy(), gpus, table["link"].to_numpy(),
                          latency + doubling * np.log2(gpus / 2))


def fit(table, one_shot_max: float) -> tuple[np.ndarray, np.ndarray]:
    """((L over 2 GPUs, L a doubling, share), |error| of each point) at a given largest one-shot message."""
    from scipy.optimize import least_squares
    observed = np.log(table["seconds"].to_numpy())

    def residuals(x):
        return np.log(predicted(table, x[0] * 1e-6, x[1] * 1e-6, x[2], one_shot_max)) - observed
    found = least_squares(residuals, [3.0, 0.3, 0.7], bounds=([0.0, 0.0, 0.01], [100.0, 100.0, 1.0]))
    values = np.array([found.x[0] * 1e-6, found.x[1] * 1e-6, found.x[2]])
    return values, np.abs(predicted(table, *values, one_shot_max) / table["seconds"].to_numpy() - 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aic", type=Path, required=True, help="aiconfigurator_core/systems/data")
    parser.add_argument("--engine", default="trtllm", choices=("trtllm", "vllm"), help="whose kernel (default trtllm)")
    parser.add_argument("--backend", help="vLLM's launch mode timed: vllm_graph (default) or vllm_eager")
    args = parser.parse_args(argv)
    table = points(args.aic, args.engine, args.backend)
    print(f"{len(table)} bf16 points: {', '.join(sorted(set(table.release)))} on {', '.join(sorted(set(table.device)))}")
    print(" one-shot up to   L (2 GPUs)   + a doubling   share   |error| median   p90")
    for power in range(16, 27, 1):
        values, error = fit(table, float(2 ** power))
        print(f"  {2 ** power / 2 ** 20:9.3f} MiB   {values[0] * 1e6:7.2f} us   {values[1] * 1e6:8.2f} us   "
              f"{values[2]:.3f}   {np.median(error):13.1%}   {np.quantile(error, 0.9):.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
