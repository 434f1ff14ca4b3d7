"""Every chip layer 0 compiles for, and what fp8check knows of its FP8 arithmetic: one table.

A `Target` row says how to compile for the chip without having it (a libtpu topology; a
Triton `GPUTarget` capability), its resource limits with their sources, its FP8 datapath
(the MXU data formats that are FP8 into the MXU; the tensor-core instruction family), its
accumulator model or "unknown" with the run that would settle it, and which module reads
its compiled facts.  Layer 0 (`fp8check.layers.native`), the deviceless compilers
(`fp8check.targets.toolchains`), `fp8check gate --targets`, `fp8check tune --chip`, the report and
`docs/native.md` read this table; adding a chip is a row here and, for a new instruction
family, its reader.

Compiling is not running: a row's datapath is what the compiler emits for the chip, its
accumulator model what published measurements pin (or "unknown"); only a run on the chip
settles the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["TARGETS", "Limit", "Target", "gpu_targets", "parse_targets", "target",
           "tpu_targets"]

KiB, MiB = 1024, 1024 * 1024


@dataclass(frozen=True)
class Limit:
    """One resource limit of a target: `value` in `unit`, and where the figure comes from."""

    value: int
    unit: str
    source: str


@dataclass(frozen=True)
class Target:
    """One chip layer 0 compiles for (module docstring).

    platform: "tpu" (libtpu, compiled through `fp8check.targets.tpu`) or "cuda" (Triton's AOT
    compiler and the ptxas in its wheel, `fp8check.targets.cuda`).
    compile_for: the libtpu topology name (`jax.experimental.topologies.get_topology_desc(
    compile_for, "tpu")`) or, for CUDA, the ptxas target name; `capability` the Triton
    `GPUTarget("cuda", capability, 32)` (None for TPUs).
    limits: resource name -> `Limit`.  TPU: `vmem_bytes` per TensorCore.  CUDA:
    `smem_bytes` per block, `registers` per thread, `spill_bytes`, and where the chip has
    tensor memory `tmem_columns` per CTA.
    fp8_mxu: TPU only: True when the MXU takes FP8 operands itself (the LLO's
    `matmul_data_format<e4m3b>`), False when FP8 enters it converted (`e4m3b_to_bf16`).
    fp8_instruction: CUDA only: the tensor-core instruction family an FP8 dot must become
    ("wgmma", "tcgen05").
    datapath: what the compiler emits for an FP8 dot on this chip, in words.
    accumulator: the accumulator model's name (`fp8check.references.mma_model(target)` for
    GPUs; "float32" where the dot's partial is a float32 result of exact products) or
    "unknown"; `evidence` says what pins it, `settle` what run would settle what is not.
    facts: the function that reads the compiled facts layer 0 judges.
    """

    name: str
    platform: str
    chip: str
    compile_for: str
    limits: dict[str, Limit]
    datapath: str
    accumulator: str
    evidence: str
    settle: str
    facts: str
    capability: int | None = None
    fp8_mxu: bool = False
    fp8_instruction: str | None = None
    aliases: tuple[str, ...] = field(default=())

    def limit(self, name: str) -> int:
        """The value of limit `name` (KeyError when the target has no such limit)."""
        return self.limits[name].value


_TPU_INFO = "jax's TPU table (jax._src.pallas.mosaic.tpu_info: vmem_capacity_bytes per core)"
_TPU_FACTS = "fp8check.targets.tpu.llo_figures (matmul_data_format<...> in the final LLO)"
_TPU_ACC = ("float32: the MXU's partial of exact products (e4m3 x e4m3 has 8 significant "
            "bits, exact in bf16 and in float32) accumulated in float32; the scale step on "
            "the VPU is vmul.f32 then vadd.f32 (no FMA in the LLO: recipe `tokamax`)")
_TPU_UNKNOWN = ("the order and rounding of the MXU's float32 accumulation inside one pass "
                "are not published: the gate holds TPU kernels to bound_ratio <= 1 (any "
                "float32 summation order), never bit for bit")
_TPU_SETTLE = ("python benchmarks/mxu_probe.py on the chip: dot products built to separate "
               "IEEE float32 accumulation (any order) from a narrower or truncating one")
_CUDA_SMEM = ("CUDA C++ Programming Guide, technical specifications per compute capability: "
              "228 KiB shared memory per SM, at most 227 KiB per block")
_CUDA_REGS = "CUDA C++ Programming Guide: at most 255 registers per thread"
_SPILLS = ("0: ptxas spilling to local memory in an FP8 GEMM main loop is a performance bug "
           "the compile shows and a run would only hint at")


def _tpu(name: str, chip: str, topology: str, vmem: int, *, fp8_mxu: bool, datapath: str,
         accumulator: str, evidence: str, settle: str,
         aliases: tuple[str, ...] = ()) -> Target:
    return Target(name, "tpu", chip, topology,
                  {"vmem_bytes": Limit(vmem, "bytes per TensorCore", _TPU_INFO)},
                  datapath, accumulator, evidence, settle, _TPU_FACTS, fp8_mxu=fp8_mxu,
                  aliases=aliases)


def _cuda(name: str, chip: str, capability: int, *, instruction: str, datapath: str,
          accumulator: str, evidence: str, settle: str,
          extra: dict[str, Limit] | None = None) -> Target:
    limits = {"smem_bytes": Limit(227 * KiB, "bytes per block", _CUDA_SMEM),
              "registers": Limit(255, "registers per thread", _CUDA_REGS),
              "spill_bytes": Limit(0, "bytes of spill stores + loads per thread", _SPILLS),
              **(extra or {})}
    return Target(name, "cuda", chip, name, limits, datapath, accumulator, evidence, settle,
                  "fp8check.targets.cuda (the PTX's tensor-core instructions, ptxas's report, "
                  "the cubin's resource usage)", capability=capability,
                  fp8_instruction=instruction)


_CONVERTED = ("the MXU has no FP8 mode: e4m3 operands enter it converted to bf16 "
              "(LLO matmul_data_format<e4m3b_to_bf16>, exact for every e4m3 value), so the "
              "MXU runs at its bf16 rate")

TARGETS: dict[str, Target] = {t.name: t for t in (
    _tpu("v5e", "TPU v5e", "v5e:2x2", 128 * MiB, fp8_mxu=False, datapath=_CONVERTED,
         accumulator="float32", evidence=_TPU_ACC, settle=f"{_TPU_UNKNOWN}; {_TPU_SETTLE}"),
    _tpu("v6e", "TPU v6e (Trillium)", "v6e:2x2", 128 * MiB, fp8_mxu=False,
         datapath=_CONVERTED, accumulator="float32", evidence=_TPU_ACC,
         settle=f"{_TPU_UNKNOWN}; {_TPU_SETTLE}"),
    _tpu("v5p", "TPU v5p", "v5p:2x2x1", 64 * MiB, fp8_mxu=False, datapath=_CONVERTED,
         accumulator="float32", evidence=_TPU_ACC, settle=f"{_TPU_UNKNOWN}; {_TPU_SETTLE}"),
    _tpu("v7x", "TPU v7x (Ironwood; libtpu's device kind TPU7x)", "tpu7x:2x2x1", 64 * MiB,
         fp8_mxu=True,
         datapath=("the MXU takes e4m3 operands itself (LLO matmul_data_format<e4m3b>, no "
                   "conversion on the way in) and returns float32; the scale step stays on "
                   "the VPU (vmul.f32, vadd.f32)"),
         accumulator="unknown",
         evidence=("the LLO shows FP8 operands and a float32 result; how the FP8 MXU "
                   "accumulates a 128- or 256-deep dot (exact products and IEEE float32 "
                   "sums, or a narrower fixed-point accumulator as NVIDIA's tensor cores "
                   "have) is not published.  The gate assumes float32 accumulation of "
                   "exact products in any order (bound_ratio <= 1 with u = 2^-24); if the "
                   "MXU truncates like Hopper's, correct v7x kernels would fail bound_ratio "
                   "and bias at large K (a false alarm, never a false pass)"),
         settle=("python benchmarks/mxu_probe.py --chip v7x on a v7x: single-pass dots "
                 "whose float32 result differs between exact-then-RNE, truncation to 13-23 "
                 "fraction bits, and products aligned before summing"),
         aliases=("tpu7x",)),
    _cuda("sm_90a", "NVIDIA Hopper (H100, H200, H800)", 90, instruction="wgmma",
          datapath=("wgmma.mma_async.sync.aligned.m64nNk32.f32.e4m3.e4m3: a warpgroup MMA "
                    "from shared memory, accumulating in registers"),
          accumulator="sm_90a",
          evidence=("fp8check.references.mma_model('sm_90a'): Khattak & Mikaitis (ACM TACO, "
                    "arXiv:2512.07004), 10,000 measured H100 and 10,000 H200 k32 FP8 dot "
                    "products (tests/data/km25) reproduced bit for bit"),
          settle=("C != 0 in the chain is unmeasured for FP8: python benchmarks/native.py "
                  "--model-check and benchmarks/wgmma_probe.py on an H100/H200")),
    _cuda("sm_100a", "NVIDIA Blackwell (B200, GB200)", 100, instruction="tcgen05",
          datapath=("tcgen05.mma.cta_group::1.kind::f8f6f4: the 5th-generation tensor core, "
                    "operands from shared memory, the accumulator in tensor memory (TMEM, "
                    "tcgen05.alloc / tcgen05.ld)"),
          accumulator="sm_100a",
          evidence=("fp8check.references.mma_model('sm_100a'): Khattak & Mikaitis (ACM TACO, "
                    "arXiv:2512.07004), 10,000 measured B200 k32 FP8 dot products with C "
                    "applied (tests/data/km25) reproduced bit for bit"),
          settle=("whether a kind::f8f6f4 MMA of K=32 per instruction chains through TMEM "
                  "exactly as the model chains through C: python benchmarks/native.py "
                  "--model-check on a B200"),
          extra={"tmem_columns": Limit(
              512, "32-bit columns of tensor memory per CTA (128 lanes each)",
              "PTX ISA, tensor memory (tcgen05): 512 columns x 128 lanes per CTA; "
              "tcgen05.alloc takes a power of two from 32 to 512 columns")}),
)}


def target(name: str) -> Target:
    """The row of `name` (an alias such as libtpu's "tpu7x" names the same row).  A name
    that no row has raises ValueError listing the known ones."""
    if name in TARGETS:
        return TARGETS[name]
    for t in TARGETS.values():
        if name in t.aliases:
            return t
    raise ValueError(f"unknown target {name!r}; expected one of {', '.join(TARGETS)}")


def tpu_targets(names: Sequence[str] = tuple(TARGETS)) -> list[Target]:
    """The TPU rows among `names` (every TPU by default), in order."""
    return [t for t in map(target, names) if t.platform == "tpu"]


def gpu_targets(names: Sequence[str] = tuple(TARGETS)) -> list[Target]:
    """The CUDA rows among `names` (every GPU by default), in order."""
    return [t for t in map(target, names) if t.platform == "cuda"]


def parse_targets(text: str | None) -> tuple[str, ...]:
    """"v7x,sm_100a" -> ("v7x", "sm_100a"); None -> every target.  Aliases resolve to their
    row's name.  ValueError (one line, listing the known names) for an unknown or empty
    list."""
    if text is None:
        return tuple(TARGETS)
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ValueError(f"--targets {text!r}: expected a comma list of "
                         f"{', '.join(TARGETS)}")
    bad = []
    rows: list[str] = []
    for n in names:
        try:
            rows.append(target(n).name)
        except ValueError:
            bad.append(n)
    if bad:
        raise ValueError(f"unknown target {', '.join(bad)}; expected a comma list of "
                         f"{', '.join(TARGETS)}")
    return tuple(dict.fromkeys(rows))
