"""A warning raised while the gate makes a result is recorded on that result (metric
"warnings", in the JSON and the report), never printed across the progress bar; the
references' own expected conditions on the non-finite cases are silenced where they are
computed (`fp8check.gate.caught`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fp8check.results import read_document

KERNEL = '''
import numpy as np

def gmm(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
    np.float32(3e38) * np.float32(10.0)  # overflows: a RuntimeWarning, twice a call
    np.float32(3e38) * np.float32(10.0)
    a = lhs_q.astype(np.float32) * np.repeat(lhs_scale, 128, axis=1)
    b = rhs_q.astype(np.float32) * np.repeat(np.repeat(rhs_scale, 128, axis=1), 128, axis=2)
    out = np.zeros((a.shape[0], b.shape[2]), np.float32)
    start = 0
    for g, size in enumerate(np.asarray(group_sizes).tolist()):
        out[start:start + size] = a[start:start + size] @ b[g]
        start += size
    return out.astype(out_dtype)
'''
NONFINITE = "wo-m140-k640-n896-g8-zero-last-nonfinite-f32-s0"


def _gate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fp8check", "gate", "--layers", "1",
                           "--contract", "gmm-fp8", "--framework", "numpy",
                           "--out-dtypes", "f32", "--json", "g.json", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("isolate", [True, False])
def test_a_kernels_warning_is_recorded_on_its_result_not_printed(tmp_path: Path,
                                                                 isolate: bool) -> None:
    (tmp_path / "k.py").write_text(KERNEL)
    p = _gate(tmp_path, "--kernel", "k.py:gmm", "--suite", "smoke",
              *(() if isolate else ("--no-isolate",)))
    assert p.returncode == 0, p.stderr
    assert "Warning" not in p.stderr
    doc = read_document(tmp_path / "g.json")
    ran = [r for r in doc["results"] if r["passed"] is not None]
    assert ran
    for r in ran:  # two calls or more (determinism), each raising at two lines
        lines = r["metrics"]["warnings"]
        assert len(lines) == 2, lines
        for w in lines:
            assert w.startswith("RuntimeWarning: overflow encountered in scalar multiply "
                                "(k.py:"), w
            assert int(w.rsplit(" x ", 1)[1]) >= 2, w


@pytest.mark.slow
def test_the_references_expected_conditions_on_non_finite_cases_are_silent(
        tmp_path: Path) -> None:
    """On a case with NaN and Inf inputs (inf x 0 in the references' dequantization and
    float64 products), a kernel that raises nothing has no warnings recorded."""
    (tmp_path / "k.py").write_text(KERNEL.replace("np.float32(3e38) * np.float32(10.0)", ""))
    p = _gate(tmp_path, "--kernel", "k.py:gmm", "--case", NONFINITE)
    assert "Warning" not in p.stderr
    doc = read_document(tmp_path / "g.json")
    (r,) = doc["results"]
    assert r["passed"] is not None
    assert "warnings" not in r["metrics"] or all(
        "references/" not in w for w in r["metrics"]["warnings"]), r["metrics"]["warnings"]
