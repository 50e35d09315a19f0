/* x86_gemm.c - the F32 / F16 / BF16 GEMM on AVX2 (prefill, n > TL_GROUPED_MAX_N
 * activation rows; Q8_0/Q4_0 take the int8 GEMMs): compute-bound, BLIS-style. For each KC-slice of k and each panel of NR=16 output columns, the weights
 * are dequantized and packed transposed (panel[c][16], padded with zero columns past j1)
 * into scratch; a 6x16 register-tile micro-kernel then sweeps all n rows of X (split into
 * near-equal tiles of <= 6 rows). The first k-slice stores into Y, later ones add to it.
 * The next panel's weight rows are software-prefetched: they are short runs at a large
 * stride, which the hardware prefetcher does not follow.
 */
#include "kernels/x86_dequant.h"
#include "kernels/x86_matmul.h"

#define MR 6    /* micro-tile rows of X (and Y) */
#define NR 16   /* micro-tile columns j (two ymm) */
#define KC 256  /* k-slice; a multiple of TL_QK */

/* Packs columns [c0, c0+kc) of weight rows [jb, jb+nj) (nj <= NR) as panel[c*NR + jj],
 * zero for jj >= nj. tmp holds NR*KC floats. */
static ALWAYS_INLINE void pack_panel(tl_type type, const uint8_t *W, size_t row_bytes,
                                     size_t c0, size_t kc, size_t jb, size_t nj, float *tmp,
                                     float *panel) {
    size_t off = tl_type_row_bytes(type, c0); /* c0 is a multiple of KC */
    for (size_t jj = 0; jj < NR; jj++) {
        if (jj < nj)
            dequant_slice(type, W + (jb + jj) * row_bytes + off, kc, tmp + jj * KC);
        else
            memset(tmp + jj * KC, 0, kc * sizeof(float));
    }
    size_t c = 0;
    for (; c + 8 <= kc; c += 8) {
        transpose8(tmp + c, KC, panel + c * NR, NR);
        transpose8(tmp + 8 * KC + c, KC, panel + c * NR + 8, NR);
    }
    for (; c < kc; c++)
        for (size_t jj = 0; jj < NR; jj++) panel[c * NR + jj] = tmp[jj * KC + c];
}

