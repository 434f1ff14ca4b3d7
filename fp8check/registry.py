"""Built-in kernels by name, registered lazily by import path.

Each entry names a factory `module:attr` with signature `(backend: str) -> KernelSpec`
(for the Pallas and Triton families: adapters below that read the metadata each family
exposes, `kernels.pallas.specs.kernel_specs` and `kernels.triton.meta.KERNELS`),
where backend is "auto", "interpret" or "native" (the factory resolves "auto" and raises
ValueError for a backend it cannot run on).  Nothing is imported until a kernel is asked
for, so the gate works before and without any one kernel family: a family whose import
fails is reported by name with its error, and the other kernels still run.
"""

from __future__ import annotations

import functools

from fp8check.contracts import KernelSpec, load_target

BACKENDS = ("auto", "interpret", "native")

BUILTIN_KERNELS: dict[str, str] = {
    "pallas-fp8": "fp8check.registry:pallas_fp8",
    "pallas-bf16": "fp8check.registry:pallas_bf16",
    "pallas-tgmm": "fp8check.registry:pallas_tgmm",
    "pallas-quantizer": "fp8check.registry:pallas_quantizer",
    "triton-fp8": "fp8check.registry:triton_fp8",
    "triton-fp8-hopper": "fp8check.registry:triton_fp8_hopper",
    "triton-fp8-padded": "fp8check.registry:triton_fp8_padded",
    "triton-tgmm": "fp8check.registry:triton_tgmm",
    "triton-quantizer": "fp8check.registry:triton_quantizer",
    "megablox-bf16": "fp8check.kernels.adapters.megablox:megablox_bf16",
}

# Kernel families: the project's own kernels, each with a MoE layer (layers 2 and 3).
FAMILIES = ("pallas", "triton")


def check_family(family: str) -> None:
    """ValueError unless `family` is one of FAMILIES."""
    if family not in FAMILIES:
        raise ValueError(f"unknown kernel family {family!r}; expected one of {FAMILIES}")


def family_attr(family: str, module: str, attr: str):
    """`fp8check.kernels.<family>.<module>.<attr>`, imported only now (importing the Triton
    family sets its interpreter up); ValueError for an unknown family."""
    check_family(family)
    import importlib

    return getattr(importlib.import_module(f"fp8check.kernels.{family}.{module}"), attr)


def family_kernels(family: str) -> list[str]:
    """The built-in kernel names of `family` (`--kernel pallas` means all of them)."""
    return [n for n in BUILTIN_KERNELS if n.startswith(family + "-")]


# Output dtypes per contract of the project's own kernels (their `out_dtype=` keyword).
_OUT_DTYPES = {"gmm-fp8": ("f32", "bf16"), "gmm": ("f32", "bf16"), "tgmm": ("f32", "bf16")}


def _pallas_spec(key: str, name: str, backend: str) -> KernelSpec:
    """A Pallas kernel from `fp8check.kernels.pallas.specs.kernel_specs` (default tiling)."""
    from fp8check.kernels.pallas import specs
    from fp8check.kernels.pallas.fidelity import check_interpreter
    from fp8check.kernels.pallas.validation import use_interpret

    interpret = None if backend == "auto" else backend == "interpret"
    resolved = "interpret" if use_interpret(interpret) else "native"
    if backend == "native" and resolved != "native":
        raise ValueError("--backend native needs a TPU")
    meta = {d["name"]: d for d in specs.kernel_specs(resolved == "interpret")}[key]
    fn = meta["fn"]
    fixes = check_interpreter().fixes if resolved == "interpret" else ()
    return KernelSpec(
        name=name, contract=meta["contract"], framework=meta["framework"],
        fn=functools.partial(fn, interpret=resolved == "interpret"),
        accum=meta["accum"], out_dtypes=_OUT_DTYPES[meta["contract"]],
        m_align=meta["m_align"], deterministic=meta["deterministic"], backend=resolved,
        fidelity_fixes=tuple(fixes), description=f"{key}, default tiling",
    )


