"""`fp8check report results.json -o report.html`: rebuild the HTML report from the gate's
JSON document (`fp8check gate --json`), e.g. on another machine or after a merge."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

REQUIRED_KEYS = ("summary", "environment", "results")


def load_document(path: str | Path) -> dict:
    """The gate's JSON document at `path`; ValueError (one line) when it is missing, not
    JSON, or lacks the document's top-level keys."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"results file {str(p)!r} does not exist")
    try:
        doc = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not JSON ({e.msg} at line {e.lineno})") from e
    if not isinstance(doc, dict) or any(k not in doc for k in REQUIRED_KEYS):
        raise ValueError(f"{p}: not a gate results document (needs keys "
                         f"{', '.join(REQUIRED_KEYS)}; a .jsonl stream is not one)")
    return doc


def run(args: argparse.Namespace) -> int:
    from fp8check.reports.html import write_html

    doc = load_document(args.results)
    write_html(args.output, doc, workers=None)
    print(f"fp8check report: {len(doc['results'])} results -> {args.output}")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help="build the HTML report from a gate JSON document")
    p.add_argument("results", help="JSON document written by `fp8check gate --json`")
    p.add_argument("-o", "--output", required=True, help="HTML file to write")
    p.set_defaults(func=run)
