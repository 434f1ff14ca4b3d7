"""`fp8check report results.json -o report.html`: rebuild the HTML report from the gate's
JSON document (`fp8check gate --json`) or its JSONL stream (`--jsonl`, also of a run that
stopped early: the report says it is incomplete), e.g. on another machine or after a
merge.  Exit 0 when the report was written, 2 for bad input."""

from __future__ import annotations

import argparse
import sys

from fp8check.errors import usage_errors
from fp8check.results import read_document
from fp8check.userfiles import check_output


def run(args: argparse.Namespace) -> int:
    from fp8check.reports.html import write_html

    with usage_errors():
        check_output(args.output, "-o")
        doc = read_document(args.results)
    write_html(args.output, doc, workers=None)
    s = doc["summary"]
    if not s["complete"]:
        print(f"fp8check report: {args.results} is incomplete: "
              f"{s.get('incomplete', 'a run that stopped early')}", file=sys.stderr)
    print(f"fp8check report: {len(doc['results'])} results -> {args.output}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("report", help="build the HTML report from a gate JSON document "
                                             "or JSONL stream")
    p.add_argument("results", help="JSON document (`fp8check gate --json`) or JSONL stream")
    p.add_argument("-o", "--output", required=True, help="HTML file to write")
    p.set_defaults(func=run)
