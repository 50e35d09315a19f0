/* x86vnni_probe.c - the AVX-VNNI (256-bit vpdpbusd) inner loop of the int8 peak probe
 * (probe.h), built with -mavxvnni only when the compiler supports it (TL_HAVE_AVXVNNI);
 * probe.c calls it only after the run-time check (x86_cpu.c).
 */
#include <immintrin.h>
#include "kernels/probe.h"
#include "kernels/x86_probe_chains.h"

static inline int hsum_epi32(__m256i v) {
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1)));
}

float tl__probe_int8_vnni256_kernel(size_t iters, float seed) {
    const __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8((char)-2);
#define INIT(k) _mm256_set1_epi32((int)seed + (k))
#define OP(a) _mm256_dpbusd_avx_epi32(a, u, s)
    __m256i sum;
    PROBE_CHAINS(__m256i, INIT, OP, _mm256_add_epi32, iters, sum);
    return (float)hsum_epi32(sum);
#undef INIT
#undef OP
}
