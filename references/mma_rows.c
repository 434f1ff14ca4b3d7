/* The row kernel of `references.mma` (`_mma_rows`) in AVX-512, for two kinds of model:
   D = C + A B in K / 32 chained steps (fp8check).

   Which models (mma.py `_c_model_kind` checks before calling): group 32; every term cut
   toward zero (align_rounding "rz"); unnormalised product exponents; frac_bits >= mf;
   finite operands and |C| < 2^100 only (NaN / Inf and overflow stay with numba), and
     kind 0 (HOPPER_FP8): C joins the alignment, the result is truncated ("rz") to
       out_bits <= 23 fraction bits, frac_bits < 23, and 2^(frac_bits - mf) times the
       largest significand product is below 2^15 (e4m3: 225 * 2^7, e5m2: 49 * 2^9, mixed
       105 * 2^8);
     kind 1 (BLACKWELL_FP8): C added after the products, their sum cut toward zero to 23
       fraction bits below its leading bit, then rounded to nearest even with C to 23
       bits (an IEEE float32 addition), the largest aligned term below 2^27.

   The same integers as mma.py, step by step (its module docstring, steps 1-5), so the same
   bits:
   * a product's aligned term is sign * ((|m_a| |m_b| << (frac - mf)) >> d), d = E_max -
     e_a - e_b >= 0 (E_max over all 32 products, zeros included, as mma.py; C's exponent
     where it joins and exceeds them): kind 0 in int16 lanes (below 2^15), where
     VPSRLVW's shift of 16 or more gives 0, as mma.py's shift (capped at 63) does; kind 1
     in int32 lanes (below 2^27; VPSRLVD gives 0 from 32 on);
   * a zero code carries exponent ZERO_EXP (mma.py's is -2^20; any value far below every
     real exponent sum and above -2^14, so that sums and differences stay in int16, decides
     the same E_max and has_p: a zero product's term is 0 whatever its shift);
   * the terms are summed exactly: kind 0 in int32 (|sum| < 32 * 2^15), two at a time by
     VPMADDWD (with VNNI VPDPWSSD, `add_pairs`) of the magnitudes with the products' signs
     (+-1; lanes hold the k-even and k-odd term of one column; the rhs is packed with its
     signs in the four forms the lhs pair's signs make of them, so the products' signs are
     a load, not a multiply); kind 1 in two int32 sums of 16 terms (below 2^31), added
     exactly in float64;
   * kind 0: C's term ic >> (23 - frac + E_max - e_c) (toward zero; E_max >= e_c once C
     joins) is C 2^(frac - E_max) cut toward zero, by VSCALEFPS and VCVTTPS2DQ
     (`add_c_term`), and C's exponent e_c comes from VGETEXPPS (`c_exp`); deepgemm's first
     step of each K block (C = +0) skips both; where every lane's grid 2^(E_max - frac) is
     at or above 2^-126 the sum converts exactly to float32, the truncation to out_bits
     clears its low fraction bits and VSCALEFPS scales it exactly (`finish`); elsewhere the
     truncation is an integer shift and the result a 2^q with a < 2^(out_bits + 1)
     converts exactly (VSCALEFPS of an exact int32: a float32, subnormal or not); +-inf
     from 2^128 up, as mma.py's `_round_out`, and +0 for a zero sum;
   * kind 1: the sum converted to float32 toward zero is the cut to 23 fraction bits; the
     FP8 sums' exponents keep it a normal float32 and its scaling by 2^unit exact; then
     one IEEE addition of C (MXCSR: round to nearest even, subnormals kept) is mma.py's
     exact sum rounded once, signed zeros included (+0 for a zero sum plus +-0);
   * kind 1, exact route (on unless the caller says not): a step in which no term can
     lose a bit at alignment (tests from the exponents: `rows_step`) has the products'
     exact sum as its aligned sum, which float64 fmas form exactly (`exact_step`); the
     rest of the step as above.

   Speed: a block of BLOCK_ROWS rows runs step by step, each step's rhs (one expert's,
   packed once per call and expert, step-major) visited column vector by column vector
   with the block's rows in register groups of 8 (`rows`).
*/
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ZERO_EXP (-8192)
/* Rows decoded and run together (`rows`): the rhs is read from memory once per block.  128
   rows: a step's working set (the block's running D and accumulators, 2 x 128 x N x 4
   bytes, and the step's packed rhs, 384 N bytes) stays in L2 at the dev shape's N = 512;
   measured on a Granite Rapids class machine, the Hopper model 222-235 ms against
   237-244 ms with 64 rows (dev shape, alternate runs), Blackwell's the same. */
#define BLOCK_ROWS 128
/* Added to the lhs exponents for `no_bit_lost`: a product's exponent sum plus it is
   positive, below 2^15, and with a zero code's ZERO_EXP wraps around to above 2^15. */
#define EXP_OFFSET 4096
/* int16 elements of one pair of the packed rhs (`pack_rhs`): |sig|, sign, exponent, and
   for kind 0 the sign with its k-even, k-odd or both halves negated. */
#define PAIR_W(kind) ((kind) ? 96 : 192)
/* Where a pair's sign vector times the lhs pair's signs lies in a kind 0 rhs pair, by the
   lhs signs (bit 0: the k-even one negative, bit 1: the k-odd one). */
static const int32_t SIGN_AT[4] = {32, 96, 128, 160};

/* Lane-pair form of int16 lanes: both lanes of each pair (k even, k odd) get the max of
   the two. */
static inline __m512i pair_max(__m512i x) {
    return _mm512_max_epi16(x, _mm512_rol_epi32(x, 16));
}

/* C's exponent per lane as mma.py's `_c_parts` gives it (C = ic 2^(ec - 23), ic an
   integer below 2^24): floor(log2 |C|) for a normal C, -126 for a subnormal C or zero
   (VGETEXPPS: the exponent of a subnormal too, as MXCSR keeps them; -inf for zero, which
   converts to INT_MIN). */
