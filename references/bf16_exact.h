/* What the exact bf16 matmul kernels share (fp8check; references/bf16_matmul.py drives
   them, references/matmul.py takes the elements they leave uncertain): the split of each
   line at its largest exponent, the residuals' exact correction, the one rounding, and the
   exported entry points.  A kernel file (amx_bf16.c: AMX int8 tiles; vnni_bf16.c:
   AVX512-VNNI int16 dot products) defines `products` (below) and includes this header.

   Exactness.  A finite bf16 h is S 2^(x - 134): S its 8-bit significand (0..255, with the
   implicit bit of a normal number), x = max(biased exponent, 1).  Per line (a row of a,
   a column of b: the contraction runs along it) E is the largest x of its nonzero values
   (1 for an all-zero line) and D = 15 the window (`bf16_matmul.WINDOW`).  A value with
   E - x <= D is the integer
   X = +-S 2^(D - (E - x)), |X| < 2^(8 + D) = 2^23, times the line's unit
   2^(E - 134 - D); a value further down, a residual, counts as X = 0 there.  So
   a = a1 + a2 and b = b1 + b2 with a1, b1 the windowed values and a2, b2 the residuals
   (few: a value 2^15 below its line's largest is rare), and a b = t1 + (a2 b1 + a b2)
   with t1 = a1 b1.

   The kernel forms v = sum_t X_a X_b exactly as an int64 (|v| < L 2^(16 + 2D) <= 2^60
   for L <= 2^14 = `MAX_K`; each kernel's header says how).  Where |v| < 2^53 (nearly
   always: that needs 2^7 near-largest values of one sign) its conversion to float64 is
   exact, and so is the scaling by the two units 2^(Ea + Eb - 268 - 2D) (exponents within
   [-300, 250]: far from float64's subnormals and overflow); the other elements take
   `corrected`'s exact fixed point below.  That float64 is t1 exactly; rounded once to the
   output format (float64: itself; float32: the hardware conversion, round to nearest even
   with subnormals, MXCSR set so for the call; bfloat16: the rule of references/casts.py
   on that float32) it is the correctly rounded a b wherever no residual reaches.

   Where one reaches (a row of a or a column of b with residuals), the correction
   a2 b1 + a b2 has few terms, each a product of two bf16 values, Sa Sb 2^(xa + xb - 268).
   Where each is an integer in t1's unit (nearly always) they are added to v in int64
   (`row_terms`, `col_terms`) and that integer takes t1's rounding above.  Otherwise
   `corrected` adds v and them exactly in an __int128 fixed point whose unit is 2^-64
   t1's (`add_term`), and rounds that integer once (`round_int`: round to nearest even
   at the format's precision, subnormals, overflow to inf by the cast).  A term more than
   2^-64 t1's unit down does not fit: that element is left NaN and counted per row, and
   the caller sums it exactly (inputs are finite here, so no NaN is ever a value).
*/
#ifndef FP8CHECK_BF16_EXACT_H
#define FP8CHECK_BF16_EXACT_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline int32_t expo(uint16_t h) {
    const int32_t e = (h >> 7) & 0xFF;
    return e ? e : 1;
}

/* X of 16 bf16 values h (zero-extended into int32 lanes) on lines of largest exponents E
   (header); 0 for a residual (a shift count D - (E - x) below zero reads as one above 31,
   which VPSLLVD turns into 0). */
static inline __m512i xval16(__m512i h, __m512i E, __m512i D) {
    const __m512i e = _mm512_and_si512(_mm512_srli_epi32(h, 7), _mm512_set1_epi32(0xFF));
    const __m512i f = _mm512_and_si512(h, _mm512_set1_epi32(0x7F));
    const __m512i s = _mm512_mask_or_epi32(f, _mm512_test_epi32_mask(e, e), f,
                                           _mm512_set1_epi32(0x80));
    const __m512i def = _mm512_sub_epi32(E, _mm512_max_epi32(e, _mm512_set1_epi32(1)));
    const __m512i x = _mm512_sllv_epi32(s, _mm512_sub_epi32(D, def));
    return _mm512_mask_sub_epi32(x, _mm512_test_epi32_mask(h, _mm512_set1_epi32(0x8000)),
                                 _mm512_setzero_si512(), x);
}


