"""Built-in kernels by name, registered lazily by import path.

Each entry names a factory `module:attr` with signature `(backend: str) -> KernelSpec`,
the one beside the kernel in its family's module (e.g. `fp8check.kernels.pallas.gmm:
fp8_spec`), where backend is "auto", "interpret" or "native" (the factory resolves "auto"
and raises ValueError for a backend it cannot run on).  Nothing is imported until a kernel
is asked for, so the gate works before and without any one kernel family: a family whose
import fails is reported by name with its error, and the other kernels still run.
"""

from __future__ import annotations

from fp8check.contracts import CONTRACT_DOC, KernelSpec, load_target

BACKENDS = ("auto", "interpret", "native")

BUILTIN_KERNELS: dict[str, str] = {
    "pallas-fp8": "fp8check.kernels.pallas.gmm:fp8_spec",
    "pallas-bf16": "fp8check.kernels.pallas.gmm:bf16_spec",
    "pallas-tgmm": "fp8check.kernels.pallas.tgmm:tgmm_spec",
    "pallas-quantizer": "fp8check.kernels.pallas.quantize:quantizer_spec",
    "triton-fp8": "fp8check.kernels.triton.gmm:fp8_spec",
    "triton-fp8-hopper": "fp8check.kernels.triton.gmm:fp8_hopper_spec",
    "triton-fp8-blackwell": "fp8check.kernels.triton.gmm:fp8_blackwell_spec",
    "triton-fp8-padded": "fp8check.kernels.triton.padding:fp8_padded_spec",
    "triton-tgmm": "fp8check.kernels.triton.backward:tgmm_spec",
    "triton-quantizer": "fp8check.kernels.triton.quantize:quantizer_spec",
    "megablox-bf16": "fp8check.kernels.adapters.megablox:megablox_bf16",
    "tokamax-fp8": "fp8check.kernels.adapters.tokamax:tokamax_fp8",
    "torchao-fp8": "fp8check.kernels.adapters.torchao:torchao_fp8",
    "torchao-grouped-emulated": "fp8check.kernels.adapters.torchao:torchao_grouped_emulated",
    "torchao-act-quant": "fp8check.kernels.adapters.torchao:torchao_act_quant",
    "torchao-weight-quant": "fp8check.kernels.adapters.torchao:torchao_weight_quant",
}

# Third-party adapters whose packages come with the `adapters` extra: run when named
# (`--kernel tokamax-fp8`), not by a gate that names no kernel, so that gate neither needs
# the extra nor answers for other projects' kernels (what they do: docs/peers.md,
# "Third-party kernels").
OPT_IN_KERNELS = ("tokamax-fp8", "torchao-fp8", "torchao-grouped-emulated",
                  "torchao-act-quant", "torchao-weight-quant")

# Kernel families: the project's own kernels, each with a MoE layer (layers 2 and 3).
FAMILIES = ("pallas", "triton")


def default_kernels() -> list[str]:
    """The built-in kernels a gate that names none runs: all but OPT_IN_KERNELS."""
    return [n for n in BUILTIN_KERNELS if n not in OPT_IN_KERNELS]


def check_family(family: str) -> None:
    """ValueError unless `family` is one of FAMILIES."""
    if family not in FAMILIES:
        raise ValueError(f"unknown kernel family {family!r}; expected one of {FAMILIES}")


def unknown_kernel(name: str) -> str:
    """The one-line message for a kernel name that is neither built-in nor a family."""
    return (f"unknown kernel {name!r}; built-ins: {', '.join(BUILTIN_KERNELS)}, families: "
            f"{', '.join(FAMILIES)} (a kernel of your own: FILE.py:NAME or module:NAME, "
            f"see {CONTRACT_DOC})")


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
        raise ValueError(unknown_kernel(name))
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
    """Load `names` (default: every built-in kernel but the opt-in adapters).  Returns
    (specs, {name: error}) so one broken family never stops the others."""
    specs: list[KernelSpec] = []
    errors: dict[str, str] = {}
    for name in names if names is not None else default_kernels():
        try:
            specs.append(load_builtin(name, backend))
        except KernelLoadError as e:
            errors[name] = str(e)
    return specs, errors
