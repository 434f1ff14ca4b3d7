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
     VPMADDWD of the magnitudes with the products' signs (+-1; lanes hold the k-even and
     k-odd term of one column); kind 1 in two int32 sums of 16 terms (below 2^31), added
     exactly in float64;
   * kind 0: C's term ic >> (23 - frac + E_max - e_c) (toward zero; E_max >= e_c once C
     joins) and the truncation to out_bits are integer shifts; the result a 2^q with a <
     2^(out_bits + 1) is converted exactly (VSCALEFPS of an exact int32: a float32,
     subnormal or not, or +-inf from 2^128 up, as mma.py's `_round_out`), +0 for a zero
     sum;
   * kind 1: the sum converted to float32 toward zero is the cut to 23 fraction bits; the
     FP8 sums' exponents keep it a normal float32 and its scaling by 2^unit exact; then
     one IEEE addition of C (MXCSR: round to nearest even, subnormals kept) is mma.py's
     exact sum rounded once, signed zeros included (+0 for a zero sum plus +-0).
*/
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ZERO_EXP (-8192)

/* Lane-pair form of int16 lanes: each even lane (k even) takes the max of itself and its
   odd neighbour, and both lanes of the pair get it. */
static inline __m512i pair_max(__m512i x) {
    __m512i m = _mm512_max_epi16(x, _mm512_srli_epi32(x, 16));
    m = _mm512_and_si512(m, _mm512_set1_epi32(0xFFFF));
    return _mm512_or_si512(m, _mm512_slli_epi32(m, 16));
}

/* C's integer significand and exponent per lane (mma.py `_c_parts`): cv = ic 2^(ec - 23). */
static inline void c_parts(__m512 cv, __m512i *ic, __m512i *ec) {
    const __m512i cb = _mm512_castps_si512(cv);
    const __m512i field = _mm512_and_si512(_mm512_srli_epi32(cb, 23), _mm512_set1_epi32(0xFF));
    __m512i mag = _mm512_and_si512(cb, _mm512_set1_epi32(0x7FFFFF));
    mag = _mm512_mask_or_epi32(mag, _mm512_cmpgt_epi32_mask(field, _mm512_setzero_si512()), mag,
                               _mm512_set1_epi32(0x800000));
    *ic = _mm512_mask_sub_epi32(mag, _mm512_movepi32_mask(cb), _mm512_setzero_si512(), mag);
    *ec = _mm512_sub_epi32(_mm512_max_epi32(field, _mm512_set1_epi32(1)), _mm512_set1_epi32(127));
}

/* The step's result (mma.py `_finish` and `_round_out` for these models) from the summed
   terms s, E_max (C's exponent where it set it) and C = (ic, ec).  (mma.py's has_p test
   needs no counterpart: without products and with C = 0 the sum is 0, hence +0.) */
static inline __m512 finish(__m512i s, __m512i emax, __m512i ic, __m512i ec, int64_t frac,
                            int64_t obits) {
    const __m512i zero = _mm512_setzero_si512();
    const __mmask16 c_nz = _mm512_cmpneq_epi32_mask(ic, zero);
    /* C's term: sign * (|ic| >> (23 - frac + emax - ec)), cut toward zero */
    const __m512i sh = _mm512_add_epi32(_mm512_set1_epi32((int)(23 - frac)),
                                        _mm512_sub_epi32(emax, ec));
    const __m512i ct = _mm512_srlv_epi32(_mm512_abs_epi32(ic), sh);
    s = _mm512_mask_add_epi32(s, c_nz & ~_mm512_movepi32_mask(ic), s, ct);
    s = _mm512_mask_sub_epi32(s, c_nz & _mm512_movepi32_mask(ic), s, ct);
    /* round_out: q = max(top, -126) - obits with top = bitlen(|s|) - 1 + unit */
    const __m512i unit = _mm512_sub_epi32(emax, _mm512_set1_epi32((int)frac));
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

/* One row's codes [k] -> its pairs as int32 (two int16 halves: k even low, k odd high):
   mag (sh 0), sign, exponent, each [k / 2]. */
static void row_pairs(const uint8_t *codes, int64_t k, int fmt, int32_t *mag, int32_t *sgn,
                      int32_t *ex) {
    for (int64_t t = 0; t < k; t += 32) {
        __m512i m, s, e;
        decode(_mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(codes + t))), fmt, 0,
               &m, &s, &e);
        _mm512_storeu_si512(mag + t / 2, m);
        _mm512_storeu_si512(sgn + t / 2, s);
        _mm512_storeu_si512(ex + t / 2, e);
    }
}