def _pallas_quantizer(backend: str) -> KernelSpec:
    """The jax deepgemm 1x128 quantizer; it runs on jax's default device."""
    import jax

    from fp8check.kernels.pallas.quantize import quantize_deepgemm

    return KernelSpec(
        name="pallas-quantizer", contract="quantizer", framework="jax",
        fn=functools.partial(quantize_deepgemm, block=(1, 128)), recipe="deepgemm",
        block=(1, 128), backend=jax.default_backend(),
    )


def _with_dot_model(fn, model: str):
    """`fn` run with the Triton interpreter's fp8 tl.dot following `model`."""
    from fp8check.kernels.triton.interpret import dot_model

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with dot_model(model):
            return fn(*args, **kwargs)

    return run


def _triton_spec(key: str, name: str, backend: str, dot: str = "exact") -> KernelSpec:
    """A Triton kernel from `fp8check.kernels.triton.meta.KERNELS`.  `dot`: in interpret
    mode, what fp8 tl.dot computes ("exact" partials, or the "hopper" tensor-core model,
    `interpret.dot_model`); compiled, the FP8 GEMMs declare the Hopper accumulator their
    own sm_90a TTGIR shows (`meta.hopper_interval`)."""
    from fp8check.kernels import triton as family
    from fp8check.kernels.triton.interpret import interpret_mode

    resolved = "interpret" if interpret_mode() else "native"
    if backend != "auto" and backend != resolved:
        raise ValueError(f"Triton runs {resolved} in this process (TRITON_INTERPRET is read "
                         "when triton is first imported)")
    meta = family.KERNELS[key]
    record = family.ensure_fidelity()
    fn = getattr(family, meta.attr)
    extra: dict = {}
    fixes = tuple(record.active_fixes)
    if meta.contract == "quantizer":
        extra = {"recipe": meta.recipe, "block": (1, 128)}
    elif resolved == "native" or dot == "hopper":
        interval = meta.hopper_interval() if resolved == "native" else 128
        extra = {"out_dtypes": _OUT_DTYPES[meta.contract], "accum": "deepgemm-hopper",
                 "hopper_interval": interval}
        if resolved == "interpret":
            fn, fixes = _with_dot_model(fn, "hopper"), fixes + ("dot_hopper_mma",)
    else:
        extra = {"out_dtypes": _OUT_DTYPES[meta.contract], "accum": meta.accum}
    return KernelSpec(
        name=name, contract=meta.contract, framework="torch", fn=fn,
        m_align=meta.m_align, deterministic=meta.deterministic, backend=resolved,
        fidelity_fixes=fixes, description=key + (" (Hopper tensor-core dot)"
                                                 if dot == "hopper" else ""), **extra,
    )


pallas_fp8 = functools.partial(_pallas_spec, "pallas-gmm-fp8", "pallas-fp8")
pallas_bf16 = functools.partial(_pallas_spec, "pallas-gmm-bf16", "pallas-bf16")
pallas_tgmm = functools.partial(_pallas_spec, "pallas-tgmm", "pallas-tgmm")
pallas_quantizer = _pallas_quantizer
# The Triton family's kernels (`kernels.triton.meta.KERNELS`) by their gate names; layer 0
# reports its builds under the same names.
TRITON_GATE_NAMES = {"triton-gmm-fp8": "triton-fp8", "triton-gmm-fp8-padded": "triton-fp8-padded",
                     "triton-tgmm-bf16": "triton-tgmm",
                     "triton-quantize-deepgemm": "triton-quantizer"}
triton_fp8 = functools.partial(_triton_spec, "triton-gmm-fp8", "triton-fp8")
triton_fp8_hopper = functools.partial(_triton_spec, "triton-gmm-fp8", "triton-fp8-hopper",
                                      dot="hopper")
triton_fp8_padded = functools.partial(_triton_spec, "triton-gmm-fp8-padded", "triton-fp8-padded")
triton_tgmm = functools.partial(_triton_spec, "triton-tgmm-bf16", "triton-tgmm")
triton_quantizer = functools.partial(_triton_spec, "triton-quantize-deepgemm", "triton-quantizer")


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