/* The 16 x 16 dwords r[k] (dword l of row k) transposed in place: r[l] gets dword l of
   each r[k], k in order.  A digit dword of 4 positions of one line goes from the line-major
   order the digits are formed in to the position-major order of a tile row (and back);
   in registers, 64 shuffles where scattering the dwords took 16 scatters of 16. */
static inline void transpose16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int k = 0; k < 16; k += 2) {
        t[k] = _mm512_unpacklo_epi32(r[k], r[k + 1]);
        t[k + 1] = _mm512_unpackhi_epi32(r[k], r[k + 1]);
    }
    for (int k = 0; k < 16; k += 4) {
        u[k] = _mm512_unpacklo_epi64(t[k], t[k + 2]);
        u[k + 1] = _mm512_unpackhi_epi64(t[k], t[k + 2]);
        u[k + 2] = _mm512_unpacklo_epi64(t[k + 1], t[k + 3]);
        u[k + 3] = _mm512_unpackhi_epi64(t[k + 1], t[k + 3]);
    }
    /* u[4 g + c] holds in its 128-bit lane L the dwords (rows 4 g .. 4 g + 3, column
       4 L + c): the lanes regrouped */
    for (int c = 0; c < 4; c++) {
        const __m512i lo01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
        const __m512i lo23 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
        const __m512i hi01 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
        const __m512i hi23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
        r[c] = _mm512_shuffle_i32x4(lo01, hi01, 0x88);
        r[4 + c] = _mm512_shuffle_i32x4(lo01, hi01, 0xDD);
        r[8 + c] = _mm512_shuffle_i32x4(lo23, hi23, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(lo23, hi23, 0xDD);
    }
}

#define LINE_BLOCK 256 /* lines side by side scanned at once: 8 vectors of 32 */

/* The largest and the smallest of 32 uint16 lanes. */
static inline void lane_range(__m512i mx, __m512i mn, int32_t *hi, int32_t *lo) {
    uint16_t a[32], b[32];
    _mm512_storeu_si512(a, mx);
    _mm512_storeu_si512(b, mn);
    int32_t h = 0, l = 0xFF;
    for (int q = 0; q < 32; q++) {
        h = a[q] > h ? a[q] : h;
        l = b[q] < l ? b[q] : l;
    }
    *hi = h, *lo = l;
}

/* Whether a line whose nonzero values have exponent fields up to E and down to lo (255
   for none) can hold a residual: only then are its values compared one by one. */
static inline int spans_window(int32_t E, int32_t lo, int64_t D) {
    return E - (lo > 1 ? lo : 1) > D;
}

/* Lines [l0, l1) of bf16 x (line l, position t at x[l s_line + t s_t], t < len, one of
   s_line, s_t 1): E of each (header) into E[l], the number of its residuals (nonzero
   values more than D binades below E) into res[l].  Returns the number of lines holding a
   non-finite value (exponent field 255: their E is 255).  One pass finds each line's
   largest and smallest exponent; a second pass counts residuals only in the lines that
   span more than the window, the few in real data. */
