"""Speed and memory of the bit-exact reference gmm.

Prints, measured in this one run:
* dev shape (wi EP=8 shard: M=8192, K=2048, N=512, G=32): reference gmm time per accum
  recipe against a plain float32 matmul of the same FLOPs (numpy, same BLAS), as a ratio;
* dev shape: the exact tgmm and dgrad references (bf16 operands) in the same table;
* production shapes wi (M=65536, K=2048, N=512, G=256) and wo (K and N swapped): time and
  peak RSS of the reference gmm plus the layer-1 metrics on its output (ULP distance,
  bound ratio, SQNR), each in a fresh subprocess so the peak is its own.

Usage: python benchmarks/reference.py [--skip-production]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import ml_dtypes
import numpy as np

DEV = dict(m=8192, k=2048, n=512, g=32)
PROD = {"wi": dict(m=65536, k=2048, n=512, g=256), "wo": dict(m=65536, k=512, n=2048, g=256)}


def make_problem(m, k, n, g, seed=0, chunk=4096):
    """Quantized operands built chunk by chunk (never a whole float32 copy of an operand)."""
    from fp8check.references import QTensor, quantize

    rng = np.random.default_rng(seed)
    vals, scales = [], []
    for r0 in range(0, m, chunk):
        q = quantize(rng.standard_normal((min(chunk, m - r0), k), dtype=np.float32))
        vals.append(q.values)
        scales.append(q.scales)
    lhs = QTensor(np.concatenate(vals), np.concatenate(scales), (1, 128), "e4m3fn", "deepgemm")
    wv, ws = [], []
    for e0 in range(0, g, 8):
        q = quantize(rng.standard_normal((min(8, g - e0), k, n), dtype=np.float32), (128, 128))
        wv.append(q.values)
        ws.append(q.scales)
    rhs = QTensor(np.concatenate(wv), np.concatenate(ws), (128, 128), "e4m3fn", "deepgemm")
    sizes = rng.multinomial(m, np.full(g, 1.0 / g)).astype(np.int32)
    return lhs, rhs, sizes


def best_of(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def dev_table():
    from fp8check.references import gmm

    lhs, rhs, gs = make_problem(**DEV)
    a = np.random.default_rng(1).standard_normal((DEV["m"], DEV["k"]), dtype=np.float32)
    b = np.random.default_rng(2).standard_normal((DEV["k"], DEV["n"]), dtype=np.float32)
    base = best_of(lambda: a @ b)
    print(f"dev shape {DEV}: float32 matmul of the same FLOPs {base * 1e3:.1f} ms")
    print(f"{'accum':<10} {'time ms':>9} {'ratio':>7}")
    for accum in ("deepgemm", "cublas", "tokamax"):
        gmm(lhs, rhs, gs, accum=accum)  # compile / warm
        t = best_of(lambda accum=accum: gmm(lhs, rhs, gs, accum=accum))
        print(f"{accum:<10} {t * 1e3:9.1f} {t / base:7.2f}")
    print("target: ratio <= 2.0 for the default accum (deepgemm)")
    from fp8check.references import dgrad, tgmm

    rng = np.random.default_rng(3)
    x = a.astype(ml_dtypes.bfloat16)
    dy = rng.standard_normal((DEV["m"], DEV["n"]), dtype=np.float32).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((DEV["g"], DEV["k"], DEV["n"]), dtype=np.float32)
    w = w.astype(ml_dtypes.bfloat16)
    for name, fn in (("tgmm", lambda: tgmm(x, dy, gs)), ("dgrad", lambda: dgrad(dy, w, gs))):
        t = best_of(fn, repeat=1)
        print(f"{name + ' exact':<10} {t * 1e3:9.1f} {t / base:7.2f}")


def production_child(layer: str):
    from fp8check import metrics
    from fp8check.references import abs_product, gmm

    shape = PROD[layer]
    t = time.perf_counter()
    lhs, rhs, gs = make_problem(**shape)
    t_make = time.perf_counter() - t
    t = time.perf_counter()
    out = gmm(lhs, rhs, gs, accum="deepgemm")
    t_ref = time.perf_counter() - t
    # The layer-1 metrics on the output, against the reference as the kernel's stand-in:
    # the exact value of a whole production GMM is not needed for their cost.
    t = time.perf_counter()
    ref64 = out.astype(np.float64)
    metrics.ulp_distance(out, out, np.float32)
    metrics.bound_ratio(ref64, ref64, abs_product(lhs, rhs, gs), shape["k"])
    metrics.sqnr_db(ref64, ref64)
    t_metrics = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    print(json.dumps({"make_s": t_make, "gmm_s": t_ref, "metrics_s": t_metrics,
                      "peak_gib": peak}))


def production():
    for layer, shape in PROD.items():
        out = subprocess.run([sys.executable, __file__, "--production-child", layer],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"production {layer} {shape}: inputs {r['make_s']:.1f} s, reference gmm "
              f"{r['gmm_s']:.1f} s, metrics {r['metrics_s']:.1f} s, peak RSS "
              f"{r['peak_gib']:.2f} GiB (target < 4 GiB)")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--skip-production", action="store_true")
    p.add_argument("--production-child", choices=sorted(PROD), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.production_child:
        production_child(args.production_child)
    else:
        dev_table()
        if not args.skip_production:
            production()
