/* The e4m3fn gmm recipes on AMX int8 tiles (fp8check).

   Exactness.  An e4m3fn value times 2^9 is an integer X with |X| <= 448 * 2^9 < 2^18,
   written as three signed digits X = d_0 + d_1 2^7 + d_2 2^14, sign and magnitude
   (|d_0|, |d_1| <= 127, |d_2| = |X| >> 14 <= 14, all of X's sign).  A 128-wide K block's
   partial sum_k a_k b_k (units of 2^-18) is sum over digit pairs (i, j) of 2^(7 (i + j))
   times an int8 dot product, which TDPBSSD computes exactly in int32 (its true sums are
   far inside int32, so wrap-around never happens, in any order):

       C_0 = (0,0)             |C_0| <= 128 * 127^2            < 2^21
       C_1 = (0,1) + (1,0)     |C_1| <= 2 * 128 * 127^2        < 2^22
       C_2 = (0,2) + (1,1) + (2,0)  <= 128 * (127^2 + 2*127*14) < 2^22
       C_3 = (1,2) + (2,1)     |C_3| <= 2 * 128 * 127 * 14     < 2^19
       C_4 = (2,2)             |C_4| <= 128 * 14^2             < 2^15

   Then lo = C_0 + 2^7 C_1 and hi = C_2 + 2^7 C_3 + 2^14 C_4 are exact in int32 (both
   below 2^30), and P 2^18 = 2^14 hi + lo (below 2^45) is exact in float64, fma or not;
   times 2^-18 it is the partial in value units, still exact: the float64 that the
   float64 BLAS path returns, which the exact recipe consumes (`fp8check_amx_partials`).
   One conversion to float32 (round to nearest even; P is 0 or at least 2^-18, far from
   float32's subnormals, so the scaling by 2^-18 commutes with the rounding) gives RN32 of
   it, which the other recipes consume.

   The recipes then run on RN32(P) in float32 as exact_gmm.h says, exactly as in
   vnni_gmm.c; the production check's pass (`fp8check_amx_exact_gmm`) consumes each
   partial three ways (exact_gmm.h: the recipe, the exact value, |A||B| from the magnitude
   partials on the same tiles), one output tile through all its K blocks at a time
   (`exact_pass`): its state stays in L1.

   Layouts (references/amx.py reads them):
     rhs tiles  [k / 128][3][2][nt][16][64] int8 (nt = ceil(n / 16)): element [k4][4 col
                + t] of tile [kb][d][kk][ct] is digit d of rhs[128 kb + 64 kk + 4 k4 + t]
                [16 ct + col] (zero past n): the layout TDPBSSD reads, each tile 1 KiB;
     lhs planes [k / 128][3][plane_rows][128] int8: digit d of a chunk of lhs rows, one K
                block at a time (plane_rows: the chunk's rows rounded up to 16, the rows
                past its end zero), made inside.

   Loop order of the recipe and partials (`chunk`; for cache reuse; any order gives the
   same bits, each output element's K blocks being consumed in K order): per chunk of
   rows, K block by K block (its rhs tiles, 6 KiB per column tile, stay in L2 across the
   chunk), BLOCK_TILES row tiles at a time (their planes stay in L1 across the column
   tiles).
*/
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "amx_tiles.h"
#include "exact_gmm.h"

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#define CHUNK_ROWS 256 /* lhs rows whose planes are packed at once (16 row tiles) */
#define BLOCK_TILES 4   /* row tiles whose K block's planes (24 KiB) stay in L1 */
#define COL_BLOCK_BYTES (384 << 10) /* rhs tiles of a column block of the exact pass (L2) */

/* Ask Linux for the AMX tile state (once per process, for all its threads); 0 on success. */
int fp8check_amx_init(void) {
    return (int)syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
}

/* The digits of 64 codes: lo[d] and hi[d] hold digit d of the 128 non-negative codes
   (two halves of 64); a negative code's digits are the negated ones (sign and magnitude).
   AVX512-VBMI byte permutes: 64 table lookups an instruction. */
