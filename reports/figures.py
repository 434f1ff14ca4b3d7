"""The report's figures, one a result: `figures` renders them, `FigurePool` renders them
while the run that makes the results still runs.

Rendering is the report's expensive part (~0.3 s a figure, most of it matplotlib's Agg);
a figure is a function of its result's dict alone, the same PNG bytes wherever it is
rendered.  Spawned processes re-import the caller's __main__ module, so only entry
points with a `__name__ == "__main__"` guard (the fp8check commands) render in more than
one process.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from fp8check.reports import plots

FIGURES_PER_WORKER = 24


def result_figure(r: dict[str, Any]) -> str | None:
    """The inline PNG of a result's figure (by layer), None when it has no plot data."""
    builder = {1: plots.case_figure, 2: plots.layer2_figure, 3: plots.layer3_figure}
    fig = builder.get(r["layer"], plots.layer3_figure)(r)
    return None if fig is None else plots.to_data_uri(fig)


def figure_workers(n: int) -> int:
    """The processes that render `n` figures: one per CPU, at most one per
    FIGURES_PER_WORKER figures (a small report stays in this process: 1)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    return max(1, min(cpus, -(-n // FIGURES_PER_WORKER)))


def _in_background() -> None:
    """A `FigurePool` process's set-up: the lowest CPU priority (nice 19: it takes only
    the CPU time others leave), and Ctrl-C, which reaches the whole process group, left
    to the parent (which then writes the report of the results so far)."""
    os.nice(19)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _key(r: dict[str, Any]) -> str:
    """A result's dict as one string (the documents' JSON holds no NaN: allow_nan=False)."""
    return json.dumps(r, sort_keys=True, allow_nan=False)


class FigurePool:
    """Renders the figure of each result as soon as it is made, in `processes` spawned
    processes at the lowest CPU priority: while the run goes on they take the cores its
    own processes leave idle, not their share; once it has ended, every core.  `figures`
    takes what they rendered.  A context manager: leaving it drops what is not rendered."""

    def __init__(self, processes: int) -> None:
        self._pool = ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context(
            "spawn"), initializer=_in_background)
        self._started: dict[str, Future[str | None]] = {}

    def __enter__(self) -> FigurePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(cancel_futures=True)

    def add(self, r: dict[str, Any]) -> None:
        """Start rendering the figure of result `r` (its dict, as in the document)."""
        key = _key(r)
        if key not in self._started:
            self._started[key] = self._pool.submit(result_figure, r)

    def started(self, r: dict[str, Any]) -> Future[str | None] | None:
        """The rendering of `r`'s figure, None when `add` was not given this result."""
        return self._started.get(_key(r))


def figures(results: Sequence[dict[str, Any]], workers: int | None = 1,
            pool: FigurePool | None = None) -> list[str | None]:
    """`result_figure` of every result, in order: those `pool` started from it, the others
    rendered here in `workers` spawned processes (None: `figure_workers`)."""
    started = [None if pool is None else pool.started(r) for r in results]
    rest = [r for r, f in zip(results, started, strict=True) if f is None]
    if workers is None:
        workers = figure_workers(len(rest))
    if workers <= 1:
        rendered = [result_figure(r) for r in rest]
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as p:
            rendered = list(p.map(result_figure, rest, chunksize=4))
    made = iter(rendered)
    return [next(made) if f is None else _rendered(f, r) for r, f in zip(results, started,
                                                                         strict=True)]


def _rendered(f: Future[str | None], r: dict[str, Any]) -> str | None:
    """What `f`, the pool's rendering of `r`'s figure, made; rendered here when a process
    of the pool died (killed: the figure is the same)."""
    try:
        return f.result()
    except BrokenProcessPool:
        return result_figure(r)
