/* quant_ext.c - the GGML types beyond Q8_0/Q4_0, in scalar code to be read: the 32-element
 * affine types Q4_1, Q5_0, Q5_1 and the 256-element K-quants Q2_K..Q6_K. Dequantization
 * is their definition; quantization (used by `synth` and the tests) writes valid blocks;
 * and the K-quants' activation rounding is the 256-block rule of kernels.h's contract.
 *
 * Invariants:
 *  - Dequantization computes each value in f32 with GGML's reference expressions and
 *    operation order (e.g. Q4_K: (d*scale)*q - (dmin*min)); the build never contracts
 *    them into FMAs (ISO C mode), so values agree bit for bit with GGML's and with the
 *    NumPy reference (tests/ref/gguf_np.py).
 *  - Quantization is a plain min/max fit per group, not GGML's iterative search: files are
 *    valid and decode as described, but their bits differ from llama.cpp's quantizer.
 *  - Scales are read and written with memcpy: blocks may start at any 2-aligned offset.
 */
#include <math.h>
#include <string.h>
#include "kernels/kernels.h"
#include "kernels/quant_ext.h"

static float f16_at(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return tl_f16_to_f32(v);
}

static void put_f16(uint8_t *p, float f) {
    uint16_t v = tl_f32_to_f16(f);
    memcpy(p, &v, sizeof v);
}

/* ---- dequantization ---- */

/* Q4_1/Q5_0/Q5_1: the 4 low bits from q[] (element e < 16: low nibble of byte e, else high
 * nibble of byte e-16), the 5th bit from qh (bit e). */
static void dequant_q32(tl_type type, const uint8_t *s, float *y, size_t n) {
    const size_t bb = tl_type_block_bytes(type);
    for (size_t b = 0; b < n / TL_QK; b++, s += bb, y += TL_QK) {
        const float d = f16_at(s);
        const int has_min = type != TL_TYPE_Q5_0, five = type != TL_TYPE_Q4_1;
        const float m = has_min ? f16_at(s + 2) : 0.0f;
        const uint8_t *p = s + (has_min ? 4 : 2);
        uint32_t qh = 0;
        if (five) {
            memcpy(&qh, p, 4);
            p += 4;
        }
        for (int e = 0; e < TL_QK; e++) {
            int q = e < 16 ? p[e] & 0x0f : p[e - 16] >> 4;
            if (five) q |= (int)((qh >> e) & 1) << 4;
            if (type == TL_TYPE_Q5_0) y[e] = (float)(q - 16) * d;
            else y[e] = (float)q * d + m;
        }
    }
}

static void dequant_q2_k(const uint8_t *s, float *y, size_t n) {
    for (size_t b = 0; b < n / TL_QK_K; b++, s += sizeof(tl_block_q2_k), y += TL_QK_K) {
        const tl_block_q2_k *x = (const void *)s;
        const float d = f16_at(s + offsetof(tl_block_q2_k, d));
        const float dmin = f16_at(s + offsetof(tl_block_q2_k, dmin));
        for (int g = 0; g < 16; g++) {
            const float dl = d * (float)(x->scales[g] & 0x0f), ml = dmin * (float)(x->scales[g] >> 4);
            const uint8_t *q = x->q + 32 * (g / 8) + 16 * (g & 1);
            const int shift = 2 * ((g % 8) / 2);
            for (int l = 0; l < 16; l++) y[16 * g + l] = dl * (float)((q[l] >> shift) & 3) - ml;
        }
    }
}

static void dequant_q3_k(const uint8_t *s, float *y, size_t n) {
    for (size_t b = 0; b < n / TL_QK_K; b++, s += sizeof(tl_block_q3_k), y += TL_QK_K) {
        const tl_block_q3_k *x = (const void *)s;
        const float d = f16_at(s + offsetof(tl_block_q3_k, d));
        for (int g = 0; g < 16; g++) {
            const float dl = d * (float)tl__q3k_scale(x->scales, g);
            const int h = g / 8, j = (g % 8) / 2, half = g & 1;
            const uint8_t *q = x->q + 32 * h + 16 * half, *hm = x->hmask + 16 * half;
            for (int l = 0; l < 16; l++) {
                int v = ((q[l] >> (2 * j)) & 3) - ((hm[l] >> (4 * h + j)) & 1 ? 0 : 4);
                y[16 * g + l] = dl * (float)v;
            }
        }
    }
}

