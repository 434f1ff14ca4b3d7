"""Accuracy gate of the tiling search: a tiling runs the gate's layer-1 checks, on a proxy.

Every runnable candidate is checked with the `explore` profile during the search and the
finalists with `strict` (`fp8check.profiles`), through `fp8check.layers.op.validate_case`,
the same validator as `fp8check gate`.  Interpret mode cannot run the production shape, so
the check runs on a scaled-down PROXY that keeps what the tiling means:

* the same (tm, tk, tn), hence the same subchannel count tk / 128;
* the shape's own K and N (in the phase's letters), so the K grid loop and the N tiles run
  exactly as often as at the real shape; only when the reference work of that proxy would
  exceed `REFERENCE_MAC_BUDGET` (the exact references cost ~40 ns per multiply-add), K and
  N shrink to 2 tk and 2 tn (tk / tn when the tile is the whole dimension);
* M and G clamped: 2 tm rows in min(G, 3) groups of tm/2 + 5, 0 and tm/2 + 11 rows (the
  empty one only when G >= 3): one group inside the first row tile, one straddling into
  the second (so 1-2 row tiles per group, a tile holding two groups), and tm - 16 rows past
  sum(group_sizes).  The proxy depends on tm but not on tk or tn, so the references of
  one proxy serve every candidate with that tm.

Each phase runs through the contract that states it: fwd is `gmm-fp8` (bit-exact against
the declared accumulation on the exact-partials case), tgmm is `tgmm`, and dgrad
dX = dY @ W^T is `gmm` with the contracted dimension first: the kernel gets rhs [G, k, n]
transposed into dgrad's W [G, n, k].  Verdicts are cached per (phase, tiling, profile) and
references per proxy case.  `kernel_for` is the hook that supplies a phase's KernelSpec for
a tiling (tests plant a kernel that mishandles one tiling through it).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

from fp8check import registry
from fp8check.contracts import GMM, GMM_FP8, NUMPY_DTYPES, TGMM, KernelSpec, contract_of
from fp8check.inputs.cases import DEFAULT_RECIPE, EXACT_RECIPE, Case, case_id
from fp8check.kernels.pallas.tiling import Tiling
from fp8check.layers.op import ProblemCache, validate_case
from fp8check.profiles import get_profile
from fp8check.results import CaseResult
from fp8check.tune.shapes import GmmShape
from fp8check.tune.space import PHASE_DTYPES

KernelFor = Callable[[str, Tiling], KernelSpec]
OUT_DTYPE_NAMES = {dt: name for name, dt in NUMPY_DTYPES.items()}

# (distribution, exact partials) of the proxy cases, all in the phase's training output
# dtype (one compile per tiling).  explore runs one case per tiling: for fwd the bit-exact
# family (every 128-wide partial exact, so the output must equal the declared accumulation
# bit for bit: the sharpest check there is), for dgrad / tgmm (no accumulation recipe
# declared) a normal case against the error bound.  strict adds a normal case (fwd) and
# heavy-tailed rows with another seed.
EXPLORE_CASES: dict[str, tuple[tuple[str, bool], ...]] = {
    "fwd": (("smallint", True),),
    "dgrad": (("normal", False),),
    "tgmm": (("normal", False),),
}
STRICT_EXTRA: dict[str, tuple[tuple[str, bool], ...]] = {
    "fwd": (("normal", False), ("lognormal-rows", False)),
    "dgrad": (("lognormal-rows", False),),
    "tgmm": (("lognormal-rows", False),),
}
STRICT_SEED = 1
# Multiply-adds of one proxy case's exact reference above which K and N are scaled down
# (~20 s of `references.gmm` exact accumulation).
REFERENCE_MAC_BUDGET = 2**29
# Contract and built-in kernel whose declarations (accum, out dtypes, fidelity fixes) a
# phase inherits.
PHASE_CONTRACT = {"fwd": (GMM_FP8, "pallas-fp8"), "dgrad": (GMM, "pallas-bf16"),
                  "tgmm": (TGMM, "pallas-tgmm")}


@dataclass(frozen=True)
class Proxy:
    """The scaled-down problem a tiling is checked on, in the phase's tiling letters."""

    m: int
    k: int
    n: int
    group_sizes: tuple[int, ...]

    def to_dict(self) -> dict:
        return {"m": self.m, "k": self.k, "n": self.n, "g": len(self.group_sizes),
                "group_sizes": list(self.group_sizes)}


def proxy_for(phase: str, tiling: Tiling, shape: GmmShape) -> Proxy:
    """The proxy problem of `tiling` (module docstring); `tiling` must be valid at `shape`."""
    tm, tk, tn = tiling
    _, k, n = shape.phase_dims(phase)
    first, second = tm // 2 + 5, tm // 2 + 11
    sizes = {1: (first + second,), 2: (first, second)}.get(min(shape.g, 3), (first, 0, second))
    if sum(sizes) * k * n > REFERENCE_MAC_BUDGET:
        k, n = (tk if tk == k else 2 * tk), (tn if tn == n else 2 * tn)
    return Proxy(m=2 * tm, k=k, n=n, group_sizes=sizes)


