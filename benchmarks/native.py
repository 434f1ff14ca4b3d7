"""The project's kernels compiled on native hardware, where there is some.

    python benchmarks/native.py [--quick]

* CUDA GPU: the Triton kernels compiled (benchmarks/triton_gpu.py's sweep over the paper's
  space) with TFLOP/s, padding-free vs padded speedup, memory saved, and the fraction of the
  chip's dense FP8 peak (a table of datasheet peaks by device name below).
* TPU: the Pallas FP8 and bf16 GMMs natively at the dev shape (M=8192, K=2048, N=512,
  G=32), and the FP8/bf16 speedup beside the source design's observation (1.07x-1.24x for GMM,
  against 1.81x for a bare matmul on v7x).
* CUDA GPU, `--model-check` (also on a CPU, under the interpreter's Hopper-faithful dot,
  to exercise the script): the one measurement a GPU settles for the Hopper FP8 MMA model
  (`references.mma.HOPPER_FP8`, docs/hardware-numerics.md): the shipped FP8 GEMM's output,
  bit for bit, against `gmm(..., accum="deepgemm-hopper")` at every promotion interval,
  on data built to separate the model's readings (an outlier channel, cancellation,
  values near 448, subnormals, one sign); then each of `mma.probe_cases` through a
  one-step `tl.dot(a, b, acc)` kernel (wgmma m64n64k32 with the accumulator as C, chained
  `chain` times), printed beside what each candidate reading of the model predicts.
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


def _model_datasets(rng):
    import numpy as np

    m, k, n = 256, 512, 256
    normal = rng.standard_normal((m, k)), rng.standard_normal((3, k, n))
    outlier = normal[0].copy(), normal[1]
    outlier[0][:, 7] *= 500.0
    cancel = normal[0].copy(), normal[1].copy()
    cancel[0][:, 64:128], cancel[1][:, 64:128] = -cancel[0][:, :64], cancel[1][:, :64]
    return {"normal": normal, "outlier-channel": outlier, "cancellation": cancel,
            "one-sign": (np.abs(normal[0]), np.abs(normal[1])),
            "near-max-and-tiny": (normal[0] * np.exp(rng.uniform(-9, 0, (m, k))), normal[1])}


def probe_check(device: str) -> None:
    """Each probe case on the device (element [0, 0] of a 64x64 tile; the rest zero),
    beside the candidate readings' predictions (`mma.mma_block`)."""
    import numpy as np
    import torch
    from wgmma_probe import probe

    from fp8check.kernels.triton import interpret
    from fp8check.references.mma import HOPPER_FP8, MmaModel, mma_block, probe_cases

    readings = {"model": HOPPER_FP8, "C after": MmaModel(c_in_alignment=False),
                "floor": MmaModel(align_rounding="floor"), "14 bits": MmaModel(frac_bits=14),
                "group 16": MmaModel(group=16),
                "exact": MmaModel(frac_bits=40, rounding="rne")}
    print("probe cases (D[0,0] as float32 hex; * marks the readings the device matches)")
    for case in probe_cases():
        a = np.zeros((64, 32), np.uint8)
        b = np.zeros((32, 64), np.uint8)
        c = np.zeros((64, 64), np.float32)
        a[0], b[:, 0], c[0, 0] = case["a"][0], case["b"][:, 0], case["c"][0, 0]
        d = torch.empty((64, 64), dtype=torch.float32, device=device)
        fp8 = [torch.from_numpy(x).to(device).view(torch.float8_e4m3fn) for x in (a, b)]
        with interpret.dot_model("hopper"):  # a no-op when the kernel runs compiled
            probe[(1,)](*fp8, torch.from_numpy(c).to(device), d, CHAIN=case["chain"])
        got = d.cpu().numpy()[0, 0]
        cells = []
        for name, model in readings.items():
            want = case["c"]
            for _ in range(case["chain"]):
                want = mma_block(case["a"], case["b"], want, model=model)
            mark = "*" if want[0, 0].view(np.uint32) == got.view(np.uint32) else " "
            cells.append(f"{name} {float(want[0, 0]).hex()}{mark}")
        print(f"  {case['name']:18s} device {float(got).hex():22s} " + "  ".join(cells))


def model_check() -> int:
    sys.path.insert(0, str(Path(__file__).parent))
    """Mismatches of the FP8 GEMM against the Hopper model (module docstring); returns the
    total count, 0 when the model holds on this device."""
    import contextlib

    import numpy as np
    import torch

    import fp8check.kernels.triton as tk
    from fp8check.kernels.triton import fidelity, interpret
    from fp8check.references import gmm, quantize

    device = "cuda" if torch.cuda.is_available() else "cpu"
    where = "CPU (the interpreter: exercises the script only)"
    if device == "cuda":
        where = torch.cuda.get_device_name()
    else:
        fidelity.probe_fidelity()
    print(f"Hopper model check on {where}")
    gs = np.array([100, 0, 156], np.int32)
    total = 0

    def t(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    for name, (x, w) in _model_datasets(np.random.default_rng(0)).items():
        lq = quantize(x.astype(np.float32), (1, 128))
        rq = quantize(w.astype(np.float32), (128, 128))
        fp8 = [t(q.values.view(np.uint8)).view(torch.float8_e4m3fn) for q in (lq, rq)]
        for interval in (None, 32, 64, 128):
            ctx = (contextlib.nullcontext() if device == "cuda"
                   else interpret.dot_model("hopper"))
            with ctx:
                out = tk.gmm_fp8(fp8[0], t(lq.scales), fp8[1], t(rq.scales), t(gs),
                                 out_dtype=torch.float32, max_num_imprecise_acc=interval)
            got = out.cpu().numpy()[:256]
            want = gmm(lq, rq, gs, accum="deepgemm-hopper", interval=interval or 128)[:256]
            bad = int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))
            total += bad
            print(f"  {name:18s} interval {interval or 'default':>7}: {bad} of {got.size} "
                  f"outputs differ from the model")
    print(f"model check: {total} mismatches")
    probe_check(device)
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="GPU: a corner of the space only")
    ap.add_argument("--model-check", action="store_true",
                    help="the Hopper FP8 MMA model against the tensor core, bit for bit")
    opts = ap.parse_args()
    if opts.model_check:
        return 1 if model_check() else 0
    ran = False
    try:
        import torch

        if torch.cuda.is_available():
            _gpu(opts.quick)
            ran = True
    except ImportError:
        pass
    import fp8check  # noqa: F401  (fills in jax's environment before jax starts: jaxenv)

    # isort: split
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
