"""Seeded bugs of input integrity (issue 38): kernels that write into their inputs, their
outputs bit for bit the correct twin's, so only `inputs_unchanged` can see them.

Each gmm-fp8 bug computes with `naive_dequantized` (a correct kernel) on the data it read,
and makes one realistic write into the caller's arrays:

* group sizes turned into end offsets in place (`np.cumsum(gs, out=gs)`), then read back
  as offsets: in a training step the routing now holds offsets;
* the lhs scales multiplied in place by 2 (a prescale folded into the buffer), the factor
  taken out again in the kernel's own arithmetic (x2 then x0.5 is exact in float32 for
  every finite, infinite or NaN scale: no scale of the suites is near the float32 max);
* the weights "prepacked" in place: each expert's [K, N] matrix rewritten in 128x128
  tile-major order in the caller's buffer, then read in that layout.

numpy kernels write with numpy, torch kernels with torch's in-place ops.  A jax array
cannot be written from Python (`.at[]` makes a new array, `np.asarray(x)` is read-only),
so the jax forms write the array's buffer through DLPack (`torch.from_dlpack`), as a
foreign function that writes an operand it did not declare as aliased does: the gate
compares the very jax arrays it handed (private copies, `contracts.to_framework`),
reading their buffers after the call (`fp8check.measures.integrity`), so that write cannot pass
unseen either.  Also a quantizer that reuses x's buffer for its scaled values and a tgmm
that zeroes dy's rows past sum(group_sizes) in place.  The correct twins are the torch and
jax forms of `naive_dequantized` (the numpy one is `numpy-fp8-naive`) and the kernels'
own numpy cores.
"""

from __future__ import annotations

import numpy as np

from fp8check.contracts import (
    NUMPY_DTYPES,
    KernelSpec,
    MatmulClaims,
    framework_dtype,
    to_framework,
    to_numpy,
)
from seeded_bugs.catch import Catch, named, seeded
from seeded_bugs.kernels import (
    QB,
    naive_dequantized,
    quantize_deepgemm,
    quantizer_spec,
    spec,
    tgmm_f32,
    tgmm_spec,
)

CAUGHT = Catch("ci", "inputs_unchanged")


# --- the writes, on numpy arrays (views of the framework's buffer for torch and jax) -------


def offsets_in_place(gs: np.ndarray) -> np.ndarray:
    """Group sizes -> end offsets in the caller's buffer; the sizes read back from them."""
    ends = np.cumsum(gs, out=gs)
    return np.diff(ends, prepend=0).astype(np.int32)


def prescale_in_place(scale: np.ndarray) -> np.ndarray:
    """scale *= 2 in the caller's buffer; the scales the kernel then uses (x 0.5, exact)."""
    np.multiply(scale, np.float32(2.0), out=scale)
    return scale * np.float32(0.5)