static inline __m512i c_exp(__m512 cv) {
    return _mm512_max_epi32(_mm512_cvtps_epi32(_mm512_getexp_ps(cv)), _mm512_set1_epi32(-126));
}

/* The summed terms s plus C's term on E_max's grid, C 2^(frac - emax) cut toward zero:
   mma.py's sign * (|ic| >> (23 - frac + emax - ec)), as emax >= ec wherever C != 0.  The
   scaling is exact wherever the product is at least 2^-126; below that it is below 1,
   rounded or not, and the cut gives 0 (and 0 for C = +-0). */
static inline __m512i add_c_term(__m512i s, __m512i emax, __m512 cv, int64_t frac) {
    const __m512 scale = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_set1_epi32((int)frac), emax));
    return _mm512_add_epi32(s, _mm512_cvttps_epi32(_mm512_scalef_ps(cv, scale)));
}

/* The step's result (mma.py `_finish` and `_round_out` for these models) from the summed
   terms s (C's term included, `add_c_term`) and E_max (C's exponent where it set it).
   (mma.py's has_p test needs no counterpart: without products and with C = 0 the sum is
   0, hence +0.) */
static inline __m512 finish(__m512i s, __m512i emax, int64_t frac, int64_t obits) {
    const __m512i unit = _mm512_sub_epi32(emax, _mm512_set1_epi32((int)frac));
    if (!_mm512_cmplt_epi32_mask(unit, _mm512_set1_epi32(-126))) {
        /* Every lane's grid at or above 2^-126, so a nonzero result is a normal float32
           (or overflows): s (below 2^21) converts exactly, clearing its low 23 - obits
           fraction bits cuts it toward zero to obits bits below its leading bit (round_out's
           q = top - obits), and the scaling by 2^unit is exact (+-inf from 2^128 up); a zero
           sum gives +0. */
        const __m512i kept = _mm512_set1_epi32((int)(~0u << (23 - obits)));
        const __m512 v = _mm512_castsi512_ps(
            _mm512_and_si512(_mm512_castps_si512(_mm512_cvtepi32_ps(s)), kept));
        return _mm512_scalef_ps(v, _mm512_cvtepi32_ps(unit));
    }
    /* round_out: q = max(top, -126) - obits with top = bitlen(|s|) - 1 + unit */
    const __m512i zero = _mm512_setzero_si512();
    __m512i a = _mm512_abs_epi32(s);
    const __m512i top = _mm512_add_epi32(_mm512_sub_epi32(_mm512_set1_epi32(31),
                                                          _mm512_lzcnt_epi32(a)), unit);
    __m512i q = _mm512_sub_epi32(_mm512_max_epi32(top, _mm512_set1_epi32(-126)),
                                 _mm512_set1_epi32((int)obits));
    const __mmask16 cut = _mm512_cmpgt_epi32_mask(q, unit);
    a = _mm512_mask_srlv_epi32(a, cut, a, _mm512_sub_epi32(q, unit)); /* >= 32: 0 */
    q = _mm512_mask_blend_epi32(cut, unit, q);
    __m512 v = _mm512_scalef_ps(_mm512_cvtepi32_ps(a), _mm512_cvtepi32_ps(q));
    v = _mm512_mask_sub_ps(v, _mm512_movepi32_mask(s), _mm512_setzero_ps(), v);
    return _mm512_maskz_mov_ps(_mm512_cmpneq_epi32_mask(s, zero), v); /* a zero sum: +0 */
}

/* The formats (fmt 0: e4m3fn, 1: e5m2) as mma.py decodes them (`_tables`): fraction
   bits, exponent bits, bias. */
static const int FBITS[2] = {3, 2}, EBITS[2] = {4, 5}, BIAS[2] = {7, 15};

/* 32 codes (int16 lanes) -> |significand| << sh, sign (+1 / -1), exponent (ZERO_EXP where
   the significand is 0): mma.py's tables, from the bit fields (finite codes only). */
static inline void decode(__m512i w, int fmt, int sh, __m512i *mag, __m512i *sgn, __m512i *ex) {
    const int fb = FBITS[fmt];
    const __m512i field = _mm512_and_si512(_mm512_srli_epi16(w, fb),
                                           _mm512_set1_epi16((1 << EBITS[fmt]) - 1));
    __m512i sig = _mm512_and_si512(w, _mm512_set1_epi16((1 << fb) - 1));
    sig = _mm512_mask_add_epi16(sig, _mm512_cmpgt_epi16_mask(field, _mm512_setzero_si512()), sig,
                                _mm512_set1_epi16(1 << fb));
    *mag = _mm512_sll_epi16(sig, _mm_cvtsi32_si128(sh));
    *sgn = _mm512_or_si512(_mm512_srai_epi16(_mm512_slli_epi16(w, 8), 15), _mm512_set1_epi16(1));
    const __m512i e = _mm512_sub_epi16(_mm512_max_epi16(field, _mm512_set1_epi16(1)),
                                       _mm512_set1_epi16(BIAS[fmt]));
    *ex = _mm512_mask_blend_epi16(_mm512_cmpeq_epi16_mask(sig, _mm512_setzero_si512()), e,
                                  _mm512_set1_epi16(ZERO_EXP));
}

/* 32 decoded codes (`decode` with sh 0, int16 lanes in k order) -> their values in
   float64 (exact: 8-bit significands), stored to val[0..31]. */
