"""Bit-accurate models of NVIDIA FP8 tensor-core MMA steps (e4m3 / e5m2 operands, float32
accumulator): one engine, `MmaModel`, and each chip's parameters, `HOPPER_FP8` (sm_90a:
`wgmma` k32) and `BLACKWELL_FP8` (sm_100a); `mma_model(target)` gives a target's.

What one step computes (D = C + sum_k a_k b_k over `group` products, one output element;
the `MmaModel` fields in brackets):

1. Products are exact.  Each operand is decoded as a = (-1)^s m 2^(e - f): m the integer
   significand with its implicit bit (e4m3: f = 3, m < 16; e5m2: f = 2, m < 8), e =
   max(exponent field, 1) - bias, so subnormals keep the smallest exponent.  A product
   keeps its *unnormalised* form: significand m_a m_b (in [1, 4) after scaling, or below 1
   for subnormal operands) at exponent E = e_a + e_b [normalized_products = False].  Zero
   products are dropped.
2. Alignment: E_max = the largest E of the nonzero products, and the exponent of C
   (floor(log2 |C|), at least -126) when C != 0 and C joins the alignment
   [c_in_alignment].  Every aligned term is scaled to the fixed-point grid
   2^(E_max - frac_bits) [frac_bits] and cut to it on its own: the magnitude truncated,
   i.e. each term rounded toward zero [align_rounding = "rz"]; no sticky bits.
3. The aligned integers are summed exactly (the adder has carry room for every term).
4. Where C does not join the alignment, the products' sum is first cut to sum_frac_bits
   fraction bits below its leading bit [sum_frac_bits, sum_rounding] (None: kept exact),
   and C is then added to it exactly.
5. Normalisation: the result is rounded once to out_frac_bits fraction bits [rounding,
   out_frac_bits] with float32's exponent range: below 2^-126 the grid stays
   2^(-126 - out_frac_bits); a sum of exactly zero gives +0; 2^128 and above gives +-inf.
6. A kernel chains steps through C: `mma_block` runs K / group steps in K order, each
   step's D the next step's C.  DeepGEMM on sm_90 starts every 128-wide K block from zero
   (the first of its 4 WGMMAs has scale-d = 0) and promotes the block's D to a float32
   accumulator on the CUDA cores: `block_partial` is that D.
7. Non-finite values (IEEE semantics, as in Khattak and Mikaitis's GEMM driver): a NaN
   operand, inf * 0, a NaN C, or +inf and -inf together give NaN; otherwise an infinite
   product or C gives that infinity.  Per step, so a NaN reaches exactly the outputs whose
   row of A or column of B holds one, and stays there through later steps.

`HOPPER_FP8` (sm_90a): group 32, frac_bits = 13, C aligned with the products, truncated to
13 fraction bits (the "e8m13" / FP22 accumulator: every finite normal D has its 10 lowest
fraction bits zero).

`BLACKWELL_FP8` (sm_100a): group 32, frac_bits = 25, the products aligned among themselves
and their sum truncated to a float32 value P (23 fraction bits, toward zero); then
D = P + C rounded to nearest even in float32, i.e. an IEEE float32 addition of C.

Sources, and what each says:

* [KM25] F. A. Khattak, M. Mikaitis, "Accurate Models of NVIDIA Tensor Cores", arXiv:
  2512.07004 (Dec 2025; ACM TACO), with its MATLAB models
  (github.com/north-numerical-computing/MATLAB-tensor-core, BSD-2).
  `models/tools/Generic_BFMA_TC.m` is their algorithm (steps 1-5: unsigned magnitudes
  shifted right, then summed with their signs; late_partial_sum adds C after the
  products); `models/tools/GEMM.m` chains k32 blocks through C (step 6) and does the
  NaN/Inf handling (step 7).  `models/H100TC.m` sets for fp8 inputs fma = 32 ("FMA size is
  16, but interleaved pattern is used to join two 16-element vectors"), neab = -10 (so
  23 - 10 = 13 bits after alignment *and* in the output), frmode = 'rz',
  global_alignment = 1 with late_partial_sum = 0 (C aligned with the products),
  stkbitenabled = 0, denorm_prd = 1 (products not normalised), min_exp_limit = -133 (a
  floor on E_max that fp8 products never reach).  `models/B200TC.m` sets the same for fp8
  but neab = 2 (25 alignment bits, a 23-bit output); `models/B200TCRN.m` is that with
  frmode = 'rne'.  Their validation data (`model_validation/<GPU>/E4M3`, `.../E5M2`) are
  5000 random k32 dot products per format, measured with `mma.sync.m16n8k32` (their
  `model_validation/CUDA/mma_fp8_output_fp32.cu`) and random float32 C; their validation
  script replaces C by 0 for H100 and H200 FP8 ("D = AB + D where D is zero for fp8 with
  WGMMA"), and their H100 and H200 files hold the same inputs and outputs.  The H100,
  H200 and B200 sets are in tests/data/km25 (with their licence), and
  tests/test_mma_models.py runs both models over all of them: 0 misses is the claim.
* [HPEC25] Khattak, Mikaitis, "Generalized Methodology for Determining Numerical Features
  of Hardware Floating-Point Matrix Multipliers: Part I", IEEE HPEC 2025: the feature list
  (alignment bits, carry bits, normalisation points, rounding modes, FMA size) that the
  model's parameters stand for.
* [SA2] J. Zhang et al., "SageAttention2", arXiv:2411.10958, on Ada and Hopper
  mma(f32.f8.f8.f32): with A = B = 0 and C varied, D = C when C has at most 13 mantissa
  bits, otherwise D is C with its 10 lowest mantissa bits zeroed (truncated); the
  accumulator is "FP22: 1 sign, 8 exponent, 13 mantissa bits".
* [DSV3] DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437: section 3.3.2,
  FP8 GEMM accumulation on H800 "is limited to retaining around 14 bits"; promotion to
  FP32 on CUDA cores every N_C = 128 elements (4 WGMMAs); a maximum relative error of
  nearly 2% for K = 4096 without it (a preliminary test).  Section 3.5.2 (quoted in
  deepseek-ai/DeepGEMM#37): "fixed-point accumulation, aligning the mantissa products by
  right-shifting based on the maximum exponent before addition ... it only uses the highest
  14 bits of each mantissa product after sign-fill right shifting, and truncates bits
  exceeding this range", and "to achieve precise FP32 results from the accumulation of 32
  FP8 x FP8 multiplications, at least 34-bit precision is required".
* [FHMP21] M. Fasi, N. J. Higham, M. Mikaitis, S. Pranesh, "Numerical behavior of NVIDIA
  tensor cores", PeerJ Comput. Sci. 7:e330 (2021): on V100 / T4 / A100 (fp16, no fp8) the
  same family: exact products, alignment to the largest exponent with truncation, one
  normalisation per block FMA, round toward zero.
* Triton (triton-lang/triton#2300): `tl.dot(..., max_num_imprecise_acc=n)` lets a Hopper
  fp8 dot accumulate n K elements in the tensor core before adding the partial into a
  separate float32 accumulator (WarpGroupDotOp::needsPartialAccumulator: fp8 operands,
  fp32 accumulator, n <= the tile's K); the sm_90 default is 2**30, i.e. never promote.
* Secondary: a PyTorch blog post, as summarised elsewhere: truncating up to the 10 lowest
  mantissa bits of software results reproduces the hardware's FP8 outputs (e8m13).

Hopper: where the sources disagree or are silent, and what `HOPPER_FP8` takes (misses of
[KM25]'s 5000 e4m3 outputs, e5m2 in brackets):

* Sign at alignment: [DSV3] says "sign-fill right shifting" (a two's-complement arithmetic
  shift: negative terms rounded toward -inf); [KM25] shifts magnitudes (toward zero).
  The floor variant misses 1030 (541), the magnitude variant none.  `align_rounding =
  "floor"` keeps the other reading available.
* Width: "14 bits" [DSV3], "13 mantissa bits" [SA2], neab = -10 [KM25] agree once the
  reference point is fixed: 13 fraction bits below the unnormalised product exponent
  E_max = max(e_a + e_b).  12 fraction bits miss 2617 (1708), 14 bits 2092 (1198), E_max
  taken from normalised products 462 (157), rounding the normalised sum to nearest 715
  (440), each term rounded to nearest 905 (457); the model 0 (0).
* Group: wgmma's k32, and [KM25]'s fma = 32.  Two 16-wide steps chained through a
  truncated C miss 814 (378), so the instruction behaves as one 32-term alignment.
* How C joins: [KM25] aligns C with the products, but their Hopper FP8 outputs are those
  of C = 0 (tests/test_mma_models.py checks it), and [SA2]'s C-only test cannot tell:
  both `c_in_alignment` values reproduce it.  Unvalidated for FP8 with C != 0;
  `c_in_alignment = False` is the alternative.
* Signed zeros (+0 always), overflow (+-inf even under truncation) and subnormal outputs
  (grid 2^-139) follow [KM25]'s code; no publication measured them for FP8.
* `probe_cases` lists inputs that tell these readings apart on a real Hopper GPU.

Blackwell: what [KM25]'s B200 data fix, and what `BLACKWELL_FP8` takes beyond them (misses
of 5000 e4m3 outputs, e5m2 in brackets; tests/test_mma_models.py checks that each
alternative misses some and the undecided ones none):

* [KM25]'s `B200TC.m` as written (C aligned with the products, 25 bits, truncated
  output) misses 1793 (1764); `B200TCRN.m` (the same rounded to nearest) 246 (283).  The
  B200 applies C (unlike their Hopper data): the outputs are within half an ulp of the
  exact C + sum a_k b_k except where tiny e5m2 products fall below the alignment grid.
* C added after the products (step 4), one rounding to nearest even: 0 (1).  The one
  miss needs the products' sum cut to a float32 value first: cut toward zero to 23
  fraction bits, 0 (0) (the model); to 22 bits 0 (8), to 24 bits 0 (1), rounded to
  nearest 0 (1).  The final rounding toward zero instead misses 1849 (1817).  This
  matches [KM25]'s note in `Generic_BFMA_TC.m` on the fp8 path that C "is added at the
  end with RNE".
* Alignment width: every frac_bits from 23 up reproduces all 10000 (22 and below miss
  some e5m2 outputs); the model takes 25, [KM25]'s neab = 2.  One 32-term alignment and
  two 16-term halves (contiguous or interleaved, summed exactly) both reproduce them; the
  model takes [KM25]'s fma = 32.  Unnormalised product exponents follow [KM25]
  (denorm_prd = 1); at 25 bits the data cannot tell.
* Unvalidated: the instruction.  [KM25] measured `mma.sync` on a B200; kernels compiled
  for sm_100a (DeepGEMM, Triton) issue `tcgen05.mma` (UMMA, accumulating in tensor
  memory), which nothing published has measured; the model assumes each k32 step of it is
  the measured step, chained through C.  Signed zeros (+0 for an exactly zero sum, C
  alone otherwise), overflow and subnormal outputs follow IEEE float32 addition; the
  products' sum of FP8 operands is never below 2^-53 or above 2^37 in magnitude, so its
  cut never meets float32's exponent limits.

All arithmetic is on exact integers (numba, int64): no float rounding anywhere but the
model's own.  `frac_bits` up to 40 fit int64 (40 already makes every e4m3 step exact).
Where the CPU has AVX-512, `HOPPER_FP8` and `BLACKWELL_FP8` (and the models of their
kinds, `_c_model_kind`) run on finite operands in C instead (`mma_rows.c`, the same
integers step by step, except that a Blackwell step in which no term can lose a bit at
alignment is its products' exact sum, formed in float64: `EXACT_ROUTE`; `ROWS_STATUS`
says whether it is on); the numba kernels serve everything else.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numba
import numpy as np
from numba.cpython.unsafe.numbers import leading_zeros

from fp8check.bits import bits_f32, pow2
from fp8check.references import cbuild
from fp8check.references.intdot import row_shares

__all__ = ["BLACKWELL_FP8", "HOPPER_FP8", "MODELS", "MmaModel", "block_partial", "mma_block",
           "mma_dot", "mma_model", "probe_cases", "promoted_partial"]

_ROUNDINGS = ("rz", "rne")
_ALIGN_ROUNDINGS = ("rz", "floor", "rne")
_MODE = {"rz": 0, "floor": 1, "rne": 2}
MAX_FRAC_BITS = 40


@dataclass(frozen=True)
class MmaModel:
    """The numerical features of a tensor-core MMA step (module docstring, steps 1-7).  The
    defaults are `HOPPER_FP8`'s."""

    group: int = 32
    """Products per step, aligned together: k32 for FP8 on sm_90 and sm_100 ([KM25]
    `H100TC.m`, `B200TC.m`: fma = 32; the PTX shapes m64nNk32, m16n8k32)."""

    frac_bits: int = 13
    """Fraction bits kept after alignment, below 2^E_max with E_max the largest
    unnormalised product exponent e_a + e_b (or C's): Hopper: [KM25] 23 + neab = 13; [SA2]
    FP22 with 13 mantissa bits; [DSV3] "highest 14 bits" (the leading bit and 13).
    Blackwell: [KM25] 23 + neab = 25.  1..40."""

    rounding: str = "rz"
    """Rounding of the normalised sum to out_frac_bits: "rz" (truncate; Hopper: [KM25]
    frmode = 'rz', [SA2] "truncated") or "rne" (Blackwell: [KM25]'s B200 data)."""

    align_rounding: str | None = None
    """How each term is cut to the alignment grid: "rz" (magnitude truncated, [KM25]'s
    unsigned right shifts, no sticky bit), "floor" ([DSV3]'s "sign-fill right shifting"
    read as an arithmetic shift), "rne"; None: the same as `rounding`."""

    c_in_alignment: bool = True
    """True: C is aligned and truncated together with the products ([KM25]:
    global_alignment = 1, late_partial_sum = 0).  False: the products are aligned among
    themselves and summed (then cut to sum_frac_bits), C is added exactly and the sum
    rounded once (Blackwell)."""

    sum_frac_bits: int | None = None
    """With c_in_alignment False: fraction bits, below its leading bit, that the products'
    sum keeps before C is added (cut by sum_rounding); None: the sum is kept exact.
    Blackwell: 23, the sum becomes a float32 value.  0..40."""

    sum_rounding: str = "rz"
    """How the products' sum is cut to sum_frac_bits: "rz" or "rne"."""

    normalized_products: bool = False
    """False: a product's exponent is e_a + e_b with its significand in [1, 4) ([KM25]
    denorm_prd = 1).  True: products are normalised first (exponent + 1 when the
    significand is 2 or more), so E_max is the exponent of the largest product."""

    out_frac_bits: int | None = None
    """Fraction bits of the result (float32 range, so at most 23); None: min(frac_bits, 23)
    ([KM25]: the output keeps 23 + neab bits when neab < 0)."""

    def __post_init__(self):
        if not (isinstance(self.group, int) and self.group >= 1):
            raise ValueError(f"group must be a positive int, got {self.group!r}")
        if not (isinstance(self.frac_bits, int) and 1 <= self.frac_bits <= MAX_FRAC_BITS):
            raise ValueError(f"frac_bits must be an int in 1..{MAX_FRAC_BITS}, "
                             f"got {self.frac_bits!r}")
        if self.rounding not in _ROUNDINGS:
            raise ValueError(f"rounding must be one of {_ROUNDINGS}, got {self.rounding!r}")
        if self.align_rounding is not None and self.align_rounding not in _ALIGN_ROUNDINGS:
            raise ValueError(f"align_rounding must be one of {_ALIGN_ROUNDINGS} or None, "
                             f"got {self.align_rounding!r}")
        if self.out_frac_bits is not None and not (
                isinstance(self.out_frac_bits, int) and 0 <= self.out_frac_bits <= 23):
            raise ValueError(f"out_frac_bits must be an int in 0..23 or None, "
                             f"got {self.out_frac_bits!r}")
        if self.sum_frac_bits is not None:
            if self.c_in_alignment:
                raise ValueError("sum_frac_bits needs c_in_alignment=False (C joins after "
                                 "the products' sum)")
            if not (isinstance(self.sum_frac_bits, int) and 0 <= self.sum_frac_bits <= 40):
                raise ValueError(f"sum_frac_bits must be an int in 0..40 or None, "
                                 f"got {self.sum_frac_bits!r}")
        if self.sum_rounding not in _ROUNDINGS:
            raise ValueError(f"sum_rounding must be one of {_ROUNDINGS}, "
                             f"got {self.sum_rounding!r}")
        if self.group > 2 ** (58 - self.frac_bits):
            raise ValueError("group too large for int64 sums at this frac_bits")

    @property
    def out_bits(self) -> int:
        """Fraction bits of each step's result."""
        return min(self.frac_bits, 23) if self.out_frac_bits is None else self.out_frac_bits

    @property
    def align_mode(self) -> str:
        return self.rounding if self.align_rounding is None else self.align_rounding


