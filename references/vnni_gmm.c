/* The e4m3fn gmm on AVX512-VNNI int16 dot products (fp8check): the exact partials from
   three digits a value (here), the recipes and the production check's pass from one
   windowed digit ("The recipes' path" below).

   Exactness of the three-digit split.  An e4m3fn value times 2^9 is an integer X with
   |X| <= 448 * 2^9 < 2^18.  Split it, sign and magnitude, into X = 2^9 h + l with
   h = sign * (|X| >> 9) (|h| <= 448) and l = sign * (|X| & 511) (|l| <= 511), and let
   t = h + l (|t| <= 959).  For one 128-wide K block of lhs values a and rhs values b
   (in units of 2^-9),

       P = sum_k a_k b_k = 2^18 H + 2^9 (S - H - L) + L,
       H = sum_k h^a_k h^b_k,  L = sum_k l^a_k l^b_k,  S = sum_k t^a_k t^b_k

   (Karatsuba: t^a t^b = h^a h^b + h^a l^b + l^a h^b + l^a l^b).  VPDPWSSD multiplies int16
   pairs exactly and adds them into int32 lanes with wrap-around; every true sum here is
   far inside int32 (|S| <= 128 * 959^2 < 2^27, |H|, |L| < 2^25), so the wrap-around never
   happens and H, L, S are exact, in any order.  S - H - L is an exact int32 too
   (|h^a l^b + l^a h^b| summed < 2^26).  The combination 2^9 (2^9 H + (S - H - L)) + L
   has every intermediate an integer below 2^44 in float64 (exact, fma or not); times
   2^-18 it is the partial in value units, still exact in float64, which the exact recipe
   consumes (`fp8check_vnni_partials`).  One conversion to float32 (round to nearest even;
   P is 0 or at least 1 unit, far from float32's subnormals) gives RN32 of it, which the
   other recipes consume.

   Three int16 dot products per K element instead of the four of a plain digit split.
   VPDPWSSD does twice the multiply-adds of a float32 FMA per instruction, so these
   partials cost at least 1.5x a float32 matmul of the same FLOPs (on Zen 4).

   The recipes run on RN32(P) in float32 as exact_gmm.h says (its `recipe_step`, the AMX
   kernel's too); the production check's pass (`fp8check_vnni_exact_gmm`) consumes each
   exact partial three ways (exact_gmm.h: the recipe, the exact value, |A||B| from the
   magnitudes' partials), both from the windowed digits below.

   Layouts (references/vnni.py builds them):
     packed rhs [KB][V][64][3][16][2] int16 (V = ceil(N / 16) column vectors of 16): for
       K block kb, column vector v, K pair p and digit d (h, l, t), lane c holds digit d
       of rhs[128 kb + 2 p][16 v + c] and of rhs[128 kb + 2 p + 1][16 v + c] (zero past
       N): the operand that VPDPWSSD
       multiplies by a broadcast pair of lhs digits;
     lhs panel [8][3][128] int16: digit d of 8 lhs rows of one K block, in K order, so
       that the int32 at pair p is the broadcast operand.
*/
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exact_gmm.h"
#include "vnni_dots.h"

#define ROWS DOT_ROWS   /* lhs rows per micro-kernel call (vnni_dots.h) */
#define PAIRS DOT_PAIRS /* K pairs per 128-wide block */
#define VEC_I16 (PAIRS * 3 * 32) /* int16 of one packed rhs column vector of a K block */

/* Digit d (h, l, t) of the 128 non-negative codes, as int16 tables: two halves of 64
   codes, each two 32-lane registers for VPERMT2W. */
typedef struct { __m512i t[3][2][2]; } digit_tables;

static digit_tables make_tables(void) {
    int16_t tab[3][128];
    for (int c = 0; c < 128; c++) {
        const int x = c == 0x7F ? 0 : code_magnitude((unsigned)c); /* NaN: callers exclude */
        tab[0][c] = (int16_t)(x >> 9);
        tab[1][c] = (int16_t)(x & 511);
        tab[2][c] = (int16_t)((x >> 9) + (x & 511));
    }
    digit_tables t;
    for (int d = 0; d < 3; d++)
        for (int half = 0; half < 2; half++)
            for (int r = 0; r < 2; r++)
                t.t[d][half][r] = _mm512_loadu_si512(&tab[d][64 * half + 32 * r]);
    return t;
}

/* The three digits of 32 codes (zero-extended to int16 lanes), digit d into o + d stride;
   whether one of the codes is a NaN (0x7F, 0xFF: the digits cannot carry it). */
static inline int digits32(const digit_tables *t, __m512i w, int16_t *o, int64_t stride) {
    const __mmask32 neg = _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x80));
    const __mmask32 upper = _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x40));
    const __m512i idx = _mm512_and_si512(w, _mm512_set1_epi16(0x3F));
    for (int d = 0; d < 3; d++) {
        const __m512i lo = _mm512_permutex2var_epi16(t->t[d][0][0], idx, t->t[d][0][1]);
        const __m512i hi = _mm512_permutex2var_epi16(t->t[d][1][0], idx, t->t[d][1][1]);
        const __m512i v = _mm512_mask_blend_epi16(upper, lo, hi);
        _mm512_storeu_si512(o + d * stride,
                            _mm512_mask_sub_epi16(v, neg, _mm512_setzero_si512(), v));
    }
    return _mm512_cmpeq_epi16_mask(_mm512_and_si512(w, _mm512_set1_epi16(0x7F)),
                                   _mm512_set1_epi16(0x7F)) != 0;
}

/* One expert's rhs codes [K][N] (pcodes, k, n) into pout [K/128][ceil(N/16)][64][3][16][2]
   int16, the layout above.  Returns 1 if a code is a NaN (its digits are then zeros), else
   0. */
