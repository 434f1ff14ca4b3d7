"""The AssertionError message of a failed assertion: one formatter for every assert."""

from __future__ import annotations

from fp8check.layers.op.locations import Locate
from fp8check.measures.integrity import INPUTS_UNCHANGED
from fp8check.results import CaseResult


def failure_message(kind: str, result: CaseResult, locate: Locate, profile: str | None,
                    gate_line: str | None) -> str:
    """The message of a failed `result` of the `kind` assert: a header (how many criteria
    failed, under which profile), then per failed criterion its verdict and meaning, how
    many elements are off and what they are, the worst element with its index, where
    `locate` says it lies, value, reference, ULP distance and bound (a worst element
    shared with the criterion before is not repeated), and last the reproduction lines:
    `gate_line` (the gate command of a gate case, if any) and `result.repro`."""
    failed = [c for c in result.criteria if not c.passed]
    total = int(result.metrics["n_compared"])
    lines = [f"fp8check: {kind} output fails {len(failed)} layer-1 criteri"
             f"{'on' if len(failed) == 1 else 'a'}"
             + (f" (profile {profile})" if profile else "")]
    shown = None  # the worst element printed last: a repeated one says so instead
    for c in failed:
        lines.append("")
        lines.append(f"{c.name}: {c.verdict()}  [{c.meaning or c.question}]")
        if c.name == INPUTS_UNCHANGED:  # its n_bad counts input elements, not outputs
            lines.append(f"  {c.bad_means}")
        elif c.n_bad is not None:
            pct = f" ({100.0 * c.n_bad / total:.3g}%)" if total else ""
            lines.append(f"  {c.bad_means or 'mismatched elements'}: {c.n_bad} / {total}{pct}")
        w = c.worst
        if not w:
            continue
        label = w.get("what", "element")
        key = (label, tuple(w["index"]), w["ref"])
        if key == shown:
            lines.append(f"  worst {label}: the same as above")
            continue
        shown = key
        place = locate(w["index"]) if label != "scale" else "block grid index"
        lines.append(f"  worst {label}: index {tuple(w['index'])}, {place}")
        lines.append(f"    value:        {w['out']!r}")
        lines.append(f"    reference:    {w['ref']!r}"
                     + (" (unquantized)" if c.question == "impact" else ""))
        lines.append(f"    ULP distance: {w['ulp']}"
                     + (f", bound: {w['bound']:.4g} (|value - reference| allowed)"
                        if w.get("bound") else ""))
    lines.append("")
    if gate_line:
        lines.append(f"Reproduce in the gate: {gate_line}")
    lines.append(f"Reproduce these inputs: {result.repro}")
    return "\n".join(lines)
