"""A rigorous error bound for a kernel whose FP8 dots run on the Hopper tensor core
(`hopper_mma`): how far the tensor core's block partial may be from the exact one.

The model (`hopper_mma.HOPPER_FP8`), one k32 step for one output element: the terms are
the step's products p_k = a_k b_k and the incoming accumulator C.  E is the largest
unnormalised product exponent e_a + e_b of the nonzero products and floor(log2 |C|) when
C != 0; every term is cut to the grid g = 2^(E - f) (f = frac_bits) toward zero (or to
nearest), the cut terms are summed exactly into S', and S' is cut to f_out fraction bits
(f_out = the model's out_bits) toward zero (or to nearest): D.

Theorem.  With S = C + sum_k p_k the exact value of the step's inputs, n the number of
nonzero products and c = 1 if C != 0 else 0,

    |D - S| <= (n + c) g + 2^-f_out (sum_k |p_k| + |C| + (n + c) g).

Proof.  Cutting a term to a multiple of g moves it by less than g (toward zero or to
nearest alike), and zero terms do not move, so |S' - S| < (n + c) g.  Cutting S' to f_out
fraction bits moves it by less than one unit of its binade, 2^(floor(log2|S'|) - f_out)
<= 2^-f_out |S'|, and |S'| <= |S| + (n + c) g <= sum |p_k| + |C| + (n + c) g.  Add. QED.

A chain of steps from C = 0 (a 128-wide block in DeepGEMM's scheme, or each
`max_num_imprecise_acc` elements in Triton's) adds the steps' bounds: each step's exact
value includes the previous step's D, so the chain's error is the sum of the steps'
errors.  The bound needs |C| and C's exponent, which depend on the data through the
previous steps; both are bounded by cmag = sum over previous steps of (sum |p_k| + the
step's bound) >= |D_prev|, and floor(log2 |C|) <= floor(log2 cmag), so using cmag only
widens g and the bound: still rigorous.  This is an a-priori bound in the sense of
Higham's: it depends on the operands (their exponents and |a||b|), never on the kernel's
output, and holds for every kernel with this accumulator and these steps.

In a blockwise GEMM the block partial P_b is multiplied by s_a s_b, so the output's
truncation error is at most sum_b |s_a s_b| T_b, `truncation_term`; the float32 work
around the tensor core (the scale products, the promotion fma, the adds of Triton's
partials) is covered by the float32 term of `metrics.bound_ratio`.  The model keeps
float32's exponent range; like `bound_ratio` the bound assumes no term falls below
2^-126, which the gate's data never approaches.
"""

from __future__ import annotations

import math

import ml_dtypes
import numba
import numpy as np

from fp8check.references.hopper_mma import HOPPER_FP8, MmaModel

_NONE = -(1 << 20)  # exponent of a zero operand: its products never set E
_BIAS = {"e4m3fn": (3, 7, ml_dtypes.float8_e4m3fn), "e5m2": (2, 15, ml_dtypes.float8_e5m2)}