int fp8check_vnni_pack_rhs(uint64_t pcodes, int64_t k, int64_t n, uint64_t pout) {
    const digit_tables tables = make_tables(), *t = &tables;
    const uint8_t *codes = (const uint8_t *)pcodes;
    int16_t *out = (int16_t *)pout;
    const int64_t nv = (n + 15) / 16;
    int nan = 0;
    for (int64_t kb = 0; kb < k / 128; kb++)
        for (int64_t v = 0; v < nv; v++) {
            int64_t valid = n - 16 * v < 16 ? n - 16 * v : 16;
            __mmask16 m = (__mmask16)((1u << valid) - 1);
            const int64_t o = (kb * nv + v) * VEC_I16;
            for (int p = 0; p < PAIRS; p++) {
                const uint8_t *r0 = codes + (128 * kb + 2 * p) * n + 16 * v;
                __m128i x0 = _mm_maskz_loadu_epi8(m, r0);
                __m128i x1 = _mm_maskz_loadu_epi8(m, r0 + n);
                __m256i both = _mm256_set_m128i(_mm_unpackhi_epi8(x0, x1),
                                                _mm_unpacklo_epi8(x0, x1));
                const int64_t q = o + p * 96;
                nan |= digits32(t, _mm512_cvtepu8_epi16(both), out + q, 32);
            }
        }
    return nan;
}

/* Digits of rows [r0, r0 + ROWS) of one K block of the lhs codes (rows past `rows` are
   zero) into panel [ROWS][3][128]; 1 if a code is a NaN, else 0. */
__attribute__((noinline)) static int pack_lhs(const digit_tables *t, const uint8_t *codes,
                                               int64_t lda, int64_t rows, int64_t r0,
                                               int64_t kb, int16_t *panel) {
    int nan = 0;
    for (int r = 0; r < ROWS; r++) {
        if (r0 + r >= rows) {
            memset(panel + r * 384, 0, 384 * sizeof(int16_t));
            continue;
        }
        const uint8_t *src = codes + (r0 + r) * lda + 128 * kb;
        for (int c = 0; c < 128; c += 32) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(src + c));
            nan |= digits32(t, _mm512_cvtepu8_epi16(x), panel + r * 384 + c, 128);
        }
    }
    return nan;
}

/* The exact partials of ROWS rows x 16 columns as float64 in value units (exact: see the
   header): panel [ROWS][3][128], one packed rhs column vector of the same K block;
   p_out[r][0] columns 0-7, p_out[r][1] columns 8-15 of row r. */
/* noinline, as pack_lhs: inlined into one loop nest, the digit tables' 12 registers would
   crowd the 24 accumulators out. */
__attribute__((noinline)) static void partials(const int16_t *panel, const int16_t *bvec,
                                               __m512d p_out[ROWS][2]) {
    __m512i acc[ROWS][3];
    dots((const int32_t *)panel, bvec, PAIRS, 0, acc);
    const __m512d c9 = _mm512_set1_pd(512.0), u = _mm512_set1_pd(0x1p-18);
    for (int r = 0; r < ROWS; r++) {
        __m512i h = acc[r][0], l = acc[r][1];
        __m512i x = _mm512_sub_epi32(_mm512_sub_epi32(acc[r][2], h), l);
        for (int i = 0; i < 2; i++) {
            __m512d hd = _mm512_cvtepi32_pd(i ? _mm512_extracti64x4_epi64(h, 1)
                                              : _mm512_castsi512_si256(h));
            __m512d xd = _mm512_cvtepi32_pd(i ? _mm512_extracti64x4_epi64(x, 1)
                                              : _mm512_castsi512_si256(x));
            __m512d ld = _mm512_cvtepi32_pd(i ? _mm512_extracti64x4_epi64(l, 1)
                                              : _mm512_castsi512_si256(l));
            __m512d s = _mm512_fmadd_pd(_mm512_fmadd_pd(hd, c9, xd), c9, ld); /* exact */
            p_out[r][i] = _mm512_mul_pd(s, u); /* exact: a power of two */
        }
    }
}

/* ---- The recipes' path: one windowed int16 digit a value ---------------------------

   Exactness.  Of one 128-wide K block, let E_a be the largest exponent field of a lhs
   row's codes and E_b that of a rhs column's (e4m3fn: |X| < 2^(E + 3) for X the value in
   units of 2^-9).  Shift them by s_a = max(0, E_a - 8) and s_b = max(0, E_b - 10):
   X = 2^s h + l with h = sign * (|X| >> s) and l = sign * (|X| mod 2^s), so |h_a| <= 2047
   and |h_b| <= 8191 (`window32`).  Then

       P = sum_k a_k b_k = 2^(s_a + s_b) H + R,   H = sum_k h^a_k h^b_k,
       R = sum_k (l^a_k b_k + 2^s_a h^a_k l^b_k)

   (a b = (2^s_a h^a + l^a)(2^s_b h^b + l^b)).  VPDPWSSD forms H from one int16 digit a
   value; |H| <= 128 * 2047 * 8191 < 2^31, so its wrap-around never happens and H is exact
   in any order.  l is zero unless the value's exponent field lies more than 7 (lhs) or
   9 (rhs) below its block's largest (its lowest bit, 2^(e - 1) or 1, is then below 2^s):
   on normal data about 0.7% of the lhs values and 0.2% of the rhs's, whose terms of R are
   listed while packing (`window_lhs`, `window_rhs`) and added one by one in float64
   (`group`): |l^a b| < 2^7 2^18 and |2^s_a h^a l^b| <= |a| 2^5 < 2^23, integers in
   units of 2^-18, and |2^(s_a + s_b) H| <= 128 * 448^2 2^18 < 2^43 (a power of two times
   an int32), so every partial sum of P = 2^(s_a + s_b) H + R, in any order, is an integer
   below 2^44: exact in float64.  A third of the dot products of the three-digit split
   above; the l terms, rare on such data, cost a few float64 operations each (every value
   of a block far below its largest is one: such data runs slower, never wrong).

   The magnitudes' partial Q = sum_k |a_k| |b_k| (the production pass's) the same way: h
   and l carry X's sign, so |X| = 2^s |h| + |l| and

       Q = 2^(s_a + s_b) sum_k |h^a_k| |h^b_k| + sum_k (|l^a_k| |b_k| + 2^s_a |h^a_k| |l^b_k|),

   one more VPDPWSSD a pair on |h| (`window_lhs`' and `window_rhs`' magnitudes: the same
   int32 bound) and the same remainders' terms in absolute value (the same float64
   bounds: exact).

   Layouts: packed rhs [KB][V3][64][3][32] int16 (V3 = ceil(N / 48) groups of three column
   vectors): for K block kb, group v, K pair p and vector j, lanes 2c, 2c + 1 hold h of
   rhs[128 kb + 2 p][48 v + 16 j + c] and rhs[128 kb + 2 p + 1][...] (zero past N), `dots`'
   three "digits" being here three column vectors; the lhs panel [8][3][128] int16 holds
   each row's 128 h three times, once for each vector. */

