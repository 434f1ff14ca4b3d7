"""Detection score of the gate: does every seeded bug fail, and every correct kernel pass,
on every seed tried?  A detection gate too: exit 1 when a bug is missed on some seed or
a correct variant fails some case, 0 otherwise (2: bad arguments).

Runs every seeded bug and every correct variant of `tests/seeded_bugs/catalog.py` over
`--seeds N` seeds (0..N-1; `--first-seed S`: S..S+N-1) on EVERY case of the suite (no
stopping at the first failure), layer 1 with the strict profile, references shared
between the kernels of one contract per (case, seed) as the gate shares them
(`ProblemCache`).  A kernel runs only on the cases it supports
(`Contract.skip_reason`), as in the gate.  Prints, per suite:

* bugs caught / bugs: a bug is caught on a seed when some case fails with the criterion
  its `Catch` names; the bugs missed on any seed, with those seeds;
* fragile catches: a bug whose catch rests on a single case on some seed (exactly one
  case fails with the expected criterion), or on a single element (the expected
  criterion's n_bad == 1 on every case that catches it) on some seed;
* false alarms / correct runs (one run: a correct variant over the suite on one seed);
  every failing (variant, seed, case) listed;
* the closest a correct variant came to each threshold (`CLOSEST`: max bound_ratio, max
  error_ratio, max |bias_z| and |bias_z_signed|, min impact SQNR margin in dB), with
  kernel, case and seed;
* wall time.

Suites: those the catalog's bugs name (`--suites` restricts them); correct variants run
on each of them.  `--case-filter REGEX` keeps the cases whose id matches (re.search): the
`full` suite (211 cases at M = 2048) takes hours on 2 cores over 5 seeds, a filter bounds
it.  `--json PATH` writes the same numbers for the closing note.  `--merge A.json B.json
...` joins the `--json` files of runs sharded with `--first-seed` (same suite, other seeds)
into one table, without running anything.

    python benchmarks/detection.py [--seeds 5] [--suites ci] [--case-filter REGEX]
                                   [--json PATH]
    python benchmarks/detection.py --merge ci-s0.json ci-s1.json ... [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from seeded_bugs.catalog import BUGS, CORRECT  # noqa: E402
from seeded_bugs.catch import SeededBug  # noqa: E402

from fp8check.contracts import KernelSpec, contract_of  # noqa: E402
from fp8check.inputs.cases import Case, build_suite  # noqa: E402
from fp8check.layers.op import ProblemCache, skipped_result, validate_case  # noqa: E402
from fp8check.profiles import get_profile  # noqa: E402
from fp8check.results.model import CaseResult  # noqa: E402

PROFILE = "strict"
# criterion -> how a correct kernel's closeness to its limit is measured: "max" of the
# value, "max_abs" of |value|, "min_margin" of value - limit (a ">=" criterion).
CLOSEST: dict[str, str] = {"bound_ratio": "max", "error_ratio": "max", "bias_z": "max_abs",
                           "bias_z_signed": "max_abs", "impact_sqnr_db": "min_margin"}

# results[kernel][seed] = that kernel's layer-1 results over the suite's cases
Results = dict[str, dict[int, list[CaseResult]]]


def run_kernels(
    kernels: Mapping[str, KernelSpec], cases_of: Callable[[int], Sequence[Case]],
    seeds: Sequence[int],
) -> Results:
    """Every kernel on every case of `cases_of(seed)` for every seed.  Cases are the outer
    loop so each (contract, case) reference is built once and shared by the kernels of
    that contract; a reference that fails to build fails every kernel of the contract on
    that case (as in the gate), never silently drops it."""
    profile = get_profile(PROFILE)
    contracts = {spec.contract for spec in kernels.values()}
    out: Results = {name: {} for name in kernels}
    for seed in seeds:
        cache = ProblemCache(capacity=max(1, len(contracts)))
        for name in kernels:
            out[name][seed] = []
        for case in cases_of(seed):
            for name, spec in kernels.items():
                out[name][seed].append(_run_one(spec, case, profile, cache))
    return out


def _run_one(spec: KernelSpec, case: Case, profile: Any, cache: ProblemCache) -> CaseResult:
    if not case.applies_to(spec.contract):
        return skipped_result(spec, case, f"case is not for contract {spec.contract}")
    reason = contract_of(spec.contract).skip_reason(spec, case)
    if reason is not None:
        return skipped_result(spec, case, reason)
    prob = None
    if spec.contract != "quantizer":
        try:
            prob = cache.get(spec.contract, case)[0]
        except Exception as e:  # the reference's failure fails the kernel's case
            return CaseResult(kernel=spec.name, layer=1, case=case.id, passed=False,
                              error=f"reference: {type(e).__name__}: {e}")
    return validate_case(spec, case, profile, prob)


@dataclass
class Closest:
    """The closest a correct kernel came to one criterion's limit."""

    criterion: str
    how: str
    value: float
    kernel: str
    case: str
    seed: int


