/* x86_matmul.c - AVX2+FMA+F16C matrix products over weight rows of any tl_type: the
 * dispatcher, and the small vector kernels (dot, axpy).
 *
 * Paths, chosen by the instruction set and the number of activation rows n:
 *  - AVX-512 VNNI CPUs, Q8_0/Q4_0: the int8 GEMM for every n (x86avx512_gemm.c), weights in
 *    32-row panels or packed per call, X rounded once per product into records; one
 *    arithmetic whatever the layout, so results do not depend on placement.
 *  - matvec (n <= TL_MATVEC_MAX_N, decode; x86_matvec.c): memory-bound, each weight row
 *    streamed once against all n rows. Float types FMA in f32; Q8_0/Q4_0 use the
 *    rounded-activation contract of kernels.h as int8 dot products over activations
 *    prepared once per product (tl_matmul_act_prepare, x86_act.c; ops.c shares them
 *    between threads), on AVX-VNNI when this CPU has it (x86vnni_matmul.c, x86_cpu.c).
 *  - grouped matvec (TL_MATVEC_MAX_N < n <= TL_GROUPED_MAX_N, batched decode and short
 *    prompts): the matvec kernel over groups of up to 4 rows. The first group streams
 *    the thread's weight rows from DRAM, the next ones find them in L2 (ops.c splits a
 *    product into chunks of a few hundred KB); packing weight panels for the GEMM costs
 *    as much for few rows as for many, so re-reading the rows from cache is cheaper.
 *    Q8_0/Q4_0 leave it above tl__q_gemm_after_n rows for the 256-bit int8 GEMM
 *    (x86vnni_gemm.c on AVX-VNNI, x86_gemm_q.c on AVX2: the AVX-512 kernel's arithmetic).
 *  - Q4_1/Q5_0/Q5_1 and the K-quants: integer products for every n (x86_matvec_ext.c),
 *    each weight row read once against all rows of X; the K-quants on AVX-512 where the
 *    CPU has it (x86avx512_matvec_ext.c for one row of X, x86avx512_ext_pairs.c for
 *    more), with the AVX2 kernel's integer lanes and float steps, so the same bits.
 *  - gemm (larger n, prefill): compute-bound, packed weight panels and a register-tile
 *    micro-kernel: float types 512-bit FMA on AVX-512 CPUs (x86avx512_gemm_f.c), else f32
 *    FMA on dequantized panels (x86_gemm.c).
 * Invariants: dequantization is exact (as in quant.c), activation rounding is bit-exact
 * with quant.c's, accumulation is f32, so results agree with tl_matmul_ref to float
 * rounding. Weight rows may start at any 2-aligned address: all vector loads are
 * unaligned, block scales are read with memcpy. Scratch is assumed 32-byte aligned only
 * (all accesses are loadu/storeu anyway).
 */
#include <math.h>
#include "kernels/x86_matmul.h"
#include "kernels/x86_simd.h"

/* ---- dispatch ---- */

size_t tl_matmul_scratch_floats(size_t k, size_t n) {
    size_t nv = n < TL_GROUPED_MAX_N ? n : TL_GROUPED_MAX_N;
    size_t act = tl__act_floats(TL_TYPE_Q4_0, k, nv); /* matvec: the larger records */
    size_t gemm = tl__gemm_scratch_floats();
    /* the int8 GEMMs' activation records (AVX-512 VNNI, AVX-VNNI) */
    /* (also bounds the other rounding types' activations, tl__ext_act_floats: 40 bytes per
     * 32-block or 292 per 256-block) */
    const size_t records = n * (k / TL_QK) * sizeof(tl__act_rec) / sizeof(float);
    if (records > gemm) gemm = records;
#ifdef TL_HAVE_AVX512VNNI
    if (tl__gemm_f_avx512_scratch_floats() > gemm) gemm = tl__gemm_f_avx512_scratch_floats();
#endif
    size_t f = act > gemm ? act : gemm;
    return (f + 15) / 16 * 16; /* whole cache lines: per-thread slices stay aligned */
}

/* The rounded-activation matvec on one instruction set, over groups of up to
 * TL_MATVEC_MAX_N rows (row i's pair records start i * row_step bytes into xa). */
static void act_groups(int vnni, tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                       const uint8_t *xa, size_t n, float *Y, size_t ldy) {
    const size_t row_step = (k / TL_QK + 1) / 2 * act_record_bytes(type);
    for (size_t i = 0; i < n; i += TL_MATVEC_MAX_N) {
        size_t g = n - i < TL_MATVEC_MAX_N ? n - i : TL_MATVEC_MAX_N;
#ifdef TL_HAVE_AVXVNNI
        if (vnni) {
            tl__matvec_q_vnni(type, W, k, j0, j1, xa + i * row_step, g, Y + i * ldy, ldy);
            continue;
        }
#else
        (void)vnni;
#endif
        tl__matvec_q_avx2(type, W, k, j0, j1, xa + i * row_step, g, Y + i * ldy, ldy);
    }
}

