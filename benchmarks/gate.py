"""Where the gate's time goes, per built-in kernel and per layer, for the smoke and ci
suites, measured in this one run on this machine.

    python benchmarks/gate.py [--suites smoke,ci] [--layers 1,2]

Layer 1 is split into: reference (building every case's references, shared by the
kernels of one contract, counted once per contract), first call (one untimed-by-the-gate
call per case that pays jit compilation and caches), kernel (the calls the validator
makes: twice per case for a kernel that declares determinism, warm), metrics (validation
time minus those calls) and report (rendering the HTML of the run's results).  Layers 2 and 3
are timed per kernel family as a whole.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from fp8check import cases, registry, results
from fp8check.contracts import call_kernel
from fp8check.layers.op import build_problem, validate_case
from fp8check.profiles import get_profile


def layer1(suite: str) -> list[dict]:
    specs, errors = registry.load_builtins()
    for name, err in errors.items():
        print(f"  {name} not loaded: {err}")
    profile = get_profile("strict")
    t_ref: dict[str, float] = defaultdict(float)
    rows = {s.name: defaultdict(float) for s in specs}
    done = []
    for case in cases.build_suite(suite):
        problems = {}
        for spec in specs:
            row = rows[spec.name]
            if spec.contract == "quantizer":
                t = time.perf_counter()
                done.append(validate_case(spec, case, profile))
                row["total"] += time.perf_counter() - t
                continue
            if cases.supported(case, spec.out_dtypes, spec.m_align) is not None:
                continue
            if spec.contract not in problems:
                t = time.perf_counter()
                problems[spec.contract] = build_problem(spec.contract, case)
                t_ref[spec.contract] += time.perf_counter() - t
            prob = problems[spec.contract]
            t = time.perf_counter()
            call_kernel(spec, prob.args, case.out_dtype)  # compiles / fills caches
            row["first_call"] += time.perf_counter() - t
            t = time.perf_counter()
            for _ in range(2 if spec.deterministic else 1):
                call_kernel(spec, prob.args, case.out_dtype)
            row["kernel"] += time.perf_counter() - t
            t = time.perf_counter()
            done.append(validate_case(spec, case, profile, prob))
            row["total"] += time.perf_counter() - t
    summary = results.summarize(done, errors)
    env = results.environment(specs, suite=suite, seed=0, profile="strict", backend="auto",
                              load_errors=errors)
    doc = results.document(done, summary, env)
    t = time.perf_counter()
    from fp8check.reports.html import render_html

    render_html(doc)
    t_report = time.perf_counter() - t
    out = []
    for spec in specs:
        r = rows[spec.name]
        # validate_case calls the kernel itself: its own time minus our separate kernel
        # calls is the metrics' share.
        out.append({"kernel": spec.name, "contract": spec.contract,
                    "first_s": r["first_call"], "kernel_s": r["kernel"],
                    "metrics_s": max(r["total"] - r["kernel"], 0.0),
                    "validate_s": r["total"]})
    print("  references: " + ", ".join(f"{c} {v:.1f} s" for c, v in t_ref.items())
          + f"; report {t_report:.2f} s; {summary['n_passed']} passed, "
          f"{summary['n_failed']} failed")
    return out


def family_layer(layer: int, suite: str) -> None:
    if layer == 2:
        from fp8check.layers.moe import iter_layer2 as run
    else:
        from fp8check.layers.training import iter_layer3 as run
    for fam in registry.FAMILIES:
        t = time.perf_counter()
        res = list(run(fam, suite))
        bad = sum(1 for r in res if r.passed is False)
        print(f"  layer {layer} {fam:8s} {time.perf_counter() - t:7.1f} s  "
              f"({len(res)} results, {bad} failed)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", default="smoke,ci")
    ap.add_argument("--layers", default="1,2,3")
    opts = ap.parse_args()
    layers = [int(v) for v in opts.layers.split(",")]
    for suite in opts.suites.split(","):
        print(f"suite {suite}:")
        t0 = time.perf_counter()
        if 1 in layers:
            print(f"  {'kernel':20s} {'1st call s':>10} {'kernel s':>9} {'metrics s':>10} "
                  f"{'validate s':>10}")
            for row in layer1(suite):
                print(f"  {row['kernel']:20s} {row['first_s']:10.1f} {row['kernel_s']:9.1f} "
                      f"{row['metrics_s']:10.1f} {row['validate_s']:10.1f}")
        for layer in (2, 3):
            if layer in layers:
                family_layer(layer, suite)
        print(f"  suite {suite} wall time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
