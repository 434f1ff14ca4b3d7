"""Speed and memory of the bit-exact reference gmm.

Prints, measured in this one run:
* dev shape (wi EP=8 shard: M=8192, K=2048, N=512, G=32): reference gmm time per accum
  recipe against a plain float32 matmul of the same FLOPs (numpy, same BLAS), as a ratio,
  on the fastest exact path this CPU has (`gmm.PARTIALS`: AMX int8 tiles, AVX512-VNNI
  int16 dot products, or float64 BLAS) and, for comparison, the default recipe on each
  slower path this CPU has (and a float64 matmul of the same FLOPs, the BLAS path's
  floor);
* dev shape: the exact tgmm and dgrad references (bf16 operands) in the same table;
* the layer-1 metrics (ULP, bound ratio, SQNR; `fp8check.totals.metric_totals`) over 10^8
  elements against one numpy pass over the same bytes (a sum of each input array);
* production shapes wi (M=65536, K=2048, N=512, G=256) and wo (K and N swapped): time and
  peak RSS of the reference gmm (standing in for a kernel's output) and of the streamed
  layer-1 metrics on it (`fp8check.totals.gmm_metric_totals`: exact reference, |A||B|, the
  deepgemm recipe and the metrics one row chunk at a time), each in a fresh subprocess so
  the peak is its own, after a call on a small problem (numba's compilation not timed).

Usage: python benchmarks/reference.py [--skip-production]
"""

from __future__ import annotations

# fp8check first: its thread settings (`fp8check.threadenv`) must precede numpy's OpenBLAS.
import fp8check  # noqa: F401

# isort: split
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


def best_of(fn, repeat=5):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def dev_table():
    from fp8check.references import amx, gmm, vnni
    from fp8check.references.gmm import PARTIALS

    lhs, rhs, gs = make_problem(**DEV)
    a = np.random.default_rng(1).standard_normal((DEV["m"], DEV["k"]), dtype=np.float32)
    b = np.random.default_rng(2).standard_normal((DEV["k"], DEV["n"]), dtype=np.float32)
    base = best_of(lambda: a @ b, repeat=7)
    print(f"dev shape {DEV}: float32 matmul of the same FLOPs {base * 1e3:.1f} ms")
    print(f"{'accum':<10} {'time ms':>9} {'ratio':>7}")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    t64 = best_of(lambda: a64 @ b64)
    print(f"{'f64 matmul':<10} {t64 * 1e3:9.1f} {t64 / base:7.2f}")
    print(f"partials: {PARTIALS}")
    for accum in ("deepgemm", "cublas", "tokamax"):
        gmm(lhs, rhs, gs, accum=accum)  # compile / warm
        t = best_of(lambda accum=accum: gmm(lhs, rhs, gs, accum=accum))
        print(f"{accum:<10} {t * 1e3:9.1f} {t / base:7.2f}")
    # The slower paths, as on a CPU without the faster ones (the same bits).
    slower = [m for m in (amx, vnni) if m.AVAILABLE][1:] + [None]
    turned_off = [m for m in (amx, vnni) if m.AVAILABLE]
    for path in slower:
        for m in turned_off:
            m.AVAILABLE = m is path
        gmm(lhs, rhs, gs)
        t = best_of(lambda: gmm(lhs, rhs, gs), repeat=3)
        label = path.STATUS if path else "float64 BLAS"
        print(f"{'deepgemm':<10} {t * 1e3:9.1f} {t / base:7.2f}  ({label} partials)")
    for m in turned_off:
        m.AVAILABLE = True
    print("target: ratio <= 2.0 for the default accum (deepgemm)")
    backward_table(a, b, gs, base)


