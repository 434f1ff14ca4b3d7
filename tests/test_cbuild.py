"""`fp8check.references.cbuild`: a kernel's library is rebuilt when a header it includes
from its own folder changes (not only its .c file), and every C file the references build
ships with the package."""

import ctypes
import shutil
import tomllib
from fnmatch import fnmatch
from pathlib import Path

import pytest

from fp8check.references import cbuild

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler on this machine")
def test_a_changed_local_header_builds_a_new_library(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = tmp_path / "k.c"
    src.write_text('#include "k.h"\nint answer(void) { return VALUE; }\n')
    header = tmp_path / "k.h"
    values = []
    for value in (7, 11):
        header.write_text(f"#define VALUE {value}\n")
        lib = cbuild.build(src, ("-O1",))
        values.append((lib, ctypes.CDLL(str(lib)).answer()))
    (first, seven), (second, eleven) = values
    assert (seven, eleven) == (7, 11)
    assert first != second


def test_every_c_source_and_header_is_package_data():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["fp8check.references"]
    shipped = [p.name for p in (ROOT / "references").iterdir() if p.suffix in (".c", ".h")]
    assert shipped
    assert all(any(fnmatch(name, pat) for pat in patterns) for name in shipped)
