"""Deviceless compilation for real TPU chips through libtpu, and what the compiler made.

`jax.experimental.topologies.get_topology_desc(<chip topology>, "tpu")` gives devices of a
chip that is not here; a jitted function traced on `ShapeDtypeStruct`s placed on one of
them and lowered for the "tpu" platform runs the real XLA:TPU and Mosaic compilers.  A
kernel that fails there is invalid on that chip, whatever interpret mode says.

What a `TpuBuild` records, per (kernel, chip):

* the compiler's own message when it fails;
* XLA's memory analysis of the compiled program (HBM bytes: arguments, outputs, temps);
* the VMEM a Pallas kernel needs, from Mosaic's own view of it (the `original` dump: the
  kernel's VMEM block operands, double-buffered when pipelined, plus its scratch), against
  the chip's VMEM (jax's `tpu_info`) and the project's 16 MiB budget.  Values Mosaic keeps
  in VMEM of its own accord (a transposed copy, spilled temporaries) are not operands and
  are not counted; the compile itself fails when everything exceeds the scoped limit;
* op counts of the final LLO (`post-finalize-llo` dump): MXU pushes (`vmatmul`) against
  vector ALU, load and store ops; the MXU data formats (how an FP8 operand enters the
  MXU: e.g. `e4m3b_to_bf16` is a conversion to bf16 on the way in); whether any fused
  multiply-add op appears (it decides the scale step's rounding, `gmm.ACCUM_NATIVE`).

Mosaic writes its dumps to the directory named by `--xla_mosaic_dump_to` in
LIBTPU_INIT_ARGS, which libtpu reads once, when it loads; this module sets it, to a
directory of the process's own, before it first loads libtpu, and reads back the files each
compile adds.  If libtpu was loaded
before without it, builds carry no LLO figures (`llo is None`) and say why.

Compiling is not running: a build says what the compiler produced for the chip, not what
the chip computes or how fast.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fp8check.targets.chips import target
from fp8check.targets.toolchains import ToolchainMissing

_DUMP_FLAG = "--xla_mosaic_dump_to"
_DUMP_OWNER = "FP8CHECK_MOSAIC_DUMP_PID"  # the process whose dump directory the flag names
_OP = re.compile(r'"?llo\.([a-z_0-9.]+)"?[ (<{]')
_FORMAT = re.compile(r"matmul_data_format<([a-z0-9_]+)>")
_MEMREF = re.compile(r"%arg\d+: memref<([0-9x]+)x([a-zA-Z0-9]+), #tpu\.memory_space<vmem>>")
_LANES = 128  # TPU vector lane width (kernels/pallas/tiling.LANES; importing it loads jax)
_DTYPE_BYTES = {"f32": 4, "i32": 4, "bf16": 2, "f16": 2, "i16": 2, "i8": 1, "i1": 4,
                "f8E4M3FN": 1, "f8E5M2": 1}


@dataclass(frozen=True)
class LloFigures:
    """Op counts of one kernel's final LLO (all Mosaic kernels of the program summed)."""

    kernels: int
    vmatmul: int
    vector_alu: int  # llo.v* ops that compute: not loads, stores or MXU traffic
    vector_load: int
    vector_store: int
    matmul_formats: tuple[str, ...]
    fused_multiply_add: bool  # any llo op whose name says fma / madd
    ops: dict[str, int] = field(default_factory=dict)  # every llo op, by name


@dataclass
class TpuBuild:
    """One deviceless compile of one kernel for one TPU chip (module docstring).

    Bytes throughout; `vmem_bytes` is the kernel's VMEM need per TensorCore as Mosaic sees
    its blocks (None for a program without a Pallas kernel or when the dump is missing).
    """

    kernel: str
    target: str
    ok: bool
    error: str | None = None
    seconds: float = 0.0
    memory: dict[str, int] = field(default_factory=dict)
    vmem_bytes: int | None = None
    vmem_capacity_bytes: int | None = None
    llo: LloFigures | None = None
    llo_missing: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seconds"] = round(self.seconds, 3)
        return d


def _dump_dir() -> Path | None:
    """Where Mosaic dumps go in this process (None when libtpu was loaded without it)."""
    args = os.environ.get("LIBTPU_INIT_ARGS", "")
    m = re.search(rf"{_DUMP_FLAG}=(\S+)", args)
    return Path(m.group(1)) if m else None


