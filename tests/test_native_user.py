"""Gate layer 0 for a user's kernels, run as a user would: `fp8check gate --kernel FILE:ATTR
--layers 0` from the user's own directory.

A JAX kernel is compiled for the TPU chips from its contract's arguments; a torch kernel is
compiled for sm_90a when its KernelSpec declares `cuda_jobs`, and skipped (saying why,
never passed) when it does not; a kernel that is not an FP8 kernel on the chip fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PALLAS_SPEC = """
    import functools
    from fp8check.contracts import KernelSpec, MatmulClaims
    from fp8check.kernels.pallas import gmm_fp8

    SPEC = KernelSpec(
        name="my-pallas-fp8", contract="gmm-fp8", framework="jax",
        fn=functools.partial(gmm_fp8, interpret=True),
        native_fn=functools.partial(gmm_fp8, interpret=False),
        claims=MatmulClaims(out_dtypes=("bf16",)))
"""

DEQUANTIZING = """
    import jax, jax.numpy as jnp

    def gmm_fp8(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes):
        # Dequantizes to f32 first: the MXU never sees an FP8 operand.
        a = lhs_q.astype(jnp.float32) * jnp.repeat(lhs_scale, 128, axis=1)
        b = rhs_q.astype(jnp.float32) * jnp.repeat(jnp.repeat(rhs_scale, 128, 1), 128, 2)
        return jax.lax.ragged_dot(a, b, group_sizes)
"""

TORCH_PLAIN = """
    import torch

    def gmm_fp8(lhs_q, lhs_scale, rhs_q, rhs_scale, group_sizes):
        return torch.zeros(lhs_q.shape[0], rhs_q.shape[2])
"""

TRITON_SPEC = """
    from fp8check.contracts import KernelSpec, MatmulClaims
    from fp8check.kernels.triton import gmm_fp8
    from fp8check.kernels.triton.native import native_builds

    def jobs(m, k, n, g):
        return [b.job() for b in native_builds(m, k, n, g) if b.kernel == "triton-fp8"]

    SPEC = KernelSpec(name="my-triton-fp8", contract="gmm-fp8", framework="torch",
                      fn=gmm_fp8, claims=MatmulClaims(out_dtypes=("bf16",)), cuda_jobs=jobs)
"""


def _gate(tmp_path: Path, source: str, target: str, *extra: str) -> tuple[int, str, dict]:
    (tmp_path / "mine.py").write_text(textwrap.dedent(source))
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "fp8check", "gate", "--kernel", f"mine.py:{target}",
         "--layers", "0", "--suite", "smoke", "--json", str(out), "--no-progress", *extra],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
        env={**os.environ, "PYTHONPATH": str(tmp_path)})
    doc = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, proc.stderr, doc


def test_user_pallas_kernel_compiles_for_tpu(tmp_path):
    rc, err, doc = _gate(tmp_path, PALLAS_SPEC, "SPEC", "--targets", "v6e")
    assert rc == 0, err
    res = doc["results"]
    assert len(res) == 5 and all(r["layer"] == 0 and r["passed"] for r in res)  # 5 shapes
    for r in res:
        assert r["metrics"]["target"] == "v6e"
        assert r["metrics"]["mxu_formats"] == "e4m3b_to_bf16"
        # v6e's MXU has no FP8 mode: how FP8 enters it is reported, not judged
        assert set(r["criteria"]) == {"compiles", "vmem_within_chip"}


def test_user_kernel_without_fp8_on_the_mxu_fails_on_v7x_with_repro(tmp_path):
    rc, err, doc = _gate(tmp_path, DEQUANTIZING, "gmm_fp8", "--contract", "gmm-fp8",
                         "--framework", "jax", "--targets", "v7x")
    assert rc == 1
    assert all(r["failed"] == ["fp8_mxu_native"] for r in doc["results"])
    repro = [ln for ln in err.splitlines() if "repro:" in ln]
    assert len(repro) == 5 and all("--layers 0 " in ln and ln.endswith("--targets v7x")
                                   for ln in repro)


def test_torch_kernel_without_hopper_jobs_is_skipped_not_passed(tmp_path):
    rc, err, doc = _gate(tmp_path, TORCH_PLAIN, "gmm_fp8", "--contract", "gmm-fp8",
                         "--framework", "torch", "--targets", "sm_90a")
    [r] = doc["results"]
    assert r["passed"] is None and "cuda_jobs" in r["skipped"]
    assert doc["summary"]["n_passed"] == 0
    assert "SKIP" in err and "cuda_jobs" in err
    assert rc == 1 and doc["summary"]["passed"] is False  # nothing was checked


def test_torch_kernel_with_cuda_jobs_compiles_for_each_gpu(tmp_path):
    """A user's cuda_jobs are compiled for every GPU target asked for, each at its own
    capability: wgmma on sm_90a, tcgen05 with tensor memory on sm_100a."""
    rc, err, doc = _gate(tmp_path, TRITON_SPEC, "SPEC", "--targets", "sm_90a,sm_100a")
    assert rc == 0, err
    res = doc["results"]
    assert len(res) == 10 and all(r["passed"] for r in res)
    by = {t: [r for r in res if r["metrics"]["target"] == t] for t in ("sm_90a", "sm_100a")}
    assert all(len(v) == 5 for v in by.values())
    assert all("wgmma m64n128k32.f32.e4m3.e4m3" in r["metrics"]["mma_shapes"]
               for r in by["sm_90a"])
    assert all(r["metrics"]["mma_shapes"].startswith("tcgen05 kind::f8f6f4 ")
               and r["metrics"]["mma_shapes"].endswith(".f32.e4m3.e4m3")
               and "tmem_within_limit" in r["criteria"] for r in by["sm_100a"])
