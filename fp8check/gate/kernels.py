"""The kernels a gate plan names, loaded: built-ins through the registry, anything else
(`module:attr`, `file.py:attr`) through its contract."""

from __future__ import annotations

from dataclasses import dataclass, field

from fp8check import registry
from fp8check.contracts import KernelSpec, spec_from_target
from fp8check.errors import UsageError, usage_errors
from fp8check.gate.plan import GatePlan


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
    """The plan's kernels, and the built-ins that failed to load (every built-in is run
    when no kernel is named: one broken family is reported, the others still run)."""

    kernels: tuple[LoadedKernel, ...] = ()
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def specs(self) -> list[KernelSpec]:
        return [k.spec for k in self.kernels]

    def by_name(self) -> dict[str, LoadedKernel]:
        return {k.spec.name: k for k in self.kernels}


def load_kernels(plan: GatePlan) -> LoadedKernels:
    """The kernels of `plan` (none when it runs only layers 2-3).  UsageError for a kernel
    the user named that cannot be loaded."""
    cfg = plan.config
    if not {0, 1} & set(cfg.layers):
        return LoadedKernels()
    if not cfg.kernels:
        specs, errors = registry.load_builtins(backend=cfg.backend)
        return LoadedKernels(tuple(LoadedKernel(s, s.name) for s in specs), errors)
    names = [b for n in cfg.kernels
             for b in (registry.family_kernels(n) if n in registry.FAMILIES else [n])]
    plain = plan.options.plain
    loaded = []
    for name in names:
        if name in registry.BUILTIN_KERNELS:
            try:
                loaded.append(LoadedKernel(registry.load_builtin(name, cfg.backend), name))
            except registry.KernelLoadError as e:
                raise UsageError(f"kernel {e}") from e
            continue
        with usage_errors():
            spec = spec_from_target(name, plain.contract, plain.framework, **plain.declared())
        loaded.append(LoadedKernel(spec, name))
    spec_names = [k.spec.name for k in loaded]
    if len(set(spec_names)) != len(spec_names):
        raise UsageError(f"two kernels share a name: {spec_names}")
    return LoadedKernels(tuple(loaded))
