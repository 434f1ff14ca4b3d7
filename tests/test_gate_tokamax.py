"""Third-party adapter: tokamax's FP8 ragged dot (Mosaic-TPU Pallas kernel, interpret mode
on the CPU), gated on the smoke suite at layers 0 and 1 (docs/peers.md, "Third-party kernels")."""

import json

from adapter_support import assert_recipe_bit_for_bit

from fp8check.cli import main
from fp8check.kernels.adapters.tokamax import tokamax_fp8


def test_tokamax_passes_smoke_and_compiles_for_tpu_without_fma(tmp_path, monkeypatch):
    """Layer 1: every smoke case passes, bit for bit under accum "tokamax" where the block
    partials are exact.  Layer 0: the kernel compiles for v5e, v6e, v5p and v7x (its FP8
    dot entering v7x's MXU as e4m3), and no LLO has a fused multiply-add, which is what
    makes its scale step "tokamax" on the chip."""
    monkeypatch.chdir(tmp_path)
    rc = main(["gate", "--kernel", "tokamax-fp8", "--suite", "smoke", "--layers", "0,1",
               "--no-progress", "--json", "t.json"])
    doc = json.loads((tmp_path / "t.json").read_text())
    assert rc == 0 and doc["summary"]["passed"]
    env = doc["environment"]["kernels"]["tokamax-fp8"]
    assert (env["backend"], env["accum"]) == ("interpret", "tokamax")
    op = [r for r in doc["results"] if r["layer"] == 1]
    native = [r for r in doc["results"] if r["layer"] == 0]
    assert op and all(r["passed"] for r in op)
    exact = [r for r in op if r["metrics"]["exact_partials"]]
    assert exact and all(r["criteria"]["bit_exact"]["passed"] for r in exact)
    assert {r["case"].rsplit("-", 1)[1] for r in native} == {"v5e", "v6e", "v5p", "v7x"}
    assert all(r["passed"] and r["metrics"]["llo_fused_multiply_add"] is False
               for r in native)
    v7x = [r for r in native if r["metrics"]["target"] == "v7x"]
    assert v7x and all(r["criteria"]["fp8_mxu_native"]["passed"]
                       and r["metrics"]["mxu_formats"] == "e4m3b" for r in v7x)


def test_its_recipe_is_tokamax_bit_for_bit_where_the_recipes_differ():
    assert_recipe_bit_for_bit(tokamax_fp8("interpret"), "tokamax", seed=23)


def test_adapters_run_only_when_named():
    """A gate that names no kernel runs the project's kernels and megablox, not the
    opt-in third-party adapters (whose packages are the `adapters` extra)."""
    from fp8check import registry

    assert "tokamax-fp8" in registry.BUILTIN_KERNELS
    assert set(registry.OPT_IN_KERNELS) <= set(registry.BUILTIN_KERNELS)
    default = registry.default_kernels()
    assert "megablox-bf16" in default and not set(registry.OPT_IN_KERNELS) & set(default)