int64_t fp8check_bf16_lines(uint64_t px, int64_t s_line, int64_t s_t, int64_t l0,
                            int64_t l1, int64_t len, int64_t D, uint64_t pE, uint64_t pres) {
    const uint16_t *x = (const uint16_t *)px;
    int32_t *E = (int32_t *)pE;
    int64_t *res = (int64_t *)pres, bad = 0;
    const __m512i mag = _mm512_set1_epi16(0x7FFF), ff = _mm512_set1_epi16(0xFF);
    const __m512i one = _mm512_set1_epi16(1);
    if (s_line == 1) { /* the lines side by side: a block of them position by position,
                          reading LINE_BLOCK consecutive values of each position */
        for (int64_t b0 = l0; b0 < l1; b0 += LINE_BLOCK) {
            const int64_t nb = l1 - b0 < LINE_BLOCK ? l1 - b0 : LINE_BLOCK;
            __m512i mx[LINE_BLOCK / 32], mn[LINE_BLOCK / 32];
            __mmask32 k[LINE_BLOCK / 32];
            for (int v = 0; v < LINE_BLOCK / 32; v++) {
                const int64_t left = nb - 32 * v;
                k[v] = left >= 32 ? ~(__mmask32)0
                       : left > 0 ? (__mmask32)((1u << left) - 1) : 0;
                mx[v] = one, mn[v] = ff;
            }
            for (int64_t t = 0; t < len; t++) {
                const uint16_t *row = x + t * s_t + b0;
                for (int v = 0; v < LINE_BLOCK / 32; v++) {
                    const __m512i h = _mm512_maskz_loadu_epi16(k[v], row + 32 * v);
                    const __m512i e = _mm512_and_si512(_mm512_srli_epi16(h, 7), ff);
                    const __mmask32 nz = _mm512_test_epi16_mask(h, mag);
                    mx[v] = _mm512_mask_max_epu16(mx[v], nz, mx[v], e);
                    mn[v] = _mm512_mask_min_epu16(mn[v], nz, mn[v], e);
                }
            }
            uint16_t hi[LINE_BLOCK], lo[LINE_BLOCK];
            for (int v = 0; v < LINE_BLOCK / 32; v++) {
                _mm512_storeu_si512(hi + 32 * v, mx[v]);
                _mm512_storeu_si512(lo + 32 * v, mn[v]);
            }
            int64_t wide[LINE_BLOCK], nw = 0; /* the block's lines spanning the window */
            for (int64_t q = 0; q < nb; q++) {
                E[b0 + q] = hi[q], res[b0 + q] = 0;
                if (spans_window(hi[q], lo[q], D))
                    wide[nw++] = b0 + q;
            }
            for (int64_t t = 0; nw && t < len; t++) {
                const uint16_t *row = x + t * s_t;
                for (int64_t z = 0; z < nw; z++) {
                    const uint16_t h = row[wide[z]];
                    res[wide[z]] += (h & 0x7FFF) && E[wide[z]] - expo(h) > D;
                }
            }
        }
    } else { /* each line contiguous: 32 values an instruction */
        for (int64_t l = l0; l < l1; l++) {
            const uint16_t *line = x + l * s_line;
            __m512i mx = one, mn = ff;
            for (int64_t t = 0; t < len; t += 32) {
                const __mmask32 k = len - t >= 32 ? ~(__mmask32)0
                                                  : (__mmask32)((1u << (len - t)) - 1);
                const __m512i h = _mm512_maskz_loadu_epi16(k, line + t);
                const __m512i e = _mm512_and_si512(_mm512_srli_epi16(h, 7), ff);
                const __mmask32 nz = _mm512_test_epi16_mask(h, mag);
                mx = _mm512_mask_max_epu16(mx, nz, mx, e);
                mn = _mm512_mask_min_epu16(mn, nz, mn, e);
            }
            int32_t m, lo;
            lane_range(mx, mn, &m, &lo);
            int64_t r = 0;
            if (spans_window(m, lo, D)) {
                /* a residual: x < E - D */
                const __m512i lim = _mm512_set1_epi16((int16_t)(m - D));
                for (int64_t t = 0; t < len; t += 32) {
                    const __mmask32 k = len - t >= 32 ? ~(__mmask32)0
                                                      : (__mmask32)((1u << (len - t)) - 1);
                    const __m512i h = _mm512_maskz_loadu_epi16(k, line + t);
                    const __m512i e = _mm512_max_epu16(
                        _mm512_and_si512(_mm512_srli_epi16(h, 7), ff), one);
                    r += __builtin_popcount(_mm512_mask_cmplt_epi16_mask(
                        _mm512_test_epi16_mask(h, mag), e, lim));
                }
            }
            E[l] = m, res[l] = r;
        }
    }
    for (int64_t l = l0; l < l1; l++)
        bad += E[l] == 255;
    return bad;
}


/* 16 float64 (x0: elements 0-7, x1: 8-15) rounded once to bf16, stored under mask m:
   RN32 by the hardware, then references/casts.py's rule (ties on a bf16 midpoint decided
   by the side of x; a finite x: no NaN case). */
