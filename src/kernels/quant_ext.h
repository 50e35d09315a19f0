/* quant_ext.h - the packed scales of the K-quants, decoded one group at a time, shared
 * by the reference dequantization (quant_ext.c) and the fast kernels, so the bit layout
 * is written once. Internal to src/kernels.
 *
 * Q4_K/Q5_K: 8 groups of 32, each a 6-bit scale and a 6-bit min in 12 bytes s[]:
 *   groups 0-3: scale = s[g] & 63, min = s[g+4] & 63;
 *   groups 4-7: low 4 bits in s[g+4] (scale: low nibble, min: high nibble), high 2 bits
 *   in the top bits of s[g-4] (scale) and s[g] (min).
 * Q3_K: 16 groups of 16, each a 6-bit scale stored +32 in 12 bytes s[]: low 4 bits in
 *   s[g] (g < 8, low nibble) or s[g-8] (high nibble), high 2 bits at bit 2*(g/4) of s[8 + g%4].
 */
#ifndef TL_KERNELS_QUANT_EXT_H
#define TL_KERNELS_QUANT_EXT_H

#include <stdint.h>

static inline void tl__k4_scale_min(const uint8_t *s, int g, int *scale, int *min) {
    if (g < 4) {
        *scale = s[g] & 63;
        *min = s[g + 4] & 63;
    } else {
        *scale = (s[g + 4] & 0x0f) | ((s[g - 4] >> 6) << 4);
        *min = (s[g + 4] >> 4) | ((s[g] >> 6) << 4);
    }
}

/* Q3_K group g's signed scale (-32..31). */
static inline int tl__q3k_scale(const uint8_t *s, int g) {
    int lo = g < 8 ? s[g] & 0x0f : s[g - 8] >> 4;
    int hi = (s[8 + g % 4] >> (2 * (g / 4))) & 3;
    return (lo | hi << 4) - 32;
}

#endif
