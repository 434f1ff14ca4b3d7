/* The exact bf16 matmul on AMX int8 tiles, rounded once (fp8check): bf16_exact.h has the
   split at each line's largest exponent, the residuals' correction and the rounding; this
   file forms v = sum_t X_a X_b (bf16_exact.h) on the tiles.

   Exactness of v.  In two's complement X = d_0 + 2^8 d_1 + 2^16 d_2 (|X| < 2^23), with d_0,
   d_1 unsigned bytes and d_2 a signed one.  sum_t X_a X_b is the sum over digit pairs
   (i, j) of 2^(8 (i + j)) times a byte dot product, which the tile instructions compute
   exactly in int32 (TDPBUUD u8 x u8, TDPBUSD u8 x s8, TDPBSUD s8 x u8, TDPBSSD s8 x s8).
   Grouped by s = i + j, one t contributes at most
       C_0: 255^2 < 2^16,  C_1: 2 255^2 < 2^17,  C_2: 255^2 + 2 128 255 < 2^17,
       C_3: 2 128 255 < 2^16,  C_4: 128^2 = 2^14
   in magnitude, so for L <= 2^14 (`MAX_K`) every C_s and each partial sum of it, in any
   order, is below 2^31: no wrap-around.  v = sum_s 2^(8 s) C_s is then exact in int64.

   Layouts:
     b tiles  [nt][L64][3][16][64] int8 (nt = ceil(n / 16), L64 = ceil(L / 64)): element
              [k4][4 col + q] of tile [ct][kc][d] is digit d of X_b at t = 64 kc + 4 k4 + q,
              column 16 ct + col (zero past L and n): TDPB*D's layout, each tile 1 KiB;
     a planes [3][rows rounded up to 16][64 L64] int8: digit d of X_a of a chunk of rows,
              made inside (zero past the rows and L).
*/
#include "bf16_exact.h"
#include "amx_tiles.h"

#define CHUNK_ROWS 64 /* rows of a whose planes are made at once */

/* Byte d of X in two's complement (header): d 0 and 1 unsigned, d 2 signed. */
static inline __m128i digit16(__m512i x, int d) {
    return _mm512_cvtepi32_epi8(_mm512_srai_epi32(x, 8 * d));
}

/* The three digits of 64 values along t of one line (t contiguous: x, len_left values
   left from there, zero past them), its exponent E: dig[d] byte t. */
static inline void digits_along(const uint16_t *x, int64_t len_left, int32_t E, __m512i D,
                                __m512i dig[3]) {
    const __m512i Ev = _mm512_set1_epi32(E);
    for (int q = 0; q < 4; q++) {
        const int64_t left = len_left - 16 * q;
        const __mmask16 m = left >= 16 ? 0xFFFF : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + 16 * q));
        const __m512i v = xval16(h, Ev, D);
        for (int d = 0; d < 3; d++)
            dig[d] = _mm512_mask_broadcast_i32x4(q ? dig[d] : _mm512_setzero_si512(),
                                                 (__mmask16)(0xF << (4 * q)), digit16(v, d));
    }
}

/* The three digits of 4 positions t0 .. t0 + 3 of 16 side-by-side lines (lines
   contiguous: value (l, t) at x[t s_t + l], `lines` of them valid, `ts` of the 4 positions)
   with exponents E (16 lanes), interleaved as TDPB*D reads them: dig[d] byte 4 l + q is
   digit d of (l, t0 + q). */
static inline void digits_across(const uint16_t *x, int64_t s_t, int64_t lines, int64_t ts,
                                 __m512i E, __m512i D, __m512i interleave, __m512i dig[3]) {
    const __mmask16 m = lines >= 16 ? 0xFFFF : (__mmask16)((1u << lines) - 1);
    for (int d = 0; d < 3; d++)
        dig[d] = _mm512_setzero_si512();
    for (int q = 0; q < ts; q++) {
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + q * s_t));
        const __m512i v = xval16(h, E, D);
        for (int d = 0; d < 3; d++)
            dig[d] = _mm512_mask_broadcast_i32x4(dig[d], (__mmask16)(0xF << (4 * q)),
                                                 digit16(v, d));
    }
    for (int d = 0; d < 3; d++)
        dig[d] = _mm512_permutexvar_epi8(interleave, dig[d]);
}

static __m512i interleave_perm(void) {
    uint8_t perm[64];
    for (int l = 0; l < 16; l++)
        for (int q = 0; q < 4; q++)
            perm[4 * l + q] = (uint8_t)(16 * q + l);
    return _mm512_loadu_si512(perm);
}


/* Column tiles [ct0, ct1) of b's digit tiles (layout above, tile ct - ct0 first): b
   [len][n], element (t, j) at x[t s_t + j s_j], one of s_t, s_j 1; column exponents E. */
