"""Speed and memory of the bit-exact reference gmm.

Prints, measured in this one run, the CPU's relevant flags and then:
* dev shape (wi EP=8 shard: M=8192, K=2048, N=512, G=32): reference gmm time per accum
  recipe against a plain float32 matmul of the same FLOPs (numpy, same BLAS) timed
  alternately with it, as a ratio beside its target (issue 40) and the path that ran:
  the fastest exact path this CPU has (`gmm.PARTIALS`: AMX int8 tiles, AVX512-VNNI int16
  dot products, or float64 BLAS) and, for comparison, the default recipe on each slower
  path this CPU has (and a float64 matmul of the same FLOPs, the BLAS path's floor); the
  tensor-core models (deepgemm-hopper, deepgemm-blackwell);
* dev shape: the exact tgmm and dgrad references (bf16 operands) in the same table, with
  the path that ran (AMX int8 tiles or float64 BLAS splits);
* the layer-1 metrics (ULP, bound ratio, SQNR; `fp8check.measures.totals.metric_totals`) over 10^8
  elements against one numpy pass over the same bytes (a sum of each input array);
* production shapes wi (M=65536, K=2048, N=512, G=256) and wo (K and N swapped): the time
  of the reference gmm (standing in for a kernel's output) and of the streamed layer-1
  metrics on it (`fp8check.measures.totals.gmm_metric_totals`: the recipe, exact value and
  |A||B| from one pass per row chunk, `references.forward_refs`, with the metrics summed
  per row in that pass), each the best of its first call and six more timed back to back
  with itself (`in_a_row`), their ratio beside its target (<= 2.0x), where one more
  call's time goes (the pass, the rest of the reduction: `gmm_metric_totals(seconds=)`),
  and
  the check's memory beyond its inputs (the peak resident set during its first call minus
  the resident set holding the operands and output; target <= 1 GiB), each shape in a
  fresh subprocess, after a call on a small problem (numba's compilation not timed).

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


def in_a_row(fns, rounds=2, repeat=3):
    """The best time of each of `fns`, each called `repeat` times in a row, the fns in turn,
    `rounds` times.  For calls whose first run after a different call is slowed by what
    that call left behind: at the production shapes the reference gmm right after a check
    took 1.5-1.8 s against 0.62-0.74 s after another gmm (wo, Zen 4: the pages of its
    512 MiB output; the check's allocations had freed others), so timing the two
    alternately flattered the check's ratio (wo printed 1.6x where back to back gives
    3.5-4.5x)."""
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, t in zip(fns, times, strict=True):
            t.extend(best_of(fn, 1) for _ in range(repeat))
    return [min(t) for t in times]


def best_of(fn, repeat=5):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def against(fn, base_fn, repeat):
    """(best time of fn, best time of base_fn), the two timed alternately in this process,
    each best of `repeat`: a machine shared with other work slows both alike."""
    t, base = [], []
    for _ in range(repeat):
        base.append(best_of(base_fn, 1))
        t.append(best_of(fn, 1))
    return min(t), min(base)


CPU_FLAGS = ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512vbmi", "avx512_vnni",
             "amx_tile", "amx_int8", "amx_bf16")


def row(label, fn, base_fn, target, path, repeat=3):
    """One table line: time, ratio to the float32 matmul measured beside it, the target
    and the path that ran."""
    fn()  # compile / warm
    t, base = against(fn, base_fn, repeat)
    verdict = "" if target is None else (f"<= {target:.1f} " +
                                         ("met" if t / base <= target else "NOT met"))
    print(f"{label:<24} {t * 1e3:9.1f} {base * 1e3:8.1f} {t / base:7.2f}  {verdict:<14} {path}")


def dev_table():
    from fp8check.references import amx, cbuild, gmm, mma, vnni
    from fp8check.references.gmm import PARTIALS, TENSOR_CORE_ACCUMS

    flags = cbuild.cpu_flags()
    print("CPU flags: " + " ".join(f"{f}{'+' if f in flags else '-'}" for f in CPU_FLAGS))
    lhs, rhs, gs = make_problem(**DEV)
    a = np.random.default_rng(1).standard_normal((DEV["m"], DEV["k"]), dtype=np.float32)
    b = np.random.default_rng(2).standard_normal((DEV["k"], DEV["n"]), dtype=np.float32)

    def f32():
        return a @ b

    print(f"dev shape {DEV}; each ratio against a float32 matmul of the same FLOPs timed "
          "alternately with it (f32 ms)")
    print(f"{'what':<24} {'time ms':>9} {'f32 ms':>8} {'ratio':>7}  {'target':<14} path")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    row("f64 matmul", lambda: a64 @ b64, f32, None, "numpy BLAS (the BLAS paths' floor)")
    for accum in ("deepgemm", "cublas", "tokamax"):
        row(f"gmm {accum}", lambda accum=accum: gmm(lhs, rhs, gs, accum=accum), f32, 1.0,
            PARTIALS)
    row("gmm exact (float64)", lambda: gmm(lhs, rhs, gs, np.float64, "exact"), f32, None,
        f"{PARTIALS} partials, certified float64 sums")
    # The slower paths, as on a CPU without the faster ones (the same bits).
    on = [m for m in (amx, vnni) if m.AVAILABLE]
    for path in on[1:] + [None]:
        for m in on:
            m.AVAILABLE = m is path
        row("gmm deepgemm", lambda: gmm(lhs, rhs, gs), f32, 1.0,
            f"{path.STATUS if path else 'float64 BLAS'} (as on a CPU without the faster ones)")
    for m in on:
        m.AVAILABLE = True
    for accum, target in TENSOR_CORE_ACCUMS.items():
        model = mma.mma_model(target)
        kind = mma._c_model_kind(model, "e4m3fn", "e4m3fn")
        exact = (", steps losing no bit as exact float64 sums"
                 if kind == 1 and mma.EXACT_ROUTE else "")
        path = (f"C row kernel, recipe fused (mma.deepgemm_gmm, mma_rows.c{exact})"
                if kind is not None
                else f"numba row kernel per block + numba recipe (C row kernel: {mma.ROWS_STATUS})")
        row(f"gmm {accum}", lambda accum=accum: gmm(lhs, rhs, gs, accum=accum), f32, 5.0, path,
            repeat=1 if "numba" in path else 3)
    backward_table(a, gs, f32)


def backward_table(a, gs, f32):
    """The exact tgmm and dgrad (bf16 operands) per output dtype, through the exact matmul
    (`references.matmul`): on the CPU's integer dot products where it has them
    (`bf16_matmul`: AMX int8 tiles, else AVX512-VNNI int16 dot products; the windowed
    product in integer digits, the residuals' exact correction and one rounding fused in
    C), else float64 BLAS on split operands with certified rounding; and the default
    output (float32) on each slower path this CPU runs, as on CPUs without the faster
    ones (the same bits)."""
    from fp8check.references import bf16_matmul, dgrad, tgmm

    rng = np.random.default_rng(3)
    x = a.astype(ml_dtypes.bfloat16)
    dy = rng.standard_normal((DEV["m"], DEV["n"]), dtype=np.float32).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((DEV["g"], DEV["k"], DEV["n"]), dtype=np.float32)
    w = w.astype(ml_dtypes.bfloat16)
    blas = "exact_matmul: float64 BLAS splits"

    def path(status):
        return (f"exact_matmul: {status} kernel, fused exact correction"
                if status in bf16_matmul.KERNELS else f"{blas} (integer bf16 {status})")

    for out in (np.float64, np.float32, ml_dtypes.bfloat16):
        name = np.dtype(out).name
        row(f"tgmm {name}", lambda out=out: tgmm(x, dy, gs, out_dtype=out), f32, 2.0,
            path(bf16_matmul.STATUS))
        row(f"dgrad {name}", lambda out=out: dgrad(dy, w, gs, out_dtype=out), f32, 2.0,
            path(bf16_matmul.STATUS))
    slower = [k for k, (lib, _) in bf16_matmul.KERNELS.items()
              if lib is not None and k != bf16_matmul.STATUS]
    if bf16_matmul.AVAILABLE:
        slower.append(None)
    for kernel in slower:
        with bf16_matmul.kernel(kernel):
            note = f"{path(bf16_matmul.STATUS)} (as on a CPU without the faster ones)"
            row("tgmm float32", lambda: tgmm(x, dy, gs), f32, 2.0, note)
            row("dgrad float32", lambda: dgrad(dy, w, gs), f32, 2.0, note)


def metrics_table(n=10**8):
    from fp8check.measures.totals import metric_totals

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


def _status_gib(field: str) -> float:
    """A size field of /proc/self/status (VmRSS, VmHWM) in GiB."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith(field + ":"))
    return int(line.split()[1]) / 2**20  # kB -> GiB


