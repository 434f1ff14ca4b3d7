"""The gate's result documents: the streaming JSONL log, the final JSON document, JUnit
XML, and the run's environment and tally that the JSON document carries.

JSON document (version 2):
`{"version": 2, "summary": {"passed", "complete", ...}, "environment": {...},
"results": [{"kernel", "layer", "case", "passed", "metrics", "criteria", "failed",
"skipped", "error", "repro", "seconds"}]}` (`CaseResult.to_dict`); `layer` is an integer
0-4, each criterion records its `relation` to its limit.  `passed` is null for a skipped
case.  Version 1 named layer 1 "op" and recorded no relation; `read_json` reads it as
version 2 (relation null).  `summary.complete` is false for a run that stopped before
every planned result was made (then `passed` is false too), with the reason, where
known, in `summary.incomplete`.

The JSONL stream (`JsonlStream`) is the run as it happens, one JSON object a line, each
written and flushed at once, so a crash loses nothing:
`{"event": "start", "planned": N, "environment": {...}}`, then one line per result as it
completes (`CaseResult.to_dict`), then `{"event": "end", "n_results": N}` when the run
finished.  `read_document` reads it as a version-2 document (`parse_stream`), complete
only when the end event is there and the results number the planned count; a cut-short
last line (the run was killed while writing it) is dropped and said in
`summary.incomplete`.  Every reader checks what it reads against
`fp8check.results.schema`.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from fp8check.results import schema
from fp8check.results.model import CaseResult
from fp8check.userfiles import read_text

if TYPE_CHECKING:
    from fp8check.contracts import KernelSpec

RESULTS_VERSION = 2
# The scheme of result identities, (kernel, layer, case) with the case id naming shape,
# data, dtype and seed (layer 0's: target and shape): raised when an id changes meaning,
# so that `fp8check compare` refuses documents whose ids cannot be matched.  Documents
# without `environment.result_ids` were written under scheme 1.
RESULT_IDS = 1
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
    from fp8check.references import bf16_matmul
    from fp8check.references.gmm import PARTIALS

    return {
        "result_ids": RESULT_IDS,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET"),
        "reference_partials": PARTIALS,  # how the e4m3 gmm reference forms partials
        "reference_bf16_matmul": bf16_matmul.STATUS,  # tgmm / dgrad's exact matmul kernel
        "suite": suite, "seed": seed, "profile": profile, "backend_requested": backend,
        "kernels": {s.name: _kernel_entry(s) for s in specs},
        "kernel_load_errors": dict(load_errors),
    }


def _kernel_entry(spec: KernelSpec) -> dict[str, Any]:
    """A kernel's entry in the environment: what it is and the claims it was judged by.
    A quantizer's matmul keys say it claims none of them: accum None, no out_dtypes,
    m_align 1, flushes_subnormals None."""
    from fp8check.contracts import MatmulClaims  # results sit below the contracts

    c = spec.claims
    matmul = c if isinstance(c, MatmulClaims) else None
    return {"contract": spec.contract, "framework": spec.framework, "backend": spec.backend,
            "accum": matmul.accum if matmul else None,
            "out_dtypes": list(matmul.out_dtypes) if matmul else [],
            "m_align": matmul.m_align if matmul else 1, "deterministic": c.deterministic,
            "fidelity_fixes": list(spec.fidelity_fixes),
            "flushes_subnormals": matmul.flushes_subnormals if matmul else None}


def tally(results: list[CaseResult], load_errors: dict[str, str], *,
          complete: bool = True) -> dict[str, Any]:
    """The document's "summary": counts overall and per kernel, failing criteria by name,
    skip reasons by reason.  `complete` is False for a run that stopped before every
    planned result was made (an interrupt, a partial merge).  "passed" is true only for a
    complete run with no failed result, every kernel loaded and at least one result that
    passed: a run whose every result was skipped checked nothing, and does not pass."""
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
        "passed": (complete and total["failed"] == 0 and not load_errors
                   and total["passed"] > 0),
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
    """Append-only JSONL log (module docstring): every line is written and flushed to the
    OS at once.  Its owner writes `start`, one `write` per result, then `end` when the
    run finished; a stream without its end event is an incomplete run."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] = self.path.open("w")
        self.n_results = 0

    def _line(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, allow_nan=False) + "\n")
        self._fh.flush()

    def start(self, env: dict[str, Any], *, planned: int) -> None:
        """The first line: the run's environment and how many results it plans."""
        self._line({"event": "start", "planned": planned, "environment": env})

    def write(self, record: dict[str, Any]) -> None:
        """One result (`CaseResult.to_dict`)."""
        self._line(record)
        self.n_results += 1

    def end(self) -> None:
        """The last line, written only when the run finished."""
        self._line({"event": "end", "n_results": self.n_results})

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


def read_document(path: str | Path) -> dict[str, Any]:
    """The results document at `path`: a JSON document (`read_json`) or, for a .jsonl
    file or one whose first line is a start event, a JSONL stream (`parse_stream`)."""
    text = read_text(path, "a gate results document (.json) or stream (.jsonl)")
    if Path(path).suffix.lower() == ".jsonl" or is_stream(text):
        return parse_stream(text, str(path))
    return parse_json(text, str(path))