@dataclass
class SuiteScore:
    """The detection numbers of one suite (see the module docstring)."""

    suite: str
    seeds: list[int]
    n_cases: dict[int, int]
    bugs: list[str]
    missed: dict[str, list[int]] = field(default_factory=dict)  # bug -> seeds missed
    # bug -> {seed: number of cases failing with the expected criterion}
    catching_cases: dict[str, dict[int, int]] = field(default_factory=dict)
    single_case: dict[str, list[int]] = field(default_factory=dict)  # bug -> seeds
    single_element: dict[str, list[int]] = field(default_factory=dict)  # bug -> seeds
    correct: list[str] = field(default_factory=list)
    # (variant, seed, case, failed criteria or the error)
    false_alarms: list[tuple[str, int, str, str]] = field(default_factory=list)
    closest: dict[str, Closest] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def n_caught(self) -> int:
        return len(self.bugs) - len(self.missed)

    @property
    def n_correct_runs(self) -> int:
        return len(self.correct) * len(self.seeds)

    @property
    def n_false_alarm_runs(self) -> int:
        return len({(k, s) for k, s, _, _ in self.false_alarms})

    @property
    def passed(self) -> bool:
        return not self.missed and not self.false_alarms and bool(self.bugs or self.correct)

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite, "seeds": self.seeds, "cases": self.n_cases,
            "bugs_caught": self.n_caught, "bugs": len(self.bugs), "missed": self.missed,
            "catching_cases": self.catching_cases, "single_case": self.single_case,
            "single_element": self.single_element,
            "false_alarm_runs": self.n_false_alarm_runs, "correct_runs": self.n_correct_runs,
            "correct": self.correct,
            "false_alarms": [dict(kernel=k, seed=s, case=c, failed=f)
                             for k, s, c, f in self.false_alarms],
            "closest": {n: vars(c) for n, c in self.closest.items()},
            "seconds": round(self.seconds, 1), "passed": self.passed,
        }


def score(
    suite: str, bugs: Mapping[str, SeededBug], correct: Sequence[str], results: Results,
    seeds: Sequence[int], n_cases: Mapping[int, int], seconds: float = 0.0,
) -> SuiteScore:
    """The suite's detection numbers from `results` (of `run_kernels`) of its bugs and
    correct variants."""
    sc = SuiteScore(suite=suite, seeds=list(seeds), n_cases=dict(n_cases), bugs=sorted(bugs),
                    correct=sorted(correct), seconds=seconds)
    for name in sc.bugs:
        want = bugs[name].catch.criterion
        sc.catching_cases[name] = {}
        for seed in seeds:
            hits = [c for r in results[name][seed] if r.passed is False
                    for c in r.criteria if c.name == want and not c.passed]
            sc.catching_cases[name][seed] = len(hits)
            if not hits:
                sc.missed.setdefault(name, []).append(seed)
            if len(hits) == 1:
                sc.single_case.setdefault(name, []).append(seed)
            if hits and all(c.n_bad == 1 for c in hits):
                sc.single_element.setdefault(name, []).append(seed)
    for name in sc.correct:
        for seed in seeds:
            for r in results[name][seed]:
                if r.passed is False:
                    why = ", ".join(r.failed_criteria) or (r.error or "failed")
                    sc.false_alarms.append((name, seed, r.case, why))
                for c in r.criteria:
                    _closer(sc.closest, c.name, c.value, c.limit, name, r.case, seed)
    return sc


def _closer(best: dict[str, Closest], name: str, value: Any, limit: Any, kernel: str,
            case: str, seed: int) -> None:
    """Record (kernel, case, seed) in `best[name]` when it is closer to the limit."""
    how = CLOSEST.get(name)
    if how is None or not isinstance(value, int | float) or isinstance(value, bool):
        return
    v = {"max": value, "max_abs": abs(value), "min_margin": value - limit}[how]
    old = best.get(name)
    if old is None or (v < old.value if how == "min_margin" else v > old.value):
        best[name] = Closest(name, how, float(v), kernel, case, seed)


