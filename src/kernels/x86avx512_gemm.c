/* x86avx512_gemm.c - the Q8_0 / Q4_0 GEMM (prefill, n > TL_GROUPED_MAX_N rows) on 8-bit
 * integer dot products: AVX-512 VNNI's vpdpbusd on 512-bit registers. Built with
 * -mavx512f -mavx512bw -mavx512vnni only when the compiler supports them
 * (TL_HAVE_AVX512VNNI); x86_gemm.c calls it only after a run-time check (x86_cpu.c), and
 * its float GEMM stays the path everywhere else.
 *
 * Arithmetic (kernels.h's contract, as the int8 matvec computes it): each 32-element
 * block of an X row is rounded to (d_x, q_x) (tl_quant_act_row_fast, bit-exact with
 * quant.c); block b of output (i, j) adds d_w*d_x * sum_c q_x*w, the integer sum exact in
 * int32, converted, scaled by the f32 product d_w*d_x and accumulated in f32.
 * vpdpbusd multiplies unsigned by signed bytes, so the weights are the unsigned side,
 * offset by `off`: Q8_0 w + 128, Q4_0 its nibble (w + 8). Each block's integer sum starts
 * at -off * sum_c q_x, which cancels the offset exactly.
 *
 * Blocking: for each k-slice of KB blocks, the slice of all n X rows is rounded into
 * scratch (per row and block: d, q, and -off*sum q); for each panel of NR = 32 output
 * columns the weights are packed as [block][4-element group][32 columns][4 bytes] (1 KiB
 * per block, zero-weight columns past j1) with their scales as f32 [block][32]; a
 * micro-kernel of up to MR rows x 32 columns (two zmm per row) sweeps the rows. The first
 * slice stores into Y, later ones add to it.
 */
#include <string.h>
#include "kernels/x86_dequant.h"
#include "kernels/x86_matmul.h"

#define MR 6  /* micro-tile rows of X (and Y) */
#define NR 32 /* micro-tile columns j (two zmm) */
#define KB 16 /* blocks per k-slice */
#define GROUP_BYTES (NR * 4)         /* one 4-element group of the panel's 32 columns */
#define BLOCK_BYTES (8 * GROUP_BYTES) /* one 32-element block of the panel */

/* The rounded slice of one X row: per block d, -off*sum q, q. */
typedef struct act_slice {
    float d[KB];
    int32_t corr[KB];
    int8_t q[KB][TL_QK];
} act_slice;

size_t tl__gemm_q_avx512_scratch_bytes(size_t n) {
    return (size_t)KB * (BLOCK_BYTES + NR * sizeof(float)) + n * sizeof(act_slice) + 64;
}

/* Rounds blocks [b0, b0 + kb) of n X rows into xs[i]; off is the weights' offset. */
static void round_slice(const float *X, size_t ldx, size_t n, size_t b0, size_t kb,
                        int32_t off, act_slice *xs) {
    for (size_t i = 0; i < n; i++) {
        tl_block_q8_act blk[KB];
        tl_quant_act_row_fast(X + i * ldx + b0 * TL_QK, blk, kb * TL_QK);
        for (size_t b = 0; b < kb; b++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)blk[b].q);
            /* sum of the 32 signed bytes: widen to 16 bits against ones, then pairs */
            __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
            __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            xs[i].d[b] = blk[b].d;
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
            xs[i].corr[b] = -off * _mm_cvtsi128_si32(h);
            _mm256_storeu_si256((__m256i *)(void *)xs[i].q[b], q);
        }
    }
}

/* Packs blocks [b0, b0 + kb) of weight rows [jb, jb + nj) (nj <= NR) into panel and
 * scale (layout at the top): per block, each row's 32 unsigned weights are 8 dwords (one
 * 4-element group each), and 8 rows at a time are transposed so that a group's dwords
 * for consecutive columns are contiguous. Columns past j1 get zero weights and scales. */
static void pack_panel(tl_type type, const uint8_t *W, size_t row_bytes, size_t b0, size_t kb,
                       size_t jb, size_t nj, uint8_t *panel, float *scale) {
    const size_t bb = type == TL_TYPE_Q8_0 ? 34 : 18;
    const __m256i flip = _mm256_set1_epi8((char)0x80), m4 = _mm256_set1_epi8(0x0f);
    const __m256i zero_w = type == TL_TYPE_Q8_0 ? flip : _mm256_set1_epi8(0x08);
    for (size_t b = 0; b < kb; b++)
        for (size_t j8 = 0; j8 < NR; j8 += 8) {
            __m256 r[8];
            for (size_t t = 0; t < 8; t++) {
                const size_t jj = j8 + t;
                __m256i v = zero_w;
                float d = 0;
                if (jj < nj) {
                    const uint8_t *p = W + (jb + jj) * row_bytes + (b0 + b) * bb;
                    d = load_f16_scale(p);
                    if (type == TL_TYPE_Q8_0) { /* w + 128 as unsigned bytes */
                        v = _mm256_xor_si256(loadu256(p + 2), flip);
                    } else { /* elements 0-15: low nibbles of bytes 0-15; 16-31: high */
                        __m256i x = _mm256_broadcastsi128_si256(loadu128(p + 2));
                        v = _mm256_and_si256(_mm256_blend_epi32(x, _mm256_srli_epi16(x, 4), 0xf0), m4);
                    }
                }
                scale[b * NR + jj] = d;
                r[t] = _mm256_castsi256_ps(v);
            }
            transpose8_regs(r, (float *)(void *)(panel + b * BLOCK_BYTES + j8 * 4), GROUP_BYTES / 4);
        }
}

