"""The shipped Triton FP8 GEMM under one of the interpreter's tensor-core dots, on a
problem of quantized operands: what tests/test_triton_hopper.py and
tests/test_triton_blackwell.py run."""

from __future__ import annotations

import numpy as np
import torch

import fp8check.kernels.triton as tk
from fp8check.kernels.triton import interpret


def fp8_tensor(q: np.ndarray) -> torch.Tensor:
    """An e4m3fn numpy array as a torch float8_e4m3fn tensor (the same bits)."""
    return torch.from_numpy(np.ascontiguousarray(q.view(np.uint8))).view(torch.float8_e4m3fn)


def interpreted_gmm_fp8(problem, dot: str, out_dtype: torch.dtype,
                        interval: int | None = None) -> np.ndarray:
    """gmm_fp8 on `problem` (lhs, rhs QTensors, group sizes) with `interpret.dot_model(dot)`
    active, its output's first sum(group sizes) rows as float32."""
    lq, rq, gs = problem
    with interpret.dot_model(dot):
        out = tk.gmm_fp8(fp8_tensor(lq.values), torch.from_numpy(lq.scales),
                         fp8_tensor(rq.values), torch.from_numpy(rq.scales),
                         torch.from_numpy(gs), out_dtype=out_dtype,
                         max_num_imprecise_acc=interval)
    return out.float().numpy()[:int(gs.sum())]
