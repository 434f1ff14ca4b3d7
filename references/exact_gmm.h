/* What the e4m3fn gmm kernels on integer dot products share (fp8check: amx_gmm.c on AMX
   int8 tiles, vnni_gmm.c on AVX512-VNNI): the recipes' float32 step, and the production
   check's consumption of each K block's exact partial.

   The recipes run in float32 with the hardware's correctly rounded operations (VFMADD:
   one rounding; the kernels are compiled with -ffp-contract=off, which keeps every other
   multiply and add apart), round to nearest even with subnormals honoured (MXCSR set so
   for the call, restored after), on P, the block's exact partial rounded once to float32:

       deepgemm  acc = fma(RN(sa*sb), P, acc)
       cublas    acc = fma(RN(P*sa), sb, acc)
       tokamax   acc = RN(RN(RN(P*sa)*sb) + acc)

   The production check's pass (`fp8check_<path>_exact_gmm`, references/forward_refs.py)
   consumes each partial three ways at once (`consume_row`): the recipe as above, the
   exact value's TwoSum state (the exact products P * sa * sb split by an fma, certified
   and rounded at the last K block; forward_refs.py recomputes what the certificate
   cannot decide) and |A||B|'s float64 sum of Q * |sa| |sb|, Q the exact partial of the
   magnitudes (the codes with the sign bit cleared, through the same digits).  Partials
   come in units of 2^-18 (an e4m3fn value times 2^9 is an integer), exact in float64.
*/
#ifndef FP8CHECK_EXACT_GMM_H
#define FP8CHECK_EXACT_GMM_H

#include <immintrin.h>
#include <stdint.h>

/* |X| of an e4m3fn code, X its value in units of 2^-9 (an integer below 2^18; the NaN
   codes' bits decode as 480, which callers exclude). */
static inline int32_t code_magnitude(unsigned c) {
    const unsigned e = (c >> 3) & 15, f = c & 7;
    return e ? (int32_t)(8 + f) << (e - 1) : (int32_t)f;
}

/* RN32 of a row's 16 exact partials v (in units of 2^-18), in value units: one rounding of
   the exact float64 (the scaling by 2^-18 after it is exact: P is 0 or at least 2^-18, far
   from float32's subnormals). */
static inline __m512 rn32_row(const __m512d v[2]) {
    const int rn = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512 p = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvt_roundpd_ps(v[0], rn)),
                                        _mm512_cvt_roundpd_ps(v[1], rn), 1);
    return _mm512_mul_ps(p, _mm512_set1_ps(0x1p-18f));
}

/* One K block of the recipe `code` (0-2, header) on a row's 16 RN32 partials p. */
static inline __m512 recipe_step(int64_t code, __m512 p, float sa, float sb, __m512 acc) {
    if (code == 0)
        return _mm512_fmadd_ps(_mm512_set1_ps(sa * sb), p, acc);
    if (code == 1)
        return _mm512_fmadd_ps(_mm512_mul_ps(p, _mm512_set1_ps(sa)), _mm512_set1_ps(sb), acc);
    return _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, _mm512_set1_ps(sa)), _mm512_set1_ps(sb)),
                         acc);
}

/* TwoSum (Knuth): s = RN(a + b), *e = a + b - s exactly. */
static inline __m512d two_sum(__m512d a, __m512d b, __m512d *e) {
    const __m512d s = _mm512_add_pd(a, b), bb = _mm512_sub_pd(s, a);
    *e = _mm512_add_pd(_mm512_sub_pd(a, _mm512_sub_pd(s, bb)), _mm512_sub_pd(b, bb));
    return s;
}

/* The exact value from its state after the last K block (references.certified's
   round_certified of the TwoSum pair hi + lo = total + sigma, sigma within err of the
   exact sum it stands for (`exact_step`)): RN53(hi + lo) is hi itself (+0 for
   a zero), certain where hi + lo is exact (lo = err = 0) or |lo| M + err M < h, M = 1 +
   2^-51, h half hi's ulp (a quarter at a power of two).  Where it cannot tell (hi
   infinite or NaN, or below 2^-968, where h would not be a normal float64: never at
   these sums' magnitudes; any superset of round_certified's undecided set is sound)
   und gets 1 and the caller recomputes the element.  Stores 8 elements at x and und
   (masked). */
