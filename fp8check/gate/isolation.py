"""Runs a plan's batches in worker processes, so that nothing a kernel does ends the gate.

Each worker (spawned: jax and torch do not survive fork) loads the plan's kernels and
batches once, so jax, Triton and layer 1's ProblemCache stay warm from task to task.  A
task is "batch i from its j-th result"; the worker announces each result before making
it and sends it back as soon as it is made.  When a worker ends during a call (an exit,
a signal: a segfault, an abort, the kernel's OOM killer; a BaseException that is not an
Exception, such as SystemExit or KeyboardInterrupt raised by the kernel) or one result
takes longer than the timeout (the worker is killed), the parent records that result as
an error naming the cause, starts a fresh worker and goes on: with the batch's next result
where results are known in advance (layer 1: the other kernels on the same case), else
with the next batch.  An Exception escaping a batch is a bug of fp8check: `WorkerError`,
the CLI's internal error.  Results reach the sink in batch order, as a serial run makes
them, whatever the number of workers.
"""

from __future__ import annotations

import atexit
import functools
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
import traceback
from collections import deque
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from fp8check.errors import Interrupted
from fp8check.gate.caught import next_result, recorded
from fp8check.gate.kernels import load_kernels
from fp8check.gate.plan import GatePlan
from fp8check.gate.runner import Batch, Sink, plan_batches
from fp8check.results import CaseResult

_STOP_GRACE_S = 5.0  # how long an idle worker has to exit when told to
# A batch's preparation (layer 1: building the case's references, fp8check's own work) is
# not the kernel's time: it gets at least this long, whatever the per-result timeout.
PREPARE_MIN_S = 600.0
# The thread pools a worker's libraries size from the environment when they load (BLAS,
# numba, torch's OpenMP); with several workers each gets its share of the cores, or the
# workers' threads oversubscribe them and run no faster than one worker.
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS")
_CACHE_DIR_VAR = "JAX_COMPILATION_CACHE_DIR"


