/* Exact 128-wide K-block partials of e4m3fn operands on AMX int8 tiles (fp8check).

   An e4m3fn value times 2^9 is an integer X with |X| <= 448 * 2^9 < 2^18, written as three
   signed 7-bit digits d_0 + d_1 2^7 + d_2 2^14 (|d| <= 127, all of X's sign).  A K block's
   partial sum_k a_k b_k is then sum over digit pairs (i, j) of 2^(7 (i + j)) times an int8
   dot product, which TDPBSSD computes exactly in int32: |C_s| <= 3 * 128 * 127^2 < 2^23
   for the (at most three) pairs of one shift s = i + j.  The partial sum_s C_s 2^(7 s),
   evaluated by Horner's rule in float64, has every intermediate an integer below
   2^23 (1 + 2^7 + ... + 2^28) < 2^52, so it is exact (with or without fma), and times
   2^-18 it is the partial in value units: the same float64 the float64 BLAS path returns.

   Layouts (references/amx.py and references/gmm.py build them):
     a    [3][plane_rows][128] int8: digit planes of one K block of the lhs rows;
     b    [3][2][nt][16][64] int8: digit planes of one K block of the rhs, each 16 x 64
          byte tile contiguous: element [k4][4 col + t] of tile [d][kk][ct] is digit d of
          rhs[64 kk + 4 k4 + t][16 ct + col];
     out  [nrows][16 nct] float64.
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
   -> out [nrows][16 nct] float64, the exact partials. */
void fp8check_amx_e4m3_partials(uint64_t pa, int64_t plane_rows, int64_t row0, int64_t nrows,
                                uint64_t pb, int64_t nt, int64_t ct0, int64_t nct,
                                uint64_t pout) {
    const int8_t *a = (const int8_t *)pa;
    const int8_t *b = (const int8_t *)pb;
    double *out = (double *)pout;
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
            /* integers < 2^53 at every step: the float64 sum is exact */
            for (int r = 0; r < 16; r++) {
                double *o = out + (r0 - row0 + r) * width + 16 * (ct - ct0);
                for (int q = 0; q < 16; q++) {
                    double v = (double)c[4][r][q];
                    v = v * 128.0 + (double)c[3][r][q];
                    v = v * 128.0 + (double)c[2][r][q];
                    v = v * 128.0 + (double)c[1][r][q];
                    v = v * 128.0 + (double)c[0][r][q];
                    o[q] = v * 0x1p-18;
                }
            }
        }
    }
    _tile_release();
}
