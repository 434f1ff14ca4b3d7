"""What the gate needs to know about each Triton kernel (read by the gate's KernelSpec).

accum: the accumulation recipe the kernel computes bit-exactly *under the interpreter*
(with `interpret.dot_exact_partial` active).  Compiled for sm_90 the FP8 GEMM's partial
is the tensor core's: the gate declares accum "deepgemm-hopper" with the promotion
interval read from the kernel's own compiled TTGIR (`hopper_interval`), and the
interpreter reproduces it under `interpret.dot_model("hopper")`.
m_align: 1 for both GEMMs: the padded baseline pads internally and takes any M_g.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelMeta:
    name: str
    contract: str  # gmm-fp8 | tgmm | quantizer | dgrad
    attr: str  # fp8check.kernels.triton.<attr>
    accum: str | None  # recipe bit-exact under the interpreter, None = bound only
    m_align: int
    deterministic: bool  # same inputs, same bits (fixed K order, no atomics or split-K)
    recipe: str | None = None  # quantizers: the reference recipe matched bit for bit

    def hopper_interval(self) -> int:
        """K elements per tensor-core chain in this kernel's FP8 dot as compiled for sm_90a:
        the TTGIR's maxNumImpreciseAcc (layer 0's figure, Triton's AOT compiler, no GPU),
        capped at the kernel's 128-wide block, which it promotes itself.  ValueError when
        the kernel does not compile or has no FP8 warp_group_dot."""
        from .native import compile_native_builds

        for build, b in compile_native_builds(128, 128, 128, 1):
            if build.kernel == self.name:
                if not b.ok or b.max_num_imprecise_acc is None:
                    raise ValueError(f"{self.name}: no FP8 warp_group_dot in its sm_90a "
                                     f"TTGIR ({b.error or 'compiled'})")
                return min(b.max_num_imprecise_acc, 128)
        raise ValueError(f"{self.name}: no native build")


KERNELS: dict[str, KernelMeta] = {
    m.name: m
    for m in (
        KernelMeta("triton-gmm-fp8", "gmm-fp8", "gmm_fp8", "deepgemm", 1, True),
        KernelMeta("triton-gmm-fp8-padded", "gmm-fp8", "gmm_fp8_padded", "deepgemm", 1, True),
        KernelMeta("triton-tgmm-bf16", "tgmm", "tgmm", None, 1, True),
        KernelMeta("triton-dgrad-bf16", "dgrad", "dgrad", None, 1, True),
        KernelMeta("triton-quantize-deepgemm", "quantizer", "quantize_fp8", None, 1, True,
                   "deepgemm"),
    )
}
