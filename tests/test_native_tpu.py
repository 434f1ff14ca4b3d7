"""Gate layer 0 for the Pallas family: deviceless compiles for real TPU chips (libtpu).

Every Pallas kernel compiles for v5e and v7x with its figures; a kernel with a real TPU
bug (the old dynamic lane index of the scales; on v7x, whose MXU takes FP8, an FP8 kernel
that upcasts to bf16 before the dot) fails; the VMEM estimate the tilings use is Mosaic's
own figure; the kernel body compiled for TPU is the one interpret mode runs.
"""

from __future__ import annotations

import functools
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from fp8check.kernels.pallas import gmm as pallas_gmm
from fp8check.kernels.pallas.native import native_builds, offered_tilings
from fp8check.kernels.pallas.tiling import VMEM_BUDGET_BYTES, Tiling, vmem_bytes
from fp8check.layers.native import NativeShape, iter_layer0, native_fp8_format, tpu_criteria
from fp8check.targets.chips import TARGETS, parse_targets, target, tpu_targets
from fp8check.targets.tpu import (
    TpuBuild,
    compile_for_tpu,
    llo_figures,
    mosaic_vmem_bytes,
    tpu_info_vmem_bytes,
)

FP8 = np.dtype(ml_dtypes.float8_e4m3fn)
SMALL = NativeShape("small", 256, 512, 256, 4)


@pytest.fixture(scope="module")
def small_by_chip():
    """Layer 0 of the Pallas family at a small shape on v5e and v7x: chip -> results."""
    import fp8check.layers.native as native

    shapes = native.layer0_shapes

    def only_small(suite):
        return [SMALL]

    native.layer0_shapes = only_small
    try:
        results = list(iter_layer0(["pallas"], "smoke", ("v5e", "v7x")))
    finally:
        native.layer0_shapes = shapes
    return {chip: [r for r in results if r.metrics["target"] == chip] for chip in ("v5e", "v7x")}


@pytest.fixture(scope="module")
def small_results(small_by_chip):
    return small_by_chip["v5e"]


@pytest.mark.parametrize("chip", ["v5e", "v7x"])
def test_every_pallas_kernel_compiles_with_its_figures(small_by_chip, chip):
    results = small_by_chip[chip]
    kernels = {r.kernel for r in results}
    assert kernels == {"pallas-fp8", "pallas-bf16", "pallas-dgrad", "pallas-tgmm",
                       "pallas-fp8-train", "pallas-quantizer"}
    for r in results:
        assert r.passed, (r.case, r.failed_criteria, r.error)
        assert r.metrics["target"] == chip
        if r.kernel != "pallas-quantizer":  # plain jnp: no Mosaic kernel
            assert 0 < r.metrics["vmem_bytes"] <= VMEM_BUDGET_BYTES
            assert r.metrics["llo_vmatmul"] > 0


def test_v7x_mxu_takes_the_fp8_operands_natively(small_by_chip):
    """On v7x the shipped FP8 GEMM's dot enters the MXU as e4m3 (`fp8_mxu_native` judged
    and passed); the training step holds the FP8 forward beside bf16 backward kernels; the
    bf16 kernels are not judged on it.  On v5e the same kernel enters converted."""
    v7x = {r.case: r for r in small_by_chip["v7x"]}
    fwd = [r for r in v7x.values() if r.kernel == "pallas-fp8"]
    assert fwd and all(r.metrics["mxu_formats"] == "e4m3b" for r in fwd)
    assert all("fp8_mxu_native" in {c.name for c in r.criteria} for r in fwd)
    [train] = [r for r in v7x.values() if r.kernel == "pallas-fp8-train"]
    assert set(train.metrics["mxu_formats"].split(",")) == {"bf16", "e4m3b"}
    assert "fp8_mxu_native" in {c.name for c in train.criteria}
    assert all("fp8_mxu_native" not in {c.name for c in r.criteria} for r in v7x.values()
               if r.kernel in ("pallas-bf16", "pallas-dgrad", "pallas-tgmm"))
    assert all(r.metrics["vmem_capacity_bytes"] == 64 * 2**20 for r in fwd)
    v5e = [r for r in small_by_chip["v5e"] if r.kernel == "pallas-fp8"]
    assert all(r.metrics["mxu_formats"] == "e4m3b_to_bf16" for r in v5e)
    assert all("fp8_mxu_native" not in {c.name for c in r.criteria} for r in small_by_chip["v5e"])


