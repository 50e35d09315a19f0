/* x86_matvec.c - the matvec kernels (decode, n <= TL_MATVEC_MAX_N activation rows):
 * memory-bound, so each weight row is streamed once, 32 elements at a time, and used
 * against all n rows; the weight stream is software-prefetched tl__prefetch_distance()
 * bytes ahead (x86_simd.h).
 *  - F32/F16/BF16 weights (tl__matvec_float): dequantized in registers and FMA'd into
 *    f32 accumulators; no scratch.
 *  - Q8_0/Q4_0 weights (tl__matvec_q_avx2, x86_matvec_q.inl): int8 dot products against
 *    activations prepared as pair records by tl_matmul_act_prepare (x86_act.c): maddubs
 *    on |w| and sign(x, w), then madd into int32 - exact, no saturation since |w| <= 128
 *    and |q_x| <= 127 - scaled by d_w*d_x in f32. x86vnni_matmul.c builds the same code
 *    with vpdpbusd.
 * x86_matmul.c runs these over groups of up to TL_MATVEC_MAX_N rows for larger n.
 */
#include "kernels/x86_dequant.h"
#include "kernels/x86_matmul.h"

/* Accumulators per activation row: 8 FMA chains in flight in total (2 FMA units x 4
 * cycles latency), which needs two 32-element groups per step when N = 1. */
static ALWAYS_INLINE void matvec(tl_type type, const int N, const uint8_t *W, size_t k,
                                 size_t j0, size_t j1, const float *X, size_t ldx, float *Y,
                                 size_t ldy) {
    const int na = N == 1 ? 8 : N == 2 ? 4 : 2;
    const int G = N == 1 ? 2 : 1; /* 32-element groups per step */
    size_t row_bytes = tl_type_row_bytes(type, k), k32 = k / 32 * 32, kg = k / (32 * G) * (32 * G);
    size_t es = tl_type_block_bytes(type);
    const size_t pf = tl__prefetch_distance();
    prefetch_start(W + j0 * row_bytes, (j1 - j0) * row_bytes, pf);
    for (size_t j = j0; j < j1; j++) {
        const uint8_t *p = W + j * row_bytes;
        __m256 acc[TL_MATVEC_MAX_N][8];
        UNROLL
        for (int i = 0; i < N; i++)
            UNROLL
            for (int a = 0; a < na; a++) acc[i][a] = _mm256_setzero_ps();
        size_t c = 0;
        for (; c < kg; c += 32 * G) {
            UNROLL
            for (int g = 0; g < G; g++, p += bytes32(type)) {
                __m256 w[4];
                /* the hardware prefetcher alone falls behind (prefetch_ahead) */
                _mm_prefetch((const char *)(p + pf), _MM_HINT_T0);
                if (type == TL_TYPE_F32)
                    _mm_prefetch((const char *)(p + pf + 64), _MM_HINT_T0);
                dequant32(type, p, w);
                UNROLL
                for (int i = 0; i < N; i++) {
                    const float *x = X + i * ldx + c + 32 * g;
                    UNROLL
                    for (int q = 0; q < 4; q++) {
                        int a = (4 * g + q) % na;
                        acc[i][a] = _mm256_fmadd_ps(w[q], _mm256_loadu_ps(x + 8 * q), acc[i][a]);
                    }
                }
            }
        }
        for (; c < k32; c += 32, p += bytes32(type)) {
            __m256 w[4];
            dequant32(type, p, w);
            UNROLL
            for (int i = 0; i < N; i++)
                UNROLL
                for (int q = 0; q < 4; q++)
                    acc[i][q % na] =
                        _mm256_fmadd_ps(w[q], _mm256_loadu_ps(X + i * ldx + c + 8 * q), acc[i][q % na]);
        }
        for (; c + 8 <= k; c += 8, p += 8 * es) { /* float types only */
            __m256 w = load8(type, p);
            UNROLL
            for (int i = 0; i < N; i++)
                acc[i][0] = _mm256_fmadd_ps(w, _mm256_loadu_ps(X + i * ldx + c), acc[i][0]);
        }
        UNROLL
        for (int i = 0; i < N; i++) {
            __m256 s = acc[i][0];
            UNROLL
            for (int a = 1; a < na; a++) s = _mm256_add_ps(s, acc[i][a]);
            float sum = hsum(s);
            const uint8_t *pt = p;
            for (size_t ct = c; ct < k; ct++, pt += es) sum += load1(type, pt) * X[i * ldx + ct];
            Y[i * ldy + j] = sum;
        }
    }
}

#define MATVEC_CASES(T)                                                                  \
    switch (n) {                                                                         \
    case 1: matvec(T, 1, w, k, j0, j1, X, ldx, Y, ldy); return;                          \
    case 2: matvec(T, 2, w, k, j0, j1, X, ldx, Y, ldy); return;                          \
    case 3: matvec(T, 3, w, k, j0, j1, X, ldx, Y, ldy); return;                          \
    default: matvec(T, 4, w, k, j0, j1, X, ldx, Y, ldy); return;                         \
    }

static void matvec_f32(const uint8_t *w, size_t k, size_t j0, size_t j1, const float *X,
                       size_t ldx, size_t n, float *Y, size_t ldy) { MATVEC_CASES(TL_TYPE_F32) }
static void matvec_f16(const uint8_t *w, size_t k, size_t j0, size_t j1, const float *X,
                       size_t ldx, size_t n, float *Y, size_t ldy) { MATVEC_CASES(TL_TYPE_F16) }
static void matvec_bf16(const uint8_t *w, size_t k, size_t j0, size_t j1, const float *X,
                        size_t ldx, size_t n, float *Y, size_t ldy) { MATVEC_CASES(TL_TYPE_BF16) }

void tl__matvec_float(tl_type type, const uint8_t *w, size_t k, size_t j0, size_t j1,
                      const float *X, size_t ldx, size_t n, float *Y, size_t ldy) {
    switch (type) {
    case TL_TYPE_F32: matvec_f32(w, k, j0, j1, X, ldx, n, Y, ldy); return;
    case TL_TYPE_F16: matvec_f16(w, k, j0, j1, X, ldx, n, Y, ldy); return;
    case TL_TYPE_BF16: matvec_bf16(w, k, j0, j1, X, ldx, n, Y, ldy); return;
    default: return;
    }
}

/* ---- Q8_0 / Q4_0 with int8 dot products ---- */

#define TL_MATVEC_Q_NAME tl__matvec_q_avx2
#include "kernels/x86_matvec_q.inl"
