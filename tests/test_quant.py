"""Quantizer references against the element-by-element rational oracle."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fp8check.inputs.testdata import DISTRIBUTIONS
from fp8check.references import quant
from fp8check.references.quant import RECIPES, dequantize, quantize
from tests.oracle import quantize_block
from tests.quant_blocks import amax_near_powers_of_two, blocks

BLOCKS = [(1, 128), (128, 128), (128, 1)]


def _oracle(x: np.ndarray, block, recipe, fmt):
    """Oracle values/scales for a 2-D or 3-D array, block by block with Python scalars."""
    lead = x.shape[:-2]
    r, c = x.shape[-2:]
    nr, nc = -(-r // block[0]), -(-c // block[1])
    in_max = float(ml_dtypes.finfo(x.dtype).max)
    vals = np.zeros(x.shape, np.float64)
    scales = np.zeros(lead + (nr, nc), np.float64)
    for idx in np.ndindex(*lead):
        xi = x[idx].astype(np.float32).astype(np.float64)
        for i in range(nr):
            for j in range(nc):
                rs = slice(i * block[0], min((i + 1) * block[0], r))
                cs = slice(j * block[1], min((j + 1) * block[1], c))
                blk = xi[rs, cs]
                q, s = quantize_block(blk.ravel().tolist(), recipe, fmt, in_max)
                vals[idx + (rs, cs)] = np.array(q).reshape(blk.shape)
                scales[idx + (i, j)] = s
    return vals, scales


def _assert_matches_oracle(x, block, recipe, fmt="e4m3fn"):
    q = quantize(x, block, recipe, fmt)
    vals, scales = _oracle(x, block, recipe, fmt)
    got_v = q.values.astype(np.float64)
    assert q.scales.dtype == np.float32
    np.testing.assert_array_equal(q.scales.astype(np.float64), scales)
    np.testing.assert_array_equal(got_v, vals)
    # -0 and +0 must agree too: compare the sign bits.
    np.testing.assert_array_equal(np.signbit(got_v), np.signbit(vals))


@st.composite
def _inputs(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    block = draw(st.sampled_from(BLOCKS))
    r = draw(st.integers(1, 150)) if block[0] == 128 else draw(st.integers(1, 6))
    c = draw(st.integers(1, 260)) if block[1] == 128 else draw(st.integers(1, 6))
    kind = draw(st.sampled_from(["normal", "many-scales", "zero-tiles", "near-max", "tiny"]))
    x = rng.standard_normal((r, c))
    if kind == "many-scales":  # every 128x128 tile its own magnitude, 2^-20 .. 2^14
        tiles = 2.0 ** rng.integers(-20, 15, (-(-r // 128), -(-c // 128)))
        x *= np.repeat(np.repeat(tiles, 128, 0), 128, 1)[:r, :c]
    elif kind == "zero-tiles":
        x[:, : c // 2] = 0.0
    elif kind == "near-max":
        x = 448.0 * np.sign(x) * (1 - 2.0 ** -rng.integers(1, 12, x.shape))
    elif kind == "tiny":
        x *= 1e-30
    dtype = draw(st.sampled_from([np.float32, ml_dtypes.bfloat16]))
    return x.astype(dtype), block


@pytest.mark.parametrize("recipe", RECIPES)
@settings(max_examples=20, deadline=None)
@given(data=_inputs())
def test_quantize_is_bit_exact_to_the_oracle(recipe, data):
    x, block = data
    _assert_matches_oracle(x, block, recipe)


@pytest.mark.parametrize("recipe", RECIPES)
def test_quantize_is_bit_exact_to_the_oracle_near_powers_of_two(recipe):
    """Blocks whose RN(amax/448) is within 9 ulps of 2^k: where the ue8m0 recipes round
    (and float32 log2 returns k for up to N(k) ulps above 2^k), with values near the fp8
    max, fp8 and float32 subnormals."""
    rng = np.random.default_rng()
    x = blocks(rng, amax_near_powers_of_two([-20, -17, -9, -5, 0, 8, 16, 70]), 2)
    _assert_matches_oracle(x, (1, 128), recipe)


@pytest.mark.parametrize("recipe", RECIPES)
def test_quantize_e5m2_and_leading_expert_dim(recipe):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 130, 257)) * 2.0 ** rng.integers(-8, 8, (3, 1, 1)))
    x = x.astype(np.float32)
    _assert_matches_oracle(x, (128, 128), recipe, "e5m2")


def test_all_zero_tile_and_fp8_max():
    x = np.zeros((2, 256), np.float32)
    x[1, 128:] = 448.0
    x[1, 129] = -448.0
    q = quantize(x)
    assert q.scales[0, 0] == np.float32(np.float32(1e-4) / np.float32(448))  # amax floor
    assert (q.values[0].astype(np.float32) == 0).all()
    assert q.values[1, 128].astype(np.float32) == 448.0  # amax maps exactly to the max
    te = quantize(x, recipe="transformer-engine")
    assert te.scales[0, 0] == 1.0  # amax == 0 -> multiplier 1


def test_overflow_saturates_not_nan():
    # deepseek-v3 divides: x / RN(amax/448) can exceed 448 by rounding; it must saturate.
    rng = np.random.default_rng(11)
    x = rng.standard_normal((64, 128)).astype(np.float32)
    for recipe in RECIPES:
        v = quantize(x, recipe=recipe).values.astype(np.float32)
        assert np.isfinite(v).all() and np.abs(v).max() <= 448.0


def test_scale_shapes_and_partial_blocks():
    x = np.ones((2, 130, 257), np.float32)
    assert quantize(x, (1, 128)).scales.shape == (2, 130, 3)
    assert quantize(x, (128, 128)).scales.shape == (2, 2, 3)
    assert quantize(x, (128, 1)).scales.shape == (2, 2, 257)


def test_dequantize_float64_is_exact_and_float32_rounds_once():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 256)).astype(np.float32)
    q = quantize(x)
    exact = q.values.astype(np.float64) * np.repeat(q.scales.astype(np.float64), 128, 1)
    np.testing.assert_array_equal(dequantize(q, np.float64), exact)
    np.testing.assert_array_equal(dequantize(q), exact.astype(np.float32))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"recipe": "nope"}, "unknown recipe"),
        ({"block": (64, 64)}, "unsupported block"),
        ({"fmt": "e3m4"}, "unknown fp8 format"),
        ({"nan": "ignore"}, "nan policy"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        quantize(np.ones((2, 128), np.float32), **kwargs)


def test_nan_raises_by_default_and_propagates_on_request():
    x = np.ones((2, 256), np.float32)
    x[0, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        quantize(x)
    q = quantize(x, nan="propagate")
    assert np.isnan(q.scales[0, 0]) and np.isfinite(q.scales[1]).all()
    assert np.isnan(q.values[0, :128].astype(np.float32)).all()


def test_float64_input_rejected():
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        quantize(np.ones((2, 128)))


def test_block_grid_helper():
    assert quant.block_grid((5, 300), (1, 128)) == (5, 3)


def test_partial_last_blocks_by_hand():
    # 1x128: row 0's tail block (columns 128..130) has amax 56, so s = RN(56/448) = 1/8
    # exactly and RN(1/s) = 8: its values are 448, -224, 56; the whole first block (amax
    # 1000) must not reach it.  128x128 on [130, 129]: the tail-tail block (rows 128-129,
    # column 128) has amax 7 -> s = RN(7/448) = 1/64, value 448.
    x = np.full((2, 131), 1000.0, np.float32)
    x[0, 128:] = [56.0, -28.0, 7.0]
    x[1, 128:] = [1.0, 0.0, -0.5]
    q = quantize(x, (1, 128), "deepgemm")
    assert q.scales[0, 1] == np.float32(0.125)
    np.testing.assert_array_equal(q.values[0, 128:].astype(np.float32), [448.0, -224.0, 56.0])
    assert q.scales[1, 1] == np.float32(1) / np.float32(448)  # amax 1: s = RN(1/448)
    w = np.full((130, 129), 3.0, np.float32)
    w[128:, 128] = [7.0, -3.5]
    qw = quantize(w, (128, 128), "deepgemm")
    assert qw.scales.shape == (2, 2) and qw.scales[1, 1] == np.float32(2.0**-6)
    np.testing.assert_array_equal(qw.values[128:, 128].astype(np.float32), [448.0, -224.0])


def _dividing_values(x: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """satfinite_e4m3(RN(x / s)) per 1x128 block: the quantizer that divides."""
    s = np.repeat(scales, 128, axis=-1)[..., : x.shape[-1]]
    q = np.clip((x / s).astype(np.float32), np.float32(-448), np.float32(448))
    return q.astype(ml_dtypes.float8_e4m3fn)


@pytest.mark.parametrize("shape", [(64, 384), (33, 200), (2, 16, 130)])
@pytest.mark.parametrize("seed", [0, 1])
def test_quantizer_boundary_data_separates_multiply_from_divide(shape, seed):
    """Every element of a block but its amax is drawn where x * RN(1/s) and x / s round to
    different e4m3 values, so at least C - ceil(C/128) of every row's C elements differ
    (the amax element itself lands on 448 either way)."""
    x = DISTRIBUTIONS["quantizer-boundary"](np.random.default_rng(seed), shape)
    ref = quantize(x, (1, 128), "deepgemm")
    differ = ref.values.view(np.uint8) != _dividing_values(x, ref.scales).view(np.uint8)
    c = shape[-1]
    assert np.count_nonzero(differ) >= (c - -(-c // 128)) * x.size // c


def test_quantizer_boundary_survives_power_of_two_block_magnitudes():
    """The ci quantizer-only cases multiply each K block by 2^e: s, RN(1/s) and x scale
    alike, so the bound above holds on the case's own x."""
    from fp8check.inputs.cases import build_suite, case_inputs

    cases = [c for c in build_suite("ci", 0) if c.distribution == "quantizer-boundary"]
    assert sum(c.quantizer_only for c in cases) >= 2
    for case in (c for c in cases if c.quantizer_only):
        x = case_inputs(case).x
        ref = quantize(x, (1, 128), "deepgemm")
        differ = ref.values.view(np.uint8) != _dividing_values(x, ref.scales).view(np.uint8)
        assert np.count_nonzero(differ) >= (case.k - -(-case.k // 128)) * case.m, case.id


def test_leading_takes_rows_or_groups_with_their_scales():
    """Rows of a 1x128-blocked tensor and groups of a 3-D one come with exactly their
    scales; rows of a 128x128-blocked 2-D tensor are refused (their scale rows differ)."""
    from fp8check.references import QTensor

    rng = np.random.default_rng(2)
    rows = quantize(rng.standard_normal((10, 256)).astype(np.float32), (1, 128))
    part = rows.leading(3, 7)
    assert isinstance(part, QTensor) and part.block == rows.block and part.fmt == rows.fmt
    np.testing.assert_array_equal(part.values.view(np.uint8), rows.values[3:7].view(np.uint8))
    np.testing.assert_array_equal(part.scales, rows.scales[3:7])
    groups = quantize(rng.standard_normal((4, 256, 128)).astype(np.float32), (128, 128))
    np.testing.assert_array_equal(groups.leading(1, 3).scales, groups.scales[1:3])
    square = quantize(rng.standard_normal((256, 256)).astype(np.float32), (128, 128))
    with pytest.raises(ValueError, match="cannot be taken with their scales"):
        square.leading(0, 10)
