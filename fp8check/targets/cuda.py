"""Deviceless native compilation of Triton kernels for NVIDIA GPUs (the CUDA rows of
`fp8check.targets.chips`: Hopper sm_90a, Blackwell sm_100a), no GPU needed.

`compile_for_cuda` runs Triton's own AOT pipeline (``triton.compile(ASTSource(fn,
signature, constexprs), target=GPUTarget("cuda", capability, 32))``) down to a cubin with
the ptxas shipped in the triton wheel, and reads back what the compiler produced: shared
memory and global scratch (bytes, from Triton's metadata), registers per thread (from the
cubin, ``cuobjdump --dump-resource-usage``), spill stores/loads (bytes, from ptxas's own
``-v`` report), and what the PTX uses:

* the tensor-core MMAs, each as ``<family> <shape>.<accumulator>.<a>.<b>``: Hopper's
  ``wgmma.mma_async`` (shape and types from the instruction's own suffix), Blackwell's
  ``tcgen05.mma`` (kind from the suffix; M, N, accumulator and operand types decoded from
  its 32-bit instruction descriptor, PTX ISA "Instruction descriptor" table for
  ``.kind::f8f6f4`` / ``.kind::f16``), and any ``mma.sync`` (the pre-Hopper fallback);
* TMA (``cp.async.bulk.tensor``) and tensor memory: the columns ``tcgen05.alloc`` asks for;
* the ``maxNumImpreciseAcc`` of the TTGIR's ``warp_group_dot`` (sm_90: how many K products
  an FP8 WGMMA may add in its reduced-precision accumulator before promoting to fp32;
  Triton's default 2**30 means never).

Compiling is not running: a build that compiles says what the compiler emitted, not what
the hardware computes; a native run on the GPU is still the last word.

Each batch compiles in a fresh Python subprocess with ``TRITON_INTERPRET=0`` and an empty
Triton cache.  That is necessary, not cosmetic: in interpret mode (which
``fp8check.kernels.triton`` selects on a CPU machine) every ``@triton.jit`` function,
triton.language's own included, is an ``InterpretedFunction`` that the compiler rejects;
it also keeps compiler crashes and Triton's stdout dumps out of the caller.  The kernel is
re-imported there by ``module`` and ``qualname``, so it must be defined at module level of
an importable module (the caller's ``sys.path`` is passed on).  This module never imports
triton in the caller's process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fp8check.targets.toolchains import ToolchainMissing

_ERROR_LINES = 12  # lines of a compiler message kept in CudaBuild.error


@dataclass(frozen=True)
class CudaBuild:
    """What the compile of one kernel for one GPU target produced (None: not known, e.g.
    ok=False).

    shared_bytes: dynamic shared memory per block (Triton's ``metadata.shared``), bytes.
    registers: per thread, from the cubin.  spill_*_bytes: ptxas's spill traffic, bytes
    per thread.  global_scratch_bytes: per-program global scratch Triton asks the runtime
    allocator for (tensor descriptors built in the kernel live there), bytes.
    mma_shapes: the distinct tensor-core MMAs (module docstring), e.g.
    ``wgmma m64n128k32.f32.e4m3.e4m3`` or ``tcgen05 kind::f8f6f4 m128n128.f32.e4m3.e4m3``
    (``?`` for a field of a tcgen05 descriptor that is not a constant in the PTX).
    mma_fp8: some tensor-core MMA has e4m3/e5m2 operands.  mma_sync: the PTX has
    an ``mma.sync`` (Ampere-style, not the target's FP8 tensor-core path).
    tmem_columns: the most tensor-memory columns one ``tcgen05.alloc`` asks for (None: no
    allocation, or not a constant).  max_num_imprecise_acc: the largest
    ``maxNumImpreciseAcc`` on a TTGIR ``warp_group_dot`` (None: no such op or attribute).
    seconds: wall time of ``triton.compile`` (source to cubin, ptxas included); the first
    compile in a process also pays the compiler's one-off start (about 0.5 s here).
    """

    kernel: str
    target: str
    ok: bool
    error: str | None = None
    shared_bytes: int | None = None
    registers: int | None = None
    spill_stores_bytes: int | None = None
    spill_loads_bytes: int | None = None
    global_scratch_bytes: int | None = None
    mma_fp8: bool = False
    mma_sync: bool = False
    tma: bool = False
    mma_shapes: tuple[str, ...] = ()
    tmem_columns: int | None = None
    max_num_imprecise_acc: int | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["mma_shapes"] = list(self.mma_shapes)
        return d


@dataclass(frozen=True)
class CudaJob:
    """One kernel to compile: what `compile_for_cuda` takes, for `compile_many`.

    signature: argument name -> Triton type (``"*fp8e4nv"``, ``"i32"``, ``"constexpr"``);
    a constexpr missing from it is added.  constexprs: name -> value (int, float, bool, str,
    None or a ``tl.dtype``).  attrs: name -> ((attribute, value), ...), e.g.
    ``{"a_ptr": (("tt.divisibility", 16),)}`` as Triton's launcher specializes 16-byte
    aligned pointers and integers; None compiles without those hints.
    """

    name: str
    fn: Any
    signature: Mapping[str, str]
    constexprs: Mapping[str, Any] = field(default_factory=dict)
    attrs: Mapping[str, tuple[tuple[str, Any], ...]] | None = None
    num_warps: int = 4
    num_stages: int = 3
    capability: int = 90


def target_name(capability: int) -> str:
    """ptxas's --gpu-name for a capability, as Triton picks it (sm_90 -> ``sm_90a``)."""
    return f"sm_{capability}{'a' if capability >= 90 else ''}"


def compile_for_cuda(name: str, fn: Any, signature: dict, constexprs: dict, *,
                       attrs: dict | None = None, num_warps: int = 4, num_stages: int = 3,
                       capability: int = 90) -> CudaBuild:
    """Compile one @triton.jit kernel for sm_90a (see `CudaJob` for the arguments).

    Never raises for a kernel that does not compile: that is ok=False with the compiler's
    message.  Raises ToolchainMissing when triton's ptxas or cuobjdump cannot be run.
    """
    return compile_many([CudaJob(name, fn, signature, constexprs, attrs, num_warps,
                                   num_stages, capability)])[0]


def compile_many(jobs: Iterable[CudaJob], *, timeout_s: float = 900.0) -> list[CudaBuild]:
    """Compile every job in one subprocess (one start-up, identical jobs compiled once);
    results in job order.  A compiler crash fails only the job being compiled (ok=False)
    and the rest go on in a new process.  `timeout_s` bounds each process, seconds."""
    jobs = list(jobs)
    payloads: list[tuple[int, dict]] = []
    results: list[CudaBuild | None] = [None] * len(jobs)
    first: dict[str, int] = {}  # payload key -> index of the job that compiles it
    for i, job in enumerate(jobs):
        payload = _payload(job)
        if "error" in payload:
            results[i] = CudaBuild(job.name, target_name(job.capability), False,
                                     payload["error"])
            continue
        key = json.dumps({k: v for k, v in payload.items() if k != "name"}, sort_keys=True)
        if key in first:
            continue
        first[key] = i
        payloads.append((i, payload))
    pending = payloads
    while pending:
        done, crash = _run_worker([p for _, p in pending], timeout_s)
        for (i, _), rec in zip(pending, done, strict=False):
            results[i] = _build(rec)
        if len(done) == len(pending):
            break
        i, payload = pending[len(done)]
        results[i] = CudaBuild(payload["name"], target_name(payload["capability"]), False,
                                 crash)
        pending = pending[len(done) + 1:]
        if crash.startswith("compile process timed out"):
            for j, p in pending:
                results[j] = CudaBuild(p["name"], target_name(p["capability"]), False,
                                         "not compiled: an earlier job timed out")
            break
    builds = []
    for job, result in zip(jobs, results, strict=True):
        if result is None:  # a duplicate: the first identical job's result
            key = json.dumps({k: v for k, v in _payload(job).items() if k != "name"},
                             sort_keys=True)
            first_result = results[first[key]]
            assert first_result is not None  # every job in `first` got a result above
            result = replace(first_result, kernel=job.name)
        builds.append(result)
    return builds


def toolchain(capability: int = 90) -> dict[str, Any]:
    """Paths and versions of what compiles for `capability`: triton, the ptxas Triton uses
    for it (``ptxas-blackwell`` from sm_90 on, despite its name), cuobjdump and nvdisasm.
    ``missing`` names what cannot be run (None when all is there)."""
    return _toolchain_cached(capability)


def check_toolchain(capability: int = 90) -> dict[str, Any]:
    """`toolchain()`, or ToolchainMissing (one line) when something needed is missing."""
    tools = toolchain(capability)
    if tools["missing"]:
        raise ToolchainMissing(tools["missing"])
    return tools


# ------------------------------------------------------------------------ parent side

_TOOLCHAIN: dict[int, dict[str, Any]] = {}


def _toolchain_cached(capability: int) -> dict[str, Any]:
    if capability not in _TOOLCHAIN:
        _TOOLCHAIN[capability] = _run_worker([], 120.0, capability)[0][0]
    return _TOOLCHAIN[capability]


def _fn_ref(fn: Any) -> tuple[str, str] | str:
    """(module, qualname) of the Python function behind a JITFunction or
    InterpretedFunction (both keep it in ``.fn``), or why it cannot be re-imported."""
    raw = getattr(fn, "fn", fn)
    module, qualname = getattr(raw, "__module__", None), getattr(raw, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname or module == "__main__":
        return (f"cannot compile {qualname or fn!r}: the compile process re-imports the kernel "
                f"by module and name, so define it at module level of an importable module "
                f"(got module {module!r})")
    return module, qualname


def _json_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if type(value).__module__.startswith("triton.language") and hasattr(value, "name"):
        return {"tl_dtype": value.name}
    raise TypeError(f"constexpr value {value!r} is not an int, float, bool, str, None or "
                    f"tl.dtype")


def _payload(job: CudaJob) -> dict[str, Any]:
    """The JSON the compile process gets for `job` ({"error": ...} if it cannot)."""
    ref = _fn_ref(job.fn)
    if isinstance(ref, str):
        return {"error": ref}
    try:
        constexprs = {k: _json_value(v) for k, v in job.constexprs.items()}
    except TypeError as e:
        return {"error": str(e)}
    signature = dict(job.signature)
    for k in constexprs:
        signature.setdefault(k, "constexpr")
    attrs = {k: [list(a) for a in v] for k, v in (job.attrs or {}).items()}
    return {"name": job.name, "module": ref[0], "qualname": ref[1], "signature": signature,
            "constexprs": constexprs, "attrs": attrs, "num_warps": job.num_warps,
            "num_stages": job.num_stages, "capability": job.capability}


def _build(rec: dict[str, Any]) -> CudaBuild:
    rec = dict(rec)
    rec["mma_shapes"] = tuple(rec.get("mma_shapes", ()))
    return CudaBuild(**rec)


def _run_worker(payloads: list[dict], timeout_s: float,
                capability: int | None = None) -> tuple[list[dict], str]:
    """Run the compile process on `payloads`: (records returned, in order; why it stopped
    early, '' if it did not).  With no payloads the one record is the toolchain of
    `capability`; otherwise ToolchainMissing if the process reports something missing for
    a capability of the payloads."""
    caps = sorted({p["capability"] for p in payloads} or {capability})
    paths = [p or os.getcwd() for p in sys.path]
    with tempfile.TemporaryDirectory(prefix="fp8check-cuda-") as tmp:
        env = dict(os.environ, TRITON_INTERPRET="0", TRITON_CACHE_DIR=os.path.join(tmp, "cache"),
                   TRITON_DUMP_PTXAS_LOG="1",
                   PYTHONPATH=os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]))
        out = os.path.join(tmp, "out.jsonl")
        request = json.dumps({"capabilities": caps, "jobs": payloads, "tmp": tmp})
        code = "import sys; from fp8check.targets.cuda import _worker; _worker(sys.argv[1])"
        why = ""
        try:
            proc = subprocess.run([sys.executable, "-c", code, out], input=request, env=env,
                                  capture_output=True, text=True, timeout=timeout_s)
            if proc.returncode:
                tail = "\n".join(_meaningful(proc.stderr)[-_ERROR_LINES:])
                why = f"compile process died (exit {proc.returncode}):\n{tail}"
        except subprocess.TimeoutExpired:
            why = f"compile process timed out after {timeout_s:.0f} s"
        records = []
        if os.path.exists(out):
            with open(out) as f:
                records = [json.loads(line) for line in f if line.strip()]
    if not records:
        raise RuntimeError(f"fp8check.targets.cuda: the compile process did not start: {why}")
    tools = records.pop(0)
    if not payloads:
        return [tools], why
    if tools.get("missing"):
        raise ToolchainMissing(tools["missing"])
    return records, why


def _meaningful(text: str) -> list[str]:
    """Non-blank lines of a message minus Python warning noise."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    return [ln for ln in lines if "Warning:" not in ln and "warn_once(" not in ln]


# ------------------------------------------------------------------ compile process


def _tool_info(get) -> dict[str, str] | str:
    try:
        tool = get()
        return {"path": tool.path, "version": tool.version}
    except Exception as e:  # triton raises RuntimeError("Cannot find <tool>")
        return str(e).splitlines()[0] if str(e) else type(e).__name__


def _worker_toolchain(capability: int) -> dict[str, Any]:
    try:
        import triton
        from triton import knobs
        from triton.backends.nvidia.compiler import get_ptxas
    except Exception as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return {"missing": f"triton cannot be imported for native compilation: {first}"}
    info: dict[str, Any] = {"triton": triton.__version__, "target": target_name(capability)}
    info["ptxas"] = _tool_info(lambda: get_ptxas(capability))
    info["cuobjdump"] = _tool_info(lambda: knobs.nvidia.cuobjdump)
    info["nvdisasm"] = _tool_info(lambda: knobs.nvidia.nvdisasm)
    missing = [f"{name} ({info[name]})" for name in ("ptxas", "cuobjdump")
               if isinstance(info[name], str)]
    info["missing"] = (f"triton {triton.__version__}'s toolchain for {target_name(capability)} "
                       f"is incomplete: {', '.join(missing)}") if missing else None
    return info


def _resolve(module: str, qualname: str):
    import importlib

    from triton.runtime.jit import JITFunction

    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, JITFunction):
        raise TypeError(f"{module}.{qualname} is not a @triton.jit function ({type(obj)})")
    return obj


class _Fd2Capture:
    """Redirect file descriptor 2 (MLIR/LLVM diagnostics are written there from C++) to a
    file for the duration of one compile."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.text = ""

    def __enter__(self) -> _Fd2Capture:
        sys.stderr.flush()
        self._saved = os.dup(2)
        self._file = open(self.path, "w+")  # noqa: SIM115
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc) -> None:
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read()
        self._file.close()


