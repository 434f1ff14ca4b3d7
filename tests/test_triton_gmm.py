"""Padding-free and padded Triton FP8 GMM under TRITON_INTERPRET=1 against the references.

Operands are quantized with the reference quantizer, so every difference is the GEMM's.
"""

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fp8check.inputs.strategies import DISTRIBUTIONS, distributions, group_sizes
from fp8check.kernels.triton import gmm_fp8, gmm_fp8_padded, padding_overhead
from fp8check.kernels.triton.convert import to_numpy, to_torch
from fp8check.measures.metrics import bound_ratio
from fp8check.references import abs_product, gmm, quantize

SETTINGS = settings(max_examples=12, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])
OUT = {torch.float32: np.float32, torch.bfloat16: ml_dtypes.bfloat16}


def _problem(seed, m, k, n, sizes, dist="normal"):
    rng = np.random.default_rng(seed)
    build = DISTRIBUTIONS[dist]
    lq = quantize(build(rng, (m, k)), (1, 128), "deepgemm")
    rq = quantize(build(rng, (len(sizes), k, n)), (128, 128), "deepgemm")
    args = (to_torch(lq.values), to_torch(lq.scales), to_torch(rq.values),
            to_torch(rq.scales), torch.as_tensor(np.asarray(sizes, np.int32)))
    return lq, rq, args


def _nan_out(m, n, dtype):
    return torch.full((m, n), float("nan"), dtype=dtype)


@st.composite
def problems(draw, max_m=300, max_g=5):
    m = draw(st.integers(1, max_m))
    g = draw(st.integers(1, max_g))
    sizes = draw(group_sizes(m, g))
    return dict(seed=draw(st.integers(0, 2**31)), m=m, k=128 * draw(st.integers(1, 2)),
                n=draw(st.sampled_from([128, 256])), sizes=sizes, dist=draw(distributions()))


@SETTINGS
@given(problems(), st.sampled_from([torch.float32, torch.bfloat16]),
       st.sampled_from([(64, 128), (128, 64), (32, 128)]))
def test_bit_exact_to_deepgemm_reference_and_padded_equal(p, out_dtype, blocks):
    block_m, block_n = blocks
    lq, rq, args = _problem(p["seed"], p["m"], p["k"], p["n"], p["sizes"], p["dist"])
    total = int(np.sum(p["sizes"]))
    out = gmm_fp8(*args, out_dtype=out_dtype, block_m=block_m, block_n=block_n,
                  out=_nan_out(p["m"], p["n"], out_dtype))
    ref = gmm(lq, rq, p["sizes"], out_dtype=OUT[out_dtype], accum="deepgemm")
    got = to_numpy(out)
    # Every valid row written and bit-exact; nothing at or past sum(group_sizes) written.
    np.testing.assert_array_equal(got[:total].view(np.uint8), ref[:total].view(np.uint8))
    assert np.isnan(got[total:].astype(np.float32)).all()
    padded = gmm_fp8_padded(*args, out_dtype=out_dtype, block_m=block_m, block_n=block_n,
                            out=_nan_out(p["m"], p["n"], out_dtype))
    padded = to_numpy(padded)
    np.testing.assert_array_equal(padded[:total].view(np.uint8), got[:total].view(np.uint8))
    assert np.isnan(padded[total:].astype(np.float32)).all()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(max_m=260, max_g=4))
def test_within_error_bound_of_exact(p):
    lq, rq, args = _problem(p["seed"], p["m"], p["k"], p["n"], p["sizes"], p["dist"])
    total = int(np.sum(p["sizes"]))
    out = to_numpy(gmm_fp8(*args, out_dtype=torch.bfloat16))[:total]
    exact = gmm(lq, rq, p["sizes"], out_dtype=np.float64, accum="exact")[:total]
    ab = abs_product(lq, rq, p["sizes"])[:total]
    ratio = bound_ratio(out, exact, ab, p["k"], out_dtype=ml_dtypes.bfloat16)
    assert ratio.max(initial=0.0) <= 1.0


