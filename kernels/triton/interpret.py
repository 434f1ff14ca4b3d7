"""Triton interpreter fidelity: a self-test against ml_dtypes, a fix, and a record.

Why this exists: a kernel validated under ``TRITON_INTERPRET=1`` is validated against the
interpreter's arithmetic, not the GPU's.  Triton 3.9's interpreter (``triton/runtime/
interpreter.py``) gets these wrong, each verified on this machine by `self_test`:

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
interpret mode.  One more replacement is a modelling choice, not a fidelity fix, and is
recorded under its own name:

* ``dot_exact_partial``: ``tl.dot`` with fp8 or bf16 operands computes the products and
  their sum in float64 (exact for e4m3 up to 2^17 terms), rounds once to the accumulator
  dtype, then adds the ``acc`` operand.  The interpreter's float32 matmul sums in whatever
  order numpy's BLAS picks; the GPU's WGMMA sums in its own order with a reduced-precision
  FP8 accumulator.  Neither is reproducible elsewhere, so under the interpreter the kernel
  computes the reference's definition of a K-block partial P (exact, rounded once) and its
  scale/accumulation logic can be checked bit for bit.  On the GPU only the error bound
  applies (see `fp8check.kernels.triton.meta`).

* ``dot_hopper_mma`` (a second model choice, selected per call with `dot_model("hopper")`):
  ``tl.dot`` with fp8 operands computes what the Hopper tensor core computes, by the
  bit-accurate model `fp8check.references.hopper_mma` (k32 WGMMA steps into the e8m13
  truncating accumulator, the dot's ``acc`` operand aligned with the products), honouring
  ``max_num_imprecise_acc`` as Triton lowers it on sm_90: every that many K elements the
  tensor core's partial (started from zero) is added in float32 (RNE) into the separate
  accumulator that starts as ``acc``; the sm_90 default (None here) is 2**30, never.
  Under it the FP8 GEMM is bit-exact to ``references.gmm(..., accum="deepgemm-hopper")``.

`ensure_fidelity()` runs the self-test on the unpatched interpreter, applies the fix,
reruns the self-test and returns a `FidelityRecord` for the gate's results.  It is a
no-op record (``interpreter=False``) when kernels run compiled.

Interpret mode is selected by ``TRITON_INTERPRET=1`` in the environment *before* triton
is imported; ``fp8check.kernels.triton``'s ``__init__`` sets it when torch has no CUDA.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import ml_dtypes
import numpy as np
import torch
import triton
import triton.language as tl

FIDELITY_FIXES = ("fp8_downcast", "fp8_upcast", "dot_operands", "bf16_downcast")
MODEL_CHOICES = ("dot_exact_partial",)
DOT_MODELS = ("exact", "hopper")  # the exact partial (default) or the Hopper tensor core
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
    exact partial rounded once; "hopper": the Hopper tensor-core model, module docstring)."""
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
    if _DOT_MODEL[0] == "hopper" and a_t.name in fp8 and a_t.name == b_t.name:
        from fp8check.references.hopper_mma import promoted_partial

        every = max_num_imprecise_acc or SM90_DEFAULT_IMPRECISE_ACC
        out = promoted_partial(a.data.view(np.uint8), b.data.view(np.uint8), every,
                               d.data.astype(np.float32), fmt=fp8[a_t.name])
        return handle_cls(out.astype(d.data.dtype), d.dtype.scalar)
    if a_t.name in narrow or b_t.name in narrow:
        a64, b64 = _decode(a.data, a_t), _decode(b.data, b_t)
        # Products of two e4m3 values are exact in float64 and so is any sum of < 2^17 of
        # them; for bf16 the float64 sum is far more accurate than any float32 order.
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


def apply_fixes() -> tuple[str, ...]:
    """Patch the interpreter (idempotent) and return the names of the active fixes and
    model choices.  Raises RuntimeError outside interpret mode: compiled kernels must
    never be patched."""
    if not interpret_mode():
        raise RuntimeError("apply_fixes: not in interpret mode (TRITON_INTERPRET != 1)")
    builder, _ = _builder_cls()
    for name, fn in _REPLACEMENTS.items():
        _ORIGINALS.setdefault(name, getattr(builder, name))
        setattr(builder, name, fn)
    return active_fixes()


