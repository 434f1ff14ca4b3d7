"""What moved between two gate runs: `compare(base, head)` of two complete results
documents (`fp8check compare`, `fp8check gate --baseline`).

A result is identified by (kernel, layer, case): layer 0's case names its target and
shape, every case id its seed (`RESULT_IDS` in `documents` versions the scheme).  The two
runs must be of the same suite, seed and profile with the same package versions, and each
a whole run (complete, not one shard); otherwise ValueError, one line naming what differs.

For each result in both runs:
* its verdict: passed -> failed (or error) is a regression, failed -> passed an
  improvement, run -> skipped a regression (a check the baseline made is no longer made);
* each criterion in both with an ordered relation: a move toward its limit by more than
  its drift (`fp8check.profiles.DRIFT`: relative, absolute or against the runs' own noise)
  is a regression, a move away by as much an improvement; a value that is not finite
  where the baseline's was is a regression.  "==" criteria (flags, counts that must be 0)
  are judged by their verdict only;  a criterion the baseline checked and the head no
  longer does is a regression;
* layer 1's share of outputs bit-equal to the correctly rounded exact value
  ("exact_fraction", from the ULP histogram): a fall of more than
  `EXACT_FRACTION_DRIFT` is a regression.
A result only in the baseline is a regression (it disappeared: a kernel renamed or
dropped, a case no longer in the suite); a result only in the head, or skipped in the
baseline and run in the head, is listed as new.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fp8check.profiles import EXACT_FRACTION_DRIFT, drift_of
from fp8check.results.documents import RESULT_IDS
from fp8check.results.model import _shown as shown
from fp8check.results.model import jsonable

ResultId = tuple[str, int, str]  # (kernel, layer, case)
Kind = Literal["regression", "improvement"]
# environment keys two comparable runs share (besides the package versions)
_SAME = ("suite", "seed", "profile")


@dataclass(frozen=True)
class Move:
    """One thing that moved between the runs: `what` is a criterion's name, "verdict",
    "exact_fraction" or "result" (the result appeared or disappeared); `base` and `head`
    its values (None: absent); `how` the move in words ("+100% (drift: 50%)")."""

    kernel: str
    layer: int
    case: str
    what: str
    base: Any
    head: Any
    kind: Kind
    how: str

    def line(self) -> str:
        """The move in one line: kernel, layer, case, what, base -> head, how."""
        return (f"{self.kernel} layer {self.layer} {self.case}: {self.what} "
                f"{_shown(self.base)} -> {_shown(self.head)} ({self.how})")

    def to_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "layer": self.layer, "case": self.case,
                "what": self.what, "base": jsonable(self.base), "head": jsonable(self.head),
                "kind": self.kind, "how": self.how}


@dataclass
class Comparison:
    """The moves between a baseline and a head run (module docstring)."""

    base: str  # the documents' names, for messages
    head: str
    regressions: list[Move] = field(default_factory=list)
    improvements: list[Move] = field(default_factory=list)
    new: list[ResultId] = field(default_factory=list)  # results only the head has
    n_compared: int = 0  # results in both runs

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    def verdict(self) -> str:
        """One line: REGRESSED or NO REGRESSION, with the counts."""
        word = "REGRESSED" if self.regressed else "NO REGRESSION"
        return (f"{word}: {len(self.regressions)} regressions, {len(self.improvements)} "
                f"improvements, {len(self.new)} new results, {self.n_compared} results "
                f"compared ({self.base} -> {self.head})")

    def text(self, max_lines: int = 50) -> str:
        """The verdict, then each regression and improvement on its own line (at most
        `max_lines` of them, the count of the rest said), then the new results' count."""
        moves = [f"  regression  {m.line()}" for m in self.regressions]
        moves += [f"  improvement {m.line()}" for m in self.improvements]
        lines = [self.verdict(), *moves[:max_lines]]
        if len(moves) > max_lines:
            lines.append(f"  ... and {len(moves) - max_lines} more (--json, --report)")
        if self.new:
            lines.append(f"  {len(self.new)} new results (not in the baseline), e.g. "
                         f"{' layer '.join(map(str, self.new[0][:2]))} {self.new[0][2]}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base, "head": self.head, "regressed": self.regressed,
                "n_compared": self.n_compared,
                "regressions": [m.to_dict() for m in self.regressions],
                "improvements": [m.to_dict() for m in self.improvements],
                "new": [{"kernel": k, "layer": lay, "case": c} for k, lay, c in self.new]}


