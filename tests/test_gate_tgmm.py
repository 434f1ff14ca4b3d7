"""The tgmm contract: a correct numpy tgmm (float32 matmul per group) passes the whole
`ci` suite, empty groups and M_g = 1 included."""

from seeded_bugs.kernels import CORRECT

from fp8check.inputs.cases import build_suite
from fp8check.layers.op import build_problem, validate_case
from fp8check.profiles import get_profile

CASES = [c for c in build_suite("ci", 0) if c.applies_to("tgmm")]
PROFILE = get_profile("strict")


def test_correct_tgmm_passes_ci():
    spec = CORRECT["numpy-tgmm"]
    failed = []
    for case in CASES:
        res = validate_case(spec, case, PROFILE, build_problem("tgmm", case))
        assert res.metrics["nonfinite_mismatches"] == 0
        if not res.passed:
            failed.append((case.id, res.failed_criteria, res.error))
    assert not failed
