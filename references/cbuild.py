"""Build and load the references' C kernels (the fast exact paths of the e4m3 gmm).

A kernel's C file is compiled with the machine's C compiler (`$CC`, else `cc`) the first
time it is needed, into a cache folder (`$XDG_CACHE_HOME/fp8check` or
`~/.cache/fp8check`), once per source and flags; a kernel is used only where the CPU has
the instruction sets it is compiled for.  Each path can be switched off with an
environment variable (`FP8CHECK_AMX=0`, `FP8CHECK_VNNI=0`): the references then take the
next path, which gives the same bits.  `run_parallel` runs a kernel's calls on the
references' thread pool (ctypes drops the GIL during each call).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import re
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numba


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux names them (/proc/cpuinfo); empty elsewhere."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return set()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((x for x in text.splitlines() if x.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "fp8check"


_LOCAL_INCLUDE = re.compile(rb'^#include "([\w.]+)"', re.MULTILINE)


def build(source: Path, flags: tuple[str, ...]) -> Path:
    """The shared library compiled from `source` with `flags`, built once per source (with
    the headers it includes from its own folder) and flags (atomic: parallel test workers
    may race to build it).  OSError if the compiler fails."""
    src = source.read_bytes()
    # the headers it includes from its own folder ("name.h") are part of what is built
    headers = b"".join((source.parent / h.decode()).read_bytes()
                       for h in _LOCAL_INCLUDE.findall(src))
    tag = hashlib.sha256(src + headers + " ".join(flags).encode()).hexdigest()[:16]
    lib = _cache_dir() / f"{source.stem}-{tag}.so"
    if not lib.exists():
        lib.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=lib.parent)
        os.close(fd)
        cc = os.environ.get("CC", "cc")
        done = subprocess.run([cc, *flags, "-shared", "-fPIC", str(source), "-o", tmp],
                              capture_output=True, text=True)
        if done.returncode:
            os.unlink(tmp)
            raise OSError(f"{cc} failed: {done.stderr.strip().splitlines()[-1:]}")
        os.replace(tmp, lib)
    return lib


def load(name: str, source: Path, flags: tuple[str, ...], needs: tuple[str, ...],
         switch: str) -> tuple[ctypes.CDLL | None, str]:
    """(library, "") when path `name` can run here, else (None, the reason): the
    environment variable `switch` is "0", the CPU lacks a flag of `needs`, or the build
    fails."""
    if os.environ.get(switch, "1") == "0":
        return None, f"{switch}=0"
    missing = [f for f in needs if f not in cpu_flags()]
    if missing:
        return None, f"no {', '.join(missing)} on this CPU"
    try:
        return ctypes.CDLL(str(build(source, flags))), ""
    except OSError as e:
        return None, f"could not build the {name} kernel: {e}"


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:  # ctypes drops the GIL during the calls: the threads run in parallel
        # numba.config sets its NUMBA_* attributes at import, out of mypy's sight.
        _POOL = ThreadPoolExecutor(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    return _POOL


def _forget_pool() -> None:
    global _POOL
    _POOL = None  # a forked child has none of the parent's threads: it starts its own


os.register_at_fork(after_in_child=_forget_pool)


def run_parallel(calls: list[tuple[Callable[..., int], tuple]]) -> list[int]:
    """Each (C function, arguments) on the thread pool (numba's thread count), the last on
    the calling thread (which would only wait: one thread hand-off less per call, which
    counts where calls are many and short) -> their results; a C function returns -1 when
    it could not allocate its scratch: MemoryError."""
    if not calls:
        return []
    jobs = [_pool().submit(fn, *args) for fn, args in calls[:-1]]
    last = calls[-1][0](*calls[-1][1])
    done = [job.result() for job in jobs] + [last]
    if -1 in done:
        raise MemoryError("a references C kernel could not allocate its scratch")
    return done
