"""One gate run from options to exit status: plan, kernels, batches, the results stream,
the final documents.  `fp8check.commands.gate` is its command line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from fp8check import exitcodes
from fp8check.config import load_config
from fp8check.errors import Interrupted, UsageError, interrupts_raise, usage_errors
from fp8check.gate.isolation import run_isolated, use_shared_compile_cache
from fp8check.gate.kernels import load_kernels
from fp8check.gate.plan import GateOptions, GatePlan, make_plan
from fp8check.gate.runner import Batch, Sink, plan_batches, run_batches
from fp8check.results import CaseResult, JsonlStream, documents
from fp8check.results.compare import Comparison, compare
from fp8check.targets.toolchains import ToolchainMissing


def _environment(plan: GatePlan, specs: list, load_errors: dict[str, str]) -> dict[str, Any]:
    c = plan.config
    env = documents.environment(specs, suite=c.suite, seed=c.seed, profile=c.profile,
                                backend=c.backend, load_errors=load_errors)
    env.update(layers=list(c.layers), layers_skipped=list(plan.dropped),
               families=list(plan.families), shard=f"{plan.shard[0]}/{plan.shard[1]}",
               isolated=c.isolate, timeout_s=c.timeout)
    if 0 in c.layers:
        env["native_targets"] = list(plan.targets)
    if plan.layer_kernel is not None:  # what layers 2 and 3 were built around
        p = plan.options.bare
        env["layer_kernels"] = {"forward": plan.layer_kernel, "dgrad": p.dgrad, "tgmm": p.tgmm}
    return env


def _progress(total: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, file=sys.stderr, unit="case", disable=not enabled,
                dynamic_ncols=True, mininterval=0.5)


def _finish(plan: GatePlan, done: list[CaseResult], summary: dict[str, Any],
            env: dict[str, Any]) -> Comparison | None:
    """Write the run's documents; with `--baseline`, compare the run with it first (a
    complete run only: an incomplete one fails anyway, and its missing results are not
    regressions of the kernels) and show the comparison in the report and the summary."""
    from fp8check.reports.outputs import write_outputs

    c, o = plan.config, plan.options
    doc = documents.document(done, summary, env)
    cmp = None
    if plan.baseline is not None:
        if summary["complete"]:
            cmp = compare(plan.baseline, doc, str(o.baseline), "this run")
        else:
            print(f"fp8check gate: not compared with {o.baseline}: this run is incomplete",
                  file=sys.stderr)
    write_outputs(doc, json=c.json, junit=c.junit, report=c.report, summary_md=o.summary_md,
                  report_url=o.report_url, comparison=cmp)
    return cmp


ISOLATION_OFF = ("fp8check: isolation is off: kernels run in this process; one that exits or "
                 "crashes ends the gate, and --timeout is not enforced")


def _run(plan: GatePlan, batches: list[Batch], sink: Sink) -> Interrupted | None:
    """Every batch into `sink`, in worker processes unless isolation is off.  Returns the
    interrupt (SIGINT, SIGTERM) that ended the run early, None when it ran to the end."""
    try:
        with interrupts_raise():
            if plan.config.isolate:
                run_isolated(plan, batches, sink, jobs=plan.options.jobs,
                             timeout=plan.config.timeout)
            else:
                run_batches(batches, sink)
    except Interrupted as e:
        return e
    return None


def _interrupted_line(plan: GatePlan, stop: Interrupted, kept: int, total: int) -> str:
    c = plan.config
    where = ", ".join(str(p) for p in (c.json, c.junit, c.report) if p)
    where = f"{where} and {plan.jsonl}" if where else str(plan.jsonl)
    return (f"fp8check gate: interrupted by {stop}: {kept} of {total} results kept in {where} "
            f"(marked incomplete)")


def run_gate(opts: GateOptions, cwd: str | Path = ".") -> int:
    """Run the gate described by `opts` (merged over `cwd`'s `[tool.fp8check]`).

    Returns:
      The exit status (`fp8check.exitcodes`): 0 when every result passed and every kernel
      loaded, 1 otherwise; 128 + the signal's number when SIGINT or SIGTERM ended the run
      (the documents then hold the results so far, summary.complete false).

    Raises:
      UsageError: bad usage or input (the CLI's exit 2), before any result is written.
    """
    with usage_errors():
        cfg = load_config(cwd)
    plan, notice = make_plan(opts, cfg)
    if plan.config.isolate:
        use_shared_compile_cache()
    kernels = load_kernels(plan)
    try:
        batches = plan_batches(plan, kernels)
    except ToolchainMissing as e:
        raise UsageError(str(e)) from e
    if notice:  # after every check of the input: bad usage stays one line
        print(notice, file=sys.stderr)
    env = _environment(plan, kernels.specs, kernels.errors)
    for name, err in kernels.errors.items():
        print(f"fp8check: kernel {name} not loaded: {err}", file=sys.stderr)
    if not plan.config.isolate:
        print(ISOLATION_OFF, file=sys.stderr)
    planned = sum(b.size for b in batches)
    with JsonlStream(plan.jsonl) as stream, _progress(planned, opts.progress) as bar:
        stream.start(env, planned=planned)
        sink = Sink(stream, bar)
        stop = _run(plan, batches, sink)
        if stop is None:
            stream.end()
    # A result that is missing counts as failed: a run that made fewer than it planned is
    # incomplete, and an incomplete run never passes.
    made_all = stop is None and len(sink.done) == planned
    summary = documents.tally(sink.done, kernels.errors, complete=made_all)
    cmp = _finish(plan, sink.done, summary, env)
    if stop is not None:
        print(_interrupted_line(plan, stop, len(sink.done), planned), file=sys.stderr)
        return exitcodes.interrupted(stop.signum)
    if not made_all:
        print(f"fp8check gate: {len(sink.done)} results made of {planned} planned: the run "
              f"is incomplete and fails", file=sys.stderr)
    if summary["n_passed"] == 0 and not summary["n_failed"]:
        what = "every result was skipped" if summary["n_results"] else "no result was made"
        print(f"fp8check gate: {what}: nothing was checked, which fails", file=sys.stderr)
    c = plan.config
    print(f"fp8check gate: suite={c.suite} profile={c.profile} seed={c.seed} "
          f"layers={','.join(map(str, c.layers))}: "
          f"{summary['n_passed']} passed, {summary['n_failed']} failed, "
          f"{summary['n_skipped']} skipped, {len(kernels.errors)} kernels not loaded")
    for reason, count in sorted(summary["skipped_reasons"].items(), key=lambda kv: -kv[1]):
        print(f"  {count} skipped: {reason}")
    if cmp is not None:
        print(f"fp8check gate: against the baseline: {cmp.text()}")
    regressed = cmp is not None and cmp.regressed
    return exitcodes.PASS if summary["passed"] and not regressed else exitcodes.FAIL
