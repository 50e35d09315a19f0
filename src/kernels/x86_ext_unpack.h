/* x86_ext_unpack.h - what the K-quant integer kernels (x86_matvec_ext.c on AVX2,
 * x86avx512_matvec_ext.c and x86avx512_ext_pairs.c on AVX-512) share: the decoding of a
 * weight block's scales (its 16 group scales a_g, the b_g of its min or offset term, the
 * float scales D and M: the K-quant form in x86_matvec_ext.c's top comment) and the float
 * step that adds a block's integer sums to an output (k_block_step), so that equal integer
 * lanes give equal bits (the pair kernel does the same steps on two rows' lanes at once).
 * The quants themselves each kernel unpacks for the layout it dots them in; the row loop
 * of the one-row kernels is x86_ext_rows.inl. Internal to src/kernels; include only from
 * files built with -mavx2 -mfma -mf16c.
 */
#ifndef TL_KERNELS_X86_EXT_UNPACK_H
#define TL_KERNELS_X86_EXT_UNPACK_H

#include <string.h>
#include "kernels/kernels.h"
#include "kernels/x86_simd.h"

/* Activation rows per pass over a weight row: their accumulators live on the stack, and
 * their rounded blocks (16 x ~1.1 KiB per 1024 weights) stay in L1/L2 beside the row. A
 * row's arithmetic does not depend on the pass it is in. */
#define TL_EXT_ROWS_PER_PASS 16

/* tl_type_block_bytes for the K-quants, known at compile time where type is. */
static ALWAYS_INLINE size_t k_block_bytes(tl_type type) {
    switch (type) {
    case TL_TYPE_Q2_K: return sizeof(tl_block_q2_k);
    case TL_TYPE_Q3_K: return sizeof(tl_block_q3_k);
    case TL_TYPE_Q4_K: return sizeof(tl_block_q4_k);
    case TL_TYPE_Q5_K: return sizeof(tl_block_q5_k);
    default: return sizeof(tl_block_q6_k);
    }
}

/* A K-quant block's scales: a and b hold the int16 a_g and b_g of the 16-element groups
 * g = 0..15 in lane g (Q4_K/Q5_K: each 32-group's scale and min on both of its halves);
 * dm holds D and M in lanes 0 and 1. */
typedef struct {
    __m256i a, b;
    __m128 dm;
} kscales;

/* The two fp16 values of the 32-bit word w (low half first) as floats in lanes 0, 1. */
static ALWAYS_INLINE __m128 f16_pair(uint32_t w) { return _mm_cvtph_ps(_mm_cvtsi32_si128((int)w)); }
static ALWAYS_INLINE uint32_t load_u32(const uint8_t *p) {
    uint32_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

static ALWAYS_INLINE kscales kscales_q2_k(const uint8_t *s) {
    const tl_block_q2_k *x = (const void *)s;
    const __m128i sc = loadu128(x->scales), m4 = _mm_set1_epi8(0x0f);
    kscales ks;
    ks.a = _mm256_cvtepu8_epi16(_mm_and_si128(sc, m4));
    ks.b = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), m4));
    ks.dm = f16_pair(load_u32(s + offsetof(tl_block_q2_k, d))); /* d, dmin */
    return ks;
}

static ALWAYS_INLINE kscales kscales_q3_k(const uint8_t *s) {
    const tl_block_q3_k *x = (const void *)s;
    /* the 16 scales (quant_ext.h): low 4 bits from bytes 0-7 (low nibbles: groups 0-7,
     * high: 8-15), high 2 bits of group g at bit 2*(g/4) of byte 8 + g%4 */
    uint64_t lo8;
    uint32_t h4;
    memcpy(&lo8, x->scales, 8);
    memcpy(&h4, x->scales + 8, 4);
    const __m128i m4 = _mm_set1_epi8(0x0f), b2 = _mm_set1_epi8(3);
    const __m128i l = _mm_cvtsi64_si128((long long)lo8);
    const __m128i low =
        _mm_unpacklo_epi64(_mm_and_si128(l, m4), _mm_and_si128(_mm_srli_epi16(l, 4), m4));
    const __m128i high =
        _mm_and_si128(_mm_setr_epi32((int)h4, (int)(h4 >> 2), (int)(h4 >> 4), (int)(h4 >> 6)), b2);
    const __m128i sc = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
    kscales ks;
    ks.a = _mm256_cvtepi8_epi16(sc);
    ks.b = _mm256_slli_epi16(ks.a, 2); /* 4 * scale */
    ks.dm = f16_pair(load_u16(s + offsetof(tl_block_q3_k, d)) * 0x10001u); /* d, d */
    return ks;
}

