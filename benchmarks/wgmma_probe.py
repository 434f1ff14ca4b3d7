"""One FP8 wgmma step per `tl.dot`, with the accumulator as C: the kernel behind
`benchmarks/native.py --model-check`'s probe cases.  Compiled for sm_90a it is a single
`wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3` per step (tests/test_native_hopper.py
checks that, without a GPU)."""

import fp8check.kernels.triton  # noqa: F401  (chooses interpret mode before triton loads)

# isort: split
import triton
import triton.language as tl


@triton.jit
def probe(a_ptr, b_ptr, c_ptr, d_ptr, CHAIN: tl.constexpr):
    """d = CHAIN chained steps acc = dot(a, b, acc) from acc = c: a [64, 32] and b [32, 64]
    e4m3, c and d [64, 64] float32, row-major."""
    r64, r32 = tl.arange(0, 64), tl.arange(0, 32)
    a = tl.load(a_ptr + r64[:, None] * 32 + r32[None, :])
    b = tl.load(b_ptr + r32[:, None] * 64 + r64[None, :])
    acc = tl.load(c_ptr + r64[:, None] * 64 + r64[None, :])
    for _ in tl.static_range(CHAIN):
        acc = tl.dot(a, b, acc)
    tl.store(d_ptr + r64[:, None] * 64 + r64[None, :], acc)
