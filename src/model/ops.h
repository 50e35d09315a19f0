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

/* Flash layout: Ys[p][n][lens[p]] = X[n][w->rows] times part p of site tensor w's runs
 * (model/flash_layout.h; the parts lie side by side in each run, nparts <=
 * TL_MATMUL_MULTI_MAX). Only channels non-zero in some row are read (a streamed w's runs
 * through m->fetch_runs) and multiplied; chan holds w->rows ints; scratch is per-thread
 * scratch of scratch_floats floats each (tl_colmat_scratch_floats). */
tl_status tl_op_runs_product(tl_llama *m, const tl_weight *w, const float *X, size_t n,
                             float *const *Ys, const size_t *lens, size_t nparts, int32_t *chan,
                             float *scratch, size_t scratch_floats);

/* The product of tl_op_runs_product once the runs are in memory: parts start `first`
 * elements into each run, run chan[t] lies at base + chan[t] * run bytes, and X's rows
 * are ldx apart, indexed by chan. add: each output's chain goes on from Ys' values (the
 * product over the channels before chan[0]; kernels.h, tl_colmat_fast_add), else from 0;
 * the reference (m->use_reference) has no such chain and must take every channel at once. */
void tl_op_runs_multiply(tl_llama *m, const tl_weight *w, const uint8_t *base, size_t first,
                         const int32_t *chan, size_t nc, const float *X, size_t ldx, size_t n,
                         float *const *Ys, const size_t *lens, size_t nparts, float *scratch,
                         size_t scratch_floats, int add);

/* The FFN of a layer stored by neuron (model/neurons.h), on the n rows xn[n][n_embd] it
 * takes: y[n][n_embd] = sum over the predicted neurons (the union of the rows') of
 * h_i * down_i, h_i = relu(gate_i . x + b_gate_i) * (up_i . x) (gateless: relu(up_i . x +
 * b_up_i)). The neurons' runs come from memory, the neuron window or m->fetch_runs. */
struct tl_llama_scratch;
tl_status tl_op_neuron_ffn(tl_llama *m, struct tl_llama_scratch *s, int32_t l, const float *xn,
                           size_t n, int one_sequence, float *y);

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * g[i] for each of n rows of d (kernels.h's
 * tl_rmsnorm_ref with m->use_reference, else the fast one). */
void tl_op_rmsnorm(const tl_llama *m, const float *x, const float *g, size_t n, size_t d,
                   float eps, float *out);

/* out[i] = (x[i] - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * g[i] + b[i] for each
 * of n rows of d (b may be NULL: no bias). */
void tl_op_layernorm(const float *x, const float *g, const float *b, size_t n, size_t d,
                     float eps, float *out);

/* How a model's q and k rows pair their dims for RoPE (tl_llama_hparams.rope_mode). */
enum {
    TL_ROPE_PAIRS = 0, /* adjacent pairs (x[2i], x[2i+1]): GGML "normal" mode, Llama GGUF */
    TL_ROPE_NEOX = 1,  /* pairs half a rotation apart (x[i], x[i + rope_dim/2]): Qwen2 */
    /* rows in Hugging Face's rotate-half order for a model whose GGUF pairs adjacent dims
     * (llama.cpp permutes q and k rows when it converts): rotated as NEOX, then written
     * back in pair order, (x[i], x[i + rope_dim/2]) -> (x[2i], x[2i+1]). Each rotated value
     * is the same float the GGUF layout gives, so attention and the KV cache are too. */
    TL_ROPE_HALF_AS_PAIRS = 2
};

/* Rotates pairs of the first rope_dim dims of each of n_heads heads of head_dim in row x
 * by angle pos * base^(-2i/rope_dim) / freq_divisors[i] (no division when NULL), i <
 * rope_dim/2, paired as `mode` (TL_ROPE_*) says. */
void tl_op_rope(float *x, int n_heads, int head_dim, int rope_dim, int32_t pos, float base,
                int mode, const float *freq_divisors);
/* The same in three steps, for rows that share their angles (a row's q and k heads) and
 * rows that share the frequencies (every row of a layer): freq[i] = base^(-2i/rope_dim),
 * i < rope_dim/2; cs[2i], cs[2i+1] = cos, sin of pos * freq[i] / freq_divisors[i]; x
 * rotated by cs. tl_op_rope gives bit for bit what the three give. */
void tl_op_rope_freqs(int rope_dim, float base, double *freq);
void tl_op_rope_angles(int rope_dim, int32_t pos, const double *freq,
                       const float *freq_divisors, float *cs);
void tl_op_rope_rotate(float *x, int n_heads, int head_dim, int rope_dim, int mode,
                       const float *cs);

/* gate[i] = silu(gate[i]) * up[i] for n elements. */
void tl_op_swiglu(const tl_llama *m, float *gate, const float *up, size_t n);

/* gate[i] = max(gate[i], 0) * up[i] for n elements (a ReLU-fied Llama's FFN). */
void tl_op_reglu(float *gate, const float *up, size_t n);

/* x[i] = max(x[i], 0) for n elements. */
void tl_op_relu(float *x, size_t n);

#endif
