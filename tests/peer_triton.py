"""DeepSeek-V3's Triton `act_quant_kernel` (deepseek-ai/DeepSeek-V3 inference/kernel.py @
9b4e9788, statement for statement; test-only), and the same kernel with IEEE division
(`tl.math.div_rn`), compiled by tests/test_quant_approx.py to read which division
instructions Triton emits for sm_90."""

import triton
import triton.language as tl


@triton.jit
def act_quant_kernel(x_ptr, y_ptr, s_ptr, BLOCK_SIZE: tl.constexpr, scale_fmt: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs).to(tl.float32)
    amax = tl.max(tl.abs(x))  # reduction
    amax = tl.maximum(amax, 1e-4)  # clamp to 1e-4
    s = amax / 448.
    if scale_fmt == "ue8m0":
        exp = tl.math.ceil(tl.math.log2(s))
        s = tl.math.exp2(exp)
    y = x / s
    y = y.to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + offs, y)
    tl.store(s_ptr + pid, s)


@triton.jit
def act_quant_kernel_div_rn(x_ptr, y_ptr, s_ptr, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(x)), 1e-4)
    s = tl.math.div_rn(amax, 448.)
    y = tl.math.div_rn(x, s)
    y = y.to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + offs, y)
    tl.store(s_ptr + pid, s)
