/* The e4m3fn gmm recipes on AVX512-VNNI int16 dot products (fp8check).

   Exactness.  An e4m3fn value times 2^9 is an integer X with |X| <= 448 * 2^9 < 2^18.
   Split it, sign and magnitude, into X = 2^9 h + l with h = sign * (|X| >> 9) (|h| <= 448)
   and l = sign * (|X| & 511) (|l| <= 511), and let t = h + l (|t| <= 959).  For one
   128-wide K block of lhs values a and rhs values b (in units of 2^-9),

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
   VPDPWSSD does twice the multiply-adds of a float32 FMA per instruction, so the exact
   partials cost at least 1.5x a float32 matmul of the same FLOPs; the inner loop runs at
   about 93% of VPDPWSSD's peak on Zen 4 (benchmarks/reference.py prints the ratio).

   The recipes then run on RN32(P) in float32 as exact_gmm.h says (its `recipe_step`,
   the AMX kernel's too); the production check's pass (`fp8check_vnni_exact_gmm`) consumes
   each exact partial three ways (exact_gmm.h: the recipe, the exact value, |A||B| from
   the magnitudes' partials, made by the same dot products from unsigned digits).

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
        int e = c >> 3, f = c & 7;
        int x = (c == 0x7F) ? 0 : (e ? (8 + f) << (e - 1) : f); /* NaN code: callers exclude */
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

/* The three digits of 32 codes (zero-extended to int16 lanes), digit d into o + d stride,
   and where mo is not NULL those of their magnitudes (the codes with the sign bit
   cleared: the same digits, unsigned) into mo + d stride; whether one of the codes is a
   NaN (0x7F, 0xFF: the digits cannot carry it). */
static inline int digits32(const digit_tables *t, __m512i w, int16_t *o, int64_t stride,
                           int16_t *mo) {
    const __mmask32 neg = _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x80));
    const __mmask32 upper = _mm512_test_epi16_mask(w, _mm512_set1_epi16(0x40));
    const __m512i idx = _mm512_and_si512(w, _mm512_set1_epi16(0x3F));
    for (int d = 0; d < 3; d++) {
        const __m512i lo = _mm512_permutex2var_epi16(t->t[d][0][0], idx, t->t[d][0][1]);
        const __m512i hi = _mm512_permutex2var_epi16(t->t[d][1][0], idx, t->t[d][1][1]);
        const __m512i v = _mm512_mask_blend_epi16(upper, lo, hi);
        _mm512_storeu_si512(o + d * stride,
                            _mm512_mask_sub_epi16(v, neg, _mm512_setzero_si512(), v));
        if (mo)
            _mm512_storeu_si512(mo + d * stride, v);
    }
    return _mm512_cmpeq_epi16_mask(_mm512_and_si512(w, _mm512_set1_epi16(0x7F)),
                                   _mm512_set1_epi16(0x7F)) != 0;
}

/* One expert's rhs codes [K][N] into out [K/128][ceil(N/16)][64][3][16][2], the layout
   above, and where abs_out is not NULL those of their magnitudes into abs_out.  Returns 1
   if a code is a NaN (its digits are then zeros), else 0. */
static int pack_rhs(const digit_tables *t, const uint8_t *codes, int64_t k, int64_t n,
                    int16_t *out, int16_t *abs_out) {
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
                nan |= digits32(t, _mm512_cvtepu8_epi16(both), out + q, 32,
                                abs_out ? abs_out + q : NULL);
            }
        }
    return nan;
}

/* `pack_rhs` of the codes (pcodes, k, n) into pout. */
int fp8check_vnni_pack_rhs(uint64_t pcodes, int64_t k, int64_t n, uint64_t pout) {
    const digit_tables t = make_tables();
    return pack_rhs(&t, (const uint8_t *)pcodes, k, n, (int16_t *)pout, NULL);
}

/* Digits of rows [r0, r0 + ROWS) of one K block of the lhs codes (rows past `rows` are
   zero) into panel [ROWS][3][128], and where abs_panel is not NULL those of their
   magnitudes into abs_panel; 1 if a code is a NaN, else 0. */
__attribute__((noinline)) static int pack_lhs(const digit_tables *t, const uint8_t *codes,
                                               int64_t lda, int64_t rows, int64_t r0,
                                               int64_t kb, int16_t *panel, int16_t *abs_panel) {
    int nan = 0;
    for (int r = 0; r < ROWS; r++) {
        if (r0 + r >= rows) {
            memset(panel + r * 384, 0, 384 * sizeof(int16_t));
            if (abs_panel)
                memset(abs_panel + r * 384, 0, 384 * sizeof(int16_t));
            continue;
        }
        const uint8_t *src = codes + (r0 + r) * lda + 128 * kb;
        for (int c = 0; c < 128; c += 32) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(src + c));
            const int64_t o = r * 384 + c;
            nan |= digits32(t, _mm512_cvtepu8_epi16(x), panel + o, 128,
                            abs_panel ? abs_panel + o : NULL);
        }
    }
    return nan;
}