def remove_fixes() -> None:
    """Restore the interpreter's own methods (used to show the self-test failing)."""
    builder, _ = _builder_cls()
    for name, fn in _ORIGINALS.items():
        setattr(builder, name, fn)
    _ORIGINALS.clear()


def active_fixes() -> tuple[str, ...]:
    """Names of the fixes and model choices currently patched into the interpreter."""
    return FIDELITY_FIXES + MODEL_CHOICES if _ORIGINALS else ()


# ------------------------------------------------------------------------- self-test


@triton.jit
def _cast_kernel(x_ptr, y_ptr, n, DST: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=ok).to(DST), mask=ok)


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, K: tl.constexpr, N: tl.constexpr):
    rm, rk, rn = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


def _all_e4m3() -> np.ndarray:
    return np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)


def _cast_inputs_e4m3() -> np.ndarray:
    """Float32 values that exercise every e4m3 rounding decision: every code, every
    midpoint between neighbouring codes (the ties), points just off each midpoint, the
    overflow edge (448, 464, 464+, 500, inf) and NaN."""
    v = np.unique(_all_e4m3().astype(np.float64))
    v = v[np.isfinite(v)]
    mids = (v[:-1] + v[1:]) / 2  # exact in float64 and in float32 (<= 5 significant bits)
    off = np.concatenate([np.nextafter(mids.astype(np.float32), np.float32(np.inf)),
                          np.nextafter(mids.astype(np.float32), np.float32(-np.inf))])
    edge = np.array([448, 464, np.nextafter(np.float32(464), np.float32(1e9)), 500, 1e30,
                     np.inf, -np.inf, np.nan, 1.97, 126.5, 1.0625])
    return np.concatenate([v, mids, off, edge, -edge]).astype(np.float32)


def _run_cast(x: np.ndarray, dst, torch_dtype: torch.dtype) -> np.ndarray:
    xt = torch.from_numpy(np.ascontiguousarray(x))
    y = torch.empty(xt.shape, dtype=torch_dtype)
    _cast_kernel[(triton.cdiv(x.size, 256),)](xt, y, x.size, DST=dst, BLOCK=256)
    return y.numpy() if torch_dtype == torch.float32 else y.view(
        torch.uint8 if torch_dtype.itemsize == 1 else torch.int16).numpy()


def _same(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise bit-equal, with any NaN equal to any NaN."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    return (g == w) & (np.signbit(g) == np.signbit(w)) | (np.isnan(g) & np.isnan(w))


def _check_fp8_downcast() -> int:
    x = _cast_inputs_e4m3()
    got = _run_cast(x, tl.float8e4nv, torch.float8_e4m3fn).view(ml_dtypes.float8_e4m3fn)
    want = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    return int(np.count_nonzero(~_same(got, want)))


def _check_fp8_upcast() -> int:
    codes = _all_e4m3()
    xt = torch.from_numpy(codes.view(np.uint8).copy()).view(torch.float8_e4m3fn)
    y = torch.empty(256, dtype=torch.float32)
    _cast_kernel[(1,)](xt, y, 256, DST=tl.float32, BLOCK=256)
    return int(np.count_nonzero(~_same(y.numpy(), codes.astype(np.float32))))


def _check_bf16_downcast(rng: np.random.Generator) -> int:
    x = rng.standard_normal(4096).astype(np.float32)
    bits = _run_cast(x, tl.bfloat16, torch.bfloat16).view(np.uint16).view(ml_dtypes.bfloat16)
    return int(np.count_nonzero(~_same(bits, x.astype(ml_dtypes.bfloat16))))


def _check_dot_operands(rng: np.random.Generator) -> int:
    """Every e4m3 code through tl.dot: A has code i in column 0 of row i, B = e_0 1^T, so
    C[i, :] = code_i + 0 exactly (NaN rows NaN).  Plus a bf16 dot on random data against a
    float64 matmul: a float32 accumulator of 32 terms is within 32 * 2^-24 relative."""
    codes = _all_e4m3().view(np.uint8)
    a = np.zeros((256, 16), np.uint8)
    a[:, 0] = codes
    b = np.zeros((16, 16), np.uint8)
    b[0, :] = np.array(1.0, ml_dtypes.float8_e4m3fn).view(np.uint8)
    c = torch.empty(256, 16)
    _dot_kernel[(1,)](torch.from_numpy(a).view(torch.float8_e4m3fn),
                      torch.from_numpy(b).view(torch.float8_e4m3fn), c, M=256, K=16, N=16)
    # + 0.0: the dot sums code_i with zero products, so -0 becomes +0 as in IEEE addition.
    want = np.repeat(_all_e4m3().astype(np.float32)[:, None] + np.float32(0), 16, axis=1)
    bad = int(np.count_nonzero(~_same(c.numpy(), want)))
    x = rng.standard_normal((16, 32)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((32, 16)).astype(ml_dtypes.bfloat16)
    cb = torch.empty(16, 16)
    _dot_kernel[(1,)](torch.from_numpy(x.view(np.int16)).view(torch.bfloat16),
                      torch.from_numpy(w.view(np.int16)).view(torch.bfloat16), cb, M=16, K=32,
                      N=16)
    exact = x.astype(np.float64) @ w.astype(np.float64)
    mag = np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64))
    return bad + int(np.count_nonzero(np.abs(cb.numpy() - exact) > 32 * 2.0**-24 * mag))