def check_whole(doc: Mapping[str, Any], src: str) -> None:
    """ValueError (one line) when the document `src` is not a whole run: incomplete, or
    one shard of a run."""
    s, env = doc["summary"], doc["environment"]
    if not s["complete"]:
        raise ValueError(f"{src} is incomplete ({s.get('incomplete', 'a run that stopped early')})"
                         f": compare complete runs only")
    shard = env.get("shard", "1/1")
    if shard != "1/1":
        raise ValueError(f"{src} is shard {shard} of a run: merge the shards first "
                         f"(fp8check merge)")


def check_same_run(eb: Mapping[str, Any], eh: Mapping[str, Any], base_src: str,
                   head_src: str) -> None:
    """ValueError (one line) naming the first setting in which the environments `eb` and
    `eh` of two runs differ so that their results cannot be matched: suite, seed,
    profile, result-id scheme, a package's version."""
    facts = [(f"{key} differs", eb.get(key), eh.get(key)) for key in _SAME]
    facts.append(("result ids differ in scheme", eb.get("result_ids", RESULT_IDS),
                  eh.get("result_ids", RESULT_IDS)))
    pb, ph = eb.get("packages", {}), eh.get("packages", {})
    facts += [(f"{pkg} version differs", pb.get(pkg), ph.get(pkg)) for pkg in sorted({*pb, *ph})]
    for what, a, b in facts:
        if a != b:
            raise ValueError(f"{what}: {a} in {base_src}, {b} in {head_src}")


def compare(base: Mapping[str, Any], head: Mapping[str, Any], base_src: str = "base",
            head_src: str = "head") -> Comparison:
    """The moves from the baseline document `base` to `head` (module docstring);
    ValueError when they cannot be compared (`check_whole`, `check_same_run`)."""
    check_whole(base, base_src)
    check_whole(head, head_src)
    check_same_run(base["environment"], head["environment"], base_src, head_src)
    by_id = {_ident(r): r for r in base["results"]}
    head_ids = {_ident(r) for r in head["results"]}
    cmp = Comparison(base_src, head_src)
    for r in head["results"]:
        ident = _ident(r)
        if ident not in by_id:
            cmp.new.append(ident)
            continue
        cmp.n_compared += 1
        if by_id[ident]["passed"] is None and r["passed"] is not None:
            cmp.new.append(ident)  # skipped in the baseline, run now: a new check
        for move in _result_moves(by_id[ident], r):
            (cmp.regressions if move.kind == "regression" else cmp.improvements).append(move)
    for ident, r in by_id.items():
        if ident not in head_ids:
            cmp.regressions.append(Move(*ident, "result", _status(r), None, "regression",
                                        "the result disappeared"))
    return cmp


def _ident(r: Mapping[str, Any]) -> ResultId:
    return (r["kernel"], int(r["layer"]), r["case"])


def _status(r: Mapping[str, Any]) -> str:
    if r["passed"] is None:
        return "skipped"
    return "passed" if r["passed"] else ("error" if r.get("error") else "failed")


