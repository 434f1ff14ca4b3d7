"""torchao's blockwise FP8 Triton kernels (torchao 0.18.0) as gate kernels.

From `torchao.prototype.blockwise_fp8_training.kernels`:

* "torchao-fp8" (`gmm-fp8`): `triton_fp8_gemm_1x128_128x128(a, b, a_s, b_s, 128,
  out_dtype)`, a *dense* GEMM (a [M, K] row-major with 1x128 scales, b [K, N] column-major
  with 128x128 scales, both scale tensors column-major, scales = dequantization
  multipliers).  torchao has no grouped variant of it (its MoE path,
  `prototype.moe_training.blockwise_fp8`, calls DeepGEMM or torch's scaled grouped mm,
  neither a Triton kernel), so the adapter loops over the groups: group g's rows of lhs
  against rhs[g], one launch per non-empty group; rows at or past sum(group_sizes) stay 0.
* "torchao-grouped-emulated" (`gmm-fp8`): `grouped_kernels.emulated_blockwise_scaled_
  grouped_mm`, torchao's grouped FP8 GEMM, which its MoE training backend selects
  whenever DeepGEMM cannot run (`moe_training.blockwise_fp8.grouped_mm_backend`: not an
  SM90+ GPU, an output other than bf16, groups not 128-aligned).  Not a Triton kernel: it
  dequantizes both operands to bf16 (q.to(bf16) * s.to(bf16), the scale itself rounded
  to bf16) and calls `torch._grouped_mm`, so no blockwise accumulation recipe applies
  (none declared: the bound is gated).  On the CPU `torch._grouped_mm` returns only its
  operands' dtype, so the adapter declares bf16 output alone.
* "torchao-act-quant" (`quantizer`, 1x128 blocks): `triton_fp8_blockwise_act_quant_lhs`.
* "torchao-weight-quant" (`quantizer`, 128x128 blocks): `triton_fp8_blockwise_weight_
  quant_rhs`, one launch per expert of w [G, K, N].
Scales come back column-major; the adapter returns them as plain arrays (same values).

Accumulation of the GEMM.  Per 128-wide K block the kernel computes
``accumulator += tl.dot(a, b) * a_s[:, None] * b_s``, i.e. acc = RN(acc + RN(RN(P*sa)*sb)):
the reference recipe "tokamax".  Under the Triton interpreter with fp8check's fixes
(`fp8check.kernels.triton.interpret`: fp8 conversions and the exact-partial dot), each
operation rounds on its own, so the adapter declares "tokamax" there.  Compiled for a GPU
the partial is the tensor core's and the compiler may contract the last multiply-add into
an FMA; no reference recipe is known to match, so none is declared (only the bound).

Quantizer recipe.  Both quantizers compute, per block, amax = max(max|x|, 1e-12) in
float32 (`tl.max` promotes bf16 to float32), m = float32(448 / float64(amax)),
q = sat(x * m) cast round-to-nearest-even to e4m3fn, and store s = RN(1/m) (`tl.div_rn`).
Rounding 448/amax first to float64 and then to float32 equals rounding it once to float32
(double rounding through a format of at least 2p+2 = 50 bits is innocuous for division,
Figueroa 1995), so for every block whose amax is finite and at least 1e-12 this is
fp8check's "transformer-engine" recipe.  It differs on all-zero blocks (torchao:
m = RN(448/1e-12), s = RN(1/m) ~ 2.2e-15; transformer-engine: m = s = 1; q = 0 either
way), on blocks whose amax is below 1e-12 (clamped), and on non-finite blocks
(docs/peers.md, "Third-party kernels").

Interpret mode: the kernels are `triton.autotune`d, and the autotuner benchmarks every
config, which needs a GPU driver; under the interpreter the adapter runs each launch
with a single one of torchao's own configs (the blocking changes which program computes
an element, not its arithmetic).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from fp8check.contracts import OUT_DTYPES, KernelSpec, MatmulClaims, QuantizerClaims
from fp8check.references.quant import BLOCK

QBLOCK = BLOCK
GEMM_CONFIG = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128}  # one of torchao's GEMM configs
ACT_QUANT_CONFIG = {"NUM_GROUPS": 16}  # one of torchao's activation-quantizer configs


@contextlib.contextmanager
def _one_config(autotuner: Any, kwargs: dict[str, int] | None) -> Iterator[None]:
    """Run `autotuner` with only its config whose kwargs are `kwargs` (its first config
    when None); its configs are restored afterwards.  ValueError if there is none."""
    saved = autotuner.configs
    chosen = [c for c in saved if kwargs is None or c.kwargs == kwargs][:1]
    if not chosen:
        raise ValueError(f"torchao adapter: no autotune config {kwargs} in {autotuner}")
    autotuner.configs = chosen
    try:
        yield
    finally:
        autotuner.configs = saved


def _torchao_kernels(backend: str) -> tuple[Any, bool, tuple[str, ...]]:
    """torchao's kernel module, whether it runs interpreted, and the interpreter fixes.

    fp8check's Triton package is imported first: it selects interpret mode on a machine
    without CUDA (before anything imports triton) and `probe_fidelity` applies the fixes."""
    from fp8check.kernels.triton import probe_fidelity
    from fp8check.kernels.triton.interpret import interpret_mode

    interpret = interpret_mode()
    resolved = "interpret" if interpret else "native"
    if backend not in ("auto", resolved):
        raise ValueError(f"torchao adapters: Triton runs {resolved} in this process")
    from torchao.prototype.blockwise_fp8_training import kernels

    return kernels, interpret, tuple(probe_fidelity().fixes)


def _column_major(t: Any) -> Any:
    """A copy of 2-D tensor `t` laid out column-major, strides (1, rows).  Explicitly: torch
    keeps any stride on a size-1 dimension (`t.t().contiguous().t()` of a one-row slice
    has strides (K, 1)), and torchao's layout asserts read the stride regardless."""
    import torch

    out = torch.empty_strided(tuple(t.shape), (1, max(t.shape[0], 1)), dtype=t.dtype)
    return out.copy_(t)


