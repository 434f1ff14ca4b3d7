"""Minimal self-contained HTML report of a gate run (no network, inline CSS).

Input is the gate's JSON document (`fp8check.results.document`).  Layout: summary per
kernel, failures first (failed criteria, key metrics, one-line repro command), every
result, skip reasons, kernels that failed to load, environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

_TEMPLATES = Path(__file__).parent / "templates"
# Metrics shown in the tables, in this order (the JSON has all of them).
KEY_METRICS = ("bound_ratio_max", "error_ratio", "bias_z", "ulp_max_vs_exact",
               "bit_exact_mismatches", "impact_sqnr_db", "impact_band", "impact_calc_diff")


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def render_html(doc: dict[str, Any]) -> str:
    """The report as one HTML string."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES), autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["fmt"] = _fmt
    results = doc["results"]
    failures = [r for r in results if r["passed"] is False]
    return env.get_template("report.html").render(
        summary=doc["summary"], environment=doc["environment"], failures=failures,
        results=sorted(results, key=lambda r: (r["passed"] is not False, r["kernel"], r["case"])),
        key_metrics=KEY_METRICS,
    )


def write_html(path: str | Path, doc: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(doc))