typedef struct { __m512i lo[3], hi[3]; } digit_table;

static digit_table make_table(void) {
    int8_t tab[3][128];
    for (int c = 0; c < 128; c++) {
        const int x = c == 0x7F ? 0 : code_magnitude((unsigned)c); /* NaN: callers exclude */
        tab[0][c] = (int8_t)(x & 127);
        tab[1][c] = (int8_t)((x >> 7) & 127);
        tab[2][c] = (int8_t)(x >> 14);
    }
    digit_table t;
    for (int d = 0; d < 3; d++) {
        t.lo[d] = _mm512_loadu_si512(tab[d]);
        t.hi[d] = _mm512_loadu_si512(tab[d] + 64);
    }
    return t;
}

/* ... into o + d plane (digit d), and where mo is not NULL the digits of their
   magnitudes (the codes with the sign bit cleared: the same digits, unsigned) into
   mo + d plane; returns whether one of the codes is a NaN (0x7F, 0xFF: the digits cannot
   carry it). */
static inline int digits64(const digit_table *t, __m512i codes, int8_t *o, int64_t plane,
                           int8_t *mo) {
    __mmask64 neg = _mm512_movepi8_mask(codes);
    __m512i mag = _mm512_and_si512(codes, _mm512_set1_epi8(0x7F));
    for (int d = 0; d < 3; d++) {
        const __m512i v = _mm512_permutex2var_epi8(t->lo[d], mag, t->hi[d]);
        _mm512_storeu_si512(o + d * plane, _mm512_mask_sub_epi8(v, neg, _mm512_setzero_si512(), v));
        if (mo)
            _mm512_storeu_si512(mo + d * plane, v);
    }
    return _mm512_cmpeq_epi8_mask(mag, _mm512_set1_epi8(0x7F)) != 0;
}

/* The 64 rhs codes of tile row k4 (layout above) of column tile ct: element [4 col + t]
   is row[t n + 16 ct + col] (zero past n), four 16-byte row pieces interleaved by one
   byte permute (`interleave`: rhs_interleave). */
static inline __m512i rhs_row(const uint8_t *row, int64_t n, int64_t ct, __m512i interleave) {
    const int64_t valid = n - 16 * ct < 16 ? n - 16 * ct : 16;
    const __mmask16 m = (__mmask16)((1u << valid) - 1);
    __m512i v = _mm512_castsi128_si512(_mm_maskz_loadu_epi8(m, row + 16 * ct));
    for (int r = 1; r < 4; r++) {
        const __m128i x = _mm_maskz_loadu_epi8(m, row + r * n + 16 * ct);
        v = _mm512_mask_broadcast_i32x4(v, (__mmask16)(0xF << (4 * r)), x);
    }
    return _mm512_permutexvar_epi8(interleave, v);
}

static __m512i rhs_interleave(void) {
    uint8_t perm[64];
    for (int col = 0; col < 16; col++)
        for (int r = 0; r < 4; r++)
            perm[4 * col + r] = (uint8_t)(16 * r + col);
    return _mm512_loadu_si512(perm);
}

/* Column tiles [ct0, ct1) of one expert's rhs codes [k][n] -> their digit tiles in the
   layout above with nt = ct1 - ct0 (tile [kb][d][kk][ct - ct0]), and where abs_tiles is
   not NULL the same of their magnitudes.  Returns 1 if a code is a NaN (its digits are
   then zeros), else 0. */
