"""`benchmarks/gate.py`'s accounting of a gate document: the work inside compilers and
interpreters (`outside_work`) is layer 0's results, one run's seconds counted once, plus
layer 1's kernel-call phase, and nothing else (layer 1's references and metrics, layer 2,
layer 3)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gate  # noqa: E402


def _result(layer: int, kernel: str, case: str, seconds: float,
            timing: dict[str, float] | None = None) -> dict:
    return {"layer": layer, "kernel": kernel, "case": case, "seconds": seconds,
            "timing": timing or {}}


def test_outside_work_counts_compiles_once_and_kernel_calls_only():
    doc = {"results": [
        # one layer-0 compile reported for two kernels of a family: counted once
        _result(0, "triton-fp8", "gemm-sm_90a", 2.5),
        _result(0, "triton-fp8-padded", "gemm-sm_90a", 2.5),
        _result(0, "pallas-fp8", "fwd-v7x", 1.25),
        _result(1, "pallas-fp8", "wi-a", 9.0,
                {"reference": 3.0, "kernel": 4.0, "metrics": 2.0}),
        _result(1, "triton-tgmm", "wi-b", 6.5, {"kernel": 6.0, "metrics": 0.5}),
        _result(1, "pallas-quantizer", "q", 0.25),  # no phases: no kernel call counted
        _result(2, "pallas-moe-fp8", "moe", 7.0),
        _result(3, "triton-train-fp8", "markov", 30.0),
    ]}
    assert gate.outside_work(doc) == (2.5 + 1.25, 4.0 + 6.0)


def test_outside_work_of_no_results_is_zero():
    assert gate.outside_work({"results": []}) == (0.0, 0.0)