/* C[r*ldc + 0..31] (+)= the slice's products of rows xs[0..M) with the panel. */
static ALWAYS_INLINE void ukernel(const int M, size_t kb, const uint8_t *panel,
                                  const float *scale, const act_slice *xs, float *C,
                                  size_t ldc, int add) {
    __m512 acc[MR][2];
    UNROLL
    for (int r = 0; r < M; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (size_t b = 0; b < kb; b++) {
        const uint8_t *pb = panel + b * BLOCK_BYTES;
        __m512i s[MR][2];
        UNROLL
        for (int r = 0; r < M; r++) s[r][0] = s[r][1] = _mm512_set1_epi32(xs[r].corr[b]);
        UNROLL
        for (int g = 0; g < 8; g++) {
            __m512i w0 = _mm512_loadu_si512(pb + g * GROUP_BYTES);
            __m512i w1 = _mm512_loadu_si512(pb + g * GROUP_BYTES + 64);
            UNROLL
            for (int r = 0; r < M; r++) {
                int32_t x4;
                memcpy(&x4, xs[r].q[b] + 4 * g, 4);
                __m512i x = _mm512_set1_epi32(x4);
                s[r][0] = _mm512_dpbusd_epi32(s[r][0], w0, x);
                s[r][1] = _mm512_dpbusd_epi32(s[r][1], w1, x);
            }
        }
        __m512 sc0 = _mm512_loadu_ps(scale + b * NR), sc1 = _mm512_loadu_ps(scale + b * NR + 16);
        UNROLL
        for (int r = 0; r < M; r++) {
            __m512 dx = _mm512_set1_ps(xs[r].d[b]);
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

static void ukernel_any(size_t m, size_t kb, const uint8_t *panel, const float *scale,
                        const act_slice *xs, float *C, size_t ldc, int add) {
    switch (m) {
    case 6: ukernel(6, kb, panel, scale, xs, C, ldc, add); break;
    case 5: ukernel(5, kb, panel, scale, xs, C, ldc, add); break;
    case 4: ukernel(4, kb, panel, scale, xs, C, ldc, add); break;
    case 3: ukernel(3, kb, panel, scale, xs, C, ldc, add); break;
    case 2: ukernel(2, kb, panel, scale, xs, C, ldc, add); break;
    default: ukernel(1, kb, panel, scale, xs, C, ldc, add); break;
    }
}

void tl__gemm_q_avx512(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                       const float *X, size_t ldx, size_t n, float *Y, size_t ldy,
                       void *scratch) {
    const size_t nb = k / TL_QK, row_bytes = tl_type_row_bytes(type, k);
    const int32_t off = type == TL_TYPE_Q8_0 ? 128 : 8;
    uint8_t *panel = scratch;
    float *scale = (float *)(void *)(panel + KB * BLOCK_BYTES);
    act_slice *xs = (act_slice *)(void *)(scale + KB * NR);
    for (size_t b0 = 0; b0 < nb; b0 += KB) {
        const size_t kb = nb - b0 < KB ? nb - b0 : KB;
        const int add = b0 > 0;
        round_slice(X, ldx, n, b0, kb, off, xs);
        for (size_t jb = j0; jb < j1; jb += NR) {
            const size_t nj = j1 - jb < NR ? j1 - jb : NR;
            pack_panel(type, W, row_bytes, b0, kb, jb, nj, panel, scale);
            for (size_t i0 = 0, t = 0; i0 < n; i0 += tl__tile_rows(n, t++, MR)) {
                const size_t m = tl__tile_rows(n, t, MR);
                float *yb = Y + i0 * ldy + jb;
                if (nj == NR) {
                    ukernel_any(m, kb, panel, scale, xs + i0, yb, ldy, add);
                } else { /* partial panel: a full tile, then the valid columns */
                    float tile[MR * NR];
                    ukernel_any(m, kb, panel, scale, xs + i0, tile, NR, 0);
                    tl__tile_store(yb, ldy, tile, NR, m, nj, add);
                }
            }
        }
    }
}
