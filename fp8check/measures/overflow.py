"""Measure how each stack on this machine casts out-of-range float32 values to e4m3fn.

The references never depend on this (they clamp first, see `formats.satfinite`); it exists
so the documentation's table is a measurement, and so a user can see their own stack.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

PROBES = (448.0, 464.0, 465.0, 1e6, float("inf"), float("nan"))


def _fmt(vals) -> list[str]:
    return [repr(float(v)) for v in vals]


def ml_dtypes_cast() -> list[str]:
    import ml_dtypes

    return _fmt(np.array(PROBES, np.float32).astype(ml_dtypes.float8_e4m3fn).astype(np.float32))


def jax_cast() -> list[str]:
    import jax.numpy as jnp

    x = jnp.asarray(np.array(PROBES, np.float32))
    return _fmt(np.asarray(x.astype(jnp.float8_e4m3fn).astype(jnp.float32)))


def torch_cast() -> list[str]:
    import torch

    x = torch.tensor(PROBES, dtype=torch.float32)
    return _fmt(x.to(torch.float8_e4m3fn).float().numpy())


_TRITON_SNIPPET = """
import json, torch, triton, triton.language as tl
@triton.jit
def k(x, y, n: tl.constexpr):
    o = tl.arange(0, n)
    tl.store(y + o, tl.load(x + o).to(tl.float8e4nv).to(tl.float32))
x = torch.tensor([float(v) for v in json.loads(%r)] + [0.0, 0.0], dtype=torch.float32)
y = torch.empty_like(x)
k[(1,)](x, y, 8)
print(json.dumps([repr(float(v)) for v in y[:6].tolist()]))
"""


def triton_interpreter_cast() -> list[str]:
    """Runs in a subprocess: TRITON_INTERPRET must be set before triton is imported."""
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run(
        [sys.executable, "-c", _TRITON_SNIPPET % json.dumps([repr(p) for p in PROBES])],
        env=env, capture_output=True, text=True, check=True, timeout=300,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


STACKS = {
    "numpy/ml_dtypes astype": ml_dtypes_cast,
    "jax astype": jax_cast,
    "torch eager .to()": torch_cast,
    "triton interpreter .to(tl.float8e4nv)": triton_interpreter_cast,
}


def measure() -> dict[str, list[str]]:
    """Result of casting each value of PROBES to e4m3fn and back, per stack."""
    return {name: fn() for name, fn in STACKS.items()}


def markdown_table(results: dict[str, list[str]]) -> str:
    head = "| stack | " + " | ".join(repr(p) for p in PROBES) + " |"
    sep = "|---" * (len(PROBES) + 1) + "|"
    rows = [f"| {name} | " + " | ".join(vals) + " |" for name, vals in results.items()]
    return "\n".join([head, sep, *rows])


if __name__ == "__main__":
    print(markdown_table(measure()))
