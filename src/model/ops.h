/* ops.h - the forward pass's operations, threaded over the model's pool.
 *
 * Each op picks the scalar reference kernel or the fast kernel by m->use_reference,
 * so one readable forward pass (llama_forward.c) serves both paths. Shapes are given
 * in the comments as [rows][cols] of row-major f32 unless stated otherwise.
 */
#ifndef TL_MODEL_OPS_H
#define TL_MODEL_OPS_H

#include "model/llama.h"

/* Y[n][w->rows] = X[n][w->cols] * W^T. `scratch` is per-thread matmul scratch of
 * `scratch_floats` floats each (tl_matmul_scratch_floats). */
void tl_op_matmul(tl_llama *m, const tl_weight *w, const float *X, size_t n, float *Y,
                  float *scratch, size_t scratch_floats);

/* Rows [j0, j1) of Y[n][ldy] = X[n][w->cols] * W^T on the calling thread alone, with one
 * thread's scratch (a task already running on the pool). */
void tl_op_matmul_serial(const tl_llama *m, const tl_weight *w, size_t j0, size_t j1,
                         const float *X, size_t n, float *Y, size_t ldy, float *scratch);

/* Y_i = X W_i^T for the nw matrices ws[i] (same X, so same cols) in one run over the
 * thread pool: the decode step's q/k/v and gate/up products. Results equal nw calls of
 * tl_op_matmul bit for bit. */
#define TL_MATMUL_MULTI_MAX 4
void tl_op_matmul_multi(tl_llama *m, const tl_weight *const *ws, size_t nw, const float *X,
                        size_t n, float *const *Ys, float *scratch, size_t scratch_floats);

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * g[i] for each of n rows of d. */
void tl_op_rmsnorm(const float *x, const float *g, size_t n, size_t d, float eps, float *out);

/* out[i] = (x[i] - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * g[i] + b[i] for each
 * of n rows of d (b may be NULL: no bias). */
void tl_op_layernorm(const float *x, const float *g, const float *b, size_t n, size_t d,
                     float eps, float *out);

/* Rotates pairs of the first rope_dim dims of each of n_heads heads of head_dim in row x
 * by angle pos * base^(-2i/rope_dim) / freq_divisors[i] (no division when NULL), i <
 * rope_dim/2: adjacent pairs (x[2i], x[2i+1]) (GGML "normal" mode, Llama), or with neox
 * pairs half a rotation apart (x[i], x[i + rope_dim/2]) (GGML NEOX mode, Qwen2). */
void tl_op_rope(float *x, int n_heads, int head_dim, int rope_dim, int32_t pos, float base,
                int neox, const float *freq_divisors);

/* gate[i] = silu(gate[i]) * up[i] for n elements. */
void tl_op_swiglu(const tl_llama *m, float *gate, const float *up, size_t n);

/* x[i] = max(x[i], 0) for n elements. */
void tl_op_relu(float *x, size_t n);

#endif