#define WCOLS 48 /* columns of one `dots` call: three vectors of 16 */

typedef struct { int16_t k, c; int32_t l; } residual; /* l in units of 2^-9 */

/* l of code c at shift s (the header's split). */
static inline int32_t code_residual(unsigned c, int s) {
    const int32_t l = code_magnitude(c) & ((1 << s) - 1);
    return (c & 0x80) ? -l : l;
}

/* h of 32 codes (zero-extended to int16 lanes) at the per-lane shifts s; *res: the lanes
   whose l is not zero; *nan: the lanes holding a NaN code (0x7F, 0xFF). */
static inline __m512i window32(__m512i w, __m512i s, __mmask32 *res, __mmask32 *nan) {
    const __m512i zero = _mm512_setzero_si512();
    const __m512i e = _mm512_and_si512(_mm512_srli_epi16(w, 3), _mm512_set1_epi16(15));
    const __m512i f = _mm512_and_si512(w, _mm512_set1_epi16(7));
    const __mmask32 normal = _mm512_test_epi16_mask(e, e);
    /* |X| = sig << base: sig = 8 + f, base = e - 1 (normal); sig = f, base = 0 */
    const __m512i sig = _mm512_mask_add_epi16(f, normal, f, _mm512_set1_epi16(8));
    const __m512i base = _mm512_maskz_sub_epi16(normal, e, _mm512_set1_epi16(1));
    const __m512i t = _mm512_sub_epi16(base, s);
    const __m512i left = _mm512_max_epi16(t, zero);
    const __m512i right = _mm512_max_epi16(_mm512_sub_epi16(zero, t), zero);
    const __m512i up = _mm512_sllv_epi16(sig, left); /* below 2^14: fits */
    const __m512i mag = _mm512_srlv_epi16(up, right); /* |X| >> s */
    *res = _mm512_cmpneq_epi16_mask(_mm512_sllv_epi16(mag, right), up);
    const __m512i m7f = _mm512_set1_epi16(0x7F);
    *nan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(w, m7f), m7f);
    const __mmask32 neg = _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x80));
    return _mm512_mask_sub_epi16(mag, neg, zero, mag);
}

/* The largest exponent field of 128 codes. */
static inline int max_exponent(const uint8_t *codes) {
    const __m512i m = _mm512_set1_epi8(0x78);
    const __m512i x = _mm512_max_epu8(_mm512_and_si512(_mm512_loadu_si512(codes), m),
                                      _mm512_and_si512(_mm512_loadu_si512(codes + 64), m));
    __m256i y = _mm256_max_epu8(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64(x, 1));
    __m128i z = _mm_max_epu8(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
    z = _mm_max_epu8(z, _mm_srli_si128(z, 8));
    z = _mm_max_epu8(z, _mm_srli_si128(z, 4));
    z = _mm_max_epu8(z, _mm_srli_si128(z, 2));
    z = _mm_max_epu8(z, _mm_srli_si128(z, 1));
    return _mm_cvtsi128_si32(z) >> 3 & 15;
}

/* One group's rhs for the windowed path.  Fills, for codes [k][n]:
     bp    the packed h (layout above, V3 = nv3 groups), and where bq is not NULL the
           packed |h| into bq (the production pass's magnitudes);
     pw    [K/128][48 nv3] the power of two 2^s_b of each K block and column;
     res, roff  the residuals of each (K block, group) kb * nv3 + v, in
           res[roff[kb * nv3 + v] .. roff[kb * nv3 + v + 1]), k within the block, c within
           the group;
   with scratch cols of 2 (48 nv3 + 64) bytes.  Returns 1 if a code is a NaN, else 0. */
static int window_rhs(const uint8_t *codes, int64_t k, int64_t n, int64_t nv3, int16_t *bp,
                      int16_t *bq, double *pw, residual *res, int64_t *roff, uint8_t *cols) {
    const int64_t kbn = k / 128, np = WCOLS * nv3;
    uint8_t *colmax = cols, *shift = cols + np + 64;
    int64_t count = 0;
    __mmask32 nan = 0;
    for (int64_t kb = 0; kb < kbn; kb++) {
        const uint8_t *blk = codes + 128 * kb * n;
        memset(colmax, 0, np);
        for (int64_t r = 0; r < 128; r++)
            for (int64_t c = 0; c < n; c += 64) {
                const __mmask64 m = n - c >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << (n - c)) - 1;
                const __m512i x = _mm512_and_si512(_mm512_maskz_loadu_epi8(m, blk + r * n + c),
                                                   _mm512_set1_epi8(0x78));
                _mm512_storeu_si512(colmax + c, _mm512_max_epu8(_mm512_loadu_si512(colmax + c), x));
            }
        for (int64_t c = 0; c < np; c++) {
            const int e = colmax[c] >> 3, s = e > 10 ? e - 10 : 0;
            shift[c] = (uint8_t)s;
            pw[kb * np + c] = (double)(1 << s);
        }
        for (int64_t v = 0; v < nv3; v++) {
            roff[kb * nv3 + v] = count;
            int16_t *o = bp + (kb * nv3 + v) * VEC_I16;
            for (int j = 0; j < 3; j++) {
                const int64_t c0 = WCOLS * v + 16 * j;
                const int64_t valid = n - c0 >= 16 ? 16 : (n - c0 > 0 ? n - c0 : 0);
                const __mmask16 m = (__mmask16)((1u << valid) - 1);
                const __m128i sh = _mm_loadu_si128((const __m128i *)(shift + c0));
                const __m512i s = _mm512_cvtepu8_epi16(
                    _mm256_set_m128i(_mm_unpackhi_epi8(sh, sh), _mm_unpacklo_epi8(sh, sh)));
                for (int p = 0; p < PAIRS; p++) {
                    const uint8_t *r0 = blk + 2 * p * n + c0;
                    const __m128i x0 = _mm_maskz_loadu_epi8(m, r0);
                    const __m128i x1 = _mm_maskz_loadu_epi8(m, r0 + n);
                    const __m256i both = _mm256_set_m128i(_mm_unpackhi_epi8(x0, x1),
                                                          _mm_unpacklo_epi8(x0, x1));
                    __mmask32 rm, nm;
                    const __m512i h = window32(_mm512_cvtepu8_epi16(both), s, &rm, &nm);
                    nan |= nm;
                    _mm512_storeu_si512(o + p * 96 + 32 * j, h);
                    if (bq)
                        _mm512_storeu_si512(bq + (o - bp) + p * 96 + 32 * j,
                                            _mm512_abs_epi16(h));
                    for (; rm; rm &= rm - 1) {
                        const int lane = __builtin_ctz(rm);
                        const int kk = 2 * p + (lane & 1), c = 16 * j + lane / 2;
                        const unsigned code = blk[kk * n + WCOLS * v + c];
                        res[count++] = (residual){(int16_t)kk, (int16_t)c,
                                                  code_residual(code, shift[WCOLS * v + c])};
                    }
                }
            }
        }
    }
    roff[kbn * nv3] = count;
    return nan != 0;
}

