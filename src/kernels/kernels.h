/* kernels.h - compute kernels over weight rows in any tl_type.
 *
 * Every kernel has a scalar reference (`_ref`, kernels/ref_*.c), written to be read,
 * and a fast version (`_fast`, AVX2+FMA+F16C in kernels/x86_*.c) that must agree with
 * the reference to float rounding (tests/test_kernels.c checks this on awkward sizes).
 * Kernels never allocate and never do IO; threading is the caller's job (split the
 * output rows [j0, j1) across threads, each thread with its own scratch).
 *
 * Numerics (the contract every matmul path and tests/ref/llama_ref.py implement):
 *  - F32, F16, BF16 weights: weights are dequantized exactly to f32 and multiplied with
 *    the f32 activations as given, accumulating in f32 (~1e-6 relative per dot product
 *    against a float64 reference).
 *  - Q8_0, Q4_0 weights: the activation row x is first rounded blockwise to x'. For each
 *    32-element block: d_x = amax/127 in f32 (an f32 scale, not fp16), q = roundf(x/d_x)
 *    (f32 division; roundf rounds halves away from zero; q = 0 when d_x == 0), and
 *    x' = d_x*q in f32. The product is sum_c w(j,c) * x'(c) with w dequantized exactly.
 *    This holds for every n: the matvec and the int8 GEMMs compute it with int8 dot
 *    products (sum_b d_w*d_x * sum q_w*q_x), so the result does not depend on the batch
 *    size beyond f32 rounding. x' differs
 *    from x by at most d_x/2 per element (relative error <= 1/254 of the block's amax).
 *  - Q4_1, Q5_0, Q5_1 weights: x rounded to x' exactly as for Q8_0/Q4_0 (32-blocks, an f32
 *    scale: llama.cpp's Q8_1 carries fp16 scales; ours keeps Q8_0's f32 one, so every
 *    32-block type rounds alike).
 *  - K-quant weights (Q2_K..Q6_K): x is rounded in blocks of 256, as llama.cpp's Q8_K:
 *    mx = the element of largest magnitude (the first of equals); iscale = -127/mx in f32,
 *    q = min(127, rint(iscale*x)) (f32 product, halves to even), d_x = 1/iscale in f32,
 *    x' = d_x*q (0 for an all-zero block; a NaN input is never the largest, and a NaN
 *    product gives q = 0). The kernels compute sum w*x' as integer dot
 *    products per 16- or 32-element group, scaled once per block.
 */
#ifndef TL_KERNELS_KERNELS_H
#define TL_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "format/tensor_type.h"

/* ---- quantization formats ---- */

/* Dequantizes n elements (n a multiple of the block size) from src to dst. */
void tl_dequant_row(tl_type type, const void *src, float *dst, size_t n);
/* The types beyond Q8_0/Q4_0 (quant_ext.c), reached through tl_dequant_row/tl_quant_row. */
void tl__dequant_row_ext(tl_type type, const void *src, float *dst, size_t n);
void tl__quant_row_ext(tl_type type, const float *src, void *dst, size_t n);
/* Quantizes n floats into `type` (F32/F16/BF16: conversion; Q8_0/Q4_0: GGML's
 * reference rounding: Q8_0 d = amax/127, q = round(x/d); Q4_0 d = max/-8 where max is
 * the signed value of largest magnitude, q = min(15, trunc(x/d + 8.5)); the other types:
 * see quant_ext.c). */
void tl_quant_row(tl_type type, const float *src, void *dst, size_t n);

/* ---- activation rounding (Q8_0 / Q4_0 weights, see the contract above) ---- */

/* Elements per activation block when products with weights of `type` round the
 * activations to x' (32 or TL_QK_K), else 0 (float weights). */