static void pack_b(const uint16_t *x, int64_t s_t, int64_t s_j, int64_t len, int64_t n,
                   int64_t ct0, int64_t ct1, const int32_t *E, int32_t D, int8_t *tiles) {
    const int64_t l64 = (len + 63) / 64;
    const __m512i Dv = _mm512_set1_epi32(D), interleave = interleave_perm();
    for (int64_t ct = ct0; ct < ct1; ct++) {
        int8_t *base = tiles + (ct - ct0) * l64 * 3 * 1024;
        const int64_t valid = n - 16 * ct < 16 ? n - 16 * ct : 16;
        if (s_j == 1) { /* a row of b: 16 columns side by side, 4 rows to a tile row */
            const __m512i Ev = _mm512_maskz_loadu_epi32((__mmask16)((1u << valid) - 1),
                                                        E + 16 * ct);
            for (int64_t t = 0; t < 64 * l64; t += 4) {
                __m512i dig[3];
                const int64_t ts = len - t >= 4 ? 4 : len - t > 0 ? len - t : 0;
                digits_across(x + t * s_t + 16 * ct, s_t, valid, ts, Ev, Dv, interleave, dig);
                int8_t *o = base + (t / 64) * 3 * 1024 + ((t % 64) / 4) * 64;
                for (int d = 0; d < 3; d++)
                    _mm512_storeu_si512(o + d * 1024, dig[d]);
            }
            continue;
        }
        /* s_t == 1: a column of b is contiguous along t; its 16 t-quads of a K chunk go
           to the 16 rows of the tiles, at dword `col`: the 16 columns' digits transposed */
        for (int64_t kc = 0; kc < l64; kc++) {
            __m512i dig[3][16];
            for (int64_t col = 0; col < 16; col++) {
                __m512i one[3];
                if (col < valid)
                    digits_along(x + (16 * ct + col) * s_j + 64 * kc, len - 64 * kc,
                                 E[16 * ct + col], Dv, one);
                for (int d = 0; d < 3; d++)
                    dig[d][col] = col < valid ? one[d] : _mm512_setzero_si512();
            }
            for (int d = 0; d < 3; d++) {
                transpose16(dig[d]);
                for (int k4 = 0; k4 < 16; k4++)
                    _mm512_storeu_si512(base + kc * 3 * 1024 + d * 1024 + 64 * k4, dig[d][k4]);
            }
        }
    }
}

/* Planes of rows [i0, i0 + rows) of a (element (i, t) at a[i s_i + t s_t], one of s_i,
   s_t 1), layout above, with `pr` plane rows and row stride lp bytes. */
static void a_planes(const uint16_t *a, int64_t s_i, int64_t s_t, int64_t i0, int64_t rows,
                     int64_t pr, int64_t len, int64_t lp, const int32_t *E, int32_t D,
                     int8_t *planes) {
    const int64_t plane = pr * lp;
    const __m512i Dv = _mm512_set1_epi32(D);
    if (rows < pr)
        for (int d = 0; d < 3; d++)
            memset(planes + d * plane + rows * lp, 0, (pr - rows) * lp);
    if (s_t == 1) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t kc = 0; kc < lp / 64; kc++) {
                __m512i dig[3];
                digits_along(a + (i0 + r) * s_i + 64 * kc, len - 64 * kc, E[i0 + r], Dv, dig);
                for (int d = 0; d < 3; d++)
                    _mm512_storeu_si512(planes + d * plane + r * lp + 64 * kc, dig[d]);
            }
        return;
    }
    /* s_i == 1: 16 rows side by side; each row's 4 positions t are one dword of the
       interleaved digits, 16 such quads (a K chunk) transposed to the 16 plane rows */
    const __m512i interleave = interleave_perm();
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
        const int64_t nl = rows - r0 < 16 ? rows - r0 : 16;
        const __m512i Ev = _mm512_maskz_loadu_epi32((__mmask16)((1u << nl) - 1), E + i0 + r0);
        for (int64_t kc = 0; kc < lp / 64; kc++) {
            __m512i dig[3][16];
            for (int k4 = 0; k4 < 16; k4++) {
                const int64_t t = 64 * kc + 4 * k4;
                const int64_t ts = len - t >= 4 ? 4 : len - t > 0 ? len - t : 0;
                __m512i quad[3];
                digits_across(a + t * s_t + (i0 + r0) * s_i, s_t, nl, ts, Ev, Dv, interleave,
                              quad);
                for (int d = 0; d < 3; d++)
                    dig[d][k4] = quad[d];
            }
            for (int d = 0; d < 3; d++) {
                transpose16(dig[d]);
                for (int l = 0; l < 16; l++)
                    _mm512_storeu_si512(planes + d * plane + (r0 + l) * lp + 64 * kc,
                                        dig[d][l]);
            }
        }
    }
}

/* C_0 .. C_4 (header) of one 16 x 16 output tile into tiles 0-4 (zero before): a the
   row tile's planes (row stride lp, digit planes `plane` bytes apart), b the column
   tile's tiles.  Tiles 5 and 7 hold a's digits, 6 b's. */