static inline void finish_exact(double *x, uint8_t *und, __mmask8 m, __m512d total,
                                __m512d sigma, __m512d err) {
    __m512d lo;
    const __m512d hi = two_sum(total, sigma, &lo);
    const __m512i bits = _mm512_castpd_si512(hi);
    const __m512i ex = _mm512_and_si512(_mm512_srli_epi64(bits, 52), _mm512_set1_epi64(0x7FF));
    const __mmask8 pow2 = _mm512_testn_epi64_mask(bits, _mm512_set1_epi64((1LL << 52) - 1));
    /* h = 2^(ex - 1023 - 53), halved at a power of two: built from its exponent field */
    const __m512i ex53 = _mm512_sub_epi64(ex, _mm512_set1_epi64(53));
    const __m512i hex = _mm512_mask_sub_epi64(ex53, pow2, ex53, _mm512_set1_epi64(1));
    const __m512d h = _mm512_castsi512_pd(_mm512_slli_epi64(hex, 52));
    const __m512d margin = _mm512_set1_pd(1.0 + 0x1p-51), zero = _mm512_setzero_pd();
    const __m512d off = _mm512_add_pd(_mm512_mul_pd(_mm512_abs_pd(lo), margin),
                                      _mm512_mul_pd(err, margin));
    const __mmask8 finite = _mm512_cmpneq_epi64_mask(ex, _mm512_set1_epi64(0x7FF));
    const __mmask8 exact = _mm512_cmp_pd_mask(lo, zero, _CMP_EQ_OQ) &
                           _mm512_cmp_pd_mask(err, zero, _CMP_EQ_OQ);
    const __mmask8 normal_h = _mm512_cmpge_epi64_mask(ex, _mm512_set1_epi64(55));
    const __mmask8 certain = finite & (exact | (normal_h & _mm512_cmp_pd_mask(off, h,
                                                                              _CMP_LT_OQ)));
    _mm512_mask_storeu_pd(x, m, _mm512_add_pd(hi, zero)); /* -0 + 0 = +0 */
    _mm_mask_storeu_epi8(und, m, _mm_maskz_mov_epi8((__mmask8)~certain, _mm_set1_epi8(1)));
}

/* One K block's term p s (p the exact partial in units of 2^-18, s = sa sb 2^-18: exact)
   added to the exact value's state at t, g (8 elements of a tile's scratch): the product
   split exactly by an fma (hi = RN(p s), lo = p s - hi), hi added to total by TwoSum
   (its error e exact), e and lo to sigma in plain float64.  So after the n K blocks the
   exact value is total + (the exact sum of the 2n terms e and lo), and sigma errs from
   that sum by at most gamma_2n sum(|e| + |lo|), which |A||B|'s own sum M bounds:
   |lo| <= u |hi|, |e| <= u |total after it|, |hi| <= (1 + u) |Q s| and each total at most
   (1 + u)^n sum|hi|, while M >= (1 - u)^(n + 1) sum Q|s| (u = 2^-53; Q the magnitude
   partial, |p| <= Q), so err = 2n (n + 1) 2^-105 M (`exact_err`; twice the bound, which
   covers every (1 +- u)^n factor and err's own rounding) bounds it.  No running sum|e|:
   a bound certifies as well as the computed one did (both are far below half an ulp of
   the value except within a hair of a rounding tie, which both flag), for less work.
   The first K block starts from zeros (total = hi exactly), the last (x non-NULL) stores
   the finished value at x and its flag at und instead (`finish_exact`, masked by m). */
