/* Exact 128-wide K-block partials of e4m3fn operands on AMX int8 tiles (fp8check).

   An e4m3fn value times 2^9 is an integer X with |X| <= 448 * 2^9 < 2^18, written as three
   signed 7-bit digits d_0 + d_1 2^7 + d_2 2^14 (|d| <= 127, all of X's sign).  A K block's
   partial sum_k a_k b_k is then sum over digit pairs (i, j) of 2^(7 (i + j)) times an int8
   dot product, which TDPBSSD computes exactly in int32: |C_s| <= 3 * 128 * 127^2 < 2^23
   for the (at most three) pairs of one shift s = i + j.  The partial sum_s C_s 2^(7 s),
   evaluated by Horner's rule in float64, has every intermediate an integer below
   2^23 (1 + 2^7 + ... + 2^28) < 2^52, so it is exact (with or without fma), and times
   2^-18 it is the partial in value units: the float64 the float64 BLAS path returns,
   here rounded once to the float32 that the recipes consume.

   Layouts (references/amx.py and references/gmm.py build them):
     a    [3][plane_rows][128] int8: digit planes of one K block of the lhs rows;
     b    [3][2][nt][16][64] int8: digit planes of one K block of the rhs, each 16 x 64
          byte tile contiguous: element [k4][4 col + t] of tile [d][kk][ct] is digit d of
          rhs[64 kk + 4 k4 + t][16 ct + col];
     out  [nrows][16 nct] float32.
*/
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tile_config;

/* Ask Linux for the AMX tile state (once per process); 0 on success. */
int fp8check_amx_init(void) {
    return (int)syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
}

#define TILE_B(j, kk) (b + ((int64_t)((j) * 2 + (kk)) * nt + ct) * 1024)
#define TILE_A(i, kk) (a + ((int64_t)(i) * plane_rows + r0) * 128 + (kk) * 64)

/* Rows [row0, row0 + nrows) (multiples of 16) of the lhs digit planes a [3][plane_rows][128]
   times column tiles [ct0, ct0 + nct) of one K block's rhs tiles b [3][2][nt][16][64]
   -> out [nrows][16 nct] float32, the exact partials rounded once (RN). */
void fp8check_amx_e4m3_partials(uint64_t pa, int64_t plane_rows, int64_t row0, int64_t nrows,
                                uint64_t pb, int64_t nt, int64_t ct0, int64_t nct,
                                uint64_t pout) {
    const int8_t *a = (const int8_t *)pa;
    const int8_t *b = (const int8_t *)pb;
    float *out = (float *)pout;
    const int64_t width = 16 * nct;
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    int32_t c[5][16][16];
    for (int64_t r0 = row0; r0 < row0 + nrows; r0 += 16) {
        for (int64_t ct = ct0; ct < ct0 + nct; ct++) {
            /* tiles 0-4: C_s; 5 and 7: lhs digits; 6: rhs digit */
            _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3); _tile_zero(4);
            for (int kk = 0; kk < 2; kk++) {
                _tile_loadd(5, TILE_A(0, kk), 128);
                _tile_loadd(7, TILE_A(1, kk), 128);
                _tile_loadd(6, TILE_B(0, kk), 64);
                _tile_dpbssd(0, 5, 6); _tile_dpbssd(1, 7, 6);
                _tile_loadd(6, TILE_B(1, kk), 64);
                _tile_dpbssd(1, 5, 6); _tile_dpbssd(2, 7, 6);
                _tile_loadd(6, TILE_B(2, kk), 64);
                _tile_dpbssd(2, 5, 6); _tile_dpbssd(3, 7, 6);
                _tile_loadd(5, TILE_A(2, kk), 128);
                _tile_loadd(6, TILE_B(0, kk), 64);
                _tile_dpbssd(2, 5, 6);
                _tile_loadd(6, TILE_B(1, kk), 64);
                _tile_dpbssd(3, 5, 6);
                _tile_loadd(6, TILE_B(2, kk), 64);
                _tile_dpbssd(4, 5, 6);
            }
            _tile_stored(0, c[0], 64); _tile_stored(1, c[1], 64); _tile_stored(2, c[2], 64);
            _tile_stored(3, c[3], 64); _tile_stored(4, c[4], 64);
            /* integers < 2^53 at every step: the float64 sum is exact; one rounding to
               float32 (round to nearest even) */
            for (int r = 0; r < 16; r++) {
                float *o = out + (r0 - row0 + r) * width + 16 * (ct - ct0);
                for (int q = 0; q < 16; q++) {
                    double v = (double)c[4][r][q];
                    v = v * 128.0 + (double)c[3][r][q];
                    v = v * 128.0 + (double)c[2][r][q];
                    v = v * 128.0 + (double)c[1][r][q];
                    v = v * 128.0 + (double)c[0][r][q];
                    o[q] = (float)(v * 0x1p-18);
                }
            }
        }
    }
    _tile_release();
}