static inline void tile_sums(const int8_t *a, int64_t plane, int64_t lp, const int8_t *b,
                             int64_t l64) {
    for (int64_t kc = 0; kc < l64; kc++) {
        const int8_t *ak = a + 64 * kc, *bk = b + kc * 3 * 1024;
        _tile_loadd(5, ak, lp);
        _tile_loadd(7, ak + plane, lp);
        _tile_loadd(6, bk, 64);
        _tile_dpbuud(0, 5, 6);          /* (0, 0) */
        _tile_dpbuud(1, 7, 6);          /* (1, 0) */
        _tile_loadd(6, bk + 1024, 64);
        _tile_dpbuud(1, 5, 6);          /* (0, 1) */
        _tile_dpbuud(2, 7, 6);          /* (1, 1) */
        _tile_loadd(6, bk + 2048, 64);
        _tile_dpbusd(2, 5, 6);          /* (0, 2): u8 x s8 */
        _tile_dpbusd(3, 7, 6);          /* (1, 2) */
        _tile_loadd(5, ak + 2 * plane, lp);
        _tile_dpbssd(4, 5, 6);          /* (2, 2) */
        _tile_loadd(6, bk, 64);
        _tile_dpbsud(2, 5, 6);          /* (2, 0): s8 x u8 */
        _tile_loadd(6, bk + 1024, 64);
        _tile_dpbsud(3, 5, 6);          /* (2, 1) */
    }
}

static inline void store_sums(int32_t c[5][16][16]) {
    _tile_stored(0, c[0], 64); _tile_stored(1, c[1], 64); _tile_stored(2, c[2], 64);
    _tile_stored(3, c[3], 64); _tile_stored(4, c[4], 64);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); _tile_zero(4);
}


/* v = sum_s 2^(8 s) C_s (header) of rows 0 .. nr of the stashed sums into t1s, exact in
   int64. */
static inline void tile_values(int32_t c[5][16][16], int nr, int64_t t1s[16][16]) {
    for (int r = 0; r < nr; r++)
        for (int h = 0; h < 2; h++) {
            __m512i acc = _mm512_setzero_si512();
            for (int s = 0; s < 5; s++) {
                const __m512i cs = _mm512_cvtepi32_epi64(
                    _mm256_load_si256((const __m256i *)(c[s][r] + 8 * h)));
                acc = _mm512_add_epi64(acc, _mm512_slli_epi64(cs, 8 * s));
            }
            _mm512_storeu_si512(t1s[r] + 8 * h, acc);
        }
}

/* bf16_exact.h's `products` on the tiles: a's rows a chunk at a time, b's column tiles
   packed once. */
static int products(const sink *s, int64_t m0, int64_t m1, int64_t ct0, int64_t ct1) {
    const int64_t len = s->len, l64 = (len + 63) / 64, lp = 64 * l64;
    const int32_t D = (int32_t)s->D;
    int8_t *planes = aligned_alloc(64, 3 * CHUNK_ROWS * lp + (ct1 - ct0) * l64 * 3 * 1024);
    if (!planes)
        return -1;
    int8_t *tiles = planes + 3 * CHUNK_ROWS * lp;
    pack_b(s->b, s->b_st, s->b_sj, len, s->n, ct0, ct1, s->Eb, D, tiles);
    configure_tiles();
    /* Two stashes: the tile unit forms one output tile's sums while the vector unit
       consumes the previous one's. */
    _Alignas(64) int32_t c[2][5][16][16];
    _Alignas(64) int64_t t1s[16][16];
    int64_t prev_i = -1, prev_ct = 0;
    int prev_nr = 0, buf = 0;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); _tile_zero(4);
    for (int64_t rb = m0; rb < m1; rb += CHUNK_ROWS) {
        const int64_t rows = m1 - rb < CHUNK_ROWS ? m1 - rb : CHUNK_ROWS;
        const int64_t pr = (rows + 15) / 16 * 16;
        a_planes(s->a, s->a_si, s->a_st, rb, rows, pr, len, lp, s->Ea, D, planes);
        for (int64_t ct = ct0; ct < ct1; ct++)
            for (int64_t r0 = 0; r0 < rows; r0 += 16) {
                tile_sums(planes + r0 * lp, pr * lp, lp, tiles + (ct - ct0) * l64 * 3 * 1024,
                          l64);
                if (prev_i >= 0) {
                    tile_values(c[buf ^ 1], prev_nr, t1s);
                    consume(s, t1s, prev_i, prev_nr, prev_ct);
                }
                store_sums(c[buf]);
                prev_i = rb + r0, prev_ct = ct;
                prev_nr = rows - r0 < 16 ? (int)(rows - r0) : 16;
                buf ^= 1;
            }
    }
    if (prev_i >= 0) {
        tile_values(c[buf ^ 1], prev_nr, t1s);
        consume(s, t1s, prev_i, prev_nr, prev_ct);
    }
    _tile_release();
    free(planes);
    return 0;
}
