"""Bounded plot-data summary of one layer-1 matmul result (numpy only, no matplotlib).

The layer-1 validator keeps scalars; the report's per-case figures need arrays.  This
module condenses them into `metrics["plots"]`, small enough to keep for every case
(about 15 kB of compact JSON at most, whatever the shape):

* `ulp_hist`: ULP distance of the kernel output to the correctly rounded exact value, in
  power-of-two bins: `edges` [0, 1, 2, 4, ..., 2^j] (bin i is [edges[i], edges[i+1]), the
  last bin is >= edges[-1]), `counts`, `over` (of each bin's elements, those over the
  error bound: bound ratio > 1) and `nan` (elements where either side is NaN, all over
  the bound).  ULPs are not gated: near cancellation a valid summation order lands
  millions of ULPs from the exact value while well within the bound, so the verdict of
  each bin is the bound's, not its ULP count's.
* `err_vs_ab`: `points` [[|A||B|_ij, |out - exact|_ij, bound_ratio_ij, bound_ij], ...] for
  at most `MAX_POINTS` elements: the `N_WORST` largest bound ratios plus a seeded uniform
  sample of the rest (so the cloud's shape and its worst outliers both show).  bound_ij
  is the error the criterion allows that element (`metrics.error_bound`: gamma_n |A||B|
  plus the output rounding, the float64 slack and any declared accumulator term), so a
  point is above its bound exactly when its ratio is > 1; `gamma` is the bound's gamma_n
  (the slope of its accumulation term gamma_n |A||B|), `n_elements` the number of
  compared elements.
* `bound_tiles`: the maximum bound ratio over tiles of `row_tile` x `col_tile` output
  elements, at most `MAX_TILES` x `MAX_TILES` tiles (`max`, rows first); `rows`, `cols`
  the compared extent; `group_starts` the first row of every group (empty groups repeat
  a row), `residual_rows` [start, end) of every group's partial last 128-row tile (the
  rows a padding-free kernel stores masked); `row_axis` says what a row is.
* `group_sqnr`: per group, SQNR in dB of the output against the unquantized float64
  reference (`impact`) and against the exact value of the quantized problem (`vs_exact`);
  None for an empty gmm group (no rows), inf as the string "inf" in JSON; a tgmm
  group always has its K x N slab (zero when empty).

Floats are kept to 4 significant digits (plots need no more); the error, bound and ratio
of a point are rounded away from the verdict's edge (`_directed4`), so that the rounded
numbers keep it: err > bound and ratio > 1 exactly for the points over the bound.  Rows
past sum(group_sizes) are not part of any array here, exactly as they are not compared by
the gate.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal
from typing import TYPE_CHECKING, Any

import numpy as np

from fp8check.measures import metrics
from fp8check.references.casts import to_float64

if TYPE_CHECKING:
    from fp8check.layers.op.problem import Problem

MAX_POINTS = 256
N_WORST = 32
MAX_TILES = 32
MIN_TILE = 8
WORST_BLOCK = 4096  # elements per block of worst_indices' first pass
QUANT_ROWS = 128  # a padding-free kernel's M tile: rows past the last full one are residual
_SAMPLE_SEED = 0


def _sig4(v: float) -> float:
    """v to 4 significant digits (non-finite values unchanged)."""
    return float(f"{v:.4g}") if math.isfinite(v) else float(v)


_UP, _DOWN = Context(prec=4, rounding=ROUND_CEILING), Context(prec=4, rounding=ROUND_FLOOR)


def _directed4(v: float, up: bool) -> float:
    """v to 4 significant digits rounded towards +inf (`up`) or -inf; non-finite values
    unchanged.  The decimal is exact before it is rounded, and float() is monotone, so
    the result is >= v when `up` and <= v otherwise."""
    if not math.isfinite(v):
        return float(v)
    return float((_UP if up else _DOWN).plus(Decimal(v)))


def ulp_histogram(ulps: np.ndarray, over: np.ndarray) -> dict[str, Any]:
    """Power-of-two histogram of int64 ULP distances, NaN sentinels counted apart, with
    the number of elements of each bin that are over the bound (`over`: a boolean array
    of ulps' shape)."""
    nan = ulps == metrics.ULP_NAN
    finite = ulps[~nan]
    top = int(finite.max(initial=0))
    # edges 0, 1, 2, 4, ... up to the first power of two above the largest distance
    n_pow = max(1, top.bit_length())
    edges = [0] + [1 << j for j in range(n_pow + 1)]
    bins = np.array(edges[:-1] + [np.iinfo(np.int64).max])
    counts = np.histogram(finite, bins=bins)[0]
    over_counts = np.histogram(finite[over[~nan]], bins=bins)[0]
    return {"edges": edges[:-1], "counts": [int(c) for c in counts],
            "over": [int(c) for c in over_counts], "nan": int(np.count_nonzero(nan))}


def _rank_key(values: np.ndarray) -> np.ndarray:
    """values with NaN and +inf both as +inf: the order of the report's maxima."""
    return np.nan_to_num(values, nan=np.inf, posinf=np.inf)


def worst_indices(values: np.ndarray, count: int) -> np.ndarray:
    """Flat indices of the `count` largest elements of `values` (NaN ranks as +inf; ties
    broken arbitrarily), in no particular order; every index when there are fewer.

    Found among the elements of the `count` blocks of `WORST_BLOCK` elements with the
    largest maxima: those blocks hold `count` elements each >= the count-th largest block
    maximum, and every element outside them is <= its own block's maximum, hence <= that
    one, so the largest `count` of the blocks' elements are the largest of all.  One
    reduction pass over the array, then a partition of count * WORST_BLOCK candidates,
    not a partition of millions (up to 0.8 s on the ci suite's 4-6M-element tgmm outputs).
    `count` >= 1.
    """
    flat = values.ravel()
    if flat.size <= count:
        return np.arange(flat.size)
    starts = np.arange(0, flat.size, WORST_BLOCK)
    # a sort of the block maxima (thousands) serves any number of blocks
    blocks = np.argsort(_rank_key(np.maximum.reduceat(flat, starts)))[-count:]
    cand = (starts[blocks][:, None] + np.arange(WORST_BLOCK)).ravel()
    cand = cand[cand < flat.size]  # the last block may be short
    top = np.argpartition(_rank_key(flat[cand]), -count)[-count:]
    return cand[top]


def sample_indices(ratio: np.ndarray) -> np.ndarray:
    """Flat indices of the elements `err_vs_ab` shows, ascending: all of them when there
    are at most MAX_POINTS, else the N_WORST largest bound ratios and a seeded uniform
    sample of the rest, MAX_POINTS in all."""
    flat_r = ratio.ravel()
    if flat_r.size <= MAX_POINTS:
        idx = np.arange(flat_r.size)
    else:
        worst = worst_indices(flat_r, N_WORST)
        # MAX_POINTS distinct uniform draws, in draw order; at most N_WORST of them are
        # worst, and the first MAX_POINTS - N_WORST of the others are a uniform sample of
        # the rest (no mask or index list of the whole array)
        drawn = np.random.default_rng(_SAMPLE_SEED).choice(flat_r.size, MAX_POINTS,
                                                           replace=False)
        rest = drawn[~np.isin(drawn, worst)][:MAX_POINTS - N_WORST]
        idx = np.sort(np.concatenate([worst, rest]))
    return idx


def _point(ab: float, err: float, ratio: float, bound: float) -> list[float]:
    """One `err_vs_ab` point, rounded away from the verdict's edge (see the module)."""
    over = ratio > 1
    return [_sig4(ab), _directed4(err, up=over), _directed4(ratio, up=over),
            _directed4(bound, up=not over)]


def _tile_size(extent: int) -> int:
    """Smallest power of two >= MIN_TILE giving at most MAX_TILES tiles over `extent`."""
    t = MIN_TILE
    while math.ceil(extent / t) > MAX_TILES:
        t *= 2
    return t


def tile_max(ratio2d: np.ndarray) -> dict[str, Any]:
    """Max of a [rows, cols] array over the report's tile grid (NaN counts as inf)."""
    rows, cols = ratio2d.shape
    tr, tc = _tile_size(rows), _tile_size(cols)
    nr, nc = math.ceil(rows / tr), math.ceil(cols / tc)
    padded = np.full((nr * tr, nc * tc), -np.inf)
    padded[:rows, :cols] = _rank_key(ratio2d)
    tiles = padded.reshape(nr, tr, nc, tc).max(axis=(1, 3))
    return {"row_tile": tr, "col_tile": tc, "rows": rows, "cols": cols,
            "max": [[_sig4(float(v)) for v in row] for row in tiles]}


def _group_rows(group_sizes: np.ndarray) -> list[tuple[int, int]]:
    ends = np.cumsum(group_sizes)
    return [(int(e - s), int(e)) for s, e in zip(group_sizes.tolist(), ends.tolist(),
                                                 strict=True)]


def _sqnr(ref: np.ndarray, out: np.ndarray) -> float:
    return _sig4(float(metrics.sqnr_db(ref, out)))


def plot_data(out: np.ndarray, prob: Problem, u: float, ulps: np.ndarray,
              ratio: np.ndarray, extra: np.ndarray | None) -> dict[str, Any]:
    """The bounded plot data of a layer-1 result (see the module docstring).

    `out` is the kernel's output on the compared rows (`out[:prob.rows]`, its own dtype),
    `prob` the case's Problem (exact / abs_ab / unquantized references, k and n for the
    bound), `u` the kernel's declared accumulator unit roundoff, `ulps` and `ratio` the
    elementwise ULP distance to RN(exact) and bound ratio that the criteria computed, and
    `extra` the declared accumulator's term of the bound on those rows, or None
    (`fp8check.layers.op.output_criteria` calls it as its `plots` hook).  gmm outputs are
    [M, N] with groups along the rows; tgmm outputs [G, K, N] are shown as G*K rows, one group per K
    rows.
    """
    if prob.unquantized is None:
        raise ValueError("plot data needs the problem's unquantized reference")
    unquantized = prob.unquantized
    sl = slice(0, prob.rows)
    o, exact = to_float64(out), prob.exact[sl]
    group_sizes = np.asarray(prob.group_sizes)
    if o.ndim == 3:  # tgmm: [G, K, N], every group a K x N slab
        g, k_rows, n_cols = o.shape
        tiles = tile_max(ratio.reshape(g * k_rows, n_cols))
        tiles.update(row_axis="group x K row", residual_rows=[],
                     group_starts=[i * k_rows for i in range(g)])
        groups = [(i, i + 1) for i in range(g)]
    else:
        tiles = tile_max(ratio)
        groups = _group_rows(group_sizes)
        tiles.update(row_axis="output row", group_starts=[s for s, _ in groups],
                     residual_rows=[[s + (e - s) // QUANT_ROWS * QUANT_ROWS, e]
                                    for s, e in groups if (e - s) % QUANT_ROWS])
    # gmm: an empty group has no rows to measure (None); tgmm: it has a K x N slab that
    # must be exactly zero, the place where an empty-group bug shows.
    measured = [e > s or o.ndim == 3 for s, e in groups]
    idx = sample_indices(ratio)
    abs_ab = prob.abs_ab[sl].ravel()[idx]
    # the criterion's bound, by the same function, on the sampled elements only
    bound = metrics.error_bound(out.ravel()[idx], exact.ravel()[idx], abs_ab, prob.k, u=u,
                                out_dtype=prob.out_dtype, n=prob.n_terms,
                                extra=None if extra is None else extra.ravel()[idx])
    with np.errstate(invalid="ignore"):
        err = np.abs(o.ravel()[idx] - exact.ravel()[idx])
    points = [_point(*v) for v in zip(abs_ab.tolist(), err.tolist(),
                                       ratio.ravel()[idx].tolist(), bound.tolist(),
                                       strict=True)]
    return {
        "ulp_hist": ulp_histogram(ulps, ratio > 1),
        "err_vs_ab": {"gamma": metrics.gamma_n(prob.k, u, prob.n_terms), "n_elements": int(o.size),
                      "points": points},
        "bound_tiles": tiles,
        "group_sqnr": {
            "group_sizes": [int(v) for v in group_sizes],
            "impact": [_sqnr(unquantized[sl][a:b], o[a:b]) if keep else None
                       for (a, b), keep in zip(groups, measured, strict=True)],
            "vs_exact": [_sqnr(exact[a:b], o[a:b]) if keep else None
                         for (a, b), keep in zip(groups, measured, strict=True)],
        },
    }
