/* x86avx512_colmat.c - the 512-bit inner kernels of tl_colmat_fast (x86_colmat.c has the
 * design, the tiling and the dispatch): the streaming pass of up to GROUP runs' slices
 * over the accumulators of up to STREAM_ROWS rows, and the GEMM's micro-kernel over a
 * 32-wide panel strip. Built with the
 * AVX-512 flags only when the compiler supports them (TL_HAVE_AVX512VNNI); called only
 * after the run-time check (x86_cpu.c).
 *
 * Arithmetic: x86_colmat.c's, lane for lane (y = fma(x, w, y), w = d*q exact for
 * Q8_0/Q4_0, per channel in order), so both instruction sets give the same bits. The
 * float types' tails use masked loads and stores, which never touch the elements masked
 * off.
 */
#include <string.h>
#include "kernels/x86_dequant.h"
#include "kernels/x86_matmul.h"

#define GROUP 8       /* runs per pass at most (x86_colmat.c) */
#define STREAM_ROWS 4 /* rows per pass at most (x86_colmat.c) */
#define MR 8          /* micro-tile: 8 rows x 32 outputs, 16 accumulators */
#define NR 32

/* The 32 values at p in two registers: w for the float types, the integer quants for Q8_0
 * and Q4_0 (nibble - 8; the caller multiplies them by the block's d). */
static ALWAYS_INLINE void values32_512(tl_type type, const uint8_t *p, __m512 w[2]) {
    switch (type) {
    case TL_TYPE_F32:
        w[0] = _mm512_loadu_ps(p);
        w[1] = _mm512_loadu_ps(p + 64);
        break;
    case TL_TYPE_F16:
        w[0] = _mm512_cvtph_ps(loadu256(p));
        w[1] = _mm512_cvtph_ps(loadu256(p + 32));
        break;
    case TL_TYPE_BF16:
        w[0] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(loadu256(p)), 16));
        w[1] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(loadu256(p + 32)), 16));
        break;
    case TL_TYPE_Q8_0:
        w[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(loadu128(p + 2)));
        w[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(loadu128(p + 18)));
        break;
    case TL_TYPE_Q4_0: {
        /* byte j: element j in its low nibble, j + 16 in its high one; a nibble picks its
         * value nibble - 8 from a 16-entry table (vpermps reads an index's low 4 bits) */
        const __m512 table = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
        const __m512i b = _mm512_cvtepu8_epi32(loadu128(p + 2));
        w[0] = _mm512_permutexvar_ps(b, table);
        w[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), table);
        break;
    }
    default:
        w[0] = w[1] = _mm512_setzero_ps();
        break;
    }
}

/* Elements [o, o + popcount(m)) of a float type's slice at p (lanes of m only). */
static ALWAYS_INLINE __m512 load16_masked(tl_type type, const uint8_t *p, __mmask16 m) {
    switch (type) {
    case TL_TYPE_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
    case TL_TYPE_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
    default: return _mm512_maskz_loadu_ps(m, p);
    }
}

/* y[r*ldy + o] = fma(x[r*ldxg + g], w, ...) for g < G in order,
 * r < N, o < len (x86_colmat.c's runs(), lane for lane). */
static ALWAYS_INLINE void runs(tl_type type, const int G, const int N, const uint8_t *const *run,
                               const float *x, size_t ldxg, size_t len, float *y, size_t ldy,
                               const uint8_t *const *pf, size_t npf) {
    const int scaled = type == TL_TYPE_Q8_0 || type == TL_TYPE_Q4_0;
    const size_t bb = bytes32(type), es = tl_type_block_bytes(type);
    size_t o = 0, b = 0;
    for (; o + 32 <= len; o += 32, b += bb) {
        for (size_t h = 0; h < npf; h++) {
            _mm_prefetch((const char *)(pf[h] + b), _MM_HINT_T1);
            if (type == TL_TYPE_F32) _mm_prefetch((const char *)(pf[h] + b + 64), _MM_HINT_T1);
        }
        __m512 acc[STREAM_ROWS][2];
        UNROLL
        for (int r = 0; r < N; r++) {
            acc[r][0] = _mm512_loadu_ps(y + r * ldy + o);
            acc[r][1] = _mm512_loadu_ps(y + r * ldy + o + 16);
        }
        UNROLL
        for (int g = 0; g < G; g++) {
            __m512 w[2];
            values32_512(type, run[g] + b, w);
            if (scaled) { /* w = d*q, exact (module comment of x86_colmat.c) */
                const __m512 d = _mm512_set1_ps(load_f16_scale(run[g] + b));
                w[0] = _mm512_mul_ps(d, w[0]);
                w[1] = _mm512_mul_ps(d, w[1]);
            }
            UNROLL
            for (int r = 0; r < N; r++) {
                const __m512 xv = _mm512_set1_ps(x[r * ldxg + g]);
                acc[r][0] = _mm512_fmadd_ps(xv, w[0], acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(xv, w[1], acc[r][1]);
            }
        }
        UNROLL
        for (int r = 0; r < N; r++) {
            _mm512_storeu_ps(y + r * ldy + o, acc[r][0]);
            _mm512_storeu_ps(y + r * ldy + o + 16, acc[r][1]);
        }
    }
    for (int r = 0; r < N && o < len; r++) /* float types' tails */
        for (size_t e = o; e < len; e += 16) {
            const __mmask16 m =
                len - e >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (len - e)) - 1);
            __m512 a = _mm512_maskz_loadu_ps(m, y + r * ldy + e);
            for (int g = 0; g < G; g++)
                a = _mm512_fmadd_ps(_mm512_set1_ps(x[r * ldxg + g]),
                                    load16_masked(type, run[g] + e * es, m), a);
            _mm512_mask_storeu_ps(y + r * ldy + e, m, a);
        }
}