def test_fp8_kernels_feed_fp8_to_the_mxu(small_results):
    fwd = [r for r in small_results if r.kernel == "pallas-fp8"]
    assert fwd and all(r.metrics["mxu_formats"].startswith("e4m3") for r in fwd)
    train = [r for r in small_results if r.kernel == "pallas-fp8-train"]
    assert "e4m3" in train[0].metrics["mxu_formats"] and "bf16" in train[0].metrics["mxu_formats"]
    # The scale step: separate multiplies and adds, no fused multiply-add (ACCUM_NATIVE).
    assert all(r.metrics["llo_fused_multiply_add"] is False for r in fwd)
    assert pallas_gmm.ACCUM_NATIVE == "tokamax"


def test_vmem_estimate_is_mosaics_figure(small_results):
    """tiling.vmem_bytes (what resolve_tiling and the tuner budget with) equals the VMEM
    Mosaic's own block types need, for every gmm_fp8 tiling compiled."""
    for r in small_results:
        if r.kernel == "pallas-fp8":
            tm, tk, tn = (int(v) for v in r.case.split("-")[1].split("x"))
            assert r.metrics["vmem_bytes"] == vmem_bytes("fwd", Tiling(tm, tk, tn), 1, 2)


def _scaled_dot_kernel(a_ref, b_ref, s_ref, o_ref, *, upcast: bool, dynamic_lane: bool):
    a, b = a_ref[...], b_ref[...]
    if upcast:  # the bug: FP8 operands converted on the VPU, the MXU sees bf16
        a, b = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
    p = jax.lax.dot(a, b, preferred_element_type=jnp.float32)
    # the bug of the shipped kernel before layer 0: a dynamic lane index into the scales
    s = s_ref[:, pl.ds(pl.program_id(0), 1)] if dynamic_lane else s_ref[:, 0:1]
    o_ref[...] = p * s


