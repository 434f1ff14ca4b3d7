"""The gate's result documents: the streaming JSONL log, the final JSON document, JUnit
XML, and the run's environment and tally that the JSON document carries.

JSON document (version 2):
`{"version": 2, "summary": {"passed", "complete", ...}, "environment": {...},
"results": [{"kernel", "layer", "case", "passed", "metrics", "criteria", "failed",
"skipped", "error", "repro", "seconds"}]}` (`CaseResult.to_dict`); `layer` is an integer
0-4, each criterion records its `relation` to its limit.  `passed` is null for a skipped
case.  Version 1 named layer 1 "op" and recorded no relation; `read_json` reads it as
version 2 (relation null).  The JSONL stream has one line per result as it completes
(written and flushed at once, so a crash loses nothing) and a first line
`{"event": "start", "environment": ...}`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from fp8check.results.model import CaseResult

if TYPE_CHECKING:
    from fp8check.contracts import KernelSpec

RESULTS_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_REQUIRED_KEYS = ("version", "summary", "environment", "results")
_PACKAGES = ("fp8check", "numpy", "ml_dtypes", "jax", "jaxlib", "torch", "triton",
             "hypothesis", "numba", "scipy")


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages that decide numerics (None when absent)."""
    out: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment(
    specs: Iterable[KernelSpec], *, suite: str, seed: int, profile: str, backend: str,
    load_errors: dict[str, str],
) -> dict[str, Any]:
    """What a reader needs to reproduce the run: versions, per-kernel backend and the
    interpreter fidelity fixes that were active, suite, seed, profile."""
    from fp8check.references.gmm import PARTIALS

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET"),
        "reference_partials": PARTIALS,  # how the e4m3 gmm reference forms partials
        "suite": suite, "seed": seed, "profile": profile, "backend_requested": backend,
        "kernels": {
            s.name: {"contract": s.contract, "framework": s.framework, "backend": s.backend,
                     "accum": s.accum, "out_dtypes": list(s.out_dtypes), "m_align": s.m_align,
                     "deterministic": s.deterministic, "fidelity_fixes": list(s.fidelity_fixes)}
            for s in specs
        },
        "kernel_load_errors": dict(load_errors),
    }


def tally(results: list[CaseResult], load_errors: dict[str, str], *,
          complete: bool = True) -> dict[str, Any]:
    """The document's "summary": counts overall and per kernel, failing criteria by name,
    skip reasons by reason.  `complete` is False for a run that stopped before every
    planned result was made (an interrupt, a partial merge).  "passed" is true only for a
    complete run with no failed result and every kernel loaded."""
    per_kernel: dict[str, Counter] = {}
    failed_criteria: Counter = Counter()
    skip_reasons: Counter = Counter()
    for r in results:
        c = per_kernel.setdefault(r.kernel, Counter())
        status = "skipped" if r.passed is None else ("passed" if r.passed else "failed")
        c[status] += 1
        if r.error:
            c["errors"] += 1
            failed_criteria["error"] += 1
        failed_criteria.update(r.failed_criteria)
        if r.skipped:
            skip_reasons[f"{r.kernel}: {r.skipped}"] += 1
    total: Counter = Counter()
    for c in per_kernel.values():
        total.update(c)
    return {
        "passed": complete and total["failed"] == 0 and not load_errors,
        "complete": complete,
        "n_results": len(results),
        "n_passed": total["passed"], "n_failed": total["failed"],
        "n_skipped": total["skipped"], "n_errors": total["errors"],
        "kernels": {k: dict(v) for k, v in per_kernel.items()},
        "failed_criteria": dict(failed_criteria),
        "skipped_reasons": dict(skip_reasons),
        "kernel_load_errors": dict(load_errors),
    }


class JsonlStream:
    """Append-only JSONL log: every `write` is one line, flushed to the OS at once."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = self.path.open("w")

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, allow_nan=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> JsonlStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def document(
    results: list[CaseResult], summary: dict[str, Any], env: dict[str, Any]
) -> dict[str, Any]:
    """The JSON document (module docstring) of `results`."""
    return {"version": RESULTS_VERSION, "summary": summary, "environment": env,
            "results": [r.to_dict() for r in results]}


def results_of(doc: dict[str, Any]) -> list[CaseResult]:
    """The CaseResults of a document read by `read_json`."""
    return [CaseResult.from_dict(r) for r in doc["results"]]


def read_json(path: str | Path) -> dict[str, Any]:
    """The results document at `path`, version 1 read as version 2.  ValueError (one
    line) when the file is missing, not JSON, or not a results document."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"results file {str(p)!r} does not exist")
    try:
        doc = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not JSON ({e.msg} at line {e.lineno})") from e
    if not isinstance(doc, dict) or any(k not in doc for k in _REQUIRED_KEYS):
        raise ValueError(f"{p}: not a gate results document (needs keys "
                         f"{', '.join(_REQUIRED_KEYS)}; a .jsonl stream is not one)")
    if doc["version"] not in _READABLE_VERSIONS:
        raise ValueError(f"{p}: results document version {doc['version']!r}; this fp8check "
                         f"reads versions {', '.join(map(str, _READABLE_VERSIONS))}")
    # Documents written before "complete" existed were written only by finished runs.
    if isinstance(doc["summary"], dict):
        doc["summary"].setdefault("complete", True)
    if doc["version"] == 1:
        doc["results"] = [CaseResult.from_dict(r).to_dict() for r in doc["results"]]
        doc["version"] = RESULTS_VERSION
    return doc


def write_json(path: str | Path, doc: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")


def write_junit(path: str | Path, results: list[CaseResult]) -> None:
    """One <testsuite> per kernel, one <testcase> per (layer, case); a failure's message
    names the failed criteria, its text holds the repro command."""
    root = ET.Element("testsuites", name="fp8check")
    by_kernel: dict[str, list[CaseResult]] = {}
    for r in results:
        by_kernel.setdefault(r.kernel, []).append(r)
    for kernel, rs in by_kernel.items():
        suite = ET.SubElement(
            root, "testsuite", name=kernel, tests=str(len(rs)),
            failures=str(sum(1 for r in rs if r.passed is False and not r.error)),
            errors=str(sum(1 for r in rs if r.error)),
            skipped=str(sum(1 for r in rs if r.passed is None)),
            time=f"{sum(r.seconds for r in rs):.3f}",
        )
        for r in rs:
            tc = ET.SubElement(suite, "testcase", classname=f"{kernel}.layer{r.layer}",
                               name=r.case, time=f"{r.seconds:.3f}")
            if r.passed is None:
                ET.SubElement(tc, "skipped", message=r.skipped or "")
            elif r.error:
                el = ET.SubElement(tc, "error", message=r.error)
                el.text = r.repro or ""
            elif not r.passed:
                el = ET.SubElement(tc, "failure", message="failed: " + ", ".join(r.failed_criteria))
                el.text = r.repro or ""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
