"""`fp8check merge A.json B.json ... -o merged.json`: join the JSON documents of gate shards
(`fp8check gate --shard i/n`) into one result, one JUnit file and one report.

The shards must come from the same suite, seed, profile and layers (else bad input); a
(kernel, layer, case) present in two shards is an error too, since the shards of one run
are disjoint.  The merged summary is recomputed from the results.
"""

from __future__ import annotations

import argparse

from fp8check.errors import usage_errors
from fp8check.results import CaseResult, documents

_SAME = ("suite", "seed", "profile", "layers")


def merge_documents(docs: list[dict]) -> dict:
    """One results document from shard documents (see the module docstring)."""
    if not docs:
        raise ValueError("merge needs at least one results document")
    env = dict(docs[0]["environment"])
    for d in docs[1:]:
        for key in _SAME:
            if d["environment"].get(key) != env.get(key):
                raise ValueError(f"shards disagree on {key}: {env.get(key)!r} vs "
                                 f"{d['environment'].get(key)!r}")
        env.setdefault("kernels", {}).update(d["environment"].get("kernels", {}))
        env.setdefault("load_errors", {}).update(d["environment"].get("load_errors", {}))
    seen, merged = set(), []
    for d in docs:
        for r in d["results"]:
            ident = (r["kernel"], r["layer"], r["case"])
            if ident in seen:
                raise ValueError(f"result {ident} appears in two shards")
            seen.add(ident)
            merged.append(CaseResult.from_dict(r))
    env["shard"] = f"merged from {len(docs)} documents"
    summary = documents.tally(merged, env.get("load_errors", {}))
    return documents.document(merged, summary, env)


def run(args: argparse.Namespace) -> int:
    with usage_errors():
        doc = merge_documents([documents.read_json(p) for p in args.inputs])
    documents.write_json(args.output, doc)
    if args.junit:
        documents.write_junit(args.junit, documents.results_of(doc))
    if args.report:
        from fp8check.reports.html import write_html

        write_html(args.report, doc, workers=None)
    s = doc["summary"]
    print(f"fp8check merge: {len(args.inputs)} documents, {s['n_passed']} passed, "
          f"{s['n_failed']} failed, {s['n_skipped']} skipped")
    return 0 if s["passed"] else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("merge", help="join gate shards' JSON into one result and report")
    p.add_argument("inputs", nargs="+", help="results JSON documents of the shards")
    p.add_argument("-o", "--output", required=True, help="merged JSON document")
    p.add_argument("--junit", help="also write merged JUnit XML here")
    p.add_argument("--report", help="also write the merged HTML report here")
    p.set_defaults(func=run)
