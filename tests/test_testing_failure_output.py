"""What pytest prints for a failing fp8check.testing assert in a user's run: the test's
own line and the message, not fp8check's frames, their source or their array arguments."""

import re

import pytest

pytest_plugins = ["pytester"]

USER_TESTS = """
import numpy as np
import pytest

from fp8check.testing import assert_bitexact, assert_gmm_matches


def test_gmm_of_zeros():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 256)).astype(np.float32)
    w = rng.standard_normal((2, 256, 128)).astype(np.float32)
    gs = np.array([128, 128], np.int32)
    assert_gmm_matches(np.zeros((256, 128), np.float32), x, w, gs, recipe="deepgemm")


def test_bitexact_off_by_one():
    a = np.zeros(4, np.float32)
    assert_bitexact(a, a + 1)


@pytest.mark.fp8check(suite="smoke", kernel="user:gmm")
def test_gate_case_of_zeros(fp8check_case):
    shape = fp8check_case.problem.exact.shape
    fp8check_case.assert_matches(np.zeros(shape, fp8check_case.out_dtype_as("numpy")))
"""

# what a shown fp8check frame would print: its source, its path, its array arguments
INTERNALS = ("def conclude", "def check_matmul", "def _finish", "_check_matmul",
             "raise AssertionError", "message = failure_message", "fp8check/testing/",
             "record = ReplayRecord", "= array(")


def test_failing_asserts_show_the_message_not_fp8check_internals(pytester, monkeypatch,
                                                                 tmp_path):
    monkeypatch.setenv("FP8CHECK_FAILURE_DIR", str(tmp_path / "failures"))
    pytester.makepyfile(test_user=USER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--maxfail=3")
    out = result.stdout.str()
    assert result.parseoutcomes()["failed"] == 3, out
    for message_line in ("AssertionError: fp8check: gmm output fails", "bound_ratio: ",
                         "AssertionError: fp8check: bitexact output fails",
                         "bit_exact: 4, must be 0", "worst element: index (",
                         "Reproduce in the gate: fp8check gate --kernel user:gmm",
                         "Reproduce these inputs: python -c"):
        assert re.search(r"^E\s+" + re.escape(message_line), out, re.M), message_line
    for test_line in ('assert_gmm_matches(np.zeros((256, 128), np.float32), x, w, gs, '
                      'recipe="deepgemm")',
                      "assert_bitexact(a, a + 1)",
                      'fp8check_case.assert_matches(np.zeros(shape, '
                      'fp8check_case.out_dtype_as("numpy")))'):
        assert re.search(r"^>\s+" + re.escape(test_line), out, re.M), test_line
    for internal in INTERNALS:
        assert internal not in out, internal


@pytest.mark.parametrize("call", [
    "assert_gmm_matches(np.zeros((4, 4), np.float16), np.zeros((4, 4), np.float32), "
    "np.zeros((1, 4, 4), np.float32), np.array([4], np.int32))",
    "assert_gmm_matches(np.zeros((4, 4), np.float32), np.zeros((4, 4), np.float32), "
    "np.zeros((1, 4, 4), np.float32), np.array([5], np.int32))",
])
def test_bad_input_shows_the_value_error_not_fp8check_internals(pytester, call):
    pytester.makepyfile(test_user=f"""
        import numpy as np
        from fp8check.testing import assert_gmm_matches

        def test_bad():
            {call}
        """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    out = result.stdout.str()
    assert result.parseoutcomes()["failed"] == 1, out
    assert re.search(r"^E\s+ValueError: ", out, re.M), out
    assert "raise ValueError" not in out and "fp8check/testing/" not in out, out
