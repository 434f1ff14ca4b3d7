"""`fp8check gate`: the accuracy gate (`fp8check.gate`)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from fp8check import exitcodes, registry
from fp8check.commands import add_summary_args
from fp8check.config import DEFAULT_TIMEOUT
from fp8check.contracts import ACCUMS, CONTRACT_DOC, CONTRACTS, FRAMEWORKS, OUT_DTYPES
from fp8check.gate.declarations import BareDeclarations
from fp8check.gate.plan import GateOptions
from fp8check.inputs import cases as cases_mod
from fp8check.profiles import PROFILES
from fp8check.references.gmm import PROMOTION_INTERVALS
from fp8check.references.quant import RECIPES
from fp8check.targets.chips import TARGETS

DESCRIPTION = f"""Run the accuracy gate on kernels: the built-in ones (by name or family, see
`fp8check list`) or your own, named FILE.py:NAME or module:NAME.  NAME is a KernelSpec, or
a bare function declared by the flags below (at least --contract and --framework).  The
kernel contract (each contract's call, argument layouts and dtypes per framework,
out_dtype, what is compared, an example per framework): {CONTRACT_DOC}."""


def register(subparsers: argparse._SubParsersAction) -> None:
    g = subparsers.add_parser("gate", help="run the accuracy gate", description=DESCRIPTION,
                              epilog=exitcodes.HELP,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("--kernel", action="append", default=None,
                   help="built-in name, family, module:attr or file.py:attr (repeatable; "
                        "default: every built-in kernel)")
    g.add_argument("--contract", choices=CONTRACTS, help="contract of a bare function")
    g.add_argument("--framework", choices=FRAMEWORKS, help="framework of a bare function")
    g.add_argument("--accum", help=f"accumulation recipe a bare gmm-fp8 function follows bit "
                                   f"for bit: one of {', '.join(ACCUMS)} (default: none, "
                                   f"checked against the error bound only)")
    g.add_argument("--out-dtypes", help=f"comma list of the output dtypes "
                                        f"({', '.join(OUT_DTYPES)}) a bare function "
                                        f"supports (default: all; the suite's cases of the "
                                        f"others are skipped)")
    g.add_argument("--m-align", type=int, help="group-size alignment a bare function needs")
    g.add_argument("--hopper-interval", type=int, metavar="K",
                   help=f"with --accum deepgemm-hopper: the tensor core's promotion interval "
                        f"in K elements (Triton's max_num_imprecise_acc: "
                        f"{', '.join(map(str, PROMOTION_INTERVALS))}; default 128)")
    g.add_argument("--recipe", help=f"a bare quantizer's recipe: one of {', '.join(RECIPES)} "
                                    f"(required with --contract quantizer)")
    g.add_argument("--block", help="a bare quantizer's block: 1x128, 128x1 or 128x128 "
                                   "(default 1x128)")
    g.add_argument("--fmt", help="a bare quantizer's fp8 format: e4m3fn or e5m2 "
                                 "(default e4m3fn)")
    g.add_argument("--division-ulps", type=int, metavar="N",
                   help="a bare quantizer divides approximately (Triton's `/`): each "
                        "division within N float32 ulps of the exact quotient; its scales "
                        "are then checked within that of the recipe's and its values "
                        "against its own scales (default 0: the recipe's bits; "
                        "docs/contract.md)")
    g.add_argument("--ftz", action=argparse.BooleanOptionalAction, default=None,
                   help="a bare function flushes float32 subnormals to zero (FTZ/DAZ): the "
                        "bound gains the flush term and outputs below 2^-126 are not checked "
                        "precisely (default: yes for --framework jax, no for numpy and torch)")
    g.add_argument("--tgmm", metavar="FILE.py:NAME",
                   help="layers 2-3: your weight-gradient kernel (x, dy, group_sizes) -> dW, "
                        "the backward of the MoE layer built around --kernel (default: "
                        "fp8check's bf16 reference; docs/layers-for-your-kernel.md)")
    g.add_argument("--dgrad", metavar="FILE.py:NAME",
                   help="layers 2-3: your input-gradient kernel (dy, w, group_sizes) -> dX "
                        "(default: fp8check's bf16 reference)")
    g.add_argument("--suite", choices=cases_mod.SUITES)
    g.add_argument("--profile", help=f"one of {', '.join(PROFILES)} (never off)")
    g.add_argument("--layers", help="comma list of layers to run (e.g. 1,2)")
    g.add_argument("--seed", type=int)
    g.add_argument("--backend", choices=registry.BACKENDS)
    g.add_argument("--targets", help=f"layer 0: comma list of {', '.join(TARGETS)} "
                                     "(default: all)")
    g.add_argument("--case", action="append", default=None, help="run only this case id")
    g.add_argument("--json", help="write the JSON results document here")
    g.add_argument("--jsonl", help="stream results here (default: beside --json, or "
                                   "./fp8check-out/gate.jsonl)")
    g.add_argument("--junit", help="write JUnit XML here")
    g.add_argument("--report", help="write the HTML report here")
    g.add_argument("--baseline", metavar="BASE.json",
                   help="compare this run with an earlier whole run of the same suite, "
                        "seed, profile and package versions, as `fp8check compare` does: a "
                        "regression fails the gate (exit 1), and the report and summary "
                        "show what moved")
    add_summary_args(g)
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--shard", help="run only shard i of n (i/n, 1-based): case k of layers "
                                   "1-2 (family k of layers 0 and 3) goes to shard k mod n + "
                                   "1; join with `fp8check merge`")
    g.add_argument("--jobs", type=int, default=1,
                   help="worker processes, each with N-th of the cores' threads (what "
                        "depends on the thread count, such as a kernel's BLAS sums, can "
                        "differ in its bits, as on a machine with fewer cores); layers 0, 2 "
                        "and 3 start first, results are written in the serial order")
    g.add_argument("--timeout", type=float, help=f"seconds one result may take before its "
                   f"worker is killed and the result is an error (default "
                   f"{DEFAULT_TIMEOUT:.0f}; [tool.fp8check] timeout)")
    g.add_argument("--no-isolate", dest="isolate", action="store_false", default=None,
                   help="run kernels in this process, for debugging: a kernel that exits or "
                        "crashes then ends the gate and --timeout is not enforced "
                        "([tool.fp8check] isolate = false)")
    g.set_defaults(func=run)


def options(args: argparse.Namespace) -> GateOptions:
    """The parsed command line as GateOptions."""
    return GateOptions(
        kernels=tuple(args.kernel or ()),
        bare=BareDeclarations(**{f.name: getattr(args, f.name)
                                   for f in dataclasses.fields(BareDeclarations)}),
        suite=args.suite, profile=args.profile, layers=args.layers, seed=args.seed,
        backend=args.backend, targets=args.targets, cases=tuple(args.case or ()),
        json=args.json, jsonl=args.jsonl, junit=args.junit, report=args.report,
        summary_md=args.summary_md, report_url=args.report_url, baseline=args.baseline,
        shard=args.shard, jobs=args.jobs, progress=not args.no_progress,
        isolate=args.isolate, timeout=args.timeout,
    )


def run(args: argparse.Namespace) -> int:
    from fp8check.gate.session import run_gate

    return run_gate(options(args), Path.cwd())
