"""The result model every layer reports in: `Criterion` (one gated check) and
`CaseResult` (one kernel on one case of one layer).  Standard library only, so the
writers, the report, the commands and the test helpers can use it without importing a
validator.

Layers are integers everywhere, in memory and in the JSON document: 0 native
compilation, 1 single op, 2 MoE layer, 3 training, 4 logs of real runs (`LAYER_NAMES`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

# How a criterion's value must relate to its limit.  "|x|<=" bounds the magnitude (a
# two-sided statistic such as bias_z); "==" is for counts that must be zero and for flags.
Relation = Literal["<=", ">=", "|x|<=", "=="]
RELATIONS: tuple[str, ...] = get_args(Relation)

LAYER_NAMES: dict[int, str] = {0: "native compilation", 1: "single op", 2: "MoE layer",
                               3: "training", 4: "logs of real runs"}


def holds(value: Any, relation: str, limit: Any) -> bool:
    """Whether `value relation limit` holds.  A missing (None) or NaN value fails every
    ordered relation: a result that could not be measured never passes."""
    if relation == "==":
        return bool(value == limit)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    if relation == "<=":
        return bool(value <= limit)
    if relation == ">=":
        return bool(value >= limit)
    if relation == "|x|<=":
        return bool(abs(value) <= limit)
    raise ValueError(f"unknown relation {relation!r}; expected one of {RELATIONS}")


@dataclass
class Criterion:
    """One gated check: `value` must stand in `relation` to `limit`.

    Built with `Criterion.check`, which decides `passed` from the relation; the plain
    constructor is for records read back from a document (`passed` as recorded).
    `question` groups criteria ("correctness", "impact", "native", "training", "sanity");
    `meaning` says what the value measures, in words, for messages and the report.
    `n_bad` is how many elements are behind the verdict and `bad_means` what they are;
    `worst` is the worst element: {"index", "out", "ref", "ulp", "bound"}.
    """

    name: str
    question: str
    value: Any
    relation: str | None  # None only for version-1 documents, which did not record it
    limit: Any
    passed: bool
    meaning: str = ""
    n_bad: int | None = None
    bad_means: str | None = None
    worst: dict[str, Any] | None = None

    @classmethod
    def check(cls, name: str, question: str, value: Any, relation: Relation, limit: Any, *,
              meaning: str = "", n_bad: int | None = None, bad_means: str | None = None,
              worst: dict[str, Any] | None = None) -> Criterion:
        """The criterion with `passed = holds(value, relation, limit)`."""
        return cls(name, question, value, relation, limit, holds(value, relation, limit),
                   meaning, n_bad, bad_means, worst)

    def verdict(self) -> str:
        """`value` and what it had to be, in words: "0.93, must be <= 1"."""
        fmt = _shown
        if self.relation is None:
            return f"{fmt(self.value)} (limit {fmt(self.limit)})"
        if self.relation == "|x|<=":
            return f"|{fmt(self.value)}|, must be <= {fmt(self.limit)}"
        if self.relation == "==":
            return f"{fmt(self.value)}, must be {fmt(self.limit)}"
        return f"{fmt(self.value)}, must be {self.relation} {fmt(self.limit)}"

    def brief(self) -> str:
        """Name, value and limit with its relation, in one line: "bound_ratio 3.2 (limit
        <= 1)", "bias_z -7.1 (limit |x| <= 4)", "finite 12 (limit == 0)"."""
        relation = {None: "", "|x|<=": "|x| <= "}.get(self.relation, f"{self.relation} ")
        return f"{self.name} {_shown(self.value)} (limit {relation}{_shown(self.limit)})"

    def to_dict(self) -> dict[str, Any]:
        d = {"question": self.question, "value": jsonable(self.value),
             "relation": self.relation, "limit": jsonable(self.limit), "passed": self.passed}
        if self.meaning:
            d["meaning"] = self.meaning
        if self.n_bad is not None:
            d["n_bad"] = self.n_bad
        if self.bad_means is not None:
            d["bad_means"] = self.bad_means
        if self.worst is not None:
            d["worst"] = jsonable(self.worst)
        return d

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any]) -> Criterion:
        """Inverse of `to_dict` (a version-1 record has no relation: None)."""
        return cls(name, d["question"], d["value"], d.get("relation"), d["limit"],
                   d["passed"], d.get("meaning", ""), d.get("n_bad"), d.get("bad_means"),
                   d.get("worst"))


def _shown(v: Any) -> str:
    """A criterion's value or limit in messages: floats to 4 significant digits."""
    return f"{v:.4g}" if isinstance(v, float) else str(v)


@dataclass
class CaseResult:
    """Outcome of one (kernel, layer, case).  `passed` is None for a skipped case, False
    for a failed criterion or an error.  `seconds` is wall time; `timing` (layer 1) splits
    it into "reference" (building the case's references, on the result that built them:
    kernels of one contract share them), "kernel" (the kernel's calls, first-call
    compilation included) and "metrics" (the rest)."""

    kernel: str
    layer: int
    case: str
    passed: bool | None
    metrics: dict[str, Any] = field(default_factory=dict)
    criteria: list[Criterion] = field(default_factory=list)
    skipped: str | None = None
    error: str | None = None
    repro: str | None = None
    seconds: float = 0.0
    timing: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.layer not in LAYER_NAMES:
            raise ValueError(f"layer {self.layer!r}: expected one of {sorted(LAYER_NAMES)}")

    @property
    def failed_criteria(self) -> list[str]:
        return [c.name for c in self.criteria if not c.passed]

    def decide(self) -> None:
        """Set `passed` from the error and the criteria: an error fails, otherwise every
        criterion must pass."""
        self.passed = self.error is None and all(c.passed for c in self.criteria)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel, "layer": self.layer, "case": self.case,
            "passed": self.passed, "metrics": {k: jsonable(v) for k, v in self.metrics.items()},
            "criteria": {c.name: c.to_dict() for c in self.criteria},
            "failed": self.failed_criteria, "skipped": self.skipped, "error": self.error,
            "repro": self.repro, "seconds": round(self.seconds, 4),
            **({"timing": {k: round(v, 4) for k, v in self.timing.items()}}
               if self.timing else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CaseResult:
        """Inverse of `to_dict`.  Version-1 documents named layer 1 "op"."""
        layer = 1 if d["layer"] == "op" else int(d["layer"])
        crit = [Criterion.from_dict(name, c) for name, c in d.get("criteria", {}).items()]
        return cls(kernel=d["kernel"], layer=layer, case=d["case"], passed=d["passed"],
                   metrics=dict(d.get("metrics", {})), criteria=crit, skipped=d.get("skipped"),
                   error=d.get("error"), repro=d.get("repro"), seconds=d.get("seconds", 0.0),
                   timing=dict(d.get("timing", {})))


def jsonable(v: Any) -> Any:
    """`v` with numpy scalars as Python numbers, tuples as lists and non-finite floats as
    strings ("nan", "inf": JSON has neither), recursively."""
    if getattr(v, "shape", None) == () and hasattr(v, "item"):  # a numpy scalar
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [jsonable(x) for x in v]
    return v
