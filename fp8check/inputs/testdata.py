"""Deterministic test-data builders for grouped matmuls: numpy only, no hypothesis.

* `GROUP_PATTERNS[name](rng, m, g) -> int32[g]` group sizes;
* `DISTRIBUTIONS[name](rng, shape) -> float32 array`, and `ue8m0_edges(rng, shape)`, the
  same for one quantizer class (block scales on the two ue8m0 recipes' edges);
* `make_gmm_inputs(seed, m, k, n, g, pattern=..., dist=...) -> GmmInputs`.

The gate's named suites (`fp8check.inputs.cases`) are built from these, so the same seed gives
the same arrays on every machine and library version; `fp8check.inputs.strategies` wraps them
in hypothesis strategies for fuzzing.

Examples::

    rng = np.random.default_rng(0)
    GROUP_PATTERNS["zero-middle"](rng, 1024, 8)        # int32[8], sum 1024, group 4 empty
    DISTRIBUTIONS["fp8-ties"](rng, (256, 512))         # float32, e4m3 ties after scaling
    make_gmm_inputs(7, m=300, k=256, n=128, g=4, pattern="residues", dist="many-scales")

Group sizes: the rows of group i are the next `sizes[i]` rows; sum(sizes) <= m and rows
at or past the sum belong to no group.  Every pattern sums exactly to m except "ones"
(sum = g) and "partial-sum" (sum < m).  A pattern raises ValueError when it cannot be met
for (m, g); whether it can depends only on (m, g), never on the rng.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from fp8check.references.quant import BLOCK

_MAX_TINY = 7  # "many-tiny" groups have at most this many rows

GroupPattern = Callable[[np.random.Generator, int, int], np.ndarray]
Distribution = Callable[[np.random.Generator, tuple], np.ndarray]


# ------------------------------------------------------------------ group sizes


def check_group_args(m: int, g: int) -> None:
    """ValueError unless m is an integer row count in [0, 2^31) and g a positive integer."""
    if int(m) != m or not 0 <= m < 2**31:
        raise ValueError(f"group sizes: m must be an integer in [0, 2^31), got {m!r}")
    if int(g) != g or g < 1:
        raise ValueError(f"group sizes: g must be a positive integer, got {g!r}")


def _composition(rng: np.random.Generator, total: int, parts: int, min_size: int = 0):
    """`parts` integers >= min_size summing to `total` (sorted uniform cut points)."""
    free = total - parts * min_size
    if free < 0:
        raise ValueError(f"cannot split {total} rows into {parts} groups of >= {min_size}")
    cuts = np.sort(rng.integers(0, free + 1, size=parts - 1))
    return np.diff(np.concatenate(([0], cuts, [free]))) + min_size


def _uniform_random(rng, m, g):
    return _composition(rng, m, g)


def _zero_at(position: Callable[[int], int], min_groups: int, name: str) -> GroupPattern:
    """Pattern with exactly one empty group, at position(g); every other group non-empty."""

    def build(rng, m, g):
        if g < min_groups or m < g - 1:
            raise ValueError(f"{name}: needs g >= {min_groups} and m >= g - 1, got m={m}, g={g}")
        sizes = _composition(rng, m, g - 1, min_size=1)
        return np.insert(sizes, position(g), 0)

    return build


def _single_group(rng, m, g):
    sizes = np.zeros(g, dtype=np.int64)
    sizes[rng.integers(g)] = m
    return sizes


def _ones(rng, m, g):
    if g > m:
        raise ValueError(f"ones: needs m >= g (one row per group), got m={m}, g={g}")
    return np.ones(g, dtype=np.int64)


def _residues(rng, m, g):
    """Residues mod 128 spread evenly over 1..127 (both ends included), cycling when
    g - 1 > 127; the last residue makes the total reach m; the rest is whole 128-row tiles
    spread at random; then the groups are shuffled."""
    spread = (
        np.rint(np.linspace(1, BLOCK - 1, g - 1)).astype(np.int64)
        if g - 1 <= BLOCK - 1
        else np.resize(np.arange(1, BLOCK, dtype=np.int64), g - 1)
    )
    residues = np.append(spread, (m - spread.sum()) % BLOCK)
    tiles = m - residues.sum()
    if tiles < 0:
        raise ValueError(f"residues: needs m >= {residues.sum()} for g={g}, got m={m}")
    sizes = residues + BLOCK * _composition(rng, tiles // BLOCK, g)
    return rng.permutation(sizes)


def _multiples_128(rng, m, g):
    if m % BLOCK:
        raise ValueError(f"multiples-128: m must be a multiple of {BLOCK}, got m={m}")
    return BLOCK * _composition(rng, m // BLOCK, g)


def _many_tiny(rng, m, g):
    """All groups but the last get 0..7 rows (cut short if m runs out); the last takes
    the remainder."""
    ends = np.minimum(np.cumsum(rng.integers(0, _MAX_TINY + 1, size=g - 1)), m)
    tiny = np.diff(np.concatenate(([0], ends)))
    return np.append(tiny, m - (ends[-1] if g > 1 else 0))


def _dominant(rng, m, g):
    """One random group takes round(0.9 m) rows, the others split the rest at random."""
    if g < 2:
        raise ValueError(f"dominant: needs g >= 2, got g={g}")
    big = int(round(0.9 * m))
    return np.insert(_composition(rng, m - big, g - 1), rng.integers(g), big)


def _partial_sum(rng, m, g):
    """The groups cover a random m//2 .. m-1 leading rows; at least one trailing row
    belongs to no group."""
    if m < 1:
        raise ValueError("partial-sum: needs m >= 1")
    return _composition(rng, int(rng.integers(m // 2, m)), g)


def _int32_pattern(build: GroupPattern) -> GroupPattern:
    def pattern(rng: np.random.Generator, m: int, g: int) -> np.ndarray:
        check_group_args(m, g)
        return np.asarray(build(rng, int(m), int(g)), dtype=np.int32)

    pattern.__doc__ = build.__doc__
    return pattern


GROUP_PATTERNS: dict[str, GroupPattern] = {
    name: _int32_pattern(build)
    for name, build in {
        "uniform-random": _uniform_random,
        "zero-first": _zero_at(lambda g: 0, 2, "zero-first"),
        "zero-middle": _zero_at(lambda g: g // 2, 3, "zero-middle"),
        "zero-last": _zero_at(lambda g: g - 1, 2, "zero-last"),
        "single-group": _single_group,
        "ones": _ones,
        "residues": _residues,
        "multiples-128": _multiples_128,
        "many-tiny": _many_tiny,
        "dominant": _dominant,
        "partial-sum": _partial_sum,
    }.items()
}
"""fn(rng, m, g) -> int32[g] group sizes; see the module docstring for the sum rule."""


# ----------------------------------------------------------------- distributions


def _as_rows_cols(shape: tuple) -> tuple[int, int, int]:
    """(batch, rows, cols) view of a shape: the last two axes are the matrix."""
    if len(shape) == 1:
        return 1, 1, shape[0]
    return int(np.prod(shape[:-2], dtype=np.int64)), shape[-2], shape[-1]


def _expand(mask: np.ndarray, rows: int, cols: int, block_r: int) -> np.ndarray:
    """Per-block mask [b, ceil(R/block_r), ceil(C/128)] -> per-element mask [b, R, C]."""
    full = np.repeat(np.repeat(mask, block_r, axis=1), BLOCK, axis=2)
    return full[:, :rows, :cols]


def _some_blocks(rng: np.random.Generator, shape: tuple, p: float) -> np.ndarray:
    """Random block mask with probability p each, with at least one block set and one
    clear whenever there are two or more blocks."""
    mask = rng.random(shape) < p
    flat = mask.reshape(-1)
    if flat.size >= 2:
        if not flat.any():
            flat[rng.integers(flat.size)] = True
        if flat.all():
            flat[rng.integers(flat.size)] = False
    return mask


def _normal(rng, shape):
    return rng.standard_normal(shape)


def _lognormal_rows(rng, shape):
    """Each row (all axes but the last) scaled by exp(N(0, 2^2)): ~e^+-6 spread."""
    return rng.standard_normal(shape) * np.exp(rng.normal(0.0, 2.0, shape[:-1] + (1,)))


def _student_t(rng, shape):
    return rng.standard_t(3, shape)


def _outlier_channels(rng, shape):
    """Normal, with max(1, K // 64) channels of the last axis scaled by 100..1000."""
    x = rng.standard_normal(shape)
    k = shape[-1]
    count = min(k, max(1, k // 64))
    channels = rng.choice(k, size=count, replace=False)
    x[..., channels] *= rng.uniform(100.0, 1000.0, size=count)
    return x


def _zero_blocks(rng, shape):
    """Normal, with ~20% of the 1x128 row blocks and ~20% of the 128x128 tiles of the
    last two axes all zero (at least one of each kind when there are two or more)."""
    b, r, c = _as_rows_cols(shape)
    x = rng.standard_normal((b, r, c))
    col_blocks = -(-c // BLOCK)
    row_blocks = _some_blocks(rng, (b, r, col_blocks), 0.2)
    tiles = _some_blocks(rng, (b, -(-r // BLOCK), col_blocks), 0.2)
    x[_expand(row_blocks, r, c, 1) | _expand(tiles, r, c, BLOCK)] = 0.0
    return x.reshape(shape)


def _e4m3_nonnegative() -> np.ndarray:
    """Every finite e4m3fn value >= 0 in increasing order (codes 0x00..0x7E)."""
    return np.arange(0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64)


def _per_block_amax(rng, shape, amax: np.ndarray, fill: np.ndarray) -> np.ndarray:
    """Put +-amax[block] at one random position of every 1x128 block of the last axis and
    `fill` elsewhere; amax has shape [..., ceil(C/128)]."""
    c = shape[-1]
    x = fill.copy()
    block_start = np.arange(0, c, BLOCK)
    width = np.minimum(BLOCK, c - block_start)
    lead = shape[:-1]
    pos = block_start + (rng.random(lead + (block_start.size,)) * width).astype(np.int64)
    signs = rng.choice([-1.0, 1.0], size=amax.shape)
    np.put_along_axis(x, pos, signs * amax, axis=-1)
    return x


def _fp8_ties(rng, shape):
    """Each 1x128 block: one element +-448 * 2^j (j in -8..8 per block), all others +-2^j
    times a midpoint between two adjacent e4m3 values.  The block's scale is then exactly
    2^j under every recipe (RN(amax/448) = 2^j, RN(1/s) = 2^-j), so x * RN(1/s) lands
    exactly on an e4m3 rounding tie (exercises round-half-to-even, not half-away)."""
    values = _e4m3_nonnegative()
    midpoints = (values[:-1] + values[1:]) / 2  # 5 significant bits: exact in float32
    n_blocks = -(-shape[-1] // BLOCK)
    scale = np.exp2(rng.integers(-8, 9, size=shape[:-1] + (n_blocks,))).astype(np.float64)
    per_elem = np.repeat(scale, BLOCK, axis=-1)[..., : shape[-1]]
    fill = rng.choice(midpoints, size=shape) * rng.choice([-1.0, 1.0], size=shape) * per_elem
    return _per_block_amax(rng, shape, 448.0 * scale, fill)


def _near_max(rng, shape):
    """Each 1x128 block: amax A = 2^U(-10, 10) (random mantissa), one element +-A and the
    others +-A (1 - 0.1 U(0, 1)): every value within 10% of the block amax, so after
    scaling they sit just below the FP8 max, where a rounded-up scale overshoots 448."""
    n_blocks = -(-shape[-1] // BLOCK)
    amax = np.float32(np.exp2(rng.uniform(-10, 10, size=shape[:-1] + (n_blocks,))))
    per_elem = np.repeat(amax, BLOCK, axis=-1)[..., : shape[-1]].astype(np.float64)
    fill = per_elem * (1 - 0.1 * rng.random(shape)) * rng.choice([-1.0, 1.0], size=shape)
    return _per_block_amax(rng, shape, amax.astype(np.float64), fill)


def quantizer_scale_and_reciprocal(amax: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The `deepgemm` recipe's float32 block scale s = RN(max(amax, 1e-4) / 448) and its
    float32 reciprocal RN(1 / s), elementwise."""
    a = np.maximum(np.asarray(amax, np.float32), np.float32(1e-4))
    s = (a / np.float32(448.0)).astype(np.float32)
    return s, (np.float32(1.0) / s).astype(np.float32)


def _e4m3(v: np.ndarray) -> np.ndarray:
    """float32 -> e4m3fn by RNE (after the recipe's clamp to +-448), as float64 values."""
    clamped = np.clip(v.astype(np.float32), np.float32(-448.0), np.float32(448.0))
    return clamped.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)


# Per block, how many e4m3 rounding boundaries and float32 neighbours of boundary * s the
# quantizer-boundary draw tries (the candidates that straddle are kept).
_BOUNDARY_TRIES = 12
_NEIGHBOURS = (-2, -1, 0, 1, 2)


def _quantizer_boundary(rng, shape):
    """Each 1x128 block: amax A = 2^U(-4, 8), one element +-A, every other element a
    float32 x (random sign) whose two quotients by the block's `deepgemm` scale s straddle
    an e4m3 rounding boundary: e4m3(RN(x * RN(1/s))) != e4m3(RN(x / s)).

    Why such x exist: s is not a power of two (A's significand is random), so 1/s is not
    a float32 and RN(1/s) * s = 1 + d with 0 < |d| <= 2^-24; x * RN(1/s) and x / s differ
    by the factor 1 + d, so for x within about |d| x of b * s (b the midpoint of two
    adjacent e4m3 values) the two round to different sides of b.  The draw tries float32
    neighbours of RN(b * s) for `_BOUNDARY_TRIES` random boundaries per block, keeps the
    straddling ones (checked with exactly the two float32 computations) and draws every
    element from its block's; a block with none gets a new amax (redrawn until all have).
    Multiplying a block by a power of two keeps the property (s, 1/s and x scale alike),
    so the suites' per-K-block magnitudes preserve it.  The 1x128 blocks of the last axis
    only: a 128x128 block's scale is another."""
    c = shape[-1]
    n_blocks = -(-c // BLOCK)
    lead = shape[:-1]
    flat_blocks = int(np.prod(lead, dtype=np.int64)) * n_blocks
    midpoints = (_e4m3_nonnegative()[:-1] + _e4m3_nonnegative()[1:]) / 2
    amax = np.empty(flat_blocks, np.float32)
    chosen = np.empty((flat_blocks, BLOCK), np.float32)
    todo = np.arange(flat_blocks)
    while todo.size:
        a = np.exp2(rng.uniform(-4, 8, size=todo.size)).astype(np.float32)
        s, inv = quantizer_scale_and_reciprocal(a)
        b = rng.choice(midpoints, size=(todo.size, _BOUNDARY_TRIES))
        base = (b * s[:, None].astype(np.float64)).astype(np.float32).view(np.int32)
        x = np.stack([(base + k).view(np.float32) for k in _NEIGHBOURS], axis=-1)
        x = x.reshape(todo.size, -1)
        divided = _e4m3((x / s[:, None]).astype(np.float32))
        multiplied = _e4m3((x * inv[:, None]).astype(np.float32))
        straddles = divided != multiplied
        ok = straddles.any(axis=1)
        # per block, BLOCK draws uniform over its straddling candidates (sorted first)
        first = np.argsort(~straddles[ok], axis=1, kind="stable")
        count = straddles[ok].sum(axis=1, keepdims=True)
        picks = (rng.random((int(ok.sum()), BLOCK)) * count).astype(np.int64)
        chosen[todo[ok]] = np.take_along_axis(
            x[ok], np.take_along_axis(first, picks, axis=1), axis=1)
        amax[todo[ok]] = a[ok]
        todo = todo[~ok]
    per_block = amax.reshape(lead + (n_blocks,))
    fill = chosen.reshape(lead + (n_blocks * BLOCK,))[..., :c].astype(np.float64)
    fill *= rng.choice([-1.0, 1.0], size=fill.shape)
    return _per_block_amax(rng, shape, per_block.astype(np.float64), fill)


# ue8m0 scale edges.  amax a = 448 2^k + j ulps (the ulp of 448 2^k = 1.75 2^(k+8) is
# 2^(k-15)) gives a / 448 = 2^k (1 + (4j/7) 2^-23), so RN(a / 448) = 2^k (1 + n 2^-23) with
# n = round(4j/7), never a tie (4j/7 = i + 1/2 would need 8j = 7 (2i + 1), odd).  Entry n
# is the j that gives n: 4j/7 = 0, 0.57, 1.71, 2.86, 4, 5.14, 5.71.
_EDGE_ULPS = (0, 1, 3, 5, 7, 9, 10)
_EDGE_TILE_EXP = (-14, 24)  # k of each 128x128 tile's amax
_EDGE_BELOW = 8  # the tile's other rows: k - 1 .. k - 8, so every k in -22 .. 24


def _ue8m0_edges(rng, shape):
    """Block amaxes whose `deepgemm` scale RN(amax / 448) is a power of two 2^k or n = 1..6
    float32 ulps above one, where the two ue8m0 recipes part: `deepgemm-ue8m0` (the bit
    ceiling) gives 2^(k+1) for every n >= 1, `deepseek-v3-ue8m0` (float32 log2, then ceil)
    2^k while n <= N(k) (`references.quant`: 0 for -4 <= k <= 3, then 1, 2 or 5 as |k|
    grows) and 2^(k+1) above; n = 0 gives 2^k under both.

    Each 128x128 tile of the last two axes draws k uniform in -14..24 and n uniform in
    0..6; one random row of it carries that amax in its 1x128 block, every other row's
    block k - d with d uniform in 1..8 and its own n, below the tile's (an amax of exponent
    k - 1 is under 448 2^k), so the 128x128 and the 1x128 scales are both on the edges
    (k in -22..24: 448 2^-22 is above the recipes' 1e-4 amax floor).  In a block, one
    element is +-amax (random position and sign), the others amax U(-1, 1).  A float32
    input only: a bf16 amax (8 significant bits) cannot sit 1..6 float32 ulps above
    448 2^k, and a per-K-block power-of-two factor would move k (the suites apply none)."""
    b, r, c = _as_rows_cols(shape)
    tiles_r, blocks_c = -(-r // BLOCK), -(-c // BLOCK)
    k_tile = rng.integers(_EDGE_TILE_EXP[0], _EDGE_TILE_EXP[1] + 1, size=(b, tiles_r, blocks_c))
    k = np.repeat(k_tile, BLOCK, axis=1)[:, :r] - rng.integers(
        1, _EDGE_BELOW + 1, size=(b, r, blocks_c))
    rows = np.minimum(BLOCK, r - BLOCK * np.arange(tiles_r))  # the last tile may be partial
    top = BLOCK * np.arange(tiles_r)[:, None] + (rng.random((b, tiles_r, blocks_c))
                                                 * rows[:, None]).astype(np.int64)
    bi, _, ci = np.indices((b, tiles_r, blocks_c))
    k[bi, top, ci] = k_tile
    amax = np.float32(448.0) * np.exp2(k).astype(np.float32)  # exact: 1.75 2^(k+8)
    ulps = np.asarray(_EDGE_ULPS)[rng.integers(0, len(_EDGE_ULPS), size=amax.shape)]
    amax = (amax.view(np.int32) + ulps.astype(np.int32)).view(np.float32).astype(np.float64)
    per_elem = np.repeat(amax, BLOCK, axis=-1)[..., :c]
    fill = per_elem * rng.uniform(-1.0, 1.0, size=(b, r, c))
    return _per_block_amax(rng, (b, r, c), amax, fill).reshape(shape)


def _many_scales(rng, shape):
    """Normal, each 128x128 tile of the last two axes scaled by its own 2^e, e uniform in
    -20..14 (TransformerEngine-style per-tile dynamic range)."""
    b, r, c = _as_rows_cols(shape)
    exps = rng.integers(-20, 15, size=(b, -(-r // BLOCK), -(-c // BLOCK)))
    scale = np.repeat(np.repeat(np.exp2(exps), BLOCK, axis=1), BLOCK, axis=2)[:, :r, :c]
    return (rng.standard_normal((b, r, c)) * scale).reshape(shape)


def _float32_distribution(build) -> Distribution:
    def distribution(rng: np.random.Generator, shape: tuple) -> np.ndarray:
        shape = tuple(shape)
        if not shape or any(int(s) != s or s < 0 for s in shape):
            raise ValueError(f"distribution: shape must be non-negative ints, got {shape!r}")
        shape = tuple(int(s) for s in shape)
        if 0 in shape:
            return np.zeros(shape, dtype=np.float32)
        return np.asarray(build(rng, shape), dtype=np.float32)

    distribution.__doc__ = build.__doc__
    return distribution


DISTRIBUTIONS: dict[str, Distribution] = {
    name: _float32_distribution(build)
    for name, build in {
        "normal": _normal,
        "lognormal-rows": _lognormal_rows,
        "student-t": _student_t,
        "outlier-channels": _outlier_channels,
        "zero-blocks": _zero_blocks,
        "fp8-ties": _fp8_ties,
        "near-max": _near_max,
        "many-scales": _many_scales,
        "quantizer-boundary": _quantizer_boundary,
    }.items()
}
"""fn(rng, shape) -> float32 array of that shape; blocks run along the last axis (1x128)
and over the last two axes (128x128)."""

UE8M0_EDGES = "ue8m0-edges"
ue8m0_edges: Distribution = _float32_distribution(_ue8m0_edges)
"""The `ue8m0-edges` draw (fn(rng, shape) as in DISTRIBUTIONS): block scales on and just
above powers of two.  Not a DISTRIBUTIONS entry: only a float32-input quantizer can meet
its edges, so the suites draw it for quantizer-only cases rather than crossing it with
every group pattern."""


# --------------------------------------------------------------------- problems


@dataclass(frozen=True, eq=False)
class GmmInputs:
    """Inputs of one grouped matmul: lhs float32 [m, k], rhs float32 [g, k, n], group
    sizes int32 [g] (sum <= m), all drawn from distribution `dist`."""

    m: int
    k: int
    n: int
    g: int
    group_sizes: np.ndarray
    lhs: np.ndarray
    rhs: np.ndarray
    dist: str

    def __repr__(self) -> str:  # arrays elided: hypothesis prints this on failure
        return (
            f"GmmInputs(m={self.m}, k={self.k}, n={self.n}, g={self.g}, "
            f"group_sizes={self.group_sizes.tolist()}, dist={self.dist!r})"
        )


def check_name(name: str, table: dict, what: str) -> None:
    """ValueError naming the known keys unless `name` is a key of `table` (a `what`)."""
    if name not in table:
        raise ValueError(f"unknown {what} {name!r}; expected one of {sorted(table)}")


def gmm_inputs_from_sizes(
    seed: int, k: int, n: int, sizes: np.ndarray, m: int, dist: str
) -> GmmInputs:
    """The GmmInputs with these group sizes (int32[g], sum <= m): lhs [m, k] then rhs
    [g, k, n] drawn from DISTRIBUTIONS[dist] with `np.random.default_rng(seed)`."""
    if k < 1 or n < 1:
        raise ValueError(f"gmm inputs: k and n must be >= 1, got k={k}, n={n}")
    check_name(dist, DISTRIBUTIONS, "distribution")
    rng = np.random.default_rng(seed)
    build = DISTRIBUTIONS[dist]
    lhs, rhs = build(rng, (m, k)), build(rng, (sizes.size, k, n))
    return GmmInputs(m, k, n, int(sizes.size), sizes, lhs, rhs, dist)


def make_gmm_inputs(
    seed: int,
    m: int,
    k: int,
    n: int,
    g: int,
    *,
    pattern: str = "uniform-random",
    dist: str = "normal",
) -> GmmInputs:
    """The GMM problem named by (seed, shape, pattern, dist): same arguments, same arrays."""
    check_name(pattern, GROUP_PATTERNS, "group pattern")
    sizes = GROUP_PATTERNS[pattern](np.random.default_rng([seed, 0]), m, g)
    return gmm_inputs_from_sizes(seed, k, n, sizes, m, dist)
