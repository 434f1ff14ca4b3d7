"""Triton interpreter fidelity: a self-test against ml_dtypes, and the record the gate
keeps.

`self_test` runs one check per fault and model choice of `interpret` (its docstring says
what each is) on the interpreter as it is patched now, and counts mismatches against the
hardware's semantics.  `probe_fidelity()` runs the self-test on the unpatched
interpreter, applies the fix (`interpret.apply_fixes`), reruns the self-test and returns
a `FidelityRecord` for the gate's results.  It is a no-op record (``interpreter=False``)
when kernels run compiled.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import ml_dtypes
import numpy as np
import torch
import triton
import triton.language as tl

from .interpret import apply_fixes, interpret_mode, remove_fixes


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
    """Outcome of `probe_fidelity`, what the gate keeps about the Triton backend: whether
    kernels run in the interpreter, the mismatch count of each check that failed before
    the fix, the fixes and model choices active (`fixes`), and every check's count after
    the fix."""

    interpreter: bool
    triton_version: str
    faults_before_fix: dict[str, int] = field(default_factory=dict)
    fixes: tuple[str, ...] = ()
    faults_after_fix: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.faults_after_fix.values())

    def to_dict(self) -> dict:
        return asdict(self)


_RECORD: FidelityRecord | None = None


def probe_fidelity() -> FidelityRecord:
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
