/* x86_gemm_q256.inl - the body of the 256-bit Q8_0 / Q4_0 int8 GEMMs, included by
 * x86vnni_gemm.c (vpdpbusd, AVX-VNNI) and x86_gemm_q.c (AVX2's vpmaddubsw + vpmaddwd),
 * which define before including it:
 *   TL_GEMM_Q256_NAME     the function's name
 *   MR                    micro-tile rows (the registers a dot product leaves)
 *   U8_DOT(s, u, x)       s + the 4-byte dot products of unsigned u with signed x
 *   Q8_WEIGHTS(v)         a Q8_0 panel vector (w + 128) as that dot product's weights
 *   Q8_DOT(s, w, x)       s + the dot products of such weights with x
 *   Q8_STARTS_AT_CORR     1 when Q8_DOT leaves the +128 offset in (the record's corr
 *                         cancels it), 0 when it computes with w itself
 * The arithmetic, the activation records and the panel layout are x86avx512_gemm.c's
 * (its header gives the contract): per block an exact int32 sum, converted, scaled by
 * d_w*d_x and accumulated in f32 over the blocks in order, the first k-slice storing
 * into Y and later ones adding. So every variant equals the AVX-512 kernel bit for bit;
 * only the register blocking differs: a tile of up to MR rows x 16 columns (half a
 * panel: two ymm of int32 sums and two of f32 accumulators per row). Weights are in the
 * file's rows and packed per k-slice (these CPUs do not keep panels, tl_panels_wanted).
 */
#include <string.h>
#include "kernels/x86_matmul.h"
#include "kernels/x86_panels.h"
#include "kernels/x86_simd.h"

#define NH 16 /* micro-tile columns: half of a 32-column panel */
#define KB 16 /* blocks per k-slice */

typedef tl__act_rec act_rec;

/* C[r*ldc + 0..15] (+)= the products over blocks [0, kb) of X rows xs[r * xstride + b]
 * (r < M) with columns [16 half, 16 half + 16) of the panel blocks at panel. */
static ALWAYS_INLINE void ukernel(const tl_type type, const int M, size_t kb,
                                  const uint8_t *panel, size_t half, const act_rec *xs,
                                  size_t xstride, float *C, size_t ldc, int add) {
    const size_t pbytes = block_panel_bytes(type);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[MR][2];
    UNROLL
    for (int r = 0; r < M; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (size_t b = 0; b < kb; b++) {
        const uint8_t *pb = panel + b * pbytes, *q = pb + PANEL_NR * 2 + half * NH * 4;
        __m256i s[MR][2];
        UNROLL
        for (int r = 0; r < M; r++)
            s[r][0] = s[r][1] = _mm256_set1_epi32(Q8_STARTS_AT_CORR || type != TL_TYPE_Q8_0
                                                      ? xs[r * xstride + b].corr : 0);
        if (type == TL_TYPE_Q8_0) {
            UNROLL
            for (int g = 0; g < 8; g++) {
                __m256i w0 = Q8_WEIGHTS(loadu256(q + g * PANEL_NR * 4));
                __m256i w1 = Q8_WEIGHTS(loadu256(q + g * PANEL_NR * 4 + 32));
                UNROLL
                for (int r = 0; r < M; r++) {
                    int32_t x4;
                    memcpy(&x4, xs[r * xstride + b].q + 4 * g, 4);
                    __m256i x = _mm256_set1_epi32(x4);
                    s[r][0] = Q8_DOT(s[r][0], w0, x);
                    s[r][1] = Q8_DOT(s[r][1], w1, x);
                }
            }
        } else { /* Q4_0: low nibbles are group h, high nibbles group h + 4 */
            UNROLL
            for (int h = 0; h < 4; h++) {
                __m256i v0 = loadu256(q + h * PANEL_NR * 4), v1 = loadu256(q + h * PANEL_NR * 4 + 32);
                __m256i lo0 = _mm256_and_si256(v0, m4), lo1 = _mm256_and_si256(v1, m4);
                __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
                __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
                UNROLL
                for (int r = 0; r < M; r++) {
                    int32_t xl, xh;
                    memcpy(&xl, xs[r * xstride + b].q + 4 * h, 4);
                    memcpy(&xh, xs[r * xstride + b].q + 4 * h + 16, 4);
                    __m256i x = _mm256_set1_epi32(xl), y = _mm256_set1_epi32(xh);
                    s[r][0] = U8_DOT(U8_DOT(s[r][0], lo0, x), hi0, y);
                    s[r][1] = U8_DOT(U8_DOT(s[r][1], lo1, x), hi1, y);
                }
            }
        }
        const __m256 sc0 = _mm256_cvtph_ps(loadu128(pb + half * NH * 2));
        const __m256 sc1 = _mm256_cvtph_ps(loadu128(pb + half * NH * 2 + 16));
        UNROLL
        for (int r = 0; r < M; r++) {
            __m256 dx = _mm256_set1_ps(xs[r * xstride + b].d);
            acc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r][0]), _mm256_mul_ps(sc0, dx), acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r][1]), _mm256_mul_ps(sc1, dx), acc[r][1]);
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

