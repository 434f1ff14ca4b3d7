"""The float64 reference MoE layer: forward against a per-token loop (no permutation),
gradients against central finite differences, straight-through modes, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from fp8check.references.moe import MoEInputs, moe_reference


def _inputs(rng, t=6, d=8, f=4, e=3, k=2, dead=None, dtype=np.float64) -> MoEInputs:
    bias = np.zeros(e)
    if dead is not None:
        bias[dead] = -30.0
    return MoEInputs(
        x=rng.standard_normal((t, d)).astype(dtype),
        w_router=rng.standard_normal((d, e)).astype(dtype),
        router_bias=bias.astype(dtype),
        wi=(rng.standard_normal((e, d, 2 * f)) / np.sqrt(d)).astype(dtype),
        wo=(rng.standard_normal((e, f, d)) / np.sqrt(f)).astype(dtype),
        dy=rng.standard_normal((t, d)).astype(dtype), top_k=k)


def _per_token_forward(inp: MoEInputs) -> np.ndarray:
    """out[t] = sum over the token's top-k experts of its weight times that expert's
    SiLU-GLU MLP of x[t]: no permutation, no groups."""
    logits = inp.x @ inp.w_router + inp.router_bias
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    f = inp.wo.shape[1]
    out = np.zeros_like(inp.x)
    for t in range(inp.x.shape[0]):
        top = np.argsort(-p[t])[:inp.top_k]
        w = p[t, top] / p[t, top].sum()
        for wj, e in zip(w, top, strict=True):
            h = inp.x[t] @ inp.wi[e]
            act = h[:f] / (1 + np.exp(-h[:f])) * h[f:]
            out[t] += wj * (act @ inp.wo[e])
    return out


@pytest.mark.parametrize("k,dead", [(1, None), (2, None), (2, [1]), (3, None)])
def test_forward_matches_per_token_loop(k, dead):
    inp = _inputs(np.random.default_rng(k), k=k, dead=dead)
    ref = moe_reference(inp, "exact")
    np.testing.assert_allclose(ref.out, _per_token_forward(inp), rtol=1e-12, atol=1e-12)
    assert ref.group_sizes.sum() == inp.x.shape[0] * k
    if dead is not None:
        assert ref.group_sizes[dead].tolist() == [0]
        assert not np.any(ref.d_wi[dead]) and not np.any(ref.d_wo[dead])


@pytest.mark.parametrize("k", [1, 2, 3])
def test_gradients_match_finite_differences(k):
    rng = np.random.default_rng(10 + k)
    inp = _inputs(rng, k=k)
    ref = moe_reference(inp, "exact")
    grads = {"x": ref.dx, "w_router": ref.d_router, "wi": ref.d_wi, "wo": ref.d_wo}
    eps = 1e-6
    for name, g in grads.items():
        v = rng.standard_normal(g.shape)

        def loss(sign, name=name, v=v):
            kw = {name: getattr(inp, name) + sign * eps * v}
            p = MoEInputs(**{**inp.__dict__, **kw})
            return float(np.sum(_per_token_forward(p) * inp.dy))

        fd = (loss(1) - loss(-1)) / (2 * eps)
        assert abs(fd - float(np.sum(g * v))) <= 1e-6 * max(1.0, abs(fd)), name
    if k == 1:  # renormalised top-1 weight is identically 1: no router gradient
        assert np.max(np.abs(ref.d_router)) < 1e-12


def test_straight_through_modes_round_the_forward_only():
    rng = np.random.default_rng(3)
    inp = _inputs(rng, t=8, d=128, f=128, e=3, k=2, dtype=np.float32)
    exact, fp8, bf16 = (moe_reference(inp, m) for m in ("exact", "fp8", "bf16"))
    for q, lo, hi in ((fp8, 15.0, 40.0), (bf16, 35.0, 70.0)):
        # the forward moved by the operand rounding, by the amount that rounding implies
        err = np.sum((q.out - exact.out) ** 2) / np.sum(exact.out ** 2)
        assert lo <= -10 * np.log10(err) <= hi
        assert np.array_equal(q.group_sizes, exact.group_sizes)
    # the backward of a GMM reads the unquantized operands: with the output cotangent
    # fixed, d_wo differs from the exact one only through the forward's activations
    assert not np.array_equal(fp8.d_wo, exact.d_wo)


def test_bad_input_is_a_value_error():
    inp = _inputs(np.random.default_rng(0))
    with pytest.raises(ValueError, match="operands"):
        moe_reference(inp, "fp16")
    with pytest.raises(ValueError, match="top_k"):
        MoEInputs(**{**inp.__dict__, "top_k": 4})
    with pytest.raises(ValueError, match="wo"):
        MoEInputs(**{**inp.__dict__, "wo": inp.wo[:, :-1]})