def _scaled_dot(a, b, s, *, upcast: bool, dynamic_lane: bool):
    kernel = functools.partial(_scaled_dot_kernel, upcast=upcast, dynamic_lane=dynamic_lane)
    return pl.pallas_call(
        kernel, grid=(2,),
        in_specs=[pl.BlockSpec((128, 128), lambda i: (0, 0)),
                  pl.BlockSpec((128, 128), lambda i: (0, 0)),
                  pl.BlockSpec((128, 16), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((128, 128), lambda i: (0, 0)),
        out_shape=jax.ShapeDtypeStruct((128, 128), jnp.float32),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("arbitrary",)),
    )(a, b, s)


ARGS = [((128, 128), FP8), ((128, 128), FP8), ((128, 16), np.dtype(np.float32))]


@pytest.mark.parametrize("chip", ["v6e", "v7x"])
def test_correct_probe_kernel_passes(chip):
    b = compile_for_tpu("probe", functools.partial(_scaled_dot, upcast=False,
                                                   dynamic_lane=False), ARGS, chip)
    crit = tpu_criteria(b, fp8_feed="all", mosaic=True, budget=VMEM_BUDGET_BYTES)
    assert all(c.passed for c in crit), [(c.name, c.value) for c in crit]
    assert ("fp8_mxu_native" in {c.name for c in crit}) == target(chip).fp8_mxu


def test_dynamic_lane_index_fails_with_the_compilers_message():
    b = compile_for_tpu("probe", functools.partial(_scaled_dot, upcast=False,
                                                   dynamic_lane=True), ARGS, "v5p")
    assert not b.ok
    assert "multiple of 128" in b.error and "\n" not in b.error
    crit = tpu_criteria(b, fp8_feed="all", mosaic=True, budget=VMEM_BUDGET_BYTES)
    assert [c.name for c in crit if not c.passed] == ["compiles"]


def test_fp8_upcast_before_the_dot_fails_on_v7x_and_passes_on_v6e():
    """An FP8 kernel that converts its operands to bf16 before the dot: on v7x the MXU would
    have taken FP8 (the correct probe's LLO says `e4m3b`), so it fails `fp8_mxu_native` with
    a message saying so; on v6e there is no FP8 MXU to lose, and it passes."""
    upcast = functools.partial(_scaled_dot, upcast=True, dynamic_lane=False)
    v7x = compile_for_tpu("probe", upcast, ARGS, "v7x")
    assert v7x.ok and v7x.llo is not None and v7x.llo.matmul_formats == ("bf16",)
    crit = {c.name: c for c in tpu_criteria(v7x, fp8_feed="all", mosaic=True, budget=None)}
    assert crit["compiles"].passed and not crit["fp8_mxu_native"].passed
    assert "converts its operands before the dot" in crit["fp8_mxu_native"].meaning
    v6e = compile_for_tpu("probe", upcast, ARGS, "v6e")
    assert v6e.ok and v6e.llo is not None and v6e.llo.matmul_formats == ("bf16",)
    assert all(c.passed for c in tpu_criteria(v6e, fp8_feed="all", mosaic=True, budget=None))


def test_native_fp8_formats():
    assert native_fp8_format("e4m3b") and native_fp8_format("e5m2b")
    assert not any(map(native_fp8_format, ("e4m3b_to_bf16", "bf16", "f32", "")))


@pytest.mark.parametrize("chip", [t.name for t in tpu_targets()])
def test_target_table_vmem_is_jaxs(chip):
    """Each TPU row's VMEM limit is what jax's own TPU table gives for the device libtpu
    describes under the row's topology name."""
    assert target(chip).limit("vmem_bytes") == tpu_info_vmem_bytes(chip)


def test_a_tiling_over_the_chip_vmem_fails():
    # An f32 accumulator of 4096 x 4096 (64 MiB) and its blocks: over v5p's 64 MiB per core.
    def big(x):
        def kernel(x_ref, o_ref, acc_ref):
            acc_ref[...] = x_ref[...]
            o_ref[...] = acc_ref[...]

        return pl.pallas_call(
            kernel, out_shape=jax.ShapeDtypeStruct(x.shape, jnp.float32),
            scratch_shapes=[pltpu.VMEM(x.shape, jnp.float32)])(x)

    b = compile_for_tpu("big", big, [((4096, 4096), np.dtype(np.float32))], "v5p")
    crit = {c.name: c for c in tpu_criteria(b, fp8_feed=None, mosaic=True, budget=None)}
    # Either Mosaic refuses it or layer 0 does: it never passes.
    assert not all(c.passed for c in crit.values())
    if b.ok:
        assert not crit["vmem_within_chip"].passed and b.vmem_bytes > b.vmem_capacity_bytes


def test_missing_figures_fail_never_pass():
    b = TpuBuild(kernel="k", target="v7x", ok=True, vmem_capacity_bytes=2**26)
    crit = {c.name: c.passed for c in tpu_criteria(b, fp8_feed="all", mosaic=True,
                                                    budget=VMEM_BUDGET_BYTES)}
    assert crit == {"compiles": True, "vmem_within_chip": False,
                    "vmem_within_budget": False, "fp8_mxu_native": False}


def test_interpret_and_native_trace_one_kernel_body():
    """Layer 0 and layer 1 judge one kernel: the Pallas kernel jaxpr gmm_fp8 hands to
    pallas_call is the same with interpret=True and interpret=False."""
    lhs = jax.ShapeDtypeStruct((256, 512), FP8)
    args = (lhs, jax.ShapeDtypeStruct((256, 4), np.float32),
            jax.ShapeDtypeStruct((4, 512, 256), FP8),
            jax.ShapeDtypeStruct((4, 4, 2), np.float32),
            jax.ShapeDtypeStruct((4,), np.int32))

    def kernel_jaxprs(interpret: bool) -> list[str]:
        fn = functools.partial(pallas_gmm.gmm_fp8, tiling=(128, 256, 128),
                               interpret=interpret)
        jaxpr = jax.make_jaxpr(fn)(*args)
        found = []

        def walk(j):
            for eqn in j.eqns:
                if eqn.primitive.name == "pallas_call":
                    found.append(str(eqn.params["jaxpr"]))
                for v in eqn.params.values():
                    if hasattr(v, "eqns"):
                        walk(v)
                    elif hasattr(v, "jaxpr") and hasattr(v.jaxpr, "eqns"):
                        walk(v.jaxpr)

        walk(jaxpr.jaxpr)
        return found

    native, interpreted = kernel_jaxprs(False), kernel_jaxprs(True)
    assert len(native) == 1 and native == interpreted


def test_offered_tilings_are_resolved_and_distinct():
    ts = offered_tilings("fwd", 8192, 2048, 512, FP8, ml_dtypes.bfloat16)
    assert ts[0] == Tiling(256, 2048, 512) and len(ts) == len(set(ts))
    assert all(t.tk % 128 == 0 and 512 % t.tn == 0 for t in ts)
    assert {b.kernel for b in native_builds(8192, 2048, 512, 32)} >= {"pallas-fp8", "pallas-tgmm"}


def test_unknown_target_is_one_line_error():
    with pytest.raises(ValueError, match="unknown target v9x") as info:
        parse_targets("v5e,v9x")
    assert all(name in str(info.value) for name in TARGETS) and "\n" not in str(info.value)
    assert parse_targets("sm_90a,v6e") == ("sm_90a", "v6e")
    assert parse_targets("tpu7x,v7x,sm_100a") == ("v7x", "sm_100a")  # libtpu's alias
    assert parse_targets(None) == tuple(TARGETS)
    with pytest.raises(ValueError):
        parse_targets(" , ")


def test_parsers_on_handmade_dumps():
    original = ('func.func @k(%arg0: i32, %arg1: memref<256x512xf8E4M3FN, '
                '#tpu.memory_space<vmem>>, %arg2: memref<1x256x4xf32, '
                '#tpu.memory_space<vmem>>, %arg3: memref<256x256xf32, '
                '#tpu.memory_space<vmem>>) attributes {scratch_operands = 1 : i64} {')
    # fp8 256x512 (x2), f32 scales padded to 256x128 (x2), f32 scratch once
    assert mosaic_vmem_bytes(original) == 2 * 256 * 512 + 2 * 256 * 128 * 4 + 256 * 256 * 4
    llo = llo_figures(['"llo.vmatmul"(%1) <{data_format = #llo.matmul_data_format<'
                       'e4m3b_to_bf16>}> : () -> ()\n %2 = llo.vmul.f32 %a, %b : x\n'
                       ' %3 = llo.vadd.f32 %a, %b : x\n %4 = "llo.vector_load"(%x) : x'])
    assert (llo.vmatmul, llo.vector_alu, llo.vector_load) == (1, 2, 1)
    assert llo.matmul_formats == ("e4m3b_to_bf16",) and not llo.fused_multiply_add


def test_libtpu_missing_is_a_one_line_usage_error(tmp_path):
    """A machine without libtpu: `fp8check gate --layers 0` exits 2 with one line naming
    what is missing, and writes no passing result."""
    shim = tmp_path / "sitecustomize.py"
    shim.write_text("import sys\nsys.modules['libtpu'] = None\n")  # import libtpu fails
    out = tmp_path / "g.json"
    proc = subprocess.run(
        [sys.executable, "-m", "fp8check", "gate", "--kernel", "pallas", "--layers", "0",
         "--suite", "smoke", "--targets", "v5e", "--json", str(out), "--no-progress"],
        capture_output=True, text=True, cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)}, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "libtpu" in lines[0], proc.stderr
    assert not out.exists()