/* The packed rhs of codes b [k][n]: [k / 2][nv][3][32] int16 (nv = ceil(n / 16)):
   |sig| << sh, sign (+-1), exponent; lane 2 col + t of pair p is k = 2 p + t, column 16 v
   + col (padding: the zero code). */
static void pack_rhs(const uint8_t *b, int64_t k, int64_t n, int fmt, int sh, int16_t *bp) {
    const int64_t nv = (n + 15) / 16;
    for (int64_t p = 0; p < k / 2; p++)
        for (int64_t v = 0; v < nv; v++) {
            const int64_t valid = n - 16 * v < 16 ? n - 16 * v : 16;
            const __mmask16 m = (__mmask16)((1u << valid) - 1);
            const __m128i x0 = _mm_maskz_loadu_epi8(m, b + 2 * p * n + 16 * v);
            const __m128i x1 = _mm_maskz_loadu_epi8(m, b + (2 * p + 1) * n + 16 * v);
            const __m256i both = _mm256_set_m128i(_mm_unpackhi_epi8(x0, x1),
                                                  _mm_unpacklo_epi8(x0, x1));
            __m512i mag, sgn, ex;
            decode(_mm512_cvtepu8_epi16(both), fmt, sh, &mag, &sgn, &ex);
            int16_t *o = bp + (p * nv + v) * 96;
            _mm512_store_si512(o, mag);
            _mm512_store_si512(o + 32, sgn);
            _mm512_store_si512(o + 64, ex);
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

/* The model: kind 0 (C aligned with the products, HOPPER_FP8) or 1 (the products' sum cut
   to a float32 toward zero, C added in float32, BLACKWELL_FP8), frac_bits, out_bits, and
   for kind 1 the shift frac - mf applied in int32 lanes (kind 0 packs it into the rhs). */
typedef struct {
    int kind;
    int64_t frac, obits, sh;
} spec;

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

/* R rows (their pairs at mag / sgn / ex + r * np) x one column vector v of the packed
   rhs bp, every step in K order.  always_inline: R, mode and the kind are constants at
   each call. */
static inline __attribute__((always_inline)) void rows_vector(
    int R, int mode, int kind, const int32_t *mag, const int32_t *sgn, const int32_t *ex,
    int64_t np, const int16_t *bp, int64_t nv, int64_t v, __mmask16 mask, const target *tg,
    int64_t n, const spec *sp) {
    __m512 cv[4], acc[4];
    for (int r = 0; r < R; r++) {
        cv[r] = mode ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, tg->c + r * n + 16 * v);
        acc[r] = _mm512_setzero_ps();
    }
    for (int64_t p0 = 0; p0 < np; p0 += 16) { /* one step: 32 products */
        const int16_t *bv = bp + (p0 * nv + v) * 96;
        __m512i e16[4], emax[4], ic[4], ec[4], s[4], so[4];
        for (int r = 0; r < R; r++)
            e16[r] = _mm512_set1_epi16(-32768);
        for (int p = 0; p < 16; p++) {
            const __m512i be = _mm512_load_si512(bv + p * nv * 96 + 64);
            for (int r = 0; r < R; r++)
                e16[r] = _mm512_max_epi16(e16[r], _mm512_add_epi16(
                    _mm512_set1_epi32(ex[r * np + p0 + p]), be));
        }
        for (int r = 0; r < R; r++) {
            emax[r] = _mm512_srai_epi32(_mm512_slli_epi32(pair_max(e16[r]), 16), 16);
            s[r] = so[r] = _mm512_setzero_si512();
            if (kind == 1) {
                e16[r] = pair_max(e16[r]);
                continue;
            }
            const __mmask16 prod = _mm512_cmpgt_epi32_mask(emax[r], _mm512_set1_epi32(ZERO_EXP / 2));
            c_parts(cv[r], &ic[r], &ec[r]);
            const __mmask16 c_sets = _mm512_cmpneq_epi32_mask(ic[r], _mm512_setzero_si512()) &
                                     (~prod | _mm512_cmpgt_epi32_mask(ec[r], emax[r]));
            emax[r] = _mm512_mask_blend_epi32(c_sets, emax[r], ec[r]);
            e16[r] = _mm512_or_si512(_mm512_and_si512(emax[r], _mm512_set1_epi32(0xFFFF)),
                                     _mm512_slli_epi32(emax[r], 16));
        }
        for (int p = 0; p < 16; p++) {
            const int16_t *q = bv + p * nv * 96;
            const __m512i bm = _mm512_load_si512(q), bs = _mm512_load_si512(q + 32);
            const __m512i be = _mm512_load_si512(q + 64);
            for (int r = 0; r < R; r++) {
                const int64_t at = r * np + p0 + p;
                const __m512i d = _mm512_sub_epi16(e16[r], _mm512_add_epi16(
                    _mm512_set1_epi32(ex[at]), be));
                const __m512i m = _mm512_mullo_epi16(_mm512_set1_epi32(mag[at]), bm);
                const __m512i sg = _mm512_mullo_epi16(_mm512_set1_epi32(sgn[at]), bs);
                if (kind == 1)
                    add_wide_terms(m, d, sg, sp->sh, &s[r], &so[r]);
                else
                    s[r] = _mm512_add_epi32(s[r], _mm512_madd_epi16(_mm512_srlv_epi16(m, d), sg));
            }
        }
        for (int r = 0; r < R; r++)
            cv[r] = kind == 1 ? finish_cut(s[r], so[r], emax[r], cv[r], sp->frac)
                              : finish(s[r], emax[r], ic[r], ec[r], sp->frac, sp->obits);
        if (mode && (p0 + 16) % 64 == 0) { /* the end of a 128-wide K block */
            const int64_t kb = p0 / 64;
            const float s_b = tg->sb[kb * tg->nb + (16 * v) / 128];
            for (int r = 0; r < R; r++) {
                acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(tg->sa[r * tg->kbn + kb] * s_b), cv[r],
                                         acc[r]);
                cv[r] = _mm512_setzero_ps();
            }
        }
    }
    for (int r = 0; r < R; r++)
        _mm512_mask_storeu_ps(tg->out + r * tg->ldo + 16 * v, mask, mode ? acc[r] : cv[r]);
}

