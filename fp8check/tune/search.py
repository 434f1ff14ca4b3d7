"""The evolutionary tiling search: per phase, mutate the fastest accurate survivors.

Each phase (fwd, tgmm, dgrad) is searched independently (its reduction dimension differs,
so its best tiling does too).  Round 0 evaluates the start tilings: the baseline (tk = 128),
the kernels' current default and any `extra_starts`.  Every later round draws `population`
new runnable tilings per phase, each one directed mutation (`space.MUTATIONS`) of a
survivor chosen with rank weights 1, 1/2, 1/3...; the survivors are the `population`
fastest accepted tilings seen so far (elitist).  A candidate is

* `rejected` when it breaks a hard constraint (`space.rejection`): it never runs;
* `inaccurate` when it runs but fails the `explore` accuracy check;
* `accepted` otherwise, with its fitness: the cost model's microseconds, or the measured
  ones on a TPU.

After the rounds the fastest accepted tilings are checked with `strict` (`finalists` of
them, then further down the ranking until one passes); the best of a phase is the fastest
that passed strict, so a fast but inaccurate tiling is never reported as best.  All
randomness comes from `numpy.random.default_rng((seed, phase index))`: the same seed gives
the same search.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fp8check.kernels.pallas.tiling import PHASES, Tiling
from fp8check.tune.accuracy import AccuracyChecker, Verdict
from fp8check.tune.cost_model import FITNESS_LABEL, Cost, phase_cost
from fp8check.tune.native import NativeCheck
from fp8check.tune.shapes import GmmShape
from fp8check.tune.space import MUTATIONS, baseline_tiling, default_tiling, mutate, rejection

# Draws per wanted runnable candidate before a round gives up (the space near the
# survivors may be exhausted or all over the VMEM budget).
ATTEMPTS_PER_CANDIDATE = 12

Fitness = Callable[[str, Tiling], float]


@dataclass
class Candidate:
    """One evaluated tiling of one phase."""

    phase: str
    tiling: Tiling
    origin: str
    round: int
    status: str = "rejected"  # "accepted" | "rejected" | "inaccurate"
    reason: str = ""
    cost: Cost | None = None
    fitness_us: float | None = None
    speedup: float | None = None
    strict: Verdict | None = None
    native: dict | None = None  # compiled figures for the search's chip (tune.native)

    def to_dict(self) -> dict:
        return {"phase": self.phase, "tiling": list(self.tiling),
                "subchannels": self.tiling.num_subchannels, "status": self.status,
                "reason": self.reason, "origin": self.origin,
                "cost_model_us": None if self.cost is None else round(self.cost.total_us, 4),
                "fitness_us": None if self.fitness_us is None else round(self.fitness_us, 4),
                "speedup": None if self.speedup is None else round(self.speedup, 4),
                "model": None if self.cost is None else self.cost.to_dict(),
                "native": self.native}


@dataclass
class PhaseSearch:
    """The state and history of one phase's search."""

    phase: str
    baseline: Candidate
    seen: dict[Tiling, Candidate] = field(default_factory=dict)
    rounds: list[list[Candidate]] = field(default_factory=list)
    best_by_round: list[Candidate | None] = field(default_factory=list)
    finalists: list[Candidate] = field(default_factory=list)
    best: Candidate | None = None

    def ranked(self) -> list[Candidate]:
        """Accepted candidates, fastest first (ties: the earlier one)."""
        acc = [c for c in self.seen.values() if c.status == "accepted"]
        return sorted(acc, key=_fitness_us)


def _fitness_us(c: Candidate) -> float:
    """The fitness of a candidate that ran (every accepted one did)."""
    assert c.fitness_us is not None
    return c.fitness_us


@dataclass
class SearchResult:
    """A finished search: per phase its history, finalists and best (None: none passed)."""

    shape: GmmShape
    seed: int
    fitness_label: str
    phases: dict[str, PhaseSearch]