static inline void store_bf16(uint16_t *o, __m512d x0, __m512d x1, __mmask16 m) {
    const __m256 y0 = _mm512_cvtpd_ps(x0), y1 = _mm512_cvtpd_ps(x1);
    const __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(y0), y1, 1);
    const __m512i u = _mm512_castps_si512(y);
    const __m512i top = _mm512_srli_epi32(u, 16);
    const __m512i one = _mm512_set1_epi32(1);
    /* inf stays inf: its low 16 bits are zero, the even rule keeps it */
    const __m512i even = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF),
                                             _mm512_and_si512(top, one))), 16);
    const __mmask16 on_mid = _mm512_cmpeq_epi32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0xFFFF)), _mm512_set1_epi32(0x8000));
    const __m512d z0 = _mm512_cvtps_pd(y0), z1 = _mm512_cvtps_pd(y1);
    const __mmask16 inexact = (__mmask16)(_mm512_cmp_pd_mask(x0, z0, _CMP_NEQ_OQ)
                                          | (_mm512_cmp_pd_mask(x1, z1, _CMP_NEQ_OQ) << 8));
    const __m512d ax0 = _mm512_abs_pd(x0), ax1 = _mm512_abs_pd(x1);
    const __mmask16 above = (__mmask16)(_mm512_cmp_pd_mask(ax0, _mm512_abs_pd(z0), _CMP_GT_OQ)
                                        | (_mm512_cmp_pd_mask(ax1, _mm512_abs_pd(z1), _CMP_GT_OQ) << 8));
    __m512i r = _mm512_mask_mov_epi32(even, on_mid & inexact,
                                      _mm512_mask_add_epi32(top, above, top, one));
    _mm256_mask_storeu_epi16(o, m, _mm512_cvtepi32_epi16(r));
}

#define FRACTION_BITS 64 /* the correction's fixed point: units of 2^-64 t1's unit */

/* x 2^n, exactly where that is a float64 (certified.py's _scaled). */
static inline double scaled(double x, int n) {
    if (n < -1022 || n > 1023)
        return ldexp(x, n);
    const uint64_t bits = (uint64_t)(n + 1023) << 52;
    double p;
    memcpy(&p, &bits, 8);
    return x * p;
}

/* N 2^e rounded to nearest even at p significant bits, subnormals below 2^emin, as a
   float64 (for the formats here: at most 53 bits, and every exponent it meets far inside
   float64's range, so the scaling is exact); a nonzero N that rounds to zero gives the
   zero of its sign, N = 0 gives +0 (as the superaccumulator's rounding does). */
static double round_int(__int128 N, int e, int p, int emin) {
    if (N == 0)
        return 0.0;
    const unsigned __int128 M = N < 0 ? -(unsigned __int128)N : (unsigned __int128)N;
    const uint64_t hi = (uint64_t)(M >> 64), lo = (uint64_t)M;
    const int len = hi ? 128 - __builtin_clzll(hi) : 64 - __builtin_clzll(lo);
    const int top = len - 1 + e;                       /* exponent of the leading bit */
    const int q = (top > emin ? top : emin) - p + 1;   /* exponent of the last bit kept */
    uint64_t kept;
    if (q <= e) { /* every bit kept: at most p of them */
        kept = (uint64_t)M;
    } else if (q - e >= 128) { /* below half the last bit kept: zero */
        kept = 0, e = q;
    } else {
        const int sh = q - e;
        const unsigned __int128 k = M >> sh, rem = M - (k << sh);
        const unsigned __int128 half = (unsigned __int128)1 << (sh - 1);
        kept = (uint64_t)k + (rem > half || (rem == half && (k & 1)));
        e = q;
    }
    const double r = scaled((double)kept, e);
    return N < 0 ? -r : r;
}

typedef struct {
    const uint16_t *a, *b;            /* the operands' bf16 bits */
    int64_t a_si, a_st, b_st, b_sj;   /* their element strides */
    int64_t len, n, kind, p, emin, D; /* kind: 0 float64, 1 float32, 2 bfloat16 output */
    double *ws, *rs;                  /* column and row units 2^(E - 134 - D) */
    const int32_t *Ea, *Eb;
    void *out;                        /* [m][n] of the kind */
    const int64_t *rptr, *rt;         /* row i's residuals at t = rt[rptr[i] .. rptr[i+1]) */
    const int64_t *cptr, *ctt;        /* column j's at t = ctt[cptr[j] .. cptr[j+1]) */
    uint16_t *ct_res;                 /* [nt]: the columns of tile ct with residuals */
    int32_t *tmap;                    /* [len]: t's row of b1rows, for t among rt */
    uint16_t *b1rows;                 /* [*][jn]: b1's bits at those t, columns from j0 */
    int64_t j0, jn;
    int64_t *flagged;                 /* [m]: elements left as NaN for the caller */
} sink;