/* rows_vector with R, mode and kind as constants. */
#define ROWS_VECTOR(R, mag, sgn, ex, t)                                                    \
    do {                                                                                   \
        if (mode && sp->kind)                                                              \
            rows_vector(R, 1, 1, mag, sgn, ex, np, bp, nv, v, mask, t, n, sp);             \
        else if (mode)                                                                     \
            rows_vector(R, 1, 0, mag, sgn, ex, np, bp, nv, v, mask, t, n, sp);             \
        else if (sp->kind)                                                                 \
            rows_vector(R, 0, 1, mag, sgn, ex, np, bp, nv, v, mask, t, n, sp);             \
        else                                                                               \
            rows_vector(R, 0, 0, mag, sgn, ex, np, bp, nv, v, mask, t, n, sp);             \
    } while (0)

/* Rows [r0, r1) of a: codes a (row stride lda) against the packed rhs bp, into the target
   (advanced row by row); pairs: scratch for 4 rows' pairs. */
static void rows(int mode, const uint8_t *a, int64_t lda, int64_t r0, int64_t r1, int64_t k,
                 int64_t n, int fmt_a, const int16_t *bp, target tg, const spec *sp,
                 int32_t *pairs) {
    const int64_t nv = (n + 15) / 16, np = k / 2;
    int32_t *mag = pairs, *sgn = pairs + 4 * np, *ex = pairs + 8 * np;
    for (int64_t i = r0; i < r1; i += 4) {
        const int R = r1 - i < 4 ? (int)(r1 - i) : 4;
        for (int r = 0; r < R; r++)
            row_pairs(a + (i + r) * lda, k, fmt_a, mag + r * np, sgn + r * np, ex + r * np);
        for (int64_t v = 0; v < nv; v++) {
            const int64_t valid = n - 16 * v < 16 ? n - 16 * v : 16;
            const __mmask16 mask = (__mmask16)((1u << valid) - 1);
            if (R == 4)
                ROWS_VECTOR(4, mag, sgn, ex, &tg);
            else
                for (int r = 0; r < R; r++) {
                    target t1 = tg;
                    t1.out += r * tg.ldo;
                    if (mode)
                        t1.sa += r * tg.kbn;
                    else
                        t1.c += r * n;
                    ROWS_VECTOR(1, mag + r * np, sgn + r * np, ex + r * np, &t1);
                }
        }
        tg.out += 4 * tg.ldo;
        if (mode)
            tg.sa += 4 * tg.kbn;
        else
            tg.c += 4 * n;
    }
}
#undef ROWS_VECTOR