static inline void values32(__m512i mag, __m512i sgn, __m512i ex, int fb, double *val) {
    const __m512i sig = _mm512_mullo_epi16(mag, sgn);
    for (int h = 0; h < 2; h++) {
        const __m512i s = _mm512_cvtepi16_epi32(h ? _mm512_extracti64x4_epi64(sig, 1)
                                                  : _mm512_castsi512_si256(sig));
        const __m512i e = _mm512_sub_epi32(
            _mm512_cvtepi16_epi32(h ? _mm512_extracti64x4_epi64(ex, 1)
                                    : _mm512_castsi512_si256(ex)),
            _mm512_set1_epi32(fb));
        for (int q = 0; q < 2; q++) {
            const __m256i sq = q ? _mm512_extracti64x4_epi64(s, 1) : _mm512_castsi512_si256(s);
            const __m256i eq = q ? _mm512_extracti64x4_epi64(e, 1) : _mm512_castsi512_si256(e);
            _mm512_storeu_pd(val + 16 * h + 8 * q,
                             _mm512_scalef_pd(_mm512_cvtepi32_pd(sq), _mm512_cvtepi32_pd(eq)));
        }
    }
}

/* The exponent spread of 16 columns' (or one row's) nonzero codes: max - min per lane of
   the running (mx, mn), 0 where a lane saw no nonzero code. */
static inline __m512i spread_of(__m512i mx, __m512i mn) {
    return _mm512_maskz_sub_epi32(_mm512_cmpge_epi32_mask(mx, mn), mx, mn);
}

/* Folds exponents e (int32 lanes, ZERO_EXP for zero codes) into the running max and min
   of the nonzero ones. */
static inline void fold_exps(__m512i e, __m512i *mx, __m512i *mn) {
    const __mmask16 nz = _mm512_cmpneq_epi32_mask(e, _mm512_set1_epi32(ZERO_EXP));
    *mx = _mm512_mask_max_epi32(*mx, nz, *mx, e);
    *mn = _mm512_mask_min_epi32(*mn, nz, *mn, e);
}

/* The decoded lhs rows of a row block, step by step (step c of row r at index c
   BLOCK_ROWS + r: a block's rows of one step lie together): mag / sgn / ex [k / 32]
   [BLOCK_ROWS][16] pairs (two int16 halves, k even low, k odd high: |significand|, sign
   (+-1), exponent; kind 0: sgn holds the pair's SIGN_AT instead); for kind 1 exo [k /
   32][BLOCK_ROWS][16] the exponents + 2^12 (pairs as ex; `no_bit_lost`), val [k / 32]
   [BLOCK_ROWS][32] the values and spread [k / 32][BLOCK_ROWS][2] each step's exponent spread and largest exponent (0 and 0 where the
   step's codes are all zero). */
typedef struct {
    int32_t *mag, *sgn, *ex, *exo;
    double *val;
    int32_t *spread;
} lhs_rows;

/* Row r of the block from its codes [k]: pairs, and for kind 1 values and spreads. */
static void decode_row(const uint8_t *codes, int64_t k, int fmt, int kind, const lhs_rows *l,
                       int64_t r) {
    for (int64_t t = 0; t < k; t += 32) {
        const int64_t at = t / 32 * BLOCK_ROWS + r; /* step t / 32, row r */
        __m512i m, s, e;
        decode(_mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(codes + t))), fmt, 0,
               &m, &s, &e);
        _mm512_storeu_si512(l->mag + at * 16, m);
        _mm512_storeu_si512(l->ex + at * 16, e);
        if (kind == 0) { /* SIGN_AT[(k-even sign bit) + 2 (k-odd sign bit)] per pair */
            const __m512i i = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32(s, 15), _mm512_set1_epi32(1)),
                _mm512_and_si512(_mm512_srli_epi32(s, 30), _mm512_set1_epi32(2)));
            _mm512_storeu_si512(l->sgn + at * 16, _mm512_permutexvar_epi32(
                i, _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, SIGN_AT[3], SIGN_AT[2],
                                    SIGN_AT[1], SIGN_AT[0])));
        } else {
            _mm512_storeu_si512(l->sgn + at * 16, s);
            _mm512_storeu_si512(l->exo + at * 16, _mm512_add_epi16(e, _mm512_set1_epi16(EXP_OFFSET)));
            values32(m, s, e, FBITS[fmt], l->val + at * 32);
            __m512i mx = _mm512_set1_epi32(-(1 << 30)), mn = _mm512_set1_epi32(1 << 30);
            fold_exps(_mm512_cvtepi16_epi32(_mm512_castsi512_si256(e)), &mx, &mn);
            fold_exps(_mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(e, 1)), &mx, &mn);
            const int32_t hi = _mm512_reduce_max_epi32(mx), lo = _mm512_reduce_min_epi32(mn);
            l->spread[2 * at] = hi >= lo ? hi - lo : 0;
            l->spread[2 * at + 1] = hi >= lo ? hi : 0;
        }
    }
}

/* The packed rhs of codes b [k][n], step by step (32 K elements; within a step, column
   vector by column vector: nv = ceil(n / 16), padding columns: the zero code):
     bp  [k / 32][nv][16][PAIR_W] int16: pair p of the step, 32 lanes each: |sig| << sh,
         sign (+-1), exponent (kind 0: then the sign with its k-even, k-odd and both
         halves negated, at SIGN_AT); lane 2 col + t is k = 2 p + t, column 16 v + col;
     and for kind 1 (val, spread not NULL)
     val    [k / 32][nv][32][16] float64: the values, column 16 v + lane;
     spread [k / 32][nv][2][16] int32: the step's exponent spread per column, then its
            largest exponent (0 and 0 for a column of zero codes). */
