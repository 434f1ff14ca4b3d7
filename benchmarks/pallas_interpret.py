"""Wall time of the Pallas gmm_fp8 and gmm_bf16 kernels in interpret mode, per tiling.

Shape: the dev shard (M=8192, G=32, wi K=2048 N=512 / wo K=512 N=2048) with M and G scaled
down by --scale (default 16: M=512, G=2), uniform group sizes.  Interpret-mode time is the
CPU emulator's, NOT TPU time: it only shows that every tiling runs and how the grid size
drives the emulation cost.

    .venv/bin/python benchmarks/pallas_interpret.py [--scale 16] [--repeats 2]
"""

from __future__ import annotations

import argparse
import time

import jax
import ml_dtypes
import numpy as np

from fp8check.kernels.pallas import TILINGS, gmm_bf16, gmm_fp8
from fp8check.kernels.pallas.tiling import PRODUCTION_SHAPES, resolve_tiling
from fp8check.references import quantize


def _best_time(fn, repeats: int) -> float:
    jax.block_until_ready(fn())  # compile and warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=16, help="divide the dev M and G by this")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("Pallas interpret mode on CPU -- interpret-mode wall time is NOT TPU time.")
    print(f"{'layer':6} {'M':>5} {'K':>5} {'N':>5} {'G':>3} {'tiling':>18} {'sk':>3} "
          f"{'fp8 s':>8} {'bf16 s':>8}")
    for layer in ("wi", "wo"):
        s = PRODUCTION_SHAPES[f"{layer}-dev"]
        m, k, n, g = s["m"] // args.scale, s["k"], s["n"], max(1, s["g"] // args.scale)
        sizes = np.full(g, m // g, np.int32)
        x = rng.standard_normal((m, k)).astype(np.float32)
        w = rng.standard_normal((g, k, n)).astype(np.float32)
        xq, wq = quantize(x, (1, 128)), quantize(w, (128, 128))
        x16, w16 = x.astype(ml_dtypes.bfloat16), w.astype(ml_dtypes.bfloat16)
        for tiling in sorted({tuple(t["fwd"]) for t in TILINGS.values()} | {(128, 128, 128)}):
            fp8_args = (xq.values, xq.scales, wq.values, wq.scales, sizes)
            fp8 = _best_time(lambda a=fp8_args, t=tiling: gmm_fp8(*a, tiling=t, interpret=True),
                             args.repeats)
            bf16_args = (x16, w16, sizes)
            bf16 = _best_time(lambda a=bf16_args, t=tiling: gmm_bf16(*a, tiling=t,
                                                                     interpret=True),
                              args.repeats)
            used = resolve_tiling("fwd", tiling, m=m, k=k, n=n, in_dtype=ml_dtypes.float8_e4m3fn,
                                  out_dtype=ml_dtypes.bfloat16)  # as clamped to the problem
            print(f"{layer:6} {m:5} {k:5} {n:5} {g:3} {str(tuple(used)):>18} "
                  f"{used.num_subchannels:3} "
                  f"{fp8:8.3f} {bf16:8.3f}")


if __name__ == "__main__":
    main()
