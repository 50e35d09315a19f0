/* kv_quant.c - FlexGen's group-wise KV quantization of one row (kv_cache.h).
 * Row layout, per group of `group` values in order: min (f32), scale (f32), then the
 * group's codes: 8 bits one byte each; 4 bits two per byte, low nibble first (group is
 * even, so a group's codes start on a byte boundary). Codes: q = round((x - min) / scale)
 * clamped to [0, 2^bits - 1]; scale = (max - min) / (2^bits - 1), and q = 0 when the
 * scale is 0. Decoding: x' = min + q * scale, so |x - x'| <= scale / 2 (plus rounding).
 * Preconditions (programmer errors, not checked): group > 0, n a multiple of group,
 * bits 8 or 4, group even for 4 bits. Non-finite inputs give garbage codes, never UB. */
#include <string.h>
#include "kv/kv_cache.h"

size_t tl_kv_quant_row_bytes(int32_t n, int32_t group, int32_t bits) {
    if (n <= 0 || group <= 0 || bits <= 0) return 0;
    return (size_t)(n / group) * 8 + (size_t)n * (size_t)bits / 8;
}

void tl_kv_quant_row(const float *x, int32_t n, int32_t group, int32_t bits, uint8_t *out) {
    const float qmax = (float)((1 << bits) - 1);
    const size_t code_bytes = (size_t)group * (size_t)bits / 8;
    for (int32_t g0 = 0; g0 + group <= n; g0 += group) {
        const float *xg = x + g0;
        float mn = xg[0], mx = xg[0];
        for (int32_t j = 1; j < group; j++) {
            if (xg[j] < mn) mn = xg[j];
            if (xg[j] > mx) mx = xg[j];
        }
        float scale = mx > mn ? (mx - mn) / qmax : 0.0f;
        memcpy(out, &mn, 4);
        memcpy(out + 4, &scale, 4);
        uint8_t *c = out + 8;
        if (bits == 4) memset(c, 0, code_bytes);
        for (int32_t j = 0; j < group; j++) {
            float t = scale > 0 ? (xg[j] - mn) / scale : 0.0f;
            if (!(t >= 0.0f)) t = 0.0f; /* also NaN */
            if (t > qmax) t = qmax;
            unsigned q = (unsigned)(t + 0.5f);
            if (q > (unsigned)qmax) q = (unsigned)qmax;
            if (bits == 8)
                c[j] = (uint8_t)q;
            else
                c[j / 2] |= (uint8_t)(j % 2 ? q << 4 : q);
        }
        out += 8 + code_bytes;
    }
}

void tl_kv_dequant_row(const uint8_t *in, int32_t n, int32_t group, int32_t bits, float *x) {
    const size_t code_bytes = (size_t)group * (size_t)bits / 8;
    for (int32_t g0 = 0; g0 + group <= n; g0 += group) {
        float mn, scale;
        memcpy(&mn, in, 4);
        memcpy(&scale, in + 4, 4);
        const uint8_t *c = in + 8;
        for (int32_t j = 0; j < group; j++) {
            unsigned q = bits == 8 ? c[j] : (unsigned)(j % 2 ? c[j / 2] >> 4 : c[j / 2] & 15);
            x[g0 + j] = mn + (float)q * scale;
        }
        in += 8 + code_bytes;
    }
}