static void pack_rhs(const uint8_t *b, int64_t k, int64_t n, int fmt, int kind, int sh,
                     int16_t *bp, double *val, int32_t *spread) {
    const int64_t nv = (n + 15) / 16, np = k / 2;
    for (int64_t v = 0; v < nv; v++) {
        const int64_t valid = n - 16 * v < 16 ? n - 16 * v : 16;
        const __mmask16 m = (__mmask16)((1u << valid) - 1);
        __m512i mx = _mm512_setzero_si512(), mn = mx; /* set at each step's first pair */
        for (int64_t p = 0; p < np; p++) {
            const __m128i x0 = _mm_maskz_loadu_epi8(m, b + 2 * p * n + 16 * v);
            const __m128i x1 = _mm_maskz_loadu_epi8(m, b + (2 * p + 1) * n + 16 * v);
            const __m256i both = _mm256_set_m128i(_mm_unpackhi_epi8(x0, x1),
                                                  _mm_unpacklo_epi8(x0, x1));
            __m512i mag, sgn, ex;
            decode(_mm512_cvtepu8_epi16(both), fmt, sh, &mag, &sgn, &ex);
            int16_t *o = bp + ((p / 16 * nv + v) * 16 + p % 16) * PAIR_W(kind);
            _mm512_store_si512(o, mag);
            _mm512_store_si512(o + 32, sgn);
            _mm512_store_si512(o + 64, ex);
            if (kind == 0) {
                const __m512i neg = _mm512_sub_epi16(_mm512_setzero_si512(), sgn);
                _mm512_store_si512(o + SIGN_AT[1], _mm512_mask_blend_epi16(0x55555555, sgn,
                                                                           neg));
                _mm512_store_si512(o + SIGN_AT[2], _mm512_mask_blend_epi16(0xAAAAAAAA, sgn,
                                                                           neg));
                _mm512_store_si512(o + SIGN_AT[3], neg);
                continue;
            }
            if (p % 16 == 0) {
                mx = _mm512_set1_epi32(-(1 << 30));
                mn = _mm512_set1_epi32(1 << 30);
            }
            const __m512i sig = _mm512_mullo_epi16(mag, sgn);
            for (int t = 0; t < 2; t++) { /* k = 2 p + t: the low (t = 0) or high halves */
                const __m512i s = t ? _mm512_srai_epi32(sig, 16)
                                    : _mm512_srai_epi32(_mm512_slli_epi32(sig, 16), 16);
                const __m512i e = t ? _mm512_srai_epi32(ex, 16)
                                    : _mm512_srai_epi32(_mm512_slli_epi32(ex, 16), 16);
                fold_exps(e, &mx, &mn);
                const __m512i ef = _mm512_sub_epi32(e, _mm512_set1_epi32(FBITS[fmt]));
                double *dst = val + ((p / 16 * nv + v) * 32 + 2 * (p % 16) + t) * 16;
                for (int q = 0; q < 2; q++) {
                    const __m256i sq = q ? _mm512_extracti64x4_epi64(s, 1)
                                         : _mm512_castsi512_si256(s);
                    const __m256i eq = q ? _mm512_extracti64x4_epi64(ef, 1)
                                         : _mm512_castsi512_si256(ef);
                    _mm512_store_pd(dst + 8 * q, _mm512_scalef_pd(_mm512_cvtepi32_pd(sq),
                                                                  _mm512_cvtepi32_pd(eq)));
                }
            }
            if (p % 16 == 15) {
                int32_t *o2 = spread + (p / 16 * nv + v) * 32;
                _mm512_store_si512(o2, spread_of(mx, mn));
                _mm512_store_si512(o2 + 16, _mm512_maskz_mov_epi32(
                    _mm512_cmpge_epi32_mask(mx, mn), mx));
            }
        }
    }
}

/* Where a row block's steps go: mode 0 (mma): one chain over all of K from C, D stored;
   mode 1 (deepgemm on the tensor core's block partials): each 128-wide K block chains 4
   steps from C = 0 and its D, the block partial P, goes into the float32 accumulator by
   deepgemm's step acc = fma(RN(sa sb), P, acc) (hardware fma: one rounding). */
typedef struct {
    const float *c;  /* mode 0: C of the block's first row, row stride n */
    const float *sa; /* mode 1: scales [rows][kbn] of the first row, sb [kbn][nb] */
    const float *sb;
    int64_t kbn, nb;
    float *out; /* the first row's output, row stride ldo */
    int64_t ldo;
} target;

/* The target `rows` rows further down. */
static inline target target_at(const target *tg, int mode, int64_t n, int64_t rows) {
    target t = *tg;
    t.out += rows * tg->ldo;
    if (mode)
        t.sa += rows * tg->kbn;
    else
        t.c += rows * n;
    return t;
}

/* The model: kind 0 (C aligned with the products, HOPPER_FP8) or 1 (the products' sum cut
   to a float32 toward zero, C added in float32, BLACKWELL_FP8), frac_bits, out_bits, the
   shift frac - mf (kind 1 applies it in int32 lanes; kind 0 packs it into the rhs), and
   for kind 1 whether exact steps take the float64 route (`exact_step`). */
typedef struct {
    int kind;
    int64_t frac, obits, sh;
    int exact_route;
} spec;

/* Kind 0's running sums s plus the pair vector's terms t times their signs sg (int16
   pairs): each int32 lane adds its k-even and k-odd term.  One VPDPWSSD where the kernel
   is built with VNNI (mma.py's flags, where the CPU has it), else VPMADDWD and VPADDD: the
   same exact int32 sums (below 32 * 2^15: neither form wraps). */
static inline __m512i add_pairs(__m512i s, __m512i t, __m512i sg) {
#ifdef __AVX512VNNI__
    return _mm512_dpwssd_epi32(s, t, sg);
#else
    return _mm512_add_epi32(s, _mm512_madd_epi16(t, sg));
#endif
}

/* Kind 1's terms of one pair vector, added into the k-even and k-odd sums se, so (int32:
   at most 16 terms each, below 2^27 each, so below 2^31): m = |m_a m_b| and d (int16
   pairs), sg the products' signs (+-1). */
