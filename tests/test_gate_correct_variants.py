"""Correct gmm-fp8 variants (other accumulation orders and precisions) pass the whole
`ci` suite: the gate has no false alarms on valid kernels."""

import pytest
from seeded_bugs.kernels import CORRECT

from fp8check.inputs.cases import NONFINITE, build_suite
from fp8check.layers.op import build_problem, validate_case
from fp8check.profiles import IMPACT_REPORT_ONLY, get_profile

GMM_FP8 = sorted(n for n, s in CORRECT.items() if s.contract == "gmm-fp8")


@pytest.fixture(scope="module")
def ci_results():
    profile = get_profile("strict")
    results = {name: [] for name in GMM_FP8}
    for case in (c for c in build_suite("ci", 0) if c.applies_to("gmm-fp8")):
        prob = build_problem("gmm-fp8", case)
        for name in GMM_FP8:
            results[name].append((case, validate_case(CORRECT[name], case, profile, prob)))
    return results


def test_there_are_at_least_three_correct_variants():
    assert len(GMM_FP8) >= 4


@pytest.mark.parametrize("name", GMM_FP8)
def test_correct_variant_passes_ci(ci_results, name):
    failed = [(c.id, r.failed_criteria, r.error) for c, r in ci_results[name] if not r.passed]
    assert not failed


def test_declared_accumulation_is_checked_bit_exact(ci_results):
    runs = ci_results["numpy-fp8-deepgemm"]
    exact = [r for c, r in runs if c.exact_partials]
    assert exact and all("bit_exact" in {x.name for x in r.criteria} for r in exact)
    assert all(r.metrics["bit_exact_mismatches"] == 0 for r in exact)
    # not declared, or not an exact-partials case: the bound alone decides
    others = [r for c, r in runs if not c.exact_partials]
    assert all("bit_exact" not in {x.name for x in r.criteria} for r in others)
    pairwise = ci_results["numpy-fp8-pairwise"]
    assert all("bit_exact" not in {x.name for x in r.criteria} for _, r in pairwise)


def test_every_case_reports_both_questions(ci_results):
    for case, res in ci_results["numpy-fp8-naive"]:
        questions = {c.question for c in res.criteria}
        assert "correctness" in questions
        if case.distribution == NONFINITE:  # impact has no meaning against NaN / Inf
            assert "impact" not in questions and "not measured" in res.metrics["impact_note"]
            continue
        assert "impact_sqnr_db" in res.metrics and "impact_band" in res.metrics
        if case.distribution not in IMPACT_REPORT_ONLY:
            assert "impact" in questions, case.id
