"""`fp8check merge A.json B.json ... -o merged.json`: join the documents of gate shards
(`fp8check gate --shard i/n`: JSON documents or JSONL streams) into one result, one JUnit
file and one report.

The inputs must be one run: every shard i/n present exactly once, and the same shard
count, suite, seed, profile, layers, kernels and package versions; otherwise bad input
(exit 2) naming what is missing or mismatched.  `--allow-partial` merges without the
missing shards and marks the result incomplete.  An incomplete input (a run that stopped
early) makes the merge incomplete, and an incomplete merge never passes (exit 1).  A
(kernel, layer, case) present in two inputs is bad input too.  The merged summary is
recomputed from the results; the merged document records `shard` "1/1" (the whole run)
or, when partial, the shards it has ("1,3/4"), and `merged_from`, the inputs' names.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from fp8check.commands import add_summary_args
from fp8check.errors import usage_errors
from fp8check.results import CaseResult, documents
from fp8check.userfiles import check_output

# environment keys that must be the same in every shard (besides kernels and packages)
_SAME = ("suite", "seed", "profile", "layers")

Named = tuple[str, dict[str, Any]]


def parse_shards(text: Any, src: str) -> tuple[set[int], int]:
    """An environment's `shard`, "i/n" or "i,j,.../n", as (indices, n).  ValueError
    (naming `src`) when it is missing or malformed."""
    if text is None:
        raise ValueError(f"{src}: records no shard (environment.shard); not a gate run's "
                         f"document")
    try:
        idx, n_text = str(text).split("/")
        n = int(n_text)
        indices = {int(i) for i in idx.split(",")}
    except ValueError:
        raise ValueError(f"{src}: environment.shard {text!r} is not a shard i/n") from None
    if not all(1 <= i <= n for i in indices):
        raise ValueError(f"{src}: environment.shard {text!r} is not a shard i/n")
    return indices, n


def _kernel_names(env: dict[str, Any]) -> str:
    """The kernels a shard ran or tried to load, as one comparable string."""
    return ", ".join(sorted({*env["kernels"], *env.get("kernel_load_errors", {})})) or "none"


def _check_same_run(named: list[Named]) -> None:
    """ValueError naming the first setting in which an input differs from the first."""
    (first, d0), rest = named[0], named[1:]
    e0 = d0["environment"]
    for src, d in rest:
        e = d["environment"]
        facts = [(f"{key} differs", e0.get(key), e.get(key)) for key in _SAME]
        facts.append(("kernels differ", _kernel_names(e0), _kernel_names(e)))
        for pkg in sorted({*e0["packages"], *e["packages"]}):
            facts.append((f"{pkg} version differs", e0["packages"].get(pkg),
                          e["packages"].get(pkg)))
        for what, a, b in facts:
            if a != b:
                raise ValueError(f"{what}: {a} in {first}, {b} in {src}")


def _shard_coverage(named: list[Named]) -> tuple[list[int], int]:
    """The shard indices present and the shard count n; ValueError when the inputs
    disagree on n or a shard appears twice."""
    owner: dict[int, str] = {}
    n0 = None
    for src, d in named:
        indices, n = parse_shards(d["environment"].get("shard"), src)
        if n0 is None:
            n0 = n
        elif n != n0:
            raise ValueError(f"shard count differs: {n0} in {named[0][0]}, {n} in {src}")
        for i in sorted(indices):
            if i in owner:
                raise ValueError(f"shard {i} appears in {owner[i]} and {src}")
            owner[i] = src
    assert n0 is not None
    return sorted(owner), n0


def merge_documents(named: list[Named], *, allow_partial: bool = False) -> dict[str, Any]:
    """One results document from the shards' documents, each with its name for messages
    (module docstring).  ValueError (one line) when they are not one complete run;
    with `allow_partial`, missing shards make the result incomplete instead."""
    if not named:
        raise ValueError("merge needs at least one results document")
    _check_same_run(named)
    present, n = _shard_coverage(named)
    missing = [f"{i}/{n}" for i in range(1, n + 1) if i not in present]
    why = []
    if missing:
        what = f"shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing"
        if not allow_partial:
            raise ValueError(f"{what} (--allow-partial merges without them)")
        why.append(what)
    why += [f"{src} is incomplete ({d['summary'].get('incomplete', 'a run that stopped early')})"
            for src, d in named if not d["summary"]["complete"]]
    env = dict(named[0][1]["environment"])
    env["kernels"], env["kernel_load_errors"] = {}, {}
    owner: dict[tuple[Any, ...], str] = {}
    merged = []
    for src, d in named:
        env["kernels"].update(d["environment"]["kernels"])
        env["kernel_load_errors"].update(d["environment"].get("kernel_load_errors", {}))
        for r in d["results"]:
            ident = (r["kernel"], r["layer"], r["case"])
            if ident in owner:
                raise ValueError(f"result {r['kernel']} layer {r['layer']} {r['case']} "
                                 f"appears in {owner[ident]} and {src}")
            owner[ident] = src
            merged.append(CaseResult.from_dict(r))
    env["shard"] = "1/1" if not missing else f"{','.join(map(str, present))}/{n}"
    env["merged_from"] = [src for src, _ in named]
    summary = documents.tally(merged, env["kernel_load_errors"], complete=not why)
    if why:
        summary["incomplete"] = "; ".join(why)
    return documents.document(merged, summary, env)


def run(args: argparse.Namespace) -> int:
    from fp8check.reports.outputs import write_outputs

    with usage_errors():
        for option, flag in (("output", "-o"), ("junit", "--junit"), ("report", "--report"),
                             ("summary_md", "--summary-md")):
            if getattr(args, option):
                check_output(getattr(args, option), flag)
        doc = merge_documents([(p, documents.read_document(p)) for p in args.inputs],
                              allow_partial=args.allow_partial)
    write_outputs(doc, json=args.output, junit=args.junit, report=args.report,
                  summary_md=args.summary_md, report_url=args.report_url)
    s = doc["summary"]
    if not s["complete"]:
        print(f"fp8check merge: incomplete: {s['incomplete']}", file=sys.stderr)
    print(f"fp8check merge: {len(args.inputs)} documents, {s['n_passed']} passed, "
          f"{s['n_failed']} failed, {s['n_skipped']} skipped"
          f"{'' if s['complete'] else ' (incomplete: FAIL)'}")
    return 0 if s["passed"] else 1


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("merge", help="join gate shards' documents into one result "
                                            "and report", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("inputs", nargs="+", help="the shards' JSON documents or JSONL streams")
    p.add_argument("-o", "--output", required=True, help="merged JSON document")
    p.add_argument("--junit", help="also write merged JUnit XML here")
    p.add_argument("--report", help="also write the merged HTML report here")
    add_summary_args(p)
    p.add_argument("--allow-partial", action="store_true",
                   help="merge even when shards are missing; the result is incomplete "
                        "and never passes")
    p.set_defaults(func=run)
