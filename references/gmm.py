"""Reference grouped matmuls: `gmm` (forward), `gmm_and_exact` (a recipe's forward and the
exact one from one pass), `tgmm` (weight gradient), `dgrad` (input gradient), and
`abs_product` (the |A||B| that error bounds need).

Layout: lhs [M, K]; rhs [G, K, N]; group_sizes [G] int, sum(group_sizes) <= M; the rows of
group g are the next group_sizes[g] rows of lhs; output rows at or past sum(group_sizes)
are zero.

Exactness of the FP8 forward.  Every e4m3fn value is an integer multiple of 2^-9 (the
smallest subnormal) of magnitude at most 448 < 2^9, i.e. at most 2^18 units.  The product of
two is therefore a multiple of 2^-18 below 2^36 such units, and a sum of fewer than 2^17
such products is a multiple of 2^-18 below 2^53 units: every partial sum, in any order and
with or without fused multiply-adds, is a float64 value, so the float64 matmul of one
128-wide K block (BLAS, any blocking) returns the exact partial P.  The reference rounds P
once to float32 and then applies the accumulation recipe across K blocks in K order, with
float32 round-to-nearest-even and an exact float32 fma (`exact.fma_f32`):

===============  ==========================================
deepgemm         acc = fma(RN(sa*sb), P, acc)
cublas           acc = fma(RN(P*sa), sb, acc)
tokamax          acc = RN(RN(RN(P*sa)*sb) + acc)
deepgemm-hopper  deepgemm's step on the Hopper tensor core's P instead of the exact one:
                 P = `mma.block_partial` (four k32 WGMMA steps from C = 0, the
                 e8m13 truncating accumulator), bit-exact to that model by construction
deepgemm-        deepgemm's step on the Blackwell (sm_100a) tensor core's P: four k32
  blackwell      steps of `mma.BLACKWELL_FP8` from C = 0 (what a tl.dot per block gives
                 there: Triton's sm_100 dot has no promotion interval)
exact            sum of P*sa*sb in exact arithmetic, rounded once to out_dtype (the true value)
===============  ==========================================

e5m2 values span 2^-16 .. 57344, so their 128-wide partials need up to ~70 bits: the
reference computes them with the exact superaccumulator instead of float64 BLAS.

Unscaled (unquantized bf16 / float32) operands have no blocks and no scales: their only recipe
is `exact`, rounded once to out_dtype; `references.matmul.exact_matmul` (also behind
`tgmm` and `dgrad`) explains how it is exact at nearly the speed of float64 BLAS.

Speed: where the CPU allows, the whole e4m3 pass runs in C on integer dot products of the
values' digits (`references.intdot`): AMX int8 tiles (`references.amx`), else AVX512-VNNI
int16 dot products (`references.vnni`), each with the recipe fused in (hardware float32
operations, correctly rounded); the exact recipe takes its float64 partials from the same
path (`DigitPath.exact_partials`).  Elsewhere the e4m3 recipes run fused in numba
(`_gmm_e4m3`: float64 BLAS partials per 64-row chunk consumed in cache, parallel; the
float32 fma vectorized with an exact fallback where float64 may double-round,
`_accumulate_row`).  `PARTIALS` names the path taken here.  None of these changes a bit of
the result: operands holding a NaN code, which the integer digits cannot carry, take the
float64 BLAS path.  The tensor-core recipes (128-element chains, finite operands) run in
one C pass too where `mma.deepgemm_gmm` applies, else block by block
(`_tensor_core_partials`, then `_accumulate`): the same bits.
"""

from __future__ import annotations

import ctypes

import ml_dtypes
import numba
import numpy as np
from numpy.typing import ArrayLike, DTypeLike
from threadpoolctl import threadpool_limits

from fp8check.references import amx, cbuild, mma, vnni
from fp8check.references.casts import to_float64
from fp8check.references.certified import round_certified, scaled_terms_exact
from fp8check.references.exact import (
    ACC_SIZE,
    acc_add,
    acc_round,
    fma_f32_scalar,
    may_double_round_f32,
    precision_of,
    round_pair_f32,
    two_product,
    two_sum,
)
from fp8check.references.intdot import DigitPath
from fp8check.references.matmul import UNSCALED_DTYPES, check_unscaled, exact_matmuls
from fp8check.references.quant import BLOCK, QTensor

ACCUMS = ("deepgemm", "cublas", "tokamax", "deepgemm-hopper", "deepgemm-blackwell", "exact")
# deepgemm-hopper's promotion intervals, in K elements (Triton's max_num_imprecise_acc);
# every other recipe promotes once per 128-wide block: DEFAULT_INTERVAL, the default.
PROMOTION_INTERVALS = (32, 64, 128)
DEFAULT_INTERVAL = 128
INTERVAL_RULE = "32, 64 or 128, and only with deepgemm-hopper"
TENSOR_CORE_ACCUMS = {"deepgemm-hopper": "sm_90a", "deepgemm-blackwell": "sm_100a"}
"""The recipes that are deepgemm's promotion on a tensor core's block partials
(`_tensor_core_partials`), with the CUDA target whose model (`mma.mma_model`) forms them."""
_ACCUM_CODE = {"deepgemm": 0, "cublas": 1, "tokamax": 2, "deepgemm-hopper": 0,
               "deepgemm-blackwell": 0}
