"""The sample user test file (tests/user_example) run by pytest's own `pytester`, in a
subprocess as a user's run would be (the plugin loads from its entry point): a correct
kernel passes and writes the report; a seeded bug fails with the described message."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).parent / "user_example"
# The seeded bug: an off-by-one K loop that drops the last 128-wide K block.
CORRECT_LOOP = "for kb in range(k // BLOCK):"
BUGGY_LOOP = "for kb in range(k // BLOCK - 1):"


def _run(pytester, kernel_source, *args):
    pytester.makepyfile(test_user_gmm=(EXAMPLE / "test_user_gmm.py").read_text(),
                        user_kernels=kernel_source)
    report = pytester.path / "out" / "fp8check.html"
    # the profile the plugin registers: no deadline (shared CPUs), derandomized
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q",
                                           "--hypothesis-profile=fp8check-ci",
                                           f"--fp8check-report={report}", *args)
    return result, report


def test_correct_kernel_passes_and_writes_the_report(pytester):
    result, report = _run(pytester, (EXAMPLE / "user_kernels.py").read_text())
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes["passed"] >= 8, result.stdout.str()
    doc = json.loads(report.with_suffix(".json").read_text())
    assert doc["version"] == 2 and doc["summary"]["passed"] is True
    cases = {r["case"] for r in doc["results"]
             if r["kernel"].endswith("test_gmm_over_the_gate_suite")}
    from fp8check.inputs.cases import build_suite

    assert cases == {c.id for c in build_suite("smoke", 0)}  # the gate's case ids
    assert all(r["passed"] for r in doc["results"])
    handwritten = [r for r in doc["results"] if r["kernel"].endswith("handwritten_group_sizes")]
    assert {"bound_ratio", "bias_z", "impact_sqnr_db"} <= set(handwritten[0]["criteria"])
    html = report.read_text()
    assert "<html" in html.lower() and "test_gmm_over_the_gate_suite" in html


def test_seeded_bug_fails_with_the_message_and_a_working_repro(pytester):
    source = (EXAMPLE / "user_kernels.py").read_text()
    assert source.count(CORRECT_LOOP) == 1
    result, report = _run(pytester, source.replace(CORRECT_LOOP, BUGGY_LOOP),
                          "-k", "gate_suite or handwritten")
    out = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 5 + 1, out  # every smoke case and the handwritten test
    for needle in ("bound_ratio:", "must be <= 1", "elements over the bound:",
                   "worst element: index (", "row ", "of the group", "N tile",
                   "value:", "reference:", "ULP distance:", "bound:",
                   "Reproduce in the gate: fp8check gate --kernel user_kernels:gmm_fp8 "
                   "--contract gmm-fp8 --framework numpy --layers 1 --suite smoke --seed 0 "
                   "--profile strict --case wi-m256-",
                   "Reproduce these inputs: python -c"):
        assert needle in out, needle
    doc = json.loads(report.with_suffix(".json").read_text())
    failed = [r for r in doc["results"] if r["passed"] is False]
    assert len(failed) == 6 and all("bound_ratio" in r["failed"] for r in failed)
    # the gate command fails the same case on the same kernel
    gate_cmd = shlex.split(re.search(r"Reproduce in the gate: (.*)", out).group(1))
    gate = subprocess.run([sys.executable, "-m", "fp8check", *gate_cmd[1:], "--no-progress"],
                          capture_output=True, text=True, timeout=300, cwd=pytester.path)
    assert gate.returncode == 1 and f"FAIL user_kernels:gmm_fp8 {gate_cmd[-1]}: " \
        "bound_ratio" in gate.stderr, gate.stderr[-2000:]
    # the replay one-liner reproduces the verdict from the saved inputs alone
    cmd = re.search(r'Reproduce these inputs: python -c "(.*)"', out).group(1)
    assert str(report.parent / "fp8check-failures") in cmd
    replay = subprocess.run([sys.executable, "-c", cmd], capture_output=True, text=True,
                            timeout=120)
    assert replay.returncode == 1 and "AssertionError: fp8check: gmm output fails" in \
        replay.stderr and "bound_ratio:" in replay.stderr, replay.stderr[-2000:]


def test_plugin_leaves_other_runs_alone(pytester, monkeypatch):
    """Only fp8check's plugin loaded (other installed plugins, such as jaxtyping's, which
    tokamax brings, import numpy themselves): a run without the option imports nothing
    heavy and prints nothing."""
    pytester.makepyfile(test_plain="""
        import sys
        def test_nothing_heavy_loaded():
            heavy = [m for m in ("jax", "torch", "triton", "numpy", "fp8check.testing")
                     if m in sys.modules]
            assert heavy == []
        """)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p",
                                           "fp8check.pytest_plugin")
    result.assert_outcomes(passed=1)
    assert "fp8check:" not in result.stdout.str()  # no report line without the option


@pytest.mark.parametrize("source, message", [
    ("@pytest.mark.fp8check(suite='ci')\ndef test_x():\n    pass\n", "needs the fp8check_case"),
    ("def test_x(fp8check_case):\n    pass\n", "needs @pytest.mark.fp8check"),
    ("@pytest.mark.fp8check(suite='nightly')\ndef test_x(fp8check_case):\n    pass\n",
     "unknown suite 'nightly'"),
])
def test_marker_misuse_is_one_clear_error(pytester, source, message):
    pytester.makepyfile(test_misuse="import pytest\n" + source)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret != 0 and message in result.stdout.str() + result.stderr.str()