/* The exact product of bf16 ha (a's, at row exponent Ea) and hb (b's, Eb) as
   *prod 2^sh in t1's unit 2^(Ea + Eb - 268 - 2D): the product is Sa Sb 2^(xa + xb - 268),
   so *prod = +-Sa Sb (|.| < 2^16) and sh = (xa - Ea + D) + (xb - Eb + D) <= 2D.  *prod
   is 0 where a factor is zero. */
static inline int32_t term_of(uint16_t ha, uint16_t hb, int32_t Ea, int32_t Eb, int32_t D,
                              int64_t *prod) {
    const int32_t ea = (ha >> 7) & 0xFF, eb = (hb >> 7) & 0xFF;
    const int64_t sa = (ha & 0x7F) | (ea ? 0x80 : 0), sb = (hb & 0x7F) | (eb ? 0x80 : 0);
    *prod = ((ha ^ hb) & 0x8000) ? -(sa * sb) : sa * sb;
    return (expo(ha) - Ea + D) + (expo(hb) - Eb + D);
}

/* Adds the exact product of bf16 ha and hb (`term_of`) to acc, in units of
   2^-FRACTION_BITS of t1's unit: an integer below 2^(16 + 2 D + F) = 2^110.  Returns 0
   (acc unchanged) when it is not one there: a term so far below that the fixed point
   misses it. */
static inline int add_term(__int128 *acc, uint16_t ha, uint16_t hb, int32_t Ea, int32_t Eb,
                           int32_t D) {
    int64_t prod;
    const int32_t sh = term_of(ha, hb, Ea, Eb, D, &prod) + FRACTION_BITS;
    if (!prod)
        return 1;
    if (sh < 0)
        return 0;
    *acc += (__int128)prod * ((__int128)1 << sh);
    return 1;
}

/* Element (i, j) where residuals reach or |v| >= 2^53 (header): t1 + (a2 b1 + a b2)_ij
   exactly, in the fixed point of `add_term` (|sum| < 2^60 2^64 + 2^15 2^110 < 2^127: no
   overflow in __int128), v the element's t1 in its unit; rounded once (`round_int`) and written to
   out; left NaN and counted in flagged[i] when a term is below the fixed point. */
static void corrected(const sink *s, int64_t i, int64_t j, int64_t v) {
    const int32_t Ea = s->Ea[i], Eb = s->Eb[j], D = (int32_t)s->D;
    const uint16_t *arow = s->a + i * s->a_si;
    __int128 acc = (__int128)v << FRACTION_BITS;
    int ok = 1;
    for (int64_t z = s->rptr[i]; z < s->rptr[i + 1]; z++) { /* a2 b1 */
        const int64_t t = s->rt[z];
        ok &= add_term(&acc, arow[t * s->a_st], s->b1rows[s->tmap[t] * s->jn + j - s->j0],
                       Ea, Eb, D);
    }
    for (int64_t z = s->cptr[j]; z < s->cptr[j + 1]; z++) { /* a b2 */
        const int64_t t = s->ctt[z];
        ok &= add_term(&acc, arow[t * s->a_st], s->b[t * s->b_st + j * s->b_sj], Ea, Eb, D);
    }
    const double r = ok ? round_int(acc, Ea + Eb - 268 - 2 * D - FRACTION_BITS, (int)s->p,
                                    (int)s->emin)
                        : NAN;
    if (!ok)
        __atomic_fetch_add(&s->flagged[i], 1, __ATOMIC_RELAXED);
    if (s->kind == 0) {
        ((double *)s->out)[i * s->n + j] = r;
    } else {
        const float f = (float)r; /* exact: r has at most 24 (8) bits, or overflows to inf */
        if (s->kind == 1) {
            ((float *)s->out)[i * s->n + j] = f;
        } else {
            uint32_t u;
            memcpy(&u, &f, 4);
            ((uint16_t *)s->out)[i * s->n + j] = (uint16_t)(u >> 16); /* exact (or NaN) */
        }
    }
}

/* The terms a2 b1 of row i (a's residuals at t = rt[z0 .. z1)) added into the 16 t1
   values v (columns j0 .., int64, in t1's unit) where each is an integer there: the
   product Sa Sb 2^(xa + xb - 268) is Sa Sb shifted by (xa - Ea + D) + (xb - Eb + D)
   places (as in `add_term`, without its fraction bits: below 2^(16 + 2D) = 2^46, and
   |v| stays below 2^61).  Returns the lanes where a term falls below the unit (their v
   mean nothing then; `corrected` takes them). */