HOPPER_FP8 = MmaModel()
"""The sm_90 FP8 wgmma (e4m3 and e5m2, float32 accumulator) as [KM25] model it."""

BLACKWELL_FP8 = MmaModel(frac_bits=25, align_rounding="rz", rounding="rne",
                         c_in_alignment=False, sum_frac_bits=23, out_frac_bits=23)
"""The B200 (sm_100) FP8 k32 step (e4m3 and e5m2, float32 accumulator): [KM25]'s
`B200TC.m` width and group, with C added to the truncated float32 sum of the products and
rounded to nearest even, as their B200 measurements require (module docstring)."""

MODELS = {"sm_90a": HOPPER_FP8, "sm_100a": BLACKWELL_FP8}
"""Each CUDA target's FP8 tensor-core model, by the target's name."""


def mma_model(target: str) -> MmaModel:
    """The FP8 tensor-core model of a CUDA target ("sm_90a" or "sm_100a")."""
    model = MODELS.get(target) if isinstance(target, str) else None
    if model is None:
        raise ValueError(f"no tensor-core model for target {target!r}; known: "
                         f"{', '.join(MODELS)}")
    return model


# ----------------------------------------------------------------------------- decoding

_ZERO_EXP = -(1 << 20)  # exponent given to zero codes: their products never set E_max
_FMT = {  # name: (ml_dtypes dtype, exponent bits, fraction bits, bias)
    "e4m3fn": (ml_dtypes.float8_e4m3fn, 4, 3, 7),
    "e5m2": (ml_dtypes.float8_e5m2, 5, 2, 15),
}
_FMT_ALIASES = {"e4m3": "e4m3fn", "float8_e4m3fn": "e4m3fn", "float8_e5m2": "e5m2"}