static inline size_t tl_type_act_block(tl_type type) {
    switch (type) {
    case TL_TYPE_Q8_0: case TL_TYPE_Q4_0: case TL_TYPE_Q4_1: case TL_TYPE_Q5_0: case TL_TYPE_Q5_1:
        return TL_QK;
    case TL_TYPE_Q2_K: case TL_TYPE_Q3_K: case TL_TYPE_Q4_K: case TL_TYPE_Q5_K: case TL_TYPE_Q6_K:
        return TL_QK_K;
    default:
        return 0;
    }
}
/* 1 if products with weights of `type` round the activations to x'. */
static inline int tl_type_rounds_act(tl_type type) { return tl_type_act_block(type) != 0; }
/* 1 for Q8_0/Q4_0: the types with int8 GEMMs, 32-row panels and activations shared
 * between threads (tl_matmul_act_prepare). The other rounding types run the integer
 * matrix-vector kernels of x86_matvec_ext.c for every n. */
static inline int tl_type_int8_gemm(tl_type type) {
    return type == TL_TYPE_Q8_0 || type == TL_TYPE_Q4_0;
}

/* One block of rounded activations: x'[i] = d * q[i]. Internal to the kernels. */
typedef struct { float d; int8_t q[TL_QK]; } tl_block_q8_act; /* 36 bytes */

/* Rounds n activations (n a multiple of TL_QK) to blocks (d, q), and to x' = d*q.
 * The _fast version gives bit-identical blocks. dst may equal src for the float one. */
void tl_quant_act_row(const float *src, tl_block_q8_act *dst, size_t n);
void tl_quant_act_row_fast(const float *src, tl_block_q8_act *dst, size_t n);
void tl_round_act_row(const float *src, float *dst, size_t n);
/* x' for weights of a rounding `type` (32-blocks or 256-blocks; n a multiple of it). */
void tl_round_act_row_type(tl_type type, const float *src, float *dst, size_t n);
/* One 256-block of rounded activations for the K-quants: x'[i] = d * q[i]; bsums[g] is
 * the sum of q[16g .. 16g+15] (the groups' offset and min terms). */
typedef struct { float d; int16_t bsums[TL_QK_K / 16]; int8_t q[TL_QK_K]; } tl_block_k_act; /* 292 */
void tl_quant_act_row_k(const float *src, tl_block_k_act *dst, size_t n);

/* ---- matrix products ----
 * Y[i*ldy + j] = sum_{c<k} X[i*ldx + c] * W(j, c)   for i in [0, n), j in [j0, j1)
 * where row j of W starts at (const uint8_t *)W + j * tl_type_row_bytes(type, k).
 * k must be a multiple of tl_type_block_elems(type). n >= 1 (n = 1 is matrix-vector).
 * For Q8_0/Q4_0 the X rows are rounded to x' first (see the numeric contract above).
 */
void tl_matmul_ref(tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                   const float *X, size_t ldx, size_t n, float *Y, size_t ldy);

/* Floats of scratch the fast path needs for a given k and n (per calling thread): the
 * rounded activations (the matvec's n*k/32 blocks, or the int8 GEMM's n*k/32 records)
 * and the float GEMM's packed weights. Non-decreasing in k and n, so a buffer sized for the widest k and the
 * largest batch serves every call. Must be 4-byte aligned (32 is better). */
size_t tl_matmul_scratch_floats(size_t k, size_t n);
/* Products of at most this many rows run the matrix-vector kernel over groups of 4 rows
 * (re-reading the weights from cache per group) rather than packing GEMM panels; Q8_0/Q4_0
 * products take the int8 GEMM earlier where the CPU has VNNI (every n on AVX-512 VNNI,
 * more than 12 rows on AVX-VNNI). */
#define TL_MATMUL_GROUPED_MAX_N 32
/* 1 when tl_matmul_fast runs a product of n rows of `type` as a GEMM (packed panels) on
 * this CPU: callers splitting it over threads then prefer fewer, larger row ranges. */