def _seeds_text(by_bug: Mapping[str, list[int]]) -> str:
    return "; ".join(f"{b} (seeds {','.join(map(str, s))})" for b, s in by_bug.items()) or "none"


def print_score(sc: SuiteScore) -> None:
    """The suite's numbers as a plain table."""
    cases = ", ".join(f"{n}" for n in sorted(set(sc.n_cases.values())))
    rows = [
        ("suite / seeds / cases per seed", f"{sc.suite} / {len(sc.seeds)} / {cases}"),
        ("bugs caught / bugs (every seed)", f"{sc.n_caught} / {len(sc.bugs)}"),
        ("bugs missed on some seed", _seeds_text(sc.missed)),
        ("catches on a single case", _seeds_text(sc.single_case)),
        ("catches on a single element", _seeds_text(sc.single_element)),
        ("false alarms / correct runs", f"{sc.n_false_alarm_runs} / {sc.n_correct_runs}"),
    ]
    rows += [(f"  false alarm: {k} seed {s}", f"{c}: {f}") for k, s, c, f in sc.false_alarms]
    for name, c in sc.closest.items():
        what = {"max": f"max {name}", "max_abs": f"max |{name}|",
                "min_margin": f"min {name} margin"}[c.how]
        rows.append((f"closest correct: {what}", f"{c.value:.6g} ({c.kernel}, {c.case}, "
                                                 f"seed {c.seed})"))
    rows.append(("wall time", f"{sc.seconds:.0f} s"))
    width = max(len(a) for a, _ in rows)
    print(f"== detection: suite {sc.suite} ==")
    for a, b in rows:
        print(f"  {a:<{width}}  {b}")
    if sc.bugs:  # per bug: how many cases catch it on each seed (0: missed)
        name_w = max(len(b) for b in sc.bugs)
        print("  cases failing with the expected criterion, per seed:")
        print(f"    {'bug':<{name_w}}  " + " ".join(f"s{s:<3}" for s in sc.seeds))
        for b in sc.bugs:
            print(f"    {b:<{name_w}}  " + " ".join(f"{sc.catching_cases[b][s]:<4}"
                                                 for s in sc.seeds))


def from_dict(d: Mapping[str, Any]) -> SuiteScore:
    """The SuiteScore a `--json` file holds (`SuiteScore.to_dict`), seeds as integers."""
    ints = {int(k): v for k, v in d["cases"].items()}
    seeds = [int(x) for x in d["seeds"]]
    # files written before "correct" was recorded ran the whole catalog's variants
    correct = sorted(d.get("correct") or CORRECT)
    if len(correct) * len(seeds) != d["correct_runs"]:
        raise ValueError(f"suite {d['suite']}: {d['correct_runs']} correct runs over "
                         f"{len(seeds)} seeds, but {len(correct)} correct variants")
    sc = SuiteScore(suite=d["suite"], seeds=seeds, n_cases=ints,
                    bugs=sorted(d["catching_cases"]), seconds=d["seconds"], correct=correct)
    sc.missed = {b: [int(x) for x in s] for b, s in d["missed"].items()}
    sc.catching_cases = {b: {int(k): v for k, v in c.items()}
                         for b, c in d["catching_cases"].items()}
    sc.single_case = {b: [int(x) for x in s] for b, s in d["single_case"].items()}
    sc.single_element = {b: [int(x) for x in s] for b, s in d["single_element"].items()}
    sc.false_alarms = [(f["kernel"], int(f["seed"]), f["case"], f["failed"])
                       for f in d["false_alarms"]]
    sc.closest = {n: Closest(**c) for n, c in d["closest"].items()}
    return sc


