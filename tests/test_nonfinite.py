"""Non-finite inputs (docs/contract.md, "Non-finite inputs"): the exact references give
IEEE's value on every element (expectations derived by hand from the planted positions,
`fp8check.inputs.nonfinite`), the criteria decide non-finite elements by `finite` and the
rest on the finite ones, and kernels that mask or spread are caught."""

import json

import numpy as np
import pytest
from seeded_bugs.kernels import CORRECT
from seeded_bugs.nonfinite import BUGS

from fp8check.inputs import nonfinite as nf
from fp8check.inputs.cases import NONFINITE, build_suite, case_inputs
from fp8check.layers.op import ProblemCache, validate_case
from fp8check.profiles import get_profile
from fp8check.references import quantize

PROFILE = get_profile("strict")
CASE = next(c for c in build_suite("ci", 0) if c.distribution == NONFINITE)
PROBLEMS = ProblemCache(capacity=3)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _groups():
    gs = np.asarray(CASE.group_sizes)
    offs = np.concatenate([[0], np.cumsum(gs)])
    a = next(g for g in range(gs.size) if gs[g] >= 3)
    b = [g for g in range(gs.size) if gs[g] >= 2 and g != a][-1]
    return gs, offs, a, b


def _inf(sign):
    return np.where(np.asarray(sign) > 0, np.inf, -np.inf)


def _assert_same_class(got, want):
    """NaN exactly where want is NaN, the same infinities, finite elsewhere."""
    assert np.array_equal(np.isnan(got), np.isnan(want))
    inf = np.isinf(want)
    assert np.array_equal(np.isinf(got), inf)
    assert np.array_equal(got[inf], want[inf])


def test_the_case_plants_nan_and_both_infinities_in_every_operand_it_names():
    inp = case_inputs(CASE)
    for arr in (inp.x, inp.w, inp.dy):
        assert np.isnan(arr).any() and np.isinf(arr).any()
    assert (inp.x == np.inf).any() and (inp.x == -np.inf).any() and (inp.w == -np.inf).any()
    assert int(np.sum(CASE.group_sizes)) < CASE.m  # unread rows carry non-finite values too


def test_plain_gmm_exact_reference_gives_ieee_values():
    inp = case_inputs(CASE)
    gs, offs, a, b = _groups()
    w = inp.w.astype(np.float32)
    import ml_dtypes
    w = w.astype(ml_dtypes.bfloat16).astype(np.float32)
    x = inp.x.astype(ml_dtypes.bfloat16).astype(np.float32)
    want = np.zeros((int(offs[-1]), CASE.n))  # finite placeholder
    a0, b0 = int(offs[a]), int(offs[b])
    want[a0] = _inf(np.sign(w[a, nf.KI]))
    want[a0, nf.N_ZERO] = np.nan  # Inf * 0
    s_p, s_m = np.sign(w[a, nf.KP]), -np.sign(w[a, nf.KM])
    want[a0 + 1] = np.where(s_p == s_m, _inf(s_p), np.nan)  # Inf - Inf where they differ
    want[a0 + 2] = np.nan
    rows_b = slice(b0, int(offs[b + 1]))
    want[rows_b, nf.N_INF] = _inf(-np.sign(x[rows_b, nf.KW1]))
    want[b0, nf.N_INF] = np.nan  # x[b0, KW1] = 0
    want[rows_b, CASE.n - 3] = np.nan
    prob = PROBLEMS.get("gmm", CASE)[0]
    _assert_same_class(prob.exact[:prob.rows], want)
    assert (want == np.inf).any() and (want == -np.inf).any() and np.isnan(want).any()


def test_tgmm_exact_reference_gives_ieee_values():
    import ml_dtypes
    inp = case_inputs(CASE)
    gs, offs, a, b = _groups()
    x = inp.x.astype(ml_dtypes.bfloat16).astype(np.float32)
    dy = inp.dy.astype(ml_dtypes.bfloat16).astype(np.float32)
    want = np.zeros((gs.size, CASE.k, CASE.n))
    a0, b0 = int(offs[a]), int(offs[b])
    want[a, nf.KI] = _inf(np.sign(dy[a0]))
    want[a, nf.KP] = _inf(np.sign(dy[a0 + 1]))
    want[a, nf.KM] = _inf(-np.sign(dy[a0 + 1]))
    want[a, nf.KN] = np.nan
    want[b, :, nf.N_DINF] = _inf(np.sign(x[b0]))
    want[b, nf.KW1, nf.N_DINF] = np.nan  # x[b0, KW1] = 0
    want[b, :, CASE.n - 100] = np.nan
    prob = PROBLEMS.get("tgmm", CASE)[0]
    _assert_same_class(prob.exact, want)


def test_gmm_fp8_exact_reference_is_nan_on_every_row_and_tile_a_nonfinite_block_reaches():
    # deepgemm quantization: an Inf block gets scale inf, zero values and NaN at the Inf;
    # a NaN block scale NaN and NaN values.  Either way its P * sa * sb is NaN (NaN, or
    # 0 * inf) for every output the block reaches: rows a0..a2 whole, and B's rows in the
    # 128-wide N tiles of N_INF and N_NAN.
    gs, offs, a, b = _groups()
    want = np.zeros((int(offs[-1]), CASE.n))
    a0 = int(offs[a])
    want[a0:a0 + 3] = np.nan
    rows_b = slice(int(offs[b]), int(offs[b + 1]))
    for col in (nf.N_INF, CASE.n - 3):
        t = col // 128 * 128
        want[rows_b, t:t + 128] = np.nan
    prob = PROBLEMS.get("gmm-fp8", CASE)[0]
    _assert_same_class(prob.exact[:prob.rows], want)
    for accum in ("deepgemm", "cublas", "tokamax"):  # the recipes agree with exact
        _assert_same_class(prob.accum_ref(accum, "f32")[:prob.rows].astype(np.float64), want)