def torchao_fp8(backend: str = "auto") -> KernelSpec:
    """KernelSpec "torchao-fp8": torchao's 1x128 x 128x128 FP8 GEMM, once per group."""
    import torch

    kernels, interpret, fixes = _torchao_kernels(backend)
    tune = kernels.triton_fp8_gemm_1x128_128x128_kernel

    def gmm(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=torch.float32):
        out = torch.zeros((lhs_q.shape[0], rhs_q.shape[2]), dtype=out_dtype)
        start = 0
        with _one_config(tune, GEMM_CONFIG) if interpret else contextlib.nullcontext():
            for g, size in enumerate(group_sizes.tolist()):
                rows = slice(start, start + size)
                start += size
                if size:
                    out[rows] = kernels.triton_fp8_gemm_1x128_128x128(
                        lhs_q[rows].contiguous(), _column_major(rhs_q[g]),
                        _column_major(lhs_scale[rows]), _column_major(rhs_scale[g]),
                        QBLOCK, out_dtype)
        return out

    return KernelSpec(
        name="torchao-fp8", contract="gmm-fp8", framework="torch", fn=gmm,
        claims=MatmulClaims(accum="tokamax" if interpret else None, out_dtypes=OUT_DTYPES),
        backend="interpret" if interpret else "native", fidelity_fixes=fixes,
        description="torchao 0.18.0 blockwise FP8 Triton GEMM (third-party; dense, "
                    "looped over groups)",
    )


