"""The GPU harness's kernels against torch's on one card, in one run (H100/H200; needs CUDA and triton).

Prints a table per section and writes every number to --out (JSON):
- bandwidth probes: copy through cudaMemcpy and through a kernel, reads through reductions;
- decode attention: SDPA in both query layouts vs the split-KV kernel over bf16/int8/fp8 caches;
- quantized GEMMs over token counts: bf16, int8 and int4 weight-only, fp8 W8A8;
- whole decode and prefill steps: eager torch vs the fused Triton step.
Bytes are the fewest each must move; rates are bytes / median time.
"""
# ruff: noqa: B023, F821 -- each timed lambda runs before its loop moves on or its tensors are deleted
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

import torch
import torch.nn.functional as F

from roofline import load_model
from validation.decoder import build_decoder
from validation.kernels.decode_attention import decode_attention, quantize_per_position
from validation.quantized import quantize
from validation.timing import time_cuda

RESULTS: dict = {}


def timed(fn, repeats=50) -> float:
    """Median seconds of a CUDA-graphed replay, after ~0.3 s of warm-up so clocks settle."""
    return time_cuda(fn, repeats, warmup=3, warmup_s=0.3).median_s


def record(section: str, key: str, **values) -> None:
    RESULTS.setdefault(section, {})[key] = values
    print(f"{section:10s} {key:45s} " + " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                for k, v in values.items()), flush=True)


def guarded(section):
    def wrap(fn):
        def run(*args, **kwargs):
            try:
                fn(*args, **kwargs)
            except Exception as err:  # one broken case must not lose the others
                record(section, f"{fn.__name__} FAILED", error=repr(err)[:300])
                traceback.print_exc()
            torch.cuda.empty_cache()
        return run
    return wrap


@guarded("bandwidth")
def bandwidth():
    n = 2**30  # 4 GiB of fp32
    src = torch.randn(n, device="cuda")
    dst = torch.empty_like(src)
    out = torch.empty((), device="cuda")
    for name, fn, moved in (("memcpy copy_ (graphed)", lambda: dst.copy_(src), 8 * n),
                            ("kernel copy (mul by 1)", lambda: torch.mul(src, 1.0, out=dst), 8 * n),
                            ("sum fp32", lambda: torch.sum(src, dim=0, out=out), 4 * n)):
        record("bandwidth", name, GBps=moved / timed(fn, 30) / 1e9)
    half = src.view(torch.bfloat16)  # 8 GiB-worth of elements as bf16: the floor's reduction
    out16 = torch.empty((), device="cuda", dtype=torch.float32)
    seconds = timed(lambda: torch.sum(half, dtype=torch.float32, out=out16), 30)
    record("bandwidth", "sum bf16 (as floor.json)", GBps=4 * n / seconds / 1e9)
    del src, dst


@guarded("attention")
def attention():
    H = 128
    for N, K in ((32, 8), (32, 32)):
        for B, S in ((1, 4096), (1, 32768), (8, 32768), (64, 4096)):
            G = N // K
            keys = torch.randn(B, K, S, H, device="cuda", dtype=torch.bfloat16)
            values = torch.randn_like(keys)
            q = torch.randn(B, N, H, device="cuda", dtype=torch.bfloat16)
            moved = 2 * keys.numel() * 2
            per_head = timed(lambda: F.scaled_dot_product_attention(q[:, :, None], keys, values, enable_gqa=G > 1))
            grouped = timed(lambda: F.scaled_dot_product_attention(q.view(B, K, G, H), keys, values))
            split = timed(lambda: decode_attention(q, keys, values, S))
            ref = F.scaled_dot_product_attention(q[:, :, None], keys, values, enable_gqa=G > 1)[:, :, 0]
            err = ((decode_attention(q, keys, values, S).float() - ref.float()).norm() / ref.float().norm()).item()
            row = {"sdpa_per_head_GBps": moved / per_head / 1e9, "sdpa_grouped_GBps": moved / grouped / 1e9,
                   "splitkv_bf16_GBps": moved / split / 1e9, "splitkv_rel_err": err}
            for dtype in (torch.int8, torch.float8_e4m3fn):
                (kq, ks), (vq, vs) = quantize_per_position(keys, dtype), quantize_per_position(values, dtype)
                t = timed(lambda: decode_attention(q, kq, vq, S, k_scale=ks, v_scale=vs))
                row[f"splitkv_{str(dtype).split('.')[-1]}_GBps"] = (2 * kq.numel() + 8 * ks.numel()) / t / 1e9
                del kq, vq, ks, vs
            record("attention", f"N={N} K={K} B={B} S={S}", **row)
            del keys, values
            torch.cuda.empty_cache()


@guarded("quantized")
def quantized():
    for (k, n) in ((4096, 4096), (4096, 22016), (11008, 4096)):
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5
        modules = {}
        for fmt in ("int8", "int4-g32", "int4-g128", "fp8"):
            try:
                modules[fmt] = quantize(w, fmt)
                x = torch.randn(5, k, device="cuda", dtype=torch.bfloat16)
                ref = x.float() @ w.float().T
                err = ((modules[fmt](x).float() - ref).norm() / ref.norm()).item()
                record("quantized", f"{k}x{n} {fmt} accuracy", rel_err_vs_bf16=err)
            except Exception as e:
                record("quantized", f"{k}x{n} {fmt} FAILED", error=repr(e)[:200])
        weight_bytes = {"bf16": 2.0, "int8": 1 + 2 / k, "int4-g32": 0.5 + 4 / 32, "int4-g128": 0.5 + 4 / 128, "fp8": 1.0}
        for m in (1, 2, 4, 8, 16, 64, 256, 1024, 4096, 8192):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            row = {}
            cases = [("bf16", lambda: F.linear(x, w))] + [(f, (lambda mod: lambda: mod(x))(mod)) for f, mod in modules.items()]
            for fmt, fn in cases:
                try:
                    t = timed(fn, 20)
                except Exception as e:
                    row[f"{fmt}_error"] = repr(e)[:80]
                    continue
                row[f"{fmt}_us"] = t * 1e6
                row[f"{fmt}_GBps"] = weight_bytes[fmt] * n * k / t / 1e9
                row[f"{fmt}_TFLOPs"] = 2 * m * n * k / t / 1e12
            record("quantized", f"{k}x{n} M={m}", **row)


@guarded("step")
def steps():
    for name in ("llama-2-7b", "llama-3-8b"):
        config = load_model(name)
        t0 = time.perf_counter()
        model = build_decoder(config, "bf16", "cuda", kernels="triton")
        built_s = time.perf_counter() - t0
        weights = sum(p.numel() for p in model.parameters()) * 2
        for B, S in ((1, 128), (1, 4096), (8, 1024), (1, 32768)):
            row = {"build_s": built_s}
            model.allocate_cache(B, S + 1)
            tokens = torch.randint(0, config.vocab_size, (B, 1), device="cuda")
            with torch.inference_mode():
                for kernels in ("torch", "triton"):
                    model.kernels = kernels
                    t = timed(lambda: model(tokens, start=S), 30)
                    kv = 2 * config.n_layers * B * config.n_kv_heads * (S + 1) * config.head_dim * 2
                    row[f"{kernels}_ms"] = t * 1e3
                    row[f"{kernels}_GBps"] = (weights + kv) / t / 1e9
                model.kernels = "torch"
                eager = model(tokens, start=S).float()
                model.kernels = "triton"
                fused = model(tokens, start=S).float()
                row["fused_vs_eager_rel_err"] = ((fused - eager).norm() / eager.norm()).item()
            record("step", f"{name} decode B={B} S={S}", **row)
            model.release_cache()
        for B, S in ((1, 128), (2, 128), (1, 2048)):
            model.allocate_cache(B, S)
            tokens = torch.randint(0, config.vocab_size, (B, S), device="cuda")
            row = {}
            with torch.inference_mode():
                for kernels in ("torch", "triton"):
                    model.kernels = kernels
                    row[f"{kernels}_graphed_ms"] = timed(lambda: model(tokens), 10) * 1e3
                    row[f"{kernels}_eager_ms"] = time_cuda(lambda: model(tokens), 10, graph=False).median_s * 1e3
            record("step", f"{name} prefill B={B} S={S}", **row)
            model.release_cache()
        del model
        torch.cuda.empty_cache()


SECTIONS = {"bandwidth": bandwidth, "attention": attention, "quantized": quantized, "step": steps}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-kernels.json")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    RESULTS["device"] = {"name": torch.cuda.get_device_name(), "torch": torch.__version__}
    for section in args.sections.split(","):
        SECTIONS[section]()
        with open(args.out, "w") as f:  # after every section: a timeout keeps what finished
            json.dump(RESULTS, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