@pytest.mark.parametrize("sizes", [
    [0, 0, 0],            # nothing to do: out untouched
    [1],                  # M_g = 1
    [127, 0, 129, 1],     # residues 127, 1; an empty group in the middle
    [128, 256],           # only full tiles
    [3] * 12 + [0, 5],    # many tiny groups
])
def test_edge_group_sizes(sizes):
    m = max(sum(sizes) + 3, 1)  # 3 rows past the last group
    lq, rq, args = _problem(1, m, 256, 128, sizes, "near-max")
    out = gmm_fp8(*args, out_dtype=torch.float32, block_m=64, out=_nan_out(m, 128,
                                                                              torch.float32))
    ref = gmm(lq, rq, sizes, out_dtype=np.float32)
    total = sum(sizes)
    np.testing.assert_array_equal(out.numpy()[:total].view(np.uint32),
                                  ref[:total].view(np.uint32))
    assert out[total:].isnan().all()


def test_all_zero_blocks_and_outliers_stay_exact():
    sizes = [70, 0, 45]
    lq, rq, args = _problem(3, 120, 384, 256, sizes, "zero-blocks")
    assert (lq.values.astype(np.float32) == 0).all(axis=1).any() or (
        rq.values.astype(np.float32) == 0).any()
    ref = gmm(lq, rq, sizes, out_dtype=ml_dtypes.bfloat16)
    out = to_numpy(gmm_fp8(*args))
    np.testing.assert_array_equal(out[:115].view(np.uint16), ref[:115].view(np.uint16))
    lq, rq, args = _problem(4, 120, 256, 128, sizes, "outlier-channels")
    ref = gmm(lq, rq, sizes, out_dtype=ml_dtypes.bfloat16)
    out = to_numpy(gmm_fp8(*args))
    np.testing.assert_array_equal(out[:115].view(np.uint16), ref[:115].view(np.uint16))


def test_deterministic():
    _, _, args = _problem(5, 200, 256, 256, [90, 10, 77], "student-t")
    a, b = gmm_fp8(*args), gmm_fp8(*args)
    assert torch.equal(a[:177].view(torch.int16), b[:177].view(torch.int16))


def test_padding_overhead_counts_padding_rows():
    sizes = [0, 1, 128, 129, 255]
    pad_rows = sum((-s) % 128 for s in sizes)  # 0 + 127 + 0 + 127 + 1
    assert pad_rows == 255
    assert padding_overhead(sizes, 256, 512, 128) == 255 * (256 + 2 * 4 + 512 * 2)
    assert padding_overhead([128, 256], 256, 512) == 0
    with pytest.raises(ValueError):
        padding_overhead([-1], 256, 512)


@pytest.mark.parametrize("bad, match", [
    (dict(k=100), "multiple of 128"),
    (dict(block_n=96), "block_n"),
    (dict(block_m=48), "block_m"),
    (dict(sizes=[100, 30]), "exceeds M"),
    (dict(sizes=[-1, 5]), "non-negative"),
    (dict(lhs_dtype=torch.float32), "float8_e4m3fn"),
    (dict(out_dtype=torch.float16), "out_dtype"),
])
def test_bad_input_raises(bad, match):
    k = bad.get("k", 128)
    m, n = 120, 128
    lhs = torch.zeros((m, k), dtype=bad.get("lhs_dtype", torch.float8_e4m3fn))
    ls = torch.ones((m, -(-k // 128)))
    rhs = torch.zeros((2, k, n), dtype=torch.float8_e4m3fn)
    rs = torch.ones((2, -(-k // 128), 1))
    gs = torch.tensor(bad.get("sizes", [60, 40]), dtype=torch.int32)
    for fn in (gmm_fp8, gmm_fp8_padded):
        with pytest.raises(ValueError, match=match):
            fn(lhs, ls, rhs, rs, gs, out_dtype=bad.get("out_dtype", torch.bfloat16),
               block_m=bad.get("block_m", 128), block_n=bad.get("block_n", 128))
