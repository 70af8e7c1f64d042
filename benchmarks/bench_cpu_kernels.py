"""The validation harness's CPU kernels against torch's defaults, as ratios measured in one run.

Why the decode under test uses them (validation/README.md; the machine is shared, so read the
ratios, not the absolute rates, and rerun when they disagree): oneDNN on a prepacked weight
(validation.linear.Linear) against F.linear's MKL path, and the native decode attention
(validation.native_attention) against two batched matmuls, each as bytes streamed per second and
as the ratio of the two. Weights and caches span 8 layers' worth, so nothing stays in cache.
Target (issue 4): batch-1 decode moves >= 70% of the copy bandwidth; these kernels are how.
Run: python benchmarks/bench_cpu_kernels.py [--json] [--threads 2]
"""
from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

from validation.linear import Linear
from validation.native_attention import decode_attention, kernel

from bench_evaluate import median_seconds

D, F_MLP, LAYERS = 1024, 2816, 8  # cpu-small's shapes


def projections(rows: int, repeats: int) -> dict:
    """Gate/up projections of 8 layers: bytes of weight streamed per second by each path."""
    layers = [Linear(D, 2 * F_MLP, bias=False).requires_grad_(False) for _ in range(LAYERS)]
    x = torch.randn(rows, D)
    with torch.inference_mode():
        onednn = median_seconds(lambda: [layer(x) for layer in layers], repeats)
        mkl = median_seconds(lambda: [F.linear(x, layer.weight) for layer in layers], repeats)
    moved = LAYERS * 2 * F_MLP * D * 4
    return {"onednn_gb_s": moved / onednn / 1e9, "mkl_gb_s": moved / mkl / 1e9, "ratio": mkl / onednn}


def attention(batch: int, groups: int, context: int, repeats: int) -> dict:
    """Decode attention of 8 layers (4 KV heads of 64): cache bytes read per second by each path."""
    caches = [torch.randn(2, batch, 4, context, 64) for _ in range(LAYERS)]
    q = torch.randn(batch, 4, groups, 64)

    def matmuls(keys, values):
        return torch.softmax((keys @ q.transpose(-1, -2)).transpose(-1, -2) * 64 ** -0.5, dim=-1) @ values
    native = median_seconds(lambda: [decode_attention(q, c[0], c[1]) for c in caches], repeats)
    torch_path = median_seconds(lambda: [matmuls(c[0], c[1]) for c in caches], repeats)
    read = LAYERS * caches[0].numel() * 4
    return {"native_gb_s": read / native / 1e9, "matmul_gb_s": read / torch_path / 1e9, "ratio": torch_path / native}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {f"projection_rows_{rows}": projections(rows, args.repeats) for rows in (1, 4, 16)}
    if kernel() is not None:
        results |= {f"attention_G{g}_B{b}_S{s}": attention(b, g, s, args.repeats) for g, b, s in ((1, 16, 1024),
                                                                                                     (4, 16, 1024),
                                                                                                     (16, 16, 1024))}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, r in results.items():
        fast, slow = [v for k, v in r.items() if k.endswith("gb_s")]
        print(f"{name}: {fast:.1f} GB/s against torch's default {slow:.1f} GB/s: {r['ratio']:.2f}x")


if __name__ == "__main__":
    main()