@functools.cache
def _libtpu_loaded() -> bool:
    """Load libtpu (once), first naming a Mosaic dump directory of this process's own: a
    fresh one, inside the directory named before if one was (by the user, or inherited
    from the process that started this one).  Each process reads back the files its
    compiles add, so two processes sharing one directory (the gate's --jobs workers) would
    take each other's dumps for their own."""
    if os.environ.get(_DUMP_OWNER) != str(os.getpid()):
        d = tempfile.mkdtemp(prefix="fp8check-mosaic-", dir=_dump_dir())
        # ours alone: gone at exit (a process killed outright leaves it behind)
        atexit.register(shutil.rmtree, d, ignore_errors=True)
        others = re.sub(rf"{_DUMP_FLAG}=\S+", "", os.environ.get("LIBTPU_INIT_ARGS", ""))
        os.environ["LIBTPU_INIT_ARGS"] = f"{others.strip()} {_DUMP_FLAG}={d}".strip()
        os.environ[_DUMP_OWNER] = str(os.getpid())
    try:
        import libtpu  # noqa: F401
    except ImportError as e:
        raise ToolchainMissing("native TPU compilation needs libtpu (pip install "
                               "'fp8check[tpu]'): it is not installed") from e
    return True


def check_toolchain() -> None:
    """Raise ToolchainMissing (one line) unless libtpu loads and describes a TPU chip."""
    device("v5e")


@functools.cache
def device(chip: str):
    """A device of the TPU target `chip` (a row of `fp8check.targets.chips`) from libtpu's
    topology description of its `compile_for` name (no hardware needed)."""
    row = target(chip)
    if row.platform != "tpu":
        raise ValueError(f"{chip!r} is not a TPU target")
    _libtpu_loaded()
    from jax.experimental import topologies

    try:
        return topologies.get_topology_desc(row.compile_for, "tpu").devices[0]
    except Exception as e:  # libtpu present but unusable: say so in one line
        raise ToolchainMissing(f"libtpu could not describe {chip}: "
                               f"{_first_line(str(e))}") from e


def tpu_info_vmem_bytes(chip: str) -> int:
    """VMEM per TensorCore of `chip` as jax's own TPU table (`tpu_info`) gives it for the
    device libtpu describes: the source of the target table's `vmem_bytes` (a test holds
    the two equal)."""
    from jax._src.pallas.mosaic import tpu_info

    dev = device(chip)
    version = tpu_info.chip_version_from_device_kind(dev.device_kind)
    return tpu_info.get_tpu_info_for_chip(version, dev.num_cores).vmem_capacity_bytes


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), text)