def _tables(fmt: str):
    """Per code (0..255): signed integer significand (0 for zeros, NaN and Inf), exponent
    (`_ZERO_EXP` where the significand is 0) and class (0 finite, 1 +inf, 2 -inf, 3 NaN),
    all read from the bit fields."""
    _, ebits, fbits, bias = _FMT[fmt]
    code = np.arange(256)
    sign = np.where(code >> 7, -1, 1)
    field = (code >> fbits) & ((1 << ebits) - 1)
    frac = code & ((1 << fbits) - 1)
    sig = np.where(field > 0, frac + (1 << fbits), frac)
    exp = np.maximum(field, 1) - bias
    cls = np.zeros(256, np.int8)
    top = field == (1 << ebits) - 1
    if fmt == "e4m3fn":  # no infinities; S.1111.111 is NaN
        cls[top & (frac == (1 << fbits) - 1)] = 3
    else:  # IEEE-like: all-ones exponent is Inf (fraction 0) or NaN
        cls[top & (frac == 0)] = np.where(sign[top & (frac == 0)] > 0, 1, 2)
        cls[top & (frac != 0)] = 3
    sig = np.where(cls == 0, sig * sign, 0)
    exp = np.where(sig != 0, exp, _ZERO_EXP)
    return sig.astype(np.int32), exp.astype(np.int32), cls, fbits


