/* x86avx512_gemm.c - Q8_0 / Q4_0 products on 8-bit integer dot products: AVX-512 VNNI's
 * vpdpbusd on 512-bit registers. Built with -mavx512f -mavx512bw -mavx512vnni only when
 * the compiler supports them (TL_HAVE_AVX512VNNI); x86_matmul.c calls it only after a
 * run-time check (x86_cpu.c), and the AVX2 kernels stay the path everywhere else.
 *
 * Arithmetic (kernels.h's contract, as the int8 matvec computes it): each 32-element
 * block of an X row is rounded to (d_x, q_x) (tl_quant_act_row_fast, bit-exact with
 * quant.c); block b of output (i, j) adds d_w*d_x * sum_c q_x*w, the integer sum exact in
 * int32, converted, scaled by the f32 product d_w*d_x and accumulated in f32 over the
 * blocks in order. vpdpbusd multiplies unsigned by signed bytes, so the weights are the
 * unsigned side, offset by `off`: Q8_0 w + 128, Q4_0 its nibble (w + 8). Each block's
 * integer sum starts at -off * sum_c q_x (the activation record's corr), which cancels
 * the offset exactly.
 *
 * Weights are read as 32-row panels (kernels.h gives the layout): either in place, when
 * the tensor was repacked at placement (tl_panels_pack), or packed here per k-slice of
 * KB blocks from the file's rows into scratch. X is rounded once per product into
 * activation records (one per row and block: d, corr, q); a micro-kernel of up to MR rows
 * x 32 columns (two zmm per row) sweeps the rows, the first k-slice storing into Y and
 * later ones adding, so every output is the same sum in the same order whichever way
 * the loops run: large products walk k-slices outside panels (a slice of every X row
 * stays in L2 while the panels pass); small products walk panels outside k-slices,
 * reading the weights once, front to back, software-prefetched as the matvec's are. Products with weights in panels and in the file's rows therefore agree
 * bit for bit, and a model's results do not depend on which weights are resident.
 */
#include <string.h>
#include "kernels/x86_dequant.h"
#include "kernels/x86_matmul.h"
#include "kernels/x86_panels.h"
#include "kernels/x86_simd.h"

#define MR 6                 /* micro-tile rows of X (and Y) */
#define NR TL_PANEL_ROWS     /* micro-tile columns j (two zmm) */
#define KB 16                /* blocks per k-slice */
#define PANEL_MAJOR_MAX_N 12 /* products of at most this many rows walk panel by panel */

typedef tl__act_rec act_rec;


void tl__panels_pack_avx512(tl_type type, uint8_t *W, size_t rows, size_t k, uint8_t *tmp) {
    const size_t row_bytes = tl_type_row_bytes(type, k), nb = k / TL_QK;
    const size_t pb = block_panel_bytes(type);
    for (size_t p = 0; p < rows; p += NR) {
        uint8_t *panel = W + p * row_bytes;
        memcpy(tmp, panel, NR * row_bytes);
        for (size_t b = 0; b < nb; b++) {
            if (p + NR < rows) /* the next panel's share of a block's worth, on its way */
                for (size_t o = 0; o < pb; o += 64)
                    _mm_prefetch((const char *)(panel + NR * row_bytes + b * pb + o), _MM_HINT_T0);
            pack_block_full(type, tmp, row_bytes, b, panel + b * pb);
        }
    }
}

/* C[r*ldc + 0..31] (+)= the products over blocks [0, kb) of X rows xs[r * xstride + b]
 * (r < M) with the panel blocks at panel; prefetch > 0 prefetches that many bytes ahead. */
