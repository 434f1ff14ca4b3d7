"""Deviceless compilation of every shipped Triton kernel for every GPU target of
`fp8check.targets.chips` (Hopper sm_90a, Blackwell sm_100a), no GPU needed.

Every Triton kernel of the gate (and the dgrad kernel the autograd uses) is compiled,
with exactly the arguments its wrapper launches it with, by Triton's AOT compiler and the
ptxas in the triton wheel, and the compiled code is checked for what the target's kernel
must have: FP8 GEMMs on the target's FP8 tensor-core instruction (wgmma e4m3 on sm_90a,
tcgen05.mma kind::f8f6f4 e4m3 on sm_100a; no mma.sync fallback), TMA where the kernel
builds tensor descriptors, bf16 GEMMs on the bf16 form of the same instruction, tensor
memory within sm_100a's 512 columns, shared memory and registers within the target's
limits, no register spills.  Kernels written here check the checks: one that upcasts its
FP8 operands to bf16 before tl.dot must not count as FP8, and one with a type error must
come back ok=False with the compiler's message.  Compiling is not running: this says
nothing about the numbers a GPU computes.
"""


import pytest

from fp8check.kernels.triton.native import hopper_interval, native_builds
from fp8check.layers.native import gpu_criteria
from fp8check.registry import family_kernels
from fp8check.targets.chips import gpu_targets, target
from fp8check.targets.cuda import (
    CudaBuild,
    CudaJob,
    ToolchainMissing,
    check_toolchain,
    compile_for_cuda,
    compile_many,
    mma_facts,
)

# isort: split
# triton after fp8check.kernels.triton, which chooses interpret mode before triton loads.
import triton
import triton.language as tl

GPUS = [t.name for t in gpu_targets()]
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
    CudaJob("probe-fp8-dot", _fp8_dot_kernel, _FP8_SIG, {"BLOCK": 64}),
    CudaJob("probe-fp8-upcast-dot", _fp8_upcast_dot_kernel, _FP8_SIG, {"BLOCK": 64}),
    CudaJob("probe-type-error", _type_error_kernel, {"x_ptr": "*fp32"}, {"BLOCK": 64}),
]


@pytest.fixture(scope="module")
def compiled() -> dict[tuple[str, str], CudaBuild]:
    """Every shipped build and the probes for every GPU target, compiled in one process
    (one start-up): (target, kernel label) -> build."""
    jobs = []
    for gpu in GPUS:
        cap = target(gpu).capability
        check_toolchain(cap)
        jobs += [b.job(cap) for b in BUILDS] + [
            CudaJob(p.name, p.fn, p.signature, p.constexprs, capability=cap) for p in _PROBES]
    return {(r.target, r.kernel): r for r in compile_many(jobs)}


def _family(gpu: str) -> str:
    family = target(gpu).fp8_instruction
    assert family is not None
    return family


def test_every_shipped_kernel_has_a_build():
    # triton-fp8-hopper / -blackwell are triton-fp8's kernel (another interpreter dot): no
    # build of their own.
    kernels = (set(family_kernels("triton")) - {"triton-fp8-hopper", "triton-fp8-blackwell"}
               | {"triton-dgrad"})
    assert {b.kernel for b in BUILDS} == kernels
    assert {b.phase for b in BUILDS} == {"fwd", "tgmm", "dgrad", "quantize"}


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("build", BUILDS, ids=lambda b: b.label)
def test_shipped_kernel_compiles_within_the_targets_limits(build, gpu, compiled):
    h = compiled[gpu, build.label]
    assert h.ok, h.error
    assert h.target == gpu
    assert 0 < h.shared_bytes <= target(gpu).limit("smem_bytes")
    assert 0 < h.registers <= target(gpu).limit("registers")
    assert (h.spill_stores_bytes, h.spill_loads_bytes) == (0, 0)
    assert not h.mma_sync  # no pre-Hopper tensor-core fallback
    if build.claims_tma:
        assert h.tma, "tensor descriptors in the source but no cp.async.bulk.tensor"
    crit = gpu_criteria(h, fp8=build.fp8, claims_tma=build.claims_tma)
    assert all(c.passed for c in crit), [(c.name, c.value) for c in crit if not c.passed]


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("build", [b for b in BUILDS if b.phase != "quantize"],
                         ids=lambda b: b.label)