/* The exact partials of ROWS rows x 16 columns as float64 in units of `unit` (2^-18:
   value units; 1: units of 2^-18; exact: see the header): panel [ROWS][3][128], one
   packed rhs column vector of the same K block; p_out[r][0] columns 0-7, p_out[r][1]
   columns 8-15 of row r. */
/* noinline, as pack_lhs: inlined into one loop nest, the digit tables' 12 registers would
   crowd the 24 accumulators out. */
__attribute__((noinline)) static void partials(const int16_t *panel, const int16_t *bvec,
                                               __m512d p_out[ROWS][2], double unit) {
    __m512i acc[ROWS][3];
    dots((const int32_t *)panel, bvec, PAIRS, acc);
    const __m512d c9 = _mm512_set1_pd(512.0), u = _mm512_set1_pd(unit);
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

/* Rows [0, rows) of one group's output, all columns, recipe `code` (0 deepgemm,
   1 cublas, 2 tokamax): a their lhs codes [rows][k] (row stride lda bytes), bp the
   group's packed rhs, sa [rows][k / 128] and sb [k / 128][nb] the scales, out [rows][n]
   float32 (row stride ldo floats), overwritten: the first K block stores, the others
   accumulate (a zero start gives the same bits: every recipe adds +0 to its first term).
   Returns 1, at once, when a lhs code is a NaN, else 0. */
static int group(const digit_tables *t, const uint8_t *a, int64_t lda, int64_t rows,
                  int64_t k, const int16_t *bp, int64_t n, const float *sa, const float *sb,
                  int64_t nb, int64_t code, float *out, int64_t ldo) {
    const int64_t kbn = k / 128, nv = (n + 15) / 16;
    _Alignas(64) int16_t panel[ROWS * 384];
    __m512d p[ROWS][2];
    if (kbn == 0)
        for (int64_t r = 0; r < rows; r++)
            memset(out + r * ldo, 0, n * sizeof(float));
    for (int64_t kb = 0; kb < kbn; kb++)
        for (int64_t r0 = 0; r0 < rows; r0 += ROWS) {
            if (pack_lhs(t, a, lda, rows, r0, kb, panel, NULL))
                return 1;
            const int64_t nr = rows - r0 < ROWS ? rows - r0 : ROWS;
            for (int64_t v = 0; v < nv; v++) {
                partials(panel, bp + (kb * nv + v) * VEC_I16, p, 1.0);
                const int64_t valid = n - 16 * v < 16 ? n - 16 * v : 16;
                const __mmask16 m = (__mmask16)((1u << valid) - 1);
                const float s_b = sb[kb * nb + (16 * v) / 128];
                for (int64_t r = 0; r < nr; r++) {
                    float *o = out + (r0 + r) * ldo + 16 * v;
                    const float s_a = sa[(r0 + r) * kbn + kb];
                    const __m512 acc = kb ? _mm512_maskz_loadu_ps(m, o) : _mm512_setzero_ps();
                    _mm512_mask_storeu_ps(o, m, recipe_step(code, rn32_row(p[r]), s_a, s_b, acc));
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
   nothing: the caller takes the float64 BLAS path); -1 (nothing written) when the packed
   rhs of a group cannot be allocated. */
int fp8check_vnni_gmm(uint64_t pa, int64_t lda, int64_t k, uint64_t pb, int64_t n,
                      uint64_t poffs, int64_t g, int64_t m0, int64_t m1, uint64_t psa,
                      uint64_t psb, int64_t nb, int64_t code, uint64_t pout, int64_t ldo) {
    const uint8_t *a = (const uint8_t *)pa, *b = (const uint8_t *)pb;
    const int64_t *offs = (const int64_t *)poffs;
    const float *sa = (const float *)psa, *sb = (const float *)psb;
    float *out = (float *)pout;
    const int64_t kbn = k / 128;
    int16_t *bp = malloc((kbn * ((n + 15) / 16) * VEC_I16 + 1) * sizeof(int16_t));
    if (!bp)
        return -1;
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(0x1F80); /* round to nearest even, no flush-to-zero, no denormals-are-zero */
    const digit_tables t = make_tables();
    int nan = 0;
    for (int64_t gi = 0; gi < g && !nan; gi++) {
        int64_t r0, r1;
        if (!share_rows(offs, gi, m0, m1, &r0, &r1))
            continue;
        nan = pack_rhs(&t, b + gi * k * n, k, n, bp, NULL) ||
              group(&t, a + r0 * lda, lda, r1 - r0, k, bp, n, sa + r0 * kbn,
                    sb + gi * kbn * nb, nb, code, out + r0 * ldo, ldo);
    }
    _mm_setcsr(csr);
    free(bp);
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
            pack_lhs(&t, a, lda, rows, r0, kb, panel, NULL);
            const int64_t nr = rows - r0 < ROWS ? rows - r0 : ROWS;
            for (int64_t v = 0; v < nv; v++) {
                partials(panel, bp + (kb * nv + v) * VEC_I16, p, 0x1p-18);
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
   undecided uint8 (1 where the exact value must be recomputed, else 0).  A group's rhs is
   packed once (its digits and its magnitudes'), its rows go `rows_per_pass` at a time (a
   multiple of ROWS): their panels, every K block's (12 bytes a code), packed once and
   read from L2, and each column vector taken through all its K blocks with the pass's
   state of those 16 columns (28 bytes an element) in L1.  Returns 0; 1 when a code it
   reads is a NaN (it stops there, its outputs meaning nothing: the caller takes another
   path); -1 (nothing written) when its scratch cannot be allocated. */
int fp8check_vnni_exact_gmm(uint64_t pa, int64_t k, uint64_t pb, int64_t n, uint64_t poffs,
                            int64_t g, int64_t m0, int64_t m1, uint64_t psa, uint64_t psb,
                            int64_t nb, int64_t code, int64_t rows_per_pass, uint64_t pout,
                            uint64_t pexact, uint64_t pmag, uint64_t pundecided,
                            double scale) {
    const uint8_t *a = (const uint8_t *)pa, *b = (const uint8_t *)pb;
    const int64_t *offs = (const int64_t *)poffs;
    const float *sa = (const float *)psa, *sb = (const float *)psb;
    const int64_t kbn = k / 128, nv = (n + 15) / 16, w = 16 * nv;
    const int64_t packed = kbn * nv * VEC_I16, panels = kbn * rows_per_pass * 384;
    /* the rhs's digits and its magnitudes', the pass's panels and theirs (int16), then
       the pass's state: recipe (float), exact total and sigma, |A||B| (double) */
    int16_t *bp = aligned_alloc(64, (2 * packed + 2 * panels) * sizeof(int16_t)
                                        + rows_per_pass * w * 28 + 64);
    if (!bp)
        return -1;
    int16_t *bq = bp + packed, *pp = bq + packed, *pq = pp + panels;
    double *total = (double *)(pq + panels), *sigma = total + rows_per_pass * w;
    double *mag = sigma + rows_per_pass * w;
    float *acc = (float *)(mag + rows_per_pass * w);
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(0x1F80); /* round to nearest even, no flush-to-zero, no denormals-are-zero */
    const digit_tables t = make_tables();
    __m512d p[ROWS][2], q[ROWS][2];
    int nan = 0;
    for (int64_t gi = 0; gi < g && !nan; gi++) {
        int64_t r0, r1;
        if (!share_rows(offs, gi, m0, m1, &r0, &r1))
            continue;
        nan = pack_rhs(&t, b + gi * k * n, k, n, bp, bq);
        if (nan)
            break;
        for (int64_t rb = r0; rb < r1 && !nan; rb += rows_per_pass) {
            const int64_t nr = r1 - rb < rows_per_pass ? r1 - rb : rows_per_pass;
            const int64_t e = rb * n;
            /* panel [row group][kb] of ROWS x 384 int16 */
            for (int64_t r = 0; r < nr && !nan; r += ROWS)
                for (int64_t kb = 0; kb < kbn; kb++) {
                    const int64_t at = ((r / ROWS) * kbn + kb) * ROWS * 384;
                    nan |= pack_lhs(&t, a + rb * k, k, nr, r, kb, pp + at, pq + at);
                }
            if (nan)
                break;
            const exact_sink s = {code, kbn, n, nb, sa + rb * kbn, sb + gi * kbn * nb,
                                  (float *)pout + e, (double *)pexact + e, (double *)pmag + e,
                                  (uint8_t *)pundecided + e, 2.0 * kbn * (kbn + 1) * 0x1p-105,
                                  scale};
            for (int64_t v = 0; v < nv; v++) {
                const int64_t valid = n - 16 * v < 16 ? n - 16 * v : 16;
                const __mmask16 m = (__mmask16)((1u << valid) - 1);
                for (int64_t kb = 0; kb < kbn; kb++) {
                    const float s_b = s.sb[kb * nb + (16 * v) / 128];
                    const int64_t bt = (kb * nv + v) * VEC_I16;
                    for (int64_t r = 0; r < nr; r += ROWS) {
                        const int64_t at = ((r / ROWS) * kbn + kb) * ROWS * 384;
                        partials(pp + at, bp + bt, p, 1.0);
                        partials(pq + at, bq + bt, q, 1.0);
                        for (int64_t i = r; i < nr && i < r + ROWS; i++) {
                            const int64_t st = i * w + 16 * v;
                            consume_row(&s, acc + st, total + st, sigma + st, mag + st,
                                        p[i - r], q[i - r], s.sa[i * kbn + kb], s_b, kb,
                                        i * n + 16 * v, m);
                        }
                    }
                }
            }
        }
    }
    _mm_setcsr(csr);
    free(bp);
    return nan;
}
