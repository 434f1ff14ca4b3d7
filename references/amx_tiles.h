/* The AMX tile configuration both AMX kernels use (references/amx_gmm.c, amx_bf16.c):
   eight 16 x 64-byte tiles.  The tile state itself is granted per process by
   references/amx.py's library (`fp8check_amx_init`). */
#ifndef FP8CHECK_AMX_TILES_H
#define FP8CHECK_AMX_TILES_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((packed)) tile_config;

/* Eight 16 x 64-byte tiles, for the calling thread (tile configuration is per thread:
   each exported call configures its own). */
static inline void configure_tiles(void) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

#endif