REFERENCE_OUT_DTYPES = (np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float64))
# Rows of one group handled per step: keeps the float64 partials of a chunk near 8 MiB.
_CHUNK_BYTES = 8 << 20
_NO_REMAINDER = np.zeros((0, 0, 0), np.float64)
_FUSED_ROWS = 64  # rows per parallel chunk of the fused e4m3 path: partials stay in L2


def _fp8_lut(dtype) -> np.ndarray:
    return np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)


_LUT = {np.dtype(d): _fp8_lut(d) for d in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)}


@numba.njit(parallel=True, cache=True)
def _gather(lut, codes):
    out = np.empty(codes.shape[0])
    for i in numba.prange(codes.shape[0]):
        out[i] = lut[codes[i]]
    return out


def _to_f64(values: np.ndarray) -> np.ndarray:
    """Exact float64 image of an fp8 / bf16 / f32 array (fp8 through a 256-entry table)."""
    lut = _LUT.get(values.dtype)
    if lut is None:
        return to_float64(values)
    codes = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
    return _gather(lut, codes).reshape(values.shape)


def check_group_sizes(group_sizes, num_groups: int, m: int) -> np.ndarray:
    """Validate and return group_sizes as int64 [G]; ValueError with the reason otherwise."""
    gs = np.asarray(group_sizes)
    if gs.ndim != 1 or not np.issubdtype(gs.dtype, np.integer):
        raise ValueError(f"group_sizes must be a 1-D integer array, got {gs.dtype} {gs.shape}")
    if gs.shape[0] != num_groups:
        raise ValueError(f"group_sizes has {gs.shape[0]} groups, rhs has {num_groups}")
    if (gs < 0).any():
        raise ValueError(f"negative group size at group {int(np.argmax(gs < 0))}")
    if int(gs.sum()) > m:
        raise ValueError(f"sum(group_sizes) = {int(gs.sum())} exceeds M = {m}")
    return gs.astype(np.int64)


def group_offsets(group_sizes: np.ndarray) -> np.ndarray:
    """Start row of each group and the end of the last: int64 [G + 1]."""
    return np.concatenate([[0], np.cumsum(group_sizes)]).astype(np.int64)


def _check_operands(lhs, rhs):
    """Return (blockwise, M, K, N, G) after checking kinds, shapes and dtypes."""
    if isinstance(lhs, QTensor) != isinstance(rhs, QTensor):
        raise ValueError("lhs and rhs must both be QTensors or both be unscaled arrays")
    blockwise = isinstance(lhs, QTensor)
    a, b = (lhs.values, rhs.values) if blockwise else (np.asarray(lhs), np.asarray(rhs))
    if a.ndim != 2 or b.ndim != 3:
        raise ValueError(f"expected lhs [M,K] and rhs [G,K,N], got {a.shape} and {b.shape}")
    m, k = a.shape
    g, k2, n = b.shape
    if k != k2:
        raise ValueError(f"K mismatch: lhs has K={k}, rhs has K={k2}")
    if blockwise:
        if lhs.block != (1, BLOCK) or rhs.block != (BLOCK, BLOCK):
            raise ValueError(
                f"blockwise gmm needs lhs (1,128) and rhs (128,128) blocks, "
                f"got {lhs.block} and {rhs.block}"
            )
        if lhs.fmt != rhs.fmt:
            raise ValueError(f"lhs is {lhs.fmt} but rhs is {rhs.fmt}")
        if k % BLOCK:
            raise ValueError(f"blockwise gmm needs K a multiple of 128, got K={k}")
        if a.dtype not in _LUT or b.dtype not in _LUT:
            raise ValueError(f"QTensor values must be fp8, got {a.dtype} and {b.dtype}")
    elif a.dtype not in UNSCALED_DTYPES or b.dtype not in UNSCALED_DTYPES:
        raise ValueError(
            f"unscaled gmm operands must be float32 or bfloat16, got {a.dtype} and {b.dtype}"
        )
    return blockwise, m, k, n, g


def _check_out(out_dtype, accum: str) -> np.dtype:
    dt = np.dtype(out_dtype)
    if dt not in REFERENCE_OUT_DTYPES:
        raise ValueError(f"out_dtype must be float32, bfloat16 or float64, got {dt}")
    if dt == np.float64 and accum != "exact":
        raise ValueError("out_dtype float64 is only meaningful with accum='exact'")
    return dt


@numba.njit(cache=True, inline="always")
def _fma_operands(a, b, p, code):
    """(x, y) of the recipe's fma(x, y, acc): deepgemm RN(sa*sb) and P, cublas RN(P*sa)
    and sb (float32 products)."""
    return (a * b, p) if code == 0 else (p * a, b)


