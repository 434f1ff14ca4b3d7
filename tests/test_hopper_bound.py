"""The tensor-core accumulators' error bound (`references.hopper_bound`) holds for the
bit-accurate models (`references.mma`: HOPPER_FP8, C aligned with the products;
BLACKWELL_FP8, C added after) on adversarial data, against exact values
(Fraction for the spot checks; float64 is exact for e4m3 128-term partials, the argument in
`references/gmm.py`), and is not vacuous."""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fp8check.references import gmm, quantize
from fp8check.references.hopper_bound import chain_bound, truncation_term
from fp8check.references.mma import BLACKWELL_FP8, HOPPER_FP8, MmaModel, block_partial

F8 = ml_dtypes.float8_e4m3fn
RNG = np.random.default_rng(20261204)


def _codes(x) -> np.ndarray:
    return np.clip(np.asarray(x, np.float64), -448, 448).astype(F8).view(np.uint8)


MODELS = {"hopper": HOPPER_FP8, "blackwell": BLACKWELL_FP8}


def _partial(ac, bc, interval, model=HOPPER_FP8):
    """The model's block partial with promotion every `interval` elements, summed exactly
    (the float32 adds between chains are the float32 bound's, not this one's)."""
    return sum(block_partial(ac[:, k:k + interval], bc[k:k + interval], model=model)
               .astype(np.float64) for k in range(0, 128, interval))


def _data(kind: str, m=48, n=40):
    r = RNG
    if kind == "normal":
        return r.standard_normal((m, 128)), r.standard_normal((128, n))
    if kind == "one-large-many-small":
        a, b = np.full((m, 128), 2.0**-6), np.full((128, n), 2.0**-6)
        a[:, 0], b[0] = 448, 448
        return a * r.choice([-1, 1], (m, 128)), b
    if kind == "all-positive":
        return np.abs(r.standard_normal((m, 128))) * 50, np.abs(r.standard_normal((128, n)))
    if kind == "cancellation":
        a, b = r.standard_normal((m, 128)), r.standard_normal((128, n))
        a[:, 64:], b[64:] = -a[:, :64], b[:64]
        a[:, 127] += 2.0**-6  # a tiny residue after exact cancellation
        return a, b
    if kind == "near-max":
        return r.uniform(-448, 448, (m, 128)), r.uniform(-448, 448, (128, n))
    if kind == "subnormal":
        return r.standard_normal((m, 128)) * 2.0**-8, r.standard_normal((128, n)) * 2.0**-7
    if kind == "wide-exponents":
        return (np.exp(r.uniform(-7, 6, (m, 128))) * r.choice([-1, 1], (m, 128)),
                np.exp(r.uniform(-7, 6, (128, n))))
    if kind == "zero-steps":
        a, b = r.standard_normal((m, 128)), r.standard_normal((128, n))
        a[:, 32:96] = 0  # two whole k32 steps of zeros between live ones
        return a, b
    raise AssertionError(kind)


KINDS = ["normal", "one-large-many-small", "all-positive", "cancellation", "near-max",
         "subnormal", "wide-exponents", "zero-steps"]


@pytest.mark.parametrize("model", MODELS.values(), ids=MODELS.keys())
@pytest.mark.parametrize("interval", [32, 64, 128])
@pytest.mark.parametrize("kind", KINDS)
def test_model_error_within_bound(kind, interval, model):
    a, b = _data(kind)
    ac, bc = _codes(a), _codes(b)
    exact = ac.view(F8).astype(np.float64) @ bc.view(F8).astype(np.float64)
    err = np.abs(_partial(ac, bc, interval, model) - exact)
    bound = chain_bound(ac, bc, interval=interval, model=model)[0]
    assert np.all(err <= bound), (kind, float((err / np.maximum(bound, 1e-300)).max()))


@pytest.mark.parametrize("model", MODELS.values(), ids=MODELS.keys())
def test_bound_spot_checks_with_fractions(model):
    a, b = _data("wide-exponents", 3, 3)
    ac, bc = _codes(a), _codes(b)
    p = block_partial(ac, bc, model=model)
    bound = chain_bound(ac, bc, model=model)[0]
    for i in range(3):
        for j in range(3):
            exact = sum(Fraction(float(x)) * Fraction(float(y))
                        for x, y in zip(ac[i].view(F8), bc[:, j].view(F8), strict=True))
            assert abs(Fraction(float(p[i, j])) - exact) <= Fraction(float(bound[i, j]))


