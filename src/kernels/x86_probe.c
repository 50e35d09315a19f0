/* x86_probe.c - AVX2 inner loops of the bandwidth and peak probes (see probe.h). */
#include <immintrin.h>
#include "kernels/probe.h"
#include "kernels/x86_probe_chains.h"

float tl_probe_read_kernel(const float *p, size_t n) {
    /* two streams in lockstep (the halves of the range): more lines in flight than one */
    size_t half = n / 2 / 16 * 16;
    const float *q = p + half;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 16 <= half; i += 16) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(q + i));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(q + i + 8));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    float out[8];
    _mm256_storeu_ps(out, s);
    float t = out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
    for (i = 2 * half; i < n; i++) t += p[i];
    return t;
}

float tl_probe_fma_kernel(size_t iters, float seed) {
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
#define INIT(k) _mm256_set1_ps(seed + (k))
#define OP(a) _mm256_fmadd_ps(a, m, c)
    __m256 s;
    PROBE_CHAINS(__m256, INIT, OP, _mm256_add_ps, iters, s);
#undef INIT
#undef OP
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

/* int8 dot products without VNNI: maddubs (u8*s8 pairs to int16) then madd against ones
 * (pairs to int32) and an add: three instructions per 32 products, as the AVX2 matvec.
 * The chain's own bytes are the unsigned operand, so nothing is loop-invariant. */
float tl__probe_int8_avx2_kernel(size_t iters, float seed) {
    const __m256i s = _mm256_set1_epi8((char)-2), one = _mm256_set1_epi16(1);
#define INIT(k) _mm256_set1_epi32((int)seed + (k))
#define OP(a) _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(a, s), one))
    __m256i v;
    PROBE_CHAINS(__m256i, INIT, OP, _mm256_add_epi32, iters, v);
#undef INIT
#undef OP
    return (float)_mm256_extract_epi32(v, 0) + (float)_mm256_extract_epi32(v, 7);
}
