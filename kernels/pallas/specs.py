"""What the gate needs to know about the Pallas kernels, as plain dicts (it builds the
KernelSpecs).  `accum` is resolved for the mode the gate runs in (`gmm.accum_for`)."""

from __future__ import annotations

from fp8check.kernels.pallas.gmm import accum_for, gmm_bf16, gmm_fp8
from fp8check.kernels.pallas.tgmm import tgmm
from fp8check.kernels.pallas.tiling import TILINGS


def _offered(phase: str) -> list[tuple[int, int, int]]:
    return [tuple(TILINGS[layer][phase]) for layer in TILINGS]


def kernel_specs(interpret: bool | None = None) -> list[dict]:
    """One dict per kernel: name, contract, framework, fn, accum, tilings, m_align,
    deterministic.  fn takes the contract's arguments plus `tiling=` and `interpret=`."""
    common = {"framework": "jax", "m_align": 1, "deterministic": True}
    return [
        {"name": "pallas-gmm-fp8", "contract": "gmm-fp8", "fn": gmm_fp8,
         "accum": accum_for(interpret), "tilings": _offered("fwd"), **common},
        {"name": "pallas-gmm-bf16", "contract": "gmm", "fn": gmm_bf16, "accum": None,
         "tilings": _offered("fwd"), **common},
        {"name": "pallas-tgmm", "contract": "tgmm", "fn": tgmm, "accum": None,
         "tilings": _offered("tgmm"), **common},
    ]
