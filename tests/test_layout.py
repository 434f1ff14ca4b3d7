"""fp8check/ in its floors (docs/architecture.md): the folders, the modules that may sit at
the top, and the earlier import names of the modules that moved."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import fp8check

ROOT = Path(fp8check.__file__).parent
# Entry points and the one-module foundations; everything else lives in a floor's folder.
TOP_LEVEL = {"__init__", "__main__", "cli", "exitcodes", "pytest_plugin", "bits", "config",
             "errors", "formats", "jaxenv", "profiles", "registry", "threadenv", "userfiles"}


def test_only_entry_points_and_foundations_sit_at_the_top() -> None:
    loose = {p.stem for p in ROOT.glob("*.py")}
    assert loose == TOP_LEVEL, f"modules outside a floor: {sorted(loose - TOP_LEVEL)}"


@pytest.mark.parametrize("floor", ["inputs", "measures", "targets"])
def test_each_floor_folder_says_what_it_holds(floor: str) -> None:
    package = importlib.import_module(f"fp8check.{floor}")
    assert package.__doc__ and package.__doc__.strip(), f"fp8check.{floor} has no docstring"
    for module in sorted((ROOT / floor).glob("*.py")):
        if module.stem != "__init__":
            assert f"`{module.stem}`" in package.__doc__, (floor, module.stem)


@pytest.mark.parametrize(("old", "new"), sorted(fp8check.MOVED.items()))
def test_a_moved_module_keeps_its_earlier_name(old: str, new: str) -> None:
    """A fresh interpreter, so the earlier name is resolved by the import system and not
    found already in sys.modules: it is the very module at the new place."""
    code = (f"import importlib; a = importlib.import_module({old!r}); "
            f"b = importlib.import_module({new!r}); assert a is b, (a, b); "
            f"from {old} import __name__ as n; assert n == {new!r}, n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_an_unknown_earlier_name_still_fails_to_import() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("fp8check.no_such_module")