@functools.cache
def _compile_cache_folder() -> str:
    """A temporary folder of this process for jax's compilation cache, gone at its exit."""
    folder = tempfile.mkdtemp(prefix="fp8check-jax-cache-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


# The shared cache's settings besides its folder, as jax config names and values: every
# compile is kept (no minimum compile time or size), the programs are small and most take
# about a second.  The parent (jax loaded) updates its config with them; a worker gets them
# as environment variables, which jax reads when it loads, each named as its flag in capitals.
_CACHE_SETTINGS = (("jax_persistent_cache_min_compile_time_secs", 0),
                   ("jax_persistent_cache_min_entry_size_bytes", -1))


def _shared_cache_settings() -> tuple[tuple[str, Any], ...]:
    """(jax config name, value) of each setting of the workers' shared compilation cache;
    none when the user names a cache of their own (`_CACHE_DIR_VAR`)."""
    if os.environ.get(_CACHE_DIR_VAR):
        return ()
    return (("jax_compilation_cache_dir", _compile_cache_folder()), *_CACHE_SETTINGS)


def shared_compile_cache() -> dict[str, str]:
    """The environment that has the gate's workers share jax's compilation cache in a
    temporary folder of this process (empty when the user names a cache of their own).
    Each worker compiles what its batches need; without a shared cache the second worker
    to need a program (an interpret-mode kernel at a case's shape, the Pallas fidelity
    probe) compiles it again, with one it loads the first one's executable: the same
    program, so the same results.  Nothing outlives the process: a fresh run compiles
    everything again."""
    return {name.upper(): str(value) for name, value in _shared_cache_settings()}


def use_shared_compile_cache() -> None:
    """Put this process's compiles into the workers' shared cache too (`shared_compile_
    cache`), so that what it compiles before they start (loading the kernels: the Pallas
    fidelity probe) is theirs to load.  jax takes a cache only before its first compile:
    in a process that compiled before, this does nothing."""
    import jax

    for name, value in _shared_cache_settings():
        jax.config.update(name, value)


class WorkerError(RuntimeError):
    """fp8check itself failed in a worker (its traceback follows the first line)."""


def _layout(batches: list[Batch]) -> list[tuple]:
    """What a worker's batches must share with the parent's: label, size, slots."""
    return [(b.label, b.size, b.slots) for b in batches]


def _serve(plan: GatePlan, conn: Connection) -> None:
    """A worker's life: build the plan's batches, say "ready", run tasks until told to
    stop (None) or the parent goes away.  Messages: ("ready", the batches' `_layout`),
    ("preparing",) before a batch's `prepare`, ("start", j) before result j, ("result",
    CaseResult), ("done",) after the task's last result, ("ended", why) when a
    BaseException ended a call, ("raised", traceback) for an Exception escaping a batch (a bug)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    batches = plan_batches(plan, load_kernels(plan))
    conn.send(("ready", _layout(batches)))
    while True:
        try:
            task = conn.recv()
        except EOFError:  # the parent is gone
            return
        if task is None:
            return
        i, start = task
        prepare = batches[i].prepare
        prepared: list = []  # the preparation's warnings, on each result that used it
        if prepare is not None:
            conn.send(("preparing",))
            try:
                with recorded() as prepared:
                    prepare()
            except Exception:
                conn.send(("raised", traceback.format_exc()))
                return
        results = batches[i].results(start)
        for j in range(start, batches[i].size + 1):
            conn.send(("start", j))
            try:
                res = next_result(results, prepared)
            except Exception:
                conn.send(("raised", traceback.format_exc()))
                return
            except BaseException as e:  # SystemExit, KeyboardInterrupt from the call
                conn.send(("ended", f"raised {e!r}"))
                return
            if res is None:
                break
            conn.send(("result", res))
        conn.send(("done",))


def _death(exitcode: int | None) -> str:
    """What ended a worker process, in words."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        why = f"killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    else:
        why = f"exited with code {exitcode}"
    return f"worker process {why} during the call"


class _Worker:
    """One worker process and what the parent knows of it: `task` (batch, result index
    in flight), `deadline` of that result and `late`, the error once it passes, `ended`
    (why a call ended it, when it said)."""

    def __init__(self, ctx: Any, plan: GatePlan, env: dict[str, str]) -> None:
        """Start a worker whose environment is this process's updated with `env`."""
        self.conn, child = ctx.Pipe()
        self.proc: BaseProcess = ctx.Process(target=_serve, args=(plan, child),
                                             name="fp8check-worker")
        saved = {v: os.environ.get(v) for v in env}
        os.environ.update(env)  # the spawned process inherits this environment
        try:
            self.proc.start()
        finally:
            for v, old in saved.items():
                if old is None:
                    os.environ.pop(v, None)
                else:
                    os.environ[v] = old
        child.close()
        self.ready = False
        self.task: tuple[int, int] | None = None
        self.deadline: float | None = None
        self.late = ""  # the error when `deadline` passes
        self.ended: str | None = None

    def expect(self, seconds: float, what: str = "") -> None:
        """What runs now (`what`, else a kernel's result) must end within `seconds`."""
        self.deadline = time.monotonic() + seconds
        self.late = f"{what + ' ' if what else ''}timed out after {seconds:g} s"

    def assign(self, i: int, start: int) -> None:
        self.conn.send((i, start))
        self.task = (i, start)

    def messages(self) -> list[tuple]:
        """Every message waiting (also those a dead worker sent before it died)."""
        out = []
        try:
            while self.conn.poll():
                out.append(self.conn.recv())
        except (EOFError, OSError):
            pass
        return out

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.conn.close()

    def stop(self) -> None:
        """Ask an idle worker to exit; kill it if it does not."""
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(_STOP_GRACE_S)
        self.kill()


class _InOrder:
    """Hands results to the sink in batch order: those of the first unfinished batch at
    once, later batches' held until every batch before them has finished."""

    def __init__(self, batches: list[Batch], sink: Sink) -> None:
        self.batches, self.sink = batches, sink
        self.held: dict[int, list[CaseResult]] = {}
        self.finished: set[int] = set()
        self.current = 0
        self._labelled = -1

    def _emit(self, i: int, res: CaseResult) -> None:
        if i != self._labelled:
            self.sink.bar.set_description(self.batches[i].label)
            self._labelled = i
        self.sink(res, self.batches[i].repro(res))

    def add(self, i: int, res: CaseResult) -> None:
        if i == self.current:
            self._emit(i, res)
        else:
            self.held.setdefault(i, []).append(res)

    def finish(self, i: int) -> None:
        self.finished.add(i)
        while self.current in self.finished:
            self.current += 1
            for res in self.held.pop(self.current, []):
                self._emit(self.current, res)

    def flush(self) -> None:
        """Everything held, in batch order (a run that stops early)."""
        for i in sorted(self.held):
            for res in self.held.pop(i):
                self._emit(i, res)


def _ended_result(batch: Batch, j: int, why: str) -> CaseResult:
    """The error result of a call that ended its worker."""
    kernel, case = batch.slot(j)
    rest = batch.size - j - 1
    if not batch.resumable and rest > 0:
        why += f"; the batch's other {rest} results were not made"
    return CaseResult(kernel=kernel, layer=batch.layer, case=case, passed=False, error=why)


def start_order(batches: list[Batch], jobs: int) -> list[int]:
    """The order batches start in (results still reach the sink in batch order): the
    plan's with one worker; with more, the batches of layers 0, 2 and 3 first (each a
    kernel family's whole compile, MoE layer or training run, up to minutes), then layer
    1's (one case each, seconds), so that the short ones fill in around the long ones
    instead of one long batch running alone at the end."""
    if jobs == 1:
        return list(range(len(batches)))
    return sorted(range(len(batches)), key=lambda i: batches[i].layer == 1)


def run_isolated(plan: GatePlan, batches: list[Batch], sink: Sink, *, jobs: int,
                 timeout: float) -> None:
    """Run `batches` (the plan's, as `plan_batches` makes them) in up to `jobs` worker
    processes (more than one: each with its share of the cores' threads), sharing a jax
    compilation cache (`shared_compile_cache`), every result into `sink` in
    batch order.  A result that takes longer than
    `timeout` seconds is an error ("timed out after N s").  On `Interrupted` the workers
    are killed, the results already made reach the sink, and it propagates.  Raises
    WorkerError for a bug of fp8check in a worker."""
    ctx = multiprocessing.get_context("spawn")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    env = shared_compile_cache()
    if jobs > 1:
        env = {**env, **dict.fromkeys(_THREAD_VARS, str(max(1, (cores or 1) // jobs)))}
    queue = deque((i, 0) for i in start_order(batches, jobs))
    order = _InOrder(batches, sink)
    workers: list[_Worker] = []

    def ended(w: _Worker, why: str) -> None:
        """`w` is gone: its result in flight is an error; go on past it."""
        w.kill()
        workers.remove(w)
        if w.task is None:
            if not w.ready:
                raise WorkerError(f"a worker process could not start: {why}")
            return
        i, j = w.task
        batch = batches[i]
        if j < batch.size:  # else it ended after the batch's last result: none is lost
            order.add(i, _ended_result(batch, j, why))
        if batch.resumable and j + 1 < batch.size:
            queue.appendleft((i, j + 1))
        else:
            order.finish(i)

    def handle(w: _Worker, msg: tuple) -> None:
        kind = msg[0]
        if kind == "ready":
            if msg[1] != _layout(batches):
                raise WorkerError("a worker planned other batches than the gate (state of "
                                  "this process that a spawned process does not share?)")
            w.ready = True
        elif kind == "preparing":
            w.expect(max(timeout, PREPARE_MIN_S), "building the case's references")
        elif kind == "start":
            assert w.task is not None
            w.task = (w.task[0], msg[1])
            w.expect(timeout)
        elif kind == "result":
            assert w.task is not None
            order.add(w.task[0], msg[1])
        elif kind == "done":
            assert w.task is not None
            order.finish(w.task[0])
            w.task = w.deadline = None
        elif kind == "ended":
            w.ended = msg[1]
        else:  # "raised"
            last = msg[1].strip().splitlines()[-1]
            raise WorkerError(f"in a worker: {last}\n{msg[1]}")

    try:
        while queue or any(w.task for w in workers):
            idle = [w for w in workers if w.ready and w.task is None]
            while queue and idle:
                idle.pop().assign(*queue.popleft())
            starting = sum(not w.ready for w in workers)
            for _ in range(min(jobs - len(workers), len(queue) - starting)):
                workers.append(_Worker(ctx, plan, env))
            deadlines = [w.deadline for w in workers if w.deadline is not None]
            wait_s = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            wait([h for w in workers for h in (w.conn, w.proc.sentinel)], wait_s)
            for w in list(workers):
                dead = not w.proc.is_alive()  # before reading: a dead worker's last words
                for msg in w.messages():
                    handle(w, msg)
                if w.ended is not None:
                    ended(w, w.ended)
                elif dead:
                    ended(w, _death(w.proc.exitcode))
                elif w.deadline is not None and time.monotonic() > w.deadline:
                    ended(w, w.late)
    except BaseException as e:
        for w in workers:
            w.kill()
        if isinstance(e, Interrupted):
            order.flush()
        raise
    for w in workers:
        w.stop()
