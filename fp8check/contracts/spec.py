"""`KernelSpec`: a kernel under test and what it declares about itself, checked against
its contract (`fp8check.contracts.table`) when it is made."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fp8check.contracts.frameworks import FRAMEWORKS
from fp8check.contracts.table import contract_of

OUT_DTYPES = ("f32", "bf16")
ACCUMS = ("deepgemm", "cublas", "tokamax", "deepgemm-hopper", "deepgemm-blackwell")
QUANT_BLOCKS = ((1, 128), (128, 1), (128, 128))


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
        try:
            contract = contract_of(self.contract)
        except ValueError as e:
            raise ValueError(f"kernel {self.name!r}: {e}") from None
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
        if self.accum is not None and not contract.fp8:
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
        if not contract.matmul:
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