def _result_moves(b: Mapping[str, Any], h: Mapping[str, Any]) -> list[Move]:
    """The moves of one result between the runs."""
    ident = _ident(h)
    sb, sh = _status(b), _status(h)
    moves = []
    if sb != sh:
        worse = sh == "skipped" or (sb == "passed" and sh in ("failed", "error"))
        better = sb in ("failed", "error") and sh == "passed"
        if worse or better:
            why = h.get("skipped") if sh == "skipped" else (h.get("error")
                                                            or ", ".join(h.get("failed", [])))
            moves.append(Move(*ident, "verdict", sb, sh,
                              "regression" if worse else "improvement", why or sh))
    cb, ch = b.get("criteria", {}), h.get("criteria", {})
    for name, c in cb.items():
        if name not in ch:
            if sh != "skipped":
                moves.append(Move(*ident, name, c.get("value"), None, "regression",
                                  "the baseline checked it, the head no longer does"))
            continue
        move = _criterion_move(ident, name, c, ch[name], h.get("metrics", {}),
                               b.get("metrics", {}))
        if move is not None:
            moves.append(move)
    fb, fh = _exact_fraction(b), _exact_fraction(h)
    if fb is not None and fh is not None and abs(fh - fb) > EXACT_FRACTION_DRIFT:
        moves.append(Move(*ident, "exact_fraction", fb, fh,
                          "regression" if fh < fb else "improvement",
                          f"{(fh - fb) * 100:+.1f} points of outputs equal to RN(exact) "
                          f"(drift: {EXACT_FRACTION_DRIFT * 100:g} points)"))
    return moves


def _criterion_move(ident: ResultId, name: str, cb: Mapping[str, Any],
                    ch: Mapping[str, Any], mh: Mapping[str, Any],
                    mb: Mapping[str, Any]) -> Move | None:
    """The move of one criterion, None when it stayed within its drift."""
    relation = ch.get("relation")
    if relation not in ("<=", ">=", "|x|<="):
        return None  # "==" flags and counts: their verdict is the result's verdict
    vb, vh = _number(cb.get("value")), _number(ch.get("value"))
    if vb is None or vh is None:
        return None
    sign = -1.0 if relation == ">=" else 1.0

    def badness(v: float) -> float:  # larger = closer to (or past) the limit
        return abs(v) if relation == "|x|<=" else sign * v

    if not math.isfinite(vb) or not math.isfinite(vh):
        if math.isfinite(vb) == math.isfinite(vh):
            return None
        kind: Kind = "regression" if math.isfinite(vb) else "improvement"
        return Move(*ident, name, vb, vh, kind, "no longer finite" if kind == "regression"
                    else "finite again")
    d = drift_of(name)
    allowed = max(d.rel * abs(vb), d.abs)
    noise = [_number(m.get(d.noise)) for m in (mb, mh)] if d.noise else []
    if noise and all(s is not None and math.isfinite(s) for s in noise):
        allowed = max(allowed, d.noise_z * math.hypot(*noise))  # type: ignore[arg-type]
    worse = badness(vh) - badness(vb)
    if abs(worse) <= allowed:
        return None
    change = (f"{(vh - vb) / abs(vb) * 100:+.0f}%" if d.rel and vb != 0
              else f"{vh - vb:+.4g}")
    return Move(*ident, name, vb, vh, "regression" if worse > 0 else "improvement",
                f"{change}: {'toward' if worse > 0 else 'away from'} its limit "
                f"{_shown(ch.get('limit'))}, by more than the drift {allowed:.4g}")


def _exact_fraction(r: Mapping[str, Any]) -> float | None:
    """Layer 1's share of outputs bit-equal to RN(exact), None when not measured."""
    hist = r.get("metrics", {}).get("ulp_histogram_vs_exact")
    if not isinstance(hist, dict) or not hist:
        return None
    total = sum(hist.values())
    return hist.get("0", 0) / total if total else None


def _number(v: Any) -> float | None:
    """A criterion's numeric value as a float ("nan", "inf" as JSON writes them), None for
    anything else (a flag, a list, absent)."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return float(v)
    return None


def _shown(v: Any) -> str:
    """A value in a move's line: as criteria show values, "absent" for None."""
    return "absent" if v is None else shown(v)
