"""The measures of one matmul output that the layer-1 criteria decide on, reduced row chunk
by row chunk (`chunks.RowChunk`) and combined exactly, so that every chunking of an output
gives the values one chunk covering all of it gives, bit for bit:

* counts add (integers), and a fraction is taken of the totals at the end;
* a maximum keeps the first element that reaches it (chunks come in row order, so a later
  chunk replaces it only with a larger value): the worst element of each criterion;
* the float64 sums (error_ratio's, the SQNRs', calc_diff's) are kept per output row, each
  summed whole inside its chunk (numpy's sum of a row does not depend on the rows around
  it), and added at the end with `math.fsum` (correctly rounded, whatever the order);
* bias_z's cluster sums are `metrics.BiasSums`, exact integer counts, combined in
  `metrics.BiasChunks`.

Units: ULPs of the output's dtype; ratios are dimensionless; sums are in the output's
units squared, unscaled (a float32 or bfloat16 value squared, or its error to a float64
reference squared, lies between 2^-600 and 2^300: far inside float64's range).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fp8check.layers.op.chunks import RowChunk
from fp8check.layers.op.verdict import element, one_ulp
from fp8check.measures import metrics
from fp8check.measures.metrics import BIAS_MODES, BiasChunks, BiasSums
from fp8check.profiles import REF_ATOL, REF_RTOL
from fp8check.references.casts import rounded, to_float64

ULP_BINS = (0, 1, 2, 4, 8, 64)


@dataclass(frozen=True)
class Setting:
    """What the measures of one output depend on besides its chunks.

    out_dtype: the output's numpy dtype; k, n_terms, unit_roundoff, underflow: the error
    bound's (`metrics.bound_ratio`); bound: whether the bound is measured at all (a tensor
    core's needs its truncation term); max_bound_ratio: the limit elements are counted
    over; n_groups, block: bias_z's clusters (`metrics.bias_sums`); against_model: the
    kernel is expected to give the recipe's output (`AccumulatorModel.against_model`);
    n_cols: the output's last dimension; impact_atol, impact_rtol: the impact's allclose
    tolerances (row-RMS units)."""

    out_dtype: np.dtype
    k: int
    n_terms: int | None
    unit_roundoff: float
    underflow: float
    bound: bool
    max_bound_ratio: float
    n_groups: int
    n_cols: int
    block: int
    against_model: bool
    impact_atol: float
    impact_rtol: float


@dataclass
class Worst:
    """The largest value of a per-element measure seen so far and the description of the
    first element holding it (`verdict.element`; None before any element)."""

    value: Any = 0  # the measure's own type: an int ULP distance stays exact
    element: dict[str, Any] | None = None

    def offer(self, values: np.ndarray, describe: Callable[[tuple[Any, ...], float],
                                                          dict[str, Any]]) -> None:
        """Take the first maximum of `values` (a chunk's) if it beats the one held;
        `describe(local index, value)` makes its description."""
        if not values.size:
            return
        arg = np.unravel_index(int(np.argmax(values)), values.shape)
        value = values[arg].item()
        if self.element is None or value > self.value:
            self.value, self.element = value, describe(arg, value)


def row_sums(x: np.ndarray) -> np.ndarray:
    """The float64 sum of each leading row of x (a chunk's [rows, ...] array)."""
    return np.sum(x.reshape(x.shape[0], -1), axis=1) if x.size else np.zeros(x.shape[0])


@dataclass
class Sums:
    """Per-row float64 sums of several quantities over the chunks, combined at the end
    (`total`).  `finite` is False once a chunk's summands were not all finite (the sums
    are then not taken)."""

    rows: dict[str, list[np.ndarray]] = field(default_factory=dict)
    finite: bool = True

    def add(self, **parts: np.ndarray) -> None:
        for name, x in parts.items():
            self.rows.setdefault(name, []).append(row_sums(x))

    def total(self, name: str) -> float:
        return math.fsum(v for part in self.rows.get(name, []) for v in part.tolist())


def _ulp_counts(ulps: np.ndarray) -> np.ndarray:
    """How many of `ulps` fall in each bin [ULP_BINS[i], ULP_BINS[i + 1]) and >= the last."""
    edges = np.asarray(ULP_BINS[1:])
    return np.bincount(np.searchsorted(edges, ulps.ravel(), side="right"),
                       minlength=len(ULP_BINS))


def ulp_histogram(counts: np.ndarray) -> dict[str, int]:
    """The ULP histogram of a result (`ulp_histogram_vs_exact`) from `_ulp_counts`."""
    hist: dict[str, int] = {}
    for i, lo in enumerate(ULP_BINS[:-1]):
        hi = ULP_BINS[i + 1]
        hist[f"{lo}" if hi == lo + 1 else f"{lo}-{hi - 1}"] = int(counts[i])
    hist[f">={ULP_BINS[-1]}"] = int(counts[-1])
    return hist


def _finite_mismatches(out: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """Mask of the elements where the kernel is non-finite and the reference is not, or
    vice versa, or both are infinite with different signs."""
    if np.isfinite(out).all() and np.isfinite(exact).all():
        return np.zeros(out.shape, bool)
    o, e = to_float64(out), exact
    nan_bad = np.isnan(o) != np.isnan(e)
    inf_bad = np.isinf(o) != np.isinf(e)
    sign_bad = np.isinf(o) & np.isinf(e) & (np.sign(o) != np.sign(e))
    return nan_bad | inf_bad | sign_bad


def neutralised(a: np.ndarray, kept: np.ndarray | None) -> np.ndarray:
    """`a` with zero at the elements not `kept` (a itself when kept is None).

    Zero in the output, the exact value, |A||B|, the baselines and the bound's extra term
    alike makes an excluded element count for nothing: bound ratio 0 (the bound is > 0),
    0 ulps, no error in either sum of error_ratio (whose ratio of means over the same
    count is then the one over the kept elements), no bit difference."""
    if kept is None:
        return a
    return np.where(kept, a, np.zeros((), a.dtype))


@dataclass(frozen=True)
class ChunkArrays:
    """One chunk's elementwise measures, for the report's plots: the output with non-finite
    exact values neutralised, its ULP distances to RN(exact), bound ratios (None when the
    bound is not measured), the bound's extra term, and the mask of finite exact values
    (None: all are)."""

    out: np.ndarray
    ulps: np.ndarray
    ratio: np.ndarray | None
    extra: np.ndarray | None
    kept: np.ndarray | None


class OutputTally:
    """The measures of one output, chunk by chunk (`add`); read them when every chunk is in.

    Fields, over the compared elements (n): `finite_bad` and `finite_first` (elements
    non-finite unlike the exact value, the first of them); `nonfinite_exact` (elements whose
    exact value is NaN or Inf: neutralised everywhere below, `neutralised`); `ratio` (the
    worst bound ratio) and `n_over` (elements over the limit); `ulp` (the worst ULP
    distance to RN(exact)), `ulp_counts` (`ulp_histogram`), `n_off`; `out_finite`; the
    error sums `err` ("out": (out - exact)^2, "exact": exact^2, "base": (baseline -
    exact)^2, the baseline the naive kernel's or, against a model, the recipe's output)
    and `base_finite`; `bias(mode)` (None once a chunk's sums could not be taken);
    `ref_close_fail` (outside allclose(REF_ATOL, REF_RTOL)); `bit_mismatches` and `bit`
    (the worst ULP distance to the recipe) where the recipe is given; the impact's
    (`impact_*`) where the unquantized product is given.
    """

    def __init__(self, setting: Setting) -> None:
        s = self.setting = setting
        self.n = 0
        self.finite_bad = 0
        self.finite_first: dict[str, Any] | None = None
        self.nonfinite_exact = 0
        self.ratio, self.n_over = Worst(), 0
        self.ulp, self.n_off = Worst(), 0
        self.ulp_counts = np.zeros(len(ULP_BINS), np.int64)
        self.out_finite = True
        self.err, self.base_finite = Sums(), True
        self._bias: dict[str, BiasChunks] | None = {
            mode: BiasChunks(s.n_groups, s.n_cols, s.block) for mode in BIAS_MODES}
        self.ref_close_fail = 0
        self.bit_mismatches, self.bit = 0, Worst()
        self.impact_nonfinite_ref = 0
        self.impact_nonzero = False
        self.impact_global, self.impact_norm = Sums(), Sums()
        self.impact_close_fail = self.impact_close_n = 0
        self.impact_worst = Worst(-math.inf)

    def add(self, c: RowChunk) -> ChunkArrays:
        """Measure chunk `c` (the next in row order) and fold it in."""
        s, out_np = self.setting, self.setting.out_dtype

        def at(idx: tuple[Any, ...]) -> list[int]:  # a chunk's index -> the output's
            return [c.start + int(idx[0]), *(int(i) for i in idx[1:])]

        self.n += c.out.size
        mask = _finite_mismatches(c.out, c.exact)
        bad = int(np.count_nonzero(mask))
        if bad and self.finite_first is None:
            idx = tuple(np.argwhere(mask)[0])
            self.finite_first = element(at(idx), c.out[idx], c.exact[idx],
                                        one_ulp(c.out[idx], c.exact[idx], out_np))
        self.finite_bad += bad
        kept = None
        if not np.isfinite(c.exact).all():
            kept = np.isfinite(c.exact)
            self.nonfinite_exact += int(kept.size - np.count_nonzero(kept))
        o, exact = neutralised(c.out, kept), neutralised(c.exact, kept)
        exact_rounded = rounded(exact, out_np)  # correctly rounded: f64 -> f32 / bf16 is one RNE
        ulps = metrics.ulp_distance(o, exact_rounded, out_np)
        extra = None if c.extra is None else neutralised(c.extra, kept)
        recipe = None if c.recipe is None else neutralised(c.recipe, kept)
        ratio = None
        if s.bound:
            ratio = metrics.bound_ratio(o, exact, neutralised(c.abs_ab, kept), s.k,
                                        u=s.unit_roundoff, out_dtype=out_np, n=s.n_terms,
                                        extra=extra, underflow=s.underflow)

            def bound_element(idx: tuple[Any, ...], worst: float) -> dict[str, Any]:
                err = abs(float(o[idx]) - float(exact[idx]))
                # bound = |out - exact| / ratio; unknown where out is not finite or equal
                bound = err / worst if np.isfinite(worst) and worst > 0 else None
                return element(at(idx), o[idx], exact[idx], ulps[idx], bound)

            self.ratio.offer(ratio, bound_element)
            self.n_over += int(np.count_nonzero(ratio > s.max_bound_ratio))
        self.ulp.offer(ulps, lambda idx, _: element(at(idx), o[idx], exact[idx], ulps[idx]))
        self.ulp_counts += _ulp_counts(ulps)
        self.n_off += int(np.count_nonzero(ulps))
        o64 = to_float64(o)
        finite = bool(np.isfinite(o64).all())
        self.out_finite &= finite
        if finite:
            self.err.add(out=np.square(o64 - exact), exact=np.square(exact))
        base: np.ndarray | None
        if s.against_model:  # the model's output: given on every case (bit_exact applies)
            assert recipe is not None
            expected, base = recipe, recipe
        else:
            expected = exact_rounded
            base = None if c.naive is None else neutralised(c.naive, kept)
        if base is not None:
            b64 = to_float64(base)
            if np.isfinite(b64).all():
                self.err.add(base=np.square(b64 - exact))
            else:
                self.base_finite = False
        self._add_bias(c, o, expected, kept)
        self.ref_close_fail += metrics.allclose_report(o, exact, REF_ATOL, REF_RTOL).n_fail
        if recipe is not None:
            d = metrics.ulp_distance(o, recipe, out_np)
            self.bit_mismatches += int(np.count_nonzero(d))
            self.bit.offer(d, lambda idx, _: element(at(idx), o[idx], recipe[idx], d[idx]))
        if c.unquantized is not None:
            self._add_impact(c, at)
        return ChunkArrays(o, ulps, ratio, extra, kept)

    def _add_bias(self, c: RowChunk, o: np.ndarray, expected: np.ndarray,
                  kept: np.ndarray | None) -> None:
        """bias_z's sign-test sums of the chunk against `expected` (RN(exact) or the
        model); a chunk whose sums cannot be taken (a non-finite expected value) leaves the
        test untestable (`bias` None)."""
        if self._bias is None:
            return
        try:
            parts = {mode: metrics.bias_sums(o, expected, c.groups, self.setting.n_groups,
                                             mode=mode, block=self.setting.block, keep=kept)
                     for mode in BIAS_MODES}
        except ValueError:
            self._bias = None
            return
        for mode in BIAS_MODES:
            self._bias[mode].add_sums(parts[mode])

    def bias(self, mode: str) -> BiasSums | None:
        """bias_z's sums of `mode` over the chunks added; None once a chunk's sums could
        not be taken."""
        return None if self._bias is None else self._bias[mode].sums()

    def _add_impact(self, c: RowChunk, at: Callable[[tuple[Any, ...]], list[int]]) -> None:
        """The impact's measures of the chunk against the unquantized product: its
        non-finite and nonzero values, the global SQNR's sums, and on rows normalised by
        the reference row's RMS the SQNR's and calc_diff's sums and allclose (rows whose
        reference is all zero are left out)."""
        s = self.setting
        ref, o = c.unquantized, to_float64(c.out)
        assert ref is not None
        bad = int(np.count_nonzero(~np.isfinite(ref)))
        self.impact_nonfinite_ref += bad
        if bad:  # impact is not defined on this output: nothing more to measure
            return
        self.impact_nonzero |= bool(np.any(ref))
        if np.isfinite(o).all():
            self.impact_global.add(signal=np.square(ref), noise=np.square(ref - o))
        else:
            self.impact_global.finite = False
        on, rn, rows = row_normalised(o, ref)
        if np.isfinite(on).all():
            self.impact_norm.add(signal=np.square(rn), noise=np.square(rn - on),
                                 cross=on * rn, squares=on * on + rn * rn)
        else:
            self.impact_norm.finite = False
        close = metrics.allclose_report(on, rn, s.impact_atol, s.impact_rtol)
        self.impact_close_fail += close.n_fail
        self.impact_close_n += close.n
        if close.worst_index is not None and close.worst_excess is not None:
            i, j = close.worst_index
            # back from (kept row, column) of the normalised view to the output's own index
            idx = (*np.unravel_index(rows[i], o.shape[:-1]), j)
            self.impact_worst.offer(
                np.asarray([close.worst_excess]),
                lambda _i, _v: element(at(idx), o[idx], ref[idx],
                                       one_ulp(o[idx], ref[idx], s.out_dtype)))


def row_normalised(
    out: np.ndarray, ref: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """out and ref with each row (last axis) divided by the reference row's RMS; rows whose
    reference is all zero are dropped (the third array: flat indices of the rows kept).
    Per-token (1x128) quantization makes the row the unit of quantization error: without
    this a few large rows (lognormal-rows spans e^+-6) decide a global SQNR alone and it
    swings by several dB between seeds."""
    o, r = out.reshape(-1, out.shape[-1]), ref.reshape(-1, ref.shape[-1])
    rms = np.sqrt(np.mean(np.square(r), axis=1))
    keep = rms > 0
    return o[keep] / rms[keep, None], r[keep] / rms[keep, None], np.flatnonzero(keep)
