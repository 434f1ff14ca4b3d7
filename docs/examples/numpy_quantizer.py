"""A 1x128 quantizer with the `deepgemm` recipe in numpy (docs/contract.md):
s = RN(max(amax, 1e-4) / 448), q = satfinite(x * RN(1 / s)), all in float32."""

import ml_dtypes
import numpy as np


def quantize_1x128(x):
    m, k = x.shape
    # a partial last block (K % 128 != 0) padded with zeros: its amax stays its own
    blocks = np.pad(x.astype(np.float32), ((0, 0), (0, -k % 128))).reshape(m, -1, 128)
    amax = np.maximum(np.abs(blocks).max(axis=2), np.float32(1e-4))
    scale = (amax / np.float32(448)).astype(np.float32)
    inv = (np.float32(1) / scale).astype(np.float32)
    q = np.clip(blocks * inv[:, :, None], -448, 448).astype(ml_dtypes.float8_e4m3fn)
    return q.reshape(m, -1)[:, :k], scale
