"""Gate configuration from `[tool.fp8check]` in the pyproject.toml of the working directory.

Precedence: command line > `[tool.fp8check]` > built-in defaults.  Unknown keys are bad
input (a typo must not silently do nothing).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

DEFAULT_TIMEOUT = 600.0  # seconds per result: generous (a smoke result takes at most ~17 s here)


@dataclass(frozen=True)
class GateConfig:
    """Everything `fp8check gate` needs besides the kernels themselves."""

    suite: str = "ci"
    profile: str = "strict"
    layers: tuple[int, ...] = (1,)
    seed: int = 0
    backend: str = "auto"
    json: str | None = None
    junit: str | None = None
    report: str | None = None
    jsonl: str | None = None  # streaming log (None: gate.plan.jsonl_path decides)
    kernels: tuple[str, ...] = ()
    isolate: bool = True  # each kernel call in a worker process (fp8check.gate.isolation)
    timeout: float = DEFAULT_TIMEOUT  # seconds one result may take before its worker is killed


_KEYS = {f.name for f in fields(GateConfig)}


def _coerce(key: str, value: Any) -> Any:
    if key in ("layers", "kernels"):
        if isinstance(value, int | str):
            value = [value]
        if not isinstance(value, list):
            raise ValueError(f"[tool.fp8check] {key} must be a list")
        return tuple(int(v) if key == "layers" else str(v) for v in value)
    if key == "isolate":
        if not isinstance(value, bool):
            raise ValueError("[tool.fp8check] isolate must be true or false")
        return value
    if key == "timeout":
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError("[tool.fp8check] timeout must be a positive number of seconds")
        return float(value)
    if key == "seed":
        if not isinstance(value, int):
            raise ValueError("[tool.fp8check] seed must be an integer")
        return value
    if not isinstance(value, str):
        raise ValueError(f"[tool.fp8check] {key} must be a string")
    return value


def load_config(cwd: str | Path = ".") -> GateConfig:
    """Defaults overlaid with `[tool.fp8check]` from `cwd/pyproject.toml` (if present)."""
    path = Path(cwd) / "pyproject.toml"
    if not path.is_file():
        return GateConfig()
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: invalid TOML: {e}") from e
    table = data.get("tool", {}).get("fp8check", {})
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ValueError(f"{path}: unknown [tool.fp8check] keys: {', '.join(unknown)}")
    return replace(GateConfig(), **{k: _coerce(k, v) for k, v in table.items()})