#if MR == 3
#define UKERNEL_CASES(T)                                                                        \
    switch (m) {                                                                                \
    case 3: ukernel(T, 3, kb, panel, half, xs, xstride, C, ldc, add); break;                   \
    case 2: ukernel(T, 2, kb, panel, half, xs, xstride, C, ldc, add); break;                   \
    default: ukernel(T, 1, kb, panel, half, xs, xstride, C, ldc, add); break;                  \
    }
#else
#define UKERNEL_CASES(T)                                                                        \
    switch (m) {                                                                                \
    case 2: ukernel(T, 2, kb, panel, half, xs, xstride, C, ldc, add); break;                   \
    default: ukernel(T, 1, kb, panel, half, xs, xstride, C, ldc, add); break;                  \
    }
#endif

static void ukernel_any(tl_type type, size_t m, size_t kb, const uint8_t *panel, size_t half,
                        const act_rec *xs, size_t xstride, float *C, size_t ldc, int add) {
    if (type == TL_TYPE_Q8_0) UKERNEL_CASES(TL_TYPE_Q8_0)
    else UKERNEL_CASES(TL_TYPE_Q4_0)
}

void TL_GEMM_Q256_NAME(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                       const act_rec *xs, size_t n, float *Y, size_t ldy) {
    const size_t nb = k / TL_QK, row_bytes = tl_type_row_bytes(type, k);
    const size_t pbytes = block_panel_bytes(type);
    _Alignas(64) uint8_t packed[KB * PANEL_NR * sizeof(tl_block_q8_0)];
    for (size_t b0 = 0; b0 < nb; b0 += KB) {
        const size_t kb = nb - b0 < KB ? nb - b0 : KB;
        const int add = b0 > 0;
        for (size_t jb = j0; jb < j1; jb += PANEL_NR) {
            const size_t nj = j1 - jb < PANEL_NR ? j1 - jb : PANEL_NR;
            for (size_t b = 0; b < kb; b++)
                pack_block_part(type, W + jb * row_bytes, row_bytes, b0 + b, nj, packed + b * pbytes);
            for (size_t half = 0; half * NH < nj; half++) {
                const size_t cols = nj - half * NH < NH ? nj - half * NH : NH;
                for (size_t i0 = 0, t = 0; i0 < n; i0 += tl__tile_rows(n, t++, MR)) {
                    const size_t m = tl__tile_rows(n, t, MR);
                    float *yb = Y + i0 * ldy + jb + half * NH;
                    const act_rec *x = xs + i0 * nb + b0;
                    if (cols == NH) {
                        ukernel_any(type, m, kb, packed, half, x, nb, yb, ldy, add);
                    } else { /* partial: a full tile, then the valid columns */
                        float tile[MR * NH];
                        ukernel_any(type, m, kb, packed, half, x, nb, tile, NH, 0);
                        tl__tile_store(yb, ldy, tile, NH, m, cols, add);
                    }
                }
            }
        }
    }
}
