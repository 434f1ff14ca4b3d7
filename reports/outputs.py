"""The files a finished run is written to, whichever command made the document (`gate`,
`merge`, `compare`): the JSON document, JUnit XML, the HTML report and the Markdown
summary, each only when its path is given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fp8check.results import documents
from fp8check.results.compare import Comparison


def write_outputs(doc: dict[str, Any], *, json: str | Path | None = None,
                  junit: str | Path | None = None, report: str | Path | None = None,
                  summary_md: str | Path | None = None, report_url: str | None = None,
                  comparison: Comparison | None = None) -> None:
    """Write `doc` to each path given; the report and the summary show `comparison` (of
    `doc` against a baseline) when there is one, and the summary links the report at
    `report_url` (default: the `report` path)."""
    if json:
        documents.write_json(json, doc)
    if junit:
        documents.write_junit(junit, documents.results_of(doc))
    if report:
        from fp8check.reports.html import write_html

        write_html(report, doc, workers=None, comparison=comparison)  # commands: main guard
    if summary_md:
        from fp8check.reports.markdown import write_summary_markdown

        write_summary_markdown(summary_md, doc, comparison,
                               report_link=report_url or (str(report) if report else None),
                               report_name=Path(report).name if report else "full report")
