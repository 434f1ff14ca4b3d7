"""`fp8check report results.json -o report.html`: rebuild the HTML report from the gate's
JSON document (`fp8check gate --json`), e.g. on another machine or after a merge."""

from __future__ import annotations

import argparse

from fp8check.errors import usage_errors
from fp8check.results import read_json


def run(args: argparse.Namespace) -> int:
    from fp8check.reports.html import write_html

    with usage_errors():
        doc = read_json(args.results)
    write_html(args.output, doc, workers=None)
    print(f"fp8check report: {len(doc['results'])} results -> {args.output}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="build the HTML report from a gate JSON document")
    p.add_argument("results", help="JSON document written by `fp8check gate --json`")
    p.add_argument("-o", "--output", required=True, help="HTML file to write")
    p.set_defaults(func=run)