_TABLES = {name: _tables(name) for name in _FMT}


def _nonfinite_mask(fmt: str) -> int:
    """The bits that every NaN / Inf code of `fmt` has set, and no finite code: a code c is
    non-finite exactly when c & mask == mask (checked against the tables)."""
    code = np.arange(256)
    bad = _TABLES[fmt][2] != 0
    mask = int(np.bitwise_and.reduce(code[bad])) & 0x7F
    assert np.array_equal((code & mask) == mask, bad), fmt
    return mask


_NONFINITE = {name: _nonfinite_mask(name) for name in _FMT}


def _any_nonfinite(codes: np.ndarray, fmt: str) -> bool:
    """Whether uint8 codes of `fmt` hold a NaN or Inf (a masked maximum: no table lookup
    per element)."""
    mask = _NONFINITE[fmt]
    return codes.size > 0 and int(np.bitwise_and(codes, mask).max()) == mask


def _fmt_name(fmt) -> str:
    name = _FMT_ALIASES.get(fmt, fmt) if isinstance(fmt, str) else fmt
    if name not in _FMT:
        raise ValueError(f"unknown FP8 format {fmt!r}; expected 'e4m3fn' or 'e5m2'")
    return name


def _codes(x, fmt, what: str) -> tuple[np.ndarray, str]:
    """(uint8 codes, format name) of an ml_dtypes FP8 array or a uint8 code array."""
    x = np.asarray(x)
    from_dtype = {np.dtype(v[0]): k for k, v in _FMT.items()}.get(x.dtype)
    if from_dtype is not None:
        if fmt is not None and _fmt_name(fmt) != from_dtype:
            raise ValueError(f"{what} is {x.dtype} but fmt says {fmt!r}")
        return x.view(np.uint8), from_dtype
    if x.dtype != np.uint8:
        raise ValueError(f"{what} must be float8_e4m3fn / float8_e5m2 or uint8 codes, "
                         f"got {x.dtype}")
    return x, _fmt_name("e4m3fn" if fmt is None else fmt)


def _split_fmt(fmt):
    if isinstance(fmt, tuple | list):
        if len(fmt) != 2:
            raise ValueError("fmt must be one format or a pair (fmt_a, fmt_b)")
        return fmt[0], fmt[1]
    return fmt, fmt


# ----------------------------------------------------------------------------- the kernel

@numba.njit(cache=True, inline="always")
def _bitlen(x):
    """Bit length of a nonnegative int64 (0 for 0)."""
    return 64 - leading_zeros(x)


@numba.njit(cache=True, inline="always")
def _scale(m, r, mode):
    """m * 2^r cut to an integer: exact for r >= 0, else rounded by `mode` (0 toward zero,
    1 toward -inf, 2 to nearest even)."""
    if r >= 0:
        return m << r
    s = min(-r, 62)
    if mode == 1:
        return m >> s
    a = -m if m < 0 else m
    t = a >> s
    if mode == 2:
        rem = a - (t << s)
        half = np.int64(1) << (s - 1)
        if rem > half or (rem == half and (t & 1) == 1):
            t += 1
    return -t if m < 0 else t


@numba.njit(cache=True, inline="always")
def _shift_odd(m, s):
    """m / 2^s (s > 0) rounded to odd: truncated toward zero, the last bit set if inexact."""
    a = -m if m < 0 else m
    s = min(s, 62)
    t = a >> s
    if a - (t << s) != 0:
        t |= 1
    return -t if m < 0 else t


@numba.njit(cache=True, inline="always")
def _round_out(s, unit, mode, out_bits):
    """The float (a float32 value, or +-inf) of s * 2^unit rounded to out_bits fraction bits
    in float32's exponent range (mode 0 toward zero, 2 to nearest even); 0 gives +0."""
    if s == 0:
        return 0.0
    a = -s if s < 0 else s
    top = _bitlen(a) - 1 + unit  # exponent of the leading bit
    q = max(top, -126) - out_bits  # exponent of the last kept bit
    if q > unit:
        sh = q - unit
        t = a >> sh if sh < 63 else np.int64(0)
        if mode == 2 and sh < 63:
            rem = a - (t << sh)
            half = np.int64(1) << (sh - 1)
            if rem > half or (rem == half and (t & 1) == 1):
                t += 1
        a = t
    else:
        q = unit
    v = float(a) * pow2(q)  # a < 2^25, q >= -149: exact
    if v >= 2.0 ** 128:
        v = math.inf
    return -v if s < 0 else v


@numba.njit(cache=True, inline="always")
def _c_parts(cv):
    """C (a float32 value) as (ic, ec) with C = ic * 2^(ec - 23), |ic| < 2^24, from its bits
    (ec = -126 for float32 subnormals)."""
    cb = bits_f32(np.float32(cv))
    field = (cb >> 23) & 0xFF
    ic = np.int64((cb & 0x7FFFFF) | ((field > 0) << 23))
    return (-ic if cb < 0 else ic), max(field, 1) - 127


@numba.njit(cache=True, inline="always")
def _cut_bits(s, unit, bits, mode):
    """s * 2^unit (s != 0) cut to `bits` fraction bits below its leading bit by `mode` (0
    toward zero, 2 to nearest even), as (s', unit') with the same meaning."""
    q = _bitlen(abs(s)) - 1 + unit - bits  # exponent of the last kept bit
    if q > unit:
        return _scale(s, unit - q, mode), q
    return s, unit


