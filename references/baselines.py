"""Plain grouped matmuls that are not the bit-exact references: the naive same-precision
baseline of layer 1's `error_ratio` (float32, K order, no fma) and the unquantized float64
reference of the impact question (its ~1e-16 relative error is negligible next to
quantization noise of ~1e-2)."""

from __future__ import annotations

import numba
import numpy as np

from fp8check.references.casts import to_float64


@numba.njit(parallel=True, cache=True)
def _naive_matmul(a, b):
    m, k = a.shape
    out = np.zeros((m, b.shape[1]), np.float32)
    for i in numba.prange(m):
        acc = out[i]
        for t in range(k):  # K order; the columns are independent, so this vectorizes
            x = a[i, t]
            for j in range(acc.shape[0]):
                acc[j] = acc[j] + x * b[t, j]  # RN(x * b), then RN of the sum: no fma
    return out


def naive_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The naive float32 a @ b of error_ratio: a [m, k], b [k, n] taken as float32, each
    product rounded to float32 and added to a float32 accumulator in K order (no fma).
    The same order on every machine: a BLAS sgemm's order, and so its error, depends on
    the CPU's kernel (with OpenBLAS on a Zen 4 CPU a correct Pallas kernel reached
    error_ratio 2.1 on lognormal rows against sgemm)."""
    return _naive_matmul(np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32))


def _f64_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return to_float64(a) @ to_float64(b)


# The per-group product by output dtype: the naive baseline, or the float64 reference.
_MATMULS = {np.dtype(np.float32): naive_matmul, np.dtype(np.float64): _f64_matmul}


def grouped_matmul(lhs: np.ndarray, rhs: np.ndarray, group_sizes: np.ndarray,
                   dtype: type = np.float32) -> np.ndarray:
    """Per group lhs_g @ rhs[g] in `dtype` (float32: `naive_matmul`; float64: BLAS on the
    exact float64 images); rows past the groups are 0."""
    matmul = _MATMULS[np.dtype(dtype)]
    res: np.ndarray = np.zeros((lhs.shape[0], rhs.shape[2]), dtype)
    start = 0
    for g, size in enumerate(group_sizes.tolist()):
        res[start:start + size] = matmul(lhs[start:start + size], rhs[g])
        start += size
    return res


def grouped_tmatmul(lhs: np.ndarray, dy: np.ndarray, group_sizes: np.ndarray,
                    dtype: type = np.float32) -> np.ndarray:
    """Per group lhs_g^T @ dy_g in `dtype` (as `grouped_matmul`): [G,K,N], zeros if empty."""
    matmul = _MATMULS[np.dtype(dtype)]
    res: np.ndarray = np.zeros((len(group_sizes), lhs.shape[1], dy.shape[1]), dtype)
    start = 0
    for g, size in enumerate(group_sizes.tolist()):
        res[g] = matmul(lhs[start:start + size].T, dy[start:start + size])
        start += size
    return res