static int16_t *alloc_rhs(int64_t k, int64_t n) {
    return aligned_alloc(64, (k / 2) * ((n + 15) / 16) * 96 * sizeof(int16_t) + 64);
}

/* Rows [r0, r1) of D [m][n] = C + A B (`mma_block`): codes a [m][k] (format fmt_a) and b
   [k][n] (fmt_b), k a multiple of 32, C c [m][n] float32 (finite, below 2^100), out [m][n]
   float32; kind (`spec`), frac, out_bits the model's.  Returns 0, or -1 when its scratch
   cannot be allocated. */
int fp8check_mma_rows(uint64_t pa, uint64_t pb, int64_t k, int64_t n, int64_t fmt_a,
                      int64_t fmt_b, int64_t kind, int64_t frac, int64_t obits, uint64_t pc,
                      uint64_t pout, int64_t r0, int64_t r1) {
    int16_t *bp = alloc_rhs(k, n);
    int32_t *pairs = malloc(12 * (k / 2) * sizeof(int32_t) + 64);
    if (!bp || !pairs) {
        free(bp);
        free(pairs);
        return -1;
    }
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(0x1F80); /* round to nearest even, no flush-to-zero, no denormals-are-zero */
    const int sh = (int)(frac - FBITS[fmt_a] - FBITS[fmt_b]);
    const spec sp = {(int)kind, frac, obits, sh};
    pack_rhs((const uint8_t *)pb, k, n, (int)fmt_b, kind ? 0 : sh, bp);
    const target tg = {(const float *)pc + r0 * n, NULL, NULL, 0, 0, (float *)pout + r0 * n, n};
    rows(0, (const uint8_t *)pa, k, r0, r1, k, n, (int)fmt_a, bp, tg, &sp, pairs);
    _mm_setcsr(csr);
    free(pairs);
    free(bp);
    return 0;
}

/* deepgemm on the tensor core's block partials (gmm's deepgemm-hopper with 128-element
   chains) for rows [m0, m1) of a gmm's output, as the digit paths' gmm (intdot.py): lhs
   codes a [M][k] (row stride lda) and scales sa [M][k / 128], rhs codes b [G][k][n] and
   scales sb [G][k / 128][nb], offs [G + 1], out [M][n] float32 (row stride ldo; the
   groups' rows in [m0, m1) overwritten), both operands of format fmt; kind (`spec`),
   frac, out_bits the model's.  Returns 0, or -1 when its scratch cannot be allocated. */
int fp8check_mma_gmm(uint64_t pa, int64_t lda, int64_t k, uint64_t pb, int64_t n,
                     uint64_t poffs, int64_t g, int64_t m0, int64_t m1, uint64_t psa,
                     uint64_t psb, int64_t nb, int64_t fmt, int64_t kind, int64_t frac,
                     int64_t obits, uint64_t pout, int64_t ldo) {
    const uint8_t *b = (const uint8_t *)pb;
    const int64_t *offs = (const int64_t *)poffs;
    int16_t *bp = alloc_rhs(k, n);
    int32_t *pairs = malloc(12 * (k / 2) * sizeof(int32_t) + 64);
    if (!bp || !pairs) {
        free(bp);
        free(pairs);
        return -1;
    }
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(0x1F80);
    const int sh = (int)(frac - 2 * FBITS[fmt]);
    const spec sp = {(int)kind, frac, obits, sh};
    const int64_t kbn = k / 128;
    for (int64_t gi = 0; gi < g; gi++) {
        const int64_t r0 = offs[gi] > m0 ? offs[gi] : m0;
        const int64_t r1 = offs[gi + 1] < m1 ? offs[gi + 1] : m1;
        if (r1 <= r0)
            continue;
        pack_rhs(b + gi * k * n, k, n, (int)fmt, kind ? 0 : sh, bp);
        const target tg = {NULL, (const float *)psa + r0 * kbn,
                           (const float *)psb + gi * kbn * nb, kbn, nb,
                           (float *)pout + r0 * ldo, ldo};
        rows(1, (const uint8_t *)pa, lda, r0, r1, k, n, (int)fmt, bp, tg, &sp, pairs);
    }
    _mm_setcsr(csr);
    free(pairs);
    free(bp);
    return 0;
}
