"""What the gate needs to know about each Triton kernel (read by the gate's KernelSpec).

accum: the accumulation recipe the kernel computes bit-exactly *under the interpreter*
(with `interpret.dot_exact_partial` active); on a GPU the WGMMA partial is not the exact
one, so the gate must check the error bound instead (`accum_for_backend`).
m_align: 1 for both GEMMs: the padded baseline pads internally and takes any M_g.
"""

from __future__ import annotations

from dataclasses import dataclass

from .interpret import interpret_mode


@dataclass(frozen=True)
class KernelMeta:
    name: str
    contract: str  # gmm-fp8 | tgmm | quantizer | dgrad
    attr: str  # fp8check.kernels.triton.<attr>
    accum: str | None  # recipe bit-exact under the interpreter, None = bound only
    m_align: int
    deterministic: bool  # same inputs, same bits (fixed K order, no atomics or split-K)
    recipe: str | None = None  # quantizers: the reference recipe matched bit for bit

    def accum_for_backend(self, interpreted: bool | None = None) -> str | None:
        """The recipe to check bit-exactly on this backend, or None (check the bound)."""
        interpreted = interpret_mode() if interpreted is None else interpreted
        return self.accum if interpreted else None


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
