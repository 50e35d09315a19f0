/* x86avx512_gemm_f.c - the F32 / F16 / BF16 GEMM (prefill, n > TL_GROUPED_MAX_N rows) on
 * 512-bit FMA: x86_gemm.c's scheme with registers twice as wide. Built with the AVX-512
 * flags only when the compiler supports them (TL_HAVE_AVX512VNNI); x86_matmul.c calls it
 * only after the run-time check (x86_cpu.c).
 *
 * Arithmetic (kernels.h's contract for float weights): weights widened exactly to f32,
 * products with the f32 activations accumulated in f32 by FMA.
 *
 * Blocking: for each KC-slice of k and each panel of NR = 32 output columns, the weight
 * rows are dequantized (x86_dequant.h) and packed transposed, panel[c][32], zero columns
 * past j1; a micro-kernel of up to MR = 8 rows x 32 columns (two zmm per row, 16
 * independent accumulators) sweeps the rows of X. The first slice stores into Y, later
 * ones add to it.
 */
#include <string.h>
#include "kernels/x86_dequant.h"
#include "kernels/x86_matmul.h"

#define MR 8   /* micro-tile rows of X (and Y) */
#define NR 32  /* micro-tile columns j (two zmm) */
#define KC 128 /* k-slice: the panel is 16 KiB, in L1 with the rows of X */

size_t tl__gemm_f_avx512_scratch_floats(void) { return 2 * NR * KC; }

/* Packs columns [c0, c0+kc) of weight rows [jb, jb+nj) (nj <= NR) as panel[c*NR + jj],
 * zero for jj >= nj; tmp holds NR*KC floats. */
static void pack_panel(tl_type type, const uint8_t *W, size_t row_bytes, size_t c0, size_t kc,
                       size_t jb, size_t nj, float *tmp, float *panel) {
    const size_t off = tl_type_row_bytes(type, c0);
    for (size_t jj = 0; jj < NR; jj++) {
        if (jj < nj) dequant_slice(type, W + (jb + jj) * row_bytes + off, kc, tmp + jj * KC);
        else memset(tmp + jj * KC, 0, kc * sizeof(float));
    }
    size_t c = 0;
    for (; c + 8 <= kc; c += 8)
        for (size_t j8 = 0; j8 < NR; j8 += 8) transpose8(tmp + j8 * KC + c, KC, panel + c * NR + j8, NR);
    for (; c < kc; c++)
        for (size_t jj = 0; jj < NR; jj++) panel[c * NR + jj] = tmp[jj * KC + c];
}

/* C[r*ldc + 0..31] (+)= sum_c X[r*ldx + c] * panel[c*32 + 0..31] for r < M. */
static ALWAYS_INLINE void ukernel(const int M, size_t kc, const float *panel, const float *X,
                                  size_t ldx, float *C, size_t ldc, int add) {
    __m512 acc[MR][2];
    UNROLL
    for (int r = 0; r < M; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (size_t c = 0; c < kc; c++) {
        __m512 b0 = _mm512_loadu_ps(panel + c * NR), b1 = _mm512_loadu_ps(panel + c * NR + 16);
        UNROLL
        for (int r = 0; r < M; r++) {
            __m512 a = _mm512_set1_ps(X[r * ldx + c]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    UNROLL
    for (int r = 0; r < M; r++) {
        float *cr = C + r * ldc;
        if (add) {
            acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_loadu_ps(cr));
            acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_loadu_ps(cr + 16));
        }
        _mm512_storeu_ps(cr, acc[r][0]);
        _mm512_storeu_ps(cr + 16, acc[r][1]);
    }
}

static void ukernel_any(size_t m, size_t kc, const float *panel, const float *X, size_t ldx,
                        float *C, size_t ldc, int add) {
    switch (m) {
    case 8: ukernel(8, kc, panel, X, ldx, C, ldc, add); break;
    case 7: ukernel(7, kc, panel, X, ldx, C, ldc, add); break;
    case 6: ukernel(6, kc, panel, X, ldx, C, ldc, add); break;
    case 5: ukernel(5, kc, panel, X, ldx, C, ldc, add); break;
    case 4: ukernel(4, kc, panel, X, ldx, C, ldc, add); break;
    case 3: ukernel(3, kc, panel, X, ldx, C, ldc, add); break;
    case 2: ukernel(2, kc, panel, X, ldx, C, ldc, add); break;
    default: ukernel(1, kc, panel, X, ldx, C, ldc, add); break;
    }
}

void tl__gemm_f_avx512(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                       const float *X, size_t ldx, size_t n, float *Y, size_t ldy,
                       float *scratch) {
    const size_t row_bytes = tl_type_row_bytes(type, k);
    float *panel = scratch, *tmp = scratch + NR * KC;
    for (size_t c0 = 0; c0 < k; c0 += KC) {
        const size_t kc = k - c0 < KC ? k - c0 : KC;
        const int add = c0 > 0;
        for (size_t jb = j0; jb < j1; jb += NR) {
            const size_t nj = j1 - jb < NR ? j1 - jb : NR;
            pack_panel(type, W, row_bytes, c0, kc, jb, nj, tmp, panel);
            for (size_t i0 = 0, t = 0; i0 < n; i0 += tl__tile_rows(n, t++, MR)) {
                const size_t m = tl__tile_rows(n, t, MR);
                const float *xb = X + i0 * ldx + c0;
                float *yb = Y + i0 * ldy + jb;
                if (nj == NR) {
                    ukernel_any(m, kc, panel, xb, ldx, yb, ldy, add);
                } else { /* partial panel: a full tile, then the valid columns */
                    float tile[MR * NR];
                    ukernel_any(m, kc, panel, xb, ldx, tile, NR, 0);
                    tl__tile_store(yb, ldy, tile, NR, m, nj, add);
                }
            }
        }
    }
}
