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
   With a metric_rows (`row_metrics`), the pass takes the three straight into the
   production check's metrics of an output under test, summed per row, and writes them
   out only where the exact value is left to the caller.
*/
#ifndef FP8CHECK_EXACT_GMM_H
#define FP8CHECK_EXACT_GMM_H

#include <float.h>
#include <immintrin.h>
#include <math.h>
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
   the lane is undecided and the caller recomputes the element.  The 8 values into *x;
   returns the undecided lanes. */
static inline __mmask8 finish_exact(__m512d total, __m512d sigma, __m512d err, __m512d *x) {
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
    *x = _mm512_add_pd(hi, zero); /* -0 + 0 = +0 */
    return (__mmask8)~certain;
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
   The first K block starts from zeros (total = hi exactly); the last (x non-NULL)
   finishes the value into *x instead of storing the state and returns its undecided
   lanes (`finish_exact`), the others 0. */
static inline __mmask8 exact_step(double *t, double *g, __m512d p, __m512d s, int first,
                                  __m512d *x, __m512d err) {
    const __m512d hi = _mm512_mul_pd(p, s), lo = _mm512_fmsub_pd(p, s, hi);
    __m512d total = hi, sigma = lo;
    if (!first) {
        __m512d e;
        total = two_sum(_mm512_loadu_pd(t), hi, &e);
        sigma = _mm512_add_pd(_mm512_add_pd(_mm512_loadu_pd(g), e), lo);
    }
    if (x)
        return finish_exact(total, sigma, err, x);
    _mm512_storeu_pd(t, total);
    _mm512_storeu_pd(g, sigma);
    return 0;
}

/* The production check's metrics of an output under test, summed per row in the pass
   (fp8check.measures.totals' `gmm_metric_totals`): those of its `_reduce` on the same
   elements, bit for bit per element, the float64 sums per row in a fixed order (the
   elements in column order, 16 at a time), so the totals do not depend on the threads.
   Per row (rows from the call's first, [rows][ROW_INTS] ints, [rows][ROW_FLTS] flts,
   zeroed but for flts' bound ratio max -1 and ints' argmax -1 by the caller):
     ints   the non-finite outputs, the ULP distance's max and nonzero count, the bound
            ratios over 1, the recipe mismatches, the elements whose exact value or |A||B|
            is not finite, those whose RN(exact) is not finite (the sign test's reference),
            and the column of the first bound ratio max;
     flts   the bound ratio max, sum exact^2, sum (out - exact)^2 (finite outputs);
     signs  [rows][ceil(n / 128)][3] int32: the sign test's z against RN(exact) (magnitude
            mode, signed mode; `metrics.sign_z`) and the count of nonzero z, per 128-column
            tile (bias_z's tiles: a rhs scale's columns).
   The ULP distance and RN(exact) are in out's format: float32 (bf16 0) or bfloat16; the
   bound's unit of the output rounding is that format's (emin -126, 23 or 7 fraction
   bits). */
#define ROW_INTS 8
#define ROW_FLTS 3
typedef struct {
    const void *out; /* the output under test [rows][n] */
    int64_t bf16;
    double gamma, floor; /* the bound's slope gamma_n and its absolute underflow term */
    int64_t *ints;
    double *flts;
    int32_t *signs;
} metric_rows;

/* 2^k (int64 lanes, -1022 <= k <= 1023). */
static inline __m512d pow2_pd(__m512i k) {
    return _mm512_castsi512_pd(_mm512_slli_epi64(_mm512_add_epi64(k, _mm512_set1_epi64(1023)), 52));
}

/* floor(log2 |x|) of normal x, -1023 for zeros and subnormals (fp8check.bits.exponent). */
static inline __m512i exponent_pd(__m512d x) {
    return _mm512_sub_epi64(_mm512_and_si512(_mm512_srli_epi64(_mm512_castpd_si512(x), 52),
                                             _mm512_set1_epi64(0x7FF)), _mm512_set1_epi64(1023));
}

/* x rounded to nearest even at 8 significant bits, bfloat16's subnormals below 2^-126, as
   float32 (totals' `_rounded`: exact scalings and one rint; 2^128 and past become inf). */
static inline __m256 rn_bf16_pd(__m512d x) {
    const __m512i q = _mm512_sub_epi64(_mm512_max_epi64(exponent_pd(x), _mm512_set1_epi64(-126)),
                                       _mm512_set1_epi64(7));
    const __m512d y = _mm512_roundscale_pd(_mm512_mul_pd(x, pow2_pd(_mm512_sub_epi64(
                                               _mm512_setzero_si512(), q))),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_cvtpd_ps(_mm512_mul_pd(y, pow2_pd(q)));
}

/* float32 lanes rounded to bfloat16 (nearest even; a NaN stays a NaN), as float32. */
static inline __m512 rn_bf16_ps(__m512 x) {
    const __m512i b = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7FFF)), lsb);
    r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), b,
                             _mm512_set1_epi32(0x00400000));
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xFFFF0000)));
}

