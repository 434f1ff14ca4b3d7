"""The AMX kernels (references/amx_gmm.c, amx_bf16.c) built with the tile instructions done
in software (tests/amx_emulation.h), so that their logic is tested on CPUs without AMX
too; where AMX runs, the real tiles are tested beside them (and the two must agree)."""

from __future__ import annotations

import atexit
import copy
import ctypes
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from fp8check.references import amx, bf16_matmul, cbuild
from fp8check.references.intdot import DigitPath

# the AMX kernels' flags and CPU needs less the tiles' own
_FLAGS = tuple(f for f in amx.FLAGS if not f.startswith("-mamx"))
_NEEDS = set(amx.NEEDS) - {"amx_int8", "amx_tile"}
_HERE = Path(__file__).resolve().parent


@functools.cache
def _folder() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="fp8check-amx-emulated-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


@functools.cache
def build(source: str) -> ctypes.CDLL | str:
    """references/<source> compiled with software tiles and loaded, or why it cannot run
    here (a CPU without the AVX-512 the kernels use beside the tiles)."""
    missing = _NEEDS - cbuild.cpu_flags()
    if missing:
        return f"no {', '.join(sorted(missing))} on this CPU"
    out = _folder() / (Path(source).stem + ".so")
    refs = Path(bf16_matmul.__file__).resolve().parent
    subprocess.run([os.environ.get("CC", "cc"), *_FLAGS, "-include",
                    str(_HERE / "amx_emulation.h"), "-shared", "-fPIC", str(refs / source),
                    "-o", str(out)], check=True)
    return ctypes.CDLL(str(out))


@functools.cache
def gmm_path() -> DigitPath | str:
    """`amx.PATH` on software tiles (amx_gmm.c), or why it cannot run here."""
    lib = build("amx_gmm.c")
    if isinstance(lib, str):
        return lib
    path = copy.copy(amx.PATH)
    path.lib, path.status = path.bind(lib), "amx-int8 (software tiles)"
    return path


def bf16_kernel() -> ctypes.CDLL | str:
    """The AMX bf16 kernel on software tiles (amx_bf16.c), bound, or why it cannot run
    here."""
    lib = build("amx_bf16.c")
    return lib if isinstance(lib, str) else bf16_matmul.bind(lib)
