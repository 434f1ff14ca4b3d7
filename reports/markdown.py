"""A short Markdown summary of a gate run, for where a reviewer reads it (GitHub's
`$GITHUB_STEP_SUMMARY`, a merge-request note): the verdict first, the counts per kernel,
the failures with their reproduction commands, the regressions against a baseline when
one is given, and a link to the full report.  Lists are cut at `MAX_ROWS` rows (the
count of what was left out is said): the HTML report and the JSON have everything."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fp8check.results.compare import Comparison, Move

MAX_ROWS = 20


def _cell(v: Any) -> str:
    """A value as a table cell: floats to 4 significant digits, None (a result or
    criterion one run lacks) as "absent", one line, pipes escaped."""
    text = "absent" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))
    return " ".join(text.split()).replace("|", "\\|")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows[:MAX_ROWS]]
    if len(rows) > MAX_ROWS:
        lines.append(f"\n... and {len(rows) - MAX_ROWS} more (see the full report)")
    return lines


def _status(r: dict[str, Any]) -> str:
    return "error" if r.get("error") else "failed"


def _moves(title: str, moves: list[Move]) -> list[str]:
    if not moves:
        return []
    rows = [(m.kernel, m.layer, m.case, m.what, m.base, m.head, m.how) for m in moves]
    return ["", f"### {title} ({len(moves)})", "",
            *_table(("kernel", "layer", "case", "what", "baseline", "this run", "how"), rows)]


def summary_markdown(doc: dict[str, Any], comparison: Comparison | None = None,
                     report_link: str | None = None, report_name: str = "full report"
                     ) -> str:
    """The summary (module docstring) of the results document `doc`; `comparison` of it
    against a baseline; `report_link` the full report's path or URL, shown as
    `report_name`."""
    s, env = doc["summary"], doc["environment"]
    failed = not s["passed"]
    regressed = comparison is not None and comparison.regressed
    verdict = "FAIL" if failed or regressed else "PASS"
    why = []
    if failed:
        why.append(f"{s['n_failed']} of {s['n_results']} results failed"
                   + ("" if s["complete"] else f"; incomplete run: {s.get('incomplete', '')}"))
        if s["kernel_load_errors"]:
            why.append(f"{len(s['kernel_load_errors'])} kernels not loaded")
        if s["n_passed"] == 0 and not s["n_failed"]:
            why.append("nothing was checked")
    if comparison is not None:
        n = len(comparison.regressions)
        why.append(f"{n} regression{'' if n == 1 else 's'} against the baseline"
                   if regressed else "no regression against the baseline")
    layers = ",".join(map(str, env.get("layers", [])))
    lines = [f"## fp8check gate: {verdict}", "",
             f"**{verdict}**: " + ("; ".join(why) or f"{s['n_passed']} results passed") + ".",
             "",
             f"suite `{env.get('suite')}` · seed {env.get('seed')} · profile "
             f"`{env.get('profile')}` · layers {layers} · {s['n_passed']} passed, "
             f"{s['n_failed']} failed, {s['n_skipped']} skipped", ""]
    lines += _table(("kernel", "passed", "failed", "skipped"),
                    [(k, c.get("passed", 0), c.get("failed", 0), c.get("skipped", 0))
                     for k, c in s["kernels"].items()])
    for name, err in s["kernel_load_errors"].items():
        lines.append(f"\nkernel `{name}` not loaded: {_cell(err)}")
    bad = [r for r in doc["results"] if r["passed"] is False]
    if bad:
        lines += ["", f"### Failures ({len(bad)})", ""]
        lines += _table(("kernel", "layer", "case", "failed"),
                        [(r["kernel"], r["layer"], r["case"],
                          r.get("error") or ", ".join(r.get("failed", [])) or _status(r))
                         for r in bad])
        repros = list(dict.fromkeys(r["repro"] for r in bad if r.get("repro")))
        if repros:
            lines += ["", "Reproduce:", "", "```sh", *repros[:MAX_ROWS], "```"]
    if comparison is not None:
        lines += _moves("Regressions against the baseline", comparison.regressions)
        lines += _moves("Improvements", comparison.improvements)
        if comparison.new:
            lines += ["", f"{len(comparison.new)} results are new (not in the baseline)."]
    if report_link:
        lines += ["", f"Full report: [{report_name}]({report_link})"]
    return "\n".join(lines) + "\n"


def write_summary_markdown(path: str | Path, doc: dict[str, Any],
                           comparison: Comparison | None = None,
                           report_link: str | None = None,
                           report_name: str = "full report") -> None:
    """`summary_markdown` into `path` (parent folders created; GitHub gives each step its
    own `$GITHUB_STEP_SUMMARY` file, so writing it whole loses nothing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(summary_markdown(doc, comparison, report_link, report_name))
