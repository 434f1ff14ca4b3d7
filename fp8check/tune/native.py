"""The search's native-compile check: a tiling that does not compile for the chosen TPU
chip (deviceless, `fp8check.targets.tpu`) is rejected with the compiler's reason, and an
accepted one carries its compiled figures (VMEM, LLO op counts) beside the cost model."""

from __future__ import annotations

import functools
from typing import Any

from fp8check.kernels.pallas.gmm import dgrad, gmm_fp8
from fp8check.kernels.pallas.native import BF16, F32, FP8, I32
from fp8check.kernels.pallas.tgmm import tgmm
from fp8check.kernels.pallas.tiling import LANES, Tiling
from fp8check.targets.chips import tpu_targets
from fp8check.targets.tpu import compile_for_tpu
from fp8check.tune.shapes import GmmShape
from fp8check.tune.space import PHASE_DTYPES


class NativeCheck:
    """`check(phase, tiling)` -> (reason or None, figures) for one shape and chip."""

    def __init__(self, shape: GmmShape, chip: str) -> None:
        chips = [t.name for t in tpu_targets()]
        if chip not in chips:
            raise ValueError(f"--chip {chip!r}: expected one of {', '.join(chips)}")
        self.shape, self.chip = shape, chip

    def _call(self, phase: str, tiling: Tiling):
        m, k, n, g = self.shape
        out = PHASE_DTYPES[phase][1]
        if phase == "fwd":
            fn = functools.partial(gmm_fp8, tiling=tiling, out_dtype=out, interpret=False)
            return fn, [((m, k), FP8), ((m, k // LANES), F32), ((g, k, n), FP8),
                        ((g, k // LANES, n // LANES), F32), ((g,), I32)]
        if phase == "dgrad":
            fn = functools.partial(dgrad, tiling=tiling, out_dtype=out, interpret=False)
            return fn, [((m, n), BF16), ((g, k, n), BF16), ((g,), I32)]
        fn = functools.partial(tgmm, tiling=tiling, out_dtype=out, interpret=False)
        return fn, [((m, k), BF16), ((m, n), BF16), ((g,), I32)]

    @functools.cache  # noqa: B019  (one instance per search; tilings repeat across rounds)
    def check(self, phase: str, tiling: Tiling) -> tuple[str | None, dict[str, Any]]:
        fn, args = self._call(phase, tiling)
        b = compile_for_tpu(f"pallas-{phase}", fn, args, self.chip)
        if not b.ok:
            return f"does not compile for {self.chip}: {b.error}", {}
        figures: dict[str, Any] = {"chip": self.chip, "vmem_bytes": b.vmem_bytes}
        if b.llo is not None:
            figures.update(llo_vmatmul=b.llo.vmatmul, llo_vector_alu=b.llo.vector_alu,
                           llo_vector_load=b.llo.vector_load,
                           llo_vector_store=b.llo.vector_store)
        if b.vmem_bytes is None or b.vmem_bytes > (b.vmem_capacity_bytes or 0):
            return (f"needs {b.vmem_bytes} B of VMEM, {self.chip} has "
                    f"{b.vmem_capacity_bytes} B per core"), figures
        return None, figures