static inline void add_wide_terms(__m512i m, __m512i d, __m512i sg, int64_t sh, __m512i *se,
                                  __m512i *so) {
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    const __m128i shift = _mm_cvtsi32_si128((int)sh);
    const __m512i te = _mm512_srlv_epi32(_mm512_sll_epi32(_mm512_and_si512(m, lo16), shift),
                                         _mm512_and_si512(d, lo16));
    const __m512i to = _mm512_srlv_epi32(_mm512_sll_epi32(_mm512_srli_epi32(m, 16), shift),
                                         _mm512_srli_epi32(d, 16));
    const __m512i ne = _mm512_srai_epi32(_mm512_slli_epi32(sg, 16), 31); /* 0 / -1 */
    const __m512i no = _mm512_srai_epi32(sg, 31);
    *se = _mm512_add_epi32(*se, _mm512_sub_epi32(_mm512_xor_si512(te, ne), ne));
    *so = _mm512_add_epi32(*so, _mm512_sub_epi32(_mm512_xor_si512(to, no), no));
}

/* Kind 1's step result (mma.py `_finish` for BLACKWELL_FP8): P = the exact sum se + so
   (below 2^32: exact in float64) cut toward zero to a float32 (24 significant bits: the
   cut to sum_frac_bits = 23), times 2^unit (exact: FP8 sums stay far inside float32's
   range), then D = RN32(P + C), an IEEE float32 addition (+0 for a zero sum, as mma.py). */
static inline __m512 finish_cut(__m512i se, __m512i so, __m512i emax, __m512 cv, int64_t frac) {
    const int rz = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;
    __m256 half[2];
    for (int i = 0; i < 2; i++) {
        const __m256i e = i ? _mm512_extracti64x4_epi64(se, 1) : _mm512_castsi512_si256(se);
        const __m256i o = i ? _mm512_extracti64x4_epi64(so, 1) : _mm512_castsi512_si256(so);
        half[i] = _mm512_cvt_roundpd_ps(_mm512_add_pd(_mm512_cvtepi32_pd(e), _mm512_cvtepi32_pd(o)),
                                        rz);
    }
    const __m512 p = _mm512_insertf32x8(_mm512_castps256_ps512(half[0]), half[1], 1);
    const __m512 unit = _mm512_cvtepi32_ps(_mm512_sub_epi32(emax, _mm512_set1_epi32((int)frac)));
    return _mm512_add_ps(_mm512_scalef_ps(p, unit), cv);
}

/* One step (32 products, 16 pairs) of R rows (pairs at mag / sgn / ex + r * rs) on one
   column vector (bv: the step's packed rhs of it, `pack_rhs`), cv[r] C in, D out: the
   model's integers term by term, as mma.py.  c0 (kind 0): every cv[r] is +0 (deepgemm's
   first step of a K block), which neither sets E_max nor adds a term.  always_inline: R,
   kind and c0 are constants at each call. */
static inline __attribute__((always_inline)) void model_step(
    int R, int kind, int c0, const int32_t *mag, const int32_t *sgn, const int32_t *ex,
    int64_t rs, const int16_t *bv, __m512 *cv, const spec *sp) {
    __m512i e16[4], emax[4], s[4], so[4];
    __m512i x[4][16]; /* the products' exponent sums, kept for the term pass */
    for (int r = 0; r < R; r++)
        e16[r] = _mm512_set1_epi16(-32768);
    for (int p = 0; p < 16; p++) {
        const __m512i be = _mm512_load_si512(bv + p * PAIR_W(kind) + 64);
        for (int r = 0; r < R; r++) {
            x[r][p] = _mm512_add_epi16(_mm512_set1_epi32(ex[r * rs + p]), be);
            e16[r] = _mm512_max_epi16(e16[r], x[r][p]);
        }
    }
    for (int r = 0; r < R; r++) {
        e16[r] = pair_max(e16[r]);
        emax[r] = _mm512_srai_epi32(e16[r], 16);
        s[r] = so[r] = _mm512_setzero_si512();
        if (kind == 1 || c0)
            continue;
        const __mmask16 prod = _mm512_cmpgt_epi32_mask(emax[r], _mm512_set1_epi32(ZERO_EXP / 2));
        const __m512i ec = c_exp(cv[r]);
        const __mmask16 c_sets =
            _mm512_cmp_ps_mask(cv[r], _mm512_setzero_ps(), _CMP_NEQ_UQ) &
            (~prod | _mm512_cmpgt_epi32_mask(ec, emax[r]));
        emax[r] = _mm512_mask_blend_epi32(c_sets, emax[r], ec);
        e16[r] = _mm512_or_si512(_mm512_and_si512(emax[r], _mm512_set1_epi32(0xFFFF)),
                                 _mm512_slli_epi32(emax[r], 16));
    }
    for (int p = 0; p < 16; p++) {
        const int16_t *q = bv + p * PAIR_W(kind);
        const __m512i bm = _mm512_load_si512(q);
        for (int r = 0; r < R; r++) {
            const int64_t at = r * rs + p;
            const __m512i d = _mm512_sub_epi16(e16[r], x[r][p]);
            const __m512i m = _mm512_mullo_epi16(_mm512_set1_epi32(mag[at]), bm);
            if (kind == 1) {
                const __m512i sg = _mm512_mullo_epi16(_mm512_set1_epi32(sgn[at]),
                                                      _mm512_load_si512(q + 32));
                add_wide_terms(m, d, sg, sp->sh, &s[r], &so[r]);
            } else { /* the products' signs: the rhs sign variant of the lhs pair's signs */
                s[r] = add_pairs(s[r], _mm512_srlv_epi16(m, d), _mm512_load_si512(q + sgn[at]));
            }
        }
    }
    for (int r = 0; r < R; r++)
        cv[r] = kind == 1 ? finish_cut(s[r], so[r], emax[r], cv[r], sp->frac)
                : c0      ? finish(s[r], emax[r], sp->frac, sp->obits)
                          : finish(add_c_term(s[r], emax[r], cv[r], sp->frac), emax[r],
                                   sp->frac, sp->obits);
}

/* Kind 1's step where no term loses a bit at alignment (`rows_vector` checks): the
   model's aligned sum is then the exact sum of the 32 products, which float64 fmas give
   exactly in any order (every partial sum is a multiple of the smallest product's ulp and
   spans at most sh + 8 + 5 < 53 bits; an exact zero sum is +0 under round to nearest, as
   the model's).  Then finish_cut's P = RZ32(sum) (FP8 sums stay normal float32) and D =
   RN32(P + C).  R rows (the step's values at a + 32 r) on one column vector (bv: the
   step's values of it, [32][16]); cv[r] C in, D out. */
