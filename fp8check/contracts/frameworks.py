"""Arrays across frameworks: the dtype objects each framework names "f32", "bf16",
"e4m3fn", "e5m2" by, and numpy / ml_dtypes arrays converted to numpy, jax or torch and
back, bits preserved (fp8 crosses as the framework's own fp8 dtype: ml_dtypes for numpy
and jax, `torch.float8_e4m3fn` for torch)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

FRAMEWORKS = ("numpy", "jax", "torch")

NUMPY_DTYPES: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "e5m2": np.dtype(ml_dtypes.float8_e5m2),
}


def framework_dtype(framework: str, name: str) -> Any:
    """The dtype object named `name` ("f32", "bf16", "e4m3fn", ...) in `framework`."""
    if framework == "numpy":
        return NUMPY_DTYPES[name].type
    if framework == "jax":
        import jax.numpy as jnp

        return jnp.dtype(NUMPY_DTYPES[name])
    if framework == "torch":
        import torch

        return {
            "f32": torch.float32,
            "bf16": torch.bfloat16,
            "e4m3fn": torch.float8_e4m3fn,
            "e5m2": torch.float8_e5m2,
        }[name]
    raise ValueError(f"unknown framework {framework!r}")


def _torch_from_numpy(a: np.ndarray) -> Any:
    import torch

    a = np.ascontiguousarray(a)
    # torch.from_numpy rejects ml_dtypes arrays: move the bits and reinterpret them.
    narrow = {
        NUMPY_DTYPES["bf16"]: (np.uint16, torch.bfloat16),
        NUMPY_DTYPES["e4m3fn"]: (np.uint8, torch.float8_e4m3fn),
        NUMPY_DTYPES["e5m2"]: (np.uint8, torch.float8_e5m2),
    }
    if a.dtype in narrow:
        bits, tdtype = narrow[a.dtype]
        return torch.from_numpy(a.view(bits).copy()).view(tdtype)
    return torch.from_numpy(a.copy())


def _torch_to_numpy(t: Any) -> np.ndarray:
    import torch

    t = t.detach().cpu().contiguous()
    narrow = {
        torch.bfloat16: (torch.int16, NUMPY_DTYPES["bf16"]),
        torch.float8_e4m3fn: (torch.uint8, NUMPY_DTYPES["e4m3fn"]),
        torch.float8_e5m2: (torch.uint8, NUMPY_DTYPES["e5m2"]),
    }
    if t.dtype in narrow:
        bits, ndtype = narrow[t.dtype]
        return t.view(bits).numpy().view(ndtype).copy()
    return t.numpy().copy()


def to_framework(a: np.ndarray, framework: str) -> Any:
    """Convert a numpy / ml_dtypes array into `framework`'s array type, bits preserved,
    in memory that `a` does not share (a write into the result never reaches `a`)."""
    if framework == "numpy":
        return np.array(a, copy=True)
    if framework == "jax":
        import jax.numpy as jnp

        # a private copy: on the CPU a jax array may alias the host buffer it came from
        return jnp.asarray(np.array(a, copy=True))
    if framework == "torch":
        return _torch_from_numpy(a)
    raise ValueError(f"unknown framework {framework!r}")


def to_numpy(x: Any) -> np.ndarray:
    """Convert a numpy, jax or torch array back to numpy / ml_dtypes, bits preserved."""
    if type(x).__module__.startswith("torch"):
        return _torch_to_numpy(x)
    return np.asarray(x)


def array_or_as_is(x: Any) -> Any:
    """`to_numpy(x)` for an array of any framework; anything else (None, a list, a
    number) as it is, so that a wrong return is reported as what it was."""
    is_array = hasattr(x, "__array__") or type(x).__module__.startswith("torch")
    return to_numpy(x) if is_array else x