int tl_matmul_takes_gemm(tl_type type, size_t n);
void tl_matmul_fast(tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                    const float *X, size_t ldx, size_t n, float *Y, size_t ldy,
                    float *scratch);

/* ---- single Q8_0 rows (a neuron's gate and up rows, model/ops_neurons.c) ----
 * y[i] = sum over the k/32 blocks b, in order, of (d_w(b) * x[i][b].d) * isum(i, b), the
 * f32 product rounded once per block and the sum in f32; isum = sum_j q_w(b, j) *
 * x[i][b].q[j], exact. W: one Q8_0 row of k elements (k a multiple of 32); x: n rows of
 * k/32 activation blocks (tl_quant_act_row), consecutive. The fast version (AVX2 integer
 * dots) gives the reference's bits: the integer sums are exact and the f32 sum runs in
 * the same order. Equals a Q8_0 product's row (the contract above) up to f32 rounding,
 * with no packing of the row (the int8 GEMMs repack their weights, which one row does
 * not repay). */
void tl_dot_q8_0_act_ref(const void *W, size_t k, const tl_block_q8_act *x, size_t n,
                         float *y);
void tl_dot_q8_0_act_fast(const void *W, size_t k, const tl_block_q8_act *x, size_t n,
                          float *y);

/* ---- Q8_0 / Q4_0 weights in 32-row panels ----
 * Where the widest int8 GEMM runs (AVX-512 VNNI), a Q8_0/Q4_0 tensor whose row count is a
 * multiple of TL_PANEL_ROWS may be repacked once, when it is placed in memory, into the
 * layout the kernel streams, so no product packs it again. The repacked tensor occupies
 * the same bytes: rows [32p, 32p + 32) keep their byte range, reordered by block: block b
 * of the panel starts b * 32 * block_bytes into it, with the 32 rows' fp16 scales as in
 * the file (64 bytes), then the quants, row r's four bytes of a 4-element group at
 * 4 * r into the group's 128 bytes:
 *   Q8_0: groups g < 8 (elements 4g..4g+3), each byte w + 128 (unsigned).
 *   Q4_0: groups h < 4: bytes 4h..4h+3 of the row's 16 quant bytes as in the file (low
 *         nibbles: elements 4h.., high nibbles: elements 16 + 4h..).
 * Products with such a tensor pass TL_LAYOUT_PANELS to the act functions below, with
 * [j0, j1) whole panels (multiples of 32). The result equals tl_matmul_fast's over the
 * same rows in the file's layout bit for bit on this CPU. */
#define TL_PANEL_ROWS 32
typedef enum tl_weights_layout { TL_LAYOUT_ROWS = 0, TL_LAYOUT_PANELS = 1 } tl_weights_layout;
/* 1 when this CPU's fast path reads a tensor of `type` with `rows` rows faster as panels
 * (AVX-512 VNNI, unless TIERLLM_ISA caps it away; Q8_0/Q4_0; rows a multiple of 32). */
int tl_panels_wanted(tl_type type, size_t rows);
/* Bytes of the temporary tl_panels_pack needs: one panel's rows. */
size_t tl_panels_tmp_bytes(tl_type type, size_t k);
/* Repacks rows [0, rows) of W (rows a multiple of 32) into panels in place. */
void tl_panels_pack(tl_type type, void *W, size_t rows, size_t k, void *tmp);
/* The same for share `part` of `parts` near-equal shares of the panels: disjoint shares,
 * each with its own tmp, may run at once (a pool splitting one repack). */
void tl_panels_pack_share(tl_type type, void *W, size_t rows, size_t k, size_t part,
                          size_t parts, void *tmp);