static inline void exact_step(double *t, double *g, __m512d p, __m512d s, int first,
                              double *x, uint8_t *und, __mmask8 m, __m512d err) {
    const __m512d hi = _mm512_mul_pd(p, s), lo = _mm512_fmsub_pd(p, s, hi);
    __m512d total = hi, sigma = lo;
    if (!first) {
        __m512d e;
        total = two_sum(_mm512_loadu_pd(t), hi, &e);
        sigma = _mm512_add_pd(_mm512_add_pd(_mm512_loadu_pd(g), e), lo);
    }
    if (x) {
        finish_exact(x, und, m, total, sigma, err);
        return;
    }
    _mm512_storeu_pd(t, total);
    _mm512_storeu_pd(g, sigma);
}

/* Where the exact pass's rows go (`fp8check_<path>_exact_gmm`): the recipe `code` (0-2),
   the exact value and |A||B| of each element, finished at its last K block. */
typedef struct {
    int64_t code, kbn, n, nb;
    const float *sa;      /* [rows][kbn] of the pass's first row */
    const float *sb;      /* [kbn][nb] of the group */
    float *out;           /* the recipe, */
    double *exact, *mag;  /* the exact value (`finish_exact`) and |A||B| (its sum times
                             `scale`, abs_bound.py's last step), */
    uint8_t *undecided;   /* 1 where finish_exact cannot decide, else 0: each [rows][n]
                             at the pass's first row */
    double exact_err, scale; /* err per unit of |A||B|'s sum (`exact_step`),
                                abs_bound.factor */
} exact_sink;

/* One output row's 16 elements (the sink's element o and the 15 after it, those under m
   valid) at K block kb: v the exact partials and q those of the magnitudes (units of
   2^-18), s_a the row's scale and s_b the column tile's.  The recipe's step into acc, the
   exact value's (`exact_step`) into total and sigma, |A||B|'s sum (RN(Q |sa| |sb|) added)
   into mag: 16 elements each, the row's running state.  The first K block starts from
   zeros (the same bits: every recipe adds +0 to its first term, as the float64 BLAS path
   does); the last finishes the three into the sink instead. */
static inline void consume_row(const exact_sink *s, float *acc, double *total, double *sigma,
                               double *mag, const __m512d v[2], const __m512d q[2], float s_a,
                               float s_b, int64_t kb, int64_t o, __mmask16 m) {
    const int first = kb == 0, last = kb == s->kbn - 1;
    const __mmask8 mh[2] = {(__mmask8)m, (__mmask8)(m >> 8)};
    const __m512 r = recipe_step(s->code, rn32_row(v), s_a, s_b,
                                 first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc));
    if (last)
        _mm512_mask_storeu_ps(s->out + o, m, r);
    else
        _mm512_storeu_ps(acc, r);
    /* s = sa sb and |s|, times 2^-18 (exact): the partials are in units of 2^-18 */
    const __m512d sab = _mm512_set1_pd((double)s_a * (double)s_b * 0x1p-18);
    const __m512d mab = _mm512_abs_pd(sab);
    for (int h = 0; h < 2; h++) {
        const __m512d sum = _mm512_add_pd(first ? _mm512_setzero_pd()
                                                : _mm512_loadu_pd(mag + 8 * h),
                                          _mm512_mul_pd(q[h], mab));
        if (last)
            _mm512_mask_storeu_pd(s->mag + o + 8 * h, mh[h],
                                  _mm512_mul_pd(sum, _mm512_set1_pd(s->scale)));
        else
            _mm512_storeu_pd(mag + 8 * h, sum);
        exact_step(total + 8 * h, sigma + 8 * h, v[h], sab, first,
                   last ? s->exact + o + 8 * h : NULL, s->undecided + o + 8 * h, mh[h],
                   _mm512_mul_pd(sum, _mm512_set1_pd(s->exact_err)));
    }
}

/* The rows [*r0, *r1) of group gi (offs: each group's first row and the end of the last)
   in a thread's share [m0, m1) of the output's rows; whether there are any. */
static inline int share_rows(const int64_t *offs, int64_t gi, int64_t m0, int64_t m1,
                             int64_t *r0, int64_t *r1) {
    *r0 = offs[gi] > m0 ? offs[gi] : m0;
    *r1 = offs[gi + 1] < m1 ? offs[gi + 1] : m1;
    return *r1 > *r0;
}

#endif
