"""A gmm-fp8 output's three references from one pass over its exact partials, for the
production-shape check (`fp8check.measures.totals.gmm_reference_chunks`):
`gmm_references` gives, bit for bit, `gmm(..., out_dtype, accum)` (the recipe's output),
`gmm(..., np.float64, "exact")` (the exact value) and `abs_product` (|A||B|).

Where an integer-digit path runs (`references.amx`: AMX int8 tiles; else
`references.vnni`: AVX512-VNNI) and the operands allow it (e4m3fn, finite scales, a
recipe on the exact partials: deepgemm, cublas or tokamax; no NaN code among the codes
the pass reads, which it checks itself as it makes their digits), one C pass per
thread's row share of all the groups (`<prefix>_exact_gmm` in amx_gmm.c or vnni_gmm.c,
which packs the rhs codes itself) forms each K block's exact partial and consumes it at
once (exact_gmm.h): the recipe's float32 step (the path's gmm's own code: the same bits),
the exact value's TwoSum state (the exact products split by an fma, `exact_step`), which
the pass rounds after the last K block as `certified.round_certified` does
(`finish_exact`), within an error bound that |A||B|'s sum gives, and |A||B| from its
magnitude partials by the same dot products (`abs_bound`), scaled in the pass too; it
writes the three into the outputs.  The exact value is therefore the correctly rounded
one whatever the path; an element the certified bound cannot decide (rare: a near-tie) is
recomputed by the superaccumulator (`_exact_at`).  Elsewhere, and where the pass meets a
NaN code: `gmm_and_exact` and `abs_product`, the same bits.

`gmm_metric_rows` runs the same pass with the production check's metrics of an output
under test summed per row in it (exact_gmm.h's `row_metrics`) instead of the three
references written out: 21 bytes an element neither stored nor read back.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numba
import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from fp8check.references import cbuild
from fp8check.references.abs_bound import blockwise_abs_product, factor
from fp8check.references.certified import scaled_terms_exact
from fp8check.references.gmm import (
    _LUT,
    DEFAULT_INTERVAL,
    _checked_gmm_args,
    _digit_path,
    gmm_and_exact,
    group_offsets,
)
from fp8check.references.intdot import RECIPE_CODES, DigitPath, row_shares
from fp8check.references.quant import BLOCK, QTensor

# A pass of the C loop: rows (a multiple of 16, at most AMX's CHUNK_ROWS) whose lhs
# digits and their magnitudes' (`DigitPath.pass_bytes` an element) fit in _PLANES_BYTES
# of L2 beside the rhs digits it reads (AMX: a column block's tiles, its COL_BLOCK_BYTES).
_PLANES_BYTES = 3 << 18
_MAX_PASS_ROWS = 256
_NO_PARTS = np.zeros((0, 0, 0))  # no low words: the e4m3 partials are exact in float64
_LUT_E4M3 = _LUT[np.dtype(ml_dtypes.float8_e4m3fn)]


def _undecided(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) of the elements the C pass's certified rounding could not decide
    (flags [m, N] uint8, 1 there, else 0: a sum within its error bound of a rounding tie,
    which these short sums of short products hit often enough, about one in 10^4): the
    elements `_exact_at` recomputes.  (flatnonzero of the flags as booleans: tens of
    times faster than nonzero of the 2-D uint8 array.)"""
    return np.divmod(np.flatnonzero(flags.view(np.bool_)), flags.shape[1])


