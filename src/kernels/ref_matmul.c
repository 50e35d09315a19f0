/* ref_matmul.c - scalar reference kernels: the definition the fast kernels are tested
 * against. Written to be read, not to be fast: each weight row is dequantized to floats
 * (exactly, see quant.c) and dotted with each activation row in double precision. For
 * quantized weights the activations are first rounded to x' (tl_round_act_row_type), which
 * is the whole numeric contract of kernels.h in one line.
 * Invariant: allocation-free; the row buffers live on the stack in fixed-size chunks.
 */
#include "kernels/kernels.h"

/* Elements dequantized at a time; a multiple of every block size. */
#define REF_CHUNK 256

void tl_matmul_ref(tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                   const float *X, size_t ldx, size_t n, float *Y, size_t ldy) {
    size_t row_bytes = tl_type_row_bytes(type, k);
    float w[REF_CHUNK], xr[REF_CHUNK];
    for (size_t j = j0; j < j1; j++) {
        const uint8_t *row = (const uint8_t *)W + j * row_bytes;
        for (size_t i = 0; i < n; i++) {
            double sum = 0.0;
            for (size_t c0 = 0; c0 < k; c0 += REF_CHUNK) {
                size_t len = k - c0 < REF_CHUNK ? k - c0 : REF_CHUNK;
                const float *x = X + i * ldx + c0;
                if (tl_type_rounds_act(type)) { /* len: a multiple of the act block */
                    tl_round_act_row_type(type, x, xr, len);
                    x = xr;
                }
                tl_dequant_row(type, row + tl_type_row_bytes(type, c0), w, len);
                for (size_t c = 0; c < len; c++) sum += (double)x[c] * w[c];
            }
            Y[i * ldy + j] = (float)sum;
        }
    }
}

float tl_dot_f32_ref(const float *a, const float *b, size_t n) {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += (double)a[i] * b[i];
    return (float)sum;
}

void tl_axpy_f32_ref(float *y, float a, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}