class TilingSearch:
    """Runs the search of module docstring for `shape`; `checker` supplies the accuracy
    verdicts, `fitness` the speed (default: the cost model's total microseconds)."""

    def __init__(self, shape: GmmShape, checker: AccuracyChecker, *, rounds: int,
                 population: int, seed: int, finalists: int = 2,
                 fitness: Fitness | None = None, fitness_label: str = FITNESS_LABEL,
                 phases: tuple[str, ...] = PHASES,
                 extra_starts: dict[str, list[Tiling]] | None = None,
                 native_check: NativeCheck | None = None,
                 on_round: Callable[[int, dict[str, PhaseSearch]], None] | None = None) -> None:
        if rounds < 0 or population < 1 or finalists < 1:
            raise ValueError(f"need rounds >= 0, population >= 1, finalists >= 1; got "
                             f"{rounds}, {population}, {finalists}")
        bad = [p for p in phases if p not in PHASES]
        if bad or not phases:
            raise ValueError(f"phases {list(phases)}: expected a subset of {PHASES}")
        self.shape, self.checker = shape, checker
        self.rounds, self.population, self.seed, self.n_finalists = (
            rounds, population, seed, finalists)
        self.fitness = fitness or (lambda ph, t: phase_cost(ph, t, shape).total_us)
        self.fitness_label = fitness_label
        self.phases = phases
        self.extra_starts = extra_starts or {}
        self.native_check = native_check
        self.on_round = on_round

    def _evaluate(self, phase: str, tiling: Tiling, origin: str,
                  rnd: int, baseline_us: float | None) -> Candidate:
        cand = Candidate(phase, tiling, origin, rnd)
        why = rejection(phase, tiling, self.shape)
        if why is None and self.native_check is not None:
            why, cand.native = self.native_check.check(phase, tiling)
        if why is not None:
            cand.reason = why
            return cand
        cand.cost = phase_cost(phase, tiling, self.shape)
        cand.fitness_us = self.fitness(phase, tiling)
        ref_us = cand.fitness_us if baseline_us is None else baseline_us
        cand.speedup = ref_us / cand.fitness_us
        verdict = self.checker.check(phase, tiling, "explore")
        cand.status = "accepted" if verdict.passed else "inaccurate"
        cand.reason = "" if verdict.passed else f"explore: {verdict.reason}"
        return cand

    def _start_round(self, phase: str) -> PhaseSearch:
        base_t = baseline_tiling(phase, self.shape)
        base = self._evaluate(phase, base_t, "baseline (tk = 128)", 0, None)
        if base.fitness_us is None:
            raise ValueError(f"{phase}: baseline tiling {tuple(base_t)} is invalid at "
                             f"{self.shape.label()}: {base.reason}")
        state = PhaseSearch(phase, base)
        state.seen[base_t] = base
        starts = [(default_tiling(phase, self.shape), "kernel default")]
        starts += [(Tiling(*t), "given start") for t in self.extra_starts.get(phase, [])]
        first = [base]
        for t, origin in starts:
            if t not in state.seen:
                cand = self._evaluate(phase, t, origin, 0, base.fitness_us)
                state.seen[t] = cand
                first.append(cand)
        self._close_round(state, first)
        return state

    def _close_round(self, state: PhaseSearch, cands: list[Candidate]) -> None:
        state.rounds.append(cands)
        ranked = state.ranked()
        state.best_by_round.append(ranked[0] if ranked else None)

    def _mutation_round(self, state: PhaseSearch, rng: np.random.Generator, rnd: int) -> None:
        survivors = state.ranked()[: self.population]
        new: list[Candidate] = []
        ops = sorted(MUTATIONS)
        weights = 1.0 / np.arange(1, len(survivors) + 1)
        attempts = 0
        while (survivors and sum(c.status != "rejected" for c in new) < self.population
               and attempts < ATTEMPTS_PER_CANDIDATE * self.population):
            attempts += 1
            parent = survivors[rng.choice(len(survivors), p=weights / weights.sum())]
            op = ops[rng.integers(len(ops))]
            child = mutate(parent.tiling, op, state.phase, self.shape)
            if child in state.seen:
                continue
            cand = self._evaluate(state.phase, child,
                                  f"{op} of {tuple(parent.tiling)}", rnd,
                                  state.baseline.fitness_us)
            state.seen[child] = cand
            new.append(cand)
        self._close_round(state, new)

    def _finalize(self, state: PhaseSearch) -> None:
        for cand in state.ranked():
            if len(state.finalists) >= self.n_finalists and state.best is not None:
                break
            cand.strict = self.checker.check(state.phase, cand.tiling, "strict")
            state.finalists.append(cand)
            if cand.strict.passed and state.best is None:
                state.best = cand

    def run(self) -> SearchResult:
        states = {ph: self._start_round(ph) for ph in self.phases}
        if self.on_round:
            self.on_round(0, states)
        rngs = {ph: np.random.default_rng((self.seed, PHASES.index(ph))) for ph in self.phases}
        for rnd in range(1, self.rounds + 1):
            for ph in self.phases:
                self._mutation_round(states[ph], rngs[ph], rnd)
            if self.on_round:
                self.on_round(rnd, states)
        for state in states.values():
            self._finalize(state)
        return SearchResult(self.shape, self.seed, self.fitness_label, states)