@numba.njit(cache=True)
def _exact_at(a_codes, b_codes, lut, sa, sb, rows, cols):
    """The exact values at (rows[t], cols[t]) of one group's lhs codes a_codes [m, K] and
    rhs codes b_codes [K, N] (uint8, values lut[code]), scales sa [m, K/128] and sb
    [K/128, ceil(N/128)], rounded once to float64: each block's partial in float64 (exact,
    `references.gmm`), its terms summed in the superaccumulator
    (`certified.scaled_terms_exact`, the exact recipe's own fallback)."""
    kb_n = a_codes.shape[1] // BLOCK
    p = np.empty((kb_n, 1, 1))
    s_a, s_b = np.empty((1, kb_n), np.float32), np.empty((kb_n, 1), np.float32)
    out = np.empty(rows.shape[0])
    for t in range(rows.shape[0]):
        i, j = rows[t], cols[t]
        for kb in range(kb_n):
            acc = 0.0
            for c in range(BLOCK * kb, BLOCK * (kb + 1)):
                acc += lut[a_codes[i, c]] * lut[b_codes[c, j]]
            p[kb, 0, 0] = acc
            s_a[0, kb], s_b[kb, 0] = sa[i, kb], sb[kb, j // BLOCK]
        out[t] = scaled_terms_exact(p, _NO_PARTS, s_a, s_b, 0, 0, 53, -1022)
    return out


class Buffers:
    """Memory that successive `gmm_references` calls reuse for their outputs: the arrays a
    call returns are then views of it, overwritten by the next call.  For a loop over row
    chunks that is done with each chunk's references before the next (the production
    check, `fp8check.measures.totals.gmm_metric_totals`): fresh arrays cost each chunk the
    page faults of its 21 bytes an element, 4% of production wi's check and 12% of wo's
    (measured: Granite Rapids class, two threads)."""

    def __init__(self) -> None:
        self._flat: dict[str, np.ndarray] = {}

    def take(self, name: str, shape: tuple[int, int], dtype: DTypeLike) -> np.ndarray:
        """An uninitialised [rows, cols] array of dtype, the memory of `name` (grown as
        needed)."""
        size = shape[0] * shape[1]
        flat = self._flat.get(name)
        if flat is None or flat.size < size or flat.dtype != np.dtype(dtype):
            flat = self._flat[name] = np.empty(size, dtype)
        return flat[:size].reshape(shape)


def _fresh(name: str, shape: tuple[int, int], dtype: DTypeLike) -> np.ndarray:
    return np.empty(shape, dtype)


def gmm_references(lhs: QTensor, rhs: QTensor, group_sizes: ArrayLike,
                   out_dtype: DTypeLike, accum: str, *, interval: int = DEFAULT_INTERVAL,
                   buffers: Buffers | None = None,
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gmm(lhs, rhs, group_sizes, out_dtype, accum, interval=interval),
    gmm(..., np.float64, "exact"), abs_product(lhs, rhs, group_sizes)), bit for bit, for
    blockwise FP8 operands (module docstring); ValueError as gmm's.  With `buffers`, the
    integer-digit pass writes into their memory (`Buffers`: valid until the next call)."""
    m, n, accum, dt, gs = _checked_gmm_args(lhs, rhs, group_sizes, out_dtype, accum,
                                            interval)
    path = _pass_path(lhs, rhs, accum)
    if path is None or (refs := _exact_pass(path, lhs, rhs, gs, accum, m, n,
                                            buffers.take if buffers else _fresh)) is None:
        recipe, exact = gmm_and_exact(lhs, rhs, gs, dt, accum, interval=interval)
        return recipe, exact, blockwise_abs_product(lhs, rhs, gs)
    recipe32, exact, abs_ab, _ = refs
    return recipe32 if dt == recipe32.dtype else recipe32.astype(dt), exact, abs_ab


ROW_INTS = ("nonfinite", "ulp_max", "ulp_off", "over_bound", "ref_mismatch", "bad",
            "bad_sign_ref", "argmax")
"""The columns of `RowMetrics.ints` (exact_gmm.h's metric_rows)."""
ROW_FLTS = ("ratio_max", "signal", "noise")
"""The columns of `RowMetrics.flts`."""


class _MetricRowsC(ctypes.Structure):
    """exact_gmm.h's metric_rows."""

    _fields_ = [("out", ctypes.c_void_p), ("bf16", ctypes.c_int64),
                ("gamma", ctypes.c_double), ("floor", ctypes.c_double),
                ("ints", ctypes.c_void_p), ("flts", ctypes.c_void_p),
                ("signs", ctypes.c_void_p)]


@dataclass(frozen=True)
class RowMetrics:
    """An output's metrics as the C pass sums them per row (exact_gmm.h's metric_rows,
    of the elements whose exact value it decided), and the elements it left undecided.

    ints [rows, ROW_INTS] int64, flts [rows, ROW_FLTS] float64, signs [rows, ceil(N/128),
    3] int32 (the sign test's z against RN(exact), magnitude and signed modes, and the
    count of nonzero z, per 128-column tile); the undecided elements at (rows_u, cols_u)
    in row-major order with their recipe (float32), exact value (recomputed: float64)
    and |A||B| (float64), whose metrics the caller adds."""

    ints: np.ndarray
    flts: np.ndarray
    signs: np.ndarray
    rows_u: np.ndarray
    cols_u: np.ndarray
    recipe_u: np.ndarray
    exact_u: np.ndarray
    abs_ab_u: np.ndarray


def gmm_metric_rows(lhs: QTensor, rhs: QTensor, group_sizes: np.ndarray, out: np.ndarray,
                    accum: str, *, gamma: float, floor: float, buffers: Buffers | None = None,
                    ) -> RowMetrics | None:
    """The production check's metrics of `out` [M, N] (float32 or bfloat16, C-contiguous:
    the output under test, its rows those of lhs) against the references of
    `gmm_references(lhs, rhs, group_sizes, out.dtype, accum)`, summed per row of the
    groups (`RowMetrics`) in the C pass itself; `gamma` and `floor` the bound's slope and
    underflow term (`metrics.gamma_n`, `metrics.underflow_floor`).  None where that pass
    does not run here (no integer-digit path, operands it does not take, a NaN code):
    the caller computes the references another way.  group_sizes as `gmm_references`
    checks them (ValueError otherwise)."""
    shape = (lhs.shape[0], rhs.shape[-1])
    if (out.dtype not in (np.float32, ml_dtypes.bfloat16) or out.shape != shape
            or not out.flags.c_contiguous):
        raise ValueError(f"gmm_metric_rows: out must be C-contiguous float32 or bfloat16 "
                         f"{shape}, got {out.dtype} {out.shape}")
    m, n, accum, _, gs = _checked_gmm_args(lhs, rhs, group_sizes, out.dtype, accum,
                                           DEFAULT_INTERVAL)
    path = _pass_path(lhs, rhs, accum)
    if path is None:
        return None
    rows = int(gs.sum())
    ints = np.zeros((rows, len(ROW_INTS)), np.int64)
    ints[:, ROW_INTS.index("argmax")] = -1
    flts = np.zeros((rows, len(ROW_FLTS)))
    flts[:, ROW_FLTS.index("ratio_max")] = -1.0
    signs = np.zeros((rows, -(-n // BLOCK), 3), np.int32)
    c = _MetricRowsC(out.ctypes.data, int(out.dtype == ml_dtypes.bfloat16), gamma, floor,
                     ints.ctypes.data, flts.ctypes.data, signs.ctypes.data)
    refs = _exact_pass(path, lhs, rhs, gs, accum, m, n, buffers.take if buffers else _fresh,
                       ctypes.addressof(c))
    if refs is None:
        return None
    recipe32, exact, abs_ab, (ru, cu) = refs
    return RowMetrics(ints, flts, signs, ru, cu, recipe32[ru, cu], exact[ru, cu],
                      abs_ab[ru, cu])


def _pass_path(lhs: QTensor, rhs: QTensor, accum: str) -> DigitPath | None:
    """The integer-digit path the C pass runs on for these operands (e4m3fn, finite
    scales, K > 0, a recipe on the exact partials), or None."""
    path = _digit_path()
    if (path is None or accum not in RECIPE_CODES or lhs.fmt != "e4m3fn"
            or lhs.values.shape[1] == 0
            or not (np.isfinite(lhs.scales).all() and np.isfinite(rhs.scales).all())):
        return None
    return path


def _exact_pass(path: DigitPath, lhs: QTensor, rhs: QTensor, gs: np.ndarray, accum: str,
                m: int, n: int, take: Callable[..., np.ndarray], metrics: int = 0,
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                           tuple[np.ndarray, np.ndarray]] | None:
    """(recipe in float32, exact value, |A||B|) [m, n] of e4m3fn operands with finite
    scales from the path's C pass (`<prefix>_exact_gmm`) on the threads' row shares, the
    undecided elements recomputed, in arrays from `take` (`Buffers.take`'s signature),
    and the undecided elements' (rows, columns); with `metrics` (the address of a
    `_MetricRowsC`) the three only where undecided, the metrics summed into its rows;
    None where the pass met a NaN code."""
    offs = group_offsets(gs)
    # the pass writes every row of the groups: only the rows past them are zeroed (np.zeros
    # of memory the allocator recycles clears all of it, a pass over every element)
    recipe32 = take("recipe", (m, n), np.float32)
    exact, abs_ab = take("exact", (m, n), np.float64), take("abs_ab", (m, n), np.float64)
    for out in (recipe32, exact, abs_ab):
        out[offs[-1]:] = 0
    k = lhs.values.shape[1]
    a_codes = np.ascontiguousarray(lhs.values.view(np.uint8))
    sa = np.ascontiguousarray(lhs.scales, dtype=np.float32)
    pass_rows = min(_MAX_PASS_ROWS, max(16, _PLANES_BYTES // (path.pass_bytes * k) // 16 * 16))
    fn = path.fn("exact_gmm")
    b_codes = np.ascontiguousarray(rhs.values.view(np.uint8))
    sb = np.ascontiguousarray(rhs.scales, dtype=np.float32)
    flags = take("flags", (int(offs[-1]), n), np.uint8)  # the groups' rows, all written
    cuts = row_shares(offs, numba.get_num_threads()).tolist()
    done = cbuild.run_parallel([
        (fn, (a_codes.ctypes.data, k, b_codes.ctypes.data, n, offs.ctypes.data, len(gs), c0, c1,
              sa.ctypes.data, sb.ctypes.data, sb.shape[2], RECIPE_CODES[accum], pass_rows,
              recipe32.ctypes.data, exact.ctypes.data, abs_ab.ctypes.data, flags.ctypes.data,
              factor(k), metrics))
        for c0, c1 in zip(cuts[:-1], cuts[1:], strict=True) if c1 > c0])
    if 1 in done:
        return None
    rows_u, cols_u = _undecided(flags)
    groups_u = np.searchsorted(offs, rows_u, side="right") - 1
    for g in np.unique(groups_u):
        r0, r1, at = int(offs[g]), int(offs[g + 1]), groups_u == g
        exact[rows_u[at], cols_u[at]] = _exact_at(a_codes[r0:r1], b_codes[g], _LUT_E4M3,
                                                  sa[r0:r1], sb[g], rows_u[at] - r0, cols_u[at])
    return recipe32, exact, abs_ab, (rows_u, cols_u)