/* The values of 16 e4m3fn codes at c (the lanes under m; zero elsewhere) as int32, in
   units of 2^-9 (exact: below 2^18). */
static inline __m512i code_values(const uint8_t *c, __mmask16 m) {
    const __m512i w = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, c));
    const __m512i e = _mm512_and_si512(_mm512_srli_epi32(w, 3), _mm512_set1_epi32(15));
    const __m512i f = _mm512_and_si512(w, _mm512_set1_epi32(7));
    const __mmask16 normal = _mm512_test_epi32_mask(e, e);
    const __m512i sig = _mm512_mask_or_epi32(f, normal, f, _mm512_set1_epi32(8));
    const __m512i base = _mm512_maskz_sub_epi32(normal, e, _mm512_set1_epi32(1));
    const __m512i x = _mm512_sllv_epi32(sig, base);
    const __mmask16 neg = _mm512_test_epi32_mask(w, _mm512_set1_epi32(0x80));
    return _mm512_mask_sub_epi32(x, neg, _mm512_setzero_si512(), x);
}

/* The values of rows [128 kb, 128 kb + 128) of one group's rhs codes [k][n] into xb
   [128][np] float32, in units of 2^-9 (exact: below 2^18), zero past n. */
static void block_values(const uint8_t *codes, int64_t n, int64_t np, int64_t kb, float *xb) {
    for (int64_t r = 0; r < 128; r++)
        for (int64_t c = 0; c < np; c += 16) {
            const int64_t valid = n - c >= 16 ? 16 : (n - c > 0 ? n - c : 0);
            _mm512_storeu_ps(xb + r * np + c, _mm512_cvtepi32_ps(code_values(
                codes + (128 * kb + r) * n + c, (__mmask16)((1u << valid) - 1))));
        }
}

/* One group's rhs on the windowed path, for the recipes' loop and the production pass
   alike (`group`): codes [k][n] (np = 48 nv3 columns, kbn K blocks), and from
   `window_rhs` the packed h (bp), with magnitudes the packed |h| (bq; NULL without),
   2^s_b (pw) and the residuals (res, roff); for the recipes' loop `values`, the current K
   block's rhs values ([128][np], `block_values`, made by `group` as it reaches it: the
   pass, which takes each K block once a pass, reads the codes instead); `cols`
   window_rhs's scratch. */
typedef struct {
    const uint8_t *codes;
    int64_t k, n, kbn, nv3, np;
    int16_t *bp, *bq;
    double *pw;
    float *values;
    residual *res;
    int64_t *roff;
    uint8_t *cols;
} windowed_rhs;

static void rhs_free(windowed_rhs *w) {
    free(w->bp), free(w->pw), free(w->values), free(w->res), free(w->roff), free(w->cols);
}

/* Scratch for the windowed rhs of k x n codes, with magnitudes and without values where
   `pass` (the production pass's); 0, or -1 (all freed) when it cannot be allocated. */
static int rhs_alloc(windowed_rhs *w, int64_t k, int64_t n, int pass) {
    const int64_t kbn = k / 128, nv3 = (n + WCOLS - 1) / WCOLS, np = WCOLS * nv3;
    const int64_t planes = (pass ? 2 : 1) * kbn * nv3 * VEC_I16;
    *w = (windowed_rhs){NULL, k, n, kbn, nv3, np, malloc((planes + 1) * sizeof(int16_t)),
                        NULL, malloc((kbn * np + 1) * sizeof(double)),
                        pass ? NULL : malloc((128 * np + 1) * sizeof(float)),
                        malloc((k * np + 1) * sizeof(residual)),
                        malloc((kbn * nv3 + 1) * sizeof(int64_t)), malloc(2 * (np + 64))};
    if (!(w->bp && w->pw && (pass || w->values) && w->res && w->roff && w->cols)) {
        rhs_free(w);
        return -1;
    }
    w->bq = pass ? w->bp + kbn * nv3 * VEC_I16 : NULL;
    return 0;
}

/* The windowed rhs of one group's codes [k][n] (`window_rhs`); 1 if a code is a NaN,
   else 0. */
static int rhs_window(windowed_rhs *w, const uint8_t *codes) {
    w->codes = codes;
    return window_rhs(codes, w->k, w->n, w->nv3, w->bp, w->bq, w->pw, w->res, w->roff, w->cols);
}

