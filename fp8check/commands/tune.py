"""`fp8check tune`: accuracy-gated evolutionary search of the Pallas FP8 kernel's tilings.

    fp8check tune --kernel pallas-fp8 --shape dev --rounds 3 --population 4 \\
        --json tune.json --report tune.html --emit tilings.json

Prints a table per round, the strict check of the finalists and a snippet with the best
per-phase tilings; `--json` writes a results document (the finalists' strict results as
`results`, the search under `"tune"`, see `fp8check.tune.output`), `--report` its HTML,
`--emit` `{"fwd": [tm, tk, tn], "tgmm": [...], "dgrad": [...]}`.  Every candidate is first
compiled for `--chip` without a TPU (`fp8check.tune.native`): one that does not compile, or
needs more VMEM than the chip has, is rejected with the compiler's reason; the finalists
show their compiled VMEM and LLO op counts beside the cost model.  Exit status 0 when every
phase has a tiling that passed strict, 1 when one has none, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from fp8check import registry
from fp8check.errors import UsageError, usage_errors
from fp8check.kernels.pallas.tiling import PHASES, Tiling
from fp8check.results import documents
from fp8check.targets.chips import tpu_targets
from fp8check.tune.accuracy import AccuracyChecker, PallasKernels, proxy_note
from fp8check.tune.cost_model import FITNESS_LABEL
from fp8check.tune.measure import (
    MEASURED_LABEL,
    measure_us,
    native_available,
    require_native,
)
from fp8check.tune.native import NativeCheck
from fp8check.tune.output import finalists_table, round_table, snippet, tune_section
from fp8check.tune.search import TilingSearch
from fp8check.tune.shapes import NAMED_SHAPES, parse_shape
from fp8check.userfiles import check_output

KERNELS = ("pallas-fp8",)
_START_TILING = re.compile(r"^(fwd|tgmm|dgrad)=(\d+)x(\d+)x(\d+)$")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("tune", help="accuracy-gated tiling search (Pallas FP8 GMM)",
                              description=__doc__.splitlines()[0])
    p.add_argument("--kernel", default="pallas-fp8", help=f"one of {', '.join(KERNELS)}")
    p.add_argument("--shape", default="dev",
                   help=f"{'|'.join(NAMED_SHAPES)} or M=..,K=..,N=..,G=.. (default dev)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--population", type=int, default=4,
                   help="survivors kept, and new runnable tilings per round, per phase")
    p.add_argument("--finalists", type=int, default=2, help="per phase, checked with strict")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--phases", default=",".join(PHASES), help="comma list (default all)")
    p.add_argument("--fitness", choices=("auto", "model", "measured"), default="auto",
                   help="auto: measured on a TPU, the cost model elsewhere")
    p.add_argument("--backend", choices=registry.BACKENDS, default="auto",
                   help="where the accuracy checks run")
    p.add_argument("--chip", default="v5e", help="TPU chip every candidate must compile for "
                   f"(deviceless, libtpu): {', '.join(t.name for t in tpu_targets())} "
                   "(default v5e)")
    p.add_argument("--start", action="append", default=[], metavar="PHASE=TMxTKxTN",
                   help="extra round-0 tiling (repeatable)")
    p.add_argument("--json", help="write the results document here")
    p.add_argument("--report", help="write the HTML report here")
    p.add_argument("--emit", help="write the best tilings as JSON here")
    p.set_defaults(func=run)


def _start_tilings(items: list[str]) -> dict[str, list[Tiling]]:
    starts: dict[str, list[Tiling]] = {}
    for item in items:
        m = _START_TILING.match(item)
        if m is None:
            raise ValueError(f"--start {item!r}: expected PHASE=TMxTKxTN, e.g. fwd=256x1024x512")
        starts.setdefault(m.group(1), []).append(Tiling(*map(int, m.groups()[1:])))
    return starts


def run(args: argparse.Namespace) -> int:
    if args.kernel not in KERNELS:
        raise UsageError(f"--kernel {args.kernel!r}: the search supports {', '.join(KERNELS)}")
    with usage_errors():
        for option in ("json", "report", "emit"):
            if getattr(args, option):
                check_output(getattr(args, option), f"--{option}")
        shape = parse_shape(args.shape)
        phases = tuple(p.strip() for p in args.phases.split(",") if p.strip())
        measured = args.fitness == "measured" or (args.fitness == "auto" and native_available())
        if measured:
            require_native()
        kernels = PallasKernels(args.backend)
        starts = _start_tilings(args.start)
        native_check = NativeCheck(shape, args.chip)
    checker = AccuracyChecker(shape, kernels)
    label = MEASURED_LABEL if measured else FITNESS_LABEL
    print(f"fp8check tune: {args.kernel} at {shape.label()}, phases {','.join(phases)}, "
          f"seed {args.seed}, fitness: {label}")
    print(f"  {proxy_note(shape)}")
    with usage_errors():  # the search's own argument checks
        search = TilingSearch(
            shape, checker, rounds=args.rounds, population=args.population, seed=args.seed,
            finalists=args.finalists, phases=phases, fitness_label=label,
            fitness=(lambda ph, t: measure_us(ph, t, shape)) if measured else None,
            extra_starts=starts, native_check=native_check,
            on_round=lambda r, states: print(round_table(r, states, label), flush=True))
    try:
        res = search.run()
    except registry.KernelLoadError as e:
        raise UsageError(f"kernel {e}") from e
    print(finalists_table(res))
    print(snippet(res))
    best = {ph: None if s.best is None else list(s.best.tiling) for ph, s in res.phases.items()}
    strict = [r for s in res.phases.values() for c in s.finalists if c.strict is not None
              for r in c.strict.results]
    env = documents.environment(kernels.loaded, suite="tune", seed=args.seed,
                              profile="explore (search), strict (finalists)",
                              backend=args.backend, load_errors={})
    doc = documents.document(strict, documents.tally(strict, {}), env)
    doc["tune"] = tune_section(res)
    if args.json:
        documents.write_json(args.json, doc)
    if args.report:
        from fp8check.reports.html import write_html

        write_html(args.report, doc, workers=None)
    if args.emit:
        Path(args.emit).write_text(json.dumps(best) + "\n")
    missing = [ph for ph, t in best.items() if t is None]
    if missing:
        print(f"fp8check tune: no tiling passed strict for {', '.join(missing)}",
              file=sys.stderr)
        return 1
    return 0