static inline __mmask16 row_terms(const sink *s, int64_t i, int64_t j0, __mmask16 m,
                                  __m512i v[2]) {
    const uint16_t *arow = s->a + i * s->a_si;
    const int32_t Ea = s->Ea[i], D = (int32_t)s->D;
    const __m512i Eb = _mm512_maskz_loadu_epi32(m, s->Eb + j0);
    const __m512i one = _mm512_set1_epi32(1), ff = _mm512_set1_epi32(0xFF);
    __mmask16 low = 0;
    for (int64_t z = s->rptr[i]; z < s->rptr[i + 1]; z++) {
        const int64_t t = s->rt[z];
        const uint16_t ha = arow[t * s->a_st];
        const int32_t ea = (ha >> 7) & 0xFF, sa = (ha & 0x7F) | (ea ? 0x80 : 0);
        const __m512i hb = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(
            m, s->b1rows + s->tmap[t] * s->jn + j0 - s->j0));
        const __m512i eb = _mm512_and_si512(_mm512_srli_epi32(hb, 7), ff);
        const __m512i f = _mm512_and_si512(hb, _mm512_set1_epi32(0x7F));
        const __m512i sb = _mm512_mask_or_epi32(f, _mm512_test_epi32_mask(eb, eb), f,
                                                _mm512_set1_epi32(0x80));
        const __m512i sh = _mm512_add_epi32(
            _mm512_set1_epi32((ea ? ea : 1) - Ea + 2 * D),
            _mm512_sub_epi32(_mm512_max_epi32(eb, one), Eb));
        const __mmask16 nz = _mm512_test_epi32_mask(sb, sb);
        low |= _mm512_mask_cmplt_epi32_mask(nz, sh, _mm512_setzero_si512());
        /* the sign of each product: a's, flipped where b's is set */
        const __mmask16 bneg = _mm512_test_epi32_mask(hb, _mm512_set1_epi32(0x8000));
        const __mmask16 neg = (ha & 0x8000) ? (__mmask16)~bneg : bneg;
        const __m512i prod = _mm512_mullo_epi32(sb, _mm512_set1_epi32(sa)); /* < 2^16 */
        for (int h = 0; h < 2; h++) {
            const __m512i p64 = _mm512_cvtepi32_epi64(h ? _mm512_extracti64x4_epi64(prod, 1)
                                                        : _mm512_castsi512_si256(prod));
            const __m512i s64 = _mm512_cvtepi32_epi64(h ? _mm512_extracti64x4_epi64(sh, 1)
                                                        : _mm512_castsi512_si256(sh));
            const __m512i term = _mm512_sllv_epi64(p64, s64); /* a negative count gives 0 */
            const __mmask8 nh = (__mmask8)(neg >> (8 * h));
            v[h] = _mm512_mask_sub_epi64(_mm512_add_epi64(v[h], term), nh, v[h], term);
        }
    }
    return low & m;
}

/* The terms a b2 of row i in the columns `cols` (a bit per column from j0) with
   residuals (b's at t = ctt[cptr[j] .. cptr[j + 1]) in column j) added into the 16 values
   v (as in `row_terms`) where each is an integer in t1's unit: b's factor being a residual
   (xb - Eb + D < 0), `term_of`'s shift is at most D - 1 = 14, the term below 2^30 (|v|
   stays below 2^62).  Scalar: a column holds a residual or two.  Returns the lanes where
   a term falls below the unit (`corrected` takes them). */
static inline __mmask16 col_terms(const sink *s, int64_t i, int64_t j0, unsigned cols,
                                  __m512i v[2]) {
    const uint16_t *arow = s->a + i * s->a_si;
    const int32_t Ea = s->Ea[i], D = (int32_t)s->D;
    __mmask16 low = 0;
    for (; cols; cols &= cols - 1) {
        const int q = __builtin_ctz(cols);
        const int64_t j = j0 + q;
        for (int64_t z = s->cptr[j]; z < s->cptr[j + 1]; z++) {
            const int64_t t = s->ctt[z];
            int64_t prod;
            const int32_t sh = term_of(arow[t * s->a_st], s->b[t * s->b_st + j * s->b_sj], Ea,
                                       s->Eb[j], D, &prod);
            if (sh < 0) {
                low |= (__mmask16)(prod != 0) << q;
            } else {
                /* into lane q in registers, both halves under their masks: indexed by q,
                   v would live in memory for every row `consume` takes, not just these
                   (5% of tgmm at the dev shape) */
                const __m512i term = _mm512_set1_epi64(prod * ((int64_t)1 << sh));
                const unsigned lane = 1u << q;
                v[0] = _mm512_mask_add_epi64(v[0], (__mmask8)lane, v[0], term);
                v[1] = _mm512_mask_add_epi64(v[1], (__mmask8)(lane >> 8), v[1], term);
            }
        }
    }
    return low;
}