/* Rows [r0, r0 + ROWS) of one K block of the lhs codes (rows past `rows` are zero) for
   the windowed path: their h three times into panel [ROWS][3][128] (and |h| so into
   qpanel where it is not NULL: the production pass's magnitudes), 2^s_a into pw[ROWS],
   their residuals into res, row r's in res[row[r] .. row[r + 1]) (k within the block, c
   the row); returns the residuals' count, or -1 if a code is a NaN. */
static int window_lhs(const uint8_t *codes, int64_t lda, int64_t rows, int64_t r0,
                      int64_t kb, int16_t *panel, int16_t *qpanel, double *pw, residual *res,
                      int *row) {
    int count = 0;
    for (int r = 0; r < ROWS; r++) {
        row[r] = count;
        pw[r] = 1.0;
        if (r0 + r >= rows) {
            memset(panel + r * 384, 0, 384 * sizeof(int16_t));
            if (qpanel)
                memset(qpanel + r * 384, 0, 384 * sizeof(int16_t));
            continue;
        }
        const uint8_t *src = codes + (r0 + r) * lda + 128 * kb;
        const int e = max_exponent(src), s = e > 8 ? e - 8 : 0;
        pw[r] = (double)(1 << s);
        for (int c = 0; c < 128; c += 32) {
            __mmask32 rm, nm;
            const __m512i h = window32(
                _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(src + c))),
                _mm512_set1_epi16((int16_t)s), &rm, &nm);
            if (nm)
                return -1;
            for (int d = 0; d < 3; d++) {
                _mm512_storeu_si512(panel + r * 384 + d * 128 + c, h);
                if (qpanel)
                    _mm512_storeu_si512(qpanel + r * 384 + d * 128 + c, _mm512_abs_epi16(h));
            }
            for (; rm; rm &= rm - 1) {
                const int kk = c + __builtin_ctz(rm);
                res[count++] = (residual){(int16_t)kk, (int16_t)r, code_residual(src[kk], s)};
            }
        }
    }
    row[ROWS] = count;
    return count;
}

/* y[r] = (from[8 c + r] for c < 8), r < 8: an 8 x 8 block of doubles transposed. */
static inline void transpose8(const double *from, __m512d y[8]) {
    __m512d t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        const __m512d x0 = _mm512_loadu_pd(from + 8 * i), x1 = _mm512_loadu_pd(from + 8 * i + 8);
        t[i] = _mm512_unpacklo_pd(x0, x1);
        t[i + 1] = _mm512_unpackhi_pd(x0, x1);
    }
    for (int i = 0; i < 8; i += 4) { /* 128-bit lanes of rows i, i + 1 and i + 2, i + 3 */
        u[i] = _mm512_shuffle_f64x2(t[i], t[i + 2], 0x88);
        u[i + 1] = _mm512_shuffle_f64x2(t[i], t[i + 2], 0xDD);
        u[i + 2] = _mm512_shuffle_f64x2(t[i + 1], t[i + 3], 0x88);
        u[i + 3] = _mm512_shuffle_f64x2(t[i + 1], t[i + 3], 0xDD);
    }
    /* u[i] holds pairs of the four rows c of its half; row r of the transpose joins
       those of two u (the low or the high 128-bit lane of each pair) */
    for (int i = 0; i < 4; i++) {
        const int r = (i & 1) * 2 + (i >> 1); /* u[0]: r 0, 4; u[1]: 2, 6; u[2]: 1, 5 */
        y[r] = _mm512_shuffle_f64x2(u[i], u[i + 4], 0x88);
        y[r + 4] = _mm512_shuffle_f64x2(u[i], u[i + 4], 0xDD);
    }
}

/* The production pass's rows of one group (`fp8check_vnni_exact_gmm`): where they go and
   their running state (exact_gmm.h's `consume_row`), element (r, c) of the rows at
   r * np + c (np = 48 nv3) of acc, total, sigma and mag. */
typedef struct {
    const exact_sink *sink;
    float *acc;
    double *total, *sigma, *mag;
} pass_rows;

/* The rhs residuals' terms of one K block and column group (rb[0 .. nrb), `window_rhs`)
   down each column, fix[column][row] += l^b_k times the row's 2^s_a h^a_k (aht[k][row]),
   and with magnitudes (fixq not NULL) fixq[column][row] += |l^b_k| |2^s_a h^a_k|. */
static inline void rhs_terms(const residual *rb, int nrb, const double *aht, double *fix,
                             double *fixq) {
    for (int i = 0; i < nrb; i++) {
        double *f = fix + rb[i].c * ROWS;
        const __m512d l = _mm512_set1_pd((double)rb[i].l), x = _mm512_loadu_pd(aht + rb[i].k * ROWS);
        _mm512_storeu_pd(f, _mm512_fmadd_pd(l, x, _mm512_loadu_pd(f)));
        if (fixq) {
            double *g = fixq + rb[i].c * ROWS;
            _mm512_storeu_pd(g, _mm512_fmadd_pd(_mm512_abs_pd(l), _mm512_abs_pd(x),
                                                _mm512_loadu_pd(g)));
        }
    }
}

/* The terms of 16 columns [16 j, 16 j + 16) of fix [column][row] (`rhs_terms`), by row:
   col[h][r] holds row r's of columns 16 j + 8 h ..; fix's are zeroed for the next
   column group. */
static inline void columns_by_row(double *fix, int j, __m512d col[2][8]) {
    for (int h = 0; h < 2; h++) {
        double *f = fix + (16 * j + 8 * h) * ROWS;
        transpose8(f, col[h]);
        for (int c = 0; c < 8; c++)
            _mm512_store_pd(f + c * ROWS, _mm512_setzero_pd());
    }
}

