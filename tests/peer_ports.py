"""Torch ports of the peers' FP8 quantizers, statement by statement (test-only).

Each function mirrors its peer's code line for line in torch on the CPU (sources and
commits in docs/peers.md), so the tests compare `references.quant.quantize` with the peer's
own float32 arithmetic as torch evaluates it.  DeepGEMM's casts take `cuda=True` for torch's
CUDA lowering of `tensor / python_scalar` (`_div_scalar`), the one step of theirs whose
arithmetic differs on a CUDA tensor (the `-cuda` recipes).  Two peers are GPU kernels
(DeepSeek-V3's Triton `act_quant_kernel`, TransformerEngine's CUDA kernel): their ports
follow the code as written, in IEEE float32; docs/peers.md says where a GPU evaluates the
same code otherwise.
"""

from __future__ import annotations

import functools

import torch

FP8 = torch.float8_e4m3fn  # every port's output; torch's cast saturates (like satfinite)


def _align(x: int, y: int) -> int:
    return -(-x // y) * y


# --- DeepGEMM, deep_gemm/utils/math.py @ 54e22612 ------------------------------------------

def _ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    bits = x.abs().float().view(torch.int)
    exp = ((bits >> 23) & 0xFF) + (bits & 0x7FFFFF).bool().int()
    return (exp.clamp(1, 254) << 23).view(torch.float)


def _div_scalar(t: torch.Tensor, b: float, cuda: bool) -> torch.Tensor:
    """`t / b` (b a Python float) as torch computes it on the CPU (a division) or, with
    `cuda`, as `div_true_kernel_cuda` does (aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu
    @ 0f57f050): `inv_b = opmath_t(1.0) / b` in float32 on the host, then t * inv_b."""
    if not cuda:
        return t / b
    return t * (torch.tensor(1.0, dtype=torch.float32) / torch.tensor(b, dtype=torch.float32))


def deepgemm_per_token_cast(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                            cuda: bool = False):
    m, n = x.shape
    padded_n = _align(n, gran_k)
    x_padded = torch.empty((m, padded_n), dtype=x.dtype, device=x.device).fill_(0)
    x_padded[:, :n] = x
    x_view = x_padded.view(m, padded_n // gran_k, gran_k)
    x_amax = x_view.abs().float().amax(dim=2).view(m, padded_n // gran_k).clamp(1e-4)
    sf = _div_scalar(x_amax, 448.0, cuda)
    sf = _ceil_to_ue8m0(sf) if use_ue8m0 else sf
    x_fp8 = (x_view * (1.0 / sf.unsqueeze(2))).to(FP8).view(m, padded_n)[:, :n].contiguous()
    return x_fp8, sf


def deepgemm_per_block_cast(x: torch.Tensor, use_ue8m0: bool, gran_k: int = 128,
                            cuda: bool = False):
    m, n = x.shape
    x_padded = torch.zeros((_align(m, gran_k), _align(n, gran_k)), dtype=x.dtype,
                           device=x.device)
    x_padded[:m, :n] = x
    x_view = x_padded.view(-1, gran_k, x_padded.size(1) // gran_k, gran_k)
    x_amax = x_view.abs().float().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
    sf = _div_scalar(x_amax, 448.0, cuda)
    sf = _ceil_to_ue8m0(sf) if use_ue8m0 else sf
    x_scaled = (x_view * (1.0 / sf)).to(FP8)
    return x_scaled.view_as(x_padded)[:m, :n].contiguous(), sf.view(x_view.size(0),
                                                                     x_view.size(2))


# --- DeepGEMM before 9da4a23 (2025-07-18), tests/test_core.py @ 8dfa3298 ----------------------

def deepgemm_legacy_per_token_cast(x: torch.Tensor, cuda: bool = False):
    m, n = x.shape
    pad_size = (128 - (n % 128)) % 128
    x = torch.nn.functional.pad(x, (0, pad_size), value=0) if pad_size > 0 else x
    x_view = x.view(m, -1, 128)
    x_amax = x_view.abs().float().amax(dim=2).view(m, -1).clamp(1e-4)
    fp8_data = (x_view * (448.0 / x_amax.unsqueeze(2))).to(FP8)
    return fp8_data.view(m, n + pad_size)[:, :n], _div_scalar(x_amax, 448.0, cuda).view(m, -1)


def deepgemm_legacy_per_block_cast(x: torch.Tensor, cuda: bool = False):
    m, n = x.shape
    x_padded = torch.zeros((_align(m, 128), _align(n, 128)), dtype=x.dtype, device=x.device)
    x_padded[:m, :n] = x
    x_view = x_padded.view(-1, 128, x_padded.size(1) // 128, 128)
    x_amax = x_view.abs().float().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
    x_scaled = (x_view * (448.0 / x_amax)).to(FP8)
    return x_scaled.view_as(x_padded)[:m, :n].contiguous(), _div_scalar(
        x_amax, 448.0, cuda).view(x_view.size(0), x_view.size(2))


# --- DeepSeek-V3, inference/kernel.py act_quant_kernel @ adecc0ef ---------------------------

def deepseek_v3_act_quant(x: torch.Tensor, block_size: int = 128, scale_fmt: str | None = None,
                          amax_floor: bool = True):
    """One Triton program per `block_size` run of the last dim.  amax_floor=False is the
    release kernel (4c2fdb8f), which had no `tl.maximum(amax, 1e-4)` and no scale_fmt."""
    xb = x.reshape(-1, block_size).to(torch.float32)            # tl.load(...).to(tl.float32)
    amax = xb.abs().amax(dim=1)                                  # tl.max(tl.abs(x))
    if amax_floor:
        amax = torch.maximum(amax, torch.tensor(1e-4, dtype=torch.float32))  # fp32 literal
    s = amax / 448.0
    if scale_fmt == "ue8m0":
        exp = torch.ceil(torch.log2(s))
        s = torch.exp2(exp)
    y = xb / s[:, None]
    y = y.to(FP8)                                                # Triton: cvt.rn.satfinite
    return y.view(x.shape), s.view(*x.shape[:-1], x.shape[-1] // block_size)


# --- TransformerEngine, tests/pytorch/references/ @ 830ef60f ---------------------------------

def te_scale_from_amax_tensor(x_dtype, amax, quant_dtype, *, eps: float, pow_2_scales: bool):
    """quantize_scale_calc.scale_from_amax_tensor."""
    fp8_max = torch.finfo(quant_dtype).max
    amax = torch.max(amax, torch.tensor(eps))
    scale = torch.div(fp8_max, amax)
    scale = torch.where(scale == torch.inf, torch.finfo(x_dtype).max, scale)
    if pow_2_scales:
        _, exp = torch.frexp(scale)
        exp = exp - 1
        assert (exp > -127).all()
        unity = torch.tensor([1.0], device=exp.device)
        torch.ldexp(unity, exp, out=scale)
        scale = torch.where(amax == float("inf"), 0.0, scale)
    scale = torch.where(amax == 0, 1.0, scale)
    scale_inv = torch.reciprocal(scale)
    return scale, scale_inv, amax


def te_reference_vectorwise(x: torch.Tensor, *, pow_2_scales: bool, eps: float = 0.0):
    """blockwise_quantizer_reference._quantize_vectorwise_reference, tile_len 128."""
    m, k = x.shape
    dtype_max = torch.finfo(FP8).max
    x_tiled = x.reshape(m, k // 128, 128)
    amax_grid = torch.abs(x_tiled).amax(dim=-1).float()
    scale, scale_inv, _ = te_scale_from_amax_tensor(x.dtype, amax_grid, FP8, eps=eps,
                                                    pow_2_scales=pow_2_scales)
    qx = x_tiled * scale.reshape(m, k // 128, 1)
    qx = torch.clamp(qx, min=-dtype_max, max=dtype_max)
    return qx.to(dtype=FP8).reshape(m, k), scale_inv


def te_reference_square(x: torch.Tensor, *, pow_2_scales: bool, eps: float = 0.0):
    """blockwise_quantizer_reference._quantize_square_block_tiling, tile_len 128 (M and K
    multiples of 128: the reference's padding is not ported)."""
    m, k = x.shape
    x_tiled = x.reshape(m // 128, 128, k // 128, 128)
    amax_grid = (torch.abs(x_tiled.transpose(-3, -2)).reshape(m // 128, k // 128, 128 ** 2)
                 .amax(dim=-1)).float()
    dtype_max = torch.finfo(FP8).max
    scale, scale_inv, _ = te_scale_from_amax_tensor(x.dtype, amax_grid, FP8, eps=eps,
                                                    pow_2_scales=pow_2_scales)
    qx = x_tiled * scale.reshape(m // 128, 1, k // 128, 1)
    qx = torch.clamp(qx, min=-dtype_max, max=dtype_max)
    return qx.to(dtype=FP8).reshape(m, k), scale_inv


# --- TransformerEngine's CUDA kernel, 1x128 rows (quantize_transpose_vector_blockwise.cu and
# recipe/recipe_common.cuh @ 830ef60f) ---------------------------------------------------------

def te_kernel_vectorwise(x: torch.Tensor, *, pow_2_scales: bool, eps: float = 0.0):
    """The kernel's arithmetic: amax = fmaxf(amax, fabsf(x)) from 0 (fmaxf drops NaN),
    compute_scale_from_amax, scale_inv = 1.0 / scale (double, then float), q =
    static_cast<fp8>(x * scale) (__nv_fp8_e4m3's constructor saturates)."""
    m, k = x.shape
    xb = x.reshape(m, k // 128, 128).float()
    amax = functools.reduce(torch.fmax, xb.abs().unbind(-1), torch.zeros(m, k // 128))
    amax = torch.where(amax < eps, torch.tensor(eps, dtype=torch.float32), amax)
    value_for_inf = torch.finfo(x.dtype).max
    keep_one = torch.isinf(amax) | (amax == 0) | torch.isnan(amax)
    scale = torch.div(torch.tensor(torch.finfo(FP8).max, dtype=torch.float32), amax)
    scale = torch.where(torch.isinf(scale), torch.tensor(value_for_inf), scale)
    if pow_2_scales:
        scale = (scale.view(torch.int32) & torch.tensor(0xFF800000 - 2**32)).view(torch.float32)
    scale = torch.where(keep_one, torch.tensor(1.0), scale)
    scale_inv = (1.0 / scale.double()).float()
    return (xb * scale[..., None]).to(FP8).reshape(m, k), scale_inv