static int rhs_tiles(const digit_table *t, const uint8_t *codes, int64_t k, int64_t n,
                     int64_t ct0, int64_t ct1, int8_t *tiles, int8_t *abs_tiles) {
    const __m512i interleave = rhs_interleave();
    const int64_t nt = ct1 - ct0, plane = 2 * nt * 1024; /* bytes of one digit's tiles */
    int nan = 0;
    for (int64_t kb = 0; kb < k / 128; kb++)
        for (int kk = 0; kk < 2; kk++)
            for (int k4 = 0; k4 < 16; k4++) {
                const uint8_t *row = codes + (128 * kb + 64 * kk + 4 * k4) * n;
                for (int64_t ct = ct0; ct < ct1; ct++) {
                    const int64_t o = kb * 3 * plane + ((int64_t)kk * nt + ct - ct0) * 1024 +
                                      64 * k4;
                    nan |= digits64(t, rhs_row(row, n, ct, interleave), tiles + o, plane,
                                    abs_tiles ? abs_tiles + o : NULL);
                }
            }
    return nan;
}

/* One expert's rhs codes [k][n] -> its digit tiles (layout above).  Returns 1 if a code
   is a NaN (its digits are then zeros), else 0. */
int fp8check_amx_pack_rhs(uint64_t pcodes, int64_t k, int64_t n, uint64_t ptiles) {
    const digit_table t = make_table();
    return rhs_tiles(&t, (const uint8_t *)pcodes, k, n, 0, (n + 15) / 16, (int8_t *)ptiles,
                     NULL);
}

/* Planes of rows [0, rows) of lhs codes (row stride lda bytes, k columns), and where
   abs_planes is not NULL those of their magnitudes; plane_rows = rows rounded up to 16,
   the planes' rows past `rows` zeroed.  Returns 1 if a code is a NaN, else 0. */
static int lhs_planes(const digit_table *t, const uint8_t *codes, int64_t lda, int64_t rows,
                      int64_t plane_rows, int64_t k, int8_t *planes, int8_t *abs_planes) {
    const int64_t plane = plane_rows * 128;
    for (int64_t kb = 0; kb < k / 128; kb++)
        for (int d = 0; d < 3 && rows < plane_rows; d++) {
            const int64_t o = (kb * 3 + d) * plane + rows * 128;
            memset(planes + o, 0, (plane_rows - rows) * 128);
            if (abs_planes)
                memset(abs_planes + o, 0, (plane_rows - rows) * 128);
        }
    int nan = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t c = 0; c < k; c += 64) {
            const int64_t o = (c / 128) * 3 * plane + i * 128 + c % 128;
            nan |= digits64(t, _mm512_loadu_si512(codes + i * lda + c), planes + o, plane,
                            abs_planes ? abs_planes + o : NULL);
        }
    return nan;
}

/* C_0 .. C_4 (header) of one 16 x 16 output tile and one K block, added into tiles 0-4
   (zero before): a the K block's lhs planes at the row tile (row stride 128 bytes, digit
   planes `plane` bytes apart), b the K block's rhs tiles, ct the column tile. */
static inline void tile_sums(const int8_t *a, int64_t plane, const int8_t *b, int64_t nt,
                             int64_t ct) {
#define TA(i, kk) (a + (i) * plane + (kk) * 64)
#define TB(j, kk) (b + ((int64_t)((j) * 2 + (kk)) * nt + ct) * 1024)
    /* tiles 0-4: C_s; 5 and 7: lhs digits; 6: rhs digit */
    for (int kk = 0; kk < 2; kk++) {
        _tile_loadd(5, TA(0, kk), 128);
        _tile_loadd(7, TA(1, kk), 128);
        _tile_loadd(6, TB(0, kk), 64);
        _tile_dpbssd(0, 5, 6); _tile_dpbssd(1, 7, 6);
        _tile_loadd(6, TB(1, kk), 64);
        _tile_dpbssd(1, 5, 6); _tile_dpbssd(2, 7, 6);
        _tile_loadd(6, TB(2, kk), 64);
        _tile_dpbssd(2, 5, 6); _tile_dpbssd(3, 7, 6);
        _tile_loadd(5, TA(2, kk), 128);
        _tile_loadd(6, TB(0, kk), 64);
        _tile_dpbssd(2, 5, 6);
        _tile_loadd(6, TB(1, kk), 64);
        _tile_dpbssd(3, 5, 6);
        _tile_loadd(6, TB(2, kk), 64);
        _tile_dpbssd(4, 5, 6);
    }
#undef TA
#undef TB
}