@numba.njit(cache=True)
def _accumulate_row(acc, p, a, sb, code, old):
    """One K block of recipe `code` on one output row, in place: acc [N] float32 (the
    accumulator), p [N] float32 (RN32 of the exact partials), a the row's lhs scale, sb [N]
    the rhs scales; old [N] scratch.

    The float32 fma is fma(x, y, c) = RN32(x*y + c) with x*y exact in float64, so
    RN32(RN64(x*y + c)) equals it unless RN64's result may double-round
    (`may_double_round_f32`, a rare exact midpoint or a float32 subnormal): the first loop
    takes RN32(RN64(.)) for every element (it vectorizes), the second redoes the flagged
    ones with the exact `fma_f32_scalar`."""
    n = acc.shape[0]
    if code == 2:  # tokamax: plain float32 multiplies and add, no fma
        for j in range(n):
            acc[j] = (p[j] * a) * sb[j] + acc[j]
        return
    flagged = 0
    for j in range(n):
        x, y = _fma_operands(a, sb[j], p[j], code)
        s = np.float64(x) * np.float64(y) + np.float64(acc[j])
        old[j] = acc[j]
        acc[j] = np.float32(s)
        flagged += may_double_round_f32(s)
    if flagged:
        for j in range(n):
            x, y = _fma_operands(a, sb[j], p[j], code)
            s = np.float64(x) * np.float64(y) + np.float64(old[j])
            if may_double_round_f32(s):
                acc[j] = fma_f32_scalar(x, y, old[j])


@numba.njit(cache=True)
def _nan_codes(flat: np.ndarray) -> int:
    n = 0
    for i in range(flat.size):  # no early exit: the loop vectorizes
        n += (flat[i] & 0x7F) == 0x7F
    return n


def has_nan_code(codes: np.ndarray) -> bool:
    """Whether uint8 e4m3fn codes hold a NaN (0x7F or 0xFF)."""
    return _nan_codes(np.ascontiguousarray(codes).ravel()) > 0


def _partials_path() -> str:
    if amx.AVAILABLE:
        return amx.STATUS
    if vnni.AVAILABLE:
        return vnni.STATUS
    return f"float64 BLAS (AMX {amx.STATUS}, VNNI {vnni.STATUS})"


# How the e4m3 gmm recipes form their exact partials on this machine (operands with NaN
# codes always take float64 BLAS): "amx-int8", "avx512-vnni" or "float64 BLAS (...)".
PARTIALS = _partials_path()


@numba.njit(parallel=True, cache=True)
def _accumulate(p_hi, p_lo, sa, sb, code):
    """Apply recipe `code` over K blocks in order.  p_hi + p_lo [KB, m, N] are the exact
    partials (p_hi = RN64, p_lo the exact remainder, or no remainder when p_lo has size 0:
    p_hi exact), sa [m, KB], sb [KB, N] (rhs scales expanded over N) -> acc float32
    [m, N] (parallel over rows, which are independent)."""
    kb_n, m, n = p_hi.shape
    has_lo = p_lo.shape[0] != 0
    acc = np.zeros((m, n), np.float32)
    for i in numba.prange(m):
        p, old = np.empty(n, np.float32), np.empty(n, np.float32)
        for kb in range(kb_n):
            for j in range(n):
                p[j] = (round_pair_f32(p_hi[kb, i, j], p_lo[kb, i, j]) if has_lo
                        else np.float32(p_hi[kb, i, j]))  # RN32 of the exact partial
            _accumulate_row(acc[i], p, sa[i, kb], sb[kb], code, old)
    return acc


