"""False-alarm and detection rates of every loss-curve criterion (`fp8check.measures.curves`) at a
profile's limits, on synthetic run pairs, measured in one run (seeded numpy, one core).

    python benchmarks/curves.py [--pairs 1000] [--profile strict] [--seed 0]

A pair is two runs of one loss trend L(t) = L_inf + (L_0 - L_inf) (1 + t / tau)^-alpha
(L_inf in [1.8, 2.6], L_0 in [7, 11], alpha in [0.4, 1], tau in [1%, 5%] of the run) with
independent multiplicative noise, y = L (1 + r e), e ~ N(0, 1): the run lengths (logged
points) 100, 300 and 1000 and noise levels r = 0.3%, 1% and 2% (the step-to-step spread of
LLM losses at production batch sizes is ~0.5-1%; an average over a log interval is
less) are drawn in turn, and every scenario gets `--pairs` of them:

* `null`: nothing injected (the two runs differ only by their noise): a failure is a
  false alarm;
* `gap 2%`: the candidate 2% higher from the end of warm-up (the first 10% of the points)
  on;
* `drift 4%`: the candidate's gap growing linearly from 0 at the end of warm-up to 4% at
  the last point;
* `spike 10s` / `spike 6s`: one candidate point after warm-up raised by 10 (6) noise
  deviations (r * L(t)), at a uniformly drawn point.

The seed test (`seed_test`, `--seeds` pairs per trial, each seed its own trend) is
measured on the same scenarios with its verdict "fp8-worse" (what layer 3 gates on).
Rows: each criterion's failure rate and "any" (the verdict of `compare`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from fp8check.measures.curves import (
    Curve,
    CurveLimits,
    auc,
    compare,
    get_limits,
    rel_gap,
    seed_test,
)

LENGTHS = (100, 300, 1000)
NOISE = (0.003, 0.01, 0.02)
WARMUP = 0.1

Inject = Callable[[np.random.Generator, np.ndarray, np.ndarray, float], np.ndarray]


def trend(rng: np.random.Generator, n: int) -> np.ndarray:
    """A loss trend of n logged points (module docstring)."""
    lo, hi = rng.uniform(1.8, 2.6), rng.uniform(7, 11)
    alpha, tau = rng.uniform(0.4, 1.0), rng.uniform(0.01, 0.05) * n
    return lo + (hi - lo) * (1 + np.arange(n) / tau) ** -alpha


def _after(n: int) -> int:
    return int(WARMUP * n)


def gap(size: float) -> Inject:
    def f(rng: np.random.Generator, y: np.ndarray, t: np.ndarray, r: float) -> np.ndarray:
        out = y.copy()
        out[_after(len(y)):] *= 1 + size
        return out
    return f


def drift(size: float) -> Inject:
    def f(rng: np.random.Generator, y: np.ndarray, t: np.ndarray, r: float) -> np.ndarray:
        w = _after(len(y))
        out = y.copy()
        out[w:] *= 1 + size * np.linspace(0, 1, len(y) - w)
        return out
    return f


def spike(sigmas: float) -> Inject:
    def f(rng: np.random.Generator, y: np.ndarray, t: np.ndarray, r: float) -> np.ndarray:
        at = int(rng.integers(_after(len(y)), len(y)))
        out = y.copy()
        out[at] += sigmas * r * t[at]
        return out
    return f


SCENARIOS: dict[str, Inject | None] = {
    "null": None, "gap 2%": gap(0.02), "drift 4%": drift(0.04),
    "spike 10s": spike(10), "spike 6s": spike(6),
}


def pair(rng: np.random.Generator, i: int, inject: Inject | None
         ) -> tuple[np.ndarray, np.ndarray]:
    """(candidate, baseline) of the i-th pair of a scenario."""
    n, r = LENGTHS[i % len(LENGTHS)], NOISE[(i // len(LENGTHS)) % len(NOISE)]
    t = trend(rng, n)
    base = t * (1 + r * rng.standard_normal(n))
    cand = t * (1 + r * rng.standard_normal(n))
    return (cand if inject is None else inject(rng, cand, t, r)), base


def run(pairs: int, limits: CurveLimits, seeds: int, rng: np.random.Generator
        ) -> dict[str, dict[str, float]]:
    """scenario -> criterion -> failure rate."""
    out: dict[str, dict[str, float]] = {}
    for name, inject in SCENARIOS.items():
        fails: dict[str, int] = {}
        for i in range(pairs):
            cand, base = pair(rng, i, inject)
            cmp = compare(Curve.of(cand), Curve.of(base), limits)
            for c in cmp.criteria:
                fails[c.name] = fails.get(c.name, 0) + (not c.passed)
            fails["any"] = fails.get("any", 0) + (not cmp.passed)
        worse = 0
        for i in range(pairs):
            gaps, aucs = [], []
            for _ in range(seeds):
                cand, base = pair(rng, i, inject)
                x = np.arange(len(base))
                gaps.append(float(rel_gap(auc(x, cand), auc(x, base))))
                aucs.append(auc(x, base))
            worse += seed_test(gaps, aucs, limits.max_auc_gap).verdict == "fp8-worse"
        fails["seed_test"] = worse
        out[name] = {k: v / pairs for k, v in fails.items()}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=1000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--profile", default="strict")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rates = run(args.pairs, get_limits(args.profile), args.seeds,
                np.random.default_rng(args.seed))
    rows = list(next(iter(rates.values())))
    print(f"fp8check curves, profile {args.profile}: failure rate per criterion over "
          f"{args.pairs} synthetic pairs per scenario (lengths {LENGTHS}, noise "
          f"{', '.join(f'{r:.1%}' for r in NOISE)}); seed_test: {args.pairs} trials of "
          f"{args.seeds} seeds")
    print("null = false-alarm rate; the other columns = detection rate")
    print(f"{'criterion':<16}" + "".join(f"{s:>11}" for s in rates))
    for row in rows:
        print(f"{row:<16}" + "".join(f"{rates[s][row]:>11.1%}" for s in rates))
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