@pytest.mark.parametrize("recipe,scales,inf_value,rest", [
    ("deepgemm", (np.inf, np.nan, np.inf), np.nan, 0.0),  # x * RN(1/inf) = x * 0
    ("transformer-engine", (1.0, 1.0, 1.0), 448.0, 1.0),  # non-finite amax -> m = 1, sat
])
def test_quantizer_reference_on_nonfinite_blocks(recipe, scales, inf_value, rest):
    x = np.ones((4, 128), np.float32)
    x[0, 3], x[1, 3], x[2, 3] = np.inf, np.nan, -np.inf
    q = quantize(x, (1, 128), recipe, nan="propagate")
    v = q.values.astype(np.float32)
    _assert_same_class(q.scales[:3, 0].astype(np.float64), np.array(scales))
    assert np.isnan(v[1, 3])
    if np.isnan(inf_value):
        assert np.isnan(v[0, 3]) and np.isnan(v[2, 3])
    else:
        assert v[0, 3] == inf_value and v[2, 3] == -inf_value
    assert (v[0, :3] == rest).all() and (v[2, :3] == rest).all()
    assert np.isfinite(q.scales[3]).all() and np.isfinite(v[3]).all()  # a finite block


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_correct_kernels_pass_the_nonfinite_case(name):
    spec = CORRECT[name]
    prob = None if spec.contract == "quantizer" else PROBLEMS.get(spec.contract, CASE)[0]
    res = validate_case(spec, CASE, PROFILE, prob)
    assert res.passed, (res.error, res.failed_criteria)
    if spec.contract != "quantizer":
        n = res.metrics["nonfinite_exact_elements"]
        assert 0 < n < np.prod(prob.exact[:prob.rows].shape)
        assert str(n) in res.metrics["nonfinite_note"]
        assert "not measured" in res.metrics["impact_note"]
        names = {c.name for c in res.criteria}
        assert {"finite", "bound_ratio", "error_ratio"} <= names


@pytest.mark.parametrize("name", sorted(BUGS))
def test_masking_and_spreading_kernels_fail_on_the_named_criterion(name):
    spec = BUGS[name].spec
    prob = None if spec.contract == "quantizer" else PROBLEMS.get(spec.contract, CASE)[0]
    res = validate_case(spec, CASE, PROFILE, prob)
    assert res.error is None, res.error
    assert BUGS[name].catch.criterion in res.failed_criteria, res.failed_criteria
    if spec.contract != "quantizer":  # only the non-finite elements are wrong: the other
        # criteria, on the finite elements, still pass (masking) or fail (spreading)
        others = set(res.failed_criteria) - {"finite"}
        spreads = "spread" in name
        assert bool(others) == spreads, res.failed_criteria


def test_a_kernel_wrong_on_finite_elements_is_still_caught_on_the_nonfinite_case():
    spec = CORRECT["numpy-fp8-deepgemm"]
    prob = PROBLEMS.get("gmm-fp8", CASE)[0]

    def off_by_a_lot(*args, out_dtype=np.float32):
        out = spec.fn(*args, out_dtype=np.float32)
        out[np.isfinite(out)] *= np.float32(1.01)
        return out.astype(out_dtype)

    from dataclasses import replace
    undeclared = replace(spec.matmul_claims, accum=None)
    res = validate_case(replace(spec, fn=off_by_a_lot, name="off", claims=undeclared), CASE,
                        PROFILE, prob)
    assert res.error is None and "finite" not in res.failed_criteria
    assert "bound_ratio" in res.failed_criteria


def test_report_renders_a_nonfinite_case():
    from fp8check import results
    from fp8check.reports import html as report_html
    from fp8check.reports.plotdata import plot_data

    specs = [CORRECT["numpy-fp8-deepgemm"], BUGS["bug-nan-to-num-output"].spec]
    prob = PROBLEMS.get("gmm-fp8", CASE)[0]
    rs = [validate_case(s, CASE, PROFILE, prob, plots=plot_data) for s in specs]
    assert [r.passed for r in rs] == [True, False]
    env = results.environment(specs, suite="ci", seed=0, profile="strict", backend="auto",
                              load_errors={})
    doc = json.loads(json.dumps(results.document(rs, results.tally(rs, {}), env)))
    results.documents.schema.check(doc, results.documents.schema.DOCUMENT, "test")
    page = report_html.render_html(doc)
    assert CASE.id in page and "bug-nan-to-num-output" in page


@pytest.mark.parametrize("block", [(1, 128), (128, 128)])
def test_pallas_quantizer_carries_nonfinite_blocks_as_the_reference(block):
    # It gave an Inf block a NaN scale and all-NaN values (its opaque zero was 0 * amax).
    from fp8check.contracts import QuantizerClaims
    from fp8check.kernels.pallas.quantize import quantize_deepgemm
    from fp8check.layers.op.criteria import quantizer_output_criteria

    x = np.random.default_rng(2).standard_normal((256, 384)).astype(np.float32)
    x[0, 3], x[130, 200], x[5, 300] = np.inf, -np.inf, np.nan
    values, scales = quantize_deepgemm(x, block)
    m: dict = {}
    crit = quantizer_output_criteria(np.asarray(values), np.asarray(scales), x,
                                     QuantizerClaims("deepgemm", block), m)
    assert crit[0].passed, m
    assert np.isinf(np.asarray(scales)).any() and np.isnan(np.asarray(scales)).any()