/* Tiles 0-4 into c, and zero again. */
static inline void store_sums(int32_t c[5][16][16]) {
    _tile_stored(0, c[0], 64); _tile_stored(1, c[1], 64); _tile_stored(2, c[2], 64);
    _tile_stored(3, c[3], 64); _tile_stored(4, c[4], 64);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); _tile_zero(4);
}

/* Row r's 16 exact partials of a tile, in units of 2^-18: v[0] columns 0-7, v[1] 8-15
   (the header's 2^14 hi + lo, exact in float64). */
static inline void exact_row(int32_t c[5][16][16], int r, __m512d v[2]) {
    const __m512i c0 = _mm512_load_si512(c[0][r]), c1 = _mm512_load_si512(c[1][r]);
    const __m512i c2 = _mm512_load_si512(c[2][r]), c3 = _mm512_load_si512(c[3][r]);
    const __m512i c4 = _mm512_load_si512(c[4][r]);
    const __m512i lo = _mm512_add_epi32(c0, _mm512_slli_epi32(c1, 7));
    const __m512i hi = _mm512_add_epi32(_mm512_add_epi32(c2, _mm512_slli_epi32(c3, 7)),
                                        _mm512_slli_epi32(c4, 14));
    const __m512d c14 = _mm512_set1_pd(0x1p14);
    v[0] = _mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(hi)), c14,
                           _mm512_cvtepi32_pd(_mm512_castsi512_si256(lo)));
    v[1] = _mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(hi, 1)), c14,
                           _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(lo, 1)));
}

/* Where one chunk's partials go: the recipe `code` (0 deepgemm, 1 cublas, 2 tokamax) into
   float32 rows, or (code 3) the exact partials into float64 [k / 128][...][n]. */
typedef struct {
    int64_t code, kbn, n, nb;
    const float *sa; /* [rows][kbn] of the chunk's first row */
    const float *sb; /* [kbn][nb] of the group */
    float *out;      /* code 0-2: the chunk's first output row, row stride ldo floats */
    int64_t ldo;
    double *pout;    /* code 3: block kb, row r at pout + kb * ldk + r * n */
    int64_t ldk;
} sink;

/* Every row of a stashed tile c (of rows r0.., K block kb, column tile ct) below `rows`
   into the sink.  The first K block stores, the others accumulate (a zero start gives the
   same bits: every recipe adds +0 to its first term, as the float64 BLAS path does). */
static void consume_tile(const sink *s, int32_t c[5][16][16], int64_t rows, int64_t r0,
                         int64_t kb, int64_t ct) {
    const int nr = rows - r0 < 16 ? (int)(rows - r0) : 16;
    const int64_t valid = s->n - 16 * ct < 16 ? s->n - 16 * ct : 16;
    __m512d v[2];
    if (s->code == 3) {
        const __mmask8 m0 = (__mmask8)((1u << (valid < 8 ? valid : 8)) - 1);
        const __mmask8 m1 = (__mmask8)(valid > 8 ? (1u << (valid - 8)) - 1 : 0);
        const __m512d c18 = _mm512_set1_pd(0x1p-18);
        double *o = s->pout + kb * s->ldk + r0 * s->n + 16 * ct;
        for (int r = 0; r < nr; r++, o += s->n) {
            exact_row(c, r, v);
            _mm512_mask_storeu_pd(o, m0, _mm512_mul_pd(v[0], c18)); /* exact */
            _mm512_mask_storeu_pd(o + 8, m1, _mm512_mul_pd(v[1], c18));
        }
        return;
    }
    const __mmask16 m = (__mmask16)((1u << valid) - 1);
    const float s_b = s->sb[kb * s->nb + (16 * ct) / 128];
    const float *sa = s->sa + r0 * s->kbn + kb;
    float *o = s->out + r0 * s->ldo + 16 * ct;
    for (int r = 0; r < nr; r++, o += s->ldo, sa += s->kbn) {
        exact_row(c, r, v);
        const __m512 acc = kb ? _mm512_maskz_loadu_ps(m, o) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(o, m, recipe_step(s->code, rn32_row(v), *sa, s_b, acc));
    }
}