def _check_dot_exact_partial() -> int:
    """A 128-term e4m3 dot whose float32 running sums lose the small products: 256*256,
    126 products 2^-4 * 2^-4 = 2^-8 (each a tie below half an ulp of 2^16), -256*256.
    Exact value 126 * 2^-8; the check counts rows whose result is not that."""
    a = np.zeros((16, 128), np.float32)
    a[:, 0], a[:, 1:127], a[:, 127] = 256.0, 2.0**-4, -256.0
    b = np.zeros((128, 16), np.float32)
    b[0, :], b[1:127, :], b[127, :] = 256.0, 2.0**-4, 256.0
    at = torch.from_numpy(a.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)).view(
        torch.float8_e4m3fn)
    bt = torch.from_numpy(b.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)).view(
        torch.float8_e4m3fn)
    c = torch.empty(16, 16)
    _dot_kernel[(1,)](at, bt, c, M=16, K=128, N=16)
    return int(np.count_nonzero(c.numpy() != np.float32(126 * 2.0**-8)))


@dataclass(frozen=True)
class SelfTest:
    """Mismatch count per check (0 = the interpreter agrees with the hardware model)."""

    mismatches: dict[str, int]

    @property
    def faults(self) -> tuple[str, ...]:
        return tuple(k for k, v in self.mismatches.items() if v)

    @property
    def ok(self) -> bool:
        return not self.faults


def self_test(seed: int = 0) -> SelfTest:
    """Run every check on the interpreter as it is now patched (or not)."""
    if not interpret_mode():
        raise RuntimeError("self_test: not in interpret mode (TRITON_INTERPRET != 1)")
    rng = np.random.default_rng(seed)
    return SelfTest({
        "fp8_downcast": _check_fp8_downcast(),
        "fp8_upcast": _check_fp8_upcast(),
        "dot_operands": _check_dot_operands(rng),
        "bf16_downcast": _check_bf16_downcast(rng),
        "dot_exact_partial": _check_dot_exact_partial(),
    })


@dataclass(frozen=True)
class FidelityRecord:
    """What the gate puts in its results about the Triton backend."""

    interpreter: bool
    triton_version: str
    faults_before_fix: dict[str, int] = field(default_factory=dict)
    active_fixes: tuple[str, ...] = ()
    faults_after_fix: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


_RECORD: FidelityRecord | None = None


def ensure_fidelity() -> FidelityRecord:
    """Self-test the raw interpreter, apply the fix, self-test again (once per process).

    Raises RuntimeError if a fault survives the fix: kernels must not be validated on an
    interpreter known to be wrong.  Outside interpret mode returns a record saying so.
    """
    global _RECORD
    if _RECORD is not None:
        return _RECORD
    if not interpret_mode():
        _RECORD = FidelityRecord(interpreter=False, triton_version=triton.__version__)
        return _RECORD
    remove_fixes()
    before = self_test()
    fixes = apply_fixes()
    after = self_test()
    if not after.ok:
        raise RuntimeError(f"Triton interpreter still wrong after the fix: {after.faults}")
    _RECORD = FidelityRecord(True, triton.__version__, {k: v for k, v in before.mismatches.items()
                                                         if v}, fixes, after.mismatches)
    return _RECORD
