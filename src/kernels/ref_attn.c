/* ref_attn.c - scalar reference of the attention and SwiGLU kernels and of the 16-bit KV
 * row conversion (kernels.h): the definition x86_attn.c is tested against. Dot products
 * in double, as ref_matmul.c. */
#include <math.h>
#include "kernels/kernels.h"

void tl_attn_scores_ref(const float *q, size_t group, size_t hd, const float *K, size_t ldk,
                        size_t n, float scale, float *scores, size_t lds) {
    for (size_t h = 0; h < group; h++)
        for (size_t t = 0; t < n; t++)
            scores[h * lds + t] = tl_dot_f32_ref(q + h * hd, K + t * ldk, hd) * scale;
}

void tl_attn_values_ref(float *out, size_t group, size_t hd, const float *w, size_t ldw,
                        const float *V, size_t ldv, size_t n) {
    for (size_t t = 0; t < n; t++)
        for (size_t h = 0; h < group; h++)
            tl_axpy_f32_ref(out + h * hd, w[h * ldw + t], V + t * ldv, hd);
}

void tl_swiglu_ref(float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void tl_rmsnorm_ref(const float *x, const float *g, size_t n, size_t d, float eps, float *out) {
    for (size_t r = 0; r < n; r++) {
        const float *xr = x + r * d;
        float *o = out + r * d;
        double ss = 0;
        for (size_t i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
        const float scale = (float)(1.0 / sqrt(ss / (double)d + eps));
        for (size_t i = 0; i < d; i++) o[i] = xr[i] * scale * g[i];
    }
}

void tl_softmax_ref(float *x, size_t n) {
    float mx = -INFINITY, sum = 0;
    for (size_t t = 0; t < n; t++) mx = x[t] > mx ? x[t] : mx;
    for (size_t t = 0; t < n; t++) {
        x[t] = expf(x[t] - mx);
        sum += x[t];
    }
    for (size_t t = 0; t < n; t++) x[t] /= sum;
}

void tl_f16_row_to_f32_ref(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = tl_f16_to_f32(src[i]);
}

void tl_f32_row_to_f16_ref(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = tl_f32_to_f16(src[i]);
}