/* The digit planes of 64 codes: table[d] holds digit d of the 128 non-negative codes
   (two 64-byte halves); a negative code's digits are the negated ones (sign-magnitude,
   see amx.py).  AVX512-VBMI byte permutes: 64 table lookups an instruction. */
typedef struct { __m512i lo[3], hi[3]; } digit_table;

static digit_table load_table(const int8_t *table /* [3][256] */) {
    digit_table t;
    for (int d = 0; d < 3; d++) {
        t.lo[d] = _mm512_loadu_si512(table + 256 * d);
        t.hi[d] = _mm512_loadu_si512(table + 256 * d + 64);
    }
    return t;
}

static inline void digits64(const digit_table *t, __m512i codes, int8_t *o0, int8_t *o1,
                            int8_t *o2) {
    __mmask64 neg = _mm512_movepi8_mask(codes);
    __m512i mag = _mm512_and_si512(codes, _mm512_set1_epi8(0x7F));
    int8_t *out[3] = {o0, o1, o2};
    for (int d = 0; d < 3; d++) {
        __m512i v = _mm512_permutex2var_epi8(t->lo[d], mag, t->hi[d]);
        v = _mm512_mask_sub_epi8(v, neg, _mm512_setzero_si512(), v);
        _mm512_storeu_si512(out[d], v);
    }
}

/* lhs digit planes: codes [rows][k] (row stride `stride` bytes) -> planes
   [k / 128][3][plane_rows][128] (rows < plane_rows are written, the rest left alone). */
void fp8check_e4m3_lhs_planes(uint64_t pcodes, int64_t stride, int64_t rows, int64_t k,
                              uint64_t ptable, uint64_t pplanes, int64_t plane_rows) {
    const uint8_t *codes = (const uint8_t *)pcodes;
    int8_t *planes = (int8_t *)pplanes;
    digit_table t = load_table((const int8_t *)ptable);
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t c = 0; c < k; c += 64) {
            int64_t kb = c / 128, col = c % 128;
            int8_t *base = planes + ((kb * 3) * plane_rows + i) * 128 + col;
            digits64(&t, _mm512_loadu_si512(codes + i * stride + c), base,
                     base + plane_rows * 128, base + 2 * plane_rows * 128);
        }
    }
}

/* rhs digit tiles of one expert: codes [k][n] -> tiles [k / 128][3][2][n / 16][16][64],
   element [k4][4 col + t] of tile [kb][d][kk][ct] = digit d of codes[128 kb + 64 kk +
   4 k4 + t][16 ct + col]: four 16-byte row pieces, interleaved by one byte permute. */
void fp8check_e4m3_rhs_tiles(uint64_t pcodes, int64_t k, int64_t n, uint64_t ptable,
                             uint64_t ptiles) {
    const uint8_t *codes = (const uint8_t *)pcodes;
    int8_t *tiles = (int8_t *)ptiles;
    digit_table t = load_table((const int8_t *)ptable);
    uint8_t perm[64];
    for (int col = 0; col < 16; col++)
        for (int r = 0; r < 4; r++)
            perm[4 * col + r] = (uint8_t)(16 * r + col);
    __m512i interleave = _mm512_loadu_si512(perm);
    const int64_t nt = n / 16, plane = 2 * nt * 1024;  /* bytes of one digit's tiles */
    for (int64_t kb = 0; kb < k / 128; kb++)
        for (int kk = 0; kk < 2; kk++)
            for (int k4 = 0; k4 < 16; k4++) {
                const uint8_t *row = codes + (128 * kb + 64 * kk + 4 * k4) * n;
                for (int64_t ct = 0; ct < nt; ct++) {
                    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const void *)(row + 16 * ct)));
                    v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(row + n + 16 * ct)), 1);
                    v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(row + 2 * n + 16 * ct)), 2);
                    v = _mm512_inserti32x4(v, _mm_loadu_si128((const void *)(row + 3 * n + 16 * ct)), 3);
                    v = _mm512_permutexvar_epi8(interleave, v);
                    int8_t *o = tiles + kb * 3 * plane + ((int64_t)kk * nt + ct) * 1024 + 64 * k4;
                    digits64(&t, v, o, o + plane, o + 2 * plane);
                }
            }
}