def prepack_in_place(w: np.ndarray) -> np.ndarray:
    """w [G, K, N] rewritten in 128x128 tile-major order in its own buffer; the kernel's
    [G, K, N] weights read back from that layout."""
    g, k, n = w.shape
    packed = w.reshape(g, k // QB, QB, n // QB, QB).transpose(0, 1, 3, 2, 4).copy()
    w.reshape(-1)[:] = packed.reshape(-1)
    return w.reshape(g, k // QB, n // QB, QB, QB).transpose(0, 1, 3, 2, 4).reshape(g, k, n)


def _numpy_bug(write: str):
    """A numpy gmm-fp8 kernel making the write `write` ("offsets", "scales", "weights")."""
    def kernel(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
        if write == "offsets":
            group_sizes = offsets_in_place(group_sizes)
        elif write == "scales":
            lhs_scale = prescale_in_place(lhs_scale)
        else:
            rhs_q = prepack_in_place(rhs_q)
        return naive_dequantized(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype)
    return kernel


# --- torch ----------------------------------------------------------------------------------


def torch_naive(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=None):
    """Correct torch gmm-fp8 (the twin of the torch bugs): `naive_dequantized` on the
    tensors' bits, through numpy and back."""
    args = [to_numpy(t) for t in (lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes)]
    out_np = next((NUMPY_DTYPES[n] for n in ("f32", "bf16")
                   if framework_dtype("torch", n) == out_dtype), NUMPY_DTYPES["f32"])
    return to_framework(naive_dequantized(*args, out_dtype=out_np), "torch")


def _torch_bug(write: str):
    """A torch gmm-fp8 kernel making the write `write` with torch's in-place ops."""
    def kernel(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=None):
        import torch

        if write == "offsets":
            group_sizes.cumsum_(0)
            group_sizes = torch.diff(group_sizes, prepend=group_sizes.new_zeros(1))
        elif write == "scales":
            lhs_scale.mul_(2.0)
            lhs_scale = lhs_scale * 0.5
        else:
            g, k, n = rhs_q.shape
            raw = rhs_q.view(torch.uint8)
            packed = raw.reshape(g, k // QB, QB, n // QB, QB).permute(0, 1, 3, 2, 4)
            raw.copy_(packed.contiguous().reshape(g, k, n))
            rhs_q = (raw.reshape(g, k // QB, n // QB, QB, QB).permute(0, 1, 3, 2, 4)
                     .reshape(g, k, n).view(torch.float8_e4m3fn))
        return torch_naive(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype)
    return kernel


def torch_spec(name: str, fn) -> KernelSpec:
    return KernelSpec(name=name, contract="gmm-fp8", framework="torch", fn=fn)


# --- jax --------------------------------------------------------------------------------------


def jax_naive(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
    """Correct "jax" gmm-fp8 (the twin of the jax bugs): `naive_dequantized` on the
    arrays' values, the result as a jax array."""
    import jax.numpy as jnp

    args = [np.asarray(a) for a in (lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes)]
    return jnp.asarray(naive_dequantized(*args, out_dtype=np.dtype(out_dtype)))


def _jax_bug(write: str):
    """A jax gmm-fp8 kernel writing one operand's buffer through DLPack (module
    docstring), then computing on the values it wrote."""
    def kernel(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes, out_dtype=np.float32):
        import jax.numpy as jnp
        import torch

        target = {"offsets": group_sizes, "scales": lhs_scale, "weights": rhs_q}[write]
        buffer = torch.from_dlpack(target)  # the jax array's own memory
        raw = buffer.view(torch.uint8) if buffer.element_size() == 1 else buffer
        view = raw.numpy()  # writable numpy view of the same memory
        if write == "weights":
            view = view.view(np.dtype(rhs_q.dtype))
        made = {"offsets": offsets_in_place, "scales": prescale_in_place,
                "weights": prepack_in_place}[write](view)
        args = [np.asarray(a) for a in (lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes)]
        args[{"offsets": 4, "scales": 1, "weights": 2}[write]] = made
        return jnp.asarray(naive_dequantized(*args, out_dtype=np.dtype(out_dtype)))
    return kernel


def jax_spec(name: str, fn) -> KernelSpec:
    # its arithmetic is numpy's: IEEE subnormals, declared so
    return KernelSpec(name=name, contract="gmm-fp8", framework="jax", fn=fn,
                      claims=MatmulClaims(flushes_subnormals=False))


# --- a quantizer and a tgmm -------------------------------------------------------------------


def quantize_in_x(x):
    """Bug: the 1x128 deepgemm quantizer reuses x's buffer for the scaled values
    (x *= RN(1/s) block by block before the fp8 cast)."""
    q, s = quantize_deepgemm(x)
    inv = np.repeat((np.float32(1.0) / s).astype(np.float32), QB, axis=1)[:, :x.shape[1]]
    with np.errstate(invalid="ignore", over="ignore"):
        np.multiply(x, inv, out=x)
    return q, s


def tgmm_zeroes_padding(lhs, dy, group_sizes, out_dtype=np.float32):
    """Bug: dy's rows at or past sum(group_sizes) zeroed in place ("masking the padding")
    before a correct tgmm, to which those rows contribute nothing anyway."""
    dy[int(np.sum(group_sizes)):] = 0
    return tgmm_f32(lhs, dy, group_sizes, out_dtype)


CORRECT = named(
    torch_spec("torch-fp8-naive", torch_naive),
    jax_spec("jax-fp8-naive", jax_naive),
)

BUGS = seeded(
    *((spec(f"bug-numpy-inplace-{w}", _numpy_bug(w)), CAUGHT)
      for w in ("offsets", "scales", "weights")),
    *((torch_spec(f"bug-torch-inplace-{w}", _torch_bug(w)), CAUGHT)
      for w in ("offsets", "scales", "weights")),
    *((jax_spec(f"bug-jax-inplace-{w}", _jax_bug(w)), CAUGHT)
      for w in ("offsets", "scales", "weights")),
    (quantizer_spec("bug-quantizer-scales-x-in-place", quantize_in_x), CAUGHT),
    (tgmm_spec("bug-tgmm-zeroes-padding-rows", tgmm_zeroes_padding), CAUGHT),
)