/* The definition, to be read: panels from file rows (src and dst distinct), and back. */
void tl_panels_pack_ref(tl_type type, const void *rows_src, size_t rows, size_t k, void *dst);
void tl_panels_unpack_ref(tl_type type, const void *panels, size_t rows, size_t k, void *dst);
/* Row j of a tensor in panels, dequantized (a token embedding's lookup). */
void tl_panels_dequant_row(tl_type type, const void *W, size_t k, size_t j, float *dst);
/* tl_matmul_ref over a tensor in panels (j0, j1 any rows). */
void tl_matmul_panels_ref(tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                          const float *X, size_t ldx, size_t n, float *Y, size_t ldy);

/* Splitting one product over threads: the work all output rows share - for Q8_0/Q4_0
 * products on the matrix-vector kernel (above) or the int8 GEMM, rounding the n rows of X
 * into int8 blocks - is done once by tl_matmul_act_prepare into `act`, a buffer of
 * tl_matmul_act_floats(type, layout, k, n) floats (4-byte aligned; at most
 * tl_matmul_scratch_floats(k, n)); then tl_matmul_fast_act computes any row range
 * [j0, j1) from it, read-only, so threads may share one `act`. The prepare may itself be
 * split: each call rounds rows [i0, i1) of the n (disjoint ranges may run at once).
 * Results equal tl_matmul_fast's bit for bit. tl_matmul_act_floats returns 0 when
 * (type, n) has nothing to share in the rows layout: then call tl_matmul_fast. Weights in
 * panels always go through act (their act floats are > 0 for every n), and so do the
 * K-quants (act: per row, k/256 tl_block_k_act, bit-exact with tl_quant_act_row_k) and
 * Q4_1/Q5_0/Q5_1 (their own 32-block records), for every n. */
size_t tl_matmul_act_floats(tl_type type, tl_weights_layout layout, size_t k, size_t n);
void tl_matmul_act_prepare(tl_type type, tl_weights_layout layout, size_t k, const float *X,
                           size_t ldx, size_t n, size_t i0, size_t i1, float *act);
void tl_matmul_fast_act(tl_type type, tl_weights_layout layout, const void *W, size_t k,
                        size_t j0, size_t j1, const float *act, size_t n, float *Y, size_t ldy);
/* Internal, for tests: tl_matmul_fast_act / tl_matmul_fast on one instruction set (they
 * pick the widest this CPU has). Return 0, without computing, when that path is not built
 * in, this CPU lacks it, or (act) the set does not read the prepared X's form (the
 * matvec's pair records: AVX2 and AVX-VNNI; the GEMMs' records: every set for the file's
 * rows, and for panels AVX-512 VNNI or, below it, the scalar fallback; the records of
 * Q4_1/Q5_x and the K-quants: every set). A path uses the set named, or a narrower one
 * where that set has no kernel. */
typedef enum tl__isa {
    TL_ISA_AVX2 = 0,      /* AVX2+FMA+F16C: always built, the baseline the fast kernels need */
    TL_ISA_AVXVNNI = 1,   /* AVX-VNNI (x86vnni_matmul.c, x86vnni_gemm.c) */
    TL_ISA_AVX512VNNI = 2 /* AVX-512 F/BW + VNNI (x86avx512_gemm.c) */
} tl__isa;
int tl__matmul_fast_act_isa(tl__isa isa, tl_type type, tl_weights_layout layout, const void *W,
                            size_t k, size_t j0, size_t j1, const float *act, size_t n,
                            float *Y, size_t ldy);
int tl__matmul_fast_isa(tl__isa isa, tl_type type, const void *W, size_t k, size_t j0,
                        size_t j1, const float *X, size_t ldx, size_t n, float *Y, size_t ldy,
                        float *scratch);

