"""Triton interpreter mode: the fix of its conversions and dots, and the dot models.

Why this exists: a kernel validated under ``TRITON_INTERPRET=1`` is validated against the
interpreter's arithmetic, not the GPU's.  Triton 3.9's interpreter (``triton/runtime/
interpreter.py``) gets these wrong, each verified on this machine by `fidelity.self_test`:

* ``fp8_downcast``: ``x.to(tl.float8e4nv)`` rounds ties away from zero and drops the
  exponent carry (1.97 -> 1.0, 126.5 -> 64, 1.0625 -> 1.125), does not saturate (500 ->
  256) and maps NaN to 384.  The GPU emits ``cvt.rn.satfinite.e4m3x2.f32``: round to nearest
  even, clamp to +-448, NaN stays NaN.
* ``fp8_upcast``: ``.to(tl.float32)`` of the e4m3 NaN codes (0x7F/0xFF) gives +-480.
* ``dot_operands``: ``tl.dot`` decodes e4m3 operands through the same converter (NaN code
  -> 480, triton-lang/triton#8322) and multiplies bf16 operands as their raw uint16 bit
  patterns (the result is garbage).
* ``bf16_downcast``: ``x.to(tl.bfloat16)`` from float32 truncates instead of rounding to
  nearest even (``cvt.rn.bf16.f32`` on the GPU).

The fix (`apply_fixes`) replaces three methods of ``InterpreterBuilder`` so those
conversions go through ml_dtypes with the hardware's semantics, and is applied only in
interpret mode.  With it come changes that only save time (`_speed_up`: no re-patch
of ``triton.language`` at each device-function call, no integer-overflow check whose
result the interpreter discards, a memoised dtype map): an interpreted tgmm in 0.57 of its time.

One more replacement is a modelling choice, not a fidelity fix, and is recorded under its
own name:

* ``dot_exact_partial``: ``tl.dot`` with fp8 or bf16 operands computes the products and
  their sum in float64 (exact for e4m3 up to 2^17 terms), rounds once to the accumulator
  dtype, then adds the ``acc`` operand.  The interpreter's float32 matmul sums in whatever
  order numpy's BLAS picks; the GPU's WGMMA sums in its own order with a reduced-precision
  FP8 accumulator.  Neither is reproducible elsewhere, so under the interpreter the kernel
  computes the reference's definition of a K-block partial P (exact, rounded once) and its
  scale/accumulation logic can be checked bit for bit.  On the GPU only the error bound
  applies (see `fp8check.kernels.triton.spec`).

* ``dot_hopper_mma`` (a second model choice, selected per call with `dot_model("hopper")`):
  ``tl.dot`` with fp8 operands computes what the Hopper tensor core computes, by the
  bit-accurate model `fp8check.references.mma.HOPPER_FP8` (k32 WGMMA steps into the e8m13
  truncating accumulator, the dot's ``acc`` operand aligned with the products), honouring
  ``max_num_imprecise_acc`` as Triton lowers it on sm_90: every that many K elements the
  tensor core's partial (started from zero) is added in float32 (RNE) into the separate
  accumulator that starts as ``acc``; the sm_90 default (None here) is 2**30, never.
  Under it the FP8 GEMM is bit-exact to ``references.gmm(..., accum="deepgemm-hopper")``.
  `dot_model("blackwell")` is the same with the sm_100a model
  (`fp8check.references.mma.BLACKWELL_FP8`: k32 steps chained through ``acc``, each adding
  it to the step's truncated float32 product sum with one rounding to nearest): Triton's
  sm_100 dot ignores ``max_num_imprecise_acc`` (triton/language/semantic.py: it "only
  applies to fp8 -> fp32 dot on sm_90"), so the whole dot is one chain from ``acc``.
  Under it the FP8 GEMM is bit-exact to ``references.gmm(..., accum="deepgemm-blackwell")``.

`fidelity.probe_fidelity()` checks each of these on the interpreter before and after
the fix and records them for the gate's results.

Interpret mode is selected by ``TRITON_INTERPRET=1`` in the environment *before* triton
is imported; ``fp8check.kernels.triton``'s ``__init__`` sets it when torch has no CUDA.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

import ml_dtypes
import numpy as np

FIDELITY_FIXES = ("fp8_downcast", "fp8_upcast", "dot_operands", "bf16_downcast")
MODEL_CHOICES = ("dot_exact_partial",)
DOT_MODELS = ("exact", "hopper", "blackwell")  # the exact partial (default) or a tensor core
_DOT_TARGETS = {"hopper": "sm_90a", "blackwell": "sm_100a"}  # its `references.mma` target
# sm_90's default max_num_imprecise_acc for fp8 dots (Triton): the tensor core never promotes.
SM90_DEFAULT_IMPRECISE_ACC = 2**30
_DOT_MODEL = ["exact"]

# Hardware conversions: ml_dtypes dtype and saturation bound of each narrow Triton type.
_NARROW = {
    "fp8e4nv": (ml_dtypes.float8_e4m3fn, 448.0),
    "fp8e5": (ml_dtypes.float8_e5m2, 57344.0),
    "bf16": (ml_dtypes.bfloat16, None),  # cvt.rn.bf16.f32 does not saturate
}


def interpret_mode() -> bool:
    """True when Triton kernels run in the interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