/* Rows [0, rows) of one group (a chunk), every K block in order, every column tile, into
   the sink: planes their lhs planes (`lhs_planes`), tiles the group's rhs tiles. */
static void chunk(const int8_t *planes, int64_t rows, const int8_t *tiles, const sink *s) {
    const int64_t nt = (s->n + 15) / 16, plane = (rows + 15) / 16 * 16 * 128;
    /* Two stashes: the tile unit forms one output tile's sums while the vector unit
       consumes the previous one's (each element's K blocks still in K order). */
    _Alignas(64) int32_t c[2][5][16][16];
    int64_t prev[3] = {-1, 0, 0}; /* r0, kb, ct of the stashed tile; r0 < 0: none */
    int buf = 0;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); _tile_zero(4);
    for (int64_t kb = 0; kb < s->kbn; kb++)
        for (int64_t rb = 0; rb < rows; rb += 16 * BLOCK_TILES)
            for (int64_t ct = 0; ct < nt; ct++)
                for (int64_t r0 = rb; r0 < rows && r0 < rb + 16 * BLOCK_TILES; r0 += 16) {
                    tile_sums(planes + kb * 3 * plane + r0 * 128, plane,
                              tiles + kb * 6 * nt * 1024, nt, ct);
                    if (prev[0] >= 0)
                        consume_tile(s, c[buf ^ 1], rows, prev[0], prev[1], prev[2]);
                    store_sums(c[buf]);
                    prev[0] = r0, prev[1] = kb, prev[2] = ct;
                    buf ^= 1;
                }
    if (prev[0] >= 0)
        consume_tile(s, c[buf ^ 1], rows, prev[0], prev[1], prev[2]);
}

/* The gmm recipe `code` (0 deepgemm, 1 cublas, 2 tokamax) for rows [m0, m1) of the output
   (one thread's share; each group's rhs tiles packed once per share it meets):
     a        lhs codes [M][k] (row stride lda bytes);  sa  lhs scales [M][k / 128];
     b        rhs codes [G][k][n];  sb  rhs scales [G][k / 128][nb];
     offs     [G + 1] int64, the first row of each group and the end of the last;
     out      [M][n] float32 (row stride ldo floats): the groups' rows in [m0, m1)
              overwritten, all other rows left alone.
   Returns 0; 1 when an operand it reads holds a NaN code (the output rows then mean
   nothing: the caller takes the float64 BLAS path); -1 (nothing written) when its
   scratch cannot be allocated. */
