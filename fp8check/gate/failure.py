"""The gate's terminal line for a failing result: why it failed, in one line (its repro
follows on the next)."""

from __future__ import annotations

import numpy as np

from fp8check.layers.op.locations import in_gmm_output, in_tgmm_output
from fp8check.results import CaseResult, Criterion


def _where(worst: dict, result: CaseResult) -> str:
    """Where a criterion's worst element lies: a [M,N] output's group, row in the group
    and N tile; a [G,K,N] weight gradient's group and K/N tiles (from the result's
    group sizes); a quantizer's value or scale by its index."""
    idx = [int(i) for i in worst["index"]]
    what = worst.get("what", "element")
    gs = result.metrics.get("group_sizes")
    place = ""
    if what == "element" and gs is not None and len(idx) in (2, 3):
        locate = in_gmm_output if len(idx) == 2 else in_tgmm_output
        place = locate(np.asarray(gs, np.int64))(idx) + ", "
    return (f"worst {what}: {place}index {tuple(idx)}, value {worst['out']:.6g}, reference "
            f"{worst['ref']:.6g}")


def failure_line(result: CaseResult) -> str:
    """Why `result` failed, in one line: the first line of its error, else its first
    failing criterion (criteria are listed correctness first, the most basic first) as
    `name value (limit L)`, how many elements are bad, where the worst one lies, and the
    other failing criteria by name."""
    if result.error:
        return result.error.strip().split("\n")[0]
    failed: list[Criterion] = [c for c in result.criteria if not c.passed]
    if not failed:
        return "failed"
    first = failed[0]
    parts = [first.brief()]
    if first.n_bad is not None and first.bad_means:
        parts.append(f"{first.n_bad} {first.bad_means}")
    if first.worst:
        parts.append(_where(first.worst, result))
    if len(failed) > 1:
        parts.append("also failed: " + ", ".join(c.name for c in failed[1:]))
    return "; ".join(parts).replace("\n", " ")
