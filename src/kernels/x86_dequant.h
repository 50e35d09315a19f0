/* x86_dequant.h - in-register conversions shared by the x86 matvec and GEMM files
 * (x86_matvec.c, x86_gemm.c, x86_act.c): exact dequantization of weight elements of any
 * tl_type to f32, and the blockwise rounding of activations to x' (d, q), bit-exact with
 * quant.c's. All static ALWAYS_INLINE so each kernel inlines them into its inner loops.
 * Include only from files built with -mavx2 -mfma -mf16c.
 */
#ifndef TL_KERNELS_X86_DEQUANT_H
#define TL_KERNELS_X86_DEQUANT_H

#include "kernels/x86_simd.h"

/* ---- dequantization into registers ---- */

static ALWAYS_INLINE __m256 load8_f16(const uint8_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static ALWAYS_INLINE __m256 load8_bf16(const uint8_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static ALWAYS_INLINE __m256 i8x8_to_ps(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

/* 32 consecutive elements starting at `p`; for Q types `p` is a block. */
static ALWAYS_INLINE void dequant32(tl_type type, const uint8_t *p, __m256 w[4]) {
    switch (type) {
    case TL_TYPE_F32:
        UNROLL
        for (int q = 0; q < 4; q++) w[q] = _mm256_loadu_ps((const float *)(const void *)p + 8 * q);
        break;
    case TL_TYPE_F16:
        UNROLL
        for (int q = 0; q < 4; q++) w[q] = load8_f16(p + 16 * q);
        break;
    case TL_TYPE_BF16:
        UNROLL
        for (int q = 0; q < 4; q++) w[q] = load8_bf16(p + 16 * q);
        break;
    case TL_TYPE_Q8_0: {
        __m256 d = _mm256_set1_ps(load_f16_scale(p));
        UNROLL
        for (int q = 0; q < 4; q++)
            w[q] = _mm256_mul_ps(d, i8x8_to_ps(_mm_loadl_epi64((const __m128i *)(p + 2 + 8 * q))));
        break;
    }
    case TL_TYPE_Q4_0: {
        /* bytes 0..7 hold elements 0..7 (low nibbles) and 16..23 (high), bytes 8..15 the
         * rest. fma(nib, d, -8d) is exact: d*(nib-8) is representable in f32. */
        __m256 d = _mm256_set1_ps(load_f16_scale(p)), m8d = _mm256_mul_ps(d, _mm256_set1_ps(-8.0f));
        __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 2)));
        __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 10)));
        __m256i m = _mm256_set1_epi32(0x0f);
        w[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b0, m)), d, m8d);
        w[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b1, m)), d, m8d);
        w[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4)), d, m8d);
        w[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4)), d, m8d);
        break;
    }
    default: /* the other types never take the float paths (x86_matvec_ext.c) */
        for (int q = 0; q < 4; q++) w[q] = _mm256_setzero_ps();
        break;
    }
}

/* Bytes of 32 elements of `type` (one block for Q types). */
static ALWAYS_INLINE size_t bytes32(tl_type type) {
    return type == TL_TYPE_F32 ? 128 : type == TL_TYPE_Q8_0 ? 34 : type == TL_TYPE_Q4_0 ? 18 : 64;
}

/* One element of a float type (used only for k tails, which Q types never have). */
static ALWAYS_INLINE float load1(tl_type type, const uint8_t *p) {
    uint16_t h;
    float f;
    switch (type) {
    case TL_TYPE_F32: memcpy(&f, p, sizeof f); return f;
    case TL_TYPE_F16: return load_f16_scale(p);
    case TL_TYPE_BF16: memcpy(&h, p, sizeof h); return tl_bf16_to_f32(h);
    default: return 0.0f;
    }
}

static ALWAYS_INLINE __m256 load8(tl_type type, const uint8_t *p) {
    switch (type) {
    case TL_TYPE_F16: return load8_f16(p);
    case TL_TYPE_BF16: return load8_bf16(p);
    default: return _mm256_loadu_ps((const float *)(const void *)p);
    }
}

/* Dequantizes elements [0, len) of a row slice starting at `p` into dst
 * (len a multiple of 32 for Q types). */
static ALWAYS_INLINE void dequant_slice(tl_type type, const uint8_t *p, size_t len, float *dst) {
    size_t c = 0;
    for (; c + 32 <= len; c += 32, p += bytes32(type)) {
        __m256 w[4];
        dequant32(type, p, w);
        UNROLL
        for (int q = 0; q < 4; q++) _mm256_storeu_ps(dst + c + 8 * q, w[q]);
    }
    size_t es = tl_type_block_bytes(type);
    for (; c + 8 <= len; c += 8, p += 8 * es) _mm256_storeu_ps(dst + c, load8(type, p));
    for (; c < len; c++, p += es) dst[c] = load1(type, p);
}

/* ---- packing ---- */

/* 8x8 transpose of 32-bit lanes held in registers: dst[c*ldd + 0..7] gets lane c of
 * r[0..7] (floats, or the bits of any 32-bit values). */
static ALWAYS_INLINE void transpose8_regs(const __m256 r[8], float *dst, size_t ldd) {
    const __m256 r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
    const __m256 r4 = r[4], r5 = r[5], r6 = r[6], r7 = r[7];
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    _mm256_storeu_ps(dst + 0 * ldd, _mm256_permute2f128_ps(s0, s4, 0x20));
    _mm256_storeu_ps(dst + 1 * ldd, _mm256_permute2f128_ps(s1, s5, 0x20));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(s2, s6, 0x20));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(s3, s7, 0x20));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(s0, s4, 0x31));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(s1, s5, 0x31));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(s2, s6, 0x31));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(s3, s7, 0x31));
}

/* 8x8 transpose: rows src[r*lds + 0..7] -> dst[c*ldd + 0..7] holds column c. */
static ALWAYS_INLINE void transpose8(const float *src, size_t lds, float *dst, size_t ldd) {
    __m256 r[8];
    UNROLL
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * lds);
    transpose8_regs(r, dst, ldd);
}

/* ---- activation rounding (bit-exact with quant.c) ---- */

/* Rounds one 32-block: d = amax/127, r[q] = roundf(x/d) as floats (0 when d == 0). */
static ALWAYS_INLINE float act_block(const float *x, __m256 r[4]) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], m = _mm256_setzero_ps();
    UNROLL
    for (int q = 0; q < 4; q++) {
        v[q] = _mm256_loadu_ps(x + 8 * q);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[q]));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float d = _mm_cvtss_f32(h) / 127.0f;
    if (d == 0.0f) {
        UNROLL
        for (int q = 0; q < 4; q++) r[q] = _mm256_setzero_ps();
        return d;
    }
    const __m256 vd = _mm256_set1_ps(d), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    UNROLL
    for (int q = 0; q < 4; q++) {
        /* roundf: truncate, then step away from zero when the (exact) remainder is >= 1/2 */
        __m256 y = _mm256_div_ps(v[q], vd);
        __m256 t = _mm256_round_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(y, t)), half, _CMP_GE_OQ);
        __m256 step = _mm256_or_ps(_mm256_and_ps(y, sign), one); /* copysign(1, y) */
        r[q] = _mm256_add_ps(t, _mm256_and_ps(up, step));
    }
    return d;
}

#endif