def test_parallel_workers_compile_for_v7x_and_sm_100a(tmp_path):
    """`fp8check gate --layers 0 --suite smoke --targets v7x,sm_100a --jobs 2`, as a user
    runs it, on the shipped FP8 GEMMs and a bf16 Pallas kernel: everything passes, with the
    chip's FP8 datapath in the JSON and the HTML report (pallas-fp8 on v7x: `e4m3b`;
    triton-fp8 on sm_100a: `tcgen05`), and the source design's production tilings among the v7x
    builds.  Two workers compile for TPU at once, each reading back the Mosaic dumps its
    own compiles add: with one dump directory for both (the parent's, inherited), a third
    of the results lost their VMEM and LLO figures and failed."""
    import html as html_mod
    import json

    out, html = tmp_path / "g.json", tmp_path / "g.html"
    proc = subprocess.run(
        [sys.executable, "-m", "fp8check", "gate", "--kernel", "pallas-fp8", "--kernel",
         "pallas-tgmm", "--kernel", "triton-fp8", "--layers", "0", "--suite", "smoke",
         "--targets", "v7x,sm_100a", "--jobs", "2", "--json", str(out), "--report",
         str(html), "--no-progress"],
        capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert len(results) > 20 and all(r["passed"] and r["layer"] == 0 for r in results)
    tpu = [r for r in results if r["kernel"].startswith("pallas")]
    assert {r["metrics"]["target"] for r in tpu} == {"v7x"}
    mosaic = [r for r in tpu if not r["case"].startswith("quantize-")]  # XLA, no Mosaic
    assert mosaic and all("llo_missing" not in r["metrics"] for r in mosaic)
    pallas = [r for r in mosaic if r["kernel"] == "pallas-fp8"]
    assert all(r["metrics"]["mxu_formats"] == "e4m3b" and "fp8_mxu_native" in r["criteria"]
               for r in pallas)
    triton = [r for r in results if r["kernel"] == "triton-fp8"]
    assert triton and {r["metrics"]["target"] for r in triton} == {"sm_100a"}
    assert all(r["metrics"]["mma_shapes"].startswith("tcgen05 kind::f8f6f4 ")
               and r["criteria"]["fp8_tensor_core"]["passed"]
               and r["criteria"]["tmem_within_limit"]["passed"] for r in triton)
    # the source design's production tilings: wi (256, 2048, .) with 16 subchannels,
    # wo (256, 512, 2048)
    cases = {r["case"] for r in pallas}
    assert any(c.startswith("fwd-256x2048x512-wi-prod") for c in cases), cases
    assert any(c.startswith("fwd-256x512x2048-wo-prod") for c in cases), cases
    page = html.read_text()
    for name in ("v7x", "sm_100a"):
        assert html_mod.escape(TARGETS[name].datapath) in page


FWD_TILINGS = [Tiling(tm, tk, tn) for tm in (32, 256) for tk in (128, 512, 2048)
               for tn in (128, 512)]


def test_gmm_fp8_compiles_at_every_tiling_kind_the_tests_and_tuner_use():
    """The subchannel loop at 1, 4 and 16 subchannels per K tile, with one and several K
    tiles, narrow and wide tm/tn: every tiling compiles for v5e, and the VMEM estimate the
    tilings and the tuner budget with is Mosaic's figure."""
    m, k, n, g = 512, 2048, 512, 4
    args = [((m, k), FP8), ((m, k // 128), np.dtype(np.float32)), ((g, k, n), FP8),
            ((g, k // 128, n // 128), np.dtype(np.float32)), ((g,), np.dtype(np.int32))]
    for t in FWD_TILINGS:
        fn = functools.partial(pallas_gmm.gmm_fp8, tiling=tuple(t), interpret=False)
        b = compile_for_tpu("gmm_fp8", fn, args, "v5e")
        assert b.ok, (t, b.error)
        assert b.vmem_bytes == vmem_bytes("fwd", t, 1, 2), t


@pytest.mark.parametrize("phase, tiling", [("tgmm", (16, 128, 128)), ("tgmm", (128, 1024, 512)),
                                           ("dgrad", (16, 128, 128)), ("dgrad", (256, 512, 1024))])
def test_backward_kernels_compile_at_small_and_default_tilings(phase, tiling):
    from fp8check.kernels.pallas.gmm import dgrad
    from fp8check.kernels.pallas.tgmm import tgmm

    m, k, n, g = 512, 2048, 512, 4
    bf16 = np.dtype(ml_dtypes.bfloat16)
    if phase == "tgmm":
        fn = functools.partial(tgmm, tiling=tiling, interpret=False)
        args = [((m, k), bf16), ((m, n), bf16), ((g,), np.dtype(np.int32))]
    else:
        fn = functools.partial(dgrad, tiling=tiling, interpret=False)
        args = [((m, n), bf16), ((g, k, n), bf16), ((g,), np.dtype(np.int32))]
    b = compile_for_tpu(phase, fn, args, "v6e")
    assert b.ok, b.error
    t = Tiling(*tiling)
    # Mosaic's block operands and scratch; the tgmm estimate also budgets the f32
    # transposed lhs copy, a Mosaic-internal value that is not a kernel operand.
    internal = t.tk * t.tm * 4 if phase == "tgmm" else 0
    assert b.vmem_bytes == vmem_bytes(phase, t, 2, 4 if phase == "tgmm" else 2) - internal


def test_the_mosaic_dump_directory_goes_with_its_process(tmp_path):
    """Each process dumps Mosaic's files into a directory of its own, inside one named
    before (here the user's): gone when the process exits, the user's left in place."""
    import os

    env = dict(os.environ, LIBTPU_INIT_ARGS=f"--xla_mosaic_dump_to={tmp_path}")
    env.pop("FP8CHECK_MOSAIC_DUMP_PID", None)
    out = subprocess.run(
        [sys.executable, "-c", "from fp8check.targets import tpu; tpu.device('v5e'); "
         "d = tpu._dump_dir(); print(d, d.is_dir())"],
        env=env, capture_output=True, text=True, timeout=300, check=True).stdout.split()
    assert out[1] == "True" and os.path.dirname(out[0]) == str(tmp_path)
    assert not os.path.exists(out[0]) and tmp_path.is_dir()


def test_tpu_compiles_bypass_a_persistent_compilation_cache(tmp_path):
    """With jax's persistent compilation cache on (the gate's workers share one per run),
    a program compiled for a chip in two processes is compiled in each: both builds carry
    Mosaic's figures, which an executable loaded from the cache would lack, and nothing of
    a TPU compile enters the cache (a CPU compile beside it does)."""
    import json
    import os

    script = (
        "import json, jax, numpy as np\n"
        "from fp8check.kernels.pallas.native import native_builds\n"
        "from fp8check.targets.tpu import compile_for_tpu\n"
        "b = next(b for b in native_builds(256, 512, 256, 4) if b.kernel == 'pallas-bf16')\n"
        "x = compile_for_tpu(b.kernel, b.fn, b.args, 'v5e')\n"
        "jax.jit(lambda v: v * 3.0)(np.ones(8, np.float32)).block_until_ready()\n"
        "print(json.dumps([x.ok, x.llo is not None, x.vmem_bytes]))\n")
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(tmp_path),
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
               JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="-1")
    first, second = (json.loads(subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300,
        check=True).stdout.strip().splitlines()[-1]) for _ in range(2))
    assert first == second and first[0] and first[1] and first[2]
    cached = os.listdir(tmp_path)
    assert cached and all(not name.startswith("jit_gmm") for name in cached), cached
