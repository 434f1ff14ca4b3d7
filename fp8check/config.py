"""Gate configuration from `[tool.fp8check]` in the pyproject.toml of the working directory.

Precedence: command line > `[tool.fp8check]` > built-in defaults.  Unknown keys are bad
input (a typo must not silently do nothing).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from fp8check.userfiles import read_text

DEFAULT_TIMEOUT = 600.0  # seconds per result: generous (a smoke result takes at most ~17 s here)
# the longest timeout taken: a week (inf, nan and 1e308 are not seconds a wait can take)
MAX_TIMEOUT = 7 * 24 * 3600.0


def valid_timeout(value: Any) -> bool:
    """A number of seconds the gate can wait for one result: 0 < value <= MAX_TIMEOUT."""
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and 0 < value <= MAX_TIMEOUT)


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


def _coerce(key: str, value: Any, src: str) -> Any:
    """`value` of `key` as GateConfig holds it; ValueError naming the key, the file and
    what is expected."""
    def bad(expected: str) -> ValueError:
        return ValueError(f"{src}: [tool.fp8check] {key} = {_toml(value)}: expected {expected}")

    if key in ("layers", "kernels"):
        item = int if key == "layers" else str
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, item) and not isinstance(v, bool) for v in values):
            raise bad("a list of integers, e.g. layers = [1, 2]" if key == "layers" else
                      'a list of strings, e.g. kernels = ["pallas", "mypkg.kernels:gmm"]')
        return tuple(values)
    if key == "isolate":
        if not isinstance(value, bool):
            raise bad("true or false, e.g. isolate = false")
        return value
    if key == "timeout":
        if not valid_timeout(value):
            raise bad(f"a positive number of seconds, at most {MAX_TIMEOUT:.0f}, e.g. "
                      f"timeout = 600")
        return float(value)
    if key == "seed":
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad("an integer, e.g. seed = 0")
        return value
    if not isinstance(value, str):
        raise bad(f'a string, e.g. {key} = "..."')
    return value


def _toml(value: Any) -> str:
    """`value` roughly as TOML writes it (for messages)."""
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{...}"
    return str(value)


def load_config(cwd: str | Path = ".") -> GateConfig:
    """Defaults overlaid with `[tool.fp8check]` from `cwd/pyproject.toml` (if present).
    ValueError (one line naming the file and the key) for invalid TOML, a `tool` or
    `tool.fp8check` that is not a table, an unknown key or a value of the wrong type."""
    path = Path(cwd) / "pyproject.toml"
    if not path.is_file():
        return GateConfig()
    try:
        data = tomllib.loads(read_text(path, "a TOML file"))
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: invalid TOML: {e}") from e
    tool = data.get("tool", {})
    table = tool.get("fp8check", {}) if isinstance(tool, dict) else {}
    if not isinstance(tool, dict) or not isinstance(table, dict):
        name, value = ("tool", tool) if not isinstance(tool, dict) else ("tool.fp8check", table)
        raise ValueError(f"{path}: {name} = {_toml(value)}: expected a table, e.g. "
                         f"[tool.fp8check] followed by key = value lines")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ValueError(f"{path}: unknown [tool.fp8check] keys: {', '.join(unknown)} "
                         f"(known: {', '.join(sorted(_KEYS))})")
    return replace(GateConfig(), **{k: _coerce(k, v, str(path)) for k, v in table.items()})
