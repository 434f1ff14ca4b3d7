"""`fp8check curves A B`: layer 4, loss curves of runs made elsewhere.

A is the candidate (FP8), B the baseline (BF16): loss logs as real stacks write them
(Megatron-LM, MaxText and torchtitan console logs, MaxText's metrics file, W&B CSV exports,
TensorBoard event files), CSV or JSONL step/loss logs, or a gate result file with a
selector (`gate.json@pallas/fp8`); the format is detected from the content.  Steps are
compared where both logs have them; steps only one log has are counted and reported.
The metrics and limits are layer 3's (`fp8check.measures.curves`).  Exit 0 within the profile's
limits, 1 when a gap exceeds them or the candidate diverges, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fp8check.errors import usage_errors
from fp8check.logs import FORMATS, LogOptions
from fp8check.measures.curves import compare, get_limits, load_curve
from fp8check.results.model import jsonable
from fp8check.userfiles import check_output


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "curves", help="compare two loss curves (layer 4): candidate A vs baseline B",
        description=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("candidate", metavar="A", help="candidate (FP8) loss log or FILE@SELECTOR")
    p.add_argument("baseline", metavar="B", help="baseline (BF16) loss log or FILE@SELECTOR")
    p.add_argument("--label", nargs=2, metavar=("LABEL_A", "LABEL_B"),
                   help="names of A and B in the output (default: the arguments)")
    p.add_argument("--profile", default="strict", help="tolerance profile (strict, explore)")
    p.add_argument("--format", choices=list(FORMATS), help="read both logs as this format "
                   "(default: detected from each log's content)")
    p.add_argument("--step-key", help="the step column / key / field of both logs")
    p.add_argument("--loss-key", help="the loss column / key / field / TensorBoard tag")
    p.add_argument("--run", nargs=2, metavar=("RUN_A", "RUN_B"),
                   help="the runs of A and B in W&B panel exports that hold several")
    p.add_argument("--json", metavar="OUT", help="write the metrics and checks as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    la, lb = args.label or (args.candidate, args.baseline)
    with usage_errors():
        if args.json:
            check_output(args.json, "--json")
        limits = get_limits(args.profile)
        run_a, run_b = args.run or (None, None)
        cand, base = (load_curve(spec, label, LogOptions(args.format, args.step_key,
                                                         args.loss_key, run))
                      for spec, label, run in ((args.candidate, la, run_a),
                                               (args.baseline, lb, run_b)))
        cmp = compare(cand, base, limits)  # two curves with no common step are bad input
    m = cmp.metrics
    print(f"fp8check curves: {la} vs {lb} (profile {args.profile}): "
          f"{m['steps_compared']} common steps {m['first_step']}..{m['last_step']}")
    if m["only_candidate_steps"] or m["only_baseline_steps"]:
        print(f"  steps not compared: {len(m['only_candidate_steps'])} only in {la}, "
              f"{len(m['only_baseline_steps'])} only in {lb}")
    for note in m["notes"]:
        print(f"  note: {note}")
    for c in cmp.criteria:
        if c.name == "finite":
            shown = "all finite" if c.passed else f"non-finite from step {c.value}"
        elif c.name == "new_spikes":
            shown = f"{c.value} {m['new_spikes']}"
        elif c.name == "max_abs_gap_ema":  # counted only where beyond the gap's noise
            shown = (f"{c.value:.4%} beyond noise (limit {c.limit:.2%}; largest "
                     f"|EMA gap| {m['max_abs_gap_ema']:.4%})")
        else:  # the relative gaps
            shown = f"{c.value:+.4%} (limit |.| <= {c.limit:.2%})"
        print(f"  {'ok  ' if c.passed else 'FAIL'} {c.name}: {shown}")
    if args.json:
        doc = {"candidate": args.candidate, "baseline": args.baseline, "labels": [la, lb],
               "profile": args.profile, "passed": cmp.passed, "metrics": m,
               "criteria": {c.name: c.to_dict() for c in cmp.criteria}}
        Path(args.json).write_text(json.dumps(jsonable(doc), indent=1))
    print(f"fp8check curves: {'PASS' if cmp.passed else 'FAIL'}")
    return 0 if cmp.passed else 1