def _operand_tables(fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Per code 0..255: the model's exponent max(field, 1) - bias (`_NONE` for zero and
    non-finite codes) and |value| (float64, 0 for non-finite: the finite criterion, not
    the bound, judges NaN and Inf)."""
    fbits, bias, dtype = _BIAS[fmt]
    code = np.arange(256)
    field = (code >> fbits) & ((1 << (7 - fbits)) - 1)
    value = code.astype(np.uint8).view(dtype).astype(np.float64)
    finite = np.isfinite(value)
    exp = np.where((value != 0) & finite, np.maximum(field, 1) - bias, _NONE)
    return exp.astype(np.int64), np.where(finite, np.abs(value), 0.0)


@numba.njit(parallel=True, cache=True)
def _bounds(a, b, exp, mag, k0, width, group, frac, out_frac, out):
    """out[i, j] = the chain bound (module docstring) of the K range [k0, k0 + width)."""
    m, n = out.shape
    g_unit = 2.0 ** -frac
    n_unit = 2.0 ** -out_frac
    for i in numba.prange(m):
        for j in range(n):
            cmag = 0.0
            total = 0.0
            for s0 in range(k0, k0 + width, group):
                emax = _NONE
                nnz = 0
                sabs = 0.0
                for k in range(s0, s0 + group):
                    ea = exp[a[i, k]]
                    eb = exp[b[k, j]]
                    if ea == _NONE or eb == _NONE:
                        continue
                    nnz += 1
                    emax = max(emax, ea + eb)
                    sabs += mag[a[i, k]] * mag[b[k, j]]
                c = 0
                if cmag > 0.0:
                    c = 1
                    emax = max(emax, math.floor(math.log2(cmag)))
                if nnz + c == 0:
                    continue
                align = (nnz + c) * g_unit * 2.0 ** emax
                step = align + n_unit * (sabs + cmag + align)
                total += step
                cmag += sabs + step
            out[i, j] = total


def chain_bound(a_codes: np.ndarray, b_codes: np.ndarray, *, interval: int = 128,
                model: MmaModel = HOPPER_FP8, fmt: str = "e4m3fn") -> np.ndarray:
    """Bound [KB, M, N] float64 on |P_model - P| for each 128-wide K block of
    a_codes [M, K] @ b_codes [K, N] (uint8 FP8 codes, K a multiple of 128), when the tensor
    core chains `interval` elements from C = 0 (a multiple of the model's group dividing
    128) and the chains' partials are added exactly (their float32 adds are the float32
    bound's).  Non-finite codes count as zero here."""
    if fmt not in _BIAS:
        raise ValueError(f"fmt must be one of {tuple(_BIAS)}, got {fmt!r}")
    a, b = np.ascontiguousarray(a_codes, np.uint8), np.ascontiguousarray(b_codes, np.uint8)
    (m, k), n = a.shape, b.shape[1]
    if b.shape[0] != k or k % 128:
        raise ValueError(f"need a [M, K] and b [K, N] with K a multiple of 128, got "
                         f"{a.shape} and {b.shape}")
    if interval % model.group or 128 % interval:
        raise ValueError(f"interval {interval} must be a multiple of {model.group} "
                         f"dividing 128")
    exp, mag = _operand_tables(fmt)
    out = np.zeros((k // 128, m, n))
    part = np.empty((m, n))
    for blk in range(k // 128):
        for k0 in range(blk * 128, (blk + 1) * 128, interval):
            _bounds(a, b, exp, mag, k0, interval, model.group, model.frac_bits,
                    model.out_bits, part)
            out[blk] += part
    return out


def truncation_term(lhs, rhs, group_sizes, *, interval: int = 128,
                    model: MmaModel = HOPPER_FP8) -> np.ndarray:
    """[M, N] float64: sum over K blocks of |s_a s_b| times `chain_bound`, the most the
    tensor core's truncation can move a blockwise-FP8 grouped matmul's output (rows of
    group g of lhs against rhs[g]; rows past the groups are 0).  lhs [M, K] and rhs
    [G, K, N] are `references.quant.QTensor`s with (1, 128) and (128, 128) blocks."""
    gs = np.asarray(group_sizes, np.int64)
    m, n = lhs.values.shape[0], rhs.values.shape[2]
    out = np.zeros((m, n))
    start = 0
    for g, size in enumerate(gs.tolist()):
        if size:
            rows = slice(start, start + size)
            t = chain_bound(lhs.values[rows].view(np.uint8), rhs.values[g].view(np.uint8),
                            interval=interval, model=model, fmt=lhs.fmt)
            sa = np.abs(lhs.scales[rows].astype(np.float64)).T[:, :, None]  # [KB, m, 1]
            sb = np.abs(np.repeat(rhs.scales[g].astype(np.float64), 128, axis=1))[:, :n]
            out[rows] = np.sum(t * sa * sb[:, None, :], axis=0)
        start += size
    return out