def test_gemms_use_the_targets_tensor_core(build, gpu, compiled):
    h = compiled[gpu, build.label]
    family = _family(gpu)
    assert h.mma_shapes and all(s.startswith(f"{family} ") for s in h.mma_shapes), h.mma_shapes
    operands = ".f32.e4m3.e4m3" if build.fp8 else ".f32.bf16.bf16"
    assert h.mma_fp8 == build.fp8
    assert all(s.endswith(operands) for s in h.mma_shapes), h.mma_shapes
    if family == "tcgen05":  # the accumulator lives in tensor memory, allocated
        assert h.tmem_columns is not None and 32 <= h.tmem_columns <= 512
        kinds = {s.split()[1] for s in h.mma_shapes}
        assert kinds == {"kind::f8f6f4" if build.fp8 else "kind::f16"}
    else:
        assert h.tmem_columns is None
    if build.fp8 and gpu == "sm_90a":
        # The wrappers' default leaves the kernel's MAX_IMPRECISE_ACC constexpr at None:
        # Triton's sm_90 default, no promotion inside one tl.dot (the kernel promotes per
        # 128-wide K block itself).
        assert build.dot_max_num_imprecise_acc == "MAX_IMPRECISE_ACC"
        assert build.constexprs.get("MAX_IMPRECISE_ACC") is None
        assert h.max_num_imprecise_acc == 2**30


@pytest.mark.parametrize("gpu", GPUS)
def test_quantizer_has_no_matmul(gpu, compiled):
    for b in BUILDS:
        if b.phase == "quantize":
            h = compiled[gpu, b.label]
            assert not (h.mma_shapes or h.mma_sync or h.tma or h.tmem_columns), h


@pytest.mark.parametrize("gpu", GPUS)
def test_fp8_upcast_before_dot_is_not_fp8(gpu, compiled):
    """A kernel that converts its FP8 operands to bf16 before tl.dot compiles, on the
    bf16 form of the target's instruction: layer 0 fails it (`fp8_tensor_core`) and passes
    the FP8 dot."""
    fp8, upcast = compiled[gpu, "probe-fp8-dot"], compiled[gpu, "probe-fp8-upcast-dot"]
    assert fp8.ok and upcast.ok, (fp8.error, upcast.error)
    family = _family(gpu)
    assert fp8.mma_fp8 and all(s.startswith(family) and s.endswith(".f32.e4m3.e4m3")
                               for s in fp8.mma_shapes), fp8.mma_shapes
    assert upcast.mma_shapes and not upcast.mma_fp8
    assert all(".bf16.bf16" in s for s in upcast.mma_shapes), upcast.mma_shapes
    failed = {c.name for c in gpu_criteria(upcast, fp8=True, claims_tma=False) if not c.passed}
    assert failed == {"fp8_tensor_core"}
    assert all(c.passed for c in gpu_criteria(fp8, fp8=True, claims_tma=False))


def test_an_fp8_dot_of_the_other_family_fails():
    """An FP8 wgmma is not Blackwell's FP8 path: judged as sm_100a it fails."""
    h = CudaBuild("k", "sm_100a", True, shared_bytes=1024, registers=64, spill_stores_bytes=0,
                  spill_loads_bytes=0, mma_fp8=True,
                  mma_shapes=("wgmma m64n64k32.f32.e4m3.e4m3",))
    failed = {c.name for c in gpu_criteria(h, fp8=True, claims_tma=False) if not c.passed}
    assert failed == {"fp8_tensor_core"}


def test_missing_figures_fail_never_pass():
    h = CudaBuild("k", "sm_100a", True, mma_fp8=True,
                  mma_shapes=("tcgen05 kind::f8f6f4 m128n128.f32.e4m3.e4m3",))
    crit = {c.name: c.passed for c in gpu_criteria(h, fp8=True, claims_tma=True)}
    assert crit == {"compiles": True, "smem_within_limit": False,
                    "registers_within_limit": False, "no_spills": False,
                    "fp8_tensor_core": True, "no_mma_sync": True, "tmem_within_limit": False,
                    "tma": False}


