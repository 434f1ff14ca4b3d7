"""Self-contained HTML precision report of a gate run (one file: inline CSS, inline PNG
plots, no scripts, no network).

Input is the gate's JSON document (`fp8check.results`): `results` (kernel, layer, case,
passed, metrics, criteria, failed, skipped, error, repro, seconds), `summary`,
`environment`, and optionally `tune` (a tiling search: `rounds` of {round, candidates:
[{tiling, status, reason, cost_model_us, speedup}], best}).  Layout, failures first:
verdict; against a baseline run when one is given (`fp8check.results.compare`: per
kernel, the criteria that moved, regressions first); summary matrix (kernels x layers:
counts, worst criterion, time); every failing case with its reproduction command and
figures; the quantization-impact overview; every case by layer and kernel (collapsed);
the tiling search; skips and load errors; what the gate looked at (`fp8check.inputs.coverage`
of the suite's cases it ran at layer 1, with the input classes none of them reaches); the
environment (versions, backends, interpreter fixes, seed).
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import jinja2

from fp8check.inputs import cases as cases_mod
from fp8check.inputs.coverage import Coverage, suite_coverage
from fp8check.reports import plots
from fp8check.results.compare import Comparison, Move
from fp8check.targets.chips import TARGETS, Target

_TEMPLATES = Path(__file__).parent / "templates"
# Metrics shown in the tables, in this order (the JSON has all of them).
# A passing case's collapsed line shows its first four: gated measures first, the ULP
# maximum (not gated; millions where a valid order meets a cancelling sum) after them.
KEY_METRICS = ("bound_ratio_max", "error_ratio", "bias_z", "bit_exact_mismatches",
               "impact_sqnr_db", "impact_band", "impact_calc_diff", "ulp_max_vs_exact")
LAYER2_KEY_METRICS = ("st_sqnr_db.out", "st_sqnr_db.dx", "sqnr_db.out", "sqnr_db.dx",
                      "sqnr_db.wi.min_expert", "sqnr_db.wo.min_expert")
LAYER0_KEY_METRICS = ("target", "vmem_bytes", "mxu_formats", "llo_vmatmul", "llo_vector_alu",
                      "shared_bytes", "registers", "spill_stores_bytes", "mma_shapes", "tma",
                      "tmem_columns", "max_num_imprecise_acc")
LAYER_ORDER = (0, 1, 2, 3, 4)
FIGURES_PER_WORKER = 24
LAYER_NAMES = {0: "0 · native compile", 1: "1 · single op", 2: "2 · MoE layer",
               3: "3 · training", 4: "4 · logs"}


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return "" if v is None else str(v)


def layer_name(layer: Any) -> str:
    return LAYER_NAMES.get(layer, str(layer))


def _margin(c: dict[str, Any]) -> float:
    """How far a criterion is from its limit, relative to the limit (< 0: failed).

    Only the ordered relations ("<=", ">=", "|x|<=") with a nonzero limit have a margin;
    any other passing check (a flag, a count that must be 0) is never the tight one (inf),
    a failing one -inf."""
    v, lim, rel = c.get("value"), c.get("limit"), c.get("relation")
    ordered = rel in ("<=", ">=", "|x|<=")
    if (not ordered or isinstance(v, bool | str) or v is None or lim is None
            or isinstance(lim, bool | str)):
        return -math.inf if not c["passed"] else math.inf
    v, lim = float(v), float(lim)
    if rel == "|x|<=":
        v = abs(v)
    if not math.isfinite(v) or lim == 0:  # a zero limit has no relative margin
        return -math.inf if not c["passed"] else math.inf
    room = (lim - v) if rel != ">=" else (v - lim)
    return room / max(abs(lim), 1e-300)


def worst_criterion(results: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The criterion closest to (or furthest past) its limit over `results`:
    {name, case, value, limit, passed}; None when no result has a criterion with a finite
    margin or a failure (passing boolean and zero-count checks have no margin to show)."""
    best: tuple[float, dict[str, Any]] | None = None
    for r in results:
        for name, c in r.get("criteria", {}).items():
            mg = _margin(c)
            if mg != math.inf and (best is None or mg < best[0]):
                best = (mg, {"name": name, "case": r["case"], "value": c.get("value"),
                             "limit": c.get("limit"), "passed": c["passed"]})
    return None if best is None else best[1]


