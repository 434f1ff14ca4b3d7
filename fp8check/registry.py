"""Built-in kernels by name, registered lazily by import path.

Each entry names a factory `module:attr` with signature `(backend: str) -> KernelSpec`,
the one beside the kernel in its family's module (e.g. `fp8check.kernels.pallas.gmm:
fp8_spec`), where backend is "auto", "interpret" or "native" (the factory resolves "auto"
and raises ValueError for a backend it cannot run on).  Nothing is imported until a kernel
is asked for, so the gate works before and without any one kernel family: a family whose
import fails is reported by name with its error, and the other kernels still run.
"""

from __future__ import annotations

from fp8check.contracts import KernelSpec, load_target

BACKENDS = ("auto", "interpret", "native")

BUILTIN_KERNELS: dict[str, str] = {
    "pallas-fp8": "fp8check.kernels.pallas.gmm:fp8_spec",
    "pallas-bf16": "fp8check.kernels.pallas.gmm:bf16_spec",
    "pallas-tgmm": "fp8check.kernels.pallas.tgmm:tgmm_spec",
    "pallas-quantizer": "fp8check.kernels.pallas.quantize:quantizer_spec",
    "triton-fp8": "fp8check.kernels.triton.gmm:fp8_spec",
    "triton-fp8-hopper": "fp8check.kernels.triton.gmm:fp8_hopper_spec",
    "triton-fp8-padded": "fp8check.kernels.triton.padding:fp8_padded_spec",
    "triton-tgmm": "fp8check.kernels.triton.backward:tgmm_spec",
    "triton-quantizer": "fp8check.kernels.triton.quantize:quantizer_spec",
    "megablox-bf16": "fp8check.kernels.adapters.megablox:megablox_bf16",
}

# Kernel families: the project's own kernels, each with a MoE layer (layers 2 and 3).
FAMILIES = ("pallas", "triton")


def check_family(family: str) -> None:
    """ValueError unless `family` is one of FAMILIES."""
    if family not in FAMILIES:
        raise ValueError(f"unknown kernel family {family!r}; expected one of {FAMILIES}")


def family_kernels(family: str) -> list[str]:
    """The built-in kernel names of `family` (`--kernel pallas` means all of them)."""
    return [n for n in BUILTIN_KERNELS if n.startswith(family + "-")]


class KernelLoadError(Exception):
    """A built-in kernel could not be imported or built (message: one line, the cause)."""


def load_builtin(name: str, backend: str = "auto") -> KernelSpec:
    """The KernelSpec of built-in kernel `name` on `backend`.

    ValueError for an unknown name or backend (bad usage); KernelLoadError when the kernel's
    module is missing, fails to import, or its factory fails.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    if name not in BUILTIN_KERNELS:
        raise ValueError(
            f"unknown kernel {name!r}; built-in kernels: {', '.join(BUILTIN_KERNELS)} "
            "(or pass module:attr / file.py:attr)"
        )
    try:
        factory = load_target(BUILTIN_KERNELS[name])
        spec = factory(backend)
    except Exception as e:  # any failure inside a kernel family is that family's problem
        raise KernelLoadError(f"{name}: {type(e).__name__}: {e}".splitlines()[0]) from e
    if not isinstance(spec, KernelSpec):
        raise KernelLoadError(f"{name}: factory returned {type(spec).__name__}, not KernelSpec")
    if spec.name != name:
        raise KernelLoadError(f"{name}: factory returned a spec named {spec.name!r}")
    return spec


def load_builtins(
    names: list[str] | None = None, backend: str = "auto"
) -> tuple[list[KernelSpec], dict[str, str]]:
    """Load `names` (default: every built-in kernel).  Returns (specs, {name: error}) so
    one broken family never stops the others."""
    specs: list[KernelSpec] = []
    errors: dict[str, str] = {}
    for name in names if names is not None else list(BUILTIN_KERNELS):
        try:
            specs.append(load_builtin(name, backend))
        except KernelLoadError as e:
            errors[name] = str(e)
    return specs, errors
