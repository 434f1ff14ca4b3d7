"""numpy (ml_dtypes) <-> torch conversions that keep every bit (fp8 and bf16 included)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

_PAIRS = (
    (np.dtype(ml_dtypes.float8_e4m3fn), torch.float8_e4m3fn, np.uint8, torch.uint8),
    (np.dtype(ml_dtypes.float8_e5m2), torch.float8_e5m2, np.uint8, torch.uint8),
    (np.dtype(ml_dtypes.bfloat16), torch.bfloat16, np.int16, torch.int16),
)


def to_torch(x: np.ndarray, device: str | torch.device = "cpu") -> torch.Tensor:
    """A torch tensor with the same values and dtype (fp8/bf16 via their bit patterns)."""
    x = np.ascontiguousarray(x)
    for np_dt, t_dt, np_bits, _ in _PAIRS:
        if x.dtype == np_dt:
            return torch.from_numpy(x.view(np_bits).copy()).view(t_dt).to(device)
    return torch.from_numpy(x.copy()).to(device)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A numpy array (ml_dtypes for fp8/bf16) with the same values and dtype."""
    t = t.detach().cpu().contiguous()
    for np_dt, t_dt, _, t_bits in _PAIRS:
        if t.dtype == t_dt:
            return t.view(t_bits).numpy().view(np_dt)
    return t.numpy()