static ALWAYS_INLINE void ukernel(const tl_type type, const int M, size_t kb,
                                  const uint8_t *panel, const act_rec *xs, size_t xstride,
                                  float *C, size_t ldc, int add, size_t prefetch) {
    const size_t pbytes = block_panel_bytes(type);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512 acc[MR][2];
    UNROLL
    for (int r = 0; r < M; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (size_t b = 0; b < kb; b++) {
        const uint8_t *pb = panel + b * pbytes, *q = pb + NR * 2;
        if (prefetch)
            for (size_t o = 0; o < pbytes; o += 64) _mm_prefetch((const char *)(pb + prefetch + o), _MM_HINT_T0);
        __m512i s[MR][2];
        UNROLL
        for (int r = 0; r < M; r++) s[r][0] = s[r][1] = _mm512_set1_epi32(xs[r * xstride + b].corr);
        if (type == TL_TYPE_Q8_0) {
            UNROLL
            for (int g = 0; g < 8; g++) {
                __m512i w0 = _mm512_loadu_si512(q + g * NR * 4);
                __m512i w1 = _mm512_loadu_si512(q + g * NR * 4 + 64);
                UNROLL
                for (int r = 0; r < M; r++) {
                    int32_t x4;
                    memcpy(&x4, xs[r * xstride + b].q + 4 * g, 4);
                    __m512i x = _mm512_set1_epi32(x4);
                    s[r][0] = _mm512_dpbusd_epi32(s[r][0], w0, x);
                    s[r][1] = _mm512_dpbusd_epi32(s[r][1], w1, x);
                }
            }
        } else { /* Q4_0: low nibbles are group h, high nibbles group h + 4 */
            UNROLL
            for (int h = 0; h < 4; h++) {
                __m512i v0 = _mm512_loadu_si512(q + h * NR * 4);
                __m512i v1 = _mm512_loadu_si512(q + h * NR * 4 + 64);
                __m512i lo0 = _mm512_and_si512(v0, m4), lo1 = _mm512_and_si512(v1, m4);
                __m512i hi0 = _mm512_and_si512(_mm512_srli_epi16(v0, 4), m4);
                __m512i hi1 = _mm512_and_si512(_mm512_srli_epi16(v1, 4), m4);
                UNROLL
                for (int r = 0; r < M; r++) {
                    int32_t xl, xh;
                    memcpy(&xl, xs[r * xstride + b].q + 4 * h, 4);
                    memcpy(&xh, xs[r * xstride + b].q + 4 * h + 16, 4);
                    __m512i x = _mm512_set1_epi32(xl), y = _mm512_set1_epi32(xh);
                    s[r][0] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(s[r][0], lo0, x), hi0, y);
                    s[r][1] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(s[r][1], lo1, x), hi1, y);
                }
            }
        }
        const __m512 sc0 = _mm512_cvtph_ps(loadu256(pb)), sc1 = _mm512_cvtph_ps(loadu256(pb + 32));
        UNROLL
        for (int r = 0; r < M; r++) {
            __m512 dx = _mm512_set1_ps(xs[r * xstride + b].d);
            acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][0]), _mm512_mul_ps(sc0, dx), acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][1]), _mm512_mul_ps(sc1, dx), acc[r][1]);
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

#define UKERNEL_CASES(T)                                                                        \
    switch (m) {                                                                                \
    case 6: ukernel(T, 6, kb, panel, xs, xstride, C, ldc, add, prefetch); break;                \
    case 5: ukernel(T, 5, kb, panel, xs, xstride, C, ldc, add, prefetch); break;                \
    case 4: ukernel(T, 4, kb, panel, xs, xstride, C, ldc, add, prefetch); break;                \
    case 3: ukernel(T, 3, kb, panel, xs, xstride, C, ldc, add, prefetch); break;                \
    case 2: ukernel(T, 2, kb, panel, xs, xstride, C, ldc, add, prefetch); break;                \
    default: ukernel(T, 1, kb, panel, xs, xstride, C, ldc, add, prefetch); break;               \
    }

static void ukernel_any(tl_type type, size_t m, size_t kb, const uint8_t *panel,
                        const act_rec *xs, size_t xstride, float *C, size_t ldc, int add,
                        size_t prefetch) {
    if (type == TL_TYPE_Q8_0) UKERNEL_CASES(TL_TYPE_Q8_0)
    else UKERNEL_CASES(TL_TYPE_Q4_0)
}

