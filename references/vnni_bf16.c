/* The exact bf16 matmul on AVX512-VNNI int16 dot products, rounded once (fp8check):
   bf16_exact.h has the split at each line's largest exponent, the residuals' correction
   and the rounding; this file forms v = sum_t X_a X_b (bf16_exact.h) with VPDPWSSD, where
   the CPU has no AMX.

   Exactness of v.  Split X (an integer, X = +-S 2^k with S <= 255 and 0 <= k <= D = 15:
   bf16_exact.h) into balanced digits X = 2^12 h + l: l = ((X + 2048) mod 4096) - 2048 in
   [-2048, 2047] and h = (X - l) / 4096, and let t = h + l.  For k >= 12, X is a multiple
   of 4096: l = 0 and |h| = S 2^(k - 12) <= 2040.  For k <= 11, |X| <= 255 * 2^11, so
   |h| <= (255 * 2^11 + 2^11) / 2^12 = 128.  So every digit fits int16 (|t| <= 2048 + 128),
   and per position |h_a h_b| <= 2040^2, |l_a l_b| <= 2^22 and |h_a l_b + l_a h_b| <=
   2040 * 2^11 (a factor with k >= 12 has l = 0; two with k <= 11 give at most 2^19).
   Over the positions of a run of RUN = 3 K blocks of 128 (Karatsuba, as vnni_gmm.c),

       sum X_a X_b = 2^24 H + 2^12 M + L,   M = S - H - L,
       H = sum h_a h_b,  L = sum l_a l_b,  S = sum t_a t_b.

   VPDPWSSD multiplies int16 pairs exactly and adds them into int32 lanes with wrap-around,
   so each lane ends at its true sum modulo 2^32: the true sum itself when that and every
   partial sum are below 2^31 in magnitude.  Over 384 positions |H| <= 384 * 2040^2 =
   1598054400, |L| <= 384 * 2^22 = 1610612736 and |M| = |sum (h_a l_b + l_a h_b)| <=
   384 * 2040 * 2^11 = 1604321280, all below 2^31 - 1 = 2147483647 (a fourth block could
   take L to 2^31).  S may wrap, but S - H - L taken modulo 2^32 is M, which fits: exact.
   The run's 2^24 H + 2^12 M + L is formed in int64 and the runs summed there: v exact,
   |v| < len 2^46 <= 2^60 for a line of len <= 2^14 positions.  Three int16 dot products
   per position where a plain two-digit split needs four, and one int64 step per run.

   Layouts (`PAIRS` positions pairs to a K block of 128, the last block's pairs past len
   zero):
     b tiles  [nt][KB][PAIRS][3][16][2] int16 (KB = ceil(len / 128)): lane (col, q) of
              [ct][kb][p][d] is digit d (h, l, t) of X_b at t = 128 kb + 2 p + q, column
              16 ct + col (zero past len and n): the operand VPDPWSSD multiplies by a
              broadcast pair;
     a panels [ROWS-row groups][KB][ROWS][3][PAIRS] int32: the pair p of digit d of one
              row, (X_a at 128 kb + 2 p, at 128 kb + 2 p + 1) as two int16, the broadcast
              operand.
*/
#include "bf16_exact.h"
#include "vnni_dots.h"

#define ROWS DOT_ROWS      /* rows of a micro-kernel call (vnni_dots.h) */
#define PAIRS DOT_PAIRS    /* position pairs of a K block of 128 */
#define TILE_I16 (PAIRS * 96) /* int16 of one column tile's K block */
#define PANEL_I32 (ROWS * 3 * PAIRS) /* int32 of one row group's K block */
#define CHUNK_ROWS 64      /* rows of a whose panels are made at once */
#define RUN 3              /* K blocks whose int32 sums are kept before int64 (header) */

/* The digits h, l, h + l (header) of 16 X in int32 lanes. */
static inline void split3(__m512i x, __m512i d[3]) {
    const __m512i half = _mm512_set1_epi32(2048), mask = _mm512_set1_epi32(4095);
    const __m512i l = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(x, half), mask), half);
    const __m512i h = _mm512_srai_epi32(_mm512_sub_epi32(x, l), 12);
    d[0] = h, d[1] = l, d[2] = _mm512_add_epi32(h, l);
}

/* The digits of 32 values along t of one line (t contiguous: x, len_left values left
   from there, zero past them; E its exponent): dig[d] int16 lane q is digit d of the
   value at t + q, so dword p is the pair (t + 2 p, t + 2 p + 1). */
static inline void pairs_along(const uint16_t *x, int64_t len_left, int32_t E, __m512i D,
                               __m512i dig[3]) {
    const __m512i Ev = _mm512_set1_epi32(E);
    __m512i half[2][3];
    for (int q = 0; q < 2; q++) {
        const int64_t left = len_left - 16 * q;
        const __mmask16 m = left >= 16 ? 0xFFFF : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + 16 * q));
        split3(xval16(h, Ev, D), half[q]);
    }
    for (int d = 0; d < 3; d++)
        dig[d] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(half[0][d])),
                                    _mm512_cvtepi32_epi16(half[1][d]), 1);
}