/* Q4_K/Q5_K's 8 scales (bytes 0-7) and 8 mins (bytes 8-15) of the block at s. */
static ALWAYS_INLINE __m128i q45_scale_bytes(const uint8_t *s) {
    /* the 12 packed bytes (quant_ext.h) as 32-bit words w0 w1 w2 made into 4 words:
     * scales 0-3, 4-7, mins 0-3, 4-7 = w0 & 63s, (w2 & 15s) | (w0 >> 6 & 3s) << 4,
     * w1 & 63s, (w2 >> 4 & 15s) | (w1 >> 6 & 3s) << 4, byte by byte (the masks keep each
     * byte's own bits after the word shifts; (w >> 6 & 3s) << 4 is w >> 2 & 48s). The
     * load's fourth word, the first quants, is not used. */
    const __m128i v = loadu128(s + 4);
    const __m128i w = _mm_srlv_epi32(_mm_shuffle_epi32(v, 0x98), /* w0, w2, w1, w2 >> 4 */
                                     _mm_setr_epi32(0, 0, 0, 4));
    const __m128i top = _mm_srli_epi32(_mm_shuffle_epi32(v, 0x50), 2); /* w0 w0 w1 w1 */
    const __m128i low = _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f);
    const __m128i high = _mm_setr_epi32(0, 0x30303030, 0, 0x30303030);
    return _mm_or_si128(_mm_and_si128(w, low), _mm_and_si128(top, high));
}

/* pshufb indices taking, from q45_scale_bytes' bytes in both 128-bit lanes, the b_g of
 * the 16 groups as int16 (group g's is min g/2): groups 0-7 in lane 0, 8-15 in lane 1. */
static ALWAYS_INLINE __m256i q45_min_words(void) {
    return _mm256_setr_epi8(8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128, 11, -128, 11, -128,
                            12, -128, 12, -128, 13, -128, 13, -128, 14, -128, 14, -128, 15, -128, 15, -128);
}

static ALWAYS_INLINE kscales kscales_q45_k(const uint8_t *s) {
    const __m128i sm = q45_scale_bytes(s);
    /* bytes: scales 0-7 | mins 0-7; each twice, for the two 16-groups of its 32-group */
    const __m128i twice = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    kscales ks;
    ks.a = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, twice));
    ks.b = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, _mm_add_epi8(twice, _mm_set1_epi8(8))));
    ks.dm = f16_pair(load_u32(s)); /* d, dmin */
    return ks;
}

static ALWAYS_INLINE kscales kscales_q6_k(const uint8_t *s) {
    const tl_block_q6_k *x = (const void *)s;
    kscales ks;
    ks.a = _mm256_cvtepi8_epi16(loadu128(x->scales));
    ks.b = _mm256_slli_epi16(ks.a, 5); /* 32 * scale */
    ks.dm = f16_pair(load_u16(s + offsetof(tl_block_q6_k, d)) * 0x10001u); /* d, d */
    return ks;
}

static ALWAYS_INLINE kscales kscales_k(tl_type type, const uint8_t *s) {
    switch (type) {
    case TL_TYPE_Q2_K: return kscales_q2_k(s);
    case TL_TYPE_Q3_K: return kscales_q3_k(s);
    case TL_TYPE_Q4_K: case TL_TYPE_Q5_K: return kscales_q45_k(s);
    default: return kscales_q6_k(s);
    }
}

/* D, M (a kscales' dm) in lanes 0, 1 of every 64-bit pair. */
static ALWAYS_INLINE __m256 k_dm2(__m128 dm) {
    return _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(dm)));
}

/* acc += d_x * (D * A - M * B) for one block and one activation block a: A holds the
 * block's integer group products in 8 int32 lanes, B = b . bsums is formed here from the
 * 16 b_g; dm2 is the block's D, M in every pair of lanes (k_dm2). Every kernel whose A
 * lanes agree gives the same bits: the float steps are these, in this order. */
static ALWAYS_INLINE __m256 k_block_step(__m256i A, __m256i b, __m256 dm2,
                                         const tl_block_k_act *a, __m256 acc) {
    const __m256i B = _mm256_madd_epi16(b, loadu256(a->bsums));
    const __m256 f = _mm256_mul_ps(dm2, _mm256_broadcast_ss(&a->d)); /* D d_x, M d_x, ... */
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(A), _mm256_moveldup_ps(f), acc);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(B), _mm256_movehdup_ps(f), acc);
}

#endif
