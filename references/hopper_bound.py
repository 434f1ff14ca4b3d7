"""A rigorous error bound for a kernel whose FP8 dots run on a modelled tensor core
(`mma.MmaModel`: Hopper's `HOPPER_FP8`, Blackwell's `BLACKWELL_FP8`): how far the tensor
core's block partial may be from the exact one.

One step of the model for one output element (`mma`'s docstring, steps 1-5): the terms are
the step's products p_k = a_k b_k and the incoming accumulator C; n is the number of
nonzero products and c = 1 if C != 0 else 0.  E is the largest unnormalised product
exponent e_a + e_b of the nonzero products, and floor(log2 |C|) too when C joins the
alignment (c_in_alignment); the aligned terms are cut to the grid g = 2^(E - f)
(f = frac_bits) toward zero or to nearest.  Let S_p = sum_k p_k and S = C + S_p.  With
u_out = 2^-f_out for a final rounding toward zero and 2^-(f_out + 1) to nearest (f_out =
out_bits), and likewise u_sum for the cut of the products' sum to sum_frac_bits bits
(u_sum = 0 when the model keeps the sum exact):

Theorem.  C aligned with the products (Hopper):

    |D - S| <= (n + c) g + u_out (sum_k |p_k| + |C| + (n + c) g).

C added after the products (Blackwell), with A = sum_k |p_k| + n g:

    |D - S| <= n g + u_sum A + u_out (A (1 + u_sum) + |C|).

Proof.  Cutting a term to a multiple of g moves it by less than g (toward zero or to
nearest alike), and zero terms do not move.  C aligned: the cut terms' exact sum S' has
|S' - S| < (n + c) g, and D is S' rounded to f_out fraction bits, which moves it by at
most u_out |S'| (less than one unit of its binade, 2^(floor(log2|S'|) - f_out), toward
zero; half of it to nearest); |S'| <= sum |p_k| + |C| + (n + c) g.  C after: the cut
products' sum S'_p has |S'_p - S_p| < n g and |S'_p| <= A; P, S'_p cut to sum_frac_bits
bits, has |P - S'_p| <= u_sum |S'_p| <= u_sum A, so |P| <= A (1 + u_sum); D is P + C
(exact) rounded, |D - (P + C)| <= u_out |P + C| <= u_out (A (1 + u_sum) + |C|).  Add. QED.

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
partials) is covered by the float32 term of `metrics.bound_ratio`.  The models keep
float32's exponent range; like `bound_ratio` the bound assumes no term falls below
2^-126, which the gate's data never approaches.
"""

from __future__ import annotations

import math

import ml_dtypes
import numba
import numpy as np

from fp8check.references.gmm import DEFAULT_INTERVAL
from fp8check.references.mma import HOPPER_FP8, MmaModel
from fp8check.references.quant import BLOCK

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
def _bounds(a, b, exp, mag, k0, width, group, frac, c_in, u_sum, u_out, out):
    """out[i, j] = the chain bound (module docstring) of the K range [k0, k0 + width)."""
    m, n = out.shape
    g_unit = 2.0 ** -frac
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
                c = 1 if cmag > 0.0 else 0
                if nnz + c == 0:
                    continue
                if c_in:
                    if c:
                        emax = max(emax, math.floor(math.log2(cmag)))
                    align = (nnz + c) * g_unit * 2.0 ** emax
                    step = align + u_out * (sabs + cmag + align)
                else:
                    big_a = sabs + (nnz * g_unit * 2.0 ** emax if nnz else 0.0)
                    step = (big_a - sabs) + u_sum * big_a + u_out * (big_a * (1 + u_sum) + cmag)
                total += step
                cmag += sabs + step
            out[i, j] = total


def chain_bound(a_codes: np.ndarray, b_codes: np.ndarray, *, interval: int = DEFAULT_INTERVAL,
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
    if b.shape[0] != k or k % BLOCK:
        raise ValueError(f"need a [M, K] and b [K, N] with K a multiple of 128, got "
                         f"{a.shape} and {b.shape}")
    if interval % model.group or BLOCK % interval:
        raise ValueError(f"interval {interval} must be a multiple of {model.group} "
                         f"dividing 128")
    exp, mag = _operand_tables(fmt)
    out = np.zeros((k // BLOCK, m, n))
    part = np.empty((m, n))
    for blk in range(k // BLOCK):
        for k0 in range(blk * BLOCK, (blk + 1) * BLOCK, interval):
            _bounds(a, b, exp, mag, k0, interval, model.group, model.frac_bits,
                    model.c_in_alignment, _unit(model.sum_frac_bits, model.sum_rounding),
                    _unit(model.out_bits, model.rounding), part)
            out[blk] += part
    return out


def _unit(bits: int | None, rounding: str) -> float:
    """The relative error bound of a cut to `bits` fraction bits (module docstring: u_out,
    u_sum); 0 for None (kept exact)."""
    if bits is None:
        return 0.0
    return 2.0 ** -(bits + (rounding == "rne"))


def truncation_term(lhs, rhs, group_sizes, *, interval: int = DEFAULT_INTERVAL,
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
            sb = np.abs(np.repeat(rhs.scales[g].astype(np.float64), BLOCK, axis=1))[:, :n]
            # An infinite scale times a zero chain term is NaN (the non-finite cases): the
            # criteria do not compare those elements' bounds (`finite` decides them).
            with np.errstate(invalid="ignore"):
                out[rows] = np.sum(t * sa * sb[:, None, :], axis=0)
        start += size
    return out