@numba.njit(cache=True)
def _finish(s, emax, has_p, ic, ec, cv, p):
    """The step's result from s, the products aligned to 2^(emax - frac) and summed (emax
    already C's exponent where C sets it), and C = ic * 2^(ec - 23) (= cv); p the model's
    parameters (`_params`)."""
    frac, amode, omode, obits, c_in, sbits, smode = p[1], p[3], p[4], p[5], p[6], p[8], p[9]
    if not has_p and cv == 0.0:
        return 0.0
    unit = emax - frac
    if not c_in and sbits >= 0 and s != 0:
        s, unit = _cut_bits(s, unit, sbits, smode)  # step 4: the products' sum cut
    if cv != 0.0:
        if c_in:
            s += _scale(ic, frac - 23 - (emax - ec), amode)
        elif not has_p or s == 0:
            s, unit = ic, ec - 23
        else:
            # s * 2^unit + ic * 2^uc exactly; or, where that needs over 61 bits, cut at
            # 2^uf with the operand reaching below uf rounded to odd there.  That operand
            # (|s| < 2^60 by the group limit, |ic| < 2^24) then leads at least 2 bits below
            # the other, so the sum keeps over 30 bits above uf, and round-to-odd there is
            # exact for the final rounding.
            uc = ec - 23
            top = max(_bitlen(abs(s)) + unit, _bitlen(abs(ic)) + uc)
            lo = min(unit, uc)
            if top - lo <= 61:
                s = (s << (unit - lo)) + (ic << (uc - lo))
                unit = lo
            else:
                uf = top - 61
                s1 = s << (unit - uf) if unit >= uf else _shift_odd(s, uf - unit)
                s2 = ic << (uc - uf) if uc >= uf else _shift_odd(ic, uf - uc)
                s, unit = s1 + s2, uf
    return _round_out(s, unit, omode, obits)


@numba.njit(cache=True)
def _special(a_sig, a_cls, b_sig, b_cls, i, j, k0, group, cv):
    """Step 6 for output (i, j), b indexed [j, k]: NaN, +-inf, or 0.0 when every product
    and C are finite (then the finite path decides)."""
    nan = math.isnan(cv)
    pinf = cv == math.inf
    ninf = cv == -math.inf
    for k in range(k0, k0 + group):
        ca = a_cls[i, k]
        cb = b_cls[j, k]
        if ca == 0 and cb == 0:
            continue
        if ca == 3 or cb == 3:
            nan = True
            continue
        if (ca == 0 and a_sig[i, k] == 0) or (cb == 0 and b_sig[j, k] == 0):
            nan = True  # inf * 0
            continue
        sa = -1 if ca == 2 or (ca == 0 and a_sig[i, k] < 0) else 1
        sb = -1 if cb == 2 or (cb == 0 and b_sig[j, k] < 0) else 1
        if sa * sb > 0:
            pinf = True
        else:
            ninf = True
    if nan or (pinf and ninf):
        return math.nan
    if pinf:
        return math.inf
    if ninf:
        return -math.inf
    return 0.0


@numba.njit(cache=True)
def _chain(a_sig, a_exp, a_cls, b_sig, b_exp, b_cls, i, j, bad, cv, p):
    """D of output (i, j) (b_* indexed [j, k]) after K / group steps from C = cv, one step
    at a time: every model (the slow path for the models the row kernel does not serve);
    bad: row i of A or row j of B holds a non-finite code."""
    group, frac, mf, amode, c_in, norm_p = p[0], p[1], p[2], p[3], p[6], p[7]
    for k0 in range(0, a_sig.shape[1], group):
        if bad or not math.isfinite(cv):
            v = _special(a_sig, a_cls, b_sig, b_cls, i, j, k0, group, cv)
            if v != 0.0 or math.isnan(v):
                cv = v
                continue
        emax = -(1 << 30)
        for k in range(k0, k0 + group):
            e = a_exp[i, k] + b_exp[j, k]
            if norm_p and abs(a_sig[i, k] * b_sig[j, k]) >> (mf + 1) != 0:
                e += 1  # significand in [2, 4): normalised
            emax = max(emax, e)
        has_p = emax > _ZERO_EXP // 2  # a zero operand puts its product near there
        ic, ec = _c_parts(cv)
        if c_in and cv != 0.0 and (not has_p or ec > emax):
            emax = ec
        s = np.int64(0)
        if has_p:
            for k in range(k0, k0 + group):
                m = np.int64(a_sig[i, k]) * b_sig[j, k]
                if m != 0:
                    s += _scale(m, frac - mf - (emax - a_exp[i, k] - b_exp[j, k]), amode)
        cv = _finish(s, emax, has_p, ic, ec, cv, p)
    return cv


@numba.njit(cache=True)
def _mma_generic(a_sig, a_exp, a_cls, b_sig, b_exp, b_cls, row_bad, col_bad, c, p, out):
    """out[i, j] = `_chain` for every output of A [M, K] and B (b_* indexed [N, K])."""
    for i in range(a_sig.shape[0]):
        for j in range(b_sig.shape[0]):
            out[i, j] = np.float32(_chain(a_sig, a_exp, a_cls, b_sig, b_exp, b_cls, i, j,
                                          row_bad[i] or col_bad[j], np.float64(c[i, j]), p))


@numba.njit(parallel=True, cache=True)
def _dots(a_sig, a_exp, a_cls, b_sig, b_exp, b_cls, bad, c, p, out):
    """out[i] = `_chain` of row i of A with row i of B (both [n, K])."""
    for i in numba.prange(a_sig.shape[0]):
        out[i] = np.float32(_chain(a_sig, a_exp, a_cls, b_sig, b_exp, b_cls, i, i, bad[i],
                                   np.float64(c[i]), p))