int fp8check_amx_gmm(uint64_t pa, int64_t lda, int64_t k, uint64_t pb, int64_t n,
                     uint64_t poffs, int64_t g, int64_t m0, int64_t m1, uint64_t psa,
                     uint64_t psb, int64_t nb, int64_t code, uint64_t pout, int64_t ldo) {
    const uint8_t *a = (const uint8_t *)pa, *b = (const uint8_t *)pb;
    const int64_t *offs = (const int64_t *)poffs;
    const int64_t kbn = k / 128, nt = (n + 15) / 16;
    /* 64-byte aligned: a tile row that straddles two cache lines loads far slower */
    int8_t *tiles = aligned_alloc(64, kbn * 3 * (2 * nt * 1024 + CHUNK_ROWS * 128) + 64);
    if (!tiles)
        return -1;
    int8_t *planes = tiles + kbn * 6 * nt * 1024;
    const digit_table t = make_table();
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(0x1F80); /* round to nearest even, no flush-to-zero, no denormals-are-zero */
    configure_tiles();
    int nan = 0;
    for (int64_t gi = 0; gi < g && !nan; gi++) {
        int64_t r0, r1;
        if (!share_rows(offs, gi, m0, m1, &r0, &r1))
            continue;
        if (kbn == 0) {
            for (int64_t r = r0; r < r1; r++)
                memset((float *)pout + r * ldo, 0, n * sizeof(float));
            continue;
        }
        nan |= fp8check_amx_pack_rhs((uint64_t)(b + gi * k * n), k, n, (uint64_t)tiles);
        for (int64_t rb = r0; rb < r1 && !nan; rb += CHUNK_ROWS) {
            const int64_t rows = r1 - rb < CHUNK_ROWS ? r1 - rb : CHUNK_ROWS;
            nan |= lhs_planes(&t, a + rb * lda, lda, rows, (rows + 15) / 16 * 16, k, planes,
                              NULL);
            const sink s = {code, kbn, n, nb, (const float *)psa + rb * kbn,
                            (const float *)psb + gi * kbn * nb, (float *)pout + rb * ldo, ldo,
                            NULL, 0};
            chunk(planes, rows, tiles, &s);
        }
    }
    _tile_release();
    _mm_setcsr(csr);
    free(tiles);
    return nan;
}

/* The exact 128-wide partials of rows [0, rows) of one group, float64 in value units,
   for the exact recipe: a their lhs codes [rows][k] (row stride lda bytes), tiles the
   group's rhs tiles (`fp8check_amx_pack_rhs`), out [k / 128][...][n] float64 with row r
   of block kb at out + kb * ldk + r * n; no NaN codes (the caller checks).  Returns 0,
   or -1 (nothing written) when its scratch cannot be allocated. */
int fp8check_amx_partials(uint64_t pa, int64_t lda, int64_t rows, int64_t k, uint64_t ptiles,
                          int64_t n, uint64_t pout, int64_t ldk) {
    const uint8_t *a = (const uint8_t *)pa;
    int8_t *planes = aligned_alloc(64, k / 128 * 3 * CHUNK_ROWS * 128 + 64);
    if (!planes)
        return -1;
    const digit_table t = make_table();
    configure_tiles();
    for (int64_t rb = 0; rb < rows; rb += CHUNK_ROWS) {
        const int64_t nr = rows - rb < CHUNK_ROWS ? rows - rb : CHUNK_ROWS;
        lhs_planes(&t, a + rb * lda, lda, nr, (nr + 15) / 16 * 16, k, planes, NULL);
        const sink s = {3, k / 128, n, 0, NULL, NULL, NULL, 0, (double *)pout + rb * n, ldk};
        chunk(planes, nr, (const int8_t *)ptiles, &s);
    }
    _tile_release();
    free(planes);
    return 0;
}

/* One output tile's running state across its K blocks, per element: the recipe, the exact
   value's TwoSum state (`exact_step`) and |A||B|'s float64 sum; 7 KiB, in L1 from the
   tile's first K block to its last. */
typedef struct {
    _Alignas(64) float acc[16][16];
    _Alignas(64) double total[16][16], sigma[16][16], mag[16][16];
} tile_state;

/* The rows below `rows` of a stashed tile c and its magnitudes' cabs (rows r0.., K block
   kb, column tile ct) into the tile's state st (`consume_row`); the last K block
   finishes them into the sink instead. */
static void consume_exact(const exact_sink *s, tile_state *st, int32_t c[5][16][16],
                          int32_t cabs[5][16][16], int64_t rows, int64_t r0, int64_t kb,
                          int64_t ct) {
    const int nr = rows - r0 < 16 ? (int)(rows - r0) : 16;
    const int64_t valid = s->n - 16 * ct < 16 ? s->n - 16 * ct : 16;
    const __mmask16 m = (__mmask16)((1u << valid) - 1);
    const float s_b = s->sb[kb * s->nb + (16 * ct) / 128];
    for (int r = 0; r < nr; r++) {
        __m512d v[2], q[2];
        exact_row(c, r, v);
        exact_row(cabs, r, q);
        consume_row(s, st->acc[r], st->total[r], st->sigma[r], st->mag[r], v, q,
                    s->sa[(r0 + r) * s->kbn + kb], s_b, kb, r0 + r, 16 * ct, m);
    }
}