/* The digits of positions t, t + 1 of 16 side-by-side lines (value (l, t) at x[t s_t + l],
   `lines` of them valid, `ts` (0, 1, 2) of the two positions; exponents E in 16 lanes):
   dig[d] dword l is line l's pair of digit d. */
static inline void pairs_across(const uint16_t *x, int64_t s_t, int64_t lines, int64_t ts,
                                __m512i E, __m512i D, __m512i dig[3]) {
    const __mmask16 m = lines >= 16 ? 0xFFFF : (__mmask16)((1u << lines) - 1);
    __m512i at[2][3];
    for (int q = 0; q < 2; q++) {
        const __m512i h = _mm512_cvtepu16_epi32(
            _mm256_maskz_loadu_epi16(q < ts ? m : 0, x + q * s_t));
        split3(xval16(h, E, D), at[q]);
    }
    for (int d = 0; d < 3; d++)
        dig[d] = _mm512_or_si512(_mm512_and_si512(at[0][d], _mm512_set1_epi32(0xFFFF)),
                                 _mm512_slli_epi32(at[1][d], 16));
}

/* Column tiles [ct0, ct1) of b's digit tiles (layout above, tile ct - ct0 first): b
   [len][n], element (t, j) at x[t s_t + j s_j], one of s_t, s_j 1; column exponents E. */
static void pack_b(const uint16_t *x, int64_t s_t, int64_t s_j, int64_t len, int64_t n,
                   int64_t ct0, int64_t ct1, const int32_t *E, int32_t D, int16_t *tiles) {
    const int64_t kbn = (len + 127) / 128;
    const __m512i Dv = _mm512_set1_epi32(D);
    for (int64_t ct = ct0; ct < ct1; ct++) {
        int16_t *base = tiles + (ct - ct0) * kbn * TILE_I16;
        const int64_t valid = n - 16 * ct < 16 ? n - 16 * ct : 16;
        if (s_j == 1) { /* a row of b: 16 columns side by side, two rows to a pair */
            const __m512i Ev = _mm512_maskz_loadu_epi32((__mmask16)((1u << valid) - 1),
                                                        E + 16 * ct);
            for (int64_t t = 0; t < 128 * kbn; t += 2) {
                __m512i dig[3];
                const int64_t ts = len - t >= 2 ? 2 : len - t > 0 ? len - t : 0;
                pairs_across(x + t * s_t + 16 * ct, s_t, valid, ts, Ev, Dv, dig);
                for (int d = 0; d < 3; d++)
                    _mm512_storeu_si512(base + (t / 2) * 96 + 32 * d, dig[d]);
            }
            continue;
        }
        /* s_t == 1: a column of b contiguous along t; its 16 pairs of 32 positions go to
           dword `col` of 16 pair rows: the 16 columns' digits transposed */
        for (int64_t c = 0; c < 4 * kbn; c++) {
            __m512i dig[3][16];
            for (int64_t col = 0; col < 16; col++) {
                __m512i one[3];
                pairs_along(x + (16 * ct + col) * s_j + 32 * c, col < valid ? len - 32 * c : 0,
                            col < valid ? E[16 * ct + col] : 1, Dv, one);
                for (int d = 0; d < 3; d++)
                    dig[d][col] = one[d];
            }
            for (int d = 0; d < 3; d++) {
                transpose16(dig[d]);
                for (int pp = 0; pp < 16; pp++)
                    _mm512_storeu_si512(base + (16 * c + pp) * 96 + 32 * d, dig[d][pp]);
            }
        }
    }
}

/* Panels of rows [i0, i0 + rows) of a (element (i, t) at a[i s_i + t s_t], one of s_i,
   s_t 1), layout above; the rows of the last group past `rows` zero. */