static inline __attribute__((always_inline)) void exact_step(int R, const double *a,
                                                            const double *bv, __m512 *cv) {
    const int rz = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;
    __m512d lo[8], hi[8];
    for (int r = 0; r < R; r++)
        lo[r] = hi[r] = _mm512_setzero_pd();
    for (int t = 0; t < 32; t++) {
        const __m512d b0 = _mm512_load_pd(bv + 16 * t), b1 = _mm512_load_pd(bv + 16 * t + 8);
        for (int r = 0; r < R; r++) {
            const __m512d x = _mm512_set1_pd(a[32 * r + t]);
            lo[r] = _mm512_fmadd_pd(x, b0, lo[r]);
            hi[r] = _mm512_fmadd_pd(x, b1, hi[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        const __m512 p = _mm512_insertf32x8(
            _mm512_castps256_ps512(_mm512_cvt_roundpd_ps(lo[r], rz)),
            _mm512_cvt_roundpd_ps(hi[r], rz), 1);
        cv[r] = _mm512_add_ps(p, cv[r]);
    }
}

/* Whether no term of one row's step on one column vector can lose a bit at alignment,
   by a test finer than the spreads (`rows_step`): E_max is at most amax + bmax (the
   row's and each column's largest exponent), so every nonzero product at most sh binades
   below that is safe.  The smallest nonzero product's exponent sum comes from 16 pairs
   (exo: the row's exponents + EXP_OFFSET, bv: the step's packed rhs of the vector) as an
   unsigned minimum: a zero code's sum wraps around above every real one; with no nonzero
   product it stays 2^16 - 1 and the test passes. */
static inline int no_bit_lost(const int32_t *exo, const int16_t *bv, int32_t amax, __m512i bmax,
                              int64_t sh) {
    __m512i lo = _mm512_set1_epi16(-1);
    for (int p = 0; p < 16; p++)
        lo = _mm512_min_epu16(lo, _mm512_add_epi16(_mm512_set1_epi32(exo[p]),
                                                   _mm512_load_si512(bv + p * PAIR_W(1) + 64)));
    lo = _mm512_min_epu16(lo, _mm512_srli_epi32(lo, 16)); /* the pair's: low halves */
    const __m512i xmin = _mm512_sub_epi32(_mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)),
                                          _mm512_set1_epi32(EXP_OFFSET));
    const __m512i top = _mm512_add_epi32(bmax, _mm512_set1_epi32(amax));
    return !_mm512_cmpgt_epi32_mask(_mm512_sub_epi32(top, xmin), _mm512_set1_epi32((int)sh));
}

/* The packed rhs of one expert and the lhs rows of a row block, for `rows_vector`. */
typedef struct {
    const int16_t *bp;
    const double *bval;
    const int32_t *bspread;
    lhs_rows a;
} operands;

/* One step (pairs p0 .. p0 + 15) of R rows of the block (from row r0 of `o->a`) on one
   column vector v: cv[r * nv] holds row r0 + r's D so far (C in, D out), acc[r * nv] its
   float32 accumulator (mode 1).  Kind 1 with the exact route on: a row whose step has
   exponent spreads (its own plus each column's) of at most sh, or failing that passes
   `no_bit_lost`, cannot lose a bit at alignment (every term's shift d = E_max - e_a - e_b
   is at most either), so it takes exact_step, the others model_step.  tg: the block's
   target (row 0's).  always_inline: R, mode and the kind are constants at each call. */
static inline __attribute__((always_inline)) void rows_step(
    int R, int mode, int kind, const operands *o, int64_t r0, int64_t nv, int64_t v,
    int64_t p0, __m512 *cvs, __m512 *accs, const target *tg, const spec *sp) {
    const int64_t c = p0 / 16, at = c * BLOCK_ROWS + r0; /* the step, its row r0 */
    const int32_t *mag = o->a.mag + at * 16, *sgn = o->a.sgn + at * 16, *ex = o->a.ex + at * 16;
    const int16_t *bv = o->bp + (c * nv + v) * 16 * PAIR_W(kind);
    __m512 cv[8];
    for (int r = 0; r < R; r++)
        cv[r] = cvs[r * nv];
    if (kind == 1 && sp->exact_route) {
        const double *bval = o->bval + (c * nv + v) * 32 * 16, *aval = o->a.val + at * 32;
        const int32_t *bs2 = o->bspread + (c * nv + v) * 32;
        const __m512i bsp = _mm512_load_si512(bs2), bmx = _mm512_load_si512(bs2 + 16);
        unsigned ok = 0;
        for (int r = 0; r < R; r++) {
            const __m512i both = _mm512_add_epi32(
                bsp, _mm512_set1_epi32(o->a.spread[2 * (at + r)]));
            if (!_mm512_cmpgt_epi32_mask(both, _mm512_set1_epi32((int)sp->sh)) ||
                no_bit_lost(o->a.exo + (at + r) * 16, bv, o->a.spread[2 * (at + r) + 1], bmx,
                            sp->sh))
                ok |= 1u << r;
        }
        /* all R rows at once (the register block's loads shared), then the rows the
           tests did not clear again from their C, term by term */
        __m512 c_in[8];
        for (int r = 0; r < R; r++)
            c_in[r] = cv[r];
        exact_step(R, aval, bval, cv);
        for (int r = 0; r < R; r++)
            if (!(ok >> r & 1)) {
                cv[r] = c_in[r];
                model_step(1, 1, 0, mag + 16 * r, sgn + 16 * r, ex + 16 * r, 16, bv, cv + r, sp);
            }
    } else {
        /* deepgemm (mode 1) starts each 128-wide K block from C = +0 */
        const int c0 = kind == 0 && mode && p0 % 64 == 0;
        for (int h = 0; h < R; h += 4)
            if (c0)
                model_step(R < 4 ? R : 4, kind, 1, mag + 16 * h, sgn + 16 * h, ex + 16 * h, 16,
                           bv, cv + h, sp);
            else
                model_step(R < 4 ? R : 4, kind, 0, mag + 16 * h, sgn + 16 * h, ex + 16 * h, 16,
                           bv, cv + h, sp);
    }
    if (mode && (p0 + 16) % 64 == 0) { /* the end of a 128-wide K block */
        const int64_t kb = p0 / 64;
        const float s_b = tg->sb[kb * tg->nb + (16 * v) / 128];
        for (int r = 0; r < R; r++) {
            accs[r * nv] = _mm512_fmadd_ps(
                _mm512_set1_ps(tg->sa[(r0 + r) * tg->kbn + kb] * s_b), cv[r], accs[r * nv]);
            cv[r] = _mm512_setzero_ps();
        }
    }
    for (int r = 0; r < R; r++)
        cvs[r * nv] = cv[r];
}

/* rows_step with R, mode and kind as constants. */
#define ROWS_STEP(R, r0)                                                                   \
    do {                                                                                   \
        __m512 *cvs = st + (r0) * nv + v, *accs = cvs + BLOCK_ROWS * nv;                    \
        if (mode && sp->kind)                                                              \
            rows_step(R, 1, 1, o, r0, nv, v, p0, cvs, accs, &tb, sp);                   \
        else if (mode)                                                                     \
            rows_step(R, 1, 0, o, r0, nv, v, p0, cvs, accs, &tb, sp);                   \
        else if (sp->kind)                                                                 \
            rows_step(R, 0, 1, o, r0, nv, v, p0, cvs, accs, &tb, sp);                   \
        else                                                                               \
            rows_step(R, 0, 0, o, r0, nv, v, p0, cvs, accs, &tb, sp);                   \
    } while (0)

/* Rows [r0, r1) of a: codes a (row stride lda, format fmt_a) against the packed rhs in
   o, into the target (row r0's); st: scratch for 2 BLOCK_ROWS nv vectors.  A block of
   rows runs step by step (each output's steps in K order), and within a step column
   vector by column vector: one step's rhs of a vector (3 KiB, kind 1 another 4 KiB) and
   of the block's rows stay in L1 while the row quads pass, and each output's running D
   (and deepgemm's accumulator) waits in st between steps. */
static void rows(int mode, const uint8_t *a, int64_t lda, int64_t r0, int64_t r1, int64_t k,
                 int64_t n, int fmt_a, const operands *o, const target *tg, const spec *sp,
                 __m512 *st) {
    const int64_t nv = (n + 15) / 16, np = k / 2;
    for (int64_t i0 = r0; i0 < r1; i0 += BLOCK_ROWS) {
        const int64_t rb = r1 - i0 < BLOCK_ROWS ? r1 - i0 : BLOCK_ROWS;
        const target tb = target_at(tg, mode, n, i0 - r0);
        for (int64_t r = 0; r < rb; r++) {
            decode_row(a + (i0 + r) * lda, k, fmt_a, sp->kind, &o->a, r);
            for (int64_t v = 0; v < nv; v++) {
                const int64_t valid = n - 16 * v < 16 ? n - 16 * v : 16;
                st[r * nv + v] = mode ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(
                    (__mmask16)((1u << valid) - 1), tb.c + r * n + 16 * v);
                st[(BLOCK_ROWS + r) * nv + v] = _mm512_setzero_ps();
            }
        }
        for (int64_t p0 = 0; p0 < np; p0 += 16)
            for (int64_t v = 0; v < nv; v++)
                for (int64_t i = 0; i < rb;) {
                    if (rb - i >= 8) {
                        ROWS_STEP(8, i);
                        i += 8;
                    } else if (rb - i >= 4) {
                        ROWS_STEP(4, i);
                        i += 4;
                    } else {
                        ROWS_STEP(1, i);
                        i += 1;
                    }
                }
        for (int64_t r = 0; r < rb; r++)
            for (int64_t v = 0; v < nv; v++) {
                const int64_t valid = n - 16 * v < 16 ? n - 16 * v : 16;
                _mm512_mask_storeu_ps(tb.out + r * tb.ldo + 16 * v, (__mmask16)((1u << valid) - 1),
                                      st[((mode ? BLOCK_ROWS : 0) + r) * nv + v]);
            }
    }
}
#undef ROWS_STEP

/* A call's scratch (the packed rhs of one expert, a block's decoded lhs rows; the
   float64 values and spreads for kind 1 only) and its MXCSR: round to nearest even, no
   flush-to-zero, no denormals-are-zero, the caller's restored by work_close. */
typedef struct {
    int16_t *bp;
    double *bval, *aval;
    int32_t *bspread, *pairs, *aspread, *aexo;
    __m512 *state;
    unsigned csr;
} work;

/* Each thread's scratch memory, kept from call to call (and grown where a call needs
   more): a fresh allocation of the packed rhs (megabytes) costs its page faults and page
   clearing on every call.  The references' threads live as long as the process, so a
   thread keeps at most ARENA_KEEP bytes between calls: a call that needs more (the rhs
   of a production-shape expert, Blackwell's float64 values: 100 MB and up) frees its
   scratch when it ends, where its own page faults are small beside its work. */
#define ARENA_KEEP ((int64_t)64 << 20)
static __thread char *arena;
static __thread int64_t arena_bytes;

static void work_close(const work *w) {
    _mm_setcsr(w->csr);
    if (arena_bytes > ARENA_KEEP) {
        free(arena);
        arena = NULL;
        arena_bytes = 0;
    }
}

/* The scratch's parts in bytes, each 64-byte aligned, in work_open's order. */
static int64_t part(int64_t bytes) { return (bytes + 63) / 64 * 64; }

/* 0, or -1 when the scratch cannot be allocated. */
static int work_open(work *w, int64_t k, int64_t n, int kind, operands *o) {
    const int64_t nv = (n + 15) / 16, np = k / 2, nc = k / 32;
    const int64_t bytes[8] = {
        part(nv * np * PAIR_W(kind) * (int64_t)sizeof(int16_t) + 64),
        part(3 * BLOCK_ROWS * np * (int64_t)sizeof(int32_t) + 64),
        part(2 * BLOCK_ROWS * nv * (int64_t)sizeof(__m512)),
        /* kind 1 only */
        kind ? part(nv * k * 16 * (int64_t)sizeof(double) + 64) : 0,
        kind ? part(nv * nc * 32 * (int64_t)sizeof(int32_t) + 64) : 0,
        kind ? part(BLOCK_ROWS * k * (int64_t)sizeof(double) + 64) : 0,
        kind ? part(2 * BLOCK_ROWS * nc * (int64_t)sizeof(int32_t) + 64) : 0,
        kind ? part(BLOCK_ROWS * np * (int64_t)sizeof(int32_t) + 64) : 0};
    int64_t total = 0;
    for (int i = 0; i < 8; i++)
        total += bytes[i];
    if (total > arena_bytes) {
        free(arena);
        arena = aligned_alloc(64, (size_t)total);
        arena_bytes = arena ? total : 0;
        if (!arena)
            return -1;
    }
    char *at = arena;
    void *parts[8];
    for (int i = 0; i < 8; i++) {
        parts[i] = bytes[i] ? at : NULL;
        at += bytes[i];
    }
    *w = (work){parts[0], parts[3], parts[5], parts[4], parts[1], parts[6], parts[7], parts[2],
                _mm_getcsr()};
    _mm_setcsr(0x1F80);
    const lhs_rows l = {w->pairs, w->pairs + BLOCK_ROWS * np, w->pairs + 2 * BLOCK_ROWS * np,
                        w->aexo, w->aval, w->aspread};
    *o = (operands){w->bp, w->bval, w->bspread, l};
    return 0;
}

/* Rows [r0, r1) of D [m][n] = C + A B (`mma_block`): codes a [m][k] (format fmt_a) and b
   [k][n] (fmt_b), k a multiple of 32, C c [m][n] float32 (finite, below 2^100), out [m][n]
   float32; kind (`spec`), frac, out_bits the model's; exact_route: kind 1's exact steps
   in float64 (`exact_step`; 0: every step term by term, the same bits).  Returns 0, or -1
   when its scratch cannot be allocated. */
int fp8check_mma_rows(uint64_t pa, uint64_t pb, int64_t k, int64_t n, int64_t fmt_a,
                      int64_t fmt_b, int64_t kind, int64_t frac, int64_t obits,
                      int64_t exact_route, uint64_t pc, uint64_t pout, int64_t r0, int64_t r1) {
    work w;
    operands o;
    if (work_open(&w, k, n, (int)kind, &o))
        return -1;
    const int sh = (int)(frac - FBITS[fmt_a] - FBITS[fmt_b]);
    const spec sp = {(int)kind, frac, obits, sh, (int)exact_route};
    pack_rhs((const uint8_t *)pb, k, n, (int)fmt_b, (int)kind, kind ? 0 : sh, w.bp, w.bval,
             w.bspread);
    const target tg = {(const float *)pc + r0 * n, NULL, NULL, 0, 0, (float *)pout + r0 * n, n};
    rows(0, (const uint8_t *)pa, k, r0, r1, k, n, (int)fmt_a, &o, &tg, &sp, w.state);
    work_close(&w);
    return 0;
}

/* deepgemm on the tensor core's block partials (gmm's deepgemm-hopper with 128-element
   chains) for rows [m0, m1) of a gmm's output, as the digit paths' gmm (intdot.py): lhs
   codes a [M][k] (row stride lda) and scales sa [M][k / 128], rhs codes b [G][k][n] and
   scales sb [G][k / 128][nb], offs [G + 1], out [M][n] float32 (row stride ldo; the
   groups' rows in [m0, m1) overwritten), both operands of format fmt; kind (`spec`),
   frac, out_bits the model's, exact_route as fp8check_mma_rows.  Returns 0, or -1 when
   its scratch cannot be allocated. */
int fp8check_mma_gmm(uint64_t pa, int64_t lda, int64_t k, uint64_t pb, int64_t n,
                     uint64_t poffs, int64_t g, int64_t m0, int64_t m1, uint64_t psa,
                     uint64_t psb, int64_t nb, int64_t fmt, int64_t kind, int64_t frac,
                     int64_t obits, int64_t exact_route, uint64_t pout, int64_t ldo) {
    const uint8_t *b = (const uint8_t *)pb;
    const int64_t *offs = (const int64_t *)poffs;
    work w;
    operands o;
    if (work_open(&w, k, n, (int)kind, &o))
        return -1;
    const int sh = (int)(frac - 2 * FBITS[fmt]);
    const spec sp = {(int)kind, frac, obits, sh, (int)exact_route};
    const int64_t kbn = k / 128;
    for (int64_t gi = 0; gi < g; gi++) {
        const int64_t r0 = offs[gi] > m0 ? offs[gi] : m0;
        const int64_t r1 = offs[gi + 1] < m1 ? offs[gi + 1] : m1;
        if (r1 <= r0)
            continue;
        pack_rhs(b + gi * k * n, k, n, (int)fmt, (int)kind, kind ? 0 : sh, w.bp, w.bval,
                 w.bspread);
        const target tg = {NULL, (const float *)psa + r0 * kbn,
                           (const float *)psb + gi * kbn * nb, kbn, nb,
                           (float *)pout + r0 * ldo, ldo};
        rows(1, (const uint8_t *)pa, lda, r0, r1, k, n, (int)fmt, &o, &tg, &sp, w.state);
    }
    work_close(&w);
    return 0;
}