/* Weights in panels where the AVX-512 kernel is absent (tl_panels_wanted never asks for
 * them there, so only direct callers reach this): the records' contract in scalar code,
 * accumulated as the vector kernels do (fused per block, restarted every 16-block
 * k-slice and added to the slices before). */
static void panels_act_scalar(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                              const tl__act_rec *xs, size_t n, float *Y, size_t ldy) {
    const size_t nb = k / TL_QK, bb = tl_type_block_bytes(type), row_bytes = tl_type_row_bytes(type, k);
    for (size_t j = j0; j < j1; j++) {
        const uint8_t *panel = W + (j / TL_PANEL_ROWS) * TL_PANEL_ROWS * row_bytes;
        const size_t r = j % TL_PANEL_ROWS;
        for (size_t i = 0; i < n; i++) {
            float y = 0.0f, acc = 0.0f;
            for (size_t b = 0; b < nb; b++) {
                if (b % 16 == 0) acc = 0.0f;
                const uint8_t *pb = panel + b * TL_PANEL_ROWS * bb, *q = pb + 2 * TL_PANEL_ROWS;
                const tl__act_rec *x = &xs[i * nb + b];
                uint16_t d;
                memcpy(&d, pb + 2 * r, 2);
                int32_t s = x->corr;
                for (size_t e = 0; e < TL_QK; e++) {
                    int u;
                    if (type == TL_TYPE_Q8_0) u = q[(e / 4) * 4 * TL_PANEL_ROWS + 4 * r + e % 4];
                    else {
                        const size_t byte = e % 16;
                        const uint8_t v = q[(byte / 4) * 4 * TL_PANEL_ROWS + 4 * r + byte % 4];
                        u = e < 16 ? v & 0x0f : v >> 4;
                    }
                    s += u * x->q[e];
                }
                acc = fmaf((float)s, tl_f16_to_f32(d) * x->d, acc);
                if (b % 16 == 15 || b + 1 == nb) y = b < 16 ? acc : y + acc;
            }
            Y[i * ldy + j] = y;
        }
    }
}

/* The int8 GEMM over weights in the file's rows on the widest of AVX-VNNI and AVX2 up
 * to isa (AVX-512 VNNI is the caller's). */
static void gemm_q_rows(tl__isa isa, tl_type type, const uint8_t *W, size_t k, size_t j0,
                        size_t j1, const tl__act_rec *xs, size_t n, float *Y, size_t ldy) {
#ifdef TL_HAVE_AVXVNNI
    if (isa >= TL_ISA_AVXVNNI && tl__cpu_has_avxvnni()) {
        tl__gemm_q_vnni_act(type, W, k, j0, j1, xs, n, Y, ldy);
        return;
    }
#endif
    (void)isa;
    tl__gemm_q_avx2_act(type, W, k, j0, j1, xs, n, Y, ldy);
}

/* The product from prepared activations on instruction sets up to isa. */
static void act_product(tl__isa isa, tl_type type, tl_weights_layout layout, const void *W,
                        size_t k, size_t j0, size_t j1, const float *act, size_t n, float *Y,
                        size_t ldy) {
    if (j0 >= j1 || n == 0) return;
    if (tl_type_rounds_act(type) && !tl_type_int8_gemm(type)) { /* Q4_1, Q5_x, K-quants */
        tl__matmul_ext_act(isa, type, W, k, j0, j1, act, n, Y, ldy);
        return;
    }
    if (tl__act_takes_records(type, layout, n)) {
        const int panels = layout == TL_LAYOUT_PANELS;
        const tl__act_rec *xs = (const tl__act_rec *)(const void *)act;
#ifdef TL_HAVE_AVX512VNNI
        if (isa == TL_ISA_AVX512VNNI) {
            tl__gemm_q_avx512_act(type, W, panels, k, j0, j1, xs, n, Y, ldy);
            return;
        }
#endif
        if (!panels) {
            gemm_q_rows(isa, type, W, k, j0, j1, xs, n, Y, ldy);
            return;
        }
        panels_act_scalar(type, W, k, j0, j1, xs, n, Y, ldy);
        return;
    }
    act_groups(isa >= TL_ISA_AVXVNNI && tl__cpu_has_avxvnni(), type, W, k, j0, j1,
               (const uint8_t *)act, n, Y, ldy);
}

void tl_matmul_fast_act(tl_type type, tl_weights_layout layout, const void *W, size_t k,
                        size_t j0, size_t j1, const float *act, size_t n, float *Y, size_t ldy) {
    act_product(tl__cpu_widest_isa(), type, layout, W, k, j0, j1, act, n, Y, ldy);
}

