"""A user's kernel by name: "module:attr" or "path/to/file.py:attr" imported as pytest
would, and made a `KernelSpec` (a bare function with the contract, framework and claims
it is declared to have)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from fp8check.contracts.claims import claims_for, declare
from fp8check.contracts.spec import KernelSpec
from fp8check.contracts.table import CONTRACT_DOC, contract_of


def _package_root(path: Path) -> Path:
    """The first directory above `path` without an `__init__.py`: where its top package
    (or the file itself) is importable from, as pytest's rootdir-less "prepend" import
    mode has it."""
    root = path.parent
    while (root / "__init__.py").is_file() and root.parent != root:
        root = root.parent
    return root


def _import_file(path: Path, shown: str) -> ModuleType:
    """Import the kernel file `path` (absolute) as pytest would: its package root goes first
    on sys.path, so that it imports its sibling modules (and a package its own modules)
    without PYTHONPATH; a file inside a package is imported by its dotted name, so that
    its relative imports work, a top-level file under a name of its own, so that two
    kernel files of one name in different directories do not collide.  `shown`: the
    path as the user gave it, for messages."""
    root = _package_root(path)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    parts = path.relative_to(root).with_suffix("").parts
    if len(parts) > 1:
        name = ".".join(parts)
        module = _imported(shown, lambda: importlib.import_module(name))
        where = getattr(module, "__file__", None)
        if where is None or Path(where).resolve() != path:
            raise ValueError(f"kernel file {shown!r} imports as module {name!r}, which is "
                             f"already imported from {where}: rename its package")
        return module
    mod_name = f"fp8check_user_{path.stem}_{abs(hash(path)):x}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import kernel file {shown!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    loader = spec.loader
    _imported(shown, lambda: loader.exec_module(module))
    return module


def _imported(shown: str, run: Callable[[], Any]) -> Any:
    """`run()`, the import of the user's `shown`: whatever it raises is a one-line
    ValueError naming it."""
    try:
        return run()
    except Exception as e:  # a user's module may raise anything on import
        raise ValueError(f"importing {shown!r} failed: {type(e).__name__}: {e}") from e


def load_target(target: str) -> Any:
    """Resolve "package.module:attr" or "path/to/file.py:attr" to the object it names.
    A file's package root goes on sys.path first (`_import_file`); a module is imported
    from sys.path as it is.

    Raises ValueError with a one-line message when it cannot be found or imported.
    """
    mod_part, sep, attr = target.rpartition(":")
    if not sep or not mod_part or not attr:
        raise ValueError(f"kernel target {target!r} must look like module:attr or file.py:attr")
    if mod_part.endswith(".py"):
        path = Path(mod_part)
        if not path.is_file():
            raise ValueError(f"kernel file {mod_part!r} does not exist")
        module = _import_file(path.resolve(), mod_part)
    else:
        module = _imported(mod_part, lambda: importlib.import_module(mod_part))
    try:
        return getattr(module, attr)
    except AttributeError as e:
        raise ValueError(f"{mod_part!r} has no attribute {attr!r}") from e


def spec_from_target(
    target: str, contract: str | None, framework: str | None, **declared: Any
) -> KernelSpec:
    """A KernelSpec for `--kernel target`, `declared` the claims declared for it by field
    name (`fp8check.contracts.claims`): the target may already be a KernelSpec (then
    contract, framework and every declared claim must agree with it: a declaration is
    never silently ignored), or a bare function, which needs contract and framework and
    has the claims `claims_for` makes of `declared`.  ValueError (one line, pointing to
    `CONTRACT_DOC`) when it is not a kernel."""
    try:
        return _spec_of(target, contract, framework, declared)
    except ValueError as e:
        first = (str(e).splitlines() or [type(e).__name__])[0]  # one line: a user's text
        raise ValueError(f"{first} (the kernel contract: {CONTRACT_DOC})") from e


def _spec_of(target: str, contract: str | None, framework: str | None,
             declared: dict[str, Any]) -> KernelSpec:
    obj = load_target(target)
    if isinstance(obj, KernelSpec):  # declarations on the command line must agree with it
        claims = declare(obj.claims, declared)
        for key, val, its in [("contract", contract, obj.contract),
                              ("framework", framework, obj.framework),
                              *((k, getattr(claims, k), getattr(obj.claims, k))
                                for k in declared)]:
            if val is not None and val != its:
                raise ValueError(f"{target}: --{key.replace('_', '-')} {val} disagrees with "
                                 f"the spec's {its}")
        return obj
    if not callable(obj):
        raise ValueError(f"{target} is neither a KernelSpec nor a function")
    if contract is None or framework is None:
        raise ValueError(f"{target} is a bare function: pass --contract and --framework")
    return KernelSpec(name=target, contract=contract, framework=framework, fn=obj,
                      claims=claims_for(contract_of(contract), declared))