@numba.njit(parallel=True, cache=True)
def _mma_rows(a_sig, a_exp, a_cls, b_sig, b_exp, b_cls, bt_sig, bt_cls, row_bad, col_bad, c, p,
              out):
    """The same for products cut toward zero or -inf at frac >= the products' fraction bits
    and unnormalised exponents, a row of outputs at a time (b_* indexed [k, n], so the inner
    loops run along n without branches; bt_* [n, k] for the special values)."""
    m_rows, k_len = a_sig.shape
    n_cols = b_sig.shape[1]
    group, amode, c_in = p[0], p[3], p[6]
    sh = p[1] - p[2]  # frac - mf
    for i in numba.prange(m_rows):
        cv = np.empty(n_cols, np.float64)
        emax = np.empty(n_cols, np.int64)
        s = np.empty(n_cols, np.int64)
        for j in range(n_cols):
            cv[j] = c[i, j]
        for k0 in range(0, k_len, group):
            emax[:] = -(1 << 30)
            for k in range(k0, k0 + group):
                ea = a_exp[i, k]
                for j in range(n_cols):
                    emax[j] = max(emax[j], ea + b_exp[k, j])
            for j in range(n_cols):
                ic, ec = _c_parts(cv[j])
                if c_in and cv[j] != 0.0 and (emax[j] <= _ZERO_EXP // 2 or ec > emax[j]):
                    emax[j] = ec
            s[:] = 0
            for k in range(k0, k0 + group):
                ma = np.int64(a_sig[i, k])
                if ma == 0:
                    continue
                ea = a_exp[i, k]
                if amode == 0:
                    # |m| 2^(frac - mf) >> d with the sign put back (zero products: m = 0)
                    for j in range(n_cols):
                        m = ma * b_sig[k, j]
                        d = min(emax[j] - ea - b_exp[k, j], 63)
                        sg = m >> 63
                        t = (((m ^ sg) - sg) << sh) >> d
                        s[j] += (t ^ sg) - sg
                else:
                    for j in range(n_cols):
                        s[j] += ((ma * b_sig[k, j]) << sh) >> min(emax[j] - ea - b_exp[k, j], 63)
            for j in range(n_cols):
                if row_bad[i] or col_bad[j] or not math.isfinite(cv[j]):
                    v = _special(a_sig, a_cls, bt_sig, bt_cls, i, j, k0, group, cv[j])
                    if v != 0.0 or math.isnan(v):
                        cv[j] = v
                        continue
                ic, ec = _c_parts(cv[j])
                # emax[j] > _ZERO_EXP // 2: a nonzero product, or C set it (then only C's
                # path reads has_p, and C != 0)
                cv[j] = _finish(s[j], emax[j], emax[j] > _ZERO_EXP // 2, ic, ec, cv[j], p)
        for j in range(n_cols):
            out[i, j] = np.float32(cv[j])


# ----------------------------------------------------------------------------- public API

def mma_block(a_codes, b_codes, c=None, model: MmaModel = HOPPER_FP8, fmt=None) -> np.ndarray:
    """D = C + A B as the modelled tensor core computes it: K / model.group MMA steps in K
    order, each step's D the next step's C (a kernel chaining wgmmas on one accumulator).

    a_codes [M, K] and b_codes [K, N]: ml_dtypes float8_e4m3fn / float8_e5m2 arrays, or
    uint8 codes with `fmt` ("e4m3fn" (default for codes) or "e5m2", or a pair (fmt_a,
    fmt_b) for mixed operands; with FP8 dtypes fmt may be omitted and must agree).  c:
    float32 [M, N], or None for C = 0 (scale-d = 0).  K must be a multiple of model.group.
    Returns float32 [M, N].
    """
    return _run(a_codes, b_codes, c, model, fmt, "auto")


def mma_dot(a_codes, b_codes, c=None, model: MmaModel = HOPPER_FP8, fmt=None) -> np.ndarray:
    """n independent dot products as the modelled tensor core computes them: D[i] = C[i] +
    sum_k A[i, k] B[i, k] in K / model.group chained steps, i.e. `mma_block` of row i of A
    against row i of B as a column (the form of measured dot products).

    a_codes and b_codes [n, K] (the dtypes and `fmt` of `mma_block`); c float32 [n] or None
    for zeros.  Returns float32 [n]."""
    a, b, (sa, ea, ka), (sb, eb, kb), p, (fa, fb) = _operands(a_codes, b_codes, fmt, model)
    if b.shape != a.shape:
        raise ValueError(f"expected a_codes and b_codes of one shape [n, K], got {a.shape} "
                         f"and {b.shape}")
    c = _c_array(c, a.shape[:1])
    a_cls, b_cls = ka[a], kb[b]
    bad = (a_cls != 0).any(axis=1) | (b_cls != 0).any(axis=1)
    out = np.empty(a.shape[0], np.float32)
    _dots(sa[a], ea[a], a_cls, sb[b], eb[b], b_cls, bad, c, p, out)
    return out


def _operands(a_codes, b_codes, fmt, model):
    """(a, b as contiguous 2-D uint8 codes, a's and b's (significand, exponent, class)
    tables, the model's kernel parameters, (a's format, b's format)), K checked against
    the model's group."""
    fa, fb = _split_fmt(fmt)
    a, fa = _codes(a_codes, fa, "a_codes")
    b, fb = _codes(b_codes, fb, "b_codes")
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"expected 2-D operands, got {a.shape} and {b.shape}")
    if a.shape[1] % model.group:
        raise ValueError(f"K = {a.shape[1]} is not a multiple of the model's group "
                         f"{model.group}")
    sa, ea, ka, mfa = _TABLES[fa]
    sb, eb, kb, mfb = _TABLES[fb]
    sum_bits = -1 if model.sum_frac_bits is None else model.sum_frac_bits
    p = (model.group, model.frac_bits, mfa + mfb, _MODE[model.align_mode],
         _MODE[model.rounding], model.out_bits, int(model.c_in_alignment),
         int(model.normalized_products), sum_bits, _MODE[model.sum_rounding])
    return (np.ascontiguousarray(a), np.ascontiguousarray(b), (sa, ea, ka), (sb, eb, kb), p,
            (fa, fb))


def _c_array(c, shape):
    """C as a contiguous float32 array of `shape` (zeros for None)."""
    if c is None:
        return np.zeros(shape, np.float32)
    c = np.asarray(c)
    if c.dtype != np.float32 or c.shape != tuple(shape):
        raise ValueError(f"c must be float32 {list(shape)}, got {c.dtype} {c.shape}")
    return np.ascontiguousarray(c)


# -ffp-contract=off: no multiply and add fused behind the model's back (it has none).
_ROWS_FLAGS = ("-O3", "-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mavx512cd",
               "-ffp-contract=off")
_ROWS_NEEDS = ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd")
# VNNI where the CPU has it: HOPPER_FP8's terms summed by VPDPWSSD (`add_pairs`, the same bits).
_ROWS_VNNI = ("-mavx512vnni",) if "avx512_vnni" in cbuild.cpu_flags() else ()
_P, _I = ctypes.c_void_p, ctypes.c_int64


def _rows_lib(extra: tuple[str, ...]) -> tuple[ctypes.CDLL | None, str]:
    """`mma_rows.c` built with _ROWS_FLAGS and `extra`, its functions declared: `cbuild.load`'s
    (library, "") or (None, the reason)."""
    lib, why = cbuild.load("AVX-512 mma rows", Path(__file__).with_name("mma_rows.c"),
                           _ROWS_FLAGS + extra, _ROWS_NEEDS, "FP8CHECK_MMA_C")
    if lib is not None:
        lib.fp8check_mma_rows.argtypes = [_P, _P, *[_I] * 8, _P, _P, _I, _I]
        lib.fp8check_mma_gmm.argtypes = [_P, _I, _I, _P, _I, _P, _I, _I, _I, _P, _P,
                                         *[_I] * 6, _P, _I]
        for fn in (lib.fp8check_mma_rows, lib.fp8check_mma_gmm):
            fn.restype = ctypes.c_int
    return lib, why


_ROWS_LIB, _why = _rows_lib(_ROWS_VNNI)
ROWS_STATUS = "avx512" if _ROWS_LIB is not None else f"off ({_why})"
"""Whether the C row kernel runs here: "avx512", else "off (<reason>)" (no AVX-512, the
compiler fails, or FP8CHECK_MMA_C=0); the numba kernels give the same bits."""
EXACT_ROUTE = True
"""Whether `mma_rows.c` computes BLACKWELL_FP8's steps in which no term can lose a bit at
alignment as exact float64 sums (its `exact_step`; the same bits as term by term, which
tests/test_mma_models.py checks by switching this off)."""
_C_LIMIT = 2.0**100  # |C| below it: no step of FP8 products can overflow float32
_FMT_CODE = {"e4m3fn": 0, "e5m2": 1}  # mma_rows.c's


def _c_model_kind(model: MmaModel, fa: str, fb: str) -> int | None:
    """The kind of model `mma_rows.c` computes on these formats (its header), or None: k32
    steps of unnormalised products, each term cut toward zero, and either (0, HOPPER_FP8)
    C aligned with them and the result truncated, the largest aligned term below 2^15, or
    (1, BLACKWELL_FP8) their sum cut toward zero to a float32 and C added in float32, the
    largest aligned term below 2^27."""
    mf = _TABLES[fa][3] + _TABLES[fb][3]
    big = int(np.abs(_TABLES[fa][0]).max()) * int(np.abs(_TABLES[fb][0]).max())
    if (_ROWS_LIB is None or model.group != 32 or model.align_mode != "rz"
            or model.normalized_products or model.frac_bits < mf):
        return None
    top = big << (model.frac_bits - mf)
    if (model.c_in_alignment and model.rounding == "rz" and model.frac_bits < 23
            and top < 2**15):
        return 0
    if (not model.c_in_alignment and model.sum_frac_bits == 23 and model.sum_rounding == "rz"
            and model.rounding == "rne" and model.out_bits == 23 and top < 2**27):
        return 1
    return None


def _c_rows(a, b, fa: str, fb: str, kind: int, c, model: MmaModel, out) -> None:
    """`mma_rows.c` into out: codes a [M, K] (format fa), b [K, N] (fb), the model's kind
    (`_c_model_kind`), C float32 [M, N]; rows cut into shares run in parallel."""
    k, n = b.shape
    cuts = row_shares(np.array([0, a.shape[0]]), numba.get_num_threads()).tolist()
    fn = _ROWS_LIB.fp8check_mma_rows  # type: ignore[union-attr]
    cbuild.run_parallel([(fn, (a.ctypes.data, b.ctypes.data, k, n, _FMT_CODE[fa],
                               _FMT_CODE[fb], kind, model.frac_bits, model.out_bits,
                               int(EXACT_ROUTE), c.ctypes.data, out.ctypes.data, r0, r1))
                         for r0, r1 in zip(cuts[:-1], cuts[1:], strict=True) if r1 > r0])


def deepgemm_gmm(a_codes: np.ndarray, sa: np.ndarray, b_codes: np.ndarray, sb: np.ndarray,
                 offsets: np.ndarray, fmt: str, model: MmaModel, out: np.ndarray) -> bool:
    """DeepGEMM's recipe on this model's block partials, where `mma_rows.c` computes it:
    every 128-wide K block's P = `block_partial` (4 chained k32 steps from C = 0) taken
    into a float32 accumulator by acc = fma(RN(sa sb), P, acc) (hardware fma, one
    rounding; the float64 path's `_accumulate` gives the same bits), for every group into
    out [M, N] (float32, C-contiguous; rows outside the groups left alone).  lhs codes
    [M, K] uint8 and scales sa [M, K/128], rhs codes [G, K, N] uint8 and scales sb [G,
    K/128, ceil(N/128)] float32, offsets [G + 1], both operands in `fmt`.  Returns False,
    having done nothing, where the kernel does not apply: the model or format
    (`_c_model_kind`), a non-finite code or scale."""
    fmt = _fmt_name(fmt)
    kind = _c_model_kind(model, fmt, fmt)
    if not (kind is not None and not _any_nonfinite(a_codes[:offsets[-1]], fmt)
            and not _any_nonfinite(b_codes, fmt) and np.isfinite(sa).all()
            and np.isfinite(sb).all()):
        return False
    m, k = a_codes.shape
    g, _, n = b_codes.shape
    a_codes, b_codes = np.ascontiguousarray(a_codes), np.ascontiguousarray(b_codes)
    sa = np.ascontiguousarray(sa, np.float32)
    sb = np.ascontiguousarray(sb, np.float32)
    offsets = np.ascontiguousarray(offsets, np.int64)
    cuts = row_shares(offsets, numba.get_num_threads()).tolist()
    fn = _ROWS_LIB.fp8check_mma_gmm  # type: ignore[union-attr]
    cbuild.run_parallel([(fn, (a_codes.ctypes.data, k, k, b_codes.ctypes.data, n,
                               offsets.ctypes.data, g, r0, r1, sa.ctypes.data, sb.ctypes.data,
                               sb.shape[2], _FMT_CODE[fmt], kind, model.frac_bits,
                               model.out_bits, int(EXACT_ROUTE), out.ctypes.data, n))
                         for r0, r1 in zip(cuts[:-1], cuts[1:], strict=True) if r1 > r0])
    return True


def _run(a_codes, b_codes, c, model, fmt, kernel):
    """`mma_block` with the kernel chosen ("auto", "generic" or "rows": the numba row kernel
    serves models that cut toward zero or -inf with unnormalised products; "auto" takes
    the C row kernel where it applies, `_c_rows_fit`)."""
    a, b, (sa, ea, ka), (sb, eb, kb), p, (fa, fb) = _operands(a_codes, b_codes, fmt, model)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"expected A [M, K] and B [K, N], got {a.shape} and {b.shape}")
    m, n = a.shape[0], b.shape[1]
    c = _c_array(c, (m, n))
    bt = np.ascontiguousarray(b.T)
    a_cls, bt_cls = ka[a], kb[bt]
    row_bad, col_bad = (a_cls != 0).any(axis=1), (bt_cls != 0).any(axis=1)
    rows_ok = p[3] in (0, 1) and model.frac_bits >= p[2] and not model.normalized_products
    out = np.empty((m, n), np.float32)
    kind = _c_model_kind(model, fa, fb) if kernel == "auto" else None
    if (kind is not None and not (row_bad.any() or col_bad.any())
            and bool(np.all(np.abs(c) < _C_LIMIT))):
        _c_rows(a, b, fa, fb, kind, c, model, out)
    elif kernel == "rows" or (kernel == "auto" and rows_ok):
        if not rows_ok:
            raise ValueError("the row kernel does not serve this model")
        _mma_rows(sa[a], ea[a], a_cls, sb[b], eb[b], kb[b], sb[bt], bt_cls, row_bad, col_bad,
                  c, p, out)
    else:
        _mma_generic(sa[a], ea[a], a_cls, sb[bt], eb[bt], bt_cls, row_bad, col_bad, c, p, out)
    return out