/* One row's exact partial (units of 2^-18, the header's P = 2^(s_a + s_b) H + R) of 16
   columns into p: d the row's int32 H of them (VPDPWSSD's), fa its 2^s_a, pwb the
   columns' 2^s_b, col the rhs residuals' terms (`columns_by_row`, NULL for none), the
   lhs residuals' l^a_k b_k from lres[0 .. nl) and the K block's rhs values: from its
   codes, row k at xc + k * n under m (`code_values`), or without xc x's row k (at
   x + k * np: `block_values`).  Where q is not NULL, the same of the magnitudes into q:
   dq their H, colq their rhs terms, |l^a_k| |b_k|. */
static inline void row_partial(__m512i d, __m512i dq, __m512d fa, const double *pwb,
                               const __m512d (*col)[8], const __m512d (*colq)[8], int r,
                               const residual *lres, int nl, const float *x, int64_t np,
                               const uint8_t *xc, int64_t n, __mmask16 m, __m512d p[2],
                               __m512d q[2]) {
    for (int h = 0; h < 2; h++) {
        const __m512d f = _mm512_mul_pd(fa, _mm512_loadu_pd(pwb + 8 * h));
        p[h] = _mm512_mul_pd(_mm512_cvtepi32_pd(h ? _mm512_extracti64x4_epi64(d, 1)
                                                  : _mm512_castsi512_si256(d)), f);
        if (col)
            p[h] = _mm512_add_pd(p[h], col[h][r]);
        if (q) {
            q[h] = _mm512_mul_pd(_mm512_cvtepi32_pd(h ? _mm512_extracti64x4_epi64(dq, 1)
                                                      : _mm512_castsi512_si256(dq)), f);
            if (colq)
                q[h] = _mm512_add_pd(q[h], colq[h][r]);
        }
    }
    for (int i = 0; i < nl; i++) { /* l^a_k b_k */
        const __m512d l = _mm512_set1_pd((double)lres[i].l);
        const __m512i bc = xc ? code_values(xc + lres[i].k * n, m) : _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512d b = xc ? _mm512_cvtepi32_pd(h ? _mm512_extracti64x4_epi64(bc, 1)
                                                        : _mm512_castsi512_si256(bc))
                                 : _mm512_cvtps_pd(_mm256_loadu_ps(x + lres[i].k * np + 8 * h));
            p[h] = _mm512_fmadd_pd(l, b, p[h]);
            if (q)
                q[h] = _mm512_fmadd_pd(_mm512_abs_pd(l), _mm512_abs_pd(b), q[h]);
        }
    }
}

/* Rows [0, rows) of one group's output, all columns, recipe `code` (0 deepgemm,
   1 cublas, 2 tokamax), on the windowed path: a their lhs codes [rows][k] (row stride lda
   bytes), w the group's windowed rhs (`rhs_window`), sa [rows][k / 128] and
   sb [k / 128][nb] the scales.  With pass NULL: out [rows][n] float32
   (row stride ldo floats), overwritten: the first K block stores, the others accumulate
   (a zero start gives the same bits: every recipe adds +0 to its first term).  With a
   pass (the production check's, its rows these): each exact partial and that of the
   magnitudes into `consume_row` (the recipe, the exact value, |A||B| into the pass's
   sink), out unused.  Returns 1, at once, when a lhs code is a NaN, else 0. */
