"""fp8check.inputs.strategies: every builder has the property its name claims, and the hypothesis
strategies draw valid problems."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from fp8check.inputs.strategies import (
    DISTRIBUTIONS,
    GROUP_PATTERNS,
    GmmInputs,
    arrays,
    distributions,
    gmm_inputs,
    group_sizes,
    make_gmm_inputs,
)

E4M3 = ml_dtypes.float8_e4m3fn
SHAPES_MG = [(0, 1), (1, 1), (5, 8), (127, 3), (300, 4), (1024, 8), (4096, 32), (20000, 130)]
SEEDS = range(4)


def _sizes_or_none(name, seed, m, g):
    try:
        return GROUP_PATTERNS[name](np.random.default_rng(seed), m, g)
    except ValueError:
        return None


# ------------------------------------------------------------------ group sizes


@pytest.mark.parametrize("name", list(GROUP_PATTERNS))
def test_pattern_shape_dtype_and_sum_rule(name):
    built = 0
    for m, g in SHAPES_MG:
        for seed in SEEDS:
            sizes = _sizes_or_none(name, seed, m, g)
            if sizes is None:
                continue
            built += 1
            assert sizes.dtype == np.int32 and sizes.shape == (g,)
            assert np.all(sizes >= 0)
            total = int(sizes.sum())
            if name == "ones":
                assert total == g <= m
            elif name == "partial-sum":
                assert m // 2 <= total < m
            else:
                assert total == m, (name, m, g, sizes)
    assert built >= 8, f"{name} could be built for only {built} of the test cases"


@pytest.mark.parametrize("name", list(GROUP_PATTERNS))
def test_pattern_validity_depends_only_on_m_and_g(name):
    for m, g in SHAPES_MG:
        ok = {_sizes_or_none(name, seed, m, g) is not None for seed in range(6)}
        assert len(ok) == 1, (name, m, g)


@pytest.mark.parametrize(
    "name, position", [("zero-first", lambda g: 0), ("zero-middle", lambda g: g // 2),
                       ("zero-last", lambda g: g - 1)]
)
def test_zero_patterns_empty_exactly_the_claimed_group(name, position):
    for m, g in [(300, 4), (1024, 8), (4096, 32), (7, 8)]:
        for seed in SEEDS:
            sizes = GROUP_PATTERNS[name](np.random.default_rng(seed), m, g)
            assert np.flatnonzero(sizes == 0).tolist() == [position(g)], sizes


def test_single_group_ones_dominant_many_tiny_multiples():
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        s = GROUP_PATTERNS["single-group"](rng, 1000, 8)
        assert np.count_nonzero(s) == 1 and s.max() == 1000
        assert np.all(GROUP_PATTERNS["ones"](rng, 1000, 8) == 1)
        d = GROUP_PATTERNS["dominant"](rng, 1000, 8)
        assert d.max() == 900 and np.count_nonzero(d == 900) == 1
        t = GROUP_PATTERNS["many-tiny"](rng, 1000, 32)
        assert np.all(t[:-1] <= 7) and t[-1] == 1000 - t[:-1].sum()
        mult = GROUP_PATTERNS["multiples-128"](rng, 1024, 5)
        assert np.all(mult % 128 == 0)


def test_residues_cover_1_to_127():
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        many = GROUP_PATTERNS["residues"](rng, 128 * 200, 128)
        assert set(range(1, 128)) <= set((many % 128).tolist())
        few = GROUP_PATTERNS["residues"](rng, 4096, 8) % 128
        assert {1, 127} <= set(few.tolist()) and len(set(few.tolist())) >= 7


def test_patterns_that_cannot_be_met_raise():
    rng = np.random.default_rng(0)
    cases = [
        ("multiples-128", 300, 4), ("ones", 5, 8), ("zero-middle", 100, 2),
        ("zero-first", 3, 8), ("residues", 100, 8), ("partial-sum", 0, 2), ("dominant", 10, 1),
    ]
    for name, m, g in cases:
        with pytest.raises(ValueError, match=name):
            GROUP_PATTERNS[name](rng, m, g)
    for m, g in [(-1, 2), (10, 0), (2.5, 2)]:
        with pytest.raises(ValueError, match="must be"):
            GROUP_PATTERNS["uniform-random"](rng, m, g)


# ----------------------------------------------------------------- distributions


@pytest.mark.parametrize("name", list(DISTRIBUTIONS))
def test_distribution_shape_dtype_finite_and_seeded(name):
    build = DISTRIBUTIONS[name]
    for shape in [(256, 512), (3, 200), (300,), (2, 130, 256), (0, 128)]:
        x = build(np.random.default_rng(1), shape)
        assert x.shape == shape and x.dtype == np.float32 and np.all(np.isfinite(x))
        np.testing.assert_array_equal(x, build(np.random.default_rng(1), shape))
    assert not np.array_equal(build(np.random.default_rng(1), (64, 256)),
                              build(np.random.default_rng(2), (64, 256)))


def test_distribution_rejects_bad_shapes():
    for shape in [(), (-1, 128), (2.5, 128)]:
        with pytest.raises(ValueError, match="shape"):
            DISTRIBUTIONS["normal"](np.random.default_rng(0), shape)


def _blocks(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """[..., R, C] -> [..., R/rows, C/cols, rows*cols] (shapes divisible)."""
    *lead, r, c = x.shape
    t = x.reshape(*lead, r // rows, rows, c // cols, cols)
    return np.moveaxis(t, -3, -2).reshape(*lead, r // rows, c // cols, rows * cols)


@pytest.mark.parametrize("shape", [(512, 512), (2, 256, 384)])
def test_zero_blocks_really_zero(shape):
    x = DISTRIBUTIONS["zero-blocks"](np.random.default_rng(0), shape)
    row_blocks_zero = np.all(_blocks(x, 1, 128) == 0, axis=-1)
    tiles_zero = np.all(_blocks(x, 128, 128) == 0, axis=-1)
    assert tiles_zero.any() and not tiles_zero.all()
    # some 1x128 blocks are zero outside the zeroed tiles
    tile_mask = np.repeat(tiles_zero, 128, axis=-2)
    assert np.any(row_blocks_zero & ~tile_mask)
    assert np.count_nonzero(x) > x.size // 2


def _e4m3_table() -> np.ndarray:
    """All finite e4m3fn values, sorted, one zero (from the 256 codes via ml_dtypes)."""
    with np.errstate(invalid="ignore"):
        v = np.arange(256, dtype=np.uint8).view(E4M3).astype(np.float64)
    return np.unique(v[np.isfinite(v)])


@pytest.mark.parametrize("shape", [(64, 512), (3, 200)])
def test_fp8_ties_land_exactly_halfway_after_deepgemm_scaling(shape):
    x = DISTRIBUTIONS["fp8-ties"](np.random.default_rng(5), shape)
    table = _e4m3_table()
    for j in range(0, shape[-1], 128):
        block = x[:, j : j + 128]
        amax = np.max(np.abs(block), axis=-1, keepdims=True)
        s = (amax / np.float32(448)).astype(np.float32)  # deepgemm: RN(amax / 448)
        y = (block * (np.float32(1) / s).astype(np.float32)).astype(np.float32)
        assert np.all(np.abs(y[np.abs(block) == amax]) == 448)
        mids = np.abs(y[np.abs(block) != amax]).astype(np.float64)
        hi = np.searchsorted(table, mids)
        assert np.all((hi > 0) & (hi < table.size))
        assert np.all(mids == (table[hi - 1] + table[hi]) / 2)
        assert np.all((table[hi - 1] < mids) & (mids < table[hi]))


def test_near_max_within_ten_percent_and_overshoots_448():
    x = DISTRIBUTIONS["near-max"](np.random.default_rng(6), (512, 1024))
    blocks = np.abs(x.reshape(512, 8, 128))
    amax = blocks.max(-1, keepdims=True)
    assert np.all(blocks >= 0.9 * amax * (1 - 2.0**-22))  # 0.9 A up to float32 rounding
    s = (amax / np.float32(448)).astype(np.float32)
    scaled = (amax * (np.float32(1) / s).astype(np.float32)).astype(np.float32)
    # the adversarial point: the rounded scale pushes some block amaxes past the FP8 max
    assert np.mean(scaled > 448) > 0.05


def test_outlier_lognormal_student_many_scales_have_their_shape():
    rng = np.random.default_rng(7)
    out = DISTRIBUTIONS["outlier-channels"](rng, (512, 256))
    col_rms = np.sqrt(np.mean(out.astype(np.float64) ** 2, axis=0))
    assert np.sum(col_rms > 50 * np.median(col_rms)) == 256 // 64

    rows = DISTRIBUTIONS["lognormal-rows"](rng, (256, 512))
    row_rms = np.sqrt(np.mean(rows.astype(np.float64) ** 2, axis=1))
    assert row_rms.max() / row_rms.min() > 100

    t = DISTRIBUTIONS["student-t"](rng, (100_000,))
    assert np.mean(np.abs(t) > 10) > 1e-3  # normal: ~1e-23

    ms = DISTRIBUTIONS["many-scales"](rng, (1024, 1024))
    tile_rms = np.sqrt(np.mean(_blocks(ms.astype(np.float64), 128, 128) ** 2, axis=-1))
    e = np.log2(tile_rms)
    assert np.all(np.abs(e - np.round(e)) < 0.05)  # one power of two per tile
    assert np.all((np.round(e) >= -20) & (np.round(e) <= 14))
    assert len(np.unique(np.round(e))) >= 20


# --------------------------------------------------------- hypothesis strategies


@settings(max_examples=60)
@given(st.data(), st.integers(0, 600), st.integers(1, 12))
def test_group_sizes_strategy_draws_valid_sizes(data, m, g):
    sizes = data.draw(group_sizes(m, g))
    assert sizes.dtype == np.int32 and sizes.shape == (g,)
    assert np.all(sizes >= 0) and sizes.sum() <= m


def test_group_sizes_generic_branch_reaches_and_shrinks_arbitrary_sizes():
    # m=10, g=3 with 0 < sum < 5 and not all ones: no named pattern makes that (partial-sum
    # covers >= m // 2 rows, ones sums to g), so only the list-based branch can, and it
    # shrinks element-wise: fewest rows in use (4, the unused tail 6), all in the last group.
    smallest = find(group_sizes(10, 3), lambda s: 0 < s.sum() < 5 and bool(np.any(s != 1)))
    assert smallest.tolist() == [0, 0, 4]


def test_group_sizes_strategy_explicit_patterns():
    with pytest.raises(ValueError, match="cannot be met"):
        group_sizes(300, 4, patterns=["multiples-128"])
    with pytest.raises(ValueError, match="unknown group pattern"):
        group_sizes(300, 4, patterns=["nope"])

    @settings(max_examples=20)
    @given(group_sizes(1024, 8, patterns=["zero-last"]))
    def check(sizes):
        assert sizes[-1] == 0 and sizes.sum() == 1024

    check()


@settings(max_examples=30)
@given(distributions().flatmap(lambda d: st.tuples(st.just(d), arrays((16, 256), dist=d))))
def test_arrays_strategy(named):
    name, x = named
    assert name in DISTRIBUTIONS
    assert x.shape == (16, 256) and x.dtype == np.float32 and np.all(np.isfinite(x))


@settings(max_examples=30)
@given(gmm_inputs(max_m=300, max_g=5))
def test_gmm_problems_are_valid(p: GmmInputs):
    assert p.k % 128 == 0 and 128 <= p.k <= 512 and p.n % 128 == 0 and 128 <= p.n <= 256
    assert p.lhs.shape == (p.m, p.k) and p.rhs.shape == (p.g, p.k, p.n)
    assert p.lhs.dtype == p.rhs.dtype == np.float32
    assert p.group_sizes.dtype == np.int32 and p.group_sizes.shape == (p.g,)
    assert p.group_sizes.sum() <= p.m and np.all(p.group_sizes >= 0)
    assert p.dist in DISTRIBUTIONS and np.all(np.isfinite(p.rhs))
    assert "lhs" not in repr(p)


def test_make_gmm_inputs_is_deterministic_and_validates():
    a = make_gmm_inputs(7, m=300, k=256, n=128, g=4, pattern="residues", dist="many-scales")
    b = make_gmm_inputs(7, m=300, k=256, n=128, g=4, pattern="residues", dist="many-scales")
    for field in ("group_sizes", "lhs", "rhs"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert a.group_sizes.sum() == 300
    with pytest.raises(ValueError, match="unknown distribution"):
        make_gmm_inputs(0, 8, 128, 128, 2, dist="uniform")
    with pytest.raises(ValueError, match="unknown group pattern"):
        make_gmm_inputs(0, 8, 128, 128, 2, pattern="random")
    with pytest.raises(ValueError, match="k_blocks"):
        gmm_inputs(k_blocks=(0, 2))