def block_partial(a_codes, b_codes, model: MmaModel = HOPPER_FP8, fmt=None) -> np.ndarray:
    """The partial P [M, N] float32 of one K block (a_codes [M, Kb], b_codes [Kb, N]) as the
    tensor core leaves it when a kernel starts the block from C = 0 and chains Kb / group
    steps: DeepGEMM's Kb = 128 (4 k32 WGMMAs, the first with scale-d = 0) before promoting
    P to its float32 accumulator; Triton's `max_num_imprecise_acc` = Kb likewise."""
    return mma_block(a_codes, b_codes, None, model, fmt)


def promoted_partial(a_codes, b_codes, interval: int, c=None, model: MmaModel = HOPPER_FP8,
                     fmt=None) -> np.ndarray:
    """D [M, N] float32 of an FP8 dot (a_codes [M, K], b_codes [K, N]) whose tensor-core
    chain is promoted every `interval` K elements, as Triton lowers `max_num_imprecise_acc`
    on sm_90: K <= interval is one chain from C (`mma_block`); otherwise each `interval`
    elements chain from zero and their partial is added in float32 (RNE), in K order, to
    an accumulator that starts at C (zeros when None)."""
    k = np.shape(a_codes)[1]
    if k <= interval:
        return mma_block(a_codes, b_codes, c, model, fmt)
    acc = (np.zeros((np.shape(a_codes)[0], np.shape(b_codes)[1]), np.float32) if c is None
           else np.asarray(c, np.float32))
    for k0 in range(0, k, interval):
        acc = acc + mma_block(a_codes[:, k0:k0 + interval], b_codes[k0:k0 + interval], None,
                              model, fmt)
    return acc


