"""Kernel contracts: what a kernel under test is called with and what it must return.

The user's documentation of every contract (call, layouts per framework, what is compared,
what to declare, an example per framework) is `docs/contract.md` (`CONTRACT_DOC`); every
error about a kernel that breaks its contract points there.

A kernel under test is a `KernelSpec`.  The gate hands it numpy arrays converted into the
kernel's framework and converts its result back to numpy (fp8 crosses as the framework's
own fp8 dtype: ml_dtypes for numpy and jax, `torch.float8_e4m3fn` for torch).  After each
call the arguments handed are compared bit for bit with what was passed (`run_kernel`,
`fp8check.integrity`): a kernel must not write into its inputs.

| contract   | call                                                              | returns      |
|------------|-------------------------------------------------------------------|--------------|
| `gmm-fp8`  | fn(lhs_q [M,K] e4m3fn, lhs_scale [M,K/128] f32,                   | [M,N]        |
|            |    rhs_q [G,K,N] e4m3fn, rhs_scale [G,K/128,N/128] f32, gs [G] i32) |            |
| `gmm`      | fn(lhs [M,K] bf16, rhs [G,K,N] bf16, gs [G] i32)                  | [M,N]        |
| `tgmm`     | fn(lhs [M,K] bf16, dy [M,N] bf16, gs [G] i32)                     | [G,K,N]      |
| `quantizer`| fn(x)                                                             | (q, scales)  |

Output dtype: a matmul kernel whose signature takes an `out_dtype` keyword (or **kwargs)
is called with `out_dtype=<the framework's dtype object>` of the case; one that does not
is called without it (`takes_out_dtype`), and on every case its result must have the
case's dtype: a kernel that returns one dtype only declares it (`out_dtypes`, the gate's
`--out-dtypes`), else its other cases fail, saying so.  Rows at or past sum(group_sizes)
are never compared.  A plain function becomes a spec through `spec_from_target(
"module:attr" or "path/file.py:attr", contract, framework)`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np

from fp8check import integrity
from fp8check.integrity import InputChange

CONTRACTS = ("gmm-fp8", "gmm", "tgmm", "quantizer")
FRAMEWORKS = ("numpy", "jax", "torch")
OUT_DTYPES = ("f32", "bf16")
ACCUMS = ("deepgemm", "cublas", "tokamax", "deepgemm-hopper", "deepgemm-blackwell")
QUANT_BLOCKS = ((1, 128), (128, 1), (128, 128))
# The users' documentation of the contracts, relative to the repository root.
CONTRACT_DOC = "docs/contract.md"
# Each contract's arguments by name, as the call passes them (messages name them).
ARG_NAMES = {"gmm-fp8": ("lhs_q", "lhs_scale", "rhs_q", "rhs_scale", "group_sizes"),
             "gmm": ("lhs", "rhs", "group_sizes"), "tgmm": ("lhs", "dy", "group_sizes"),
             "quantizer": ("x",)}

NUMPY_DTYPES: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "e5m2": np.dtype(ml_dtypes.float8_e5m2),
}


@dataclass(frozen=True)
class KernelSpec:
    """A kernel under test and what it declares about itself.

    accum: the reference accumulation recipe the kernel claims to follow bit for bit
        (`gmm-fp8` only; None = "some valid float32 order", checked against the bound).
    acc_unit_roundoff: unit roundoff of the accumulator the kernel declares (2**-24 for
        float32); the error bound uses it.
    out_dtypes: output dtypes it supports ("f32", "bf16"; default both); cases outside
        are skipped, saying so.
    m_align: every group size (and M) must be a multiple of this; cases outside are skipped.
    partial_blocks: a quantizer that takes inputs whose last block is partial (K % 128 != 0;
        rows or columns of 128x128 blocks); False skips the quantizer-only cases, reported.
    deterministic: two calls on the same inputs must give the same bits.
    recipe, block, fmt, in_dtype: the quantizer contract's recipe, block shape, fp8 format
        and the dtype of x it is handed.
    division_ulps: a quantizer whose float32 divisions are approximate (Triton's `/` is
        `div.full.f32`, at most 2 ulps) declares N: each division within N ulps of the
        exact quotient.  Its scales are then checked to be within that of the recipe's
        and its values to be the recipe's from its own scales
        (`fp8check.references.quant_approx`); 0 (the default) demands the recipe's bits.
    backend: where it actually runs ("cpu", "interpret", "native"); fidelity_fixes: the
        interpreter fixes that were active (recorded in the results).
    accum "deepgemm-hopper" declares the Hopper tensor core as the in-block accumulator
        (`references.mma.HOPPER_FP8`): bit-exact to that reference on every case, the bound
        widened by the accumulator's truncation term, bias and error_ratio measured against
        the model; `hopper_interval` is its promotion interval (Triton's
        max_num_imprecise_acc: 32, 64 or 128 K elements per tensor-core chain).
    native_fn: for a JAX kernel whose `fn` runs Pallas in interpret mode, the same kernel
        compiled natively (interpret=False); gate layer 0 compiles it for the TPU chips
        (default: `fn` itself, which for an interpret-mode Pallas kernel is plain XLA, with
        no Mosaic kernel to inspect: the results then show `llo_missing`).
    flushes_subnormals: the kernel flushes float32 subnormal results to zero and reads
        subnormal inputs as zero (FTZ/DAZ).  None (the default) resolves by framework:
        True for jax (XLA:CPU, which runs jax and interpreted Pallas here, and TPUs flush),
        False for numpy and torch (IEEE subnormals in float32 CPU arithmetic; CUDA and
        compiled Triton keep them unless built with ftz).  torch's CPU bf16 GEMM does
        flush (AVX512-BF16): a torch kernel built on it declares True.  A kernel
        declaring it has the bound's flush-to-zero term (`fp8check.underflow`): outputs
        below 2^-126 are then not checked precisely, and the results say so.
    cuda_jobs: for a Triton kernel, (m, k, n, g) -> the `fp8check.native.cuda.CudaJob`s
        (its @triton.jit function, signature, constexprs, num_warps) its launch compiles at
        that problem; gate layer 0 compiles them for sm_90a.  A JAX kernel needs nothing:
        layer 0 compiles `fn` itself for the TPU chips.  Without it a torch kernel's layer 0
        is skipped, saying why.
    """

    name: str
    contract: str
    framework: str
    fn: Callable[..., Any]
    accum: str | None = None
    acc_unit_roundoff: float = 2.0**-24
    out_dtypes: tuple[str, ...] = OUT_DTYPES
    m_align: int = 1
    partial_blocks: bool = True
    deterministic: bool = True
    recipe: str | None = None
    block: tuple[int, int] = (1, 128)
    fmt: str = "e4m3fn"
    in_dtype: str = "f32"
    backend: str = "cpu"
    fidelity_fixes: tuple[str, ...] = ()
    description: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)
    hopper_interval: int = 128
    native_fn: Callable[..., Any] | None = None
    cuda_jobs: Callable[[int, int, int, int], Sequence[Any]] | None = None
    flushes_subnormals: bool | None = None
    division_ulps: int = 0

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("KernelSpec: name must be non-empty")
        if self.contract not in CONTRACTS:
            raise ValueError(
                f"kernel {self.name!r}: unknown contract {self.contract!r}; "
                f"expected one of {', '.join(CONTRACTS)}"
            )
        if self.framework not in FRAMEWORKS:
            raise ValueError(
                f"kernel {self.name!r}: unknown framework {self.framework!r}; "
                f"expected one of {', '.join(FRAMEWORKS)}"
            )
        if not callable(self.fn):
            raise ValueError(f"kernel {self.name!r}: fn is not callable")
        if self.flushes_subnormals is None:  # frozen: resolved once, here
            object.__setattr__(self, "flushes_subnormals", self.framework == "jax")
        elif not isinstance(self.flushes_subnormals, bool):
            raise ValueError(f"kernel {self.name!r}: flushes_subnormals must be a bool or None")
        if self.accum is not None and self.accum not in ACCUMS:
            raise ValueError(
                f"kernel {self.name!r}: unknown accum {self.accum!r}; "
                f"expected one of {', '.join(ACCUMS)} or None"
            )
        if self.accum is not None and self.contract != "gmm-fp8":
            raise ValueError(f"kernel {self.name!r}: accum is only meaningful for gmm-fp8")
        if self.hopper_interval not in (32, 64, 128) or (
                self.hopper_interval != 128 and self.accum != "deepgemm-hopper"):
            raise ValueError(f"kernel {self.name!r}: hopper_interval must be 32, 64 or 128, "
                             f"and only with accum deepgemm-hopper")
        bad = [d for d in self.out_dtypes if d not in OUT_DTYPES]
        if not self.out_dtypes or bad:
            raise ValueError(
                f"kernel {self.name!r}: out_dtypes {self.out_dtypes!r} must be a non-empty "
                f"subset of {OUT_DTYPES}"
            )
        if self.m_align < 1:
            raise ValueError(f"kernel {self.name!r}: m_align must be >= 1, got {self.m_align}")
        if not 0.0 < self.acc_unit_roundoff < 1.0:
            raise ValueError(f"kernel {self.name!r}: acc_unit_roundoff must be in (0, 1)")
        if self.contract == "quantizer":
            if self.recipe is None:
                raise ValueError(f"quantizer {self.name!r}: declare its recipe "
                                 "(the gate's --recipe)")
            if tuple(self.block) not in QUANT_BLOCKS:
                raise ValueError(
                    f"quantizer {self.name!r}: block {self.block} not one of {QUANT_BLOCKS}"
                )
            if self.in_dtype not in ("f32", "bf16"):
                raise ValueError(f"quantizer {self.name!r}: in_dtype must be f32 or bf16")
            from fp8check.references.quant_approx import check_division_ulps

            try:
                check_division_ulps(self.recipe, self.division_ulps)
            except ValueError as e:
                raise ValueError(f"quantizer {self.name!r}: {e}") from None
        elif self.division_ulps != 0:
            raise ValueError(f"kernel {self.name!r}: division_ulps is only meaningful for "
                             f"a quantizer")


# --- framework conversion -----------------------------------------------------------------


def framework_dtype(framework: str, name: str) -> Any:
    """The dtype object named `name` ("f32", "bf16", "e4m3fn", ...) in `framework`."""
    if framework == "numpy":
        return NUMPY_DTYPES[name].type
    if framework == "jax":
        import jax.numpy as jnp

        return jnp.dtype(NUMPY_DTYPES[name])
    if framework == "torch":
        import torch

        return {
            "f32": torch.float32,
            "bf16": torch.bfloat16,
            "e4m3fn": torch.float8_e4m3fn,
            "e5m2": torch.float8_e5m2,
        }[name]
    raise ValueError(f"unknown framework {framework!r}")


def _torch_from_numpy(a: np.ndarray) -> Any:
    import torch

    a = np.ascontiguousarray(a)
    # torch.from_numpy rejects ml_dtypes arrays: move the bits and reinterpret them.
    narrow = {
        NUMPY_DTYPES["bf16"]: (np.uint16, torch.bfloat16),
        NUMPY_DTYPES["e4m3fn"]: (np.uint8, torch.float8_e4m3fn),
        NUMPY_DTYPES["e5m2"]: (np.uint8, torch.float8_e5m2),
    }
    if a.dtype in narrow:
        bits, tdtype = narrow[a.dtype]
        return torch.from_numpy(a.view(bits).copy()).view(tdtype)
    return torch.from_numpy(a.copy())


def _torch_to_numpy(t: Any) -> np.ndarray:
    import torch

    t = t.detach().cpu().contiguous()
    narrow = {
        torch.bfloat16: (torch.int16, NUMPY_DTYPES["bf16"]),
        torch.float8_e4m3fn: (torch.uint8, NUMPY_DTYPES["e4m3fn"]),
        torch.float8_e5m2: (torch.uint8, NUMPY_DTYPES["e5m2"]),
    }
    if t.dtype in narrow:
        bits, ndtype = narrow[t.dtype]
        return t.view(bits).numpy().view(ndtype).copy()
    return t.numpy().copy()


def to_framework(a: np.ndarray, framework: str) -> Any:
    """Convert a numpy / ml_dtypes array into `framework`'s array type, bits preserved,
    in memory that `a` does not share (a write into the result never reaches `a`)."""
    if framework == "numpy":
        return np.array(a, copy=True)
    if framework == "jax":
        import jax.numpy as jnp

        # a private copy: on the CPU a jax array may alias the host buffer it came from
        return jnp.asarray(np.array(a, copy=True))
    if framework == "torch":
        return _torch_from_numpy(a)
    raise ValueError(f"unknown framework {framework!r}")


def to_numpy(x: Any) -> np.ndarray:
    """Convert a numpy, jax or torch array back to numpy / ml_dtypes, bits preserved."""
    if type(x).__module__.startswith("torch"):
        return _torch_to_numpy(x)
    return np.asarray(x)


def _array_or_as_is(x: Any) -> Any:
    """`to_numpy(x)` for an array of any framework; anything else (None, a list, a
    number) as it is, so that a wrong return is reported as what it was."""
    is_array = hasattr(x, "__array__") or type(x).__module__.startswith("torch")
    return to_numpy(x) if is_array else x


def takes_out_dtype(fn: Callable[..., Any]) -> bool:
    """Whether a matmul kernel `fn` is called with `out_dtype=`: its signature has a
    parameter `out_dtype` that can be passed by keyword, or a **kwargs.  A callable whose
    signature cannot be read (some C extensions, an object whose `__signature__` raises)
    is called without it."""
    try:
        params = inspect.signature(fn).parameters.values()
    except Exception:  # reading a user's object may run its code
        return False
    return any(p.kind is p.VAR_KEYWORD or (p.name == "out_dtype" and p.kind in (
        p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)) for p in params)


def out_dtype_kwargs(spec: KernelSpec, out_dtype: str | None) -> dict[str, Any]:
    """The keywords a call of `spec.fn` passes for `out_dtype`: `out_dtype=<framework
    dtype>` when one is asked for and the kernel takes it (`takes_out_dtype`), else none."""
    if out_dtype is not None and takes_out_dtype(spec.fn):
        return {"out_dtype": framework_dtype(spec.framework, out_dtype)}
    return {}


@dataclass(frozen=True)
class KernelCall:
    """One call of a kernel: its output (as `call_kernel` returns it) and the arguments
    it wrote into (`fp8check.integrity`; empty when none)."""

    out: Any
    inputs_changed: tuple[InputChange, ...]


def run_kernel(spec: KernelSpec, args: Sequence[np.ndarray],
               out_dtype: str | None = None) -> KernelCall:
    """Call `spec.fn` on numpy `args` converted to its framework, with `out_dtype=` the
    framework's dtype named `out_dtype` when given and the kernel takes it
    (`takes_out_dtype`); arrays come back as numpy (a quantizer's (values, scales) as a
    tuple of them).  Whatever else the kernel returns comes back as it is.  After the call
    every argument handed is compared bit for bit with `args` (which the kernel cannot
    reach: `to_framework` copies), named as its contract names it (`ARG_NAMES`).
    Exceptions from the kernel propagate."""
    fargs = [to_framework(a, spec.framework) for a in args]
    names = ARG_NAMES[spec.contract]
    if len(names) != len(args):
        names = tuple(f"argument {i}" for i in range(len(args)))
    out, changed = integrity.watched_call(
        spec.fn, fargs, names, out_dtype_kwargs(spec, out_dtype),
        before=[integrity.raw_bits(a, copy=False) for a in args])
    if spec.contract == "quantizer" and isinstance(out, tuple | list):
        out = tuple(_array_or_as_is(o) for o in out)
    else:
        out = _array_or_as_is(out)
    return KernelCall(out, tuple(changed))


def call_kernel(spec: KernelSpec, args: Sequence[np.ndarray], out_dtype: str | None = None) -> Any:
    """`run_kernel(spec, args, out_dtype).out`: the output alone."""
    return run_kernel(spec, args, out_dtype).out


# --- plain functions as kernels -----------------------------------------------------------


def _package_root(path: Path) -> Path:
    """The first directory above `path` without an `__init__.py`: where its top package
    (or the file itself) is importable from, as pytest's rootdir-less "prepend" import
    mode has it."""
    root = path.parent
    while (root / "__init__.py").is_file() and root.parent != root:
        root = root.parent
    return root


def _import_file(path: Path, shown: str) -> ModuleType:
    """Import the kernel file `path` (absolute) as pytest would: its package root goes first
    on sys.path, so that it imports its sibling modules (and a package its own modules)
    without PYTHONPATH; a file inside a package is imported by its dotted name, so that
    its relative imports work, a top-level file under a name of its own, so that two
    kernel files of one name in different directories do not collide.  `shown`: the
    path as the user gave it, for messages."""
    root = _package_root(path)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    parts = path.relative_to(root).with_suffix("").parts
    if len(parts) > 1:
        name = ".".join(parts)
        module = _imported(shown, lambda: importlib.import_module(name))
        where = getattr(module, "__file__", None)
        if where is None or Path(where).resolve() != path:
            raise ValueError(f"kernel file {shown!r} imports as module {name!r}, which is "
                             f"already imported from {where}: rename its package")
        return module
    mod_name = f"fp8check_user_{path.stem}_{abs(hash(path)):x}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import kernel file {shown!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    loader = spec.loader
    _imported(shown, lambda: loader.exec_module(module))
    return module


def _imported(shown: str, run: Callable[[], Any]) -> Any:
    """`run()`, the import of the user's `shown`: whatever it raises is a one-line
    ValueError naming it."""
    try:
        return run()
    except Exception as e:  # a user's module may raise anything on import
        raise ValueError(f"importing {shown!r} failed: {type(e).__name__}: {e}") from e


def load_target(target: str) -> Any:
    """Resolve "package.module:attr" or "path/to/file.py:attr" to the object it names.
    A file's package root goes on sys.path first (`_import_file`); a module is imported
    from sys.path as it is.

    Raises ValueError with a one-line message when it cannot be found or imported.
    """
    mod_part, sep, attr = target.rpartition(":")
    if not sep or not mod_part or not attr:
        raise ValueError(f"kernel target {target!r} must look like module:attr or file.py:attr")
    if mod_part.endswith(".py"):
        path = Path(mod_part)
        if not path.is_file():
            raise ValueError(f"kernel file {mod_part!r} does not exist")
        module = _import_file(path.resolve(), mod_part)
    else:
        module = _imported(mod_part, lambda: importlib.import_module(mod_part))
    try:
        return getattr(module, attr)
    except AttributeError as e:
        raise ValueError(f"{mod_part!r} has no attribute {attr!r}") from e


def spec_from_target(
    target: str, contract: str | None, framework: str | None, **declared: Any
) -> KernelSpec:
    """A KernelSpec for `--kernel target`: the target may already be a KernelSpec (then
    contract, framework and every `declared` field must agree with it: a declaration is
    never silently ignored), or a plain function, which needs contract and framework.
    ValueError (one line, pointing to `CONTRACT_DOC`) when it is not a kernel."""
    try:
        return _spec_of(target, contract, framework, declared)
    except ValueError as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]  # one line: a user's text
        raise ValueError(f"{first} (the kernel contract: {CONTRACT_DOC})") from e


def _spec_of(target: str, contract: str | None, framework: str | None,
             declared: dict[str, Any]) -> KernelSpec:
    obj = load_target(target)
    if isinstance(obj, KernelSpec):  # declarations on the command line must agree with it
        for key, val in {"contract": contract, "framework": framework, **declared}.items():
            if val is not None and getattr(obj, key) != val:
                raise ValueError(f"{target}: --{key.replace('_', '-')} {val} disagrees with "
                                 f"the spec's {getattr(obj, key)}")
        return obj
    if not callable(obj):
        raise ValueError(f"{target} is neither a KernelSpec nor a function")
    if contract is None or framework is None:
        raise ValueError(f"{target} is a plain function: pass --contract and --framework")
    return KernelSpec(
        name=target, contract=contract, framework=framework, fn=obj, **declared
    )
