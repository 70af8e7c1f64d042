"""NVIDIA's kernel profile of the serving engines: AIConfigurator 0.12.0's database, one table per device and op.

The aiconfigurator-core package (not a dependency: `pip install aiconfigurator==0.12.0` in a venv of its own) holds
`systems/data/<device>/<op>/<engine>/<release>/<table>.parquet`: the latencies NVIDIA measured of each engine's own
kernels on H100 and H200. The scripts that read it (expert_slice_fit, gemm_shape_fit, gemv_floor_fit,
expert_decode_profile, allreduce_fit) take the releases and devices from here.
"""
from __future__ import annotations

from pathlib import Path

RELEASES = {"trtllm": "1.3.0rc20", "vllm": "0.24.0", "sglang": "0.5.14"}  # engine -> the release its profile is of
DEVICES = {"h100_sxm": "h100-sxm", "h200_sxm": "h200"}  # AIConfigurator's system -> the project's device


def tables(data: Path, op: str, engine: str, table: str):
    """(system, DataFrame) of `engine`'s `op` kernels for each device whose profile holds the table."""
    import pandas as pd  # only these scripts read parquet
    for device in DEVICES:
        path = data / device / op / engine / RELEASES[engine] / f"{table}.parquet"
        if path.is_file():
            yield device, pd.read_parquet(path)