/* Rows i0 .. i0 + nr of column tile ct into the sink, t1s[r] row i0 + r's t1 in its
   unit (16 int64, exact, |.| < 2^60; zero past n): t1 (plus, in a
   row with residuals, its a2 b1 terms, and in a column with residuals its a b2 terms,
   where they are integers in t1's unit: `row_terms`, `col_terms`) rounded once by the
   vector unit where that integer is below 2^53; `corrected` for the other elements
   (terms below the unit, integers past 2^53). */
static void consume(const sink *s, int64_t t1s[][16], int64_t i0, int nr, int64_t ct) {
    const int64_t j0 = 16 * ct, valid = s->n - j0 < 16 ? s->n - j0 : 16;
    const __mmask16 m = (__mmask16)((1u << valid) - 1);
    const __mmask8 m0 = (__mmask8)m, m1 = (__mmask8)(m >> 8);
    const __m512d ws0 = _mm512_loadu_pd(s->ws + j0), ws1 = _mm512_loadu_pd(s->ws + j0 + 8);
    const __m512i big = _mm512_set1_epi64((int64_t)1 << 53);
    for (int r = 0; r < nr; r++) {
        const int64_t i = i0 + r;
        __m512i vi[2] = {_mm512_loadu_si512(t1s[r]), _mm512_loadu_si512(t1s[r] + 8)};
        unsigned todo = 0;
        const int row_res = s->rptr[i + 1] > s->rptr[i];
        if (row_res)
            todo |= row_terms(s, i, j0, m, vi);
        if (s->ct_res[ct])
            todo |= col_terms(s, i, j0, s->ct_res[ct], vi);
        const __m512d v[2] = {_mm512_cvtepi64_pd(vi[0]), _mm512_cvtepi64_pd(vi[1])};
        /* |v| >= 2^53: its float64 was rounded (rare: the bound is 2^61) */
        todo |= (_mm512_cmpge_epi64_mask(_mm512_abs_epi64(vi[0]), big)
                 | (_mm512_cmpge_epi64_mask(_mm512_abs_epi64(vi[1]), big) << 8));
        todo &= m;
        const __m512d rs = _mm512_set1_pd(s->rs[i]);
        const __m512d x0 = _mm512_mul_pd(_mm512_mul_pd(v[0], ws0), rs); /* exact */
        const __m512d x1 = _mm512_mul_pd(_mm512_mul_pd(v[1], ws1), rs);
        if (s->kind == 0) {
            double *o = (double *)s->out + i * s->n + j0;
            _mm512_mask_storeu_pd(o, m0, x0);
            _mm512_mask_storeu_pd(o + 8, m1, x1);
        } else if (s->kind == 1) {
            float *o = (float *)s->out + i * s->n + j0;
            const __m512 y = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(x0)),
                                                _mm512_cvtpd_ps(x1), 1);
            _mm512_mask_storeu_ps(o, m, y);
        } else {
            store_bf16((uint16_t *)s->out + i * s->n + j0, x0, x1, m);
        }
        for (; todo; todo &= todo - 1) {
            const int q = __builtin_ctz(todo);
            corrected(s, i, j0 + q, t1s[r][q]);
        }
    }
}


/* The kernel's part (its file defines it): out = a @ b exactly rounded at rows [m0, m1)
   and column tiles [ct0, ct1) of the sink, each output tile's t1 handed to `consume`;
   the kernel packs the digits of the rows and column tiles it reads.  0, or -1 when its
   scratch cannot be allocated. */
static int products(const sink *s, int64_t m0, int64_t m1, int64_t ct0, int64_t ct1);

