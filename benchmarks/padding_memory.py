"""The memory that padding costs, over the space of arXiv 2508.16584 (TMA-Adaptive FP8
Grouped GEMM), computed with `padding_overhead` (no GPU needed: it is arithmetic on the
layouts).

Space: N, K in {3072, 4096, 5120, 6144, 7168, 8192}; groups in {4, 8, 16, 32}; M in
{8192, 16384, 32768, 65536}; M_g random: `fp8check.inputs.testdata`' "uniform-random" split of
M into G parts, 5 draws per point, fixed seed.

Two views of "saved", both layout arithmetic (not a measurement):
* rows: the padding rows alone (`padding_overhead`) over the padded layout's bytes: lhs
  fp8 [M_pad, K] + float32 scales + bf16 output [M_pad, N] + fp8 weights [G, K, N] + scales;
* peak: the baseline's explicit padded copies (lhs, scales and output at M_pad rows, made
  because DeepGEMM's contiguous layout needs them, beside the caller's unpadded tensors)
  over the baseline's peak, which is what the padding-free kernel does not allocate.
The paper reports "up to 23.8%" for memory measured end to end on H800.
"""

from __future__ import annotations

import itertools

import numpy as np

from fp8check.inputs.testdata import GROUP_PATTERNS
from fp8check.kernels.triton import padding_overhead

NK = (3072, 4096, 5120, 6144, 7168, 8192)
GROUPS = (4, 8, 16, 32)
MS = (8192, 16384, 32768, 65536)
BLOCK_M = 128


def weight_bytes(k: int, n: int, g: int) -> int:
    return g * (k * n + 4 * (-(-k // 128)) * (-(-n // 128)))


def activation_bytes(m_rows: int, k: int, n: int) -> int:
    return m_rows * (k + 4 * (-(-k // 128)) + 2 * n)


def main() -> None:
    rng = np.random.default_rng(2508_16584)
    rows = []
    for n, k, g, m in itertools.product(NK, NK, GROUPS, MS):
        for _ in range(5):
            sizes = GROUP_PATTERNS["uniform-random"](rng, m, g).astype(np.int64)
            pad = padding_overhead(sizes, k, n, BLOCK_M)
            m_pad = int((-(-sizes // BLOCK_M) * BLOCK_M).sum())
            w = weight_bytes(k, n, g)
            rows_frac = pad / (activation_bytes(m_pad, k, n) + w)
            copies = activation_bytes(m_pad, k, n)
            peak_frac = copies / (activation_bytes(m, k, n) + copies + w)
            rows.append((g, m, pad, rows_frac, peak_frac))
    print(f"{len(rows)} configurations ({len(rows) // 5} points x 5 random splits)")
    print(f"{'groups':>6} {'M':>6} {'pad MiB':>8} {'rows % min':>11} {'max':>6} "
          f"{'peak % min':>11} {'max':>6}")
    for g, m in itertools.product(GROUPS, MS):
        sel = np.array([r[2:] for r in rows if r[0] == g and r[1] == m])
        print(f"{g:6d} {m:6d} {sel[:, 0].mean() / 2**20:8.1f} {sel[:, 1].min() * 100:11.2f} "
              f"{sel[:, 1].max() * 100:6.2f} {sel[:, 2].min() * 100:11.2f} "
              f"{sel[:, 2].max() * 100:6.2f}")
    a = np.array([r[3:] for r in rows]) * 100
    print(f"saved, padding rows only: {a[:, 0].min():.2f}% .. {a[:, 0].max():.2f}%; "
          f"saved, baseline's padded copies at peak: {a[:, 1].min():.2f}% .. "
          f"{a[:, 1].max():.2f}%  (paper: up to 23.8%, measured end to end on H800)")


if __name__ == "__main__":
    main()
