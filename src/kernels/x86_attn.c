/* x86_attn.c - AVX2/FMA attention and SwiGLU kernels (see kernels.h; references in
 * ref_attn.c).
 *
 * Decode attention is many short dot products (head_dim 64-128) against KV rows that sit
 * in L1/L2; as one call per (position, head) its cost is mostly call and horizontal-sum
 * overhead. Here:
 *  - scores: each query head meets 8 positions at once, 8 accumulators, and one
 *    transposing reduction (hadd tree) turns them into 8 scores in one register;
 *  - values: each head's output slice (up to 64 floats) stays in 8 registers while
 *    every position's weighted V row is added, so out is loaded and stored once;
 *  - rmsnorm: the sum of squares in four double lanes twice over, the scaling eight
 *    floats at a time;
 *  - softmax and SwiGLU: exp through a vectorized exp (Cephes-style: 2^n * p(r), |r| <= ln2/2,
 *    degree-6 polynomial; ~2 ulp against expf), eight lanes at a time instead of a scalar
 *    expf per value;
 *  - 16-bit KV rows: F16C's conversion, eight values an instruction, instead of the
 *    reference's bit manipulation per value.
 */
#include <math.h>
#include "kernels/x86_simd.h"

/* s[i] = sum of the lanes of a[i], i < 8, as one vector. */
static ALWAYS_INLINE __m256 reduce8(const __m256 *a) {
    __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

void tl_attn_scores_fast(const float *q, size_t group, size_t hd, const float *K, size_t ldk,
                         size_t n, float scale, float *scores, size_t lds) {
    if (hd % 8) {
        tl_attn_scores_ref(q, group, hd, K, ldk, n, scale, scores, lds);
        return;
    }
    const __m256 vs = _mm256_set1_ps(scale);
    for (size_t h = 0; h < group; h++) {
        const float *qh = q + h * hd;
        float *sh = scores + h * lds;
        size_t t = 0;
        for (; t + 8 <= n; t += 8) {
            __m256 acc[8];
            UNROLL
            for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
            for (size_t c = 0; c < hd; c += 8) {
                __m256 qv = _mm256_loadu_ps(qh + c);
                UNROLL
                for (int i = 0; i < 8; i++)
                    acc[i] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(K + (t + (size_t)i) * ldk + c), acc[i]);
            }
            _mm256_storeu_ps(sh + t, _mm256_mul_ps(reduce8(acc), vs));
        }
        for (; t < n; t++) sh[t] = tl_dot_f32_fast(qh, K + t * ldk, hd) * scale;
    }
}

void tl_attn_values_fast(float *out, size_t group, size_t hd, const float *w, size_t ldw,
                         const float *V, size_t ldv, size_t n) {
    if (hd % 8) {
        tl_attn_values_ref(out, group, hd, w, ldw, V, ldv, n);
        return;
    }
    for (size_t h = 0; h < group; h++) {
        float *o = out + h * hd;
        const float *wh = w + h * ldw;
        size_t c0 = 0;
        for (; c0 + 64 <= hd; c0 += 64) { /* 8 registers of output */
            __m256 acc[8];
            UNROLL
            for (int i = 0; i < 8; i++) acc[i] = _mm256_loadu_ps(o + c0 + 8 * i);
            for (size_t t = 0; t < n; t++) {
                const __m256 wt = _mm256_broadcast_ss(wh + t);
                const float *v = V + t * ldv + c0;
                UNROLL
                for (int i = 0; i < 8; i++) acc[i] = _mm256_fmadd_ps(wt, _mm256_loadu_ps(v + 8 * i), acc[i]);
            }
            UNROLL
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(o + c0 + 8 * i, acc[i]);
        }
        for (; c0 < hd; c0 += 8) { /* head sizes that are not a multiple of 64 */
            __m256 acc = _mm256_loadu_ps(o + c0);
            for (size_t t = 0; t < n; t++)
                acc = _mm256_fmadd_ps(_mm256_broadcast_ss(wh + t), _mm256_loadu_ps(V + t * ldv + c0), acc);
            _mm256_storeu_ps(o + c0, acc);
        }
    }
}

/* e^x for x in [-87.3, 88.7] (clamped there: the results saturate toward 0 and FLT_MAX
 * rather than reaching 0 or infinity, which silu's quotient does not notice). */
static ALWAYS_INLINE __m256 exp_ps(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* r = x - n ln2, with ln2 in two parts so r keeps its low bits */
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* times 2^n: n + 127 in the exponent field (n in [-126, 128] after the clamp; 128 is
     * reached only at the top, where 2^127 * 2 is built as two factors) */
    __m256i e = _mm256_cvtps_epi32(n);
    __m256i e1 = _mm256_srai_epi32(e, 1), e2 = _mm256_sub_epi32(e, e1);
    __m256 f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e1, _mm256_set1_epi32(127)), 23));
    __m256 f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e2, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
}

void tl_swiglu_fast(float *gate, const float *up, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 g = _mm256_loadu_ps(gate + i);
        __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g))));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
    }
    if (i < n) tl_swiglu_ref(gate + i, up + i, n - i);
}

void tl_rmsnorm_fast(const float *x, const float *g, size_t n, size_t d, float eps, float *out) {
    for (size_t r = 0; r < n; r++) {
        const float *xr = x + r * d;
        float *o = out + r * d;
        /* squares of floats are exact in double, so only the order of the sum differs */
        __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
        size_t i = 0;
        for (; i + 8 <= d; i += 8) {
            const __m256 v = _mm256_loadu_ps(xr + i);
            const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
            const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
            s0 = _mm256_fmadd_pd(lo, lo, s0);
            s1 = _mm256_fmadd_pd(hi, hi, s1);
        }
        double lanes[4];
        _mm256_storeu_pd(lanes, _mm256_add_pd(s0, s1));
        double ss = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
        for (size_t k = i; k < d; k++) ss += (double)xr[k] * xr[k];
        const float scale = (float)(1.0 / sqrt(ss / (double)d + eps));
        const __m256 vs = _mm256_set1_ps(scale);
        for (i = 0; i + 8 <= d; i += 8)
            _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), vs),
                                                  _mm256_loadu_ps(g + i)));
        for (; i < d; i++) o[i] = xr[i] * scale * g[i];
    }
}

void tl_softmax_fast(float *x, size_t n) {
    if (n < 8) {
        tl_softmax_ref(x, n);
        return;
    }
    __m256 vmax = _mm256_loadu_ps(x);
    size_t i = 8;
    for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
    float mx = x[0];
    float lanes[8];
    _mm256_storeu_ps(lanes, vmax);
    for (int l = 0; l < 8; l++) mx = lanes[l] > mx ? lanes[l] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    const __m256 vm = _mm256_set1_ps(mx);
    __m256 vsum = _mm256_setzero_ps();
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    float sum = hsum(vsum);
    for (; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    const __m256 inv = _mm256_set1_ps(1.0f / sum);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
    for (; i < n; i++) x[i] *= 1.0f / sum;
}

void tl_f16_row_to_f32_fast(const uint16_t *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    tl_f16_row_to_f32_ref(src + i, dst + i, n - i);
}

void tl_f32_row_to_f16_fast(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), h);
    }
    tl_f32_row_to_f16_ref(src + i, dst + i, n - i);
}
