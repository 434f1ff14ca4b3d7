/* The micro-kernel both AVX512-VNNI kernels share (fp8check: vnni_gmm.c, vnni_bf16.c):
   the int16 dot products of three digits of 8 rows and 16 columns over up to 64 pairs of
   positions, into int32 lanes. */
#ifndef FP8CHECK_VNNI_DOTS_H
#define FP8CHECK_VNNI_DOTS_H

#include <immintrin.h>
#include <stdint.h>

#define DOT_ROWS 8   /* rows: 24 accumulators + 3 column vectors in the 32 registers */
#define DOT_PAIRS 64 /* position pairs of a panel: a K block of 128 */

#define DECL(r) __m512i acc_##r##_0 = add ? acc[r][0] : _mm512_setzero_si512(), \
                        acc_##r##_1 = add ? acc[r][1] : acc_##r##_0, \
                        acc_##r##_2 = add ? acc[r][2] : acc_##r##_0;
#define DOT(acc, b, x) __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(b), "m"(x))
#define DOTS(r)                                                 \
    DOT(acc_##r##_0, b0, a[3 * DOT_PAIRS * r + p]);                 \
    DOT(acc_##r##_1, b1, a[3 * DOT_PAIRS * r + DOT_PAIRS + p]);     \
    DOT(acc_##r##_2, b2, a[3 * DOT_PAIRS * r + 2 * DOT_PAIRS + p]);
#define SAVE(r) acc[r][0] = acc_##r##_0; acc[r][1] = acc_##r##_1; acc[r][2] = acc_##r##_2;

/* acc[r][d], int32 lane c: the sum over pairs p < `pairs` (from zero, or with `add`
   from acc[r][d]'s lane) of the dot product of row r's pair p of digit d (the int32
   a[(3 r + d) DOT_PAIRS + p]: two int16) and column c's (int16 lanes 2c, 2c + 1 of the 32
   at b + 96 p + 32 d), VPDPWSSD's exact products added with wrap-around.  a: a panel
   [DOT_ROWS][3][DOT_PAIRS] int32; b: one column vector's digits [DOT_PAIRS][3][32] int16.
   The 24 accumulators are named variables and the dot product one instruction of inline
   assembly (VPDPWSSD with the a pair broadcast from memory): with the intrinsic, gcc
   copies the accumulators around and spills them. */
__attribute__((always_inline)) static inline void dots(const int32_t *a, const int16_t *b,
                                                       int64_t pairs, int add,
                                                       __m512i acc[DOT_ROWS][3]) {
    DECL(0) DECL(1) DECL(2) DECL(3) DECL(4) DECL(5) DECL(6) DECL(7)
    for (int64_t p = 0; p < pairs; p++) {
        const __m512i b0 = _mm512_loadu_si512(b + 96 * p);
        const __m512i b1 = _mm512_loadu_si512(b + 96 * p + 32);
        const __m512i b2 = _mm512_loadu_si512(b + 96 * p + 64);
        DOTS(0) DOTS(1) DOTS(2) DOTS(3) DOTS(4) DOTS(5) DOTS(6) DOTS(7)
    }
    SAVE(0) SAVE(1) SAVE(2) SAVE(3) SAVE(4) SAVE(5) SAVE(6) SAVE(7)
}

#undef DECL
#undef DOT
#undef DOTS
#undef SAVE

#endif
