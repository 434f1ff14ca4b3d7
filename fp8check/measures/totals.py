"""Layer-1 correctness metrics reduced in one pass, for outputs too large to keep the
elementwise metric arrays of (production shapes: 10^8 elements and more).

`metric_totals(out, exact, abs_ab, k)` returns, in one fused pass (numba, parallel over fixed
blocks of elements), exactly what the elementwise functions of `fp8check.measures.metrics` give
when reduced:

* `ulp_max`, `n_ulp_off`: max and count of `ulp_distance(out, RN(exact), out_dtype) > 0`
  (distance to the correctly rounded exact value; `ULP_NAN` where out is NaN);
* `bound_ratio_max`, `bound_ratio_argmax`, `n_over_bound`: max, first argmax and count
  over 1 of `bound_ratio(out, exact, abs_ab, k, u=u, out_dtype=out_dtype, n=n,
  underflow=underflow)`, bit for bit (the same scalar core, `metrics.ratio_of`);
* `n_nonfinite`: NaN or Inf in out (the reference must be finite);
* `signal`, `noise`: sum exact^2 and sum (out - exact)^2, from which `sqnr_db` follows;
  float64 sums in a fixed block order, so the result does not depend on the thread count
  (it differs from numpy's pairwise sum by float64 rounding only);
* with `ref` (a recipe reference such as `gmm(..., accum="deepgemm")`): `n_ref_mismatch`,
  the elements with `ulp_distance(out, ref) != 0` (bits differ, +0 and -0 equal, NaN
  never matches);
* from `gmm_metric_totals` only: `bias`, the sign-test sums of both `bias_z` modes per
  row and per (group, 128-column tile) (`metrics.bias_sums`), exact integer counts, so
  the streamed statistic is the in-memory one bit for bit.

`gmm_reference_chunks` computes a gmm-fp8 output's exact reference, |A||B| and recipe
reference one row chunk of one group at a time (all three from one pass over the exact
partials, `references.forward_refs`): memory is the output plus operands plus O(chunk), never a
float64 copy of a whole operand or output.  `gmm_metric_totals` streams an output through
`metric_totals` on those chunks, and `MetricTotals.merge` combines them; where that pass
runs (`references.forward_refs.gmm_metric_rows`) the metrics are summed per row inside
it instead, the references never written out.  The layer-1 criteria engine reads the
same chunks (`fp8check.layers.op.chunks.StreamedChunks`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import ml_dtypes
import numba
import numpy as np

from fp8check.bits import F64_MAX, bits_f32, exponent, pow2
from fp8check.formats import get_format
from fp8check.measures.metrics import (
    BIAS_MODES,
    ULP_NAN,
    BiasChunks,
    BiasSums,
    gamma_n,
    ratio_of,
    sign_z,
    sqnr_db_of_sums,
    underflow_floor,
)
from fp8check.references.gmm import DEFAULT_INTERVAL
from fp8check.references.quant import BLOCK, QTensor

if TYPE_CHECKING:
    from fp8check.references.forward_refs import Buffers, RowMetrics

_BLOCK = 1 << 16  # elements per parallel work item; fixes the order of the float64 sums
_SUB = 1024  # elements per vectorized sub-block (buffers stay in L1)
_F32_MAX = np.float32(np.finfo(np.float32).max)
_NEG_ZERO = np.int32(np.float32(-0.0).view(np.int32))
_ULP_SHIFT = {np.dtype(np.float32): 0, np.dtype(ml_dtypes.bfloat16): 16}  # out dtype -> bits


@dataclass(frozen=True)
class MetricTotals:
    """Reduced layer-1 metrics of one output (see the module docstring).  Indices are flat
    into the row-major output; `bound_ratio_argmax` is -1 for an empty output."""

    n: int
    n_nonfinite: int
    ulp_max: int
    n_ulp_off: int
    bound_ratio_max: float
    bound_ratio_argmax: int
    n_over_bound: int
    signal: float
    noise: float
    n_ref_mismatch: int | None = None
    # bias_z's sign-test sums per mode ("magnitude", "signed"; `metrics.BiasSums`, rows in
    # row order); None where not computed (`metric_totals`).
    # (not compared by ==: arrays; the statistic they give is)
    bias: dict[str, BiasSums] | None = field(default=None, compare=False)

    @property
    def sqnr_db(self) -> float:
        """10 log10(signal / noise): inf when out == exact, -inf with NaN/Inf in out or an
        all-zero exact value but nonzero error (as `metrics.sqnr_db`)."""
        if self.n_nonfinite or not (math.isfinite(self.signal) and math.isfinite(self.noise)):
            return -math.inf  # a float64 sum overflows only past 1e154, far outside float32
        return sqnr_db_of_sums(self.signal, self.noise)

    @classmethod
    def empty(cls, with_ref: bool) -> MetricTotals:
        """The totals of no elements (`n_ref_mismatch` 0 with a reference, else None)."""
        return cls(0, 0, 0, 0, 0.0, -1, 0, 0.0, 0.0, 0 if with_ref else None)

    def merge(self, other: MetricTotals, offset: int) -> MetricTotals:
        """These totals followed by `other`, whose flat indices start at `offset` (`bias`
        is not merged: `gmm_metric_totals` sums it over its chunks)."""
        later = other.bound_ratio_max > self.bound_ratio_max or self.bound_ratio_argmax < 0
        mism = (self.n_ref_mismatch + other.n_ref_mismatch
                if self.n_ref_mismatch is not None and other.n_ref_mismatch is not None
                else None)
        return MetricTotals(
            n=self.n + other.n,
            n_nonfinite=self.n_nonfinite + other.n_nonfinite,
            ulp_max=max(self.ulp_max, other.ulp_max),
            n_ulp_off=self.n_ulp_off + other.n_ulp_off,
            bound_ratio_max=max(self.bound_ratio_max, other.bound_ratio_max),
            bound_ratio_argmax=(other.bound_ratio_argmax + offset
                                if later and other.bound_ratio_argmax >= 0
                                else self.bound_ratio_argmax),
            n_over_bound=self.n_over_bound + other.n_over_bound,
            signal=self.signal + other.signal,
            noise=self.noise + other.noise,
            n_ref_mismatch=mism,
        )


@numba.njit(cache=True, inline="always")
def _ordered(x):
    """float32 x -> its place on a monotone integer line (+0 and -0 both 0), as in
    metrics.ulp_distance."""
    b = np.int64(bits_f32(x))  # sign-extended: negative iff the sign bit is set
    mag = b & 0x7FFFFFFF
    return -mag if b < 0 else mag


@numba.njit(cache=True, inline="always")
def _rounded(x, p, emin):
    """RNE of finite float64 x to p significant bits, subnormals below 2^emin, as float32
    (exact: a power-of-two scaling and one rint; 2^128 and beyond become inf, float32's
    and bfloat16's overflow rule)."""
    q = max(exponent(x), emin) - (p - 1)  # exponent of the last kept bit
    return np.float32(np.rint(x * pow2(-q)) * pow2(q))


@numba.njit(cache=True, inline="always")
def _rn(ex, p, emin, shift):
    """RN(ex) in out's format (`p` significant bits, smallest normal 2^emin, `shift` its
    bits below float32's), as float32."""
    return np.float32(ex) if shift == 0 else _rounded(ex, p, emin)  # f32: one RNE cast


@numba.njit(cache=True, inline="always")
def _ulps(o32, r, shift):
    """The ULP distance of o32 to r (out's format, `shift` as in `_rn`); ULP_NAN where o32
    is NaN."""
    d = abs(_ordered(o32) - _ordered(r)) >> shift
    return d if o32 == o32 else ULP_NAN


@numba.njit(cache=True, inline="always")
def _mismatch(o32, ref32, d):
    """Whether o32's bits differ from ref32's (-0 == +0; a NaN never matches, as
    ulp_distance: its d is ULP_NAN)."""
    a, r = bits_f32(o32), bits_f32(ref32)
    return ((a != r) & ((a | r) != _NEG_ZERO)) | (d == ULP_NAN)


@numba.njit(cache=True, inline="always")
def _sum(buf, n):
    """sum(buf[:n]) in four interleaved partial sums (a fixed order that vectorizes)."""
    s0 = s1 = s2 = s3 = 0.0
    m = n - n % 4
    for t in range(0, m, 4):
        s0 += buf[t]
        s1 += buf[t + 1]
        s2 += buf[t + 2]
        s3 += buf[t + 3]
    for t in range(m, n):
        s0 += buf[t]
    return (s0 + s1) + (s2 + s3)


@numba.njit(cache=True, inline="always")
def _max(buf, n):
    """max(buf[:n]) of non-NaN, non-negative values (-1 when n == 0), four lanes."""
    s0 = s1 = s2 = s3 = -1.0
    m = n - n % 4
    for t in range(0, m, 4):
        s0 = max(s0, buf[t])
        s1 = max(s1, buf[t + 1])
        s2 = max(s2, buf[t + 2])
        s3 = max(s3, buf[t + 3])
    for t in range(m, n):
        s0 = max(s0, buf[t])
    return max(max(s0, s1), max(s2, s3))


@numba.njit(cache=True)
def _tile_signs(ob, ag, c0, ncols, block, start, b, row_z, head, row_chunk, tile_z):
    """The sign test's z of out's elements ob (flat from c0, rows of `ncols`) against ag,
    both modes, summed per (row, `block`-column tile) segment into row_z (head[b] for a
    row that starts before `start`, block b's first element) and into tile_z[b, chunk of
    the row (row_chunk), tile] (modes on the last axis, then the count of nonzero z);
    returns the number of non-finite ag (a reference must be finite)."""
    bad = 0
    pos, stop = c0, c0 + ob.shape[0]
    while pos < stop:
        i = pos // ncols
        j = pos - i * ncols
        tile = j // block
        seg = min(stop, pos + min(ncols, (tile + 1) * block) - j)
        # int32 sums within a segment, over views from 0: the loop vectorizes (float64
        # sums would keep their order; indexing from pos - c0 compiled to a slower loop)
        zm = zs = nz = nf = np.int32(0)
        sa, so = ag[pos - c0:seg - c0], ob[pos - c0:seg - c0]
        for t in range(seg - pos):
            a, o = sa[t], so[t]
            zm += sign_z(a, o, True)
            z = sign_z(a, o, False)
            zs += z
            nz += z * z
            nf += np.int32(not abs(a) <= _F32_MAX)
        bad += nf
        acc = row_z[i] if i * ncols >= start else head[b]
        acc[0] += zm
        acc[1] += zs
        at = tile_z[b, row_chunk[i], tile]
        at[0] += zm
        at[1] += zs
        at[2] += nz
        pos = seg
    return bad


# error_model="numpy": no zero-divisor check on the ratio's division (its denominator is
# at least half the format's smallest subnormal), which costs the loop 2.5x on Zen 4.
@numba.njit(parallel=True, cache=True, error_model="numpy")
def _reduce(out, exact, abs_ab, ref, has_ref, gamma, p, emin, mant, shift, floor, against,
            ncols, block, row_chunk, chunks):
    """Per block of _BLOCK elements: ints [nonfinite, ulp max, ulp off, over bound, ref
    mismatches, invalid exact / abs_ab, non-finite sign-test reference, first flat
    index of the bound max (-1 if none)] and floats [bound max, signal, noise].
    Elementwise values go through small buffers so that the elementwise loop and each
    reduction vectorize.

    With `against` 1 (RN(exact)) or 2 (ref), also the sign test's z (`metrics.sign_z`,
    modes magnitude and signed) of out, rows of `ncols`, against it, summed while the
    block is in cache: per row (row_z [rows, 2], a row's sums before the block it starts
    in going to head [blocks, 2] instead: one writer per element of row_z) and per
    `block`-column tile of each of the `chunks` row chunks (row_chunk [rows]: each row's),
    with the count of nonzero z (tile_z [blocks, chunks, tiles, 3]).  Every z is -1, 0 or
    1, so these float64 sums are exact integers in any order."""
    n = out.shape[0]
    nb = (n + _BLOCK - 1) // _BLOCK
    ints = np.zeros((nb, 8), np.int64)
    flt = np.zeros((nb, 3), np.float64)
    rows = n // ncols if against else 0
    tiles = (ncols + block - 1) // block if against else 0
    row_z, head = np.zeros((rows, 2)), np.zeros((nb, 2))
    tile_z = np.zeros((nb, chunks if against else 0, tiles, 3))
    for b in numba.prange(nb):
        sq, dd, rr = np.empty(_SUB), np.empty(_SUB), np.empty(_SUB)
        dist = np.empty(_SUB, np.int64)
        ag = np.empty(_SUB, np.float32)
        flt[b, 0] = -1.0
        ints[b, 7] = -1
        end = min(n, (b + 1) * _BLOCK)
        for c0 in range(b * _BLOCK, end, _SUB):
            m = min(_SUB, end - c0)
            # Sub-block views: plain unit-stride indexing, which LLVM turns into vector
            # loads (indexing the whole arrays at c0 + t compiled to gathers).
            ob, eb, ab, fb = (out[c0:c0 + m], exact[c0:c0 + m], abs_ab[c0:c0 + m],
                              ref[c0:c0 + m])
            for t in range(m):
                o32, ex = ob[t], eb[t]
                o = np.float64(o32)
                r = _rn(ex, p, emin, shift)
                dist[t] = _ulps(o32, r, shift)
                rr[t] = ratio_of(o, ex, ab[t], gamma, emin, mant, floor)
                sq[t] = ex * ex
                dd[t] = (o - ex) * (o - ex) if abs(o) <= F64_MAX else 0.0
                ag[t] = fb[t] if against == 2 else r
            nonfinite = ulp_max = ulp_off = over = mismatch = bad = 0
            for t in range(m):
                ulp_max = max(ulp_max, dist[t])
                ulp_off += dist[t] != 0
                over += rr[t] > 1.0
                nonfinite += rr[t] == math.inf  # a finite o's ratio is < 2^280
                # an exact value and |A||B| not a reference's (written out: as an inline
                # function this test cost the loop 5-15%)
                bad += not (abs(eb[t]) <= F64_MAX and 0.0 <= ab[t] <= F64_MAX)
            if has_ref:
                for t in range(m):
                    mismatch += _mismatch(ob[t], fb[t], dist[t])
            if against:
                ints[b, 6] += _tile_signs(ob, ag, c0, ncols, block, b * _BLOCK, b, row_z,
                                          head, row_chunk, tile_z)
            ints[b, 0] += nonfinite
            ints[b, 1] = max(ints[b, 1], ulp_max)
            ints[b, 2] += ulp_off
            ints[b, 3] += over
            ints[b, 4] += mismatch
            ints[b, 5] += bad
            top = _max(rr, m)
            if top > flt[b, 0]:  # its first element: an earlier sub-block's equal max stays
                flt[b, 0] = top
                t = 0
                while t < m - 1 and rr[t] != top:
                    t += 1
                ints[b, 7] = c0 + t
            flt[b, 1] += _sum(sq, m)
            flt[b, 2] += _sum(dd, m)
    for b in range(nb):  # the rows' sums from the blocks after the one they start in
        if rows:
            row_z[b * _BLOCK // ncols] += head[b]
    return ints, flt, row_z, tile_z


def _f32_view(x: np.ndarray, name: str) -> np.ndarray:
    """Flat float32 image (exact) of a float32 / bfloat16 array."""
    x = np.asarray(x)
    if x.dtype not in _ULP_SHIFT:
        raise ValueError(f"metric_totals: {name} must be float32 or bfloat16, got {x.dtype}")
    return np.ascontiguousarray(x, dtype=np.float32).ravel()


def metric_totals(out, exact, abs_ab, k: int, *, u: float = 2.0**-24, n: int | None = None,
              ref=None, underflow: float = 0.0) -> MetricTotals:
    """Reduced layer-1 metrics of `out` (float32 or bfloat16, any shape) against `exact`
    and `abs_ab` (float64, finite, same shape); `k`, `u`, `n`, `underflow` as in
    `metrics.bound_ratio`;
    `ref` (out's dtype and shape) the recipe reference for the bit-exact count.  The ULP
    and bound are taken in out's dtype.  ValueError for bad input, as the metrics."""
    return _totals(out, exact, abs_ab, k, u=u, n=n, ref=ref, underflow=underflow)[0]


@dataclass(frozen=True)
class _Signs:
    """The sign test's z of an output's rows against a reference, summed in one pass with
    the metrics (`_reduce`): per row, and per column tile of each row chunk with the
    count of nonzero z (z^2: the same in both modes); modes (magnitude, signed) first on
    the last axis."""

    row_z: np.ndarray  # [rows, 2]
    tile_z: np.ndarray  # [chunks, tiles, 3]


def _totals(out, exact, abs_ab, k: int, *, u: float, n: int | None, ref, underflow: float,
            against: int = 0, block: int = 1, row_chunk: np.ndarray | None = None,
            ) -> tuple[MetricTotals, _Signs | None]:
    """`metric_totals`, and with `against` 1 (RN(exact)) or 2 (`ref`) the `_Signs` of out
    [rows, N] against it in `block`-column tiles, the tiles' sums per row chunk
    (`row_chunk`: each row's, 0 .. chunks - 1; default one chunk) (ValueError, as
    `metrics.bias_sums`, where it is not finite)."""
    out = np.asarray(out)
    shift = _ULP_SHIFT.get(out.dtype)
    if shift is None:
        raise ValueError(f"metric_totals: out must be float32 or bfloat16, got {out.dtype}")
    ex, ab = np.asarray(exact), np.asarray(abs_ab)
    for name, arr in (("exact", ex), ("abs_ab", ab)):
        if arr.dtype != np.float64 or arr.shape != out.shape:
            raise ValueError(f"metric_totals: {name} must be float64 of out's shape {out.shape}, "
                             f"got {arr.dtype} {arr.shape}")
    if ref is not None and (np.asarray(ref).dtype != out.dtype or np.shape(ref) != out.shape):
        raise ValueError(f"metric_totals: ref must match out ({out.dtype} {out.shape})")
    if against == 2 and ref is None:
        raise ValueError("metric_totals: the sign test against ref needs a ref")
    gamma = gamma_n(k, u, n, "metric_totals")
    ex, ab = np.ascontiguousarray(ex).ravel(), np.ascontiguousarray(ab).ravel()
    fmt = get_format(out.dtype)
    o32 = _f32_view(out, "out")
    r32 = _f32_view(ref, "ref") if ref is not None else o32
    p = fmt.mantissa_bits + 1
    floor = underflow_floor(underflow, gamma, "metric_totals")
    ncols = max(1, out.shape[-1] if out.ndim else 1)
    if row_chunk is None:
        row_chunk = np.zeros(o32.size // ncols if against else 0, np.int64)
    ints, flt, row_z, tile_z = _reduce(
        o32, ex, ab, r32, ref is not None, gamma, p, fmt.min_exponent, fmt.mantissa_bits,
        shift, floor, against, ncols, block, row_chunk,
        int(row_chunk.max()) + 1 if row_chunk.size else 0)
    total = _of_parts(ints, flt, ints[:, 7], int(o32.size), ref is not None)
    return total, _Signs(row_z, tile_z.sum(axis=0)) if against else None


def _of_parts(ints: np.ndarray, flts: np.ndarray, argmax: np.ndarray, n: int,
              with_ref: bool) -> MetricTotals:
    """The totals of n elements from the sums of their parts (`_reduce`'s blocks, or the C
    pass's rows: ints [parts, 8] and flts [parts, 3], the layout both share,
    `forward_refs.ROW_INTS` / `ROW_FLTS`), argmax [parts] the flat index of each part's
    first bound ratio max; the reference's validity checked in the same pass (a separate
    one would double its cost): ValueError where a part met an invalid one."""
    if ints[:, 5].any():
        raise ValueError("metric_totals: exact and abs_ab must be finite, abs_ab >= 0")
    if ints[:, 6].any():
        raise ValueError("bias_sums: ref contains NaN or Inf; a reference must be finite")
    if not ints.shape[0]:
        return MetricTotals.empty(with_ref)
    best = int(np.argmax(flts[:, 0]))  # the first part holding the max, its first element
    return MetricTotals(
        n=n, n_nonfinite=int(ints[:, 0].sum()), ulp_max=int(ints[:, 1].max()),
        n_ulp_off=int(ints[:, 2].sum()), bound_ratio_max=float(flts[best, 0]),
        bound_ratio_argmax=int(argmax[best]), n_over_bound=int(ints[:, 3].sum()),
        signal=float(flts[:, 1].sum()), noise=float(flts[:, 2].sum()),
        n_ref_mismatch=int(ints[:, 4].sum()) if with_ref else None,
    )


@dataclass(frozen=True)
class ReferenceChunk:
    """Rows [start, stop) of one group of a gmm-fp8 output [M, N] with their references:
    `exact` (float64, the exact value correctly rounded), `abs_ab` (float64, the |A||B|
    bound of `references.abs_product`) and `ref` (the output's dtype: the recipe's output,
    None when no recipe was asked for)."""

    group: int
    start: int
    stop: int
    exact: np.ndarray
    abs_ab: np.ndarray
    ref: np.ndarray | None


@dataclass(frozen=True)
class _Batch:
    """Consecutive row chunks ((group, start, stop) each, in row order) of a gmm-fp8
    output whose references are computed together: rows [start, stop) of the output, of
    lhs (QTensor) and of its groups' `sizes` there, against rhs's groups from the first
    chunk's (QTensor)."""

    chunks: list[tuple[int, int, int]]
    start: int
    stop: int
    lhs: QTensor
    rhs: QTensor
    sizes: np.ndarray

    def chunk_of_rows(self) -> np.ndarray:
        """Each row's chunk (0 .. len(chunks) - 1), int64 [stop - start]."""
        sizes = [r1 - r0 for _, r0, r1 in self.chunks]
        return np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)


@dataclass(frozen=True)
class _ReferenceBatch:
    """A `_Batch`'s references over its rows, the arrays as `ReferenceChunk`'s."""

    batch: _Batch
    exact: np.ndarray
    abs_ab: np.ndarray
    ref: np.ndarray | None


def _batches(lhs, rhs, group_sizes, *, rows_per_chunk: int, caller: str) -> Iterator[_Batch]:
    """`gmm_reference_chunks`' chunks in batches of at most `rows_per_chunk` rows, each
    batch's references to come from one call (a call per group would pack each group's rhs
    for every thread and pay the call's fixed cost per group: the same values, per
    element).  ValueError from `caller` for bad input."""
    from fp8check.references.gmm import check_group_sizes, group_offsets

    if not (isinstance(lhs, QTensor) and isinstance(rhs, QTensor)):
        raise ValueError(f"{caller}: lhs and rhs must be QTensors")
    if int(rows_per_chunk) != rows_per_chunk or rows_per_chunk < 1:
        raise ValueError(f"{caller}: rows_per_chunk must be >= 1, got {rows_per_chunk!r}")
    g = rhs.shape[0]
    offs = group_offsets(check_group_sizes(group_sizes, g, lhs.shape[0]))
    chunks = [(gi, r0, min(r0 + rows_per_chunk, offs[gi + 1])) for gi in range(g)
              for r0 in range(offs[gi], offs[gi + 1], rows_per_chunk)]
    i = 0
    while i < len(chunks):
        j = i + 1
        while j < len(chunks) and chunks[j][2] - chunks[i][1] <= rows_per_chunk:
            j += 1
        (g0, b0, _), (g1, _, b1) = chunks[i], chunks[j - 1]
        sizes = np.clip(offs[g0 + 1:g1 + 2], b0, b1) - np.clip(offs[g0:g1 + 1], b0, b1)
        yield _Batch(chunks[i:j], b0, b1, lhs.leading(b0, b1), rhs.leading(g0, g1 + 1), sizes)
        i = j


def _references(batch: _Batch, out_dtype, *, accum: str | None, interval: int,
                buffers: Buffers | None = None) -> _ReferenceBatch:
    """A batch's references from one pass over the exact partials where it can
    (`references.forward_refs.gmm_references`), into `buffers`' memory where given (a
    batch's arrays are then valid until the next)."""
    from fp8check.references import abs_product, gmm
    from fp8check.references.forward_refs import gmm_references

    a, b, sizes = batch.lhs, batch.rhs, batch.sizes
    if accum is None:
        exact = gmm(a, b, sizes, out_dtype=np.float64, accum="exact")
        return _ReferenceBatch(batch, exact, abs_product(a, b, sizes), None)
    ref, exact, abs_ab = gmm_references(a, b, sizes, out_dtype, accum, interval=interval,
                                        buffers=buffers)
    return _ReferenceBatch(batch, exact, abs_ab, ref)


def gmm_reference_chunks(lhs, rhs, group_sizes, out_dtype, *, accum: str | None,
                         rows_per_chunk: int, interval: int = DEFAULT_INTERVAL,
                         ) -> Iterator[ReferenceChunk]:
    """The references of the compared rows (below sum(group_sizes)) of a gmm-fp8 output,
    lhs [M,K] (1x128) and rhs [G,K,N] (128x128) QTensors, in row order, one group's rows at
    most `rows_per_chunk` at a time (a large group in several chunks, an empty group in
    none); with `accum`, also `gmm(..., out_dtype, accum, interval=interval)`.  Memory is
    O(rows_per_chunk (K + N)): the references of consecutive chunks that fit in one chunk's
    rows are computed together (`_batches`)."""
    for batch in _batches(lhs, rhs, group_sizes, rows_per_chunk=rows_per_chunk,
                          caller="gmm_reference_chunks"):
        refs = _references(batch, out_dtype, accum=accum, interval=interval)
        for gi, r0, r1 in batch.chunks:
            rows = slice(r0 - batch.start, r1 - batch.start)
            yield ReferenceChunk(gi, r0, r1, refs.exact[rows], refs.abs_ab[rows],
                                 None if refs.ref is None else refs.ref[rows])


def gmm_metric_totals(out, lhs, rhs, group_sizes, *, accum: str | None = "deepgemm",
                rows_per_chunk: int = 2048, u: float = 2.0**-24,
                interval: int = DEFAULT_INTERVAL, ftz: bool = False,
                seconds: dict[str, float] | None = None) -> MetricTotals:
    """`metric_totals` of a gmm-fp8 output `out` [M, N] (float32 or bfloat16) against the
    exact reference of lhs [M,K] (1x128) and rhs [G,K,N] (128x128) QTensors, streamed
    `rows_per_chunk` rows of one group at a time (`gmm_reference_chunks`); `accum` (None to
    skip) adds the bit-exact count against `gmm(..., accum=accum, interval=interval)`
    (`interval`: a tensor-core recipe's promotion interval); `u` is the accumulator's unit
    roundoff of the bound.  Only rows below sum(group_sizes) are compared, as in the gate.
    The bound's underflow term is the operands' (`underflow.fp8_model`), for a kernel that
    flushes subnormals when `ftz`.

    Where the references' C pass runs (`references.forward_refs.gmm_metric_rows`: an
    integer-digit path, e4m3fn operands, a recipe on the exact partials) the metrics are
    summed per row in that pass, the few elements whose exact value it leaves undecided
    added after (`_add_undecided`); elsewhere the metrics of the chunks whose references
    were computed together are reduced in one pass (`metric_totals`' own; a pass per chunk
    paid its fixed cost per group: at production wi, 256 groups, about as much as the
    reduction itself).  The two give the same totals, but for the float64 sums' order
    (`signal`, `noise`: per row in the C pass).  With `seconds`, the wall seconds of its
    two phases are added to it under "references" (the references' pass, with the
    metrics where it sums them) and "metrics" (the reduction after it): where the time
    goes (`benchmarks/reference.py`)."""
    from fp8check.measures.underflow import fp8_model
    from fp8check.references.forward_refs import Buffers, gmm_metric_rows
    from fp8check.references.gmm import TENSOR_CORE_ACCUMS
    from fp8check.references.intdot import RECIPE_CODES

    out = np.asarray(out)
    if not (isinstance(lhs, QTensor) and isinstance(rhs, QTensor)):
        raise ValueError("gmm_metric_totals: lhs and rhs must be QTensors")
    m, g, n = lhs.shape[0], rhs.shape[0], rhs.shape[2]
    if out.shape != (m, n):
        raise ValueError(f"gmm_metric_totals: out must be [M, N] = {(m, n)}, got {out.shape}")
    if out.dtype not in _ULP_SHIFT:
        raise ValueError(f"metric_totals: out must be float32 or bfloat16, got {out.dtype}")
    out = np.ascontiguousarray(out)
    k = lhs.shape[1]
    underflow = fp8_model(lhs, rhs, k).term(ftz=ftz, u=u)
    gamma = gamma_n(k, u, None, "metric_totals")
    floor = underflow_floor(underflow, gamma, "metric_totals")
    block = rhs.block[-1]  # the columns one rhs scale covers: bias_z's column tiles
    total = MetricTotals.empty(accum is not None)
    bias = _BiasTotals(g, n, block)
    # bias against RN(exact), or against the model a tensor-core kernel declares
    against = 2 if accum in TENSOR_CORE_ACCUMS else 1
    fused = accum in RECIPE_CODES and block == BLOCK  # the C pass's tiles are 128 wide
    buffers = Buffers()
    phases = dict.fromkeys(("references", "metrics"), 0.0)
    t = time.perf_counter()
    for batch in _batches(lhs, rhs, group_sizes, rows_per_chunk=rows_per_chunk,
                          caller="gmm_metric_totals"):
        rows = out[batch.start:batch.stop]
        summed = (gmm_metric_rows(batch.lhs, batch.rhs, batch.sizes, rows, accum, gamma=gamma,
                                  floor=floor, buffers=buffers)
                  if fused and accum is not None else None)
        refs = None if summed is not None else _references(batch, out.dtype, accum=accum,
                                                           interval=interval, buffers=buffers)
        phases["references"] += time.perf_counter() - t
        t = time.perf_counter()
        signs: _Signs | None
        if refs is None:
            assert summed is not None
            part, signs = _row_totals(summed, rows, batch.chunk_of_rows(), gamma, floor)
        else:
            part, signs = _totals(rows, refs.exact, refs.abs_ab, k, u=u, n=None, ref=refs.ref,
                                  underflow=underflow, against=against, block=block,
                                  row_chunk=batch.chunk_of_rows())
        assert signs is not None
        total = total.merge(part, batch.start * n)
        for i, (gi, r0, r1) in enumerate(batch.chunks):
            # a chunk with NaN or Inf in out adds no signs (the output fails; the criterion
            # reports inf); which chunks, looked at only where the batch has any
            at = slice(r0 - batch.start, r1 - batch.start)
            finite = not part.n_nonfinite or bool(np.isfinite(_f32_view(rows[at], "out")).all())
            bias.add(signs.row_z[at], signs.tile_z[i], gi, finite=finite)
        phases["metrics"] += time.perf_counter() - t
        t = time.perf_counter()
    phases["references"] += time.perf_counter() - t  # the last batch's check for more
    if seconds is not None:
        for phase, took in phases.items():
            seconds[phase] = seconds.get(phase, 0.0) + took
    return dataclasses.replace(total, bias=bias.sums())


@numba.njit(cache=True, error_model="numpy")
def _add_undecided(o, ex, ab, ref, rows, cols, ints, flts, signs, gamma, p, emin, mant, shift,
                   floor):
    """The metrics of the elements the C pass left undecided (`gmm_metric_rows`: at rows[t],
    cols[t], row-major order; out's float32 image o, exact value ex recomputed, |A||B| ab,
    the recipe ref in out's format as float32) added to its per-row sums (exact_gmm.h's
    `row_metrics`, `forward_refs.ROW_INTS` / `ROW_FLTS`): the same per-element values as
    `_reduce`'s, the first column of a row's bound ratio max kept."""
    for t in range(rows.shape[0]):
        i, j, x, of = rows[t], cols[t], ex[t], np.float64(o[t])
        r = _rn(x, p, emin, shift)
        d = _ulps(o[t], r, shift)
        rr = ratio_of(of, x, ab[t], gamma, emin, mant, floor)
        row = ints[i]
        row[0] += rr == math.inf
        row[1] = max(row[1], d)
        row[2] += d != 0
        row[3] += rr > 1.0
        row[4] += _mismatch(o[t], ref[t], d)
        row[5] += not (abs(x) <= F64_MAX and 0.0 <= ab[t] <= F64_MAX)
        row[6] += not abs(r) <= _F32_MAX
        if rr > flts[i, 0] or (rr == flts[i, 0] and j < row[7]):
            flts[i, 0] = rr
            row[7] = j
        flts[i, 1] += x * x
        flts[i, 2] += (of - x) * (of - x) if abs(of) <= F64_MAX else 0.0
        zs = sign_z(r, o[t], False)
        at = signs[i, j // BLOCK]
        at[0] += sign_z(r, o[t], True)
        at[1] += zs
        at[2] += zs * zs


def _row_totals(summed: RowMetrics, out: np.ndarray, row_chunk: np.ndarray, gamma: float,
                floor: float) -> tuple[MetricTotals, _Signs]:
    """The totals and `_Signs` (against RN(exact); chunks by `row_chunk`) of out [rows, N]
    from the C pass's per-row sums (`gmm_metric_rows`), its undecided elements added
    (`_add_undecided`); ValueError as `_totals`."""
    fmt = get_format(out.dtype)
    shift = _ULP_SHIFT[out.dtype]
    ru, cu = summed.rows_u, summed.cols_u
    ref = summed.recipe_u.astype(out.dtype).astype(np.float32)  # the recipe in out's format
    ints = summed.ints
    _add_undecided(_f32_view(out[ru, cu], "out"), summed.exact_u, summed.abs_ab_u, ref, ru, cu,
                   ints, summed.flts, summed.signs, gamma, fmt.mantissa_bits + 1,
                   fmt.min_exponent, fmt.mantissa_bits, shift, floor)
    rows, n = out.shape
    total = _of_parts(ints, summed.flts, np.arange(rows) * n + ints[:, 7], rows * n, True)
    z = summed.signs.astype(np.float64)  # sums of z in {-1, 0, 1}: exact
    firsts = np.flatnonzero(np.diff(row_chunk, prepend=-1))
    return total, _Signs(z[:, :, :2].sum(axis=1), np.add.reduceat(z, firsts, axis=0))


class _BiasTotals:
    """bias_z's sign-test sums (`metrics.BiasChunks`, both modes) of a gmm output's row
    chunks in row order, for `n_groups` groups of `n` columns in tiles of `block`."""

    def __init__(self, n_groups: int, n: int, block: int):
        self.n, self.tiles = n, -(-n // block)
        self.tile_width = np.minimum(block, n - block * np.arange(self.tiles))
        self.chunks = {mode: BiasChunks(n_groups, n, block) for mode in BIAS_MODES}

    def add(self, row_z: np.ndarray, tile_z: np.ndarray, group: int, *, finite: bool,
            ) -> None:
        """The next rows' signs (`_Signs`' of one chunk: row_z [rows, 2], tile_z [tiles,
        3]), of group `group`; none where out is not `finite` there (`finite` fails the
        output, and the criterion reports inf)."""
        rows = row_z.shape[0]
        at = slice(group * self.tiles, (group + 1) * self.tiles)
        row_z = row_z if finite else np.zeros((rows, 2))
        tile_z = tile_z if finite else np.zeros((self.tiles, 3))
        row_counts = np.full(rows, self.n if finite else 0, np.int64)
        tile_counts = rows * self.tile_width if finite else 0
        for i, mode in enumerate(BIAS_MODES):
            self.chunks[mode].add(np.ascontiguousarray(row_z[:, i]), row_counts, tile_z[:, i],
                                  tile_counts, float(tile_z[:, 2].sum()), at)

    def sums(self) -> dict[str, BiasSums]:
        """The `BiasSums` of each mode (`BIAS_MODES`) of the rows added."""
        return {mode: c.sums() for mode, c in self.chunks.items()}