/* Rows [0, rows) of one group (a pass), output tile by output tile, each through all its K
   blocks in order with its state in L1 (`tile_state`: a state per element of the whole
   pass would live in L2 or further and cost a load and a store a K block), into the
   sink: planes and abs_planes the pass's lhs planes and its magnitudes' (`lhs_planes`),
   b the group's rhs codes [k][n], col scratch for `cb` column tiles' rhs tiles and their
   magnitudes' (`rhs_tiles`, 12 k bytes each).  Column blocks of cb tiles outside the
   pass's row tiles: the pass's planes (its rows chosen by the caller to fit in L2) are
   read once a column tile, and a column tile's rhs tiles, made from the codes once a
   pass (six times smaller than the tiles: less to read from L3 than the tiles packed once
   a group), stay in L2 across the pass's row tiles.  Within a block the row tiles go
   outside its column tiles, so that the finished outputs of a row tile go out as row
   pieces of cb tiles' width: a column of 16-wide pieces, each row in another page,
   stored at a fraction of the speed (measured: wo's outputs took most of its time).
   Returns 1 (at once, the sink's rows then meaning nothing) when one of the group's rhs
   codes is a NaN, else 0. */
static int exact_pass(const digit_table *t, const int8_t *planes, const int8_t *abs_planes,
                       int64_t rows, const uint8_t *b, int8_t *col, int64_t cb,
                       const exact_sink *s) {
    const int64_t nt = (s->n + 15) / 16, plane = (rows + 15) / 16 * 16 * 128;
    const int64_t col_size = s->kbn * 6 * 1024;
    /* One stash, consumed right after the unit's tile work: on this CPU (Sapphire Rapids
       class) vector loads and stores interleaved with tile loads and stores wait on them,
       so consuming the previous unit's stash during this one's tile work (two stashes)
       overlapped nothing and measured about 10% slower. */
    _Alignas(64) int32_t c[5][16][16];
    _Alignas(64) int32_t cabs[5][16][16];
    tile_state st;
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); _tile_zero(4);
    for (int64_t c0 = 0; c0 < nt; c0 += cb) {
        const int64_t c1 = nt < c0 + cb ? nt : c0 + cb;
        int nan = 0;
        for (int64_t ct = c0; ct < c1; ct++)
            nan |= rhs_tiles(t, b, s->kbn * 128, s->n, ct, ct + 1,
                             col + (ct - c0) * 2 * col_size, col + ((ct - c0) * 2 + 1) * col_size);
        if (nan)
            return 1;
        for (int64_t r0 = 0; r0 < rows; r0 += 16)
            for (int64_t ct = c0; ct < c1; ct++) {
                const int8_t *tiles = col + (ct - c0) * 2 * col_size, *abs_tiles = tiles + col_size;
                prefetch_metric_rows(s, r0, rows - r0 < 16 ? rows - r0 : 16, 16 * ct, 16);
                for (int64_t kb = 0; kb < s->kbn; kb++) {
                    const int64_t at = kb * 3 * plane + r0 * 128, bt = kb * 6 * 1024;
                    tile_sums(planes + at, plane, tiles + bt, 1, 0);
                    store_sums(c);
                    tile_sums(abs_planes + at, plane, abs_tiles + bt, 1, 0);
                    store_sums(cabs);
                    consume_exact(s, &st, c, cabs, rows, r0, kb, ct);
                }
            }
    }
    return 0;
}

