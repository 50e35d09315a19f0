/* x86_rowdot.c - one Q8_0 row against rounded activations on AVX2 (kernels.h, "single
 * Q8_0 rows"). Each block's integer dot is exact (|q| <= 127: the byte products of
 * maddubs, |w| times sign-adjusted x, fit 16 bits in pairs); its f32 scaling and the sum
 * over blocks run in the reference's order, so the bits are the reference's. */
#include <immintrin.h>
#include <string.h>
#include "kernels/kernels.h"

static inline int32_t block_isum(const int8_t *wq, const int8_t *xq) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)wq);
    const __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)xq);
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    const __m256i p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p32), _mm256_extracti128_si256(p32, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
    return _mm_cvtsi128_si32(h);
}

void tl_dot_q8_0_act_fast(const void *W, size_t k, const tl_block_q8_act *x, size_t n,
                          float *y) {
    const size_t nb = k / TL_QK;
    const tl_block_q8_0 *w = W;
    for (size_t i = 0; i < n; i++) {
        const tl_block_q8_act *xi = x + i * nb;
        float acc = 0.0f;
        for (size_t b = 0; b < nb; b++) {
            uint16_t dh;
            memcpy(&dh, &w[b].d, sizeof dh);
            /* separate statements: no contraction into an FMA, in either file */
            const float scale = tl_f16_to_f32(dh) * xi[b].d;
            const float term = scale * (float)block_isum(w[b].q, xi[b].q);
            acc += term;
        }
        y[i] = acc;
    }
}