/* Float32 bits on a monotone integer line (+0 and -0 both 0), 8 lanes as int64. */
static inline __m512i ordered_epi64(__m256i bits) {
    const __m512i b = _mm512_cvtepi32_epi64(bits);
    const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi64(0x7FFFFFFF));
    return _mm512_mask_sub_epi64(mag, _mm512_movepi64_mask(b), _mm512_setzero_si512(), mag);
}

/* The first lane of x (16 float64 lanes, x[0] then x[1]) equal to top. */
static inline int first_lane(const __m512d x[2], double top) {
    const __m512d t = _mm512_set1_pd(top);
    const unsigned at = (unsigned)_mm512_cmp_pd_mask(x[0], t, _CMP_EQ_OQ) |
                        (unsigned)_mm512_cmp_pd_mask(x[1], t, _CMP_EQ_OQ) << 8;
    return __builtin_ctz(at);
}

/* The metrics of row `row`'s 16 elements from column col (a multiple of 16; those under
   keep, at least one) into mr's row: recipe the recipe's float32 output, ex the exact
   value and ab |A||B| (8 columns each). */
static inline void row_metrics(const metric_rows *mr, int64_t row, int64_t col, int64_t n,
                               __m512 recipe, const __m512d ex[2], const __m512d ab[2],
                               __mmask16 keep) {
    const int64_t e = row * n + col;
    const __m512 o32 = mr->bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
                                      _mm256_maskz_loadu_epi16(keep, (const uint16_t *)mr->out + e)), 16))
                                : _mm512_maskz_loadu_ps(keep, (const float *)mr->out + e);
    const __m512 ref = mr->bf16 ? rn_bf16_ps(recipe) : recipe;
    /* RN(exact) in out's format */
    const __m256 r0 = mr->bf16 ? rn_bf16_pd(ex[0]) : _mm512_cvtpd_ps(ex[0]);
    const __m256 r1 = mr->bf16 ? rn_bf16_pd(ex[1]) : _mm512_cvtpd_ps(ex[1]);
    const __m512 r32 = _mm512_insertf32x8(_mm512_castps256_ps512(r0), r1, 1);
    const __m512i ob = _mm512_castps_si512(o32), fb = _mm512_castps_si512(ref);
    const __mmask16 onan = _mm512_cmp_ps_mask(o32, o32, _CMP_UNORD_Q);
    int64_t *ints = mr->ints + row * ROW_INTS;
    double *flts = mr->flts + row * ROW_FLTS;
    /* bits differ, but for +0 against -0, or out is NaN (`ulp_distance`'s NaN never matches) */
    const __mmask16 mism = (_mm512_cmpneq_epi32_mask(ob, fb) &
                            _mm512_cmpneq_epi32_mask(_mm512_or_si512(ob, fb),
                                                     _mm512_set1_epi32((int)0x80000000))) | onan;
    ints[4] += __builtin_popcount(mism & keep);
    /* the sign test against RN(exact): z = d sign(o - r), d = sign(r, o where r is 0) */
    const __mmask16 gt = _mm512_cmp_ps_mask(o32, r32, _CMP_GT_OQ) & keep;
    const __mmask16 lt = _mm512_cmp_ps_mask(o32, r32, _CMP_LT_OQ) & keep;
    const __mmask16 rz = _mm512_cmp_ps_mask(r32, _mm512_setzero_ps(), _CMP_EQ_OQ);
    const __m512 p = _mm512_mask_blend_ps(rz, r32, o32);
    const __mmask16 pp = _mm512_cmp_ps_mask(p, _mm512_setzero_ps(), _CMP_GT_OQ);
    const __mmask16 pn = _mm512_cmp_ps_mask(p, _mm512_setzero_ps(), _CMP_LT_OQ);
    int32_t *sg = mr->signs + (row * ((n + 127) / 128) + col / 128) * 3;
    sg[0] += __builtin_popcount((gt & pp) | (lt & pn)) - __builtin_popcount((gt & pn) | (lt & pp));
    sg[1] += __builtin_popcount(gt) - __builtin_popcount(lt);
    sg[2] += __builtin_popcount(gt | lt);
    ints[6] += __builtin_popcount(_mm512_cmp_ps_mask(_mm512_abs_ps(r32), _mm512_set1_ps(FLT_MAX),
                                                     _CMP_NLE_UQ) & keep);
    const __m512d f64_max = _mm512_set1_pd(DBL_MAX), zero = _mm512_setzero_pd();
    __m512d ratio[2], sq = zero, dd = zero;
    __m512i dmax = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++) {
        const __mmask8 k = (__mmask8)(keep >> 8 * h);
        const __m512d o = _mm512_cvtps_pd(h ? _mm512_extractf32x8_ps(o32, 1) : _mm512_castps512_ps256(o32));
        const __m512d x = ex[h], ax = _mm512_abs_pd(x), ao = _mm512_abs_pd(o);
        const __mmask8 fin = _mm512_cmp_pd_mask(ao, f64_max, _CMP_LE_OQ);
        /* ULP distance to RN(exact); ULP_NAN where out is NaN */
        const __m256i obh = h ? _mm512_extracti64x4_epi64(ob, 1) : _mm512_castsi512_si256(ob);
        const __m256i rbh = _mm256_castps_si256(h ? r1 : r0);
        __m512i d = _mm512_abs_epi64(_mm512_sub_epi64(ordered_epi64(obh), ordered_epi64(rbh)));
        d = _mm512_srli_epi64(d, mr->bf16 ? 16 : 0);
        d = _mm512_mask_mov_epi64(d, (__mmask8)(onan >> 8 * h), _mm512_set1_epi64(INT64_MAX));
        dmax = _mm512_mask_max_epi64(dmax, k, dmax, d);
        ints[2] += __builtin_popcount(_mm512_mask_test_epi64_mask(k, d, d));
        /* the bound ratio (`metrics.ratio_of`), inf where out is not finite */
        const __m512d mag = _mm512_mask_mov_pd(ax, fin & _mm512_cmp_pd_mask(ao, ax, _CMP_GT_OQ), ao);
        const __m512i ue = _mm512_sub_epi64(_mm512_max_epi64(exponent_pd(mag), _mm512_set1_epi64(-126)),
                                            _mm512_set1_epi64(mr->bf16 ? 7 : 23));
        const __m512d bound = _mm512_add_pd(
            _mm512_add_pd(_mm512_add_pd(_mm512_mul_pd(_mm512_set1_pd(mr->gamma), ab[h]),
                                        _mm512_set1_pd(mr->floor)),
                          _mm512_mul_pd(_mm512_set1_pd(0.5), pow2_pd(ue))),
            _mm512_mul_pd(_mm512_set1_pd(0x1p-53), ax));
        const __m512d rt = _mm512_mask_mov_pd(_mm512_set1_pd(INFINITY), fin,
                                              _mm512_div_pd(_mm512_abs_pd(_mm512_sub_pd(o, x)), bound));
        ratio[h] = _mm512_mask_mov_pd(_mm512_set1_pd(-1.0), k, rt);
        ints[3] += __builtin_popcount(_mm512_mask_cmp_pd_mask(k, rt, _mm512_set1_pd(1.0), _CMP_GT_OQ));
        ints[0] += __builtin_popcount(_mm512_mask_cmp_pd_mask(k, rt, _mm512_set1_pd(INFINITY), _CMP_EQ_OQ));
        ints[5] += __builtin_popcount(k & ~(_mm512_cmp_pd_mask(ax, f64_max, _CMP_LE_OQ) &
                                            _mm512_cmp_pd_mask(ab[h], zero, _CMP_GE_OQ) &
                                            _mm512_cmp_pd_mask(ab[h], f64_max, _CMP_LE_OQ)));
        sq = _mm512_mask_add_pd(sq, k, sq, _mm512_mul_pd(x, x));
        const __m512d err = _mm512_sub_pd(o, x);
        dd = _mm512_mask_add_pd(dd, k & fin, dd, _mm512_mul_pd(err, err));
    }
    const int64_t top_ulp = _mm512_reduce_max_epi64(dmax);
    if (top_ulp > ints[1])
        ints[1] = top_ulp;
    const double top = _mm512_reduce_max_pd(_mm512_max_pd(ratio[0], ratio[1]));
    if (top > flts[0]) { /* strictly: an earlier column's equal max stays */
        flts[0] = top;
        ints[7] = col + first_lane(ratio, top);
    }
    flts[1] += _mm512_reduce_add_pd(sq);
    flts[2] += _mm512_reduce_add_pd(dd);
}