@dataclass
class Verdict:
    """Outcome of one accuracy check: passed only if every proxy case passed."""

    phase: str
    tiling: Tiling
    profile: str
    passed: bool
    proxy: Proxy
    results: list[CaseResult]

    @property
    def reason(self) -> str:
        """One line: which cases failed and on what (empty when passed)."""
        bad = [r for r in self.results if r.passed is False]
        return "; ".join(f"{r.case}: {r.error or ', '.join(r.failed_criteria)}" for r in bad)

    def to_dict(self) -> dict:
        return {"phase": self.phase, "tiling": list(self.tiling), "profile": self.profile,
                "passed": self.passed, "proxy": self.proxy.to_dict(), "reason": self.reason,
                "results": [r.to_dict() for r in self.results]}


def _dgrad_as_gmm(dgrad_fn, lhs, rhs, group_sizes, **kwargs):
    """dgrad under the `gmm` contract: rhs [G, k, n] is W^T, so W = rhs transposed."""
    import jax.numpy as jnp

    return dgrad_fn(lhs, jnp.swapaxes(rhs, 1, 2), group_sizes, **kwargs)


class PallasKernels:
    """The default `kernel_for`: the project's Pallas kernel of each phase at a tiling."""

    def __init__(self, backend: str = "auto") -> None:
        self.backend = backend
        self._bases: dict[str, KernelSpec] = {}  # built-in specs load (and self-test) once

    @property
    def loaded(self) -> list[KernelSpec]:
        """The built-in specs loaded so far (their backend and interpreter fixes)."""
        return list(self._bases.values())

    def _base(self, phase: str) -> KernelSpec:
        if phase not in self._bases:
            self._bases[phase] = registry.load_builtin(PHASE_CONTRACT[phase][1], self.backend)
        return self._bases[phase]

    def __call__(self, phase: str, tiling: Tiling) -> KernelSpec:
        base = self._base(phase)
        fn = base.fn
        if phase == "dgrad":
            from fp8check.kernels.pallas.gmm import dgrad

            interpret = base.backend == "interpret"
            fn = functools.partial(_dgrad_as_gmm, functools.partial(dgrad, interpret=interpret))
        return dataclasses.replace(
            base, name=f"pallas-{phase}@{'x'.join(map(str, tiling))}",
            fn=functools.partial(fn, tiling=tuple(tiling)),
            description=f"pallas {phase} kernel, tiling {tuple(tiling)}")


class AccuracyChecker:
    """Explore / strict verdicts of (phase, tiling) at `shape`'s proxies, cached."""

    def __init__(self, shape: GmmShape, kernel_for: KernelFor | None = None,
                 backend: str = "auto") -> None:
        self.shape = shape
        self.kernel_for = kernel_for if kernel_for is not None else PallasKernels(backend)
        self._verdicts: dict[tuple[str, Tiling, str], Verdict] = {}
        self._problems = ProblemCache(capacity=64)  # proxies repeat across tilings

    def cases(self, phase: str, tiling: Tiling, profile: str) -> list[Case]:
        """The proxy cases `profile` runs for (phase, tiling)."""
        proxy = proxy_for(phase, tiling, self.shape)
        plan = [(d, e, 0) for d, e in EXPLORE_CASES[phase]]
        if profile == "strict":
            plan += [(d, e, STRICT_SEED) for d, e in STRICT_EXTRA[phase]]
        out = OUT_DTYPE_NAMES[PHASE_DTYPES[phase][1]]
        g = len(proxy.group_sizes)
        return [Case(id=case_id(f"tune-{phase}", proxy.m, proxy.k, proxy.n, g, "proxy", dist,
                                out, seed),
                     suite="tune", aspect=f"tune-{phase}", m=proxy.m, k=proxy.k, n=proxy.n,
                     g=g, pattern="proxy", distribution=dist, out_dtype=out, seed=seed,
                     group_sizes=proxy.group_sizes,
                     recipe=EXACT_RECIPE if exact else DEFAULT_RECIPE, exact_partials=exact)
                for dist, exact, seed in plan]

    def check(self, phase: str, tiling: Tiling, profile: str) -> Verdict:
        """Run (or recall) `profile`'s checks of `tiling` for `phase`."""
        tiling = Tiling(*tiling)
        key = (phase, tiling, profile)
        if key not in self._verdicts:
            prof = get_profile(profile)
            spec = self.kernel_for(phase, tiling)
            contract = PHASE_CONTRACT[phase][0]
            if contract_of(spec.contract) is not contract:
                raise ValueError(f"kernel for {phase} has contract {spec.contract!r}, "
                                 f"expected {contract.name!r}")
            from fp8check.reports.plotdata import plot_data

            results = [validate_case(spec, case, prof,
                                     self._problems.get(contract.name, case)[0],
                                     plots=plot_data)
                       for case in self.cases(phase, tiling, profile)]
            passed = bool(results) and all(r.passed is True for r in results)
            self._verdicts[key] = Verdict(phase, tiling, profile, passed,
                                          proxy_for(phase, tiling, self.shape), results)
        return self._verdicts[key]


def proxy_note(shape: GmmShape) -> str:
    """What every output says about where accuracy was checked."""
    return (f"accuracy is checked on scaled-down proxy shapes, not at {shape.label()}: same "
            "(tm, tk, tn) and subchannels, the shape's K and N (2 tk / 2 tn above the "
            "reference budget), 2 tm rows in min(G, 3) groups (1-2 row tiles each, one "
            "straddling, an empty middle group, rows past the groups)")