# ----------------------------------------------------------------------------- the fix


def _builder_cls():
    from triton.runtime import interpreter

    return interpreter.InterpreterBuilder, interpreter.TensorHandle


_ORIGINALS: dict[str, object] = {}


def _decode(data: np.ndarray, dtype) -> np.ndarray | None:
    """Exact float64 values of an interpreter tensor of Triton dtype `dtype`, or None
    if `dtype` is not one the fix handles (then the interpreter's own path is used)."""
    name = dtype.name
    if name in _NARROW:
        return data.view(_NARROW[name][0]).astype(np.float64)
    if name in ("fp16", "fp32", "fp64"):
        return data.astype(np.float64)
    return None


def _encode(values: np.ndarray, src_name: str, dst_name: str) -> np.ndarray:
    """Round `values` once to `dst_name` as the GPU does (RNE, satfinite for fp8); the
    returned array holds the destination's storage bits (uint8 / uint16)."""
    np_dtype, bound = _NARROW[dst_name]
    # A float32 source is rounded from float32 (what the hardware sees); a float64 source
    # from float64 directly: going through float32 first would round twice.
    x = values.astype(np.float64 if src_name == "fp64" else np.float32)
    if bound is not None:
        x = np.clip(x, -bound, bound)  # NaN stays NaN, +-inf saturate
    bits = np.uint8 if np.dtype(np_dtype).itemsize == 1 else np.uint16
    return x.astype(np_dtype).view(bits)


def _fixed_fp_to_fp(self, src, dst_type, rounding_mode):
    handle_cls = _builder_cls()[1]
    src_t, dst_t = src.dtype.scalar, dst_type.scalar
    values = _decode(src.data, src_t)
    rtne = rounding_mode is None or rounding_mode == _rtne()
    if values is not None and rtne:
        if dst_t.name in _NARROW:
            return handle_cls(_encode(values, src_t.name, dst_t.name), dst_t)
        if dst_t.name in ("fp32", "fp64"):  # upcasts are exact
            return handle_cls(values.astype(np.float32 if dst_t.name == "fp32" else np.float64),
                              dst_t)
    return _ORIGINALS["create_fp_to_fp"](self, src, dst_type, rounding_mode)


def _fixed_cast_impl(self, src, dst_type):
    handle_cls = _builder_cls()[1]
    src_t, dst_t = src.dtype.scalar, dst_type.scalar
    if dst_t.name == "bf16" and src_t.name in ("fp32", "fp64"):
        return handle_cls(_encode(src.data.astype(np.float64), src_t.name, "bf16"), dst_t)
    return _ORIGINALS["cast_impl"](self, src, dst_type)


@contextlib.contextmanager
def dot_model(name: str) -> Iterator[None]:
    """Within the block, fp8 ``tl.dot`` in the interpreter follows `name` ("exact": the
    exact partial rounded once; "hopper" / "blackwell": the sm_90a / sm_100a tensor-core
    model, module docstring)."""
    if name not in DOT_MODELS:
        raise ValueError(f"unknown dot model {name!r}; expected one of {DOT_MODELS}")
    old, _DOT_MODEL[0] = _DOT_MODEL[0], name
    try:
        yield
    finally:
        _DOT_MODEL[0] = old


def _fixed_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    handle_cls = _builder_cls()[1]
    a_t, b_t = a.dtype.scalar, b.dtype.scalar
    narrow = {"fp8e4nv", "fp8e5", "bf16"}
    fp8 = {"fp8e4nv": "e4m3fn", "fp8e5": "e5m2"}
    if _DOT_MODEL[0] in _DOT_TARGETS and a_t.name in fp8 and a_t.name == b_t.name:
        from fp8check.references.mma import mma_model, promoted_partial

        every = SM90_DEFAULT_IMPRECISE_ACC  # never promote (sm_100: always so)
        if _DOT_MODEL[0] == "hopper" and max_num_imprecise_acc:
            every = max_num_imprecise_acc
        out = promoted_partial(a.data.view(np.uint8), b.data.view(np.uint8), every,
                               d.data.astype(np.float32),
                               model=mma_model(_DOT_TARGETS[_DOT_MODEL[0]]), fmt=fp8[a_t.name])
        return handle_cls(out.astype(d.data.dtype), d.dtype.scalar)
    if a_t.name in narrow or b_t.name in narrow:
        a64, b64 = _decode(a.data, a_t), _decode(b.data, b_t)
        # Products of two e4m3 values are exact in float64 and so is any sum of < 2^17 of
        # them; for bf16 the float64 sum is far more accurate than any float32 order.  An
        # infinite operand times a zero is NaN, as on the hardware (the non-finite cases).
        with np.errstate(invalid="ignore"):
            part = np.matmul(a64, b64).astype(d.data.dtype)
        return handle_cls(part + d.data, d.dtype.scalar)
    return _ORIGINALS["create_dot"](self, a, b, d, input_precision, max_num_imprecise_acc)