def backward_table(a, b, gs, base):
    """The exact tgmm and dgrad (bf16 operands) per output dtype.  Their path is float64
    BLAS plus numba on every CPU (no integer-digit path): the ratio does not depend on
    AMX / VNNI.  The float32 matmul is timed again here and its faster time taken (one
    measurement of ~70 ms swings by 15% on a shared machine)."""
    from fp8check.references import dgrad, tgmm

    base = min(base, best_of(lambda: a @ b, repeat=7))
    print(f"float32 matmul, best of both measurements: {base * 1e3:.1f} ms")

    rng = np.random.default_rng(3)
    x = a.astype(ml_dtypes.bfloat16)
    dy = rng.standard_normal((DEV["m"], DEV["n"]), dtype=np.float32).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((DEV["g"], DEV["k"], DEV["n"]), dtype=np.float32)
    w = w.astype(ml_dtypes.bfloat16)
    warm = np.zeros_like(gs)
    warm[0] = 256
    tgmm(x, dy, warm)  # compile / warm
    dgrad(dy, w, warm)
    for out in (np.float64, np.float32, ml_dtypes.bfloat16):
        name = np.dtype(out).name
        for op, fn in (("tgmm", lambda out=out: tgmm(x, dy, gs, out_dtype=out)),
                       ("dgrad", lambda out=out: dgrad(dy, w, gs, out_dtype=out))):
            t = best_of(fn, repeat=3)
            print(f"{op + ' ' + name:<16} {t * 1e3:9.1f} {t / base:7.2f}")
    print("target: ratio <= 3.0 for tgmm and dgrad")


def metrics_table(n=10**8):
    from fp8check.totals import metric_totals

    rng = np.random.default_rng(4)
    exact = rng.standard_normal(n)
    out = exact.astype(np.float32)
    abs_ab = np.abs(exact) * 4.0
    metric_totals(out[:10], exact[:10], abs_ab[:10], 2048)  # compile / warm
    base = best_of(lambda: (out.sum(), exact.sum(), abs_ab.sum()))
    t = best_of(lambda: metric_totals(out, exact, abs_ab, 2048))
    print(f"metrics over {n:.0e} elements (ULP, bound ratio, SQNR): {t * 1e3:.0f} ms; one "
          f"numpy pass over the same {(out.nbytes + exact.nbytes + abs_ab.nbytes) / 2**30:.1f}"
          f" GiB {base * 1e3:.0f} ms; ratio {t / base:.2f} (target <= 2.0)")


def peak_rss_gib() -> float:
    """This process's peak resident set.  Linux's VmHWM belongs to the process image since
    exec; ru_maxrss can carry the parent's resident set over the fork (a fallback only)."""
    try:
        with open("/proc/self/status") as f:
            line = next(x for x in f if x.startswith("VmHWM:"))
        return int(line.split()[1]) / 2**20  # kB -> GiB
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def production_child(layer: str):
    from fp8check.references import gmm
    from fp8check.totals import gmm_metric_totals

    shape = PROD[layer]
    # A small problem first: numba compiles (or loads from its cache) outside the timings.
    small = make_problem(m=600, k=shape["k"], n=shape["n"], g=4)
    gmm_metric_totals(gmm(*small, accum="deepgemm"), *small, accum="deepgemm")
    t = time.perf_counter()
    lhs, rhs, gs = make_problem(**shape)
    t_make = time.perf_counter() - t
    t = time.perf_counter()
    out = gmm(lhs, rhs, gs, accum="deepgemm")  # the kernel output under test, stood in for
    t_ref = time.perf_counter() - t
    t = time.perf_counter()
    s = gmm_metric_totals(out, lhs, rhs, gs, accum="deepgemm")
    t_metrics = time.perf_counter() - t
    peak = peak_rss_gib()
    print(json.dumps({"make_s": t_make, "gmm_s": t_ref, "metrics_s": t_metrics,
                      "peak_gib": peak, "bit_exact": s.n_ref_mismatch == 0,
                      "bound_ratio_max": s.bound_ratio_max}))


def production():
    for layer, shape in PROD.items():
        out = subprocess.run([sys.executable, __file__, "--production-child", layer],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"production {layer} {shape}: inputs {r['make_s']:.1f} s, reference gmm "
              f"{r['gmm_s']:.1f} s, streamed layer-1 metrics (exact reference, |A||B|, "
              f"recipe, ULP/bound/SQNR) {r['metrics_s']:.1f} s = "
              f"{r['metrics_s'] / r['gmm_s']:.1f}x the reference gmm (target <= 3x), peak RSS "
              f"{r['peak_gib']:.2f} GiB (target < 4 GiB); bit-exact {r['bit_exact']}, "
              f"bound ratio max {r['bound_ratio_max']:.3g}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--skip-production", action="store_true")
    p.add_argument("--production-child", choices=sorted(PROD), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.production_child:
        production_child(args.production_child)
    else:
        dev_table()
        metrics_table()
        if not args.skip_production:
            production()