#define RUNS_N(T, G)                                                                     \
    switch (N) {                                                                         \
    case 1: runs(T, G, 1, run, x, ldxg, len, y, ldy, pf, npf); return;                   \
    case 2: runs(T, G, 2, run, x, ldxg, len, y, ldy, pf, npf); return;                   \
    case 3: runs(T, G, 3, run, x, ldxg, len, y, ldy, pf, npf); return;                   \
    default: runs(T, G, 4, run, x, ldxg, len, y, ldy, pf, npf); return;                  \
    }
#define RUNS_CASES(T)                                                                    \
    if (G == GROUP) { RUNS_N(T, GROUP) }                                                 \
    else { RUNS_N(T, 1) }

void tl__colmat_runs_avx512(tl_type type, const uint8_t *const *run, const float *x,
                            size_t ldxg, size_t G, size_t N, size_t len, float *y, size_t ldy,
                            const uint8_t *const *pf, size_t npf) {
    switch (type) {
    case TL_TYPE_F32: RUNS_CASES(TL_TYPE_F32)
    case TL_TYPE_F16: RUNS_CASES(TL_TYPE_F16)
    case TL_TYPE_BF16: RUNS_CASES(TL_TYPE_BF16)
    case TL_TYPE_Q8_0: RUNS_CASES(TL_TYPE_Q8_0)
    case TL_TYPE_Q4_0: RUNS_CASES(TL_TYPE_Q4_0)
    default: return;
    }
}

/* C[r*ldc + 0..31] = fma chain over c < kc of xp[r*ldxp + c] * strip[c*32 + 0..31], r < M,
 * from C's values (add) or +0. */
static ALWAYS_INLINE void ukernel(const int M, size_t kc, const float *strip, const float *xp,
                                  size_t ldxp, float *C, size_t ldc, int add) {
    __m512 acc[MR][2];
    UNROLL
    for (int r = 0; r < M; r++) {
        acc[r][0] = add ? _mm512_loadu_ps(C + r * ldc) : _mm512_setzero_ps();
        acc[r][1] = add ? _mm512_loadu_ps(C + r * ldc + 16) : _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (size_t c = 0; c < kc; c++) {
        const __m512 b0 = _mm512_loadu_ps(strip + c * NR);
        const __m512 b1 = _mm512_loadu_ps(strip + c * NR + 16);
        UNROLL
        for (int r = 0; r < M; r++) {
            const __m512 a = _mm512_set1_ps(xp[r * ldxp + c]);
            acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    UNROLL
    for (int r = 0; r < M; r++) {
        _mm512_storeu_ps(C + r * ldc, acc[r][0]);
        _mm512_storeu_ps(C + r * ldc + 16, acc[r][1]);
    }
}

static void ukernel_any(size_t m, size_t kc, const float *strip, const float *xp, size_t ldxp,
                        float *C, size_t ldc, int add) {
    switch (m) {
    case 8: ukernel(8, kc, strip, xp, ldxp, C, ldc, add); break;
    case 7: ukernel(7, kc, strip, xp, ldxp, C, ldc, add); break;
    case 6: ukernel(6, kc, strip, xp, ldxp, C, ldc, add); break;
    case 5: ukernel(5, kc, strip, xp, ldxp, C, ldc, add); break;
    case 4: ukernel(4, kc, strip, xp, ldxp, C, ldc, add); break;
    case 3: ukernel(3, kc, strip, xp, ldxp, C, ldc, add); break;
    case 2: ukernel(2, kc, strip, xp, ldxp, C, ldc, add); break;
    default: ukernel(1, kc, strip, xp, ldxp, C, ldc, add); break;
    }
}

void tl__colmat_strip_avx512(const float *strip, size_t kc, const float *xp, size_t ldxp,
                             size_t m, float *Y, size_t ldy, size_t nj, int add) {
    for (size_t i0 = 0, t = 0; i0 < m; i0 += tl__tile_rows(m, t++, MR)) {
        const size_t mt = tl__tile_rows(m, t, MR);
        if (nj == NR) {
            ukernel_any(mt, kc, strip, xp + i0 * ldxp, ldxp, Y + i0 * ldy, ldy, add);
            continue;
        }
        /* a partial strip through a tile holding Y's values: the same chain */
        float tile[MR * NR] = {0};
        for (size_t r = 0; r < mt && add; r++)
            memcpy(tile + r * NR, Y + (i0 + r) * ldy, nj * sizeof(float));
        ukernel_any(mt, kc, strip, xp + i0 * ldxp, ldxp, tile, NR, add);
        for (size_t r = 0; r < mt; r++)
            memcpy(Y + (i0 + r) * ldy, tile + r * NR, nj * sizeof(float));
    }
}