def _error_text(exc: BaseException, diagnostics: str) -> str:
    """The compiler's own message: the exception's meaningful lines (its first and, when
    long, its last: a CompilationError quotes the kernel down to the failing line, then
    the message), plus the error lines the compiler wrote to stderr (a failed MLIR pass
    says little more than that it failed)."""
    lines = _meaningful(str(exc))
    lines = [f"{type(exc).__name__}: {lines[0] if lines else ''}", *lines[1:]]
    if len(lines) > _ERROR_LINES:  # Triton's CompilationError ends with the message
        lines = [lines[0], "...", *lines[-(_ERROR_LINES - 2):]]
    diag = [ln for ln in _meaningful(diagnostics) if "error" in ln.lower()]
    if diag:
        lines += ["diagnostics:", *diag[:_ERROR_LINES]]
    return "\n".join(lines)


_WGMMA = re.compile(r"\bwgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+\.[\w.]+)")
# tcgen05.mma[.cta_group::N].kind::K [d-tmem], a-desc, b-desc, idesc, enable-input-d;
_TCGEN05 = re.compile(r"\btcgen05\.mma(?:\.cta_group::\d)?\.(kind::\w+)\s+\[[^\]]*\],"
                      r"\s*[^,]+,\s*[^,]+,\s*([^,;\s]+)")