/* One panel (columns [jb, jb + nj)) against all n rows over blocks [b0, b0 + kb). */
static void panel_rows(tl_type type, const uint8_t *panel, size_t b0, size_t kb, size_t nj,
                       const act_rec *xs, size_t nb, size_t n, float *Y, size_t ldy, size_t jb,
                       int add, size_t prefetch) {
    for (size_t i0 = 0, t = 0; i0 < n; i0 += tl__tile_rows(n, t++, MR)) {
        const size_t m = tl__tile_rows(n, t, MR);
        float *yb = Y + i0 * ldy + jb;
        const act_rec *x = xs + i0 * nb + b0;
        if (nj == NR) {
            ukernel_any(type, m, kb, panel, x, nb, yb, ldy, add, prefetch);
        } else { /* partial panel: a full tile, then the valid columns */
            float tile[MR * NR];
            ukernel_any(type, m, kb, panel, x, nb, tile, NR, 0, prefetch);
            tl__tile_store(yb, ldy, tile, NR, m, nj, add);
        }
    }
}

void tl__gemm_q_avx512_act(tl_type type, const uint8_t *W, int panels, size_t k, size_t j0,
                           size_t j1, const act_rec *act, size_t n, float *Y, size_t ldy) {
    const size_t nb = k / TL_QK, row_bytes = tl_type_row_bytes(type, k);
    const size_t pbytes = block_panel_bytes(type);
    const act_rec *xs = act;
    _Alignas(64) uint8_t packed[KB * NR * sizeof(tl_block_q8_0)];
    if (n <= PANEL_MAJOR_MAX_N) {
        const size_t pf = tl__prefetch_distance(), bb = tl_type_block_bytes(type);
        prefetch_start(W + j0 * row_bytes, (j1 - j0) * row_bytes, pf);
        for (size_t jb = j0; jb < j1; jb += NR) {
            const size_t nj = j1 - jb < NR ? j1 - jb : NR;
            for (size_t b0 = 0; b0 < nb; b0 += KB) {
                const size_t kb = nb - b0 < KB ? nb - b0 : KB;
                const uint8_t *panel = W + jb * row_bytes + b0 * pbytes;
                if (!panels) { /* this slice of the 32 rows; the walk's next slice on its way */
                    const size_t nb0 = b0 + KB < nb ? b0 + KB : 0, njb = nb0 ? jb : jb + NR;
                    const size_t nkb = nb - nb0 < KB ? nb - nb0 : KB;
                    for (size_t r = 0; njb + r < j1 && r < NR; r++)
                        for (size_t o = 0; o < nkb * bb; o += 64)
                            _mm_prefetch((const char *)(W + (njb + r) * row_bytes + nb0 * bb + o),
                                         _MM_HINT_T0);
                    for (size_t b = 0; b < kb; b++)
                        pack_block_part(type, W + jb * row_bytes, row_bytes, b0 + b, nj, packed + b * pbytes);
                    panel = packed;
                }
                panel_rows(type, panel, b0, kb, nj, xs, nb, n, Y, ldy, jb, b0 > 0, panels ? pf : 0);
            }
        }
        return;
    }
    for (size_t b0 = 0; b0 < nb; b0 += KB) {
        const size_t kb = nb - b0 < KB ? nb - b0 : KB;
        for (size_t jb = j0; jb < j1; jb += NR) {
            const size_t nj = j1 - jb < NR ? j1 - jb : NR;
            const uint8_t *panel = packed;
            if (panels) {
                panel = W + jb * row_bytes + b0 * pbytes;
            } else {
                for (size_t b = 0; b < kb; b++)
                    pack_block_part(type, W + jb * row_bytes, row_bytes, b0 + b, nj, packed + b * pbytes);
            }
            panel_rows(type, panel, b0, kb, nj, xs, nb, n, Y, ldy, jb, b0 > 0, 0);
        }
    }
}
