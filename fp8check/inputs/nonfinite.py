"""NaN and +-Inf planted in a case's operands: the `nonfinite` value class of the suites.

`plant(x, w, dy, group_sizes)` writes, into normal float32 operands x [M, K], w [G, K, N],
dy [M, N], non-finite values at positions chosen from the group sizes, so that every
contract meets each way a non-finite input reaches an output (docs/contract.md,
"Non-finite inputs").  With group A the first group of at least 3 rows (rows a0, a1, a2)
and group B the last other group of at least 2 rows (rows b0, b1):

=======================  ===================================================================
x[a0, KI] = +Inf         gmm row a0: +-Inf (sign of w[A, KI, j]), NaN at column N_ZERO where
                         w[A, KI, N_ZERO] = 0 (Inf * 0)
x[a1, KP] = +Inf,        gmm row a1: NaN where w[A, KP, j] and w[A, KM, j] have the same sign
x[a1, KM] = -Inf         (Inf - Inf), +-Inf where they differ
x[a2, KN] = NaN          gmm row a2: NaN
w[B, KW1, N_INF] = -Inf  gmm column N_INF of B's rows: +-Inf, NaN in row b0 (x[b0, KW1] = 0)
w[B, KW2, N_NAN] = NaN   gmm column N_NAN of B's rows: NaN
dy[b0, N_DINF] = +Inf    tgmm dW[B, :, N_DINF]: +-Inf, NaN at row KW1 (x[b0, KW1] = 0)
dy[b1, N_DNAN] = NaN     tgmm dW[B, :, N_DNAN]: NaN
=======================  ===================================================================

and x's entries above reach tgmm's dW[A, KI | KP | KM | KN, :].  Rows past
sum(group_sizes) get x = NaN and dy = +Inf, an empty group's w gets NaN: no kernel may
read them, so they must reach nothing.  Every other output element stays finite, next to
the non-finite ones (the same rows, columns and tiles): a kernel that spreads a NaN is
caught there, one that masks it where the reference is non-finite.

Under blockwise quantization (`quantize(..., nan="propagate")`) each planted value makes
its whole block non-finite (`docs/contract.md`), so gmm-fp8 sees NaN across rows and 128
wide column tiles; the quantizer contract sees the blocks themselves.
"""

from __future__ import annotations

import numpy as np

from fp8check.references.quant import BLOCK

# K positions (one per 128-wide K block where K >= 512) and N positions (in different 128
# wide N tiles where N >= 256), fixed so that the propagation table above holds.
KI, KP, KM, KN = 3, BLOCK + 72, 2 * BLOCK + 44, 3 * BLOCK + 17
KW1, KW2 = BLOCK + 5, 2 * BLOCK + 100
N_ZERO, N_INF, N_DINF = 7, BLOCK + 2, 64
MIN_K, MIN_N = 4 * BLOCK, 2 * BLOCK


def _n_nan(n: int) -> int:
    return n - 3  # the last N tile


def _n_dnan(n: int) -> int:
    return n - 100


def plant(x: np.ndarray, w: np.ndarray, dy: np.ndarray, group_sizes: np.ndarray) -> None:
    """Write the module's non-finite values into x [M, K], w [G, K, N], dy [M, N] (float32,
    in place).  ValueError when K < 512, N < 256 or the groups lack the rows it needs."""
    m, k = x.shape
    n = w.shape[2]
    if k < MIN_K or n < MIN_N:
        raise ValueError(f"nonfinite inputs need K >= {MIN_K} and N >= {MIN_N}, got {k}, {n}")
    gs = np.asarray(group_sizes, np.int64)
    offs = np.concatenate([[0], np.cumsum(gs)])
    big = [g for g in range(gs.size) if gs[g] >= 3]
    if not big:
        raise ValueError(f"nonfinite inputs need a group of >= 3 rows, got {gs.tolist()}")
    a = big[0]
    others = [g for g in range(gs.size) if gs[g] >= 2 and g != a]
    if not others:
        raise ValueError(f"nonfinite inputs need two groups of >= 2 rows, got {gs.tolist()}")
    b = others[-1]
    a0, b0 = int(offs[a]), int(offs[b])
    x[a0, KI] = np.inf
    w[a, KI, N_ZERO] = 0.0
    x[a0 + 1, KP], x[a0 + 1, KM] = np.inf, -np.inf
    x[a0 + 2, KN] = np.nan
    w[b, KW1, N_INF] = -np.inf
    x[b0, KW1] = 0.0
    w[b, KW2, _n_nan(n)] = np.nan
    dy[b0, N_DINF] = np.inf
    dy[b0 + 1, _n_dnan(n)] = np.nan
    rows = int(offs[-1])
    if rows < m:  # rows no group reads
        x[rows:, KN] = np.nan
        dy[rows:, N_DINF] = np.inf
    for g in np.flatnonzero(gs == 0):  # weights no row reads
        w[g, KI, N_ZERO] = np.nan