_TMEM_ALLOC = re.compile(r"\btcgen05\.alloc\.[\w:.]+\s+\[[^\]]*\],\s*([^;\s]+);")
# The instruction descriptor's operand types (PTX ISA, tcgen05 instruction descriptor):
# .kind::f8f6f4 codes 0 E4M3, 1 E5M2, 3 E2M3, 4 E3M2, 5 E2M1; .kind::f16 0 F16, 1 BF16.
_IDESC_TYPES = {"kind::f8f6f4": {0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"},
                "kind::f16": {0: "f16", 1: "bf16"}}
_IDESC_ACC = {0: "f16", 1: "f32", 2: "s32"}
_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_IMPRECISE = re.compile(r"maxNumImpreciseAcc\s*=\s*(\d+)")


def _cubin_registers(cubin: bytes, kernel: str, tmp: str) -> int | None:
    """Registers per thread of `kernel` in `cubin`, from cuobjdump --dump-resource-usage."""
    from triton import knobs

    path = os.path.join(tmp, f"{kernel}.cubin")
    with open(path, "wb") as f:
        f.write(cubin)
    proc = subprocess.run([knobs.nvidia.cuobjdump.path, "--dump-resource-usage", path],
                          capture_output=True, text=True)
    text = proc.stdout if proc.returncode == 0 else ""
    m = re.search(rf"Function {re.escape(kernel)}:\s*REG:(\d+)", text)
    return int(m.group(1)) if m else None


def _constant(ptx: str, operand: str) -> int | None:
    """The value of a PTX operand: an integer literal, or a register whose every
    ``mov.b32``/``mov.u32`` in the PTX sets it to one and the same literal (None
    otherwise)."""
    if re.fullmatch(r"\d+", operand):
        return int(operand)
    values = set(re.findall(rf"\bmov\.[bu]32\s+{re.escape(operand)},\s*(-?\d+);", ptx))
    return int(values.pop()) & 0xFFFFFFFF if len(values) == 1 else None


def _tcgen05_shape(kind: str, idesc: int | None) -> str:
    """``kind::f8f6f4 m128n128.f32.e4m3.e4m3`` from a tcgen05.mma's kind and instruction
    descriptor: bits 4-5 the accumulator type, 7-9 and 10-12 A's and B's types, 17-22
    N >> 3, 24-28 M >> 4 (PTX ISA, tcgen05 instruction descriptor)."""
    if idesc is None:
        return f"{kind} ?"
    types = _IDESC_TYPES.get(kind, {})
    acc = _IDESC_ACC.get((idesc >> 4) & 3, "?")
    a, b = (types.get((idesc >> lo) & 7, "?") for lo in (7, 10))
    n, m = ((idesc >> 17) & 0x3F) << 3, ((idesc >> 24) & 0x1F) << 4
    return f"{kind} m{m}n{n}.{acc}.{a}.{b}"


def fp8_mma(shape: str) -> bool:
    """Whether an `mma_shapes` entry has e4m3/e5m2 operands."""
    return re.search(r"\.e(4m3|5m2)\b", shape) is not None


def mma_facts(ptx: str) -> dict[str, Any]:
    """The tensor-core facts of a kernel's PTX (comments removed first): `mma_shapes`,
    `mma_fp8`, `mma_sync`, `tma`, `tmem_columns` (see `CudaBuild`)."""
    ptx = re.sub(r"//[^\n]*", "", ptx)
    shapes = {f"wgmma {s}" for s in _WGMMA.findall(ptx)}
    shapes |= {f"tcgen05 {_tcgen05_shape(kind, _constant(ptx, idesc))}"
               for kind, idesc in _TCGEN05.findall(ptx)}
    allocs = [_constant(ptx, c) for c in _TMEM_ALLOC.findall(ptx)]
    return {
        "mma_shapes": sorted(shapes),
        "mma_fp8": any(map(fp8_mma, shapes)),
        "mma_sync": bool(re.search(r"\bmma\.sync\.", ptx)),
        "tma": "cp.async.bulk.tensor" in ptx,
        "tmem_columns": (None if not allocs or None in allocs
                         else max(c for c in allocs if c is not None)),
    }


def _analyse(name: str, kernel, ptxas_log: str, seconds: float, tmp: str,
             capability: int) -> dict[str, Any]:
    imprecise = [int(v) for line in kernel.asm["ttgir"].splitlines() if "warp_group_dot" in line
                 for v in _IMPRECISE.findall(line)]
    spills = _SPILLS.search(ptxas_log)
    regs = _cubin_registers(kernel.asm["cubin"], kernel.metadata.name, tmp)
    if regs is None and (m := _PTXAS_REGS.search(ptxas_log)):
        regs = int(m.group(1))
    return {
        "kernel": name, "target": target_name(capability), "ok": True, "error": None,
        "shared_bytes": int(kernel.metadata.shared),
        "registers": regs,
        "spill_stores_bytes": int(spills.group(1)) if spills else None,
        "spill_loads_bytes": int(spills.group(2)) if spills else None,
        "global_scratch_bytes": int(getattr(kernel.metadata, "global_scratch_size", 0) or 0),
        **mma_facts(kernel.asm["ptx"]),
        "max_num_imprecise_acc": max(imprecise) if imprecise else None,
        "seconds": round(seconds, 3),
    }


def _compile_one(job: dict[str, Any], tmp: str) -> dict[str, Any]:
    import contextlib
    import io
    import warnings

    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cap, name = job["capability"], job["name"]
    failed = {"kernel": name, "target": target_name(cap), "ok": False}
    try:
        fn = _resolve(job["module"], job["qualname"])
    except Exception as e:
        return failed | {"error": f"cannot import {job['module']}.{job['qualname']} in the "
                                  f"compile process: {type(e).__name__}: {e}"}
    constexprs = {k: tl.dtype(v["tl_dtype"]) if isinstance(v, dict) else v
                  for k, v in job["constexprs"].items()}
    try:
        attrs = {(fn.arg_names.index(k),): v for k, v in job["attrs"].items()}
    except ValueError as e:
        return failed | {"error": f"attrs name an argument the kernel does not have: {e}"}
    log = io.StringIO()
    t0 = time.perf_counter()
    fd2 = _Fd2Capture(os.path.join(tmp, "stderr.txt"))
    try:
        with fd2, contextlib.redirect_stdout(log), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            src = ASTSource(fn=fn, signature=job["signature"], constexprs=constexprs,
                            attrs=attrs)
            kernel = triton.compile(src, target=GPUTarget("cuda", cap, 32),
                                    options={"num_warps": job["num_warps"],
                                             "num_stages": job["num_stages"]})
    except Exception as e:
        return failed | {"error": _error_text(e, fd2.text),
                         "seconds": round(time.perf_counter() - t0, 3)}
    return _analyse(name, kernel, log.getvalue(), time.perf_counter() - t0, tmp, cap)


def _worker(out_path: str) -> None:
    """Compile-process entry point: the request (JSON) on stdin, one JSON line per result
    in `out_path`, the first one the toolchain."""
    request = json.loads(sys.stdin.read())
    found = [_worker_toolchain(cap) for cap in request["capabilities"]]
    tools = found[0] | {"missing": "; ".join(t["missing"] for t in found if t["missing"])
                        or None}
    with open(out_path, "a") as out:
        out.write(json.dumps(tools) + "\n")
        out.flush()
        if tools["missing"]:
            return
        for job in request["jobs"]:
            out.write(json.dumps(_compile_one(job, request["tmp"])) + "\n")
            out.flush()