/* out = a @ b exactly rounded (header) at rows [m0, m1) and column tiles [ct0, ct1),
   the residuals' terms added where they reach (`corrected`):
     a        bf16 [m][len], element (i, t) at a[i a_si + t a_st] (a_si or a_st 1);  Ea
              its row exponents;
     b        bf16 [len][n], element (t, j) at b[t b_st + j b_sj] (b_st or b_sj 1);  Eb
              its column exponents;  D the window;
     out      [m][n], kind 0 float64, 1 float32, 2 bfloat16 (p, emin its precision);
     rptr, rt the residuals of a by row (CSR over [m + 1]), cptr, ctt of b by column;
     flagged  [m] int64, counts (added to) of the elements left NaN for the caller.
   Callers cut the larger operand among threads.  Returns 0, or -1 (nothing written) when
   its scratch cannot be allocated. */
int fp8check_bf16_matmul(uint64_t pa, int64_t a_si, int64_t a_st, uint64_t pEa,
                         uint64_t pb, int64_t b_st, int64_t b_sj, uint64_t pEb,
                         int64_t len, int64_t n, int64_t D, int64_t m0, int64_t m1,
                         int64_t ct0, int64_t ct1, uint64_t pout, int64_t kind, int64_t p,
                         int64_t emin, uint64_t prptr, uint64_t prt, uint64_t pcptr,
                         uint64_t pctt, uint64_t pflagged) {
    const int64_t nt = (n + 15) / 16;
    const int32_t *Ea = (const int32_t *)pEa, *Eb = (const int32_t *)pEb;
    const int64_t *cptr = (const int64_t *)pcptr;
    const int64_t *rptr = (const int64_t *)prptr, *rt = (const int64_t *)prt;
    const uint16_t *b = (const uint16_t *)pb;
    const int64_t j0 = 16 * ct0, j1 = 16 * ct1 < n ? 16 * ct1 : n, jn = j1 - j0;
    double *ws = aligned_alloc(64, (nt * 16 + (m1 - m0)) * sizeof(double));
    uint16_t *ct_res = calloc(nt, sizeof(uint16_t));
    int32_t *tmap = malloc(len * sizeof(int32_t) + 1);
    if (!ws || !ct_res || !tmap) {
        free(ws), free(ct_res), free(tmap);
        return -1;
    }
    double *rs = ws + nt * 16 - m0; /* rs[i] for i in [m0, m1) */
    for (int64_t j = 0; j < nt * 16; j++)
        ws[j] = j < n ? ldexp(1.0, Eb[j] - 134 - (int)D) : 0.0;
    for (int64_t i = m0; i < m1; i++)
        rs[i] = ldexp(1.0, Ea[i] - 134 - (int)D);
    for (int64_t j = 0; j < n; j++)
        ct_res[j / 16] |= (uint16_t)((cptr[j + 1] > cptr[j]) << (j % 16));
    /* b1 at the positions t of a's residuals in these rows, one row per distinct t:
       the a2 b1 terms read them across a row of out (b1 is b less its residuals) */
    int64_t nd = 0;
    memset(tmap, 0xFF, len * sizeof(int32_t));
    for (int64_t z = rptr[m0]; z < rptr[m1]; z++)
        if (tmap[rt[z]] < 0)
            tmap[rt[z]] = (int32_t)nd++;
    uint16_t *b1rows = malloc(nd * jn * sizeof(uint16_t) + 1);
    if (!b1rows) {
        free(ws), free(ct_res), free(tmap);
        return -1;
    }
    for (int64_t j = j0; j < j1; j++) /* b's column j, at the distinct t */
        for (int64_t z = rptr[m0]; z < rptr[m1]; z++) {
            const int64_t t = rt[z];
            const uint16_t h = b[t * b_st + j * b_sj];
            b1rows[tmap[t] * jn + j - j0] = (h & 0x7FFF) && Eb[j] - expo(h) > D ? 0 : h;
        }
    const sink s = {(const uint16_t *)pa, b, a_si, a_st, b_st, b_sj, len, n, kind, p, emin,
                    D, ws, rs, Ea, Eb, (void *)pout, rptr, rt, cptr, (const int64_t *)pctt,
                    ct_res, tmap, b1rows, j0, jn, (int64_t *)pflagged};
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(0x1F80); /* round to nearest even, no flush-to-zero, no denormals-are-zero */
    const int done = products(&s, m0, m1, ct0, ct1);
    _mm_setcsr(csr);
    free(ws), free(ct_res), free(tmap), free(b1rows);
    return done;
}

#endif