def _rtne():
    from triton._C.libtriton import ir

    return ir.ROUNDING_MODE.RTNE


_REPLACEMENTS = {
    "create_fp_to_fp": _fixed_fp_to_fp,
    "cast_impl": _fixed_cast_impl,
    "create_dot": _fixed_dot,
}


def _patch_lang_once(fn):
    """The interpreter's ``_patch_lang(fn)``, skipped (an empty scope) where every
    ``triton.language`` module `fn` sees is patched already: a ``@triton.jit`` device
    function called inside a launch, which the interpreter re-patches on every call (its
    builtins are replaced already, so it only re-scans every module's members: about a
    quarter of an interpreted tgmm's time)."""
    import triton.language as tl
    from triton.runtime import interpreter

    langs = _lang_modules(fn)
    if langs and not any(tl.core.is_builtin(lang.program_id) for lang in langs):
        return interpreter._LangPatchScope()
    return _SPED_UP["_patch_lang"](fn)


@functools.cache
def _lang_modules(fn) -> tuple:
    """The ``triton.language`` modules among `fn`'s globals (its module's imports, which
    do not change once it is loaded), found once per function: the scan of every global
    on each device-function call was a twentieth of an interpreted training run."""
    import inspect

    import triton.language as tl

    return tuple(v for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core))


def _np_dtype(tt_dtype):
    """The interpreter's ``_get_np_dtype`` (the numpy dtype holding a Triton type's
    values), memoised per scalar type: the interpreter rebuilds a 19-entry dict on each
    of its ~10^5 calls a kernel launch makes.  A block type maps as its element type does
    (the interpreter's own rule); a type that cannot be hashed goes to the original."""
    import triton.language as tl

    if isinstance(tt_dtype, tl.block_type):
        tt_dtype = tt_dtype.element_ty
    try:
        return _np_dtype_of_scalar(tt_dtype)
    except TypeError:
        return _SPED_UP["_get_np_dtype"](tt_dtype)


@functools.cache
def _np_dtype_of_scalar(tt_dtype):
    return _SPED_UP["_get_np_dtype"](tt_dtype)


def _speed_up(on: bool) -> None:
    """Changes of the interpreter that save time and nothing else (idempotent):

    * device-function calls inside a launch skip the re-patch (`_patch_lang_once`);
    * the Triton-to-numpy dtype map is memoised (`_np_dtype`);
    * integer add, sub and mul skip the overflow sanitizer when the interpreter's
      ``debug`` option is off (its default, fixed in Triton 3.9): the sanitizer recomputes
      each op in int64 and compares it with the type's range, then hands the result to
      ``device_assert``, which does nothing without ``debug``: a fifth of an interpreted
      kernel's time spent on a check no one reads."""
    import dataclasses

    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    if on and not _SPED_UP:
        _SPED_UP.update(_patch_lang=interpreter._patch_lang, options=builder.options,
                        _get_np_dtype=interpreter._get_np_dtype)
        interpreter._patch_lang = _patch_lang_once
        interpreter._get_np_dtype = _np_dtype
        if not builder.options.debug:
            builder.options = dataclasses.replace(builder.options, sanitize_overflow=False)
    elif not on and _SPED_UP:
        interpreter._patch_lang = _SPED_UP.pop("_patch_lang")
        interpreter._get_np_dtype = _SPED_UP.pop("_get_np_dtype")
        _np_dtype_of_scalar.cache_clear()
        _lang_modules.cache_clear()
        builder.options = _SPED_UP.pop("options")


_SPED_UP: dict = {}  # what `_speed_up` replaced, while it is on


def apply_fixes() -> tuple[str, ...]:
    """Patch the interpreter (idempotent), with `_speed_up`'s time-only changes, and
    return the names of the active fixes and model choices.  Raises RuntimeError outside
    interpret mode: compiled kernels must never be patched."""
    if not interpret_mode():
        raise RuntimeError("apply_fixes: not in interpret mode (TRITON_INTERPRET != 1)")
    builder, _ = _builder_cls()
    for name, fn in _REPLACEMENTS.items():
        _ORIGINALS.setdefault(name, getattr(builder, name))
        setattr(builder, name, fn)
    _speed_up(True)
    return active_fixes()


def remove_fixes() -> None:
    """Restore the interpreter's own methods (used to show the self-test failing)."""
    builder, _ = _builder_cls()
    for name, fn in _ORIGINALS.items():
        setattr(builder, name, fn)
    _ORIGINALS.clear()
    _speed_up(False)


def active_fixes() -> tuple[str, ...]:
    """Names of the fixes and model choices currently patched into the interpreter."""
    return FIDELITY_FIXES + MODEL_CHOICES if _ORIGINALS else ()
