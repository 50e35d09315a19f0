/* x86_panels.h - packing Q8_0 / Q4_0 weight rows into 32-row panel blocks (kernels.h's
 * layout), shared by the int8 GEMMs (x86avx512_gemm.c, x86vnni_gemm.c) and the in-place
 * repack. Internal to src/kernels; AVX2 instructions only, so every x86 kernel file can
 * include it.
 */
#ifndef TL_KERNELS_X86_PANELS_H
#define TL_KERNELS_X86_PANELS_H

#include <string.h>
#include "kernels/x86_dequant.h"

#define PANEL_NR TL_PANEL_ROWS

/* Bytes of one block of a panel: 32 rows' blocks. */
static inline size_t block_panel_bytes(tl_type type) { return PANEL_NR * tl_type_block_bytes(type); }

/* Packs block b of the nj (<= 32) weight rows at W (row_bytes apart) into one panel block
 * at dst (kernels.h's layout); rows past nj get zero scales and zero weights. */
static ALWAYS_INLINE void pack_block(tl_type type, const uint8_t *W, size_t row_bytes,
                                     size_t b, size_t nj, uint8_t *dst) {
    const size_t bb = tl_type_block_bytes(type);
    const uint8_t *src = W + b * bb;
    uint16_t *scale = (uint16_t *)(void *)dst;
    uint8_t *q = dst + PANEL_NR * 2;
    UNROLL
    for (size_t j = 0; j < PANEL_NR; j++) {
        uint16_t d = 0;
        if (j < nj) memcpy(&d, src + j * row_bytes, 2);
        scale[j] = d;
    }
    if (type == TL_TYPE_Q8_0) { /* w + 128 as unsigned bytes; 8 rows transposed at once */
        const __m256i flip = _mm256_set1_epi8((char)0x80);
        for (size_t j8 = 0; j8 < PANEL_NR; j8 += 8) {
            __m256 r[8];
            UNROLL
            for (size_t t = 0; t < 8; t++) {
                const size_t j = j8 + t;
                __m256i v = j < nj ? _mm256_xor_si256(loadu256(src + j * row_bytes + 2), flip) : flip;
                r[t] = _mm256_castsi256_ps(v);
            }
            transpose8_regs(r, (float *)(void *)(q + j8 * 4), PANEL_NR);
        }
    } else { /* Q4_0: the 4 dwords of each row's 16 quant bytes, 4 rows transposed at once */
        const __m128i eights = _mm_set1_epi8((char)0x88);
        for (size_t j4 = 0; j4 < PANEL_NR; j4 += 4) {
            __m128 r0, r1, r2, r3;
            r0 = _mm_castsi128_ps(j4 + 0 < nj ? loadu128(src + (j4 + 0) * row_bytes + 2) : eights);
            r1 = _mm_castsi128_ps(j4 + 1 < nj ? loadu128(src + (j4 + 1) * row_bytes + 2) : eights);
            r2 = _mm_castsi128_ps(j4 + 2 < nj ? loadu128(src + (j4 + 2) * row_bytes + 2) : eights);
            r3 = _mm_castsi128_ps(j4 + 3 < nj ? loadu128(src + (j4 + 3) * row_bytes + 2) : eights);
            _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
            _mm_storeu_ps((float *)(void *)(q + 0 * PANEL_NR * 4 + j4 * 4), r0);
            _mm_storeu_ps((float *)(void *)(q + 1 * PANEL_NR * 4 + j4 * 4), r1);
            _mm_storeu_ps((float *)(void *)(q + 2 * PANEL_NR * 4 + j4 * 4), r2);
            _mm_storeu_ps((float *)(void *)(q + 3 * PANEL_NR * 4 + j4 * 4), r3);
        }
    }
}

/* pack_block specialized by type, and for whole panels (the in-place repack). */
static inline void pack_block_part(tl_type type, const uint8_t *W, size_t row_bytes, size_t b,
                                   size_t nj, uint8_t *dst) {
    if (type == TL_TYPE_Q8_0) pack_block(TL_TYPE_Q8_0, W, row_bytes, b, nj, dst);
    else pack_block(TL_TYPE_Q4_0, W, row_bytes, b, nj, dst);
}
static inline void pack_block_full(tl_type type, const uint8_t *W, size_t row_bytes, size_t b,
                                   uint8_t *dst) {
    if (type == TL_TYPE_Q8_0) pack_block(TL_TYPE_Q8_0, W, row_bytes, b, PANEL_NR, dst);
    else pack_block(TL_TYPE_Q4_0, W, row_bytes, b, PANEL_NR, dst);
}

#endif