/* ---- column products (the flash layout; ref_colmat.c, x86_colmat.c) ----
 * In the flash layout a weight matrix is stored by input channel: run c holds every
 * output's weight for input channel c (the transpose of the row-major W[out][in]),
 * run_elems elements of `type`, quantized in blocks along the run (Q8_0: 32 consecutive
 * outputs). Run c starts at (const uint8_t *)W + c * tl_type_row_bytes(type, run_elems).
 * With sparse activations only the runs of the non-zero input channels are read:
 *
 * Y[i*ldy + o] = sum over t < nc of X[i*ldx + chan[t]] * W(chan[t], o)
 *   for i in [0, n), o in [o0, o1); Y in that range is overwritten (nc == 0: zeros).
 * W(c, o) = element o of run c, dequantized exactly. o0 a multiple of the type's block
 * size; o1 too, or o1 == run_elems (run_elems a multiple of the block size).
 * chan: distinct channel indices, any order (the engine passes them ascending).
 * Numerics: activations are used as given (never rounded to x', unlike tl_matmul_*).
 *   ref: each output summed in double, products (double)x * w, in the order of chan, then
 *        rounded to float once; so with chan = every channel ascending it equals
 *        tl_matmul_ref over the row-major transpose bit for bit for F32/F16/BF16 weights.
 *   fast: f32 accumulation (FMA), agrees with the reference to float rounding. Each
 *        output is one FMA chain over chan in its order from +0, y = fma(x, w, y)
 *        with w the exact weight (Q8_0/Q4_0: d*q, exact in f32), so for finite weights the result
 *        does not depend on n, on how [o0, o1) is split between calls or on the
 *        instruction set.
 * Threads may run disjoint [o0, o1) at once, each with its own scratch. */
/* Products of at most this many rows stream the runs (memory-bound, the weights read in
 * their type); more take a GEMM over f32 panels dequantized from the runs. */
#define TL_COLMAT_STREAM_MAX_N 8
void tl_colmat_ref(tl_type type, const void *W, size_t run_elems, const int32_t *chan,
                   size_t nc, size_t o0, size_t o1, const float *X, size_t ldx, size_t n,
                   float *Y, size_t ldy);
/* scratch: tl_colmat_scratch_floats(o1 - o0, n) floats, 32-byte aligned, per calling
 * thread; non-decreasing in both arguments. */
size_t tl_colmat_scratch_floats(size_t outs, size_t n);
void tl_colmat_fast(tl_type type, const void *W, size_t run_elems, const int32_t *chan,
                    size_t nc, size_t o0, size_t o1, const float *X, size_t ldx, size_t n,
                    float *Y, size_t ldy, float *scratch);
/* tl_colmat_fast continuing each output's chain from Y's value instead of +0: calls over
 * consecutive parts of a channel list, the first by tl_colmat_fast, give the bits of one
 * call over the whole list (a product can start on the runs that have arrived). */
void tl_colmat_fast_add(tl_type type, const void *W, size_t run_elems, const int32_t *chan,
                        size_t nc, size_t o0, size_t o1, const float *X, size_t ldx, size_t n,
                        float *Y, size_t ldy, float *scratch);
/* Internal, for tests: tl_colmat_fast on one instruction set; returns 0, computing
 * nothing, when this CPU or build lacks it (AVX-VNNI has no kernel of its own: AVX2's). */
int tl__colmat_fast_isa(tl__isa isa, tl_type type, const void *W, size_t run_elems,
                        const int32_t *chan, size_t nc, size_t o0, size_t o1, const float *X,
                        size_t ldx, size_t n, float *Y, size_t ldy, float *scratch);
/* Internal: the 512-bit inner kernels of tl_colmat_fast (x86avx512_colmat.c; called only
 * when tl__cpu_has_avx512vnni). runs: Y[r*ldy + o] = fma(x[r*ldxg + g], w_g(o), ...) for
 * g < G (8 or 1) in order, r < N (<= 4), o < len (Q8_0/Q4_0: w = d*q), run[g]
 * at a slice's first element (F32/F16/BF16/Q8_0/Q4_0; len a multiple of 32 for the Q
 * types); meanwhile the npf slices pf[] are prefetched at the same offsets.
 * strip: Y[r*ldy + j] = fma chain over c < kc of xp[r*ldxp + c] * strip[c*32 + j] for
 * r < m, j < nj (<= 32), from Y's value (add) or +0. */