def _status(r: dict[str, Any]) -> str:
    if r["passed"] is None:
        return "skipped"
    return "pass" if r["passed"] else ("error" if r.get("error") else "fail")


def summary_matrix(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """{"layers": [...], "rows": [{"kernel", "cells": {layer: cell | None}}]}; a cell has
    passed / failed / skipped / errors counts, seconds, the worst criterion and how many
    cases failed each criterion (`failed_criteria`)."""
    layers = [lay for lay in LAYER_ORDER if any(r["layer"] == lay for r in results)]
    layers += sorted({r["layer"] for r in results} - set(layers), key=str)
    kernels = list(dict.fromkeys(r["kernel"] for r in results))
    rows = []
    for k in kernels:
        cells: dict[Any, dict[str, Any] | None] = {}
        for lay in layers:
            mine = [r for r in results if r["kernel"] == k and r["layer"] == lay]
            if not mine:
                cells[lay] = None
                continue
            st = [_status(r) for r in mine]
            cells[lay] = {
                "passed": st.count("pass"), "failed": st.count("fail") + st.count("error"),
                "skipped": st.count("skipped"), "errors": st.count("error"),
                "seconds": sum(float(r.get("seconds") or 0.0) for r in mine),
                "worst": worst_criterion(mine),
                "failed_criteria": Counter(n for r in mine for n in r.get("failed", [])),
            }
        rows.append({"kernel": k, "cells": cells})
    return {"layers": layers, "rows": rows}


def _figure(r: dict[str, Any]) -> str | None:
    """The inline PNG of a result's figure (by layer), None when it has no plot data."""
    builder = {1: plots.case_figure, 2: plots.layer2_figure, 3: plots.layer3_figure}
    fig = builder.get(r["layer"], plots.layer3_figure)(r)
    return None if fig is None else plots.to_data_uri(fig)


def figures(results: Sequence[dict[str, Any]], workers: int | None = 1) -> list[str | None]:
    """`_figure` of every result, in order.  Rendering is the report's expensive part
    (~0.3 s a figure, most of it matplotlib's Agg), so it can run in `workers` spawned
    processes; None picks one per CPU, at most one per FIGURES_PER_WORKER figures (a small
    report stays in this process).  The PNGs are the same bytes either way.  Spawned
    workers re-import the caller's __main__ module, so only entry points with a
    `__name__ == "__main__"` guard (the fp8check commands) ask for more than 1."""
    if workers is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        workers = min(cpus, -(-len(results) // FIGURES_PER_WORKER))
    if workers <= 1:
        return [_figure(r) for r in results]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return list(pool.map(_figure, results, chunksize=4))


def _key_metrics(r: dict[str, Any]) -> list[tuple[str, Any]]:
    keys = {1: KEY_METRICS, 2: LAYER2_KEY_METRICS, 0: LAYER0_KEY_METRICS}.get(r["layer"], ())
    m = r.get("metrics", {})
    shown = [(k, m[k]) for k in keys if k in m]
    if not shown:  # other layers: every scalar metric
        shown = [(k, v) for k, v in m.items() if isinstance(v, int | float | str)]
    return shown


def _view(r: dict[str, Any], anchor: str) -> dict[str, Any]:
    return {"r": r, "status": _status(r), "anchor": anchor, "key_metrics": _key_metrics(r),
            "scalars": [(k, v) for k, v in r.get("metrics", {}).items()
                        if k != "plots" and not isinstance(v, dict)],
            "figure": None}


def gate_coverage(doc: dict[str, Any]) -> Coverage | None:
    """The coverage of the cases this run looked at: the cases of its suite (and seed)
    with a layer-1 result that was not skipped, so a run narrowed by --case shows only
    what it ran.  None when the document names no built-in suite."""
    env = doc.get("environment", {})
    suite, seed = env.get("suite"), env.get("seed")
    if suite not in cases_mod.SUITES or not isinstance(seed, int):
        return None
    ran = {r["case"] for r in doc["results"] if r["layer"] == 1 and r["passed"] is not None}
    return suite_coverage([c for c in cases_mod.build_suite(suite, seed) if c.id in ran])


def layer0_targets(results: Sequence[dict[str, Any]]) -> list[Target]:
    """The rows of `fp8check.targets.chips` that the run's layer-0 results compiled for, in the
    table's order (what the report says of each chip's FP8 datapath and accumulator)."""
    seen = {r.get("metrics", {}).get("target") for r in results if r.get("layer") == 0}
    return [t for name, t in TARGETS.items() if name in seen]


def moves_by_kernel(comparison: Comparison) -> list[tuple[str, list[Move]]]:
    """The comparison's moves grouped by kernel, kernels with a regression first, and
    within a kernel regressions before improvements."""
    by_kernel: dict[str, list[Move]] = {}
    for m in comparison.regressions + comparison.improvements:
        by_kernel.setdefault(m.kernel, []).append(m)
    return sorted(by_kernel.items(), key=lambda kv: kv[1][0].kind != "regression")


def build_context(doc: dict[str, Any], workers: int | None = 1,
                  comparison: Comparison | None = None) -> dict[str, Any]:
    """Everything the template shows, figures rendered (the expensive part; `workers` as
    in `figures`); with `comparison` (of this run against a baseline) the regression
    view after the verdict."""
    results = doc["results"]
    views = [_view(r, f"case-{i}") for i, r in enumerate(results)]
    failures = [v for v in views if v["status"] in ("fail", "error")]
    drawn = [v for v in views if v["status"] != "skipped"]
    for v, fig in zip(drawn, figures([v["r"] for v in drawn], workers), strict=True):
        v["figure"] = fig
    sections = []
    matrix = summary_matrix(results)
    for lay in matrix["layers"]:
        by_kernel = []
        for row in matrix["rows"]:
            mine = [v for v in views
                    if v["r"]["layer"] == lay and v["r"]["kernel"] == row["kernel"]]
            if mine:
                # failures first within a kernel too
                mine.sort(key=lambda v: v["status"] not in ("fail", "error"))
                by_kernel.append((row["kernel"], mine))
        sections.append({"layer": lay, "name": layer_name(lay), "kernels": by_kernel})
    overview = plots.impact_overview_figure(results)
    tune = doc.get("tune")
    tune_fig = plots.tune_figure(tune) if tune else None
    return {
        "summary": doc["summary"], "environment": doc["environment"], "matrix": matrix,
        "failures": failures, "sections": sections,
        "impact_overview": None if overview is None else plots.to_data_uri(overview),
        "coverage": gate_coverage(doc), "tune": tune, "accepted_statuses": plots.ACCEPTED_STATUSES,
        "targets": layer0_targets(results),
        "tune_figure": None if tune_fig is None else plots.to_data_uri(tune_fig),
        "comparison": comparison,
        "moves_by_kernel": moves_by_kernel(comparison) if comparison else [],
    }


def render_html(doc: dict[str, Any], workers: int | None = 1,
                comparison: Comparison | None = None) -> str:
    """The report as one HTML string (`workers` and `comparison` as in `build_context`)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES), autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["fmt"] = _fmt
    env.filters["layer_name"] = layer_name
    return env.get_template("report.html").render(**build_context(doc, workers, comparison))


def write_html(path: str | Path, doc: dict[str, Any], workers: int | None = 1,
               comparison: Comparison | None = None) -> None:
    """`render_html` into `path` (parent folders created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(doc, workers, comparison))
