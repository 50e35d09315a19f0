/* quant.c - scalar conversion between f32 and every weight type (reference quality),
 * and the activation rounding of the Q8_0/Q4_0 matmul contract (kernels.h).
 *
 * Invariants: dequantization is exact (every f16/bf16 value, and every d*q of a Q8_0 or
 * Q4_0 block, is representable in f32). Quantization follows GGML's reference rounding
 * so that files we write agree bit for bit with llama.cpp's. Block scales are read and
 * written with memcpy: rows may start at any 2-aligned offset inside a mapped file.
 */
#include <math.h>
#include <string.h>
#include "kernels/kernels.h"

static uint16_t load_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void store_u16(uint8_t *p, uint16_t v) { memcpy(p, &v, sizeof v); }

void tl_dequant_row(tl_type type, const void *src, float *dst, size_t n) {
    const uint8_t *s = src;
    switch (type) {
    case TL_TYPE_F32:
        memcpy(dst, src, n * sizeof(float));
        return;
    case TL_TYPE_F16:
        for (size_t i = 0; i < n; i++) dst[i] = tl_f16_to_f32(load_u16(s + 2 * i));
        return;
    case TL_TYPE_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = tl_bf16_to_f32(load_u16(s + 2 * i));
        return;
    case TL_TYPE_Q8_0:
        for (size_t b = 0; b < n / TL_QK; b++, s += sizeof(tl_block_q8_0)) {
            float d = tl_f16_to_f32(load_u16(s));
            const int8_t *q = (const int8_t *)(s + 2);
            for (int i = 0; i < TL_QK; i++) dst[b * TL_QK + i] = d * (float)q[i];
        }
        return;
    case TL_TYPE_Q4_0:
        for (size_t b = 0; b < n / TL_QK; b++, s += sizeof(tl_block_q4_0)) {
            float d = tl_f16_to_f32(load_u16(s));
            const uint8_t *q = s + 2;
            for (int i = 0; i < TL_QK / 2; i++) {
                dst[b * TL_QK + i] = d * (float)((q[i] & 0x0f) - 8);
                dst[b * TL_QK + i + TL_QK / 2] = d * (float)((q[i] >> 4) - 8);
            }
        }
        return;
    default:
        tl__dequant_row_ext(type, src, dst, n);
        return;
    }
}

void tl_quant_row(tl_type type, const float *src, void *dst, size_t n) {
    uint8_t *o = dst;
    switch (type) {
    case TL_TYPE_F32:
        memcpy(dst, src, n * sizeof(float));
        return;
    case TL_TYPE_F16:
        for (size_t i = 0; i < n; i++) store_u16(o + 2 * i, tl_f32_to_f16(src[i]));
        return;
    case TL_TYPE_BF16:
        for (size_t i = 0; i < n; i++) store_u16(o + 2 * i, tl_f32_to_bf16(src[i]));
        return;
    case TL_TYPE_Q8_0:
        for (size_t b = 0; b < n / TL_QK; b++, o += sizeof(tl_block_q8_0)) {
            const float *x = src + b * TL_QK;
            float amax = 0.0f;
            for (int i = 0; i < TL_QK; i++) amax = fmaxf(amax, fabsf(x[i]));
            float d = amax / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            store_u16(o, tl_f32_to_f16(d));
            int8_t *q = (int8_t *)(o + 2);
            for (int i = 0; i < TL_QK; i++) q[i] = (int8_t)roundf(x[i] * id);
        }
        return;
    case TL_TYPE_Q4_0:
        for (size_t b = 0; b < n / TL_QK; b++, o += sizeof(tl_block_q4_0)) {
            const float *x = src + b * TL_QK;
            float amax = 0.0f, max = 0.0f;
            for (int i = 0; i < TL_QK; i++) {
                if (fabsf(x[i]) > amax) {
                    amax = fabsf(x[i]);
                    max = x[i];
                }
            }
            float d = max / -8.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            store_u16(o, tl_f32_to_f16(d));
            uint8_t *q = o + 2;
            for (int i = 0; i < TL_QK / 2; i++) {
                int8_t lo = (int8_t)(x[i] * id + 8.5f);
                int8_t hi = (int8_t)(x[i + TL_QK / 2] * id + 8.5f);
                uint8_t l = (uint8_t)(lo < 15 ? lo : 15), h = (uint8_t)(hi < 15 ? hi : 15);
                q[i] = (uint8_t)(l | (h << 4));
            }
        }
        return;
    default:
        tl__quant_row_ext(type, src, dst, n);
        return;
    }
}

/* Scale of one activation block: amax/127 in f32. */
static float act_scale(const float *x) {
    float amax = 0.0f;
    for (int i = 0; i < TL_QK; i++) amax = fmaxf(amax, fabsf(x[i]));
    return amax / 127.0f;
}

void tl_quant_act_row(const float *src, tl_block_q8_act *dst, size_t n) {
    for (size_t b = 0; b < n / TL_QK; b++) {
        const float *x = src + b * TL_QK;
        float d = act_scale(x);
        dst[b].d = d;
        for (int i = 0; i < TL_QK; i++) dst[b].q[i] = d != 0.0f ? (int8_t)roundf(x[i] / d) : 0;
    }
}

void tl_round_act_row(const float *src, float *dst, size_t n) {
    for (size_t b = 0; b < n / TL_QK; b++) {
        const float *x = src + b * TL_QK;
        float d = act_scale(x), *o = dst + b * TL_QK;
        for (int i = 0; i < TL_QK; i++) o[i] = d != 0.0f ? d * roundf(x[i] / d) : 0.0f;
    }
}