def read_json(path: str | Path) -> dict[str, Any]:
    """The JSON results document at `path`, version 1 read as version 2.  ValueError
    (one line naming the file, and the path into the document) when the file is
    missing, not JSON or not a valid results document."""
    return parse_json(read_text(path, "a gate results document"), str(path))


def parse_json(text: str, src: str) -> dict[str, Any]:
    """`read_json` of the text `text` of the file `src`."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{src}: not JSON ({e.msg} at line {e.lineno})") from None
    return parse_document(doc, src)


def parse_document(doc: Any, src: str) -> dict[str, Any]:
    """The parsed JSON `doc` of `src` checked against the schema, version 1 rewritten as
    version 2 and a summary without "complete" (written by a finished run, before the
    key existed) completed.  ValueError (one line) when it is not a results document."""
    if not isinstance(doc, dict) or any(k not in doc for k in _REQUIRED_KEYS):
        raise ValueError(f"{src}: not a gate results document (a JSON object with keys "
                         f"{', '.join(_REQUIRED_KEYS)})")
    if doc["version"] not in _READABLE_VERSIONS or isinstance(doc["version"], bool):
        raise ValueError(f"{src}: results document version {doc['version']!r}; this fp8check "
                         f"reads versions {', '.join(map(str, _READABLE_VERSIONS))}")
    schema.check(doc, schema.DOCUMENT, src)
    doc["summary"].setdefault("complete", True)
    if doc["version"] == 1:
        doc["results"] = [CaseResult.from_dict(r).to_dict() for r in doc["results"]]
        doc["version"] = RESULTS_VERSION
    return doc


def jsonl_records(text: str, src: str) -> tuple[list[tuple[int, Any]], int | None]:
    """The JSON values of the non-blank lines of `text` (the file `src`), each with its
    line number (1-based), and the number of a cut-short last line that was dropped
    (None: none was).  A last line without its newline that is not JSON is cut short (a
    writer killed mid-line); any other line that is not JSON is a ValueError naming
    its line number."""
    lines = text.split("\n")
    records: list[tuple[int, Any]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append((n, json.loads(line)))
        except json.JSONDecodeError as e:
            if n == len(lines):  # the file does not end with a newline
                return records, n
            raise ValueError(f"{src}:{n}: not JSON ({e.msg})") from None
    return records, None


def is_stream(text: str) -> bool:
    """Whether `text` begins like a gate JSONL stream (its first line a start event)."""
    first = text.lstrip().split("\n", 1)[0]
    try:
        head = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(head, dict) and head.get("event") == "start"


def parse_stream(text: str, src: str) -> dict[str, Any]:
    """The gate JSONL stream `text` of the file `src` as a version-2 document (module
    docstring).  ValueError (one line, with the line number) for a line that is not
    JSON or breaks the schema, a stream that does not begin with its start event, or
    lines after its end event."""
    records, cut = jsonl_records(text, src)
    if not records or not (isinstance(records[0][1], dict)
                           and records[0][1].get("event") == "start"):
        raise ValueError(f"{src}: not a gate JSONL stream (its first line must be "
                         f'{{"event": "start", ...}})')
    n0, start = records[0]
    schema.check(start, schema.START_EVENT, f"{src}:{n0}")
    results: list[CaseResult] = []
    end: dict[str, Any] | None = None
    for n, rec in records[1:]:
        where = f"{src}:{n}"
        if end is not None:
            raise ValueError(f"{where}: a line after the end event")
        if isinstance(rec, dict) and rec.get("event") == "end":
            schema.check(rec, schema.END_EVENT, where)
            if rec["n_results"] != len(results):
                raise ValueError(f"{where}: the end event counts {rec['n_results']} results, "
                                 f"the stream has {len(results)}")
            end = rec
            continue
        schema.check(rec, schema.RESULT, where)
        results.append(CaseResult.from_dict(rec))
    env = start["environment"]
    planned = start.get("planned")
    made = f"{len(results)} of {planned} planned" if planned is not None else str(len(results))
    why = []
    if end is None:
        why.append(f"the stream has no end event: the run stopped after {made} results")
    elif planned is not None and len(results) != planned:
        why.append(f"{made} results")
    if cut is not None:
        why.append(f"its cut-short last line {cut} was dropped")
    summary = tally(results, env.get("kernel_load_errors", {}), complete=not why)
    if why:
        summary["incomplete"] = "; ".join(why)
    return document(results, summary, env)


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
    for el in root.iter():  # a kernel's error may hold any character: keep the XML valid
        el.text = _xml_text(el.text) if el.text else el.text
        el.attrib = {k: _xml_text(v) for k, v in el.attrib.items()}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


# the characters XML 1.0 cannot hold (control characters but tab, newline and carriage
# return; lone surrogates; U+FFFE, U+FFFF)
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_text(text: str) -> str:
    """`text` with each character XML cannot hold written as its escape (\\x1b)."""
    return _NOT_XML.sub(lambda m: ascii(m.group())[1:-1], text)