def torchao_grouped_emulated(backend: str = "auto") -> KernelSpec:
    """KernelSpec "torchao-grouped-emulated": torchao's emulated grouped FP8 GEMM on the
    contract's operands (rhs per-expert column-major, as it asserts), bf16 output."""
    import torch

    kernels, interpret, _ = _torchao_kernels(backend)
    from torchao.prototype.blockwise_fp8_training import grouped_kernels

    def gmm(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes):
        offs = torch.cumsum(group_sizes, 0, dtype=torch.int32)
        return grouped_kernels.emulated_blockwise_scaled_grouped_mm(
            lhs_q.contiguous(), rhs_q.transpose(1, 2).contiguous().transpose(1, 2),
            lhs_scale, kernels.BLOCKWISE_1X128_SCALING_TYPE, rhs_scale,
            kernels.BLOCKWISE_128X128_SCALING_TYPE, offs, torch.bfloat16, QBLOCK)

    return KernelSpec(
        name="torchao-grouped-emulated", contract="gmm-fp8", framework="torch", fn=gmm,
        # torch's CPU bf16 GEMM flushes float32-subnormal results (a [4, n] x
        # [n, 4] bf16 matmul of 2^-70 entries gives 0, not n 2^-140; the AVX512-BF16 dot
        # instructions flush); on a GPU it is not known to, and stays IEEE.
        claims=MatmulClaims(out_dtypes=("bf16",), flushes_subnormals=interpret),
        # torch operators, no Triton: on the CPU where Triton would be interpreted
        backend="cpu" if interpret else "native",
        description="torchao 0.18.0 emulated blockwise FP8 grouped GEMM (third-party; "
                    "bf16 dequantization + torch._grouped_mm)",
    )


def torchao_act_quant(backend: str = "auto") -> KernelSpec:
    """KernelSpec "torchao-act-quant": torchao's 1x128 activation quantizer on bf16 x,
    declared "transformer-engine" (module docstring: where it matches and where not)."""
    import torch

    kernels, interpret, fixes = _torchao_kernels(backend)
    tune = kernels.triton_fp8_blockwise_act_quant_lhs_kernel

    def quantize(x):
        with _one_config(tune, ACT_QUANT_CONFIG) if interpret else contextlib.nullcontext():
            q, s = kernels.triton_fp8_blockwise_act_quant_lhs(
                x.contiguous(), QBLOCK, torch.float8_e4m3fn)
        return q, s.contiguous()

    return KernelSpec(
        name="torchao-act-quant", contract="quantizer", framework="torch", fn=quantize,
        claims=QuantizerClaims("transformer-engine", block=(1, QBLOCK), in_dtype="bf16",
                               partial_blocks=False),  # torchao asserts K % 128 == 0
        backend="interpret" if interpret else "native", fidelity_fixes=fixes,
        description="torchao 0.18.0 1x128 FP8 activation quantizer (third-party)",
    )


def torchao_weight_quant(backend: str = "auto") -> KernelSpec:
    """KernelSpec "torchao-weight-quant": torchao's 128x128 weight quantizer on bf16 w
    [G, K, N], one launch per expert, declared "transformer-engine" (module docstring)."""
    import torch

    kernels, interpret, fixes = _torchao_kernels(backend)
    tune = kernels.triton_fp8_blockwise_weight_quant_rhs_kernel

    def quantize(w):
        with _one_config(tune, None) if interpret else contextlib.nullcontext():
            per_expert = [kernels.triton_fp8_blockwise_weight_quant_rhs(
                w[g].contiguous(), QBLOCK, torch.float8_e4m3fn) for g in range(w.shape[0])]
        return (torch.stack([q.contiguous() for q, _ in per_expert]),
                torch.stack([s.contiguous() for _, s in per_expert]))

    return KernelSpec(
        name="torchao-weight-quant", contract="quantizer", framework="torch", fn=quantize,
        claims=QuantizerClaims("transformer-engine", block=(QBLOCK, QBLOCK), in_dtype="bf16",
                               partial_blocks=False),  # torchao asserts K and N % 128 == 0
        backend="interpret" if interpret else "native", fidelity_fixes=fixes,
        description="torchao 0.18.0 128x128 FP8 weight quantizer (third-party)",
    )