/* Where the exact pass's rows go (`fp8check_<path>_exact_gmm`): the recipe `code` (0-2),
   the exact value and |A||B| of each element, finished at its last K block; with
   `metrics`, their metrics against an output under test instead (`row_metrics`, its
   rows from row0: the pass's first row), the three written only where the exact value
   is undecided (for the caller's recomputation and those elements' metrics). */
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
    const metric_rows *metrics; /* or NULL */
    int64_t row0;
} exact_sink;

/* One output row's 16 elements (the sink's row `row` from column col, those under m
   valid) at K block kb: v the exact partials and q those of the magnitudes (units of
   2^-18), s_a the row's scale and s_b the column tile's.  The recipe's step into acc, the
   exact value's (`exact_step`) into total and sigma, |A||B|'s sum (RN(Q |sa| |sb|) added)
   into mag: 16 elements each, the row's running state.  The first K block starts from
   zeros (the same bits: every recipe adds +0 to its first term, as the float64 BLAS path
   does); the last finishes the three into the sink instead. */
static inline void consume_row(const exact_sink *s, float *acc, double *total, double *sigma,
                               double *mag, const __m512d v[2], const __m512d q[2], float s_a,
                               float s_b, int64_t kb, int64_t row, int64_t col, __mmask16 m) {
    const int first = kb == 0, last = kb == s->kbn - 1;
    const __m512 r = recipe_step(s->code, rn32_row(v), s_a, s_b,
                                 first ? _mm512_setzero_ps() : _mm512_loadu_ps(acc));
    if (!last)
        _mm512_storeu_ps(acc, r);
    /* s = sa sb and |s|, times 2^-18 (exact): the partials are in units of 2^-18 */
    const __m512d sab = _mm512_set1_pd((double)s_a * (double)s_b * 0x1p-18);
    const __m512d mab = _mm512_abs_pd(sab);
    __m512d x[2], ab[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()}; /* set at the last */
    __mmask16 und = 0;
    for (int h = 0; h < 2; h++) {
        const __m512d sum = _mm512_add_pd(first ? _mm512_setzero_pd()
                                                : _mm512_loadu_pd(mag + 8 * h),
                                          _mm512_mul_pd(q[h], mab));
        if (last)
            ab[h] = _mm512_mul_pd(sum, _mm512_set1_pd(s->scale));
        else
            _mm512_storeu_pd(mag + 8 * h, sum);
        und |= (__mmask16)exact_step(total + 8 * h, sigma + 8 * h, v[h], sab, first,
                                     last ? &x[h] : NULL,
                                     _mm512_mul_pd(sum, _mm512_set1_pd(s->exact_err))) << 8 * h;
    }
    if (!last)
        return;
    const int64_t o = row * s->n + col;
    const __mmask16 put = s->metrics ? m & und : m;
    if (put) { /* with metrics, rarely: masked stores of no lanes cost a store each */
        _mm512_mask_storeu_ps(s->out + o, put, r);
        for (int h = 0; h < 2; h++) {
            _mm512_mask_storeu_pd(s->exact + o + 8 * h, (__mmask8)(put >> 8 * h), x[h]);
            _mm512_mask_storeu_pd(s->mag + o + 8 * h, (__mmask8)(put >> 8 * h), ab[h]);
        }
    }
    _mm_mask_storeu_epi8(s->undecided + o, m, _mm_maskz_mov_epi8(und, _mm_set1_epi8(1)));
    if (s->metrics && (m & ~und))
        row_metrics(s->metrics, s->row0 + row, col, s->n, r, x, ab, m & ~und);
}

/* The elements of the output under test that the metrics of the sink's rows [row, row +
   rows) x columns [col, col + cols) will read (`row_metrics`), on their way (where the
   sink has metrics): the pass takes them a few rows' columns at a time, an access
   pattern the hardware prefetchers do not follow, and each would wait on memory.  The
   prefetches are asm: gcc 12 deleted these loops of _mm_prefetch as dead code. */
static inline void prefetch_metric_rows(const exact_sink *s, int64_t row, int64_t rows,
                                        int64_t col, int64_t cols) {
    if (!s->metrics)
        return;
    const int64_t size = s->metrics->bf16 ? 2 : 4;
    for (int64_t r = row; r < row + rows; r++) {
        const char *p = (const char *)s->metrics->out + ((s->row0 + r) * s->n + col) * size;
        for (int64_t b = 0; b < cols * size; b += 64)
            __asm__ volatile("prefetcht0 %0" : : "m"(p[b]));
        __asm__ volatile("prefetcht0 %0" : : "m"(p[cols * size - 1]));
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