int tl__matmul_fast_act_isa(tl__isa isa, tl_type type, tl_weights_layout layout, const void *W,
                            size_t k, size_t j0, size_t j1, const float *act, size_t n,
                            float *Y, size_t ldy) {
    if (isa == TL_ISA_AVXVNNI && !tl__cpu_has_avxvnni()) return 0;
    if (isa == TL_ISA_AVX512VNNI && !tl__cpu_has_avx512vnni()) return 0;
    /* records are read by the int8 GEMMs (every set for the file's rows, AVX-512 VNNI for
     * panels, else the scalar fallback), pair records by the AVX2 and AVX-VNNI matvec; the
     * other rounding types' own records by every set */
    const int records = tl__act_takes_records(type, layout, n);
    const int ext = tl_type_rounds_act(type) && !tl_type_int8_gemm(type);
    if (!records && !ext && isa == TL_ISA_AVX512VNNI) return 0;
    /* panels below AVX-512 VNNI: the scalar fallback, so the tests can compare it */
    act_product(isa, type, layout, W, k, j0, j1, act, n, Y, ldy);
    return 1;
}

static void matmul(tl__isa isa, tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                   const float *X, size_t ldx, size_t n, float *Y, size_t ldy, float *scratch);

int tl_matmul_takes_gemm(tl_type type, size_t n) {
    if (tl_type_rounds_act(type) && !tl_type_int8_gemm(type)) return 0;
    if (tl_type_rounds_act(type)) return n > tl__q_gemm_after_n(tl__cpu_widest_isa());
    return n > TL_GROUPED_MAX_N;
}

int tl__matmul_fast_isa(tl__isa isa, tl_type type, const void *W, size_t k, size_t j0,
                        size_t j1, const float *X, size_t ldx, size_t n, float *Y, size_t ldy,
                        float *scratch) {
    if ((isa == TL_ISA_AVXVNNI && !tl__cpu_has_avxvnni()) ||
        (isa == TL_ISA_AVX512VNNI && !tl__cpu_has_avx512vnni()))
        return 0;
    matmul(isa, type, W, k, j0, j1, X, ldx, n, Y, ldy, scratch);
    return 1;
}

void tl_matmul_fast(tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                    const float *X, size_t ldx, size_t n, float *Y, size_t ldy,
                    float *scratch) {
    matmul(tl__cpu_widest_isa(), type, W, k, j0, j1, X, ldx, n, Y, ldy, scratch);
}

/* tl_matmul_fast on the instruction sets up to isa (available: checked by the caller). */
static void matmul(tl__isa isa, tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                   const float *X, size_t ldx, size_t n, float *Y, size_t ldy, float *scratch) {
    const uint8_t *w = W;
    const int q = tl_type_int8_gemm(type);
    if (j0 >= j1 || n == 0) return;
    if (tl_type_rounds_act(type) && !q) { /* Q4_1, Q5_x, K-quants: every n */
        tl__matmul_ext(isa, type, w, k, j0, j1, X, ldx, n, Y, ldy, scratch);
        return;
    }
    if (q && n > tl__q_gemm_after_n(isa)) { /* Q8_0/Q4_0: the int8 GEMM of isa */
        tl__act_rec *xs = (tl__act_rec *)(void *)scratch;
        tl__act_records(type, k, X, ldx, 0, n, xs);
#ifdef TL_HAVE_AVX512VNNI
        if (isa == TL_ISA_AVX512VNNI) {
            tl__gemm_q_avx512_act(type, w, 0, k, j0, j1, xs, n, Y, ldy);
            return;
        }
#endif
        gemm_q_rows(isa, type, w, k, j0, j1, xs, n, Y, ldy);
        return;
    }
#ifdef TL_HAVE_AVX512VNNI
    if (isa == TL_ISA_AVX512VNNI && n > TL_GROUPED_MAX_N) {
        tl__gemm_f_avx512(type, w, k, j0, j1, X, ldx, n, Y, ldy, scratch);
        return;
    }
#endif
    if (q && n <= TL_GROUPED_MAX_N) { /* Q8_0/Q4_0 matvec */
        tl__act_pairs(type, k, X, ldx, 0, n, scratch);
        act_groups(isa >= TL_ISA_AVXVNNI && tl__cpu_has_avxvnni(), type, W, k, j0, j1,
                   (const uint8_t *)scratch, n, Y, ldy);
        return;
    }
    if (n <= TL_GROUPED_MAX_N) { /* float types: groups of up to 4 rows */
        for (size_t i = 0; i < n; i += TL_MATVEC_MAX_N) {
            size_t g = n - i < TL_MATVEC_MAX_N ? n - i : TL_MATVEC_MAX_N;
            const float *Xi = X + i * ldx;
            float *Yi = Y + i * ldy;
            tl__matvec_float(type, w, k, j0, j1, Xi, ldx, g, Yi, ldy);
        }
        return;
    }
    tl__gemm(type, w, k, j0, j1, X, ldx, n, Y, ldy, scratch);
}

/* ---- small vector kernels ---- */

float tl_dot_f32_fast(const float *a, const float *b, size_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

void tl_axpy_f32_fast(float *y, float a, const float *x, size_t n) {
    __m256 va = _mm256_set1_ps(a);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        _mm256_storeu_ps(y + i + 8,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8)));
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}
