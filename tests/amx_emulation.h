/* The AMX tile instructions done in software, so that the AMX kernels' logic (amx_gmm.c,
   amx_bf16.c: digits, packing, the sums' combination, the recipes, the exact pass,
   residual terms, rounding) is tested on CPUs without AMX too: tests/amx_emulation.py
   compiles a kernel with this header forced in first (cc -include).  Semantics per Intel's
   SDM: eight tiles of 16 rows of 64 bytes; TDPB[SU][SU]D C, A, B adds to int32 C[m][n]
   the sum over k < 16, q < 4 of byte A[m][4k + q] times byte B[k][4n + q], each byte
   signed (S) or unsigned (U) as named, A's first. */
#ifndef FP8CHECK_AMX_EMULATION_H
#define FP8CHECK_AMX_EMULATION_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

static __thread uint8_t tiles_emulated[8][16][64];

static inline void load_emulated(int t, const void *base, long stride) {
    for (int r = 0; r < 16; r++)
        memcpy(tiles_emulated[t][r], (const uint8_t *)base + r * stride, 64);
}

static inline void store_emulated(int t, void *base, long stride) {
    for (int r = 0; r < 16; r++)
        memcpy((uint8_t *)base + r * stride, tiles_emulated[t][r], 64);
}

static inline void dot_emulated(int c, int a, int b, int a_signed, int b_signed) {
    int32_t(*C)[16] = (int32_t(*)[16])tiles_emulated[c];
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            int32_t acc = 0;
            for (int k = 0; k < 16; k++)
                for (int q = 0; q < 4; q++) {
                    const uint8_t x = tiles_emulated[a][m][4 * k + q];
                    const uint8_t y = tiles_emulated[b][k][4 * n + q];
                    acc += (a_signed ? (int8_t)x : x) * (b_signed ? (int8_t)y : y);
                }
            C[m][n] += acc;
        }
}

/* immintrin.h defines the intrinsics (as macros, or inline functions that would run the
   real instructions): replaced by the software ones */
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbuud
#undef _tile_dpbusd
#undef _tile_dpbsud
#undef _tile_dpbssd
#define _tile_loadd(t, base, stride) load_emulated(t, base, stride)
#define _tile_stored(t, base, stride) store_emulated(t, base, stride)
#define _tile_zero(t) memset(tiles_emulated[t], 0, sizeof tiles_emulated[t])
#define _tile_dpbuud(c, a, b) dot_emulated(c, a, b, 0, 0)
#define _tile_dpbusd(c, a, b) dot_emulated(c, a, b, 0, 1)
#define _tile_dpbsud(c, a, b) dot_emulated(c, a, b, 1, 0)
#define _tile_dpbssd(c, a, b) dot_emulated(c, a, b, 1, 1)
#define _tile_loadconfig(config) ((void)(config))
#define _tile_release() ((void)0)

#endif
