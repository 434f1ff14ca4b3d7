"""The public asserts: each turns its inputs into the gate's `Problem` (or the quantizer's
check) and a `ReplayRecord`, and ends on `engine.conclude`; `replay` reruns a record."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from fp8check.contracts import TGMM, MatmulClaims, QuantizerClaims, check_claims, declare
from fp8check.contracts.claims import IN_DTYPES
from fp8check.layers.op import (
    gmm_fp8_problem,
    quantizer_output_criteria,
    tgmm_problem,
    unscaled_gmm_problem,
)
from fp8check.layers.op.locations import in_quantized, nowhere
from fp8check.references.quant import BLOCK
from fp8check.results import CaseResult, Criterion
from fp8check.testing.engine import check_matmul, conclude
from fp8check.testing.exactness import partials_exact_in_f32
from fp8check.testing.inputs import (
    UINT_OF_SIZE,
    as_array,
    check_gmm_shapes,
    dtype_name,
    group_sizes_of,
    quantized_operand,
)
from fp8check.testing.replay_record import ReplayRecord


def matmul_claims(claims: MatmulClaims | None, declared: Mapping[str, Any]) -> MatmulClaims:
    """The claims a matmul assert judges by: `claims` (default `MatmulClaims()`) with the
    claims `declared` as keywords by field name over them, resolved with no framework
    (an assert is handed arrays: `flushes_subnormals` None is False).  ValueError (one
    line) for a claim that is none or a keyword that is no claim."""
    __tracebackhide__ = True
    return declare(claims or MatmulClaims(), declared).resolved(None)


def _unquantized(pair: tuple[Any, Any] | None) -> tuple[np.ndarray, np.ndarray] | None:
    __tracebackhide__ = True
    if pair is None:
        return None
    return (as_array(pair[0], "unquantized").astype(np.float32),
            as_array(pair[1], "unquantized").astype(np.float32))


def assert_gmm_matches(
    out: Any, lhs: Any, rhs: Any, group_sizes: Any, *, claims: MatmulClaims | None = None,
    profile: str = "strict", recipe: str | None = None,
    unquantized: tuple[Any, Any] | None = None, **declared: Any,
) -> CaseResult:
    """Assert that `out` [M,N] (f32 or bf16) is a correct grouped matmul of lhs and rhs.

    lhs [M,K], rhs [G,K,N] are either
    * the quantized operands the kernel consumed: `QTensor`s or (values, scales) pairs
      (e4m3fn/e5m2 values, float32 scales in 1x128 / 128x128 blocks): the `gmm-fp8`
      contract.  `unquantized=(x, w)` (the float inputs) adds the impact question;
    * with `recipe` (e.g. "deepgemm"): the float32/bf16 inputs, quantized here with that
      recipe exactly as the gate does (both questions are measured);
    * otherwise unscaled bf16/f32 operands: the `gmm` contract (a bf16 GMM).
    The kernel's claims are `claims` (a `MatmulClaims`, e.g. its KernelSpec's) with any
    claim given as a keyword by field name over them (`declared`: every claim the gate's
    command line declares, and the others), judged as the gate judges them:
    `accum="deepgemm"` (or "cublas", "tokamax", a tensor-core recipe with its
    `hopper_interval`) declares the recipe the kernel follows: then `bit_exact` is
    checked wherever the partials are provably exact (`partials_exact_in_f32`);
    `acc_unit_roundoff` is the accumulator's u (2^-24 = f32); `flushes_subnormals=True`:
    the kernel flushes float32 subnormals to zero (as jax on XLA:CPU and TPUs do; an
    assert knows no framework, so None means False): the bound gains the flush term
    (`fp8check.measures.underflow`) and, on data that reaches the subnormal range, only the bound
    is asserted there; `out_dtypes` and `m_align` must admit `out` and the group sizes;
    `deterministic` takes two calls (`assert_bitexact` on them).
    Only rows below sum(group_sizes) are compared.

    Returns:
      The passing `CaseResult` (layer 1): every criterion with its value and limit.

    Raises:
      AssertionError: a criterion failed; the message names each, its worst element and
        a one-line replay of the saved inputs.
      ValueError: bad input (shapes, dtypes, unknown recipe or profile, a claim that is
        none or that excludes this output).
    """
    __tracebackhide__ = True
    from fp8check.references import quantize

    judged = matmul_claims(claims, declared)
    o = as_array(out, "out")
    out_dtype = dtype_name(o, "out", ("f32", "bf16"))
    lq, rq = quantized_operand(lhs, (1, BLOCK), "lhs"), quantized_operand(rhs, (BLOCK, BLOCK),
                                                                          "rhs")
    if (lq is None) != (rq is None):
        raise ValueError("lhs and rhs must both be quantized or both be unscaled arrays")
    unq = _unquantized(unquantized)
    if lq is None:
        a, b = as_array(lhs, "lhs"), as_array(rhs, "rhs")
        for name, arr in (("lhs", a), ("rhs", b)):
            dtype_name(arr, name, ("f32", "bf16"))
        if recipe is not None:
            x, w = a.astype(np.float32), b.astype(np.float32)
            lq, rq = quantize(x, (1, BLOCK), recipe), quantize(w, (BLOCK, BLOCK), recipe)
            unq = (x, w)
    check_gmm_shapes(o, lq.values if lq is not None else as_array(lhs, "lhs"),
                     rq.values if rq is not None else as_array(rhs, "rhs"))
    n_groups = rq.shape[0] if rq is not None else as_array(rhs, "rhs").shape[0]
    gs = group_sizes_of(group_sizes, n_groups, o.shape[0])
    if lq is not None:
        prob = gmm_fp8_problem(lq, rq, gs, out_dtype, unq,
                               exact_partials=partials_exact_in_f32(lq, rq, gs))
        arrays = {"lhs_values": lq.values, "lhs_scales": lq.scales, "rhs_values": rq.values,
                  "rhs_scales": rq.scales}
    else:
        if judged.accum is not None:
            raise ValueError("accum needs quantized operands (QTensors, (values, scales) or "
                             "recipe=...)")
        prob = unscaled_gmm_problem(as_array(lhs, "lhs"), as_array(rhs, "rhs"), gs, out_dtype,
                                 unq)
        arrays = {"lhs": prob.args[0], "rhs": prob.args[1]}
    if unq is not None:
        arrays.update(x=unq[0], w=unq[1])
    record = ReplayRecord("gmm", arrays | {"out": o, "group_sizes": gs}, profile, judged)
    return check_matmul(o, prob, record)


def assert_tgmm_matches(
    out: Any, lhs: Any, dy: Any, group_sizes: Any, *, claims: MatmulClaims | None = None,
    profile: str = "strict", unquantized: tuple[Any, Any] | None = None, **declared: Any,
) -> CaseResult:
    """Assert that `out` [G,K,N] (f32 or bf16) is the weight gradient dW_g = lhs_g^T dy_g
    of lhs [M,K] and dy [M,N] (bf16 or f32); an empty group must give zeros.
    `unquantized=(x, dy)` in float32 adds the impact question; `claims` and claims as
    keywords as in `assert_gmm_matches` (a tgmm kernel declares no accum)."""
    __tracebackhide__ = True
    judged = matmul_claims(claims, declared)
    check_claims(TGMM, judged)
    o = as_array(out, "out")
    out_dtype = dtype_name(o, "out", ("f32", "bf16"))
    a, d = as_array(lhs, "lhs"), as_array(dy, "dy")
    for name, arr in (("lhs", a), ("dy", d)):
        dtype_name(arr, name, ("f32", "bf16"))
    if a.ndim != 2 or d.ndim != 2 or a.shape[0] != d.shape[0]:
        raise ValueError(f"expected lhs [M,K] and dy [M,N], got {list(a.shape)}, {list(d.shape)}")
    if o.ndim != 3 or o.shape[1:] != (a.shape[1], d.shape[1]):
        raise ValueError(f"out has shape {list(o.shape)}; expected [G, {a.shape[1]}, "
                         f"{d.shape[1]}]")
    gs = group_sizes_of(group_sizes, o.shape[0], a.shape[0])
    unq = _unquantized(unquantized)
    prob = tgmm_problem(a, d, gs, out_dtype, unq)
    arrays = {"lhs": a, "dy": d} | ({} if unq is None else {"x": unq[0], "w": unq[1]})
    record = ReplayRecord("tgmm", arrays | {"out": o, "group_sizes": gs}, profile, judged)
    return check_matmul(o, prob, record)


def assert_quantizer_matches(
    values: Any, scales: Any, x: Any, block: tuple[int, int], recipe: str,
    fmt: str = "e4m3fn", **declared: Any,
) -> CaseResult:
    """Assert that (values, scales) are bit for bit quantize(x, block, recipe, fmt).

    x is float32 or bf16 (the recipe rounds from x's dtype: f32 -> bf16 -> fp8 is not
    f32 -> fp8); block is (1,128), (128,1) or (128,128).  The quantizer's claims are
    `QuantizerClaims(recipe, block, fmt, in_dtype=<x's dtype>)` with any other claim given
    as a keyword by field name (`declared`): `division_ulps` N > 0 declares its float32
    divisions approximate (Triton's `/`), each within N ulps of the exact quotient: then
    its scales must be ones the recipe gives from such divisions and its values the
    recipe's from its own scales (`fp8check.references.quant_approx`).  ValueError (one
    line) for a claim that is none."""
    __tracebackhide__ = True
    xx = as_array(x, "x")
    in_dtype = dtype_name(xx, "x", IN_DTYPES)
    claims = declare(QuantizerClaims(recipe, block, fmt, in_dtype), declared)
    if claims.in_dtype != in_dtype:
        raise ValueError(f"x is {in_dtype}, but the quantizer declares in_dtype "
                         f"{claims.in_dtype}")
    return _check_quantizer(as_array(values, "values"), as_array(scales, "scales"), xx,
                            claims)


def _check_quantizer(v: np.ndarray, s: np.ndarray, xx: np.ndarray,
                     claims: QuantizerClaims) -> CaseResult:
    """The quantizer assert on numpy arrays, with the claims it judges by."""
    __tracebackhide__ = True
    m: dict[str, Any] = {"recipe": claims.recipe, "block": list(claims.block),
                         "fmt": claims.fmt, "n_compared": int(v.size + s.size)}
    crit = quantizer_output_criteria(v, s, xx, claims, m)
    record = ReplayRecord("quantizer", {"values": v, "scales": s, "x": xx}, claims=claims)
    return conclude(record, crit, m, in_quantized(claims.block))


def assert_bitexact(a: Any, b: Any) -> CaseResult:
    """Assert that a and b have the same shape, dtype and bits (NaN payloads included):
    the determinism check (run a kernel twice) or a kernel vs a bit-exact reference."""
    __tracebackhide__ = True
    from fp8check.measures import metrics

    x, y = as_array(a, "a"), as_array(b, "b")
    if x.shape != y.shape or x.dtype != y.dtype:
        raise AssertionError(f"fp8check: not bit-exact: a is {x.dtype}{list(x.shape)}, "
                             f"b is {y.dtype}{list(y.shape)}")
    bits = UINT_OF_SIZE[x.dtype.itemsize]
    diff = np.ascontiguousarray(x).view(bits) != np.ascontiguousarray(y).view(bits)
    n_bad = int(np.count_nonzero(diff))
    worst = None
    if n_bad:
        try:
            ulps = metrics.ulp_distance(x, y, x.dtype)
        except (ValueError, TypeError):  # not a float format: count bits only
            ulps = diff.astype(np.int64)
        ulps = np.where(diff, ulps, 0)
        idx = np.unravel_index(np.argmax(ulps), ulps.shape)
        worst = {"index": [int(i) for i in idx], "out": float(x[idx]), "ref": float(y[idx]),
                 "ulp": int(ulps[idx]), "bound": None}
    crit = [Criterion.check("bit_exact", "correctness", n_bad, "==", 0,
                            meaning="a and b bit for bit equal", n_bad=n_bad,
                            bad_means="elements whose bits differ", worst=worst)]
    return conclude(ReplayRecord("bitexact", {"a": x, "b": y}), crit,
                    {"n_compared": int(x.size)}, nowhere)


def replay(path: str | Path) -> CaseResult:
    """Re-run the assertion saved in `path` (an .npz written by a failing assertion)."""
    __tracebackhide__ = True
    from fp8check.references import QTensor

    r = ReplayRecord.load(path)
    a = r.arrays
    unq = (a["x"], a["w"]) if "x" in a and r.kind != "quantizer" else None
    claims = r.claims
    if isinstance(claims, QuantizerClaims):
        return _check_quantizer(a["values"], a["scales"], a["x"], claims)
    if r.kind == "gmm":
        if "lhs_values" in a:
            lq = QTensor(a["lhs_values"], a["lhs_scales"], (1, BLOCK),
                         a["lhs_values"].dtype.name.replace("float8_", ""), "as given")
            rq = QTensor(a["rhs_values"], a["rhs_scales"], (BLOCK, BLOCK),
                         a["rhs_values"].dtype.name.replace("float8_", ""), "as given")
            return assert_gmm_matches(a["out"], lq, rq, a["group_sizes"], claims=claims,
                                      unquantized=unq, profile=r.need("profile"))
        return assert_gmm_matches(a["out"], a["lhs"], a["rhs"], a["group_sizes"],
                                  claims=claims, unquantized=unq, profile=r.need("profile"))
    if r.kind == "tgmm":
        return assert_tgmm_matches(a["out"], a["lhs"], a["dy"], a["group_sizes"],
                                   claims=claims, unquantized=unq, profile=r.need("profile"))
    return assert_bitexact(a["a"], a["b"])
