"""`fp8check compare BASE HEAD`: what moved between two complete gate runs of the same
suite, seed, profile and package versions (JSON documents or JSONL streams; shards merged
first with `fp8check merge`), judged against each criterion's drift in the limits table
(`fp8check.profiles.DRIFT`; `fp8check.results.compare` says what counts).

Exit 0 when nothing regressed, 1 when something did (a criterion moved toward its limit by
more than its drift, a verdict got worse, a result disappeared or is now skipped), 2 for
bad input (a document that is not a results document, an incomplete run, a shard, runs
that differ in suite, seed, profile, package versions or result-id scheme: one line
naming what differs, nothing written).  HEAD's own failures are not regressions unless
they are new: `fp8check gate` is what fails a failing run.
"""

from __future__ import annotations

import argparse

from fp8check.commands import add_summary_args
from fp8check.errors import usage_errors
from fp8check.results import documents
from fp8check.results.compare import compare
from fp8check.userfiles import check_output


def run(args: argparse.Namespace) -> int:
    from fp8check.reports.outputs import write_outputs

    with usage_errors():
        for option, flag in (("json", "--json"), ("report", "--report"),
                             ("summary_md", "--summary-md")):
            if getattr(args, option):
                check_output(getattr(args, option), flag)
        base = documents.read_document(args.base)
        head = documents.read_document(args.head)
        cmp = compare(base, head, args.base, args.head)
    if args.json:
        documents.write_json(args.json, cmp.to_dict())
    write_outputs(head, report=args.report, summary_md=args.summary_md,
                  report_url=args.report_url, comparison=cmp)
    print(f"fp8check compare: {cmp.text()}")
    return 1 if cmp.regressed else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("compare", help="what moved between two gate runs (a baseline "
                                              "and a new run): exit 1 on a regression",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base", help="the baseline run's JSON document or JSONL stream")
    p.add_argument("head", help="the new run's JSON document or JSONL stream")
    p.add_argument("--json", help="write the comparison (every move) as JSON here")
    p.add_argument("--report", help="write HEAD's HTML report here, with the regression view")
    add_summary_args(p)
    p.set_defaults(func=run)