static int group(const uint8_t *a, int64_t lda, int64_t rows, const windowed_rhs *w,
                 const float *sa, const float *sb, int64_t nb, int64_t code, float *out,
                 int64_t ldo, const pass_rows *pass) {
    const int64_t kbn = w->kbn, nv3 = w->nv3, np = w->np, n = w->n;
    const int16_t *bp = w->bp;
    const double *pwb = w->pw;
    const residual *rres = w->res;
    const int64_t *roff = w->roff;
    _Alignas(64) int16_t panel[ROWS * 384], qpanel[ROWS * 384];
    _Alignas(64) double pwa[ROWS], aht[128 * ROWS], fixt[WCOLS * ROWS], fixq[WCOLS * ROWS];
    residual lres[ROWS * 128];
    int lrow[ROWS + 1];
    /* fixt (fixq) is zero between column groups: only columns below n hold residuals,
       and the combination zeroes each 16 it reads */
    memset(fixt, 0, sizeof fixt);
    memset(fixq, 0, sizeof fixq);
    __m512i acc[ROWS][3], accq[ROWS][3];
    if (kbn == 0 && !pass)
        for (int64_t r = 0; r < rows; r++)
            memset(out + r * ldo, 0, n * sizeof(float));
    for (int64_t kb = 0; kb < kbn; kb++) {
        /* the K block's rhs: values for the recipes, the codes for a pass */
        const uint8_t *xc = w->codes + 128 * kb * n;
        if (!pass)
            block_values(w->codes, n, np, kb, w->values);
        for (int64_t r0 = 0; r0 < rows; r0 += ROWS) {
            /* the next tile's codes, on their way while this one computes */
            for (int64_t r = r0 + ROWS; r < r0 + 2 * ROWS && r < rows; r++) {
                _mm_prefetch((const char *)(a + r * lda + 128 * kb), _MM_HINT_T0);
                _mm_prefetch((const char *)(a + r * lda + 128 * kb + 64), _MM_HINT_T0);
            }
            const int nl = window_lhs(a, lda, rows, r0, kb, panel, pass ? qpanel : NULL, pwa,
                                      lres, lrow);
            if (nl < 0)
                return 1;
            if (pass)
                for (int i = 0; i < nl; i++)
                    _mm_prefetch((const char *)(xc + lres[i].k * n), _MM_HINT_T0);
            const int64_t nr = rows - r0 < ROWS ? rows - r0 : ROWS;
            /* 2^s_a h^a of each K position and row, for the rhs residuals' terms */
            if (roff[(kb + 1) * nv3] > roff[kb * nv3])
                for (int k8 = 0; k8 < 128; k8 += 8) {
                    _Alignas(64) double rows8[ROWS * 8];
                    __m512d y[8];
                    for (int r = 0; r < ROWS; r++)
                        _mm512_store_pd(rows8 + 8 * r, _mm512_mul_pd(
                            _mm512_cvtepi32_pd(_mm256_cvtepi16_epi32(_mm_loadu_si128(
                                (const __m128i *)(panel + r * 384 + k8)))),
                            _mm512_set1_pd(pwa[r])));
                    transpose8(rows8, y);
                    for (int i = 0; i < 8; i++)
                        _mm512_store_pd(aht + (k8 + i) * ROWS, y[i]);
                }
            for (int64_t v = 0; v < nv3; v++) {
                /* the codes the lhs residuals' terms read in the next column group, on
                   their way while this one's dot products run (a pass's K block was last
                   read a pass ago, mostly out of L2; the recipes' values are in it) */
                if (pass && v + 1 < nv3)
                    for (int i = 0; i < nl; i++) {
                        const uint8_t *c = xc + lres[i].k * n + WCOLS * (v + 1);
                        _mm_prefetch((const char *)c, _MM_HINT_T0);
                        _mm_prefetch((const char *)(c + WCOLS - 1), _MM_HINT_T0);
                    }
                if (pass && kb == kbn - 1) /* the output under test, for the metrics */
                    prefetch_metric_rows(pass->sink, r0, nr, WCOLS * v,
                                         n - WCOLS * v < WCOLS ? n - WCOLS * v : WCOLS);
                dots((const int32_t *)panel, bp + (kb * nv3 + v) * VEC_I16, PAIRS, 0, acc);
                if (pass)
                    dots((const int32_t *)qpanel, w->bq + (kb * nv3 + v) * VEC_I16, PAIRS, 0,
                         accq);
                const residual *rb = rres + roff[kb * nv3 + v];
                const int nrb = (int)(roff[kb * nv3 + v + 1] - roff[kb * nv3 + v]);
                rhs_terms(rb, nrb, aht, fixt, pass ? fixq : NULL);
                for (int j = 0; j < 3; j++) {
                    const int64_t c0 = WCOLS * v + 16 * j;
                    if (c0 >= n)
                        break;
                    const int64_t valid = n - c0 < 16 ? n - c0 : 16;
                    const __mmask16 m = (__mmask16)((1u << valid) - 1);
                    const float s_b = sb[kb * nb + c0 / 128];
                    __m512d col[2][8], colq[2][8]; /* the rhs residuals' terms, by row */
                    if (nrb) {
                        columns_by_row(fixt, j, col);
                        if (pass)
                            columns_by_row(fixq, j, colq);
                    }
                    for (int64_t r = 0; r < nr; r++) {
                        const __m512d fa = _mm512_set1_pd(pwa[r]);
                        const residual *lr = lres + lrow[r];
                        const int nlr = lrow[r + 1] - lrow[r];
                        __m512d p[2], q[2];
                        row_partial(acc[r][j], pass ? accq[r][j] : acc[r][j], fa, pwb + kb * np + c0,
                                    nrb ? col : NULL, nrb ? colq : NULL, (int)r, lr, nlr,
                                    pass ? NULL : w->values + c0, np,
                                    pass ? xc + c0 : NULL, n, m, p, pass ? q : NULL);
                        const float s_a = sa[(r0 + r) * kbn + kb];
                        if (pass) {
                            const int64_t e = (r0 + r) * np + c0;
                            consume_row(pass->sink, pass->acc + e, pass->total + e,
                                        pass->sigma + e, pass->mag + e, p, q, s_a, s_b, kb,
                                        r0 + r, c0, m);
                            continue;
                        }
                        float *o = out + (r0 + r) * ldo + c0;
                        const __m512 prev = kb ? _mm512_maskz_loadu_ps(m, o) : _mm512_setzero_ps();
                        _mm512_mask_storeu_ps(o, m, recipe_step(code, rn32_row(p), s_a, s_b, prev));
                    }
                }
            }
        }
    }
    return 0;
}

/* The gmm recipe `code` (0 deepgemm, 1 cublas, 2 tokamax) for rows [m0, m1) of the output
   (one thread's share; the lhs is packed once, each group's rhs once per share it meets):
     a       lhs codes [M][k] (row stride lda bytes);  sa  lhs scales [M][k / 128];
     b       rhs codes [G][k][n];  sb  rhs scales [G][k / 128][nb];
     offs    [G + 1] int64, the first row of each group and the end of the last;
     out     [M][n] float32 (row stride ldo floats): the groups' rows in [m0, m1)
             overwritten, all other rows left alone.
   Returns 0; 1 when an operand it reads holds a NaN code (the output rows then mean
   nothing: the caller takes the float64 BLAS path); -1 (nothing written) when the
   group's rhs scratch cannot be allocated. */
int fp8check_vnni_gmm(uint64_t pa, int64_t lda, int64_t k, uint64_t pb, int64_t n,
                      uint64_t poffs, int64_t g, int64_t m0, int64_t m1, uint64_t psa,
                      uint64_t psb, int64_t nb, int64_t code, uint64_t pout, int64_t ldo) {
    const uint8_t *a = (const uint8_t *)pa, *b = (const uint8_t *)pb;
    const int64_t *offs = (const int64_t *)poffs;
    const float *sa = (const float *)psa, *sb = (const float *)psb;
    float *out = (float *)pout;
    const int64_t kbn = k / 128;
    windowed_rhs w;
    if (rhs_alloc(&w, k, n, 0))
        return -1;
    int nan = 0;
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(0x1F80); /* round to nearest even, no flush-to-zero, no denormals-are-zero */
    for (int64_t gi = 0; gi < g && !nan; gi++) {
        int64_t r0, r1;
        if (!share_rows(offs, gi, m0, m1, &r0, &r1))
            continue;
        nan = rhs_window(&w, b + gi * k * n) ||
              group(a + r0 * lda, lda, r1 - r0, &w, sa + r0 * kbn, sb + gi * kbn * nb, nb,
                    code, out + r0 * ldo, ldo, NULL);
    }
    _mm_setcsr(csr);
    rhs_free(&w);
    return nan;
}