def reset_peak_rss() -> bool:
    """Start this process's peak resident set (VmHWM) afresh from its current size, where
    Linux allows it (writing 5 to /proc/self/clear_refs); False where it does not."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_gib() -> float:
    """This process's peak resident set.  Linux's VmHWM belongs to the process image since
    exec (or the last `reset_peak_rss`); ru_maxrss can carry the parent's resident set
    over the fork (a fallback only)."""
    try:
        return _status_gib("VmHWM")
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


PRODUCTION_TARGET = 2.0  # the streamed check's time over the reference gmm's (issue 40)
PRODUCTION_MEMORY_GIB = 1.0  # its peak resident set beyond its inputs (issue 40)


def production_child(layer: str):
    from fp8check.measures.totals import gmm_metric_totals
    from fp8check.references import gmm

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
    # "Beyond the inputs": the peak resident set during the check minus the resident set
    # holding its inputs (operands and output), with the peak restarted there.
    reset = reset_peak_rss()
    base = _status_gib("VmRSS")
    t = time.perf_counter()
    s = gmm_metric_totals(out, lhs, rhs, gs, accum="deepgemm")
    t_metrics = time.perf_counter() - t
    beyond = peak_rss_gib() - base
    t_ref_again, t_again = in_a_row([lambda: gmm(lhs, rhs, gs, accum="deepgemm"),
                                     lambda: gmm_metric_totals(out, lhs, rhs, gs,
                                                               accum="deepgemm")])
    phases: dict[str, float] = {}  # one more call, its phases timed
    gmm_metric_totals(out, lhs, rhs, gs, accum="deepgemm", seconds=phases)
    print(json.dumps({"make_s": t_make, "gmm_s": min(t_ref, t_ref_again),
                      "metrics_s": min(t_metrics, t_again), "phases": phases,
                      "beyond_gib": beyond,
                      "peak_reset": reset,
                      "inputs_gib": base, "bit_exact": s.n_ref_mismatch == 0,
                      "bound_ratio_max": s.bound_ratio_max}))


def production():
    from fp8check.references.gmm import PARTIALS

    for layer, shape in PROD.items():
        out = subprocess.run([sys.executable, __file__, "--production-child", layer],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        ratio, mem = r["metrics_s"] / r["gmm_s"], r["beyond_gib"]
        how = ("peak RSS since the inputs were built" if r["peak_reset"]
               else "process peak RSS (could not restart it: an overestimate)")
        print(f"production {layer} {shape}: inputs {r['make_s']:.1f} s, reference gmm "
              f"{r['gmm_s']:.1f} s ({PARTIALS}), streamed layer-1 metrics (exact "
              f"reference, |A||B|, recipe, ULP/bound/SQNR) {r['metrics_s']:.1f} s = "
              f"{ratio:.1f}x the reference gmm (target <= {PRODUCTION_TARGET:.1f}x "
              f"{'met' if ratio <= PRODUCTION_TARGET else 'NOT met'}; in one more call, "
              f"the references' pass with the metrics summed in it "
              f"{r['phases']['references']:.2f} s and the rest of the reduction "
              f"{r['phases']['metrics']:.2f} s); memory beyond the "
              f"inputs ({r['inputs_gib']:.2f} GiB resident) {mem:.2f} GiB, {how} (target <= "
              f"{PRODUCTION_MEMORY_GIB:.0f} GiB "
              f"{'met' if mem <= PRODUCTION_MEMORY_GIB else 'NOT met'}); bit-exact "
              f"{r['bit_exact']}, bound ratio max {r['bound_ratio_max']:.3g}")


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