void tl__colmat_runs_avx512(tl_type type, const uint8_t *const *run, const float *x,
                            size_t ldxg, size_t G, size_t N, size_t len, float *Y, size_t ldy,
                            const uint8_t *const *pf, size_t npf);
void tl__colmat_strip_avx512(const float *strip, size_t kc, const float *xp, size_t ldxp,
                             size_t m, float *Y, size_t ldy, size_t nj, int add);

/* ---- small vector kernels used by attention ---- */
float tl_dot_f32_ref(const float *a, const float *b, size_t n);
float tl_dot_f32_fast(const float *a, const float *b, size_t n);
/* y += a * x */
void tl_axpy_f32_ref(float *y, float a, const float *x, size_t n);
void tl_axpy_f32_fast(float *y, float a, const float *x, size_t n);

/* ---- attention and SwiGLU (ref_attn.c, x86_attn.c) ----
 * For one KV head and the `group` query heads that share it, over n positions whose K
 * and V rows are ldk / ldv floats apart (head size hd):
 *   scores[h*lds + t] = scale * dot(q + h*hd, K + t*ldk)          h < group, t < n
 *   out[h*hd + c]    += sum_t w[h*ldw + t] * V[t*ldv + c]           c < hd
 */
void tl_attn_scores_ref(const float *q, size_t group, size_t hd, const float *K, size_t ldk,
                        size_t n, float scale, float *scores, size_t lds);
void tl_attn_scores_fast(const float *q, size_t group, size_t hd, const float *K, size_t ldk,
                         size_t n, float scale, float *scores, size_t lds);
void tl_attn_values_ref(float *out, size_t group, size_t hd, const float *w, size_t ldw,
                        const float *V, size_t ldv, size_t n);
void tl_attn_values_fast(float *out, size_t group, size_t hd, const float *w, size_t ldw,
                         const float *V, size_t ldv, size_t n);
/* gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + e^-gate[i]) * up[i]. The fast one's
 * exp is within a few ulp of expf. */
void tl_swiglu_ref(float *gate, const float *up, size_t n);
void tl_swiglu_fast(float *gate, const float *up, size_t n);
/* out[i] = x[i] / sqrt(mean(x^2) + eps) * g[i] for each of n rows of d (out may be x), the
 * sum of squares in double. The fast one sums in another order (double lanes), so its
 * scale may round to a neighbouring float where the reference's sum sits at a boundary. */
void tl_rmsnorm_ref(const float *x, const float *g, size_t n, size_t d, float eps, float *out);
void tl_rmsnorm_fast(const float *x, const float *g, size_t n, size_t d, float eps, float *out);
/* x[i] = e^(x[i] - max x) / sum_j e^(x[j] - max x), n >= 1 (attention's softmax). */
void tl_softmax_ref(float *x, size_t n);
void tl_softmax_fast(float *x, size_t n);
/* dst[i] = the f16 value src[i], i < n (16-bit KV rows decoded for attention). Both are
 * exact: the fast one's conversion instruction gives every finite and infinite value bit
 * for bit as the reference does, and a NaN as a NaN (its quiet bit set). */
void tl_f16_row_to_f32_ref(const uint16_t *src, float *dst, size_t n);
void tl_f16_row_to_f32_fast(const uint16_t *src, float *dst, size_t n);
/* dst[i] = src[i] rounded to f16 (to nearest even; overflow to infinity), i < n (16-bit KV
 * rows stored). The fast one's conversion instruction rounds every finite and infinite
 * value bit for bit as the reference does, and a NaN to a NaN. */
void tl_f32_row_to_f16_ref(const float *src, uint16_t *dst, size_t n);
void tl_f32_row_to_f16_fast(const float *src, uint16_t *dst, size_t n);

#endif
