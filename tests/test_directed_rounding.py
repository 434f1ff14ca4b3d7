"""Directed rounding (issue 38): the seeded kernels' rounding helpers against exact
rationals, their round-to-nearest twins bit for bit against the reference recipes, and the
gate's `bias_z` / `bias_z_signed` on every contract with an output: a directed rounding
fails with the direction's sign, round-to-nearest passes."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from seeded_bugs import rounding
from seeded_bugs.rounding import RoundingGmm, round_bf16, round_f32, two_sum

from fp8check.contracts import KernelSpec, MatmulClaims
from fp8check.inputs.cases import build_suite
from fp8check.layers.op import ProblemCache, validate_case
from fp8check.profiles import get_profile
from fp8check.references import gmm, quantize

F32 = np.float32
BF16 = np.dtype(ml_dtypes.bfloat16)
PROFILE = get_profile("strict")
DIRECTIONS = ("nearest", "up", "down", "zero")


def _exact_rounding(x: Fraction, grid_below, grid_above, direction: str, even) -> float:
    """x rounded to the grid value below or above it (both exact) in `direction`; `even`
    says which of the two wins a tie."""
    lo, hi = Fraction(float(grid_below)), Fraction(float(grid_above))
    assert lo <= x <= hi
    if x in (lo, hi):
        return float(x)
    if direction == "up":
        return float(hi)
    if direction == "down":
        return float(lo)
    if direction == "zero":
        return float(lo if x > 0 else hi)
    if x - lo != hi - x:
        return float(lo if x - lo < hi - x else hi)
    return float(even(grid_below, grid_above))


def _f32_even(a, b):
    return a if int(np.float32(a).view(np.uint32)) % 2 == 0 else b


def _bf16_even(a, b):
    return a if int(np.array(a, BF16).view(np.uint16)) % 2 == 0 else b


def _f32_pairs(rng) -> tuple[np.ndarray, np.ndarray]:
    """float64 (hi, lo) pairs, hi = RN64(hi + lo): random sums of float32-scale values,
    float32 midpoints with and without a remainder either side, float32-subnormal sums."""
    a = rng.standard_normal(600) * np.exp2(rng.integers(-30, 30, 600))
    b = a * rng.uniform(-1e-9, 1e-9, 600)
    f = rng.standard_normal(300).astype(F32).astype(np.float64)
    mid = f + np.abs(f) * 2.0**-24 * np.where(rng.random(300) < 0.5, 1, -1)  # ties
    mid_lo = np.abs(mid) * 2.0**-60 * rng.choice([-1.0, 0.0, 1.0], 300)
    tiny = rng.standard_normal(200) * 2.0**-140
    x = np.concatenate([a, mid, tiny, -mid])
    y = np.concatenate([b, mid_lo, tiny * 2.0**-60, mid_lo])
    return two_sum(x, y)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_round_f32_is_exact(direction):
    hi, lo = _f32_pairs(np.random.default_rng(40))
    got = round_f32(hi, lo, direction)
    assert got.dtype == F32
    for h, l_, g in zip(hi.tolist(), lo.tolist(), got.tolist(), strict=True):
        x = Fraction(h) + Fraction(l_)
        r = F32(h)
        below = r if Fraction(float(r)) <= x else np.nextafter(r, F32(-np.inf))
        above = np.nextafter(below, F32(np.inf)) if Fraction(float(below)) < x else below
        assert g == _exact_rounding(x, below, above, direction, _f32_even), (h, l_)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_round_bf16_is_exact(direction):
    rng = np.random.default_rng(41)
    x = (rng.standard_normal(3000) * np.exp2(rng.integers(-40, 40, 3000))).astype(F32)
    ties = (rng.standard_normal(500).astype(BF16).astype(F32).view(np.uint32)
            | np.uint32(0x8000)).view(F32)  # exactly halfway between two bf16
    x = np.concatenate([x, ties, -ties, F32([0.0, -0.0, 1.0, -3.0])])
    got = round_bf16(x, direction)
    assert got.dtype == BF16
    for v, g in zip(x.tolist(), got.astype(F32).tolist(), strict=True):
        r = float(np.array(v, F32).astype(BF16))  # ml_dtypes' RNE: the neighbour nearest v
        below, above = (r, _bf16_step(r, 1)) if r <= v else (_bf16_step(r, -1), r)
        if below == v:
            above = v
        assert g == _exact_rounding(Fraction(v), below, above, direction, _bf16_even), v


def _bf16_step(b: float, step: int) -> float:
    """The bfloat16 `step` (+-1) places from finite b on the ordered line of bit patterns
    (sign-magnitude: +0 and -0 both at 0)."""
    bits = int(np.array(b, BF16).view(np.uint16))
    place = -(bits & 0x7FFF) if bits & 0x8000 else bits
    place += step
    pattern = (-place | 0x8000) if place < 0 else place
    return float(np.array(pattern, np.uint16).view(BF16))


def _quantized(seed: int, m=200, k=384, n=256, g=3):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((m, k)) * np.exp2(rng.integers(-3, 3, (m, 1)))).astype(F32)
    w = rng.standard_normal((g, k, n)).astype(F32)
    gs = np.array([70, 0, m - 90], np.int32)  # an empty group, rows past the last
    return quantize(x, (1, 128)), quantize(w, (128, 128)), gs


@pytest.mark.parametrize("recipe", rounding.RECIPES)
@pytest.mark.parametrize("out_dtype", [F32, BF16])
def test_round_to_nearest_twins_are_the_reference_recipes(recipe, out_dtype):
    """Each twin is its recipe bit for bit (the exact one: RN of the exact sum) on random
    data whose partials are not exact in float32."""
    lq, rq, gs = _quantized(42)
    kernel = RoundingGmm(recipe)
    out = kernel(lq.values, lq.scales, rq.values, rq.scales, gs, out_dtype=out_dtype)
    want = gmm(lq, rq, gs, out_dtype=out_dtype, accum=recipe)
    rows = int(gs.sum())
    assert out[:rows].tobytes() == np.asarray(want)[:rows].tobytes()


CASES = ProblemCache(capacity=4)


def _f32_case(distribution: str):
    """The first ci gmm-fp8 case of `distribution` with a float32 output (seed 0)."""
    return next(c for c in build_suite("ci", 0) if c.distribution == distribution
                and c.out_dtype == "f32" and c.applies_to("gmm-fp8"))


@pytest.mark.parametrize(("stage", "distribution"), [("partial", "outlier-channels"),
                                                      ("accumulate", "normal")])
def test_directed_rounding_leans_with_its_direction(stage, distribution):
    """toward +inf: bias_z_signed above the limit; toward -inf: below minus it; toward
    zero: bias_z below minus it; round-to-nearest: both within the limits.  (Rounding the
    partials is one rounding in 8 on a normal case's float32 outputs; on the outlier
    channels the partials dominate their sums.)"""
    case = _f32_case(distribution)
    prob = CASES.get("gmm-fp8", case)[0]
    z = {}
    for d in DIRECTIONS:
        spec = rounding.spec(f"k-{d}", RoundingGmm("deepgemm", stage if d != "nearest" else None,
                                                   d if d != "nearest" else "nearest"))
        res = validate_case(spec, case, PROFILE, prob)
        assert res.error is None, res.error
        z[d] = (res.metrics["bias_z"], res.metrics["bias_z_signed"], res.failed_criteria)
    limit = PROFILE.max_abs_bias_z_signed
    assert z["up"][1] > limit and "bias_z_signed" in z["up"][2]
    assert z["down"][1] < -limit and "bias_z_signed" in z["down"][2]
    assert z["zero"][0] < -PROFILE.max_abs_bias_z and "bias_z" in z["zero"][2]
    assert abs(z["nearest"][0]) <= PROFILE.max_abs_bias_z and not z["nearest"][2]
    assert abs(z["nearest"][1]) <= limit


def _plain_kernel(contract: str, direction: str):
    """A gmm (bf16 operands) or tgmm kernel: the float64 product of the bf16 operands
    (exact: 16-bit significands, a few hundred terms, far inside 53 bits), rounded to
    float32 in `direction`, then RNE to the output dtype."""

    def fn(a, b, group_sizes, out_dtype=np.float32):
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        offs = np.concatenate([[0], np.cumsum(group_sizes)])
        if contract == "gmm":
            out = np.zeros((a.shape[0], b.shape[2]))
            for g in range(len(group_sizes)):
                out[offs[g]:offs[g + 1]] = a64[offs[g]:offs[g + 1]] @ b64[g]
        else:
            out = np.stack([a64[offs[g]:offs[g + 1]].T @ b64[offs[g]:offs[g + 1]]
                            for g in range(len(group_sizes))])
        return round_f32(out, 0.0, direction).astype(np.dtype(out_dtype))

    return KernelSpec(name=f"{contract}-{direction}", contract=contract, framework="numpy",
                      fn=fn, claims=MatmulClaims(out_dtypes=("f32",)))


@pytest.mark.parametrize("contract", ["gmm", "tgmm"])
def test_every_contract_judges_the_sign(contract):
    """The bf16 gmm and tgmm outputs go through the same criteria: rounding up or down
    fails bias_z_signed with its sign, toward zero fails bias_z, nearest passes."""
    case = _f32_case("normal")
    prob = CASES.get(contract, case)[0]
    res = {d: validate_case(_plain_kernel(contract, d), case, PROFILE, prob)
           for d in DIRECTIONS}
    assert all(r.error is None for r in res.values())
    assert res["nearest"].passed, res["nearest"].failed_criteria
    assert res["up"].metrics["bias_z_signed"] > 20 and "bias_z_signed" in res["up"].failed_criteria
    assert res["down"].metrics["bias_z_signed"] < -20
    assert "bias_z_signed" in res["down"].failed_criteria
    assert res["zero"].metrics["bias_z"] < -20 and "bias_z" in res["zero"].failed_criteria
