"""The kernels a gate plan names, loaded: built-ins through the registry, anything else
(`module:attr`, `file.py:attr`) through its contract."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fp8check import registry
from fp8check.contracts import KernelSpec, contract_of, load_target, spec_from_target
from fp8check.errors import UsageError, usage_errors
from fp8check.gate.plan import GatePlan
from fp8check.layers.moe.user import UserKernels


@dataclass(frozen=True)
class LoadedKernel:
    """A kernel and what `--kernel` named it by (its repro's `--kernel`)."""

    spec: KernelSpec
    origin: str

    @property
    def builtin(self) -> bool:
        return self.origin in registry.BUILTIN_KERNELS


@dataclass(frozen=True)
class LoadedKernels:
    """The plan's kernels, the built-ins that failed to load (every built-in is run
    when no kernel is named: one broken family is reported, the others still run), and
    the user's kernels layers 2 and 3 build a MoE layer around (`GatePlan.layer_kernel`)."""

    kernels: tuple[LoadedKernel, ...] = ()
    errors: dict[str, str] = field(default_factory=dict)
    layers: UserKernels | None = None

    @property
    def specs(self) -> list[KernelSpec]:
        return [k.spec for k in self.kernels]

    def by_name(self) -> dict[str, LoadedKernel]:
        return {k.spec.name: k for k in self.kernels}


def load_kernels(plan: GatePlan) -> LoadedKernels:
    """The kernels of `plan` (for layers 0-1 none when it runs only layers 2-3) and the
    user's layer kernels.  UsageError for a kernel the user named that cannot be loaded or
    does not fit the layers it is named for."""
    loaded = _layer01_kernels(plan)
    if plan.layer_kernel is None:
        return loaded
    by_origin = {k.origin: k.spec for k in loaded.kernels}
    forward = by_origin.get(plan.layer_kernel) or _load_user(plan.layer_kernel, plan)
    bare = plan.options.bare
    with usage_errors():
        layers = UserKernels(
            forward, dgrad=_backward_kernel(bare.dgrad, "dgrad", forward.framework),
            tgmm=_backward_kernel(bare.tgmm, "tgmm", forward.framework),
            dgrad_name=bare.dgrad or "dgrad", tgmm_name=bare.tgmm or "tgmm")
    return LoadedKernels(loaded.kernels, loaded.errors, layers)


def _backward_kernel(target: str | None, role: str, framework: str
                     ) -> Callable[..., Any] | None:
    """The function `--tgmm` / `--dgrad` names (a bare function, or a KernelSpec in the
    forward's framework of a contract that is that backward kernel,
    `Contract.layer_backward`); ValueError otherwise."""
    if target is None:
        return None
    obj = load_target(target)
    if isinstance(obj, KernelSpec):
        if contract_of(obj.contract).layer_backward != role or obj.framework != framework:
            raise ValueError(f"--{role} {target} is a {obj.framework} {obj.contract} "
                             f"KernelSpec; layers 2 and 3 need a {framework} {role}")
        return obj.fn
    if not callable(obj):
        raise ValueError(f"--{role} {target} is not a function")
    return obj


def _load_user(name: str, plan: GatePlan) -> KernelSpec:
    """The KernelSpec of a user's `--kernel` target, with the command line's declarations."""
    bare = plan.options.bare
    with usage_errors():
        return spec_from_target(name, bare.contract, bare.framework, **bare.declared())


def _layer01_kernels(plan: GatePlan) -> LoadedKernels:
    """The kernels layers 0 and 1 run (none when neither runs)."""
    cfg = plan.config
    if not {0, 1} & set(cfg.layers):
        return LoadedKernels()
    if not cfg.kernels:
        specs, errors = registry.load_builtins(backend=cfg.backend)
        return LoadedKernels(tuple(LoadedKernel(s, s.name) for s in specs), errors)
    names = [b for n in cfg.kernels
             for b in (registry.family_kernels(n) if n in registry.FAMILIES else [n])]
    loaded = []
    for name in names:
        if name in registry.BUILTIN_KERNELS:
            try:
                loaded.append(LoadedKernel(registry.load_builtin(name, cfg.backend), name))
            except registry.KernelLoadError as e:
                raise UsageError(f"kernel {e}") from e
            continue
        loaded.append(LoadedKernel(_load_user(name, plan), name))
    spec_names = [k.spec.name for k in loaded]
    if len(set(spec_names)) != len(spec_names):
        raise UsageError(f"two kernels share a name: {spec_names}")
    return LoadedKernels(tuple(loaded))