/* Q4_K, and Q5_K when qh is given (bit g of qh[l] is the 5th bit of group g's element l). */
static void dequant_q45_k(int five, const uint8_t *s, float *y, size_t n) {
    const size_t bb = five ? sizeof(tl_block_q5_k) : sizeof(tl_block_q4_k);
    for (size_t b = 0; b < n / TL_QK_K; b++, s += bb, y += TL_QK_K) {
        const float d = f16_at(s), dmin = f16_at(s + 2);
        const uint8_t *scales = s + 4, *qh = s + 16, *qs = s + (five ? 48 : 16);
        for (int g = 0; g < 8; g++) {
            int sc, mn;
            tl__k4_scale_min(scales, g, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            const uint8_t *q = qs + 32 * (g / 2);
            for (int l = 0; l < 32; l++) {
                int v = g & 1 ? q[l] >> 4 : q[l] & 0x0f;
                if (five) v += (qh[l] >> g) & 1 ? 16 : 0;
                y[32 * g + l] = d1 * (float)v - m1;
            }
        }
    }
}

/* Q6_K element e of a block: in half h = e/128, at p = (e%128)/32, l = e%32: low 4 bits
 * from ql[64h + 32(p&1) + l] (low nibble for p < 2), high 2 bits at bit 2p of qh[32h + l]. */
static void dequant_q6_k(const uint8_t *s, float *y, size_t n) {
    for (size_t b = 0; b < n / TL_QK_K; b++, s += sizeof(tl_block_q6_k), y += TL_QK_K) {
        const tl_block_q6_k *x = (const void *)s;
        const float d = f16_at(s + offsetof(tl_block_q6_k, d));
        for (int e = 0; e < TL_QK_K; e++) {
            const int h = e / 128, p = (e % 128) / 32, l = e % 32;
            const uint8_t lo = x->ql[64 * h + 32 * (p & 1) + l];
            const int v = ((p < 2 ? lo & 0x0f : lo >> 4) | ((x->qh[32 * h + l] >> (2 * p)) & 3) << 4) - 32;
            y[e] = d * (float)x->scales[e / 16] * (float)v;
        }
    }
}

void tl__dequant_row_ext(tl_type type, const void *src, float *dst, size_t n) {
    switch (type) {
    case TL_TYPE_Q4_1: case TL_TYPE_Q5_0: case TL_TYPE_Q5_1: dequant_q32(type, src, dst, n); return;
    case TL_TYPE_Q2_K: dequant_q2_k(src, dst, n); return;
    case TL_TYPE_Q3_K: dequant_q3_k(src, dst, n); return;
    case TL_TYPE_Q4_K: dequant_q45_k(0, src, dst, n); return;
    case TL_TYPE_Q5_K: dequant_q45_k(1, src, dst, n); return;
    case TL_TYPE_Q6_K: dequant_q6_k(src, dst, n); return;
    default: return;
    }
}

/* ---- quantization ---- */

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Q4_1/Q5_1: GGML's reference (d = (max-min)/levels, m = min); Q5_0: as Q4_0 with 32
 * levels (d = max/-16 for the value of largest magnitude). */
static void quant_q32(tl_type type, const float *x, uint8_t *o, size_t n) {
    const size_t bb = tl_type_block_bytes(type);
    for (size_t b = 0; b < n / TL_QK; b++, o += bb, x += TL_QK) {
        memset(o, 0, bb);
        int q[TL_QK];
        if (type == TL_TYPE_Q5_0) {
            float amax = 0.0f, max = 0.0f;
            for (int e = 0; e < TL_QK; e++)
                if (fabsf(x[e]) > amax) { amax = fabsf(x[e]); max = x[e]; }
            const float d = max / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            put_f16(o, d);
            for (int e = 0; e < TL_QK; e++) q[e] = clampi((int)(x[e] * id + 16.5f), 0, 31);
        } else {
            float mn = x[0], mx = x[0];
            for (int e = 1; e < TL_QK; e++) { mn = fminf(mn, x[e]); mx = fmaxf(mx, x[e]); }
            const int levels = type == TL_TYPE_Q4_1 ? 15 : 31;
            const float d = (mx - mn) / (float)levels, id = d != 0.0f ? 1.0f / d : 0.0f;
            put_f16(o, d);
            put_f16(o + 2, mn);
            for (int e = 0; e < TL_QK; e++) q[e] = clampi((int)((x[e] - mn) * id + 0.5f), 0, levels);
        }
        uint8_t *p = o + (type == TL_TYPE_Q5_0 ? 2 : 4);
        if (type != TL_TYPE_Q4_1) {
            uint32_t qh = 0;
            for (int e = 0; e < TL_QK; e++) qh |= (uint32_t)(q[e] >> 4) << e;
            memcpy(p, &qh, 4);
            p += 4;
        }
        for (int e = 0; e < 16; e++) p[e] = (uint8_t)((q[e] & 0x0f) | (q[e + 16] & 0x0f) << 4);
    }
}

/* Per group of gs elements an affine fit x ~ scale*q - min (q in [0, levels], min >= 0),
 * its scale and min then rounded to `sbits`-bit multiples of the block's d and dmin. The
 * group's quants are re-fitted to the rounded scale and min. */
static void fit_affine(const float *x, int groups, int gs, int levels, int sbits, int *sc,
                       int *mn, int *q, float *d_out, float *dmin_out) {
    float scale[16], min[16], max_scale = 0.0f, max_min = 0.0f;
    for (int g = 0; g < groups; g++) {
        float lo = 0.0f, hi = 0.0f;
        for (int l = 0; l < gs; l++) { lo = fminf(lo, x[g * gs + l]); hi = fmaxf(hi, x[g * gs + l]); }
        scale[g] = (hi - lo) / (float)levels;
        min[g] = -lo;
        max_scale = fmaxf(max_scale, scale[g]);
        max_min = fmaxf(max_min, min[g]);
    }
    const int top = (1 << sbits) - 1;
    const float d = tl_f16_to_f32(tl_f32_to_f16(max_scale / (float)top));
    const float dmin = tl_f16_to_f32(tl_f32_to_f16(max_min / (float)top));
    for (int g = 0; g < groups; g++) {
        sc[g] = d > 0.0f ? clampi((int)lrintf(scale[g] / d), 0, top) : 0;
        mn[g] = dmin > 0.0f ? clampi((int)lrintf(min[g] / dmin), 0, top) : 0;
        const float s = d * (float)sc[g], m = dmin * (float)mn[g];
        for (int l = 0; l < gs; l++)
            q[g * gs + l] = s > 0.0f ? clampi((int)lrintf((x[g * gs + l] + m) / s), 0, levels) : 0;
    }
    *d_out = d;
    *dmin_out = dmin;
}

/* Per group of 16 a symmetric fit x ~ scale*q (q in [-half, half-1]), the scales rounded to
 * signed multiples of d (|scale/d| <= smax); quants re-fitted to the rounded scales. */
static void fit_symmetric(const float *x, int half, int smax, int *sc, int *q, float *d_out) {
    float scale[16], amax_scale = 0.0f;
    for (int g = 0; g < 16; g++) {
        float amax = 0.0f, max = 0.0f;
        for (int l = 0; l < 16; l++)
            if (fabsf(x[16 * g + l]) > amax) { amax = fabsf(x[16 * g + l]); max = x[16 * g + l]; }
        scale[g] = max / (float)-half;
        amax_scale = fmaxf(amax_scale, fabsf(scale[g]));
    }
    const float d = tl_f16_to_f32(tl_f32_to_f16(amax_scale / (float)smax));
    for (int g = 0; g < 16; g++) {
        sc[g] = d > 0.0f ? clampi((int)lrintf(scale[g] / d), -smax, smax) : 0;
        const float s = d * (float)sc[g];
        for (int l = 0; l < 16; l++)
            q[16 * g + l] = s != 0.0f ? clampi((int)lrintf(x[16 * g + l] / s), -half, half - 1) : 0;
    }
    *d_out = d;
}

static void quant_q2_k(const float *x, uint8_t *o) {
    tl_block_q2_k *y = (void *)o;
    int sc[16], mn[16], q[TL_QK_K];
    float d, dmin;
    fit_affine(x, 16, 16, 3, 4, sc, mn, q, &d, &dmin);
    memset(o, 0, sizeof *y);
    put_f16(o + offsetof(tl_block_q2_k, d), d);
    put_f16(o + offsetof(tl_block_q2_k, dmin), dmin);
    for (int g = 0; g < 16; g++) {
        y->scales[g] = (uint8_t)(sc[g] | mn[g] << 4);
        uint8_t *qb = y->q + 32 * (g / 8) + 16 * (g & 1);
        for (int l = 0; l < 16; l++) qb[l] |= (uint8_t)(q[16 * g + l] << (2 * ((g % 8) / 2)));
    }
}

static void quant_q3_k(const float *x, uint8_t *o) {
    tl_block_q3_k *y = (void *)o;
    int sc[16], q[TL_QK_K];
    float d;
    fit_symmetric(x, 4, 31, sc, q, &d);
    memset(o, 0, sizeof *y);
    put_f16(o + offsetof(tl_block_q3_k, d), d);
    for (int g = 0; g < 16; g++) {
        const int v = sc[g] + 32, h = g / 8, j = (g % 8) / 2, half = g & 1;
        y->scales[g % 8] |= (uint8_t)((v & 0x0f) << (g < 8 ? 0 : 4));
        y->scales[8 + g % 4] |= (uint8_t)((v >> 4) << (2 * (g / 4)));
        uint8_t *qb = y->q + 32 * h + 16 * half, *hm = y->hmask + 16 * half;
        for (int l = 0; l < 16; l++) {
            const int u = q[16 * g + l] + 4; /* 0..7: low 2 bits in q, the 3rd in hmask */
            qb[l] |= (uint8_t)((u & 3) << (2 * j));
            hm[l] |= (uint8_t)((u >> 2) << (4 * h + j));
        }
    }
}

static void quant_q45_k(int five, const float *x, uint8_t *o) {
    int sc[8], mn[8], q[TL_QK_K];
    float d, dmin;
    fit_affine(x, 8, 32, five ? 31 : 15, 6, sc, mn, q, &d, &dmin);
    memset(o, 0, five ? sizeof(tl_block_q5_k) : sizeof(tl_block_q4_k));
    put_f16(o, d);
    put_f16(o + 2, dmin);
    uint8_t *s = o + 4, *qh = o + 16, *qs = o + (five ? 48 : 16);
    for (int g = 0; g < 4; g++) {
        s[g] = (uint8_t)(sc[g] | (sc[g + 4] >> 4) << 6);
        s[g + 4] = (uint8_t)(mn[g] | (mn[g + 4] >> 4) << 6);
        s[g + 8] = (uint8_t)((sc[g + 4] & 0x0f) | (mn[g + 4] & 0x0f) << 4);
    }
    for (int g = 0; g < 8; g++)
        for (int l = 0; l < 32; l++) {
            const int v = q[32 * g + l];
            qs[32 * (g / 2) + l] |= (uint8_t)((v & 0x0f) << (g & 1 ? 4 : 0));
            if (five) qh[l] |= (uint8_t)((v >> 4) << g);
        }
}

static void quant_q6_k(const float *x, uint8_t *o) {
    tl_block_q6_k *y = (void *)o;
    int sc[16], q[TL_QK_K];
    float d;
    fit_symmetric(x, 32, 127, sc, q, &d);
    memset(o, 0, sizeof *y);
    put_f16(o + offsetof(tl_block_q6_k, d), d);
    for (int g = 0; g < 16; g++) y->scales[g] = (int8_t)sc[g];
    for (int e = 0; e < TL_QK_K; e++) {
        const int h = e / 128, p = (e % 128) / 32, l = e % 32, u = q[e] + 32;
        y->ql[64 * h + 32 * (p & 1) + l] |= (uint8_t)((u & 0x0f) << (p < 2 ? 0 : 4));
        y->qh[32 * h + l] |= (uint8_t)((u >> 4) << (2 * p));
    }
}

void tl__quant_row_ext(tl_type type, const float *src, void *dst, size_t n) {
    uint8_t *o = dst;
    const size_t bb = tl_type_block_bytes(type);
    switch (type) {
    case TL_TYPE_Q4_1: case TL_TYPE_Q5_0: case TL_TYPE_Q5_1: quant_q32(type, src, o, n); return;
    default: break;
    }
    for (size_t b = 0; b < n / TL_QK_K; b++, o += bb, src += TL_QK_K) {
        switch (type) {
        case TL_TYPE_Q2_K: quant_q2_k(src, o); break;
        case TL_TYPE_Q3_K: quant_q3_k(src, o); break;
        case TL_TYPE_Q4_K: quant_q45_k(0, src, o); break;
        case TL_TYPE_Q5_K: quant_q45_k(1, src, o); break;
        case TL_TYPE_Q6_K: quant_q6_k(src, o); break;
        default: return;
        }
    }
}

/* ---- the K-quants' activation rounding (kernels.h) ---- */

void tl_quant_act_row_k(const float *src, tl_block_k_act *dst, size_t n) {
    for (size_t b = 0; b < n / TL_QK_K; b++, src += TL_QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int e = 0; e < TL_QK_K; e++)
            if (fabsf(src[e]) > amax) { amax = fabsf(src[e]); max = src[e]; }
        tl_block_k_act *a = &dst[b];
        if (amax == 0.0f) {
            memset(a, 0, sizeof *a);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int e = 0; e < TL_QK_K; e++) {
            const float y = iscale * src[e];
            const int v = y == y ? (int)rintf(y) : 0; /* NaN (from inf or NaN inputs): 0 */
            a->q[e] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < TL_QK_K / 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += a->q[16 * g + l];
            a->bsums[g] = (int16_t)s;
        }
        a->d = 1.0f / iscale;
    }
}

void tl_round_act_row_type(tl_type type, const float *src, float *dst, size_t n) {
    if (tl_type_act_block(type) != TL_QK_K) {
        tl_round_act_row(src, dst, n);
        return;
    }
    tl_block_k_act a;
    for (size_t b = 0; b < n / TL_QK_K; b++) {
        tl_quant_act_row_k(src + b * TL_QK_K, &a, TL_QK_K);
        for (int e = 0; e < TL_QK_K; e++) dst[b * TL_QK_K + e] = a.d * (float)a.q[e];
    }
}
