/* x86avx512_probe.c - the 512-bit inner loops of the peak probes (probe.h): f32 FMA,
 * int8 dot products (vpdpbusd) and BF16 dot products (vdpbf16ps). Built with the AVX-512
 * flags only when the compiler supports them (TL_HAVE_AVX512VNNI); probe.c calls them
 * only after the matching run-time check (x86_cpu.c).
 */
#include <immintrin.h>
#include "kernels/probe.h"
#include "kernels/x86_probe_chains.h"


float tl__probe_fma512_kernel(size_t iters, float seed) {
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
#define INIT(k) _mm512_set1_ps(seed + (k))
#define OP(a) _mm512_fmadd_ps(a, m, c)
    __m512 sum;
    PROBE_CHAINS(__m512, INIT, OP, _mm512_add_ps, iters, sum);
    return _mm512_reduce_add_ps(sum);
#undef INIT
#undef OP
}

float tl__probe_int8_512_kernel(size_t iters, float seed) {
    const __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8((char)-2);
#define INIT(k) _mm512_set1_epi32((int)seed + (k))
#define OP(a) _mm512_dpbusd_epi32(a, u, s)
    __m512i sum;
    PROBE_CHAINS(__m512i, INIT, OP, _mm512_add_epi32, iters, sum);
    return (float)_mm512_reduce_add_epi32(sum);
#undef INIT
#undef OP
}

float tl__probe_bf16_512_kernel(size_t iters, float seed) {
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380);
#define INIT(k) _mm512_set1_ps(seed + (k))
#define OP(a) _mm512_dpbf16_ps(a, x, y)
    __m512 sum;
    PROBE_CHAINS(__m512, INIT, OP, _mm512_add_ps, iters, sum);
    return _mm512_reduce_add_ps(sum);
#undef INIT
#undef OP
}