def merged(scores: Sequence[SuiteScore]) -> SuiteScore:
    """One suite's scores from runs over disjoint seeds (`--first-seed` shards) as one:
    ValueError when they are of different suites, bugs or correct variants, or share a
    seed."""
    first = scores[0]
    out = SuiteScore(suite=first.suite, seeds=[], n_cases={}, bugs=first.bugs,
                     correct=first.correct)
    for sc in scores:
        if (sc.suite, sc.bugs, sc.correct) != (first.suite, first.bugs, first.correct):
            raise ValueError(f"--merge: runs of different suites, bugs or correct variants "
                             f"({first.suite} and {sc.suite})")
        if set(sc.seeds) & set(out.seeds):
            raise ValueError(f"--merge: seed {sorted(set(sc.seeds) & set(out.seeds))[0]} "
                             f"appears twice")
        out.seeds += sc.seeds
        out.n_cases.update(sc.n_cases)
        for b in sc.bugs:
            out.catching_cases.setdefault(b, {}).update(sc.catching_cases[b])
        for table, theirs in ((out.missed, sc.missed), (out.single_case, sc.single_case),
                              (out.single_element, sc.single_element)):
            for b, seeds in theirs.items():
                table.setdefault(b, []).extend(seeds)
        out.false_alarms += sc.false_alarms
        for c in sc.closest.values():
            # a Closest holds the measure itself (a margin for ">="): against limit 0
            _closer(out.closest, c.criterion, c.value, 0.0, c.kernel, c.case, c.seed)
        out.seconds += sc.seconds
    out.seeds.sort()
    return out


def detect_suite(
    suite: str, bugs: Mapping[str, SeededBug], correct: Mapping[str, KernelSpec],
    seeds: Sequence[int], case_filter: str | None = None,
) -> SuiteScore:
    """Run the suite's bugs and every correct variant over `seeds` and score them."""
    pattern = re.compile(case_filter) if case_filter else None

    def cases_of(seed: int) -> list[Case]:
        cases = build_suite(suite, seed)
        return [c for c in cases if pattern is None or pattern.search(c.id)]

    mine = {n: b for n, b in bugs.items() if b.catch.suite == suite}
    kernels = {**{n: b.spec for n, b in mine.items()}, **correct}
    t = time.perf_counter()
    results = run_kernels(kernels, cases_of, seeds)
    n_cases = {s: len(next(iter(results.values()))[s]) if results else 0 for s in seeds}
    return score(suite, mine, list(correct), results, seeds, n_cases,
                 time.perf_counter() - t)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5, help="how many seeds (default 5)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="seeds first..first+N-1 (default 0): shards a long run")
    named = sorted({b.catch.suite for b in BUGS.values()})
    ap.add_argument("--suites", default=",".join(named),
                    help=f"comma-separated, among {','.join(named)} (default: all)")
    ap.add_argument("--case-filter", help="only cases whose id matches this regex")
    ap.add_argument("--kernels", help="only the bugs and correct variants whose name matches "
                                      "this regex (full's production cases take minutes per "
                                      "kernel: e.g. 'int16|vectorised')")
    ap.add_argument("--json", type=Path, help="write the scores here")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                    help="join these --json files of seed shards into one table instead "
                         "of running")
    args = ap.parse_args(argv)
    suites = [s for s in args.suites.split(",") if s]
    if args.seeds < 1:
        ap.error(f"--seeds must be >= 1, got {args.seeds}")
    if not suites or any(s not in named for s in suites):
        ap.error(f"--suites {args.suites!r}: each must be one the catalog names ({named})")
    for flag, pattern in (("--case-filter", args.case_filter), ("--kernels", args.kernels)):
        try:
            re.compile(pattern or "")
        except re.error as e:
            ap.error(f"{flag} {pattern!r}: {e}")
    if args.merge:
        try:
            docs = [json.loads(p.read_text()) for p in args.merge]
            by_suite: dict[str, list[SuiteScore]] = {}
            for d in docs:
                for s in d["suites"]:
                    by_suite.setdefault(s["suite"], []).append(from_dict(s))
            scores = [merged(v) for v in by_suite.values()]
        except (OSError, ValueError, KeyError) as e:
            ap.error(f"--merge: {e}")
        for sc in scores:
            print_score(sc)
        _write(args.json, None, None, scores)
        return 0 if all(s.passed for s in scores) else 1
    bugs = {n: b for n, b in BUGS.items() if re.search(args.kernels or "", n)}
    correct = {n: c for n, c in CORRECT.items() if re.search(args.kernels or "", n)}
    scores = []
    for suite in suites:
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        sc = detect_suite(suite, bugs, correct, seeds, args.case_filter)
        print_score(sc)
        scores.append(sc)
    _write(args.json, args.case_filter, args.kernels, scores)
    return 0 if all(s.passed for s in scores) else 1


def _write(path: Path | None, case_filter: str | None, kernels: str | None,
           scores: Sequence[SuiteScore]) -> None:
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"case_filter": case_filter, "kernels": kernels,
                                    "suites": [s.to_dict() for s in scores]}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