static void a_panels(const uint16_t *a, int64_t s_i, int64_t s_t, int64_t i0, int64_t rows,
                     int64_t len, const int32_t *E, int32_t D, int32_t *panels) {
    const int64_t kbn = (len + 127) / 128, pr = (rows + ROWS - 1) / ROWS * ROWS;
    const __m512i Dv = _mm512_set1_epi32(D);
#define AT(r, c, d) (panels + (((r) / ROWS * kbn + (c) / 4) * ROWS + (r) % ROWS) * 3 * PAIRS \
                     + (d) * PAIRS + 16 * ((c) % 4))
    if (s_t == 1) {
        for (int64_t r = 0; r < pr; r++)
            for (int64_t c = 0; c < 4 * kbn; c++) {
                __m512i dig[3];
                pairs_along(a + (i0 + r) * s_i + 32 * c, r < rows ? len - 32 * c : 0,
                            r < rows ? E[i0 + r] : 1, Dv, dig);
                for (int d = 0; d < 3; d++)
                    _mm512_storeu_si512(AT(r, c, d), dig[d]);
            }
        return;
    }
    /* s_i == 1: 16 rows side by side; each row's pair is one dword of `pairs_across`, the
       16 pairs of 32 positions transposed to the 16 rows (two row groups) */
    for (int64_t r0 = 0; r0 < pr; r0 += 16) {
        const int64_t nl = rows - r0 < 16 ? rows - r0 : 16;
        const __m512i Ev = _mm512_maskz_loadu_epi32((__mmask16)((1u << nl) - 1), E + i0 + r0);
        const int64_t out_rows = pr - r0 < 16 ? pr - r0 : 16;
        for (int64_t c = 0; c < 4 * kbn; c++) {
            __m512i dig[3][16];
            for (int pp = 0; pp < 16; pp++) {
                const int64_t t = 32 * c + 2 * pp;
                const int64_t ts = len - t >= 2 ? 2 : len - t > 0 ? len - t : 0;
                __m512i two[3];
                pairs_across(a + t * s_t + i0 + r0, s_t, nl, ts, Ev, Dv, two);
                for (int d = 0; d < 3; d++)
                    dig[d][pp] = two[d];
            }
            for (int d = 0; d < 3; d++) {
                transpose16(dig[d]);
                for (int64_t l = 0; l < out_rows; l++)
                    _mm512_storeu_si512(AT(r0 + l, c, d), dig[d][l]);
            }
        }
    }
#undef AT
}

/* v (header) of one row group x one column tile into t1s[r][col], int64: the group's
   panels (KB blocks), the column tile's tiles, `len` positions.  The int32 sums run over
   RUN blocks before they are combined into int64 (header). */
__attribute__((noinline)) static void tile_values(const int32_t *panel, const int16_t *tile,
                                                  int64_t len, int64_t t1s[ROWS][16]) {
    const int64_t kbn = (len + 127) / 128;
    for (int64_t k0 = 0; k0 < kbn; k0 += RUN) {
        __m512i acc[ROWS][3];
        for (int64_t kb = k0; kb < kbn && kb < k0 + RUN; kb++) {
            const int64_t left = len - 128 * kb, pairs = left >= 128 ? PAIRS : (left + 1) / 2;
            dots(panel + kb * PANEL_I32, tile + kb * TILE_I16, pairs, kb > k0, acc);
        }
        for (int r = 0; r < ROWS; r++) {
            const __m512i h = acc[r][0], l = acc[r][1];
            const __m512i mid = _mm512_sub_epi32(_mm512_sub_epi32(acc[r][2], h), l);
            for (int q = 0; q < 2; q++) {
#define HALF(x) _mm512_cvtepi32_epi64(q ? _mm512_extracti64x4_epi64(x, 1) \
                                        : _mm512_castsi512_si256(x))
                const __m512i run = _mm512_add_epi64(
                    _mm512_add_epi64(_mm512_slli_epi64(HALF(h), 24),
                                     _mm512_slli_epi64(HALF(mid), 12)), HALF(l));
#undef HALF
                __m512i *o = (__m512i *)(t1s[r] + 8 * q);
                _mm512_storeu_si512(o, k0 ? _mm512_add_epi64(_mm512_loadu_si512(o), run)
                                          : run);
            }
        }
    }
    if (kbn == 0)
        memset(t1s, 0, ROWS * 16 * sizeof(int64_t));
}

/* bf16_exact.h's `products` on VPDPWSSD: b's column tiles packed once, a's rows a chunk
   at a time; each row group's panel stays in L1 while the column tiles stream past. */
static int products(const sink *s, int64_t m0, int64_t m1, int64_t ct0, int64_t ct1) {
    const int64_t len = s->len, kbn = (len + 127) / 128;
    const int32_t D = (int32_t)s->D;
    int16_t *tiles = aligned_alloc(64, (ct1 - ct0) * kbn * TILE_I16 * sizeof(int16_t)
                                       + CHUNK_ROWS / ROWS * kbn * PANEL_I32 * sizeof(int32_t)
                                       + 64);
    if (!tiles)
        return -1;
    int32_t *panels = (int32_t *)(tiles + (ct1 - ct0) * kbn * TILE_I16);
    pack_b(s->b, s->b_st, s->b_sj, len, s->n, ct0, ct1, s->Eb, D, tiles);
    _Alignas(64) int64_t t1s[ROWS][16];
    for (int64_t rb = m0; rb < m1; rb += CHUNK_ROWS) {
        const int64_t rows = m1 - rb < CHUNK_ROWS ? m1 - rb : CHUNK_ROWS;
        a_panels(s->a, s->a_si, s->a_st, rb, rows, len, s->Ea, D, panels);
        for (int64_t g = 0; g * ROWS < rows; g++) {
            const int nr = rows - g * ROWS < ROWS ? (int)(rows - g * ROWS) : ROWS;
            for (int64_t ct = ct0; ct < ct1; ct++) {
                tile_values(panels + g * kbn * PANEL_I32, tiles + (ct - ct0) * kbn * TILE_I16,
                            len, t1s);
                consume(s, t1s, rb + g * ROWS, nr, ct);
            }
        }
    }
    free(tiles);
    return 0;
}