def test_bound_is_not_vacuous():
    """On random data the model's worst error is a few percent of the bound, and the bound
    is a small multiple of 2^-13 |A||B| per block (4 steps, 33 terms each at most)."""
    a, b = _data("normal", 64, 64)
    ac, bc = _codes(a), _codes(b)
    exact = ac.view(F8).astype(np.float64) @ bc.view(F8).astype(np.float64)
    abs_ab = np.abs(ac.view(F8).astype(np.float64)) @ np.abs(bc.view(F8).astype(np.float64))
    bound = chain_bound(ac, bc)[0]
    err = np.abs(block_partial(ac, bc) - exact)
    assert 0.005 < (err / bound).max() < 1
    assert np.all(bound <= 4 * 34 * 2.0**-13 * abs_ab * 4)  # E_max within 2 binades of max
    # Blackwell: 25 alignment bits, a float32 sum and one rounding to nearest per step:
    # the bound is a small multiple of 2^-23 |A||B| per block.  These partials fit
    # float32, so Blackwell is exact on them; on data whose partials do not, its errors
    # (truncation to float32, then one rounding) reach a visible fraction of the bound.
    bw = chain_bound(ac, bc, model=BLACKWELL_FP8)[0]
    assert np.all(bw <= 4 * (33 * 2.0**-25 * 4 + 2 * 2.0**-23) * abs_ab * 4)
    assert np.array_equal(block_partial(ac, bc, model=BLACKWELL_FP8), exact)
    a, b = _data("wide-exponents", 64, 64)
    ac, bc = _codes(a), _codes(b)
    exact = ac.view(F8).astype(np.float64) @ bc.view(F8).astype(np.float64)
    err_bw = np.abs(block_partial(ac, bc, model=BLACKWELL_FP8) - exact)
    assert 0.005 < (err_bw / chain_bound(ac, bc, model=BLACKWELL_FP8)[0]).max() < 1


def test_exact_model_has_zero_width_terms_only():
    """A model wide enough to hold every e4m3 partial (40 fraction bits, round to nearest):
    its errors are 0, its bound is tiny but still >= 0."""
    wide = MmaModel(frac_bits=40, rounding="rne", out_frac_bits=23)
    a, b = _data("normal")
    ac, bc = _codes(a), _codes(b)
    exact = ac.view(F8).astype(np.float64) @ bc.view(F8).astype(np.float64)
    p = block_partial(ac, bc, model=wide).astype(np.float64)
    assert np.all(np.abs(p - exact) <= chain_bound(ac, bc, model=wide)[0])


def test_truncation_term_bounds_the_hopper_recipe():
    """End to end: |gmm(deepgemm-hopper) - exact| <= gamma-free float32 slack + the
    truncation term, on quantized operands with empty and residual groups."""
    x = RNG.standard_normal((150, 256)).astype(np.float32)
    w = RNG.standard_normal((3, 256, 128)).astype(np.float32)
    gs = np.array([37, 0, 100], np.int32)
    lq, rq = quantize(x, (1, 128)), quantize(w, (128, 128))
    hop = gmm(lq, rq, gs, accum="deepgemm-hopper").astype(np.float64)
    dg = gmm(lq, rq, gs, accum="deepgemm").astype(np.float64)
    t = truncation_term(lq, rq, gs)
    rows = slice(0, int(gs.sum()))
    # deepgemm-hopper differs from deepgemm only through P: within the truncation term
    # plus a few float32 roundings of values of the output's size.
    slack = 8 * 2.0**-24 * (np.abs(dg[rows]) + t[rows])
    assert np.all(np.abs(hop[rows] - dg[rows]) <= t[rows] + slack)
    assert np.all(t[int(gs.sum()):] == 0)
    # and deepgemm-blackwell within Blackwell's (much smaller) term
    bw = gmm(lq, rq, gs, accum="deepgemm-blackwell").astype(np.float64)
    t_bw = truncation_term(lq, rq, gs, model=BLACKWELL_FP8)
    assert np.all(t_bw[rows] < t[rows] / 1000)
    slack = 8 * 2.0**-24 * (np.abs(dg[rows]) + t_bw[rows])
    assert np.all(np.abs(bw[rows] - dg[rows]) <= t_bw[rows] + slack)
    assert not np.array_equal(bw, hop)


def test_bad_arguments_are_value_errors():
    ac = np.zeros((2, 128), np.uint8)
    with pytest.raises(ValueError, match="interval"):
        chain_bound(ac, np.zeros((128, 2), np.uint8), interval=48)
    with pytest.raises(ValueError, match="multiple of 128"):
        chain_bound(np.zeros((2, 64), np.uint8), np.zeros((64, 2), np.uint8))
    with pytest.raises(ValueError, match="fmt"):
        chain_bound(ac, np.zeros((128, 2), np.uint8), fmt="e3m4")
