"""fp8check.measures.totals against the elementwise metrics it reduces, on adversarial data.

The oracle is fp8check.measures.metrics (itself tested against nextafter walks and Fractions in
test_metrics.py): every count, maximum and argmax must be equal, the float64 sums equal
up to summation order (relative 1e-12: n 2^-53 for n <= 10^6 terms of one sign).
"""

import dataclasses
import math
import time

import ml_dtypes
import numpy as np
import pytest

from fp8check.measures import metrics
from fp8check.measures.totals import (
    _BLOCK,
    _SUB,
    MetricTotals,
    gmm_metric_totals,
    gmm_reference_chunks,
    metric_totals,
)
from fp8check.references import abs_product, gmm, quantize
from fp8check.references.casts import rounded
from fp8check.references.gmm import TENSOR_CORE_ACCUMS
from tests.test_partials_paths import _adversarial as _adversarial_operands

BF16 = ml_dtypes.bfloat16


def _adversarial(rng, n, dtype):
    """exact float64 values over many binades, with zeros, float32 subnormals, values at
    and past the float32/bf16 maximum, and outputs that are RN(exact) except for planted
    one-ulp errors, a NaN, infinities, a -0 and a large outlier."""
    ex = rng.standard_normal(n) * np.exp2(rng.integers(-140, 120, n))
    ex[:50] = 0.0
    ex[50:100] = rng.uniform(-1, 1, 50) * 2.0**-140  # float32 subnormal range
    ex[100:150] = rng.choice([-1, 1], 50) * rng.uniform(3.38e38, 3.41e38, 50)
    with np.errstate(over="ignore"):  # past the maximum: RN gives inf, as it should
        out = ex.astype(dtype)
    bump = rng.choice(n, n // 50, replace=False)
    up = np.nextafter(out[bump].astype(np.float32), np.float32(np.inf)).astype(dtype)
    out[bump] = up
    out[rng.choice(n, 3)] = [np.nan, np.inf, -np.inf]
    out[:10] = -0.0
    out[n // 2] = 1e30
    ab = np.abs(ex) * rng.uniform(1.0, 4.0, n)
    return out, ex, ab


def _elementwise(out, ex, ab, k, dtype, ref=None):
    with np.errstate(over="ignore"):
        ulps = metrics.ulp_distance(out, ex.astype(dtype), dtype)
    ratio = metrics.bound_ratio(out, ex, ab, k, out_dtype=dtype)
    fin = np.isfinite(out.astype(np.float64))
    d = out.astype(np.float64) - ex
    return dict(
        n_nonfinite=int(np.count_nonzero(~fin)), ulp_max=int(ulps.max()),
        n_ulp_off=int(np.count_nonzero(ulps)), bound_ratio_max=float(ratio.max()),
        bound_ratio_argmax=int(np.argmax(ratio)), n_over_bound=int(np.count_nonzero(ratio > 1)),
        signal=float(np.sum(ex * ex)), noise=float(np.sum(np.square(d[fin]))),
        n_ref_mismatch=None if ref is None
        else int(np.count_nonzero(metrics.ulp_distance(out, ref, dtype))),
    )


def _assert_same(s: MetricTotals, want: dict):
    for key, value in want.items():
        got = getattr(s, key)
        if key in ("signal", "noise"):
            assert got == pytest.approx(value, rel=1e-12, abs=0), key
        else:
            assert got == value, (key, got, value)


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
@pytest.mark.parametrize("seed", range(3))
def test_metric_totals_equals_the_elementwise_metrics(dtype, seed):
    rng = np.random.default_rng(seed)
    n = 777 * 256  # 3 parallel blocks and a ragged fourth
    out, ex, ab = _adversarial(rng, n, dtype)
    ref = out.copy()
    ref[rng.choice(n, 40, replace=False)] = 0.0  # recipe reference differing in places
    s = metric_totals(out.reshape(-1, 777), ex.reshape(-1, 777), ab.reshape(-1, 777), 384,
                  ref=ref.reshape(-1, 777))
    _assert_same(s, _elementwise(out, ex, ab, 384, dtype, ref))
    assert s.n == n and s.sqnr_db == -math.inf  # a NaN never passes


@pytest.mark.parametrize("dtype", [np.float32, BF16], ids=["f32", "bf16"])
def test_metric_totals_finite_data_and_argmax_in_a_late_block(dtype):
    rng = np.random.default_rng(7)
    n = 4 * _BLOCK
    ex = rng.standard_normal(n)
    out = ex.astype(dtype)
    # the largest error twice, in the last block: the first occurrence is the argmax
    out[3 * _BLOCK + 5] = out[3 * _BLOCK + 9] = dtype(ex[3 * _BLOCK + 5] + 1.0)
    ex[3 * _BLOCK + 9] = ex[3 * _BLOCK + 5]
    ab = np.abs(ex) * 3
    s = metric_totals(out, ex, ab, 128)
    _assert_same(s, _elementwise(out, ex, ab, 128, dtype))
    assert s.bound_ratio_argmax == 3 * _BLOCK + 5 and s.n_over_bound == 2
    assert s.sqnr_db == pytest.approx(metrics.sqnr_db(ex, out), rel=1e-12)


def test_metric_totals_argmax_is_the_first_of_equal_maxima_across_sub_blocks():
    """The bound max three times: in the second and fourth sub-blocks of a block (not its
    first) and in a later block; the argmax is the first of them."""
    rng = np.random.default_rng(8)
    n = 3 * _BLOCK
    ex = rng.standard_normal(n)
    out = ex.astype(np.float32)
    at = [_BLOCK + _SUB + 17, _BLOCK + 3 * _SUB + 2, 2 * _BLOCK + 40]
    ex[at] = ex[at[0]]
    out[at] = np.float32(ex[at[0]] + 1.0)
    ab = np.abs(ex) * 3
    s = metric_totals(out, ex, ab, 128)
    _assert_same(s, _elementwise(out, ex, ab, 128, np.float32))
    assert s.bound_ratio_argmax == at[0] and s.n_over_bound == 3


def test_metric_totals_correct_rounding_is_zero_ulps_and_empty_input():
    ex = np.random.default_rng(1).standard_normal(1000)
    s = metric_totals(ex.astype(np.float32), ex, np.abs(ex), 128, ref=ex.astype(np.float32))
    assert (s.ulp_max, s.n_ulp_off, s.n_over_bound, s.n_ref_mismatch) == (0, 0, 0, 0)
    e = metric_totals(np.zeros(0, np.float32), np.zeros(0), np.zeros(0), 128)
    assert e == MetricTotals.empty(False) and e.sqnr_db == math.inf


@pytest.mark.parametrize("bad", ["nan-exact", "neg-abs", "inf-abs", "f16-out", "shape", "k0",
                                 "ref-dtype"])
def test_metric_totals_rejects_bad_input(bad):
    out, ex, ab = np.zeros(4, np.float32), np.zeros(4), np.zeros(4)
    kw = {"k": 128}
    if bad == "nan-exact":
        ex[2] = np.nan
    elif bad == "neg-abs":
        ab[1] = -1.0
    elif bad == "inf-abs":
        ab[3] = np.inf
    elif bad == "f16-out":
        out = out.astype(np.float16)
    elif bad == "shape":
        ex = np.zeros(5)
    elif bad == "k0":
        kw["k"] = 0
    else:
        kw["ref"] = np.zeros(4, BF16)
    with pytest.raises(ValueError, match="metric_totals"):
        metric_totals(out, ex, ab, **kw)


def _problem(seed, sizes, k=256, n=256):
    rng = np.random.default_rng(seed)
    m = int(sum(sizes)) + 5  # rows past sum(group_sizes): never compared
    lq = quantize(rng.standard_normal((m, k), dtype=np.float32))
    rq = quantize(rng.standard_normal((len(sizes), k, n), dtype=np.float32), (128, 128))
    return lq, rq, np.array(sizes, np.int32)


@pytest.mark.parametrize("rows_per_chunk", [1, 7, 2048])
def test_gmm_metric_totals_streams_to_the_whole_array_totals(rows_per_chunk):
    lq, rq, gs = _problem(0, [0, 37, 1, 0, 90, 0])
    rows = int(gs.sum())
    out = gmm(lq, rq, gs, accum="cublas")  # a valid kernel that is not the deepgemm recipe
    out[rows:] = np.nan  # past the groups: must not be read
    want = metric_totals(out[:rows], gmm(lq, rq, gs, np.float64, "exact")[:rows],
                     abs_product(lq, rq, gs)[:rows], 256, ref=gmm(lq, rq, gs)[:rows])
    got = gmm_metric_totals(out, lq, rq, gs, rows_per_chunk=rows_per_chunk)
    for key in ("n", "n_nonfinite", "ulp_max", "n_ulp_off", "bound_ratio_argmax",
                "n_over_bound", "n_ref_mismatch"):
        assert getattr(got, key) == getattr(want, key), key
    # |A||B| is a float64 matmul (an upper bound, not exact): BLAS rounds it differently
    # per chunk, so the ratio moves in its last bits
    assert got.bound_ratio_max == pytest.approx(want.bound_ratio_max, rel=1e-12)
    assert got.signal == pytest.approx(want.signal, rel=1e-12)
    assert got.noise == pytest.approx(want.noise, rel=1e-12)
    assert got.n == rows * 256 and got.n_over_bound == 0 and got.n_ref_mismatch > 0


def test_gmm_metric_totals_catches_a_wrong_group_and_passes_the_recipe_itself():
    lq, rq, gs = _problem(3, [64, 64], n=128)
    good = gmm(lq, rq, gs)
    s = gmm_metric_totals(good, lq, rq, gs)
    assert (s.n_over_bound, s.n_ref_mismatch, s.n_nonfinite) == (0, 0, 0)
    bad = good.copy()
    bad[:64] = gmm(lq, quantize(np.ones((2, 256, 128), np.float32), (128, 128)), gs)[:64]
    s = gmm_metric_totals(bad, lq, rq, gs)
    assert s.n_over_bound > 0 and s.bound_ratio_max > 1e3 and s.bound_ratio_argmax < 64 * 128


def test_gmm_metric_totals_says_where_its_time_goes():
    """`seconds` gets each phase's wall time added (two calls: the sums grow), within the
    call's own, and leaves the totals as they are."""
    lq, rq, gs = _problem(1, [40, 0, 90], n=256)
    out = gmm(lq, rq, gs, accum="cublas")
    seconds = {"references": 0.0, "metrics": 0.0, "other": 1.0}
    t = time.perf_counter()
    got = gmm_metric_totals(out, lq, rq, gs, rows_per_chunk=32, seconds=seconds)
    took = time.perf_counter() - t
    first = dict(seconds)
    assert first["other"] == 1.0 and first["references"] > 0 and first["metrics"] > 0
    assert first["references"] + first["metrics"] <= took
    assert got == gmm_metric_totals(out, lq, rq, gs, rows_per_chunk=32, seconds=seconds)
    assert all(seconds[k] > first[k] for k in ("references", "metrics"))


def test_gmm_metric_totals_rejects_bad_input():
    lq, rq, gs = _problem(0, [3, 4])
    out = np.zeros((12, 256), np.float32)
    with pytest.raises(ValueError, match="out must be"):
        gmm_metric_totals(out[:5], lq, rq, gs)
    with pytest.raises(ValueError, match="rows_per_chunk"):
        gmm_metric_totals(out, lq, rq, gs, rows_per_chunk=0)
    with pytest.raises(ValueError, match="exceeds M"):
        gmm_metric_totals(out, lq, rq, np.array([10, 4]))
    with pytest.raises(ValueError, match="QTensors"):
        gmm_metric_totals(out, lq.values, rq, gs)


def _bias_oracle(out, lq, rq, gs, accum, rows_per_chunk):
    """The sign-test sums by `metrics.bias_sums` on each chunk (float64 copies, a separate
    pass per mode), against RN(exact) or a tensor-core recipe's output, none where the chunk
    holds a NaN or Inf."""
    g, n = rq.shape[0], rq.shape[2]
    bias = {mode: metrics.BiasChunks(g, n, 128) for mode in metrics.BIAS_MODES}
    for c in gmm_reference_chunks(lq, rq, gs, out.dtype, accum=accum,
                                  rows_per_chunk=rows_per_chunk):
        o = out[c.start:c.stop]
        against = c.ref if accum in TENSOR_CORE_ACCUMS else rounded(c.exact, out.dtype)
        keep = None if np.isfinite(o.astype(np.float64)).all() else np.zeros(o.shape, bool)
        for mode in bias:
            bias[mode].add_sums(metrics.bias_sums(
                o, against, np.full(o.shape[0], c.group), g, mode=mode, block=128, keep=keep))
    return {mode: chunks.sums() for mode, chunks in bias.items()}


@pytest.mark.parametrize(("sizes", "k", "n", "accum", "dtype", "rows_per_chunk", "nonfinite"), [
    ([0, 37, 1, 0, 90, 0], 256, 256, "deepgemm", np.float32, 7, False),
    ([0, 37, 1, 0, 90, 0], 256, 200, "deepgemm", BF16, 2048, True),  # ragged last tile
    ([300, 0, 5], 128, 300, "cublas", np.float32, 2048, False),  # rows across _BLOCK
    ([300, 0, 5], 128, 300, None, BF16, 100, False),
    ([40, 0, 3], 128, 256, "deepgemm-hopper", np.float32, 2048, True),  # against the recipe
])
def test_gmm_metric_totals_bias_sums_are_the_chunks_bias_sums(sizes, k, n, accum, dtype,
                                                              rows_per_chunk, nonfinite):
    """The sign-test sums summed in the metrics' pass are `metrics.bias_sums`' bit for bit
    (the dtypes too), with ties (outputs equal to the reference), zeros, one-ulp moves up
    and down, and a NaN and an Inf emptying their chunks."""
    rng = np.random.default_rng(n + len(sizes))
    lq, rq, gs = _problem(5, sizes, k=k, n=n)
    out = gmm(lq, rq, gs, dtype, accum="cublas")
    flat = out.reshape(-1)
    pick = rng.choice(flat.size, flat.size // 5, replace=False)
    step = rng.choice([-np.inf, np.inf], pick.size).astype(np.float32)
    flat[pick] = np.nextafter(flat[pick].astype(np.float32), step).astype(dtype)
    flat[rng.choice(flat.size, 50)] = 0.0
    if nonfinite:
        out[2, 1], out[2, 5] = np.nan, np.inf  # the first chunk: the others count
    got = gmm_metric_totals(out, lq, rq, gs, accum=accum, rows_per_chunk=rows_per_chunk)
    want = _bias_oracle(out, lq, rq, gs, accum, rows_per_chunk)
    _assert_same_bias(got.bias, want)
    assert all(s.sq > 0 for s in want.values())


def _assert_same_bias(got, want):
    """Sign-test sums (`metrics.BiasSums` per mode) equal bit for bit, dtypes too."""
    assert got is not None and got.keys() == want.keys()
    for mode, w in want.items():
        s = got[mode]
        for key in ("row_sums", "row_counts", "col_sums", "col_counts"):
            a, b = getattr(s, key), getattr(w, key)
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (mode, key)
        assert s.sq == w.sq, mode


def test_gmm_metric_totals_bias_needs_a_finite_reference():
    """RN(exact) past the output format's maximum is inf: the sign test refuses it, as
    `metrics.bias_sums` does."""
    lq, rq, gs = _problem(2, [4, 4], k=128, n=128)
    big = dataclasses.replace(lq, scales=lq.scales * np.float32(2.0**100))
    rq = dataclasses.replace(rq, scales=rq.scales * np.float32(2.0**100))
    out = np.zeros((lq.shape[0], 128), np.float32)
    with pytest.raises(ValueError, match="ref contains NaN or Inf"):
        gmm_metric_totals(out, big, rq, gs)


_EXACT_FIELDS = ("n", "n_nonfinite", "ulp_max", "n_ulp_off", "bound_ratio_max",
                 "bound_ratio_argmax", "n_over_bound", "n_ref_mismatch")


def _both_ways(out, lq, rq, gs, monkeypatch, **kw):
    """gmm_metric_totals with the metrics summed in the references' C pass (asserted to
    run, with the count of elements it left undecided) and with the C pass writing the
    references for `_reduce` (`forward_refs.gmm_metric_rows` answering None)."""
    from fp8check.references import forward_refs

    real, undecided = forward_refs.gmm_metric_rows, []

    def spy(*a, **k):
        summed = real(*a, **k)
        assert summed is not None  # the pass ran and summed the metrics
        undecided.append(summed.rows_u.size)
        return summed

    monkeypatch.setattr(forward_refs, "gmm_metric_rows", spy)
    fused = gmm_metric_totals(out, lq, rq, gs, **kw)
    assert undecided
    monkeypatch.setattr(forward_refs, "gmm_metric_rows", lambda *a, **k: None)
    arrays = gmm_metric_totals(out, lq, rq, gs, **kw)
    return fused, arrays, sum(undecided)


def _assert_same_totals(fused, arrays):
    """Every count, max and argmax and the sign-test sums bit for bit; the float64 sums up
    to their order (per row in the pass)."""
    for key in _EXACT_FIELDS:
        assert getattr(fused, key) == getattr(arrays, key), key
    assert fused.signal == pytest.approx(arrays.signal, rel=1e-12, abs=0)
    assert fused.noise == pytest.approx(arrays.noise, rel=1e-12, abs=0)
    assert arrays.bias is not None
    _assert_same_bias(fused.bias, arrays.bias)


def _perturbed(out, rng, nonfinite, wild=True):
    """out with a fifth of its elements one ulp up or down; where `wild` also zeros, -0s
    and outliers a thousand times too large; a NaN and an Inf where `nonfinite`."""
    flat = out.reshape(-1)
    pick = rng.choice(flat.size, flat.size // 5, replace=False)
    step = rng.choice([-np.inf, np.inf], pick.size).astype(np.float32)
    flat[pick] = np.nextafter(flat[pick].astype(np.float32), step).astype(out.dtype)
    if not wild:
        return out
    flat[rng.choice(flat.size, 30)] = 0.0
    flat[rng.choice(flat.size, 30)] = -0.0
    at = rng.choice(flat.size, 5)
    flat[at] = (flat[at].astype(np.float32) * 1000).astype(out.dtype)
    if nonfinite:
        flat[7], flat[-3] = np.nan, np.inf
    return out


@pytest.mark.parametrize("accum", ["deepgemm", "cublas", "tokamax"])
@pytest.mark.parametrize("dtype", [np.float32, BF16])
@pytest.mark.parametrize("shape", [(300, 256, 200, 4), (45, 2048, 256, 3), (70, 128, 1100, 2)])
def test_the_pass_sums_the_metrics_the_references_give(accum, dtype, shape, monkeypatch,
                                                       pass_path):
    """The metrics summed per row inside the references' C pass (exact_gmm.h's
    `row_metrics`, on each integer-digit path) against `_reduce` on the references the
    same pass writes: every e4m3 value, scales over many binades, empty groups, rows past
    the groups, N not a multiple of 16 or 128, outputs off by ulps, zeros of both signs,
    outliers, NaN and Inf."""
    rng = np.random.default_rng()
    lq, rq, gs = _adversarial_operands(rng, *shape)
    out = _perturbed(gmm(lq, rq, gs, dtype, accum="cublas"), rng, dtype == np.float32)
    fused, arrays, _ = _both_ways(out, lq, rq, gs, monkeypatch, accum=accum,
                                  rows_per_chunk=int(rng.integers(16, 100)))
    _assert_same_totals(fused, arrays)
    assert fused.n_ulp_off > 0 and fused.n_ref_mismatch > 0


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_undecided_elements_are_added_after_the_pass(dtype, monkeypatch, pass_path):
    """Rows whose every exact value is a float64 rounding tie (1 + 2^-53 from two K
    blocks' scales), which the pass leaves undecided and the caller recomputes, among
    random rows: their metrics are added after the pass, the bound ratio's max and its
    first argmax among them (a decided element of the same row and ratio at a later
    column must not take it), and every total is the arrays path's."""
    rng = np.random.default_rng()
    m, k, n = 64, 256, 200
    lq = quantize(rng.standard_normal((m, k), dtype=np.float32))
    rq = quantize(rng.standard_normal((2, k, n), dtype=np.float32), (128, 128))
    a, b = lq.values.view(np.uint8), rq.values.view(np.uint8)
    ties = np.arange(3, m, 5)
    one = np.float32(1).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    a[ties] = 0
    a[ties, 0] = a[ties, 128] = a[ties, 129] = one
    lq.scales[ties] = [1, 2.0**-27]
    b[:, 0], b[:, 128], b[:, 129] = one, one, 0
    b[:, 129, 150] = np.float32(2.0**-9).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    rq.scales[:, 0], rq.scales[:, 1] = 1, 2.0**-26
    gs = np.array([40, 24], np.int32)
    out = _perturbed(gmm(lq, rq, gs, dtype, accum="deepgemm"), rng, False, wild=False)
    r = ties[2]
    # exact 1 (a tie: undecided) at column 5, 1 + 2^-52 (1 + 2^-53 + 2^-62: decided) at
    # column 150; out 2^127 at both, whose bound ratio is then 2^127 / (ulp(2^127) / 2)
    # at both, the rest of the bound far below its last bit
    out[r, 5] = out[r, 150] = 2.0**127
    fused, arrays, undecided = _both_ways(out, lq, rq, gs, monkeypatch, accum="deepgemm",
                                          rows_per_chunk=32)
    assert ties.size * (n - 1) <= undecided < ties.size * n + 40
    _assert_same_totals(fused, arrays)
    assert fused.bound_ratio_argmax == r * n + 5 and fused.n_over_bound >= 2
    mant = 23 if dtype == np.float32 else 7
    assert fused.bound_ratio_max == 2.0 ** (mant + 1)
