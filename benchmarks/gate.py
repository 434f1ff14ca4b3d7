"""Where the gate's time goes, per built-in kernel and per layer, for the smoke and ci
suites, measured in this one run on this machine.

    python benchmarks/gate.py [--suites smoke,ci] [--layers 1,2,3]

Runs `fp8check gate` itself on every built-in kernel and reads the phases back from its
JSON: each layer-1 result records seconds spent building the case's references (on the
result that built them; kernels of one contract share them), calling the kernel (first-call
compilation included) and computing the metrics; layers 2 and 3 are timed per kernel
family and variant as a whole.  The report is the HTML rendering of the run's document.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from fp8check.cli import main as fp8check_main
from fp8check.reports.html import render_html

PHASES = ("reference", "kernel", "metrics")


def run_suite(suite: str, layers: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        t = time.perf_counter()
        rc = fp8check_main(["gate", "--no-progress", "--suite", suite, "--layers", layers,
                            "--json", str(out / "gate.json"), "--junit", str(out / "gate.xml"),
                            "--report", str(out / "gate.html")])
        wall = time.perf_counter() - t
        doc = json.loads((out / "gate.json").read_text())
    t = time.perf_counter()
    render_html(doc, workers=None)  # as the gate writes it (a process per CPU)
    t_report = time.perf_counter() - t
    rows: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in doc["results"]:
        row = rows[(str(r["layer"]), r["kernel"])]
        row["cases"] += 1
        row["total"] += float(r.get("seconds") or 0.0)
        for phase, secs in r.get("timing", {}).items():
            row[phase] += secs
    s = doc["summary"]
    print(f"suite {suite} (layers {layers}): gate wall time {wall:.1f} s, exit {rc}; "
          f"{s['n_passed']} passed, {s['n_failed']} failed; report rendering {t_report:.2f} s")
    print(f"  {'layer':9s} {'kernel':22s} {'cases':>5} {'total s':>8} "
          + " ".join(f"{p + ' s':>11}" for p in PHASES))
    for (layer, kernel), row in sorted(rows.items()):
        phases = " ".join(f"{row[p]:11.1f}" if p in row else f"{'-':>11}" for p in PHASES)
        print(f"  {layer:9s} {kernel:22s} {int(row['cases']):5d} {row['total']:8.1f} {phases}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", default="smoke,ci")
    ap.add_argument("--layers", default="1,2,3")
    opts = ap.parse_args()
    for suite in opts.suites.split(","):
        run_suite(suite, opts.layers)


if __name__ == "__main__":
    main()