/* The exact 128-wide partials of rows [0, rows) of one group, float64 in value units (the
   partial of an e4m3 K block is below 2^44 units of 2^-18: exact, see the header), for
   the exact recipe:
     a    their lhs codes [rows][k] (row stride lda bytes);  bp  the group's packed rhs;
     out  [k / 128][...][n] float64, row r of block kb at out + kb * ldk + r * n.
   Returns 0 (the AMX path's twin can fail to allocate; this one cannot). */
int fp8check_vnni_partials(uint64_t pa, int64_t lda, int64_t rows, int64_t k, uint64_t pbp,
                            int64_t n, uint64_t pout, int64_t ldk) {
    const uint8_t *a = (const uint8_t *)pa;
    const int16_t *bp = (const int16_t *)pbp;
    double *out = (double *)pout;
    const int64_t kbn = k / 128, nv = (n + 15) / 16;
    const digit_tables t = make_tables();
    _Alignas(64) int16_t panel[ROWS * 384];
    __m512d p[ROWS][2];
    for (int64_t kb = 0; kb < kbn; kb++)
        for (int64_t r0 = 0; r0 < rows; r0 += ROWS) {
            pack_lhs(&t, a, lda, rows, r0, kb, panel);
            const int64_t nr = rows - r0 < ROWS ? rows - r0 : ROWS;
            for (int64_t v = 0; v < nv; v++) {
                partials(panel, bp + (kb * nv + v) * VEC_I16, p);
                const int64_t valid = n - 16 * v < 16 ? n - 16 * v : 16;
                const __mmask8 m0 = (__mmask8)((1u << (valid < 8 ? valid : 8)) - 1);
                const __mmask8 m1 = (__mmask8)(valid > 8 ? (1u << (valid - 8)) - 1 : 0);
                for (int64_t r = 0; r < nr; r++) {
                    double *o = out + kb * ldk + (r0 + r) * n + 16 * v;
                    _mm512_mask_storeu_pd(o, m0, p[r][0]);
                    _mm512_mask_storeu_pd(o + 8, m1, p[r][1]);
                }
            }
        }
    return 0;
}

/* The recipe `code` (0-2), the exact value and |A||B| of rows [m0, m1) of the output (one
   thread's share of all the groups) in one pass over their exact partials and those of
   the magnitudes (exact_gmm.h), as `fp8check_amx_exact_gmm` (the same arguments and
   outputs; its bits):
     a        lhs codes [M][k];  sa  lhs scales [M][k / 128];
     b        rhs codes [G][k][n];  sb  rhs scales [G][k / 128][nb];
     offs     [G + 1] int64, the first row of each group and the end of the last.
   Out, each [M][n], the groups' rows in [m0, m1) written, all other rows left alone: the
   recipe float32, the exact value float64, |A||B| float64 (its sum times `scale`) and
   undecided uint8 (1 where the exact value must be recomputed, else 0); with pmetrics
   (an exact_gmm.h metric_rows, else 0) the first three only where undecided, the
   others' metrics summed into its rows (rows from the call's first).  On the recipes'
   windowed path (`group`): a group's rhs windowed once (its h and |h|), its rows taken
   in passes of at most `rows_per_pass` (a multiple of ROWS), fewer where the pass's state
   (28 bytes an element: `pass_rows`) would pass PASS_STATE_BYTES, each pass through all
   the K blocks.  Returns 0; 1 when a code it reads is a NaN (it stops there, its outputs
   meaning nothing: the caller takes another path); -1 (nothing written) when its scratch
   cannot be allocated. */
#define PASS_STATE_BYTES (448 << 10) /* of L2, with the K block's rhs beside it */

int fp8check_vnni_exact_gmm(uint64_t pa, int64_t k, uint64_t pb, int64_t n, uint64_t poffs,
                            int64_t g, int64_t m0, int64_t m1, uint64_t psa, uint64_t psb,
                            int64_t nb, int64_t code, int64_t rows_per_pass, uint64_t pout,
                            uint64_t pexact, uint64_t pmag, uint64_t pundecided,
                            double scale, uint64_t pmetrics) {
    const uint8_t *a = (const uint8_t *)pa, *b = (const uint8_t *)pb;
    const int64_t *offs = (const int64_t *)poffs;
    const float *sa = (const float *)psa, *sb = (const float *)psb;
    const int64_t kbn = k / 128;
    windowed_rhs w;
    if (rhs_alloc(&w, k, n, 1))
        return -1;
    const int64_t np = w.np;
    int64_t pass_max = PASS_STATE_BYTES / (28 * np) / ROWS * ROWS;
    pass_max = pass_max < ROWS ? ROWS : pass_max > rows_per_pass ? rows_per_pass : pass_max;
    double *state = aligned_alloc(64, pass_max * np * 28 + 64);
    int nan = state ? 0 : -1;
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(0x1F80); /* round to nearest even, no flush-to-zero, no denormals-are-zero */
    for (int64_t gi = 0; gi < g && !nan; gi++) {
        int64_t r0, r1;
        if (!share_rows(offs, gi, m0, m1, &r0, &r1))
            continue;
        nan = rhs_window(&w, b + gi * k * n);
        for (int64_t rb = r0; rb < r1 && !nan; rb += pass_max) {
            const int64_t nr = r1 - rb < pass_max ? r1 - rb : pass_max, e = rb * n;
            const exact_sink sink = {code, kbn, n, nb, sa + rb * kbn, sb + gi * kbn * nb,
                                     (float *)pout + e, (double *)pexact + e,
                                     (double *)pmag + e, (uint8_t *)pundecided + e,
                                     2.0 * kbn * (kbn + 1) * 0x1p-105, scale,
                                     (const metric_rows *)pmetrics, rb};
            const pass_rows pass = {&sink, (float *)(state + 3 * pass_max * np), state,
                                    state + pass_max * np, state + 2 * pass_max * np};
            nan = group(a + rb * k, k, nr, &w, sa + rb * kbn, sb + gi * kbn * nb, nb, code,
                        NULL, 0, &pass);
        }
    }
    _mm_setcsr(csr);
    rhs_free(&w);
    free(state);
    return nan;
}