def probe_cases(fmt: str = "e4m3fn") -> list[dict]:
    """Inputs that tell the candidate readings apart on a real Hopper GPU: one dot product
    each (a [1, 32], b [32, 1] uint8 codes, c float32 [1, 1]) run as `chain` chained k32
    steps (the same a and b every step, each step's D the next C).  Each case names the
    question it asks; what a reading predicts is `mma_block` under that `MmaModel`
    (tests/test_mma_models.py checks that each case separates its readings)."""
    f = _fmt_name(fmt)
    dt = _FMT[f][0]

    def enc(vals):
        return np.asarray(vals, np.float64).astype(dt).view(np.uint8)

    def case(name, a, b, c=0.0, chain=1):
        a_c = np.zeros(32, np.uint8)
        b_c = np.zeros(32, np.uint8)
        a_c[:len(a)] = enc(a)
        b_c[:len(b)] = enc(b)
        return {"name": name, "fmt": f, "a": a_c.reshape(1, 32), "b": b_c.reshape(32, 1),
                "c": np.array([[c]], np.float32), "chain": chain}

    t5, t6, t7 = 2.0 ** -5, 2.0 ** -6, 2.0 ** -7  # 2^-7 is an e4m3 subnormal
    return [
        # C aligned with the products (31 products of 2^-14 lost behind C = 1) or added after
        case("c_in_alignment", [t7] * 31, [t7] * 31, c=1.0),
        # C alone keeps 13 fraction bits, truncated ([SA2]); 12 or 23 bits differ
        case("c_only_truncation", [], [], c=float(np.float32(1 + 2.0 ** -23 + 2.0 ** -13))),
        # a negative product below the grid: cut toward zero or toward -inf
        case("sign_at_alignment", [1.0, -1.5 * t7], [1.0, t7]),
        # 2^-13 kept and 2^-14 lost behind 1.0: 13 fraction bits, not 12 or 14
        case("width", [1.0, t7, t7], [1.0, t6, t7]),
        # E_max = e_a + e_b (0 here), not the exponent of the largest product (1)
        case("unnormalised_emax", [1.75, -1.75, 1.5 * t7], [1.75, 1.5, t6]),
        # the normalised sum truncated (0.875 ulp dropped), not rounded to nearest
        case("output_rounding", [1.75, 1.75, 1.0, 1.0, t5, t6, t7],
             [1.75, 1.75, 1.5, 0.5, t6, t6, t6]),
        # one 32-term alignment, or two 16-term steps (the tiny first half survives)
        case("group_size", [t7] * 16 + [1.0], [t7] * 16 + [1.0]),
        # all products -0 and C = -0: +0 ([KM25]) or -0 (IEEE)
        case("signed_zero", [-0.0] * 32, [0.0] * 32, c=-0.0),
        # a float32-subnormal C alone: cut to the 2^-139 grid (to 0 here)
        case("subnormal_c", [], [], c=2.0 ** -140),
        # four chained steps (a 128-wide DeepGEMM block): the register between steps
        case("chain_of_4", [1.75] * 16 + [1.25 * t5] * 16, [1.25] * 32, chain=4),
    ]
