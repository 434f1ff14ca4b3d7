"""Two numpy gmm-fp8 kernels under one name, for `fp8check compare`'s end-to-end test:
`accurate` (dequantize, one float32 matmul per group: correct) and `doubled`, whose error
against the exact value is twice `accurate`'s (2 x accurate - a float64 matmul of the same
operands, whose own error is ~2^-29 of accurate's): a change that doubles bound_ratio and
error_ratio while every criterion still passes."""

import numpy as np

from fp8check.contracts import KernelSpec, MatmulClaims

QB = 128


def _dequantized(lhs_q, lhs_scale, rhs_q, rhs_scale, dtype):
    a = lhs_q.astype(dtype) * np.repeat(lhs_scale, QB, axis=1).astype(dtype)
    b = rhs_q.astype(dtype) * np.repeat(np.repeat(rhs_scale, QB, axis=1), QB,
                                        axis=2).astype(dtype)
    return a, b


def _per_group(a, b, group_sizes, dtype):
    out = np.zeros((a.shape[0], b.shape[2]), dtype)
    start = 0
    for g, size in enumerate(np.asarray(group_sizes).tolist()):
        out[start:start + size] = a[start:start + size] @ b[g]
        start += size
    return out


def _accurate(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes):
    a, b = _dequantized(lhs_q, lhs_scale, rhs_q, rhs_scale, np.float32)
    return _per_group(a, b, group_sizes, np.float32)


def accurate_fn(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
    return _accurate(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes).astype(out_dtype)


def doubled_fn(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
    out = _accurate(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes).astype(np.float64)
    a, b = _dequantized(lhs_q, lhs_scale, rhs_q, rhs_scale, np.float64)
    exact = _per_group(a, b, group_sizes, np.float64)
    return (2.0 * out - exact).astype(np.float32).astype(out_dtype)


accurate = KernelSpec(name="compare-demo", contract="gmm-fp8", framework="numpy",
                      fn=accurate_fn, claims=MatmulClaims(out_dtypes=("f32",)))
doubled = KernelSpec(name="compare-demo", contract="gmm-fp8", framework="numpy",
                     fn=doubled_fn, claims=MatmulClaims(out_dtypes=("f32",)))