def _compiler_message(err: Exception) -> str:
    """The compiler's message: its first line, the Mosaic error code line and the MLIR op."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    keep = lines[:1] + [ln for ln in lines[1:] if ln.startswith("%") or "E2" in ln][:2]
    return " | ".join(keep) if keep else type(err).__name__


def _padded_bytes(dims: Sequence[int], dtype: str) -> int:
    """Bytes of a VMEM buffer of `dims`: the minor dim padded to 128 lanes, the second
    minor to the dtype's sublane tile (8 rows of 32 bits, packed for narrower types)."""
    item = _DTYPE_BYTES.get(dtype, 4)
    dims = list(dims)
    dims[-1] = -(-dims[-1] // _LANES) * _LANES
    if len(dims) >= 2:
        sub = 8 * 4 // item
        dims[-2] = -(-dims[-2] // sub) * sub
    n = item
    for d in dims:
        n *= d
    return n


def mosaic_vmem_bytes(original: str) -> int:
    """VMEM one Mosaic kernel needs, from its `original` dump: every VMEM block operand
    double-buffered (the pipeline prefetches the next block while the kernel runs), the
    scratch operands (the last `scratch_operands` arguments) once."""
    # The signature only: the kernel's arguments end where its attributes start.
    header = original[:original.index(") attributes")] if ") attributes" in original else ""
    blocks = [_padded_bytes([int(d) for d in dims.split("x")], dt)
              for dims, dt in _MEMREF.findall(header)]
    m = re.search(r"scratch_operands = (\d+)", original)
    n_scratch = int(m.group(1)) if m else 0
    windowed, scratch = blocks[:len(blocks) - n_scratch], blocks[len(blocks) - n_scratch:]
    return 2 * sum(windowed) + sum(scratch)


def llo_figures(finals: Sequence[str]) -> LloFigures:
    """Op counts over the `post-finalize-llo` dumps of a program's Mosaic kernels."""
    ops: Counter[str] = Counter()
    formats: set[str] = set()
    for text in finals:
        ops.update(m.group(1) for m in _OP.finditer(text))
        formats.update(_FORMAT.findall(text))
    # MXU traffic differs by generation: v5e/v5p `vmatmul`, v6e `vmatprep.*` + `vmatmul.mubr`.
    traffic = ("vector_load", "vector_store", "vmatmul", "vmatres", "vmatprep", "vmatpush",
               "vlatch")
    alu = sum(c for op, c in ops.items()
              if op.startswith("v") and not op.startswith(traffic))
    return LloFigures(
        kernels=len(finals),
        vmatmul=sum(c for op, c in ops.items() if op.startswith("vmatmul")), vector_alu=alu,
        vector_load=ops["vector_load"], vector_store=ops["vector_store"],
        matmul_formats=tuple(sorted(formats)),
        fused_multiply_add=any("fma" in op or "madd" in op for op in ops),
        ops=dict(sorted(ops.items())))


@contextlib.contextmanager
def _not_cached() -> Iterator[None]:
    """No compile of the block enters jax's persistent compilation cache (where one is
    set: the gate's workers share one, `fp8check.gate.isolation.shared_compile_cache`), so
    none is ever loaded from it: a build's figures come from the dumps the compiler writes
    as it runs, which an executable loaded from the cache would not produce (libtpu's
    compile-only client cannot load one either)."""
    import jax

    key = "jax_persistent_cache_min_compile_time_secs"
    old = getattr(jax.config, key)
    jax.config.update(key, float("inf"))
    try:
        yield
    finally:
        jax.config.update(key, old)


def compile_for_tpu(name: str, fn: Callable, args: Sequence[tuple[tuple[int, ...], Any]],
                    chip: str) -> TpuBuild:
    """Compile `fn(*args)` for `chip` without a TPU, never through jax's persistent
    compilation cache (`_not_cached`); never raises for a compile failure.

    `args` are (shape, dtype) pairs.  Raises ToolchainMissing when libtpu is absent or
    cannot describe the chip, ValueError for an unknown chip.
    """
    import jax
    from jax.sharding import SingleDeviceSharding

    sharding = SingleDeviceSharding(device(chip))
    specs = [jax.ShapeDtypeStruct(s, d, sharding=sharding) for s, d in args]
    dump = _dump_dir()
    before = set(os.listdir(dump)) if dump and dump.is_dir() else set()
    t = time.perf_counter()
    build = TpuBuild(kernel=name, target=chip, ok=False)
    try:
        with _not_cached():
            compiled = jax.jit(fn).trace(*specs).lower(lowering_platforms=("tpu",)).compile()
    except Exception as e:  # the compiler's verdict, reported as the build's result
        build.error = _compiler_message(e)
    else:
        build.ok = True
        mem = compiled.memory_analysis()
        build.memory = {k: int(getattr(mem, k)) for k in (
            "argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes",
            "generated_code_size_in_bytes") if hasattr(mem, k)}
    build.seconds = time.perf_counter() - t
    build.vmem_capacity_bytes = target(chip).limit("vmem_bytes")
    if dump is None or not dump.is_dir():
        build.llo_missing = "libtpu was loaded before fp8check could name a Mosaic dump"
        return build
    new = sorted(set(os.listdir(dump)) - before)
    originals = [(dump / f).read_text() for f in new if f.endswith("-original.txt")]
    finals = [(dump / f).read_text() for f in new if f.endswith("post-finalize-llo.txt")]
    for f in new:
        (dump / f).unlink(missing_ok=True)
    if build.ok and originals:
        build.vmem_bytes = max(mosaic_vmem_bytes(o) for o in originals)
    if build.ok and finals:
        build.llo = llo_figures(finals)
    elif build.ok:
        build.llo_missing = "the program has no Mosaic kernel"
    return build