/* The recipe `code` (0-2), the exact value and |A||B| of rows [m0, m1) of the output (one
   thread's share of all the groups: one call for them, not one a group) in one pass over
   their exact partials and those of the magnitudes:
     a        lhs codes [M][k];  sa  lhs scales [M][k / 128];
     b        rhs codes [G][k][n];  sb  rhs scales [G][k / 128][nb];
     offs     [G + 1] int64, the first row of each group and the end of the last.
   Out, each [M][n], the groups' rows in [m0, m1)
   written, all other rows left alone: the recipe float32, the exact value float64
   (`finish_exact`), |A||B| float64 (its sum times `scale`) and undecided uint8 (1 where
   the exact value must be recomputed, else 0); with pmetrics (an exact_gmm.h
   metric_rows, else 0) the first three only where undecided, the others' metrics summed
   into its rows (rows from the call's first).  A group's rows go `rows_per_pass` at a
   time (a multiple of 16, at most CHUNK_ROWS; their planes should fit in L2:
   `exact_pass`).  Returns 0; 1 when a code it reads (the share's lhs rows, the rhs of
   their groups) is a NaN, which the digits cannot carry: it stops there, its outputs
   meaning nothing (the caller takes another path; checking the codes beforehand cost a
   pass over them that this one makes anyway); -1 (nothing written) when its scratch
   cannot be allocated. */
int fp8check_amx_exact_gmm(uint64_t pa, int64_t k, uint64_t pb, int64_t n, uint64_t poffs,
                           int64_t g, int64_t m0, int64_t m1, uint64_t psa, uint64_t psb,
                           int64_t nb, int64_t code, int64_t rows_per_pass, uint64_t pout,
                           uint64_t pexact, uint64_t pmag, uint64_t pundecided, double scale,
                           uint64_t pmetrics) {
    const uint8_t *a = (const uint8_t *)pa, *b = (const uint8_t *)pb;
    const int64_t *offs = (const int64_t *)poffs;
    const int64_t kbn = k / 128, planes_size = kbn * 3 * CHUNK_ROWS * 128;
    /* column blocks of COL_BLOCK_BYTES of rhs tiles, a column tile at least (`exact_pass`) */
    const int64_t cb = COL_BLOCK_BYTES / (kbn * 12 * 1024) > 1 ? COL_BLOCK_BYTES / (kbn * 12 * 1024)
                                                               : 1;
    /* the lhs planes, their magnitudes', cb column tiles' rhs tiles and their magnitudes' */
    int8_t *planes = aligned_alloc(64, 2 * planes_size + cb * kbn * 12 * 1024 + 64);
    if (!planes)
        return -1;
    int8_t *abs_planes = planes + planes_size, *col = abs_planes + planes_size;
    const digit_table t = make_table();
    const unsigned csr = _mm_getcsr();
    _mm_setcsr(0x1F80); /* round to nearest even, no flush-to-zero, no denormals-are-zero */
    configure_tiles();
    int nan = 0;
    for (int64_t gi = 0; gi < g && !nan; gi++) {
        int64_t r0, r1;
        if (!share_rows(offs, gi, m0, m1, &r0, &r1))
            continue;
        for (int64_t rb = r0; rb < r1 && !nan; rb += rows_per_pass) {
            const int64_t nr = r1 - rb < rows_per_pass ? r1 - rb : rows_per_pass;
            const int64_t e = rb * n;
            nan = lhs_planes(&t, a + rb * k, k, nr, (nr + 15) / 16 * 16, k, planes, abs_planes);
            if (nan)
                break;
            const exact_sink s = {code, kbn, n, nb, (const float *)psa + rb * kbn,
                                  (const float *)psb + gi * kbn * nb, (float *)pout + e,
                                  (double *)pexact + e, (double *)pmag + e,
                                  (uint8_t *)pundecided + e, 2.0 * kbn * (kbn + 1) * 0x1p-105,
                                  scale, (const metric_rows *)pmetrics, rb};
            nan = exact_pass(&t, planes, abs_planes, nr, b + gi * k * n, col, cb, &s);
        }
    }
    _tile_release();
    _mm_setcsr(csr);
    free(planes);
    return nan;
}
