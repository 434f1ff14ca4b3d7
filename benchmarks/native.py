"""The project's kernels compiled on native hardware, where there is some.

    python benchmarks/native.py [--quick]

* CUDA GPU: the Triton kernels compiled (benchmarks/triton_gpu.py's sweep over the paper's
  space) with TFLOP/s, padding-free vs padded speedup, memory saved, and the fraction of the
  chip's dense FP8 peak (a table of datasheet peaks by device name below).
* TPU: the Pallas FP8 and bf16 GMMs natively at the dev shape (M=8192, K=2048, N=512,
  G=32), and the FP8/bf16 speedup beside the seed's observation (1.07x-1.24x for GMM,
  against 1.81x for a bare matmul on v7x).
* Neither: says what it needs and exits 0.  Nothing CUDA- or TPU-only is imported then.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# Dense FP8 tensor-core peaks (TFLOP/s, no sparsity) from the vendors' datasheets.
FP8_PEAK_TFLOPS = {"H100": 1979.0, "H200": 1979.0, "H800": 1979.0, "H20": 296.0}


def _gpu(quick: bool) -> None:
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    import triton_gpu

    name = torch.cuda.get_device_name()
    peak = next((v for k, v in FP8_PEAK_TFLOPS.items() if k in name), None)
    print(f"device: {name}; FP8 dense peak {peak or 'unknown'} TFLOP/s")
    triton_gpu.bench(quick, peak)


def _tpu() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from fp8check.kernels.pallas import gmm_bf16, gmm_fp8, quantize_deepgemm

    m, k, n, g = 8192, 2048, 512, 32
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((m, k), dtype=np.float32))
    w = jnp.asarray(rng.standard_normal((g, k, n), dtype=np.float32))
    gs = jnp.full((g,), m // g, jnp.int32)
    xq, xs = quantize_deepgemm(x, (1, 128))
    wq, ws = quantize_deepgemm(w, (128, 128))
    runs = {"fp8": lambda: gmm_fp8(xq, xs, wq, ws, gs, interpret=False),
            "bf16": lambda: gmm_bf16(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16), gs,
                                     interpret=False)}
    times = {}
    for name, fn in runs.items():
        jax.block_until_ready(fn())
        t = time.perf_counter()
        for _ in range(20):
            out = fn()
        jax.block_until_ready(out)
        times[name] = (time.perf_counter() - t) / 20
        print(f"{name}: {times[name] * 1e3:.3f} ms, {2 * m * k * n / times[name] / 1e12:.1f} TF/s")
    print(f"FP8 / bf16 speedup {times['bf16'] / times['fp8']:.2f}x "
          f"(seed: 1.07x-1.24x for GMM, 1.81x for a bare matmul)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="GPU: a corner of the space only")
    opts = ap.parse_args()
    ran = False
    try:
        import torch

        if torch.cuda.is_available():
            _gpu(opts.quick)
            ran = True
    except ImportError:
        pass
    import jax

    if jax.default_backend() == "tpu":
        _tpu()
        ran = True
    if not ran:
        print("native.py needs a CUDA GPU (Triton kernels, sm_90) or a TPU (Pallas kernels); "
              "found neither, nothing timed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