/* C[r*ldc + 0..15] (+)= sum_c X[r*ldx + c] * panel[c*16 + 0..15] for r < M. */
static ALWAYS_INLINE void ukernel(const int M, size_t kc, const float *panel, const float *X,
                                  size_t ldx, float *C, size_t ldc, int add) {
    __m256 acc[MR][2];
    UNROLL
    for (int r = 0; r < M; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const float *x[MR];
    UNROLL
    for (int r = 0; r < M; r++) x[r] = X + r * ldx;
#pragma GCC unroll 4
    for (size_t c = 0; c < kc; c++) {
        __m256 b0 = _mm256_loadu_ps(panel + c * NR), b1 = _mm256_loadu_ps(panel + c * NR + 8);
        UNROLL
        for (int r = 0; r < M; r++) {
            __m256 a = _mm256_broadcast_ss(x[r] + c);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    UNROLL
    for (int r = 0; r < M; r++) {
        float *cr = C + r * ldc;
        if (add) {
            acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(cr));
            acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(cr + 8));
        }
        _mm256_storeu_ps(cr, acc[r][0]);
        _mm256_storeu_ps(cr + 8, acc[r][1]);
    }
}

static void ukernel_any(size_t m, size_t kc, const float *panel, const float *X, size_t ldx,
                        float *C, size_t ldc, int add) {
    switch (m) {
    case 6: ukernel(6, kc, panel, X, ldx, C, ldc, add); break;
    case 5: ukernel(5, kc, panel, X, ldx, C, ldc, add); break;
    case 4: ukernel(4, kc, panel, X, ldx, C, ldc, add); break;
    case 3: ukernel(3, kc, panel, X, ldx, C, ldc, add); break;
    case 2: ukernel(2, kc, panel, X, ldx, C, ldc, add); break;
    default: ukernel(1, kc, panel, X, ldx, C, ldc, add); break;
    }
}

static void prefetch_rows(const uint8_t *p, size_t stride, size_t rows, size_t bytes) {
    for (size_t r = 0; r < rows; r++, p += stride)
        for (size_t b = 0; b < bytes; b += 64) _mm_prefetch((const char *)(p + b), _MM_HINT_T0);
}

static ALWAYS_INLINE void gemm(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                               const float *X, size_t ldx, size_t n, float *Y, size_t ldy,
                               float *scratch) {
    size_t row_bytes = tl_type_row_bytes(type, k);
    float *panel = scratch, *tmp = scratch + NR * KC;
    for (size_t c0 = 0; c0 < k; c0 += KC) {
        size_t kc = k - c0 < KC ? k - c0 : KC;
        int add = c0 > 0;
        const float *xs = X + c0; /* this k-slice of X */
        const size_t lds = ldx;
        for (size_t jb = j0; jb < j1; jb += NR) {
            size_t nj = j1 - jb < NR ? j1 - jb : NR;
            pack_panel(type, W, row_bytes, c0, kc, jb, nj, tmp, panel);
            /* the next panel's rows are short runs at a large stride: fetch them while
             * this one is being multiplied */
            if (jb + NR < j1)
                prefetch_rows(W + (jb + NR) * row_bytes + tl_type_row_bytes(type, c0), row_bytes,
                              j1 - jb - NR < NR ? j1 - jb - NR : NR, tl_type_row_bytes(type, kc));
            else if (c0 + KC < k)
                prefetch_rows(W + j0 * row_bytes + tl_type_row_bytes(type, c0 + KC), row_bytes,
                              j1 - j0 < NR ? j1 - j0 : NR,
                              tl_type_row_bytes(type, k - c0 - KC < KC ? k - c0 - KC : KC));
            for (size_t i0 = 0, t = 0; i0 < n; i0 += tl__tile_rows(n, t++, MR)) {
                size_t m = tl__tile_rows(n, t, MR);
                const float *xb = xs + i0 * lds;
                float *yb = Y + i0 * ldy + jb;
                if (nj == NR) {
                    ukernel_any(m, kc, panel, xb, lds, yb, ldy, add);
                } else { /* partial panel: compute a full tile, write back valid columns */
                    float tile[MR * NR];
                    ukernel_any(m, kc, panel, xb, lds, tile, NR, 0);
                    tl__tile_store(yb, ldy, tile, NR, m, nj, add);
                }
            }
        }
    }
}

#define GEMM_FN(name, T)                                                                 \
    static void name(const uint8_t *w, size_t k, size_t j0, size_t j1, const float *X,   \
                     size_t ldx, size_t n, float *Y, size_t ldy, float *scratch) {       \
        gemm(T, w, k, j0, j1, X, ldx, n, Y, ldy, scratch);                               \
    }
GEMM_FN(gemm_f32, TL_TYPE_F32)
GEMM_FN(gemm_f16, TL_TYPE_F16)
GEMM_FN(gemm_bf16, TL_TYPE_BF16)

void tl__gemm(tl_type type, const uint8_t *w, size_t k, size_t j0, size_t j1, const float *X,
              size_t ldx, size_t n, float *Y, size_t ldy, float *scratch) {
    switch (type) {
    case TL_TYPE_F32: gemm_f32(w, k, j0, j1, X, ldx, n, Y, ldy, scratch); return;
    case TL_TYPE_F16: gemm_f16(w, k, j0, j1, X, ldx, n, Y, ldy, scratch); return;
    case TL_TYPE_BF16: gemm_bf16(w, k, j0, j1, X, ldx, n, Y, ldy, scratch); return;
    default: return; /* Q8_0/Q4_0: the int8 GEMMs (x86_matmul.c) */
    }
}

size_t tl__gemm_scratch_floats(void) { return 2 * NR * KC; /* panel and its dequantized rows */ }
