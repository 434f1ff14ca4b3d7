"""Deviceless sm_90a compilation of every shipped Triton kernel (no GPU needed).

Every Triton kernel of the gate (and the dgrad kernel the autograd uses) is compiled,
with exactly the arguments its wrapper launches it with, by Triton's AOT compiler and the
ptxas in the triton wheel, and the compiled code is checked for what a Hopper kernel must have: FP8
GEMMs on FP8 WGMMA (no mma.sync fallback), TMA where the kernel builds tensor descriptors,
bf16 GEMMs on bf16 WGMMA, shared memory within the 227 KiB opt-in limit, no register
spills.  Two kernels written here check the checks: one that upcasts its FP8 operands to
bf16 before tl.dot must not count as FP8 WGMMA, and one with a type error must come back
ok=False with the compiler's message.  Compiling is not running: this says nothing about
the numbers a GPU computes.
"""

import pytest

from fp8check.kernels.triton.native import hopper_interval, native_builds
from fp8check.native.hopper import (
    SM90_MAX_SHARED_BYTES,
    HopperBuild,
    HopperJob,
    ToolchainMissing,
    check_toolchain,
    compile_for_hopper,
    compile_many,
)
from fp8check.registry import family_kernels

# isort: split
# triton after fp8check.kernels.triton, which chooses interpret mode before triton loads.
import triton
import triton.language as tl

SHAPE = dict(m=256, k=256, n=256, g=4)
BUILDS = native_builds(**SHAPE)


@triton.jit
def _fp8_dot_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tile = r[:, None] * BLOCK + r[None, :]
    tl.store(c_ptr + tile, tl.dot(tl.load(a_ptr + tile), tl.load(b_ptr + tile)))


@triton.jit
def _fp8_upcast_dot_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tile = r[:, None] * BLOCK + r[None, :]
    a = tl.load(a_ptr + tile).to(tl.bfloat16)
    b = tl.load(b_ptr + tile).to(tl.bfloat16)
    tl.store(c_ptr + tile, tl.dot(a, b))


@triton.jit
def _type_error_kernel(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.dot(x, x))  # tl.dot needs 2-D operands


_FP8_SIG = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*fp32"}
_PROBES = [
    HopperJob("probe-fp8-dot", _fp8_dot_kernel, _FP8_SIG, {"BLOCK": 64}),
    HopperJob("probe-fp8-upcast-dot", _fp8_upcast_dot_kernel, _FP8_SIG, {"BLOCK": 64}),
    HopperJob("probe-type-error", _type_error_kernel, {"x_ptr": "*fp32"}, {"BLOCK": 64}),
]


@pytest.fixture(scope="module")
def compiled() -> dict[str, HopperBuild]:
    """Every shipped build and the probes, compiled in one process (one start-up)."""
    check_toolchain()
    results = compile_many([b.job() for b in BUILDS] + _PROBES)
    return {r.kernel: r for r in results}


def test_every_shipped_kernel_has_a_build():
    # triton-fp8-hopper is triton-fp8's kernel (another interpreter dot): no build of its own.
    kernels = set(family_kernels("triton")) - {"triton-fp8-hopper"} | {"triton-dgrad"}
    assert {b.kernel for b in BUILDS} == kernels
    assert {b.phase for b in BUILDS} == {"fwd", "tgmm", "dgrad", "quantize"}


@pytest.mark.parametrize("build", BUILDS, ids=lambda b: b.label)
def test_shipped_kernel_compiles_for_sm90a(build, compiled):
    h = compiled[build.label]
    assert h.ok, h.error
    assert h.target == "sm_90a"
    assert 0 < h.shared_bytes <= SM90_MAX_SHARED_BYTES
    assert 0 < h.registers <= 255
    assert not h.mma_sync  # no pre-Hopper tensor-core fallback
    if build.claims_tma:
        assert h.tma, "tensor descriptors in the source but no cp.async.bulk.tensor"


@pytest.mark.parametrize("build", BUILDS, ids=lambda b: b.label)
def test_shipped_kernel_does_not_spill(build, compiled):
    h = compiled[build.label]
    assert (h.spill_stores_bytes, h.spill_loads_bytes) == (0, 0)


