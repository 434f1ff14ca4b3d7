"""Deterministic, named case suites of the gate: `smoke`, `ci` (default) and `full`.

A suite is data: every case is drawn from numpy generators seeded by the crc32 of its id,
so the same suite name and seed give the same ids and the same arrays on every machine and
library version (no hypothesis, no salted `hash()`).  A `Case` is fully described by its
fields; its id names all of them (`wi-m512-k1024-n256-g8-zero-middle-normal-f32-s0`), and
`case_inputs(case)` regenerates the same float32 inputs from the id alone, so `--case ID`
reproduces a failure bit for bit.

Coverage (built from `fp8check.inputs.testdata`): the production wi (K = 4 N) and wo (K < N)
aspects scaled for the CPU, every group pattern (zero-size groups first / middle / last,
M_g = 1, residues over 1..127, multiples of 128, many tiny groups, one dominant group),
every value distribution, K with at least 4 quantization blocks whose magnitudes differ by
powers of two (so every K block gets its own scale), at least 2 N tiles, both output
dtypes, seeded adversarial random group sizes (`random<i>` cases: empty groups, cuts on
and beside 128-row tile edges, rows past the last group), and an `exact_partials` family
(small integers times power-of-two block magnitudes, quantized with `deepgemm-ue8m0`): on
it every 128-wide partial sum is exactly representable in float32, so a kernel declaring
an accumulation recipe must match the reference bit for bit.  ci adds the `subnormal`
family (`fp8check.inputs.subnormal`): outputs and partial sums in the float32 subnormal
range, exact in every valid order, so a flush-to-zero accumulator fails unless declared.
ci's `smallint-ties` cases scale each K block of w by the inverse of x's power of two, so
the products are plain integers and about a fifth of the bf16 outputs are exact rounding
ties (each rounding direction bug changes them).  ci's M is 512 (whole 128-row tiles)
except in its cases of M = 77 and M = 140 (`_ROW_CASES`: rows that no 4, 8, 16, 64 or
128-row alignment covers, a partial last tile, small M with many groups), and it has two
non-finite cases per output dtype (NaN and +-Inf planted, `fp8check.inputs.nonfinite`).

Quantizer-only cases (`Case.quantizer_only`, aspect "quant") have K % 128 != 0 and, for
128x128 blocks (w [G, K, N]: K rows), K and N not multiples of 128, so every quantizer
meets partial last blocks; the matmul contracts, which take whole 128-wide K blocks, are
never handed them (`Case.applies_to`).  Two of ci's (`ue8m0-edges`,
`fp8check.inputs.testdata.ue8m0_edges`) put every block scale RN(amax / 448) on a power of two or
a few ulps above one, where the `deepgemm-ue8m0` and `deepseek-v3-ue8m0` recipes part.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace

import numpy as np

from fp8check.contracts import CONTRACTS, CONTRACTS_BY_NAME
from fp8check.inputs.nonfinite import plant as plant_nonfinite
from fp8check.inputs.subnormal import SUBNORMAL_DIST, SUBNORMAL_RECIPE, subnormal_inputs
from fp8check.inputs.testdata import (
    DISTRIBUTIONS,
    GROUP_PATTERNS,
    UE8M0_EDGES,
    GroupPattern,
    ue8m0_edges,
)
from fp8check.references.quant import BLOCK

EXACT_RECIPE = "deepgemm-ue8m0"
DEFAULT_RECIPE = "deepgemm"
# Per-K-block magnitudes are 2**e, e uniform in this range: different scales per K block.
_BLOCK_SPREAD_LOG2 = (-3, 3)
# Small integers of the exact family: |x| <= 8, so q = x * 2**-e and a 128-wide partial
# sum is an integer multiple of 2**-(e_a+e_b) with at most 128 * 8 * 8 = 2**13 units.
_EXACT_INT_MAX = 8

# The value class with NaN and +-Inf planted in normal operands (`fp8check.inputs.nonfinite`):
# not a DISTRIBUTIONS entry, since fuzzing and the other suites draw finite data.
NONFINITE = "nonfinite"

SUITES = ("smoke", "ci", "full")
# Distribution name of the exact family's tie-heavy cases (integer products, see case_inputs).
TIES_DISTRIBUTION = "smallint-ties"
# Aspect of the quantizer-only cases.
QUANTIZER_ASPECT = "quant"
# (m, k, n, g) of each suite's quantizer-only cases: K = 5.5 and 1.56 blocks (1x128 tails
# of 64 and 72 columns), and w's 128x128 grid with partial row and column blocks.
_QUANTIZER_SHAPES: dict[str, tuple[tuple[int, int, int, int], ...]] = {
    "smoke": (), "ci": ((200, 704, 320, 2), (130, 200, 136, 3)), "full": (),
}
# Distribution of the quantizer-only cases: rounding boundaries of x * RN(1/s) vs x / s.
_QUANTIZER_DISTRIBUTION = "quantizer-boundary"
# (m, k, n, g) of ci's quantizer-only cases on the ue8m0 recipes' scale edges
# (`testdata.ue8m0_edges`), two so that no catch rests on one: x has 96 x 3 and 40 x 5
# 1x128 blocks, w 3 x 3 x 3 and 2 x 5 x 2 128x128 ones, the last of each row and column
# partial.
_UE8M0_EDGE_SHAPES = ((96, 320, 320, 3), (40, 600, 200, 2))
# ci's cases of other row counts (aspect, M, G, pattern, distribution, out dtype): M = 77
# is no multiple of 4 (so of no 8, 16, 64 or 128-row alignment either) and under one
# 128-row tile, its 16 groups about 5 rows each; M = 140 is 4-aligned but not 8-aligned,
# a whole tile and 12 rows.  Each M has a finite case and one with non-finite inputs, so
# no row class rests on one case and each out dtype gets a second non-finite case.  Small
# M keeps them cheap: each runs for every built-in kernel.
_ROW_CASES = (
    ("wi", 77, 16, "many-tiny", "normal", "f32"),
    ("wo", 140, 8, "uniform-random", "zero-blocks", "bf16"),
    ("wi", 77, 16, "uniform-random", NONFINITE, "bf16"),
    ("wo", 140, 8, "zero-last", NONFINITE, "f32"),
)
# The smoke suite and the exact family use these patterns first: a zero-size group in the
# middle and residual rows over 1..127 are where group-offset bugs show.
_FOCUS_PATTERNS = ("zero-middle", "residues")
# Pattern name of the seeded adversarial random draws, followed by the draw's index.
RANDOM_PATTERN = "random"


@dataclass(frozen=True)
class SuiteShape:
    """Scaled shapes of one suite: M rows, (K, N) per aspect, G values to use, and the
    number of adversarial random group-size draws per aspect."""

    m: int
    wi: tuple[int, int]
    wo: tuple[int, int]
    gs: tuple[int, ...]
    random_draws: int


SUITE_SHAPES: dict[str, SuiteShape] = {
    # wi keeps production's K = 4 N (2048 x 512); wo has K < N as production's 512 x 2048
    # while keeping >= 4 K blocks.  ci's wo has an odd K block count (640 = 5 x 128: a loop
    # over pairs of K blocks drops the last) and N = 896 = 3 x 256 + 128 (a 256-wide N tile
    # loop leaves the last 128 columns unwritten); wi keeps even counts and N = 2 x 128.
    "smoke": SuiteShape(m=256, wi=(512, 256), wo=(512, 768), gs=(4,), random_draws=1),
    "ci": SuiteShape(m=512, wi=(1024, 256), wo=(640, 896), gs=(8, 16), random_draws=4),
    "full": SuiteShape(m=2048, wi=(2048, 512), wo=(512, 2048), gs=(8, 32), random_draws=12),
}


@dataclass(frozen=True)
class Case:
    """One problem: shapes, group sizes, value distribution, output dtype, seed."""

    id: str
    suite: str
    aspect: str
    m: int
    k: int
    n: int
    g: int
    pattern: str
    distribution: str
    out_dtype: str
    seed: int
    group_sizes: tuple[int, ...]
    recipe: str = DEFAULT_RECIPE
    exact_partials: bool = False
    # Checked chunk by chunk (`fp8check.layers.op.streamed`): no [M, N] float64
    # reference is ever built (production shapes, see `PRODUCTION_SHAPES`).
    streamed: bool = False
    quantizer_only: bool = False

    def group_sizes_array(self) -> np.ndarray:
        return np.asarray(self.group_sizes, dtype=np.int32)

    def contracts(self) -> tuple[str, ...]:
        """The contracts whose kernels run on this case: a quantizer-only case (K not a
        multiple of 128) is for the quantizer contract alone (no matmul,
        `Contract.matmul`), a streamed case for gmm-fp8 alone (the one with a streamed
        reference, `Contract.streamed`); every other case is for all."""
        if self.quantizer_only:
            return tuple(c.name for c in CONTRACTS_BY_NAME.values() if not c.matmul)
        if self.streamed:
            return tuple(c.name for c in CONTRACTS_BY_NAME.values() if c.streamed)
        return CONTRACTS

    def applies_to(self, contract: str) -> bool:
        """Whether kernels of `contract` run on this case (`contracts`)."""
        return contract in self.contracts()


@dataclass(frozen=True)
class CaseInputs:
    """Unquantized float32 operands of a case: x [M,K], w [G,K,N], dy [M,N]."""

    x: np.ndarray
    w: np.ndarray
    dy: np.ndarray
    group_sizes: np.ndarray


def case_id(
    aspect: str, m: int, k: int, n: int, g: int, pattern: str, dist: str, out: str, seed: int
) -> str:
    return f"{aspect}-m{m}-k{k}-n{n}-g{g}-{pattern}-{dist}-{out}-s{seed}"


def _rng(*parts: object) -> np.random.Generator:
    # crc32 of the text: stable across processes and Python versions (hash() is salted).
    return np.random.default_rng(zlib.crc32("/".join(map(str, parts)).encode()))


def _validated_group_sizes(gs: np.ndarray, m: int, g: int, source: str) -> tuple[int, ...]:
    gs = np.asarray(gs)
    if gs.shape != (g,) or np.any(gs < 0) or int(gs.sum()) > m:
        raise ValueError(f"{source} produced invalid group sizes {gs.tolist()} for m={m}, g={g}")
    return tuple(int(v) for v in gs)


def _random_group_sizes(rng: np.random.Generator, m: int, g: int) -> np.ndarray:
    """Adversarial random group sizes for m >= 1 rows: int64[g] with sum <= m.

    Half of the draws end the groups at a uniform row in [0, m), leaving the rows past it
    in no group; the others end at m.  Each of the g - 1 cuts between groups is, with equal
    probability, uniform over [0, end], on 0 or on the end (coinciding cuts make empty
    groups, first, last or in between), or on a 128-row tile edge or one row either side
    of it (groups of whole tiles plus or minus a residual row); the sorted cuts give the
    sizes.
    """
    end = m if rng.random() < 0.5 else int(rng.integers(m))
    uniform = rng.integers(0, end + 1, size=g - 1)
    ends = np.where(rng.random(g - 1) < 0.5, 0, end)
    tile_edges = BLOCK * rng.integers(0, end // BLOCK + 1, size=g - 1)
    near_tile_edges = tile_edges + rng.integers(-1, 2, size=g - 1)
    kind = rng.integers(0, 3, size=g - 1)
    cuts = np.clip(np.choose(kind, (uniform, ends, near_tile_edges)), 0, end)
    return np.diff(np.concatenate(([0], np.sort(cuts), [end])))


# Production MoE shapes of the `full` suite, checked chunk by chunk (streamed): wi
# (M = 65536 routed rows, K = 2048, N = 512, G = 256 experts) and wo (K and N swapped),
# each with its distribution and output dtype.  At this M the group offsets pass 32767
# (int16) and a 128-row tile grid has over 512 tiles.
PRODUCTION_M, PRODUCTION_G = 65536, 256
PRODUCTION_SHAPES = (("wi", 2048, 512, "normal", "bf16"),
                     ("wo", 512, 2048, "lognormal-rows", "f32"))
PRODUCTION_PATTERN = "production"
# Rows drawn per chunk when generating a streamed case's operands: the distributions
# draw in float64, so a whole production operand would take 1-2 GiB more.
_DRAW_ROWS = 4096


def _production_group_sizes(rng: np.random.Generator, m: int, g: int) -> np.ndarray:
    """Routed-token counts of a skewed router: expert popularity ~ Dirichlet(0.5) (a few hot
    experts, many cold ones), about one expert in ten receiving no tokens, and 1..127
    trailing rows (the batch's padding) in no group; the routed rows are drawn
    multinomially over the non-empty experts.  int64[g], sum in [m - 127, m - 1]."""
    p = rng.dirichlet(np.full(g, 0.5))
    p[rng.choice(g, size=max(1, g // 10), replace=False)] = 0.0
    routed = m - int(rng.integers(1, BLOCK))
    return rng.multinomial(routed, p / p.sum())


def _production_cases(seed: int) -> list[Case]:
    cases = []
    for aspect, k, n, dist, out in PRODUCTION_SHAPES:
        cid = case_id(aspect, PRODUCTION_M, k, n, PRODUCTION_G, PRODUCTION_PATTERN, dist, out,
                      seed)
        gs = _production_group_sizes(_rng(cid, "groups"), PRODUCTION_M, PRODUCTION_G)
        cases.append(Case(
            id=cid, suite="full", aspect=aspect, m=PRODUCTION_M, k=k, n=n, g=PRODUCTION_G,
            pattern=PRODUCTION_PATTERN, distribution=dist, out_dtype=out, seed=seed,
            group_sizes=_validated_group_sizes(gs, PRODUCTION_M, PRODUCTION_G,
                                               "production group sizes"),
            streamed=True,
        ))
    return cases


def _make_case(
    suite: str, aspect: str, g: int, pattern: str, dist: str, out: str, seed: int,
    build_sizes: GroupPattern | None = None, exact: bool = False,
    mkn: tuple[int, int, int] | None = None,
) -> Case:
    """The case of these fields; its group sizes come from `build_sizes` (default:
    GROUP_PATTERNS[pattern]) called with a generator seeded by the case id.  (m, k, n)
    come from the suite's shape for the aspect, or from `mkn` (the quantizer-only aspect)."""
    shape = SUITE_SHAPES[suite]
    if mkn is None:
        m, (k, n) = shape.m, shape.wi if aspect == "wi" else shape.wo
    else:
        m, k, n = mkn
    cid = case_id(aspect, m, k, n, g, pattern, dist, out, seed)
    build = GROUP_PATTERNS[pattern] if build_sizes is None else build_sizes
    gs = build(_rng(cid, "groups"), m, g)
    return Case(
        id=cid, suite=suite, aspect=aspect, m=m, k=k, n=n, g=g, pattern=pattern,
        distribution=dist, out_dtype=out, seed=seed,
        group_sizes=_validated_group_sizes(gs, m, g, f"group pattern {pattern!r}"),
        recipe=EXACT_RECIPE if exact else DEFAULT_RECIPE, exact_partials=exact,
        quantizer_only=aspect == QUANTIZER_ASPECT,
    )


def build_suite(suite: str, seed: int = 0) -> list[Case]:
    """The named suite's cases, in a fixed order.  Raises ValueError for an unknown suite."""
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; expected one of {', '.join(SUITES)}")
    shape = SUITE_SHAPES[suite]
    patterns = sorted(GROUP_PATTERNS)
    dists = sorted(DISTRIBUTIONS)
    focus = [p for p in _FOCUS_PATTERNS if p in patterns] + [
        p for p in patterns if p not in _FOCUS_PATTERNS]
    outs = ("f32", "bf16")
    cases: list[Case] = []
    if suite == "full":
        # The production shapes first: a kernel that breaks only at production scale
        # (int16 offsets, large grids) fails fast, and the seeded-bug test stops there.
        cases.extend(_production_cases(seed))
        # Every (aspect, pattern, distribution); G and the out dtype alternate.
        for a, aspect in enumerate(("wi", "wo")):
            for i, pattern in enumerate(patterns):
                for j, dist in enumerate(dists):
                    g = shape.gs[(a + i + j) % len(shape.gs)]
                    out = outs[(i + j) % 2]
                    cases.append(_make_case(suite, aspect, g, pattern, dist, out, seed))
    elif suite == "ci":
        # Every pattern once (aspects, G and out dtypes alternate so each meets the others),
        # then every distribution not met yet.
        for i, pattern in enumerate(patterns):
            aspect = ("wi", "wo")[i % 2]
            g = shape.gs[(i // 2) % len(shape.gs)]
            out = outs[(i // 2) % 2]
            cases.append(_make_case(suite, aspect, g, pattern, dists[i % len(dists)], out, seed))
        met = {c.distribution for c in cases}
        for j, dist in enumerate(d for d in dists if d not in met):
            pattern = patterns[j % len(patterns)]
            aspect = ("wo", "wi")[j % 2]
            cases.append(_make_case(suite, aspect, shape.gs[0], pattern, dist, outs[j % 2], seed))
    else:  # smoke: a zero-size-group pattern and a residue pattern, both aspects
        for i, pattern in enumerate(focus[:2]):
            cases.append(
                _make_case(suite, ("wi", "wo")[i], shape.gs[0], pattern, dists[0], outs[i], seed)
            )
    exact_patterns = patterns if suite == "full" else focus[:2]
    for i, pattern in enumerate(exact_patterns):
        aspect = ("wi", "wo")[i % 2]
        cases.append(
            _make_case(suite, aspect, shape.gs[0], pattern, "smallint", outs[i % 2], seed,
                       exact=True)
        )
    if suite == "ci":
        # Outputs and partial sums in the float32 subnormal range, exact in every valid
        # order (fp8check.inputs.subnormal): one f32 and one bf16 output (bf16 has
        # subnormals too).
        for aspect, pattern, out in (("wo", focus[1], "f32"), ("wi", focus[0], "bf16")):
            cases.append(replace(
                _make_case(suite, aspect, shape.gs[0], pattern, SUBNORMAL_DIST, out, seed,
                           exact=True), recipe=SUBNORMAL_RECIPE))
    if suite == "ci":  # bf16 ties in many elements of both aspects (the other patterns)
        for i, pattern in enumerate(reversed(focus[:2])):
            cases.append(_make_case(suite, ("wi", "wo")[i], shape.gs[0], pattern,
                                    TIES_DISTRIBUTION, "bf16", seed, exact=True))
    for m, k, n, g in _QUANTIZER_SHAPES[suite]:
        cases.append(_make_case(suite, QUANTIZER_ASPECT, g, "uniform-random",
                                _QUANTIZER_DISTRIBUTION, "f32", seed, mkn=(m, k, n)))
    for aspect in ("wi", "wo") if suite != "smoke" else ("wi",):
        for i in range(shape.random_draws):
            cases.append(
                _make_case(suite, aspect, shape.gs[-1], f"{RANDOM_PATTERN}{i}",
                           dists[i % len(dists)], outs[i % 2], seed,
                           build_sizes=_random_group_sizes)
            )
    if suite == "ci":  # NaN and +-Inf inputs (docs/contract.md, "Non-finite inputs"), on
        # both aspects and out dtypes, so that no catch of a NaN bug rests on one case; the
        # second next to an empty group (whose weights are NaN: they must reach nothing)
        cases.append(_make_case(suite, "wo", shape.gs[0], "partial-sum", NONFINITE, "bf16", seed))
        cases.append(_make_case(suite, "wi", shape.gs[-1], focus[0], NONFINITE, "f32", seed))
        # Appended after the cases pinned before them, so that those keep their seeds and
        # digests: rows that no alignment or whole tile covers, and quantizer blocks on
        # the ue8m0 recipes' scale edges.
        for aspect, m, g, pattern, dist, out in _ROW_CASES:
            k, n = shape.wi if aspect == "wi" else shape.wo
            cases.append(_make_case(suite, aspect, g, pattern, dist, out, seed, mkn=(m, k, n)))
        for m, k, n, g in _UE8M0_EDGE_SHAPES:
            cases.append(_make_case(suite, QUANTIZER_ASPECT, g, "uniform-random", UE8M0_EDGES,
                                    "f32", seed, mkn=(m, k, n)))
    ids = [c.id for c in cases]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    return cases


def find_case(suite: str, seed: int, case_id_: str) -> Case:
    """The case called `case_id_` in (suite, seed); ValueError naming the suite otherwise."""
    for case in build_suite(suite, seed):
        if case.id == case_id_:
            return case
    raise ValueError(f"no case {case_id_!r} in suite {suite!r} with seed {seed}")


def _block_magnitudes(rng: np.random.Generator, k: int) -> np.ndarray:
    """One power of two per K block, broadcast over the K axis: [K] float32."""
    lo, hi = _BLOCK_SPREAD_LOG2
    per_block = np.exp2(rng.integers(lo, hi + 1, size=-(-k // BLOCK))).astype(np.float32)
    return np.repeat(per_block, BLOCK)[:k]


def _smallint(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-_EXACT_INT_MAX, _EXACT_INT_MAX + 1, size=shape).astype(np.float32)


def _drawn_by_rows(draw, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """draw(rng, shape) as float32, drawn _DRAW_ROWS rows (of the last two axes) at a time
    so the float64 temporaries stay small.  Only for row-wise distributions (each row
    drawn independently), which is why streamed cases use only those."""
    out = np.empty(shape, np.float32)
    flat = out.reshape(-1, shape[-2], shape[-1])
    for mat in flat:
        for r0 in range(0, shape[-2], _DRAW_ROWS):
            r1 = min(r0 + _DRAW_ROWS, shape[-2])
            mat[r0:r1] = draw(rng, (r1 - r0, shape[-1]))
    return out


def case_inputs(case: Case) -> CaseInputs:
    """The case's float32 operands, regenerated deterministically from its id."""
    rng = _rng(case.id, "values")
    if case.distribution == SUBNORMAL_DIST:
        x, w, dy = subnormal_inputs(rng, case.m, case.k, case.n, case.g)
        return CaseInputs(x=x, w=w, dy=dy, group_sizes=case.group_sizes_array())
    nonfinite = case.distribution == NONFINITE
    edges = case.distribution == UE8M0_EDGES
    draw = (_smallint if case.exact_partials else ue8m0_edges if edges else
            DISTRIBUTIONS["normal" if nonfinite else case.distribution])
    if case.streamed:
        x, w, dy = (_drawn_by_rows(draw, rng, s) for s in
                    ((case.m, case.k), (case.g, case.k, case.n), (case.m, case.n)))
    else:
        x = np.asarray(draw(rng, (case.m, case.k)), dtype=np.float32)
        w = np.asarray(draw(rng, (case.g, case.k, case.n)), dtype=np.float32)
        dy = np.asarray(draw(rng, (case.m, case.n)), dtype=np.float32)
    if edges:  # each block draws its own exponent; a factor 2^e would move it off the edge
        return CaseInputs(x=x, w=w, dy=dy, group_sizes=case.group_sizes_array())
    # Powers of two keep the exact family exact and scale every K block differently.
    x_magnitudes = _block_magnitudes(rng, case.k)
    # Ties: w's K block scaled by the inverse power (exact), so each product x_mk w_kn is
    # an integer and so is every output: those of magnitude in [2^8, 2^9) that are odd,
    # in [2^9, 2^10) that are 2 mod 4, ... are exactly halfway between two bf16 values.
    w_magnitudes: np.ndarray = (np.float32(1) / x_magnitudes
                                if case.distribution == TIES_DISTRIBUTION
                                else _block_magnitudes(rng, case.k))
    x *= x_magnitudes[None, :]  # in place: no second production copy
    w *= w_magnitudes[None, :, None]
    if nonfinite:
        plant_nonfinite(x, w, dy, case.group_sizes_array())
    return CaseInputs(x=x, w=w, dy=dy, group_sizes=case.group_sizes_array())

