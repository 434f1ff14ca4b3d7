"""Padding-free vs padded Triton FP8 grouped GEMM on a CUDA GPU (the paper's space).

    python benchmarks/triton_gpu.py [--quick]

For N, K in {3072..8192}, G in {4, 8, 16, 32}, M in {8192..65536} with random M_g, times
both compiled kernels with triton.testing.do_bench and prints TFLOP/s, the padding-free
speedup over the padded baseline (the padded time includes its explicit copy) and the
memory padding costs (`padding_overhead`).  Each configuration first checks that both
agree bit for bit on the valid rows.  Without a GPU it checks one small case against the
reference under the interpreter, says that timing needs a GPU, and exits 0.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import sys

import numpy as np
import torch

import fp8check.kernels.triton as tk  # sets TRITON_INTERPRET=1 when there is no CUDA
from fp8check.inputs.testdata import GROUP_PATTERNS

SIZES_NK = (3072, 4096, 5120, 6144, 7168, 8192)
GROUPS = (4, 8, 16, 32)
SIZES_M = (8192, 16384, 32768, 65536)


def cpu_check() -> None:
    from fp8check.kernels.triton.convert import to_numpy, to_torch
    from fp8check.references import gmm, quantize

    rng = np.random.default_rng(0)
    sizes = np.array([70, 0, 57], np.int32)
    lq = quantize(rng.standard_normal((130, 256)).astype(np.float32), (1, 128))
    rq = quantize(rng.standard_normal((3, 256, 128)).astype(np.float32), (128, 128))
    args = (to_torch(lq.values), to_torch(lq.scales), to_torch(rq.values),
            to_torch(rq.scales), torch.from_numpy(sizes))
    ref = gmm(lq, rq, sizes, out_dtype=np.float32)[:127]
    for fn in (tk.gmm_fp8, tk.gmm_fp8_padded):
        out = to_numpy(fn(*args, out_dtype=torch.float32))[:127]
        if not np.array_equal(out.view(np.uint32), ref.view(np.uint32)):
            sys.exit(f"{fn.__name__}: not bit-exact to the reference on the CPU check")
    print("correctness check (interpreter, M=130 K=256 N=128 G=3): both kernels bit-exact")


def bench(quick: bool, peak_tflops: float | None = None) -> None:
    """Time the space; with `peak_tflops` also print the padding-free kernel's fraction of
    the chip's dense FP8 peak."""
    import triton.testing

    rng = np.random.default_rng(0)
    dev = "cuda"
    space = itertools.product(SIZES_NK[:2] if quick else SIZES_NK,
                              SIZES_NK[:2] if quick else SIZES_NK,
                              GROUPS[::3] if quick else GROUPS,
                              SIZES_M[:2] if quick else SIZES_M)
    print(f"{'N':>5} {'K':>5} {'G':>3} {'M':>6} {'nopad TF/s':>11} {'pad TF/s':>9} "
          f"{'speedup':>8} {'pad MiB':>8} {'saved %':>8}"
          + (f" {'% peak':>7}" if peak_tflops else ""))
    for n, k, g, m in space:
        sizes = GROUP_PATTERNS["uniform-random"](rng, m, g)
        lhs = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        ls = torch.rand(m, k // 128, device=dev) + 0.5
        rhs = torch.randn(g, k, n, device=dev).to(torch.float8_e4m3fn)
        rs = torch.rand(g, k // 128, n // 128, device=dev) + 0.5
        gs = torch.from_numpy(sizes).to(dev)
        args = (lhs, ls, rhs, rs, gs)
        a, b = tk.gmm_fp8(*args), tk.gmm_fp8_padded(*args)
        if not torch.equal(a.view(torch.int16), b.view(torch.int16)):
            sys.exit(f"N={n} K={k} G={g} M={m}: padded != padding-free")
        t_np = triton.testing.do_bench(functools.partial(tk.gmm_fp8, *args))
        t_p = triton.testing.do_bench(functools.partial(tk.gmm_fp8_padded, *args))
        flops = 2.0 * m * n * k
        extra = tk.padding_overhead(sizes, k, n)
        base = m * (k + 4 * (k // 128) + 2 * n)
        print(f"{n:>5} {k:>5} {g:>3} {m:>6} {flops / t_np / 1e9:>11.1f} "
              f"{flops / t_p / 1e9:>9.1f} {t_p / t_np:>8.3f} {extra / 2**20:>8.1f} "
              f"{100 * extra / (base + extra):>8.2f}"
              + (f" {100 * flops / t_np / 1e9 / peak_tflops:>7.1f}" if peak_tflops else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a corner of the space only")
    opts = ap.parse_args()
    if not torch.cuda.is_available():
        cpu_check()
        print("timing needs a CUDA GPU (sm_90); none found, nothing timed")
        return 0
    bench(opts.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