@pytest.mark.parametrize("build", [b for b in BUILDS if b.phase != "quantize"],
                         ids=lambda b: b.label)
def test_gemms_use_the_right_wgmma(build, compiled):
    h = compiled[build.label]
    assert h.wgmma and h.wgmma_shapes
    if build.fp8:
        assert h.wgmma_fp8
        assert all(s.endswith(".f32.e4m3.e4m3") for s in h.wgmma_shapes), h.wgmma_shapes
        # The wrappers' default leaves the kernel's MAX_IMPRECISE_ACC constexpr at None:
        # Triton's sm_90 default, no promotion inside one tl.dot (the kernel promotes per
        # 128-wide K block itself).
        assert build.dot_max_num_imprecise_acc == "MAX_IMPRECISE_ACC"
        assert build.constexprs.get("MAX_IMPRECISE_ACC") is None
        assert h.max_num_imprecise_acc == 2**30
    else:
        assert not h.wgmma_fp8
        assert all(s.endswith(".f32.bf16.bf16") for s in h.wgmma_shapes), h.wgmma_shapes


def test_quantizer_has_no_matmul(compiled):
    for b in BUILDS:
        if b.phase == "quantize":
            h = compiled[b.label]
            assert not (h.wgmma or h.mma_sync or h.tma), h


def test_fp8_upcast_before_dot_is_not_fp8_wgmma(compiled):
    fp8, upcast = compiled["probe-fp8-dot"], compiled["probe-fp8-upcast-dot"]
    assert fp8.ok and upcast.ok, (fp8.error, upcast.error)
    assert fp8.wgmma_fp8 and fp8.wgmma_shapes == ("m64n64k32.f32.e4m3.e4m3",)
    assert upcast.wgmma and not upcast.wgmma_fp8
    assert all(".bf16.bf16" in s for s in upcast.wgmma_shapes), upcast.wgmma_shapes


def test_compile_error_is_a_result_not_an_exception(compiled):
    h = compiled["probe-type-error"]
    assert not h.ok and h.registers is None
    assert "CompilationError" in h.error and "tl.dot(x, x)" in h.error, h.error
    assert h.to_dict()["error"] == h.error


def test_kernel_that_cannot_be_reimported_is_a_result():
    def k(x_ptr):  # defined in a function: the compile process cannot import it
        pass

    h = compile_for_hopper("local", k, {"x_ptr": "*fp32"}, {})
    assert not h.ok and "module level" in h.error


def test_missing_toolchain_raises(tmp_path, monkeypatch):
    """A compile process that cannot import triton: ToolchainMissing, one line."""
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "__init__.py").write_text("raise ImportError('no triton here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the compile process inherits sys.path
    with pytest.raises(ToolchainMissing, match="no triton here") as info:
        compile_for_hopper("probe", _fp8_dot_kernel, _FP8_SIG, {"BLOCK": 64})
    assert "\n" not in str(info.value)


def test_promotion_interval_reaches_the_ttgir():
    """gmm_fp8(max_num_imprecise_acc=32) compiles to warp_group_dot with
    maxNumImpreciseAcc = 32 (Triton's split of the FP8 dot into promoted k32 chains), and
    the gate reads the default build's interval from the TTGIR (capped at the block)."""
    from dataclasses import replace

    [gemm] = [b for b in BUILDS if b.kernel == "triton-fp8"]
    every32 = replace(gemm, constexprs={**gemm.constexprs, "MAX_IMPRECISE_ACC": 32})
    [h] = compile_many([every32.job()])
    assert h.ok and h.max_num_imprecise_acc == 32 and h.wgmma_fp8
    assert hopper_interval("triton-fp8") == 128


def test_wgmma_probe_is_one_k32_step_with_c():
    """benchmarks/wgmma_probe.py (the GPU model check's probe) compiles to one FP8 wgmma
    m64n64k32 per step, accumulating into its C operand (no promotion split)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from wgmma_probe import probe

    sig = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*fp32", "d_ptr": "*fp32"}
    [h] = compile_many([HopperJob("wgmma-probe", probe, sig, {"CHAIN": 4})])
    assert h.ok, h.error
    assert h.wgmma_shapes == ("m64n64k32.f32.e4m3.e4m3",)
    assert h.max_num_imprecise_acc == 2**30 and not h.mma_sync