@numba.njit(parallel=True, cache=True)
def _gmm_e4m3(values, lut, b64, sa, sb, code, rows):
    """The recipe `code` for one group of e4m3 operands, fused and parallel over chunks of
    `rows` rows: values [m, K] uint8 (the lhs codes), lut [256] their float64 values,
    b64 [K, N] the group's rhs as float64, sa [m, KB], sb [KB, N] -> float32 [m, N].
    Each chunk forms its exact 128-wide partials with one float64 BLAS call per K block
    (exact in any order, see the module docstring) and consumes them while in cache."""
    m, k = values.shape
    n = b64.shape[1]
    out = np.empty((m, n), np.float32)
    for t in numba.prange((m + rows - 1) // rows):
        r0 = t * rows
        r1 = min(m, r0 + rows)
        a = np.empty((r1 - r0, BLOCK))
        acc = np.zeros((r1 - r0, n), np.float32)
        p, old = np.empty(n, np.float32), np.empty(n, np.float32)
        for kb in range(k // BLOCK):
            for i in range(r1 - r0):
                for c in range(BLOCK):
                    a[i, c] = lut[values[r0 + i, BLOCK * kb + c]]
            part = np.dot(a, b64[BLOCK * kb : BLOCK * (kb + 1)])
            for i in range(r1 - r0):
                for j in range(n):
                    p[j] = np.float32(part[i, j])  # RN32 of the exact partial
                _accumulate_row(acc[i], p, sa[r0 + i, kb], sb[kb], code, old)
        out[r0:r1] = acc
    return out


@numba.njit(cache=True, inline="always")
def exact_err_per_q(kb_n, parts):
    """The exact recipe's certified error bound per unit of sum|q| (`_accumulate_exact`)
    for kb_n K blocks of `parts` float64 words each."""
    return (2 * kb_n * parts + 2) * 2.0**-53


@numba.njit(parallel=True, cache=True)
def _accumulate_exact(p_hi, p_lo, sa, sb, prec, emin):
    """Exact sum over K blocks of (p_hi + p_lo) * sa * sb, rounded once -> float64 [m, N]
    (parallel over rows).

    Fast and certified: each term P * s (s = sa * sb, exact: 24 + 24 bits) is split by
    two_product into an exact pair, and the L pair halves are added with TwoSum (Ogita,
    Rump and Oishi's Sum2): t = s + sum(q) exactly for the TwoSum errors q, whose float64
    sum sigma errs by at most gamma_L sum|q|; (L + 2) u times the computed sum|q| covers that
    and its own rounding (as in `references.matmul`).  `certified.round_certified` rounds
    TwoSum(s, sigma) once or flags it; flagged elements are summed exactly in the
    superaccumulator (`certified.scaled_terms_exact`)."""
    kb_n, m, n = p_hi.shape
    has_lo = p_lo.shape[0] != 0
    parts = 2 if has_lo else 1
    err_per_q = exact_err_per_q(kb_n, parts)
    out = np.empty((m, n), np.float64)
    for i in numba.prange(m):
        # a row at a time, its columns in the inner loop (independent: it vectorizes),
        # each element's operations in the order above
        total, sigma, qabs = np.zeros(n), np.zeros(n), np.zeros(n)
        for kb in range(kb_n):
            sa_i = np.float64(sa[i, kb])
            for x in range(parts):
                part = p_hi[kb, i] if x == 0 else p_lo[kb, i]
                for j in range(n):
                    hi, lo = two_product(part[j], sa_i * np.float64(sb[kb, j]))  # s exact
                    t, q = two_sum(total[j], hi)
                    sg, qa = sigma[j] + q, qabs[j] + abs(q)
                    total[j], q = two_sum(t, lo)
                    sigma[j], qabs[j] = sg + q, qa + abs(q)
        for j in range(n):
            hi, lo = two_sum(total[j], sigma[j])
            r, certain = round_certified(hi, lo, qabs[j] * err_per_q, prec, emin)
            out[i, j] = r if certain else scaled_terms_exact(p_hi, p_lo, sa, sb, i, j, prec,
                                                             emin)
    return out


@numba.njit(cache=True)
def _exact_pair_partials(a, b):
    """Exact 128-wide partials as float64 pairs, for operands whose float64 sums may round
    (e5m2 partials need up to ~71 bits).  a [KB, m, 128], b [KB, 128, n] ->
    (hi, lo) [KB, m, n] with hi = RN64(P) and lo = P - hi exactly (at most 18 bits)."""
    kb_n, m, w = a.shape
    n = b.shape[2]
    hi = np.empty((kb_n, m, n), np.float64)
    lo = np.empty((kb_n, m, n), np.float64)
    acc = np.zeros(ACC_SIZE, np.int64)
    for kb in range(kb_n):
        for i in range(m):
            for j in range(n):
                for t in range(w):
                    acc_add(acc, a[kb, i, t] * b[kb, t, j])
                h = acc_round(acc, 53, -1022)
                for t in range(w):
                    acc_add(acc, a[kb, i, t] * b[kb, t, j])
                acc_add(acc, -h)
                hi[kb, i, j] = h
                lo[kb, i, j] = acc_round(acc, 53, -1022)
    return hi, lo


def _partials(a64: np.ndarray, b64: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """Exact 128-wide K partials as (hi, lo): a64 [m, K], b64 [K, N] -> 2 x [KB, m, N]."""
    m, k = a64.shape
    kb = k // BLOCK
    if fmt == "e4m3fn":
        hi = np.empty((kb, m, b64.shape[1]), np.float64)
        for b in range(kb):  # exact in any order, see the module docstring
            blk = slice(BLOCK * b, BLOCK * (b + 1))
            np.matmul(a64[:, blk], b64[blk], out=hi[b])
        return hi, _NO_REMAINDER
    a3 = np.ascontiguousarray(a64.reshape(m, kb, BLOCK).transpose(1, 0, 2))
    return _exact_pair_partials(a3, np.ascontiguousarray(b64.reshape(kb, BLOCK, -1)))


def _digit_path() -> DigitPath | None:
    """The fastest integer-digit path this CPU runs (AMX, else VNNI), or None."""
    return amx.PATH if amx.AVAILABLE else vnni.PATH if vnni.AVAILABLE else None


def _digit_gmm(lhs: QTensor, rhs: QTensor, gs, out: np.ndarray, accum: str) -> bool:
    """Recipe `accum` of every group into out on the fastest integer-digit path; False
    where none runs here or a code it reads is a NaN (the groups' rows of out then mean
    nothing: the caller's path overwrites them)."""
    path = _digit_path()
    if path is None:
        return False
    acc = out if out.dtype == np.float32 else np.zeros(out.shape, np.float32)
    if not path.gmm(lhs.values.view(np.uint8), lhs.scales, rhs.values.view(np.uint8),
                    rhs.scales, group_offsets(gs), accum, acc):
        return False
    if acc is not out:
        out[...] = acc  # the kernel's output rounding to bf16 (RNE)
    return True


def _no_nan_codes(lhs: QTensor, rhs: QTensor, gs) -> bool:
    """Whether lhs's rows in the groups and every rhs value hold no e4m3fn NaN code."""
    rows = lhs.values[: int(gs.sum())].view(np.uint8)
    return not (has_nan_code(rows) or has_nan_code(rhs.values.view(np.uint8)))


def _gmm_blockwise(lhs: QTensor, rhs: QTensor, gs, out: np.ndarray, accum: str, prec,
                   interval: int = DEFAULT_INTERVAL):
    if accum in TENSOR_CORE_ACCUMS:  # the model's partials: no exact-partial fast path
        if not (interval == DEFAULT_INTERVAL and _tensor_core_in_c(lhs, rhs, gs, out, accum)):
            _gmm_groups(lhs, rhs, gs, out, accum, prec, fused=False, interval=interval)
    elif lhs.fmt == "e4m3fn" and accum != "exact":
        if not _digit_gmm(lhs, rhs, gs, out, accum):
            # One BLAS thread per numba thread: nested BLAS threads would oversubscribe.
            with threadpool_limits(1, user_api="blas"):
                _gmm_groups(lhs, rhs, gs, out, accum, prec, fused=True)
    else:
        _gmm_groups(lhs, rhs, gs, out, accum, prec, fused=False)


def _gmm_e4m3_group(codes, b_codes, sa, sb, accum: str) -> np.ndarray:
    """Recipe `accum` of one group of e4m3 codes on float64 BLAS partials: lhs codes
    [m, K], rhs codes [K, N], sa [m, KB], sb [KB, N] (expanded) float32 -> float32 [m, N]."""
    e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
    return _gmm_e4m3(codes, _LUT[e4m3], _to_f64(b_codes.view(e4m3)), sa, sb,
                     _ACCUM_CODE[accum], _FUSED_ROWS)


def _tensor_core_in_c(lhs: QTensor, rhs: QTensor, gs, out: np.ndarray, accum: str) -> bool:
    """deepgemm's step on the tensor core's block partials (128-element chains) of every
    group into out, in one C pass where `mma.deepgemm_gmm` applies; False, out untouched,
    where it does not."""
    acc = out if out.dtype == np.float32 else np.zeros(out.shape, np.float32)
    if not mma.deepgemm_gmm(lhs.values.view(np.uint8), lhs.scales, rhs.values.view(np.uint8),
                            rhs.scales, group_offsets(gs), lhs.fmt,
                            mma.mma_model(TENSOR_CORE_ACCUMS[accum]), acc):
        return False
    if acc is not out:
        out[...] = acc  # the kernel's output rounding to bf16 (RNE)
    return True


def _tensor_core_partials(a: np.ndarray, b: np.ndarray, fmt: str, interval: int,
                          accum: str) -> np.ndarray:
    """[KB, m, N] float64: each 128-wide K block's P as a kernel on `accum`'s tensor core
    forms it from zero (`mma.promoted_partial`: tensor-core chains of `interval` elements
    added in float32; 128, one chain, on Blackwell).  Float32 values, exact in float64, so
    `_accumulate`'s round_pair_f32(P, 0) hands the recipe P itself."""
    model = mma.mma_model(TENSOR_CORE_ACCUMS[accum])
    kb = a.shape[1] // BLOCK
    return np.stack([mma.promoted_partial(a[:, i * BLOCK:(i + 1) * BLOCK],
                                          b[i * BLOCK:(i + 1) * BLOCK], interval, model=model,
                                          fmt=fmt)
                     for i in range(kb)]).astype(np.float64)


def _ieee_where_nonfinite(res: np.ndarray, a64: np.ndarray, b64: np.ndarray, sa: np.ndarray,
                          sb: np.ndarray) -> None:
    """Overwrite, in the exact recipe's result res [m, N], every element whose terms
    P * sa * sb touch a NaN or an infinity (a NaN or Inf value code, a non-finite scale)
    with the IEEE float64 value of the sum of its terms; a64 [m, K], b64 [K, N] the
    values, sa [m, KB], sb [KB, N] the scales.

    Why that is the exact result there and only there: a finite term is below 2^(36+256)
    (an fp8 partial times two float32 scales) and KB of them cannot overflow float64, so
    the IEEE sum is non-finite exactly when some term is, and then it is the extended-real
    value: NaN for a NaN term, 0 * Inf (a zero partial times an infinite scale, or an
    infinite value times zero) or Inf - Inf, else the infinity of the terms' common sign.
    Rounding inside the finite terms changes neither.  The superaccumulator cannot carry
    these (`round_certified` flags them and the exact fallback returns garbage)."""
    with np.errstate(invalid="ignore", over="ignore"):
        ieee = np.zeros(res.shape, np.float64)
        for kb in range(a64.shape[1] // BLOCK):
            blk = slice(BLOCK * kb, BLOCK * (kb + 1))
            ieee += (a64[:, blk] @ b64[blk]) * sa[:, kb, None].astype(np.float64) * sb[kb]
    bad = ~np.isfinite(ieee)
    res[bad] = ieee[bad]


def _gmm_groups(lhs: QTensor, rhs: QTensor, gs, out: np.ndarray, accum: str, prec,
                fused: bool, interval: int = DEFAULT_INTERVAL,
                also: tuple[np.ndarray, str] | None = None):
    """Recipe `accum` of every group into out; with accum "exact", `also` = (out2, recipe)
    applies a second recipe to the same exact partials (`gmm_and_exact`)."""
    n = rhs.values.shape[2]
    kb = lhs.values.shape[1] // BLOCK
    offs = group_offsets(gs)
    chunk = max(1, _CHUNK_BYTES // (8 * kb * n))
    scratch = None  # one buffer for every chunk's VNNI partials: fresh ones cost page faults
    for g in range(gs.shape[0]):
        if gs[g] == 0:
            continue
        sb = np.repeat(rhs.scales[g].astype(np.float32), BLOCK, axis=1)[:, :n]
        sb = np.ascontiguousarray(sb)
        rows = slice(offs[g], offs[g + 1])
        sa = np.ascontiguousarray(lhs.scales[rows].astype(np.float32))
        if fused:
            out[rows] = _gmm_e4m3_group(lhs.values[rows].view(np.uint8),
                                        rhs.values[g].view(np.uint8), sa, sb, accum)
            continue
        b_codes = rhs.values[g].view(np.uint8)
        # The exact recipe's e4m3 partials from an integer-digit path where one applies (no
        # NaN code: the same float64 values as BLAS's), else from float64 BLAS.
        path = _digit_path() if accum == "exact" and lhs.fmt == rhs.fmt == "e4m3fn" else None
        packed = path.pack_rhs(b_codes) if path and not has_nan_code(b_codes) else None
        b64 = None if packed is not None else _to_f64(rhs.values[g])
        if packed is not None and scratch is None:
            scratch = np.empty(kb * min(chunk, int(gs.max())) * n)
        # e4m3fn has no infinity: codes without NaN are finite
        rhs_finite = bool((b64 is None or np.isfinite(b64).all()) and np.isfinite(sb).all())
        for r0 in range(offs[g], offs[g + 1], chunk):
            r1 = min(r0 + chunk, offs[g + 1])
            s = sa[r0 - offs[g] : r1 - offs[g]]
            a_codes, a64 = lhs.values[r0:r1].view(np.uint8), None
            if accum in TENSOR_CORE_ACCUMS:
                p_hi = _tensor_core_partials(a_codes, b_codes, lhs.fmt, interval, accum)
                p_lo = _NO_REMAINDER
            elif path and packed is not None and not has_nan_code(a_codes):
                p_hi = path.exact_partials(a_codes, packed, n, scratch=scratch)
                p_lo = _NO_REMAINDER
            else:
                a64, b64 = _to_f64(lhs.values[r0:r1]), _operand_f64(b64, rhs.values[g])
                p_hi, p_lo = _partials(a64, b64, lhs.fmt)
            if accum == "exact":
                res = _accumulate_exact(p_hi, p_lo, s, sb, *prec)
                if not (rhs_finite and (a64 is None or np.isfinite(a64).all())
                        and np.isfinite(s).all()):
                    a64 = _operand_f64(a64, lhs.values[r0:r1])
                    b64 = _operand_f64(b64, rhs.values[g])
                    _ieee_where_nonfinite(res, a64, b64, s, sb)
                if also is not None:
                    second = _accumulate(p_hi, p_lo, s, sb, _ACCUM_CODE[also[1]])
                    also[0][r0:r1] = second.astype(also[0].dtype)
            else:
                res = _accumulate(p_hi, p_lo, s, sb, _ACCUM_CODE[accum])
            out[r0:r1] = res.astype(out.dtype)


def _operand_f64(made: np.ndarray | None, values: np.ndarray) -> np.ndarray:
    """`made` when the float64 image of `values` was made already, else that image."""
    return made if made is not None else _to_f64(values)


def gmm(lhs: QTensor | np.ndarray, rhs: QTensor | np.ndarray, group_sizes: ArrayLike,
        out_dtype: DTypeLike = np.float32, accum: str | None = None, *,
        interval: int = DEFAULT_INTERVAL) -> np.ndarray:
    """Reference grouped matmul out[rows of g] = lhs[rows of g] @ rhs[g].

    Args:
      lhs: QTensor with (1,128) blocks [M, K] or an unscaled float32/bfloat16 array [M, K].
      rhs: QTensor with (128,128) blocks [G, K, N] or an unscaled array [G, K, N] (same kind).
      group_sizes: int [G], rows per group, non-negative, summing to at most M.
      out_dtype: float32 or bfloat16 (RNE from the float32 accumulator, or once from the
        exact value for "exact"), or float64 with "exact" (the exact value correctly
        rounded).
      accum: "deepgemm" (default for QTensors), "cublas", "tokamax", "deepgemm-hopper" (the
        Hopper tensor core's partials, `mma.HOPPER_FP8`), "deepgemm-blackwell" (the sm_100a
        tensor core's, `mma.BLACKWELL_FP8`) or "exact" (the only recipe, and the default,
        for unscaled operands).
      interval: deepgemm-hopper only: K elements the tensor core chains from zero before
        the chain's partial is added in float32 into the block's P (Triton's
        max_num_imprecise_acc: 32, 64 or 128; 128 is DeepGEMM's one chain per block).

    Returns:
      [M, N] of out_dtype; rows at or past sum(group_sizes) are zero.

    Raises:
      ValueError: operands of mixed kinds, bad shapes or dtypes, an unknown accum, an
        interval without deepgemm-hopper, group sizes that do not fit.
    """
    m, n, accum, dt, gs = _checked_gmm_args(lhs, rhs, group_sizes, out_dtype, accum, interval)
    # The exact path rounds once, straight to the output format; the recipes round to
    # float32 in the accumulator and the cast to bf16 below is the kernel's output rounding.
    prec = precision_of(dt)
    out = zeroed((m, n), dt)
    if isinstance(lhs, QTensor) and isinstance(rhs, QTensor):  # blockwise, for the checker
        _gmm_blockwise(lhs, rhs, gs, out, accum, prec, interval)
        return out
    offs = group_offsets(gs)
    a, b = np.asarray(lhs), np.asarray(rhs)
    exact_matmuls([(a[offs[g]:offs[g + 1]], b[g], out[offs[g]:offs[g + 1]])
                   for g in range(gs.shape[0]) if gs[g]])
    return out


def zeroed(shape: tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
    """np.zeros(shape, dtype) with its pages written here, in one pass split among the
    threads (`cbuild.run_parallel`).  An output np.zeros leaves unmapped is first touched
    by the kernels' threads, and their page faults at once cost more than this pass: at
    the dev shape on two threads (best of 9, the two timed alternately in one process),
    tgmm (a 128 MiB output) took 236 ms against 193 ms written first, the forward gmm
    (16 MiB) 95-119 ms against 79-81 ms.  One thread writing it took 43 ms of tgmm's
    float64 output (256 MiB; AMX machine, Granite Rapids class), two 19 ms.  Which is
    cheaper depends on the machine: on a Zen 4 one (2 vCPUs) the first touch won, by
    3-9% (tgmm, dgrad, the forward gmm; paired in one process), against the AMX
    machine's 17-51% loss, so this pass stays."""
    out = np.empty(shape, dtype)
    nbytes = out.nbytes
    parts = min(numba.get_num_threads(), max(1, nbytes >> 22))  # 4 MiB a thread at least
    cuts = [nbytes * i // parts // 4096 * 4096 for i in range(parts)] + [nbytes]
    cbuild.run_parallel([(_memset_zero, (out.ctypes.data + c0, c1 - c0))
                         for c0, c1 in zip(cuts[:-1], cuts[1:], strict=True) if c1 > c0])
    return out


def _memset_zero(address: int, nbytes: int) -> int:
    """Zero nbytes at address (ctypes' memset drops the GIL: the threads run in parallel)."""
    ctypes.memset(address, 0, nbytes)
    return 0


def _checked_gmm_args(lhs, rhs, group_sizes, out_dtype, accum: str | None,
                      interval: int) -> tuple[int, int, str, np.dtype, np.ndarray]:
    """gmm's arguments checked: (M, N, the recipe, the output dtype, group sizes int64);
    ValueError with the reason otherwise."""
    blockwise, m, _, n, g = _check_operands(lhs, rhs)
    accum = accum or ("deepgemm" if blockwise else "exact")
    if accum not in ACCUMS:
        raise ValueError(f"unknown accum {accum!r}; expected one of {ACCUMS}")
    if not blockwise and accum != "exact":
        raise ValueError(f"accum {accum!r} needs blockwise FP8 operands; unscaled ones use 'exact'")
    if not valid_interval(accum, interval):
        raise ValueError(f"interval {interval!r}: {INTERVAL_RULE}")
    return m, n, accum, _check_out(out_dtype, accum), check_group_sizes(group_sizes, g, m)


def valid_interval(accum: str | None, interval: object) -> bool:
    """`interval` is a promotion interval recipe `accum` can have (`INTERVAL_RULE`)."""
    return interval in PROMOTION_INTERVALS and (interval == DEFAULT_INTERVAL
                                                or accum == "deepgemm-hopper")


def gmm_and_exact(lhs: QTensor, rhs: QTensor, group_sizes: ArrayLike,
                  out_dtype: DTypeLike = np.float32, accum: str = "deepgemm", *,
                  interval: int = DEFAULT_INTERVAL) -> tuple[np.ndarray, np.ndarray]:
    """(gmm(lhs, rhs, group_sizes, out_dtype, accum, interval=interval),
    gmm(lhs, rhs, group_sizes, np.float64, "exact")), bit for bit, for blockwise operands.

    With accum "deepgemm", "cublas" or "tokamax", operands without the e4m3fn NaN code
    (`_no_nan_codes`) and finite scales, both come from one computation of the exact
    128-wide partials: the recipe rounds each to float32 and accumulates (`_accumulate`,
    the float64 BLAS path's steps, whose bits every faster path of gmm gives;
    `tests/test_partials_paths.py`).  Otherwise (deepgemm-hopper and deepgemm-blackwell,
    whose partials are the tensor core's; e4m3 NaN codes, whose NaN partials gmm's recipe
    forms in other BLAS calls; non-finite scales) it calls gmm twice.  On e5m2 operands the
    code check only errs on the safe side: gmm's e5m2 recipe takes these very partials and
    steps."""
    m, n, accum, dt, gs = _checked_gmm_args(lhs, rhs, group_sizes, out_dtype, accum, interval)
    if not (isinstance(lhs, QTensor) and isinstance(rhs, QTensor)):
        raise ValueError("gmm_and_exact: lhs and rhs must be QTensors")
    if (accum not in ("deepgemm", "cublas", "tokamax") or not _no_nan_codes(lhs, rhs, gs)
            or not (np.isfinite(lhs.scales).all() and np.isfinite(rhs.scales).all())):
        return (gmm(lhs, rhs, gs, dt, accum, interval=interval),
                gmm(lhs, rhs, gs, np.float64, "exact"))
    exact, recipe = np.zeros((m, n), np.float64), np.zeros((m, n), dt)
    _gmm_groups(lhs, rhs, gs, exact, "exact", precision_of(np.dtype(np.float64)), fused=False,
                also=(recipe, accum))
    return recipe, exact


def _check_exact_out(out_dtype) -> np.dtype:
    return _check_out(out_dtype, "exact")


def tgmm(lhs: np.ndarray, dy: np.ndarray, group_sizes: ArrayLike,
         out_dtype: DTypeLike = np.float32) -> np.ndarray:
    """Weight gradient dW[g] = lhs[rows of g]^T @ dy[rows of g], exact, rounded once.

    Args:
      lhs: [M, K] float32 or bfloat16.
      dy: [M, N] float32 or bfloat16.
      group_sizes: int [G], rows per group; rows past sum(group_sizes) are not read.
      out_dtype: float32, bfloat16 or float64.

    Returns:
      [G, K, N] of out_dtype: the exact value rounded once; an empty group gives zeros; a
      NaN or infinity in an operand gives IEEE's value to exactly the elements it reaches.
    """
    lhs, dy = check_unscaled("lhs", lhs), check_unscaled("dy", dy)
    if lhs.ndim != 2 or dy.ndim != 2 or lhs.shape[0] != dy.shape[0]:
        raise ValueError(f"expected lhs [M,K] and dy [M,N], got {lhs.shape} and {dy.shape}")
    dt = _check_exact_out(out_dtype)
    gs = check_group_sizes(group_sizes, np.asarray(group_sizes).shape[0], lhs.shape[0])
    offs = group_offsets(gs)
    out = zeroed((gs.shape[0], lhs.shape[1], dy.shape[1]), dt)
    # an empty group: a sum of no terms, zeros
    exact_matmuls([(lhs[offs[g]:offs[g + 1]].T, dy[offs[g]:offs[g + 1]], out[g])
                   for g in range(gs.shape[0])])
    return out


def dgrad(dy: np.ndarray, rhs: np.ndarray, group_sizes: ArrayLike,
          out_dtype: DTypeLike = np.float32) -> np.ndarray:
    """Input gradient dX[rows of g] = dy[rows of g] @ rhs[g]^T, exact, rounded once.

    Args:
      dy: [M, N] float32 or bfloat16.
      rhs: [G, K, N] float32 or bfloat16.
      group_sizes: int [G], rows per group.
      out_dtype: float32, bfloat16 or float64.

    Returns:
      [M, K] of out_dtype: the exact value rounded once; rows at or past sum(group_sizes)
      are zero; a NaN or infinity in an operand gives IEEE's value to exactly the elements
      it reaches.
    """
    dy, rhs = check_unscaled("dy", dy), check_unscaled("rhs", rhs)
    if dy.ndim != 2 or rhs.ndim != 3 or dy.shape[1] != rhs.shape[2]:
        raise ValueError(f"expected dy [M,N] and rhs [G,K,N], got {dy.shape} and {rhs.shape}")
    dt = _check_exact_out(out_dtype)
    gs = check_group_sizes(group_sizes, rhs.shape[0], dy.shape[0])
    offs = group_offsets(gs)
    out = zeroed((dy.shape[0], rhs.shape[1]), dt)
    exact_matmuls([(dy[offs[g]:offs[g + 1]], rhs[g].T, out[offs[g]:offs[g + 1]])
                   for g in range(gs.shape[0]) if gs[g]])
    return out


def abs_product(lhs: QTensor | np.ndarray, rhs: QTensor | np.ndarray,
                group_sizes: ArrayLike) -> np.ndarray:
    """An upper bound of (|A||B|)_ij on the dequantized operands, float64 [M, N]; rows past
    sum(group_sizes) are zero.

    Blockwise FP8 operands: from the 128-wide K-block partials of the magnitudes on the
    forward reference's exact-partial paths, scaled and summed in float64
    (`references.abs_bound`, which has the definition and the proof that it bounds).
    Unscaled operands: the float64 matmul of the magnitudes, whose relative error is at
    most gamma_K(2^-53), scaled up by (1 + 2 (K + 2) 2^-53), one group at a time.
    """
    from fp8check.references import abs_bound

    _, m, k, n, g = _check_operands(lhs, rhs)
    if isinstance(lhs, QTensor) and isinstance(rhs, QTensor):
        return abs_bound.blockwise_abs_product(lhs, rhs, group_sizes)
    gs = check_group_sizes(group_sizes, g, m)
    out = np.zeros((m, n), np.float64)
    offs = group_offsets(gs)
    a, b = np.asarray(lhs), np.asarray(rhs)
    for gi in range(g):
        if gs[gi]:
            rows = slice(offs[gi], offs[gi + 1])
            out[rows] = np.abs(_to_f64(a[rows])) @ np.abs(_to_f64(b[gi]))
    out *= abs_bound.factor(k)
    return out
