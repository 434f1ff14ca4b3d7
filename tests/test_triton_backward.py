"""bf16 dgrad / tgmm kernels and the grouped_linear_fp8 autograd.Function, under
TRITON_INTERPRET=1, against exact references and a dense float64 autograd."""

import math

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fp8check.inputs.strategies import group_sizes
from fp8check.kernels.triton import dgrad, grouped_linear_fp8, tgmm
from fp8check.kernels.triton.convert import to_numpy, to_torch
from fp8check.measures.metrics import bound_ratio
from fp8check.references import dgrad as ref_dgrad
from fp8check.references import gmm, quantize
from fp8check.references import tgmm as ref_tgmm

U_BF16 = 2.0**-8  # unit roundoff of bfloat16 (7 explicit mantissa bits)
U_F32 = 2.0**-24


def _bf16(rng, shape):
    return rng.standard_normal(shape).astype(np.float32).astype(ml_dtypes.bfloat16)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 200).flatmap(lambda m: st.tuples(st.just(m), group_sizes(m, 3))),
       st.integers(0, 2**31))
def test_dgrad_and_tgmm_within_float32_bound(m_sizes, seed):
    m, sizes = m_sizes
    k, n = 128, 128
    rng = np.random.default_rng(seed)
    x, dy, w = _bf16(rng, (m, k)), _bf16(rng, (m, n)), _bf16(rng, (3, k, n))
    gs = torch.as_tensor(sizes)
    total = int(sizes.sum())
    dx = dgrad(to_torch(dy), to_torch(w), gs, out_dtype=torch.float32).numpy()
    exact = ref_dgrad(dy, w, sizes, out_dtype=np.float64)
    # |dy||w|, rounded up: the reference rounds the exact value once to float64.
    ab = ref_dgrad(np.abs(dy), np.abs(w), sizes, out_dtype=np.float64) * (1 + 2.0**-52)
    assert bound_ratio(dx[:total], exact[:total], ab[:total], n).max(initial=0) <= 1
    assert (dx[total:] == 0).all()  # default out is zeros, never written past the groups
    dw = tgmm(to_torch(x), to_torch(dy), gs).numpy()
    exact = ref_tgmm(x, dy, sizes, out_dtype=np.float64)
    ab = ref_tgmm(np.abs(x), np.abs(dy), sizes, out_dtype=np.float64) * (1 + 2.0**-52)
    reduced = max(int(sizes.max()), 1)
    assert bound_ratio(dw, exact, ab, reduced).max() <= 1
    assert (dw[sizes == 0] == 0).all()  # empty groups give zeros


def test_tgmm_empty_groups_overwrite_garbage():
    sizes = np.array([0, 50, 0], np.int32)
    rng = np.random.default_rng(2)
    x, dy = _bf16(rng, (64, 128)), _bf16(rng, (64, 64))
    out = torch.full((3, 128, 64), float("nan"))
    tgmm(to_torch(x), to_torch(dy), torch.as_tensor(sizes), out=out)
    assert (out[0] == 0).all() and (out[2] == 0).all() and out[1].isfinite().all()


def _dense_f64(x, w, sizes):
    rows = []
    start = 0
    for g, s in enumerate(sizes):
        rows.append(x[start:start + s] @ w[g])
        start += s
    rows.append(torch.zeros((x.shape[0] - start, w.shape[2]), dtype=x.dtype))
    return torch.cat(rows)


@pytest.mark.parametrize("sizes", [[70, 0, 50], [1, 127, 2]])
def test_grouped_linear_fp8_forward_and_gradients(sizes):
    m, k, n = sum(sizes) + 5, 256, 128
    rng = np.random.default_rng(sum(sizes))
    x = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32)).requires_grad_()
    w = torch.from_numpy(rng.standard_normal((3, k, n)).astype(np.float32) / 16
                         ).requires_grad_()
    gy = to_torch(_bf16(rng, (m, n)))
    gs = torch.tensor(sizes, dtype=torch.int32)
    y = grouped_linear_fp8(x, w, gs)
    # Forward = reference quantizer + reference deepgemm GMM, bit for bit.
    ref = gmm(quantize(x.detach().numpy(), (1, 128)), quantize(w.detach().numpy(), (128, 128)),
              np.array(sizes, np.int32), out_dtype=ml_dtypes.bfloat16)
    np.testing.assert_array_equal(to_numpy(y).view(np.uint16), ref.view(np.uint16))
    y.backward(gy)

    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    _dense_f64(x64, w64, sizes).backward(gy.double())
    # Backward rounds x and w to bf16 (relative U_BF16 each) and sums in float32 (gamma):
    # |err| <= (U_BF16 + gamma (1 + U_BF16)) (|a||b|) over the reduced dimension.
    for got, want, ab, red in (
        (x.grad, x64.grad, _dense_abs_dx(gy, w, sizes), n),
        (w.grad, w64.grad, _dense_abs_dw(x, gy, sizes), max(sizes)),
    ):
        gamma = red * U_F32 / (1 - red * U_F32)
        bound = (U_BF16 + gamma * (1 + U_BF16)) * ab * (1 + 2.0**-50) + 2.0**-140
        assert ((got.double() - want).abs() <= bound).all()
        assert math.isfinite(float(got.abs().max()))


def _dense_abs_dx(gy, w, sizes):
    return _dense_f64(gy.double().abs(), w.detach().double().abs().transpose(1, 2), sizes)


def _dense_abs_dw(x, gy, sizes):
    out, start = [], 0
    for s in sizes:
        out.append(x.detach().double()[start:start + s].abs().T
                   @ gy.double()[start:start + s].abs())
        start += s
    return torch.stack(out)


def test_bad_input_raises():
    gs = torch.tensor([10], dtype=torch.int32)
    with pytest.raises(ValueError, match="bfloat16"):
        dgrad(torch.zeros(16, 64), torch.zeros(1, 64, 64, dtype=torch.bfloat16), gs)
    with pytest.raises(ValueError, match="multiple"):
        tgmm(torch.zeros(16, 96, dtype=torch.bfloat16), torch.zeros(16, 64,
             dtype=torch.bfloat16), gs)
    with pytest.raises(ValueError, match="exceeds M"):
        tgmm(torch.zeros(8, 64, dtype=torch.bfloat16), torch.zeros(8, 64,
             dtype=torch.bfloat16), gs)
