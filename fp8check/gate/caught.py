"""Warnings raised while the gate makes a result (a kernel's own floating-point
conditions, a library's notice): recorded on that result as its metric "warnings" (one
line per distinct warning and place, with its count), never printed across the progress
bar.  fp8check's own expected conditions (IEEE invalid operations on the non-finite
cases' references) are silenced where they are computed, so what is recorded is news."""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from fp8check.results import CaseResult


@contextmanager
def recorded() -> Iterator[list[warnings.WarningMessage]]:
    """Every warning raised inside the block, in a list (none is printed or filtered)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def next_result(results: Iterator[CaseResult],
                before: Sequence[warnings.WarningMessage] = ()) -> CaseResult | None:
    """The next result of `results` (None at the end) with the warnings its making raised,
    and `before` (those of its batch's preparation, which it used), on it."""
    with recorded() as caught:
        res = next(results, None)
    if res is not None:
        attach(res, [*before, *caught])
    return res


def attach(res: CaseResult, caught: Sequence[warnings.WarningMessage]) -> None:
    """`caught` as the result's metric "warnings": "Category: message (file:line)", with
    " x N" when it was raised N > 1 times."""
    if not caught:
        return
    counts = Counter(f"{w.category.__name__}: {w.message} ({_where(w.filename)}:{w.lineno})"
                     for w in caught)
    res.metrics["warnings"] = [text if n == 1 else f"{text} x {n}" for text, n in counts.items()]


def _where(filename: str) -> str:
    """A warning's file: relative to the working directory when under it (the user's
    kernel), from its package on when installed (site-packages/ left out), else as is."""
    path = Path(filename)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        pass
    parts = path.parts
    if "site-packages" in parts:
        return "/".join(parts[parts.index("site-packages") + 1:])
    return filename