def test_tcgen05_descriptor_is_decoded():
    """The instruction descriptor's fields (PTX ISA, tcgen05 instruction descriptor),
    built here bit by bit: f32 accumulator (bits 4-5 = 1), A E5M2 (7-9 = 1), B E4M3
    (10-12 = 0), N = 256 (17-22 = 32), M = 64 (24-28 = 4); a register set once; and one
    that is not a constant."""
    idesc = (1 << 4) | (1 << 7) | (0 << 10) | ((256 >> 3) << 17) | ((64 >> 4) << 24)
    ptx = (f"mov.b32 %r7, {idesc};\n"
           "tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], 256;\n"
           "@%p1 tcgen05.mma.cta_group::1.kind::f8f6f4 [ %r2 + 0 ], %rd1, %rd2, %r7, %p2;\n"
           "tcgen05.mma.cta_group::1.kind::f16 [ %r2 ], %rd1, %rd2, %r9, %p2; // bf16\n"
           "mov.b32 %r9, 1; mov.b32 %r9, 2;\n")
    facts = mma_facts(ptx)
    assert facts["mma_shapes"] == ["tcgen05 kind::f16 ?",
                                   "tcgen05 kind::f8f6f4 m64n256.f32.e5m2.e4m3"]
    assert facts["mma_fp8"] and facts["tmem_columns"] == 256 and not facts["tma"]


def test_compile_error_is_a_result_not_an_exception(compiled):
    h = compiled["sm_90a", "probe-type-error"]
    assert not h.ok and h.registers is None
    assert "CompilationError" in h.error and "tl.dot(x, x)" in h.error, h.error
    assert h.to_dict()["error"] == h.error


def test_kernel_that_cannot_be_reimported_is_a_result():
    def k(x_ptr):  # defined in a function: the compile process cannot import it
        pass

    h = compile_for_cuda("local", k, {"x_ptr": "*fp32"}, {})
    assert not h.ok and "module level" in h.error


def test_missing_toolchain_raises(tmp_path, monkeypatch):
    """A compile process that cannot import triton: ToolchainMissing, one line."""
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "__init__.py").write_text("raise ImportError('no triton here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the compile process inherits sys.path
    with pytest.raises(ToolchainMissing, match="no triton here") as info:
        compile_for_cuda("probe", _fp8_dot_kernel, _FP8_SIG, {"BLOCK": 64})
    assert "\n" not in str(info.value)


def test_promotion_interval_reaches_the_ttgir():
    """gmm_fp8(max_num_imprecise_acc=32) compiles to warp_group_dot with
    maxNumImpreciseAcc = 32 (Triton's split of the FP8 dot into promoted k32 chains), and
    the gate reads the default build's interval from the TTGIR (capped at the block)."""
    from dataclasses import replace

    [gemm] = [b for b in BUILDS if b.kernel == "triton-fp8"]
    every32 = replace(gemm, constexprs={**gemm.constexprs, "MAX_IMPRECISE_ACC": 32})
    [h] = compile_many([every32.job()])
    assert h.ok and h.max_num_imprecise_acc == 32 and h.mma_fp8
    assert hopper_interval("triton-fp8") == 128


def test_wgmma_probe_is_one_k32_step_with_c():
    """benchmarks/wgmma_probe.py (the GPU model check's probe) compiles to one FP8 wgmma
    m64n64k32 per step, accumulating into its C operand (no promotion split)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from wgmma_probe import probe

    sig = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*fp32", "d_ptr": "*fp32"}
    [h] = compile_many([CudaJob("wgmma-probe", probe, sig, {"CHAIN": 4})])
    assert h.ok, h.error
    assert h.mma_shapes == ("wgmma m64n64k32.f32.e4m3.e4m3",)
    assert h.max_num_imprecise_acc == 2**30 and not h.mma_sync
