"""What a search leaves behind: the per-round table, the `"tune"` JSON section, and the
final tiling as a snippet the kernels accept (`tiling=` / `gmm_fp8_train(tilings=)`).

JSON section (under the results document's top-level `"tune"` key):
`{"shape", "seed", "fitness", "cost_model", "accuracy_proxy", "baseline": {phase:
candidate}, "rounds": [{"round", "candidates": [candidate...], "best": {phase: candidate
or null}}], "best": {phase: [tm, tk, tn] or null}, "best_detail": {phase: candidate or null},
"finalists": [{"phase", "tiling",
"passed", "verdict"}]}`, a candidate being `Candidate.to_dict()` (phase, tiling,
subchannels, status, reason, origin, cost_model_us, fitness_us, speedup, model).
"""

from __future__ import annotations

import json
from dataclasses import asdict

from fp8check.tune.accuracy import proxy_note
from fp8check.tune.cost_model import MACHINE
from fp8check.tune.search import Candidate, PhaseSearch, SearchResult


def _brief(c: Candidate | None) -> dict | None:
    return None if c is None else c.to_dict()


def tune_section(res: SearchResult) -> dict:
    """The `"tune"` section of the JSON document (module docstring)."""
    states = res.phases
    n_rounds = max(len(s.rounds) for s in states.values())
    rounds = []
    for r in range(n_rounds):
        cands = [c.to_dict() for s in states.values() if r < len(s.rounds) for c in s.rounds[r]]
        best = {ph: _brief(s.best_by_round[r]) if r < len(s.best_by_round) else None
                for ph, s in states.items()}
        rounds.append({"round": r, "candidates": cands, "best": best})
    return {
        "shape": res.shape._asdict(), "seed": res.seed, "fitness": res.fitness_label,
        "cost_model": {"machine": asdict(MACHINE),
                       "note": "analytic model with assumed constants, not a measurement"},
        "accuracy_proxy": proxy_note(res.shape),
        "baseline": {ph: s.baseline.to_dict() for ph, s in states.items()},
        "rounds": rounds,
        "best": {ph: None if s.best is None else list(s.best.tiling) for ph, s in states.items()},
        "best_detail": {ph: _brief(s.best) for ph, s in states.items()},
        "finalists": [_finalist(c) for s in states.values() for c in s.finalists],
    }


def _finalist(c: Candidate) -> dict:
    assert c.strict is not None  # the search checks every finalist on the strict profile
    return {"phase": c.phase, "tiling": list(c.tiling), "passed": c.strict.passed,
            "verdict": c.strict.to_dict()}


def _row(c: Candidate) -> str:
    t = "x".join(map(str, c.tiling))
    us = "-" if c.fitness_us is None else f"{c.fitness_us:10.1f}"
    sp = "-" if c.speedup is None else f"{c.speedup:6.2f}x"
    note = c.reason if c.status != "accepted" else c.origin
    return f"  {c.phase:5s} {t:15s} {c.tiling.num_subchannels:4d}  {c.status:10s} {us:>10s} " \
           f"{sp:>8s}  {note}"


def round_table(rnd: int, states: dict[str, PhaseSearch], fitness_label: str) -> str:
    """The table of round `rnd`: its candidates, then the best so far per phase."""
    unit = "model us" if fitness_label.startswith("cost-model") else "us"
    lines = [f"round {rnd} (fitness: {fitness_label}; speedup over the tk=128 baseline)",
             f"  {'phase':5s} {'tiling':15s} {'sub':>4s}  {'status':10s} {unit:>10s} "
             f"{'speedup':>8s}  origin / reason"]
    for s in states.values():
        lines += [_row(c) for c in s.rounds[rnd]]
        if not s.rounds[rnd]:
            lines.append(f"  {s.phase:5s} (no new runnable tiling near the survivors)")
    best = []
    for ph, s in states.items():
        b = s.best_by_round[rnd]
        best.append(f"{ph} " + ("none accepted" if b is None else
                                f"{'x'.join(map(str, b.tiling))} {b.speedup:.2f}x"))
    lines.append("  best so far: " + " | ".join(best))
    return "\n".join(lines)


def finalists_table(res: SearchResult) -> str:
    lines = ["finalists (strict profile, on the accuracy proxies):"]
    for s in res.phases.values():
        for c in s.finalists:
            # finalists were accepted (so costed) and checked on the strict profile
            assert c.strict is not None and c.cost is not None
            mark = "PASS" if c.strict.passed else f"FAIL {c.strict.reason}"
            nat = c.native or {}
            compiled = (f"  [{nat['chip']}: VMEM {nat['vmem_bytes'] / 2**20:.2f} MiB, "
                        f"vmatmul {nat.get('llo_vmatmul')}, VPU {nat.get('llo_vector_alu')}, "
                        f"ld/st {nat.get('llo_vector_load')}/{nat.get('llo_vector_store')}]"
                        if nat else "")
            lines.append(f"  {s.phase:5s} {'x'.join(map(str, c.tiling)):15s} "
                         f"{c.speedup:6.2f}x  model {c.cost.total_us:9.1f} us{compiled}  "
                         f"{mark}")
        if not s.finalists:
            lines.append(f"  {s.phase:5s} no accepted tiling")
    return "\n".join(lines)


def snippet(res: SearchResult) -> str:
    """Python lines that use the best tilings as the kernels' per-phase settings."""
    best = {ph: tuple(s.best.tiling) for ph, s in res.phases.items() if s.best is not None}
    if not best:
        return "# no phase has a tiling that passed the strict check"
    lines = [f"# tuned for {res.shape.label()} (seed {res.seed}, fitness: {res.fitness_label})",
             f"TUNED_TILINGS = {json.dumps({p: list(t) for p, t in best.items()})}"]
    calls = {"fwd": "gmm_fp8(..., tiling={})", "dgrad": "dgrad(..., tiling={})",
             "tgmm": "tgmm(..., tiling={})"}
    lines += [f"# {calls[p].format(t)}" for p, t in best.items()]
    if len(best) == 3:
        lines.append("# gmm_fp8_train(..., tilings=({}, {}, {}))".format(
            best["fwd"], best["dgrad"], best["tgmm"]))
    return "\n".join(lines)
