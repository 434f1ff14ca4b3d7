"""Where the gate's time goes, per built-in kernel and per layer, for the smoke and ci
suites, measured in this one run on this machine.

    python benchmarks/gate.py [--suites smoke,ci] [--layers 0,1,2,3] [--jobs 2]

Runs `fp8check gate` itself on every built-in kernel, with `--jobs` workers as `make gate`
runs it, and reads the work back from its JSON: each result's seconds (a layer-0 compile,
a layer-2 case; results that share one run's seconds, such as layer 3's variants of one
family and seed, counted once here), and for layer 1 the phases: building the case's
references (on the result that built them; kernels of one contract share them), calling
the kernel (first-call compilation included) and computing the metrics.  It prints the
gate's wall time against the summed work and the workers' capacity (wall x jobs): what
is neither is start-up (each process's imports and kernel loading), waiting on the last
batch, and writing the documents.  Then the work done inside compilers and interpreters
fp8check runs but does not write (`outside_work`) and the wall time it takes at best on
the workers, beside `make gate`'s target (`TARGET_S`, issue 40); the layers, the kernels
and the biggest single results.  The report is the HTML rendering of the run's document.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from fp8check.cli import main as fp8check_main
from fp8check.reports.html import render_html

PHASES = ("reference", "kernel", "metrics")
TOP = 10  # biggest single results listed
TARGET_S = 300.0  # `make gate` from a fresh clone on 2 cores, set-up included (issue 40)


def work_items(doc: dict[str, Any]) -> list[tuple[float, str, str, str]]:
    """(seconds, layer, kernel, case) of each piece of work in a gate document: a result,
    except that results of one layer, kernel family and case with the same seconds are
    one piece of work (layer 3's variants, trained in one run; layer 0's padded and
    padding-free FP8 GEMM, one kernel compiled once), listed under the first of them."""
    seen: set[tuple[str, str, str, float]] = set()
    items = []
    for r in doc["results"]:
        secs = float(r.get("seconds") or 0.0)
        run = (str(r["layer"]), r["kernel"].split("-")[0], r["case"], secs)
        if run in seen:
            continue
        seen.add(run)
        items.append((secs, str(r["layer"]), r["kernel"], r["case"]))
    return items


def outside_work(doc: dict[str, Any]) -> tuple[float, float]:
    """(layer 0's seconds, layer 1's kernel-call seconds) of a gate document: the native
    compiles (libtpu's XLA and Mosaic compilers, with the Mosaic dumps layer 0 reads; the
    Triton compiler and ptxas) and the kernels' calls (under the Triton interpreter or
    jax's Pallas interpret mode, first-call compilation included).  Layer 3's training
    runs call the kernels too, but their seconds are not split by phase, so they are left
    out: this is a lower bound on the work fp8check's own code does not decide."""
    compiles = sum(s for s, layer, *_ in work_items(doc) if layer == "0")
    calls = sum(float(r.get("timing", {}).get("kernel", 0.0)) for r in doc["results"]
                if str(r["layer"]) == "1")
    return compiles, calls


def run_suite(suite: str, layers: str, jobs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        t = time.perf_counter()
        rc = fp8check_main(["gate", "--no-progress", "--suite", suite, "--layers", layers,
                            "--jobs", str(jobs),
                            "--json", str(out / "gate.json"), "--junit", str(out / "gate.xml"),
                            "--report", str(out / "gate.html")])
        wall = time.perf_counter() - t
        doc = json.loads((out / "gate.json").read_text())
    t = time.perf_counter()
    render_html(doc, workers=None)  # as the gate writes it (a process per CPU)
    t_report = time.perf_counter() - t
    s = doc["summary"]
    print(f"suite {suite} (layers {layers}, {jobs} workers): gate wall time {wall:.1f} s, "
          f"exit {rc}; {s['n_passed']} passed, {s['n_failed']} failed; report rendering "
          f"{t_report:.2f} s")
    breakdown(doc, wall, jobs)


def breakdown(doc: dict[str, Any], wall: float, jobs: int) -> None:
    """Print where a gate run's `wall` seconds on `jobs` workers went (module docstring)."""
    items = work_items(doc)
    work = sum(s for s, *_ in items)
    print(f"  summed work {work:.1f} s against {wall * jobs:.1f} s of the workers' capacity "
          f"(wall x {jobs}): {work / (wall * jobs):.0%} busy; the other "
          f"{wall * jobs - work:.1f} s are start-up, the last batch's wait and the documents")
    compiles, calls = outside_work(doc)
    floor = (compiles + calls) / jobs
    print(f"  in compilers and interpreters: layer 0's native compiles {compiles:.1f} s and "
          f"layer 1's kernel calls {calls:.1f} s, at best {floor:.1f} s of wall time on "
          f"{jobs} workers before set-up and everything else (`make gate` runs suite ci "
          f"and has {TARGET_S:.0f} s for all of it)")
    per_layer: dict[str, float] = defaultdict(float)
    for secs, layer, _, _ in items:
        per_layer[layer] += secs
    print("  per layer: " + ", ".join(f"layer {k} {v:.1f} s ({v / work:.0%})"
                                      for k, v in sorted(per_layer.items())))
    rows: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for secs, layer, kernel, _ in items:
        rows[(layer, kernel)]["total"] += secs
    for r in doc["results"]:
        row = rows[(str(r["layer"]), r["kernel"])]
        row["cases"] += 1
        for phase, secs in r.get("timing", {}).items():
            row[phase] += secs
    print(f"  {'layer':9s} {'kernel':22s} {'cases':>5} {'total s':>8} "
          + " ".join(f"{p + ' s':>11}" for p in PHASES))
    for (layer, kernel), row in sorted(rows.items(), key=lambda kv: -kv[1]["total"]):
        phases = " ".join(f"{row[p]:11.1f}" if p in row else f"{'-':>11}" for p in PHASES)
        print(f"  {layer:9s} {kernel:22s} {int(row['cases']):5d} {row['total']:8.1f} {phases}")
    print(f"  the {TOP} biggest single results:")
    for secs, layer, kernel, case in sorted(items, reverse=True)[:TOP]:
        print(f"    {secs:7.1f} s  layer {layer} {kernel} {case}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", default="smoke,ci")
    ap.add_argument("--layers", default="0,1,2,3")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes (make gate's 2)")
    opts = ap.parse_args()
    for suite in opts.suites.split(","):
        run_suite(suite, opts.layers, opts.jobs)


if __name__ == "__main__":
    main()
