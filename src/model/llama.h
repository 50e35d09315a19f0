/* llama.h - the Llama-family model: hyperparameters, weights, and the forward pass.
 *
 * One forward pass serves the GGUF architectures that are Llama with small differences,
 * each a field here rather than a file of its own (the differences are a few lines of the
 * pass; a file per family would repeat the rest):
 *  - "llama" (Llama 1-3, Mistral): RoPE on adjacent pairs; Llama 3's optional
 *    rope_freqs.weight divides each rotation frequency; Mistral's optional
 *    <arch>.attention.sliding_window limits attention to the last W positions.
 *  - "qwen2": RoPE on pairs half a rotation apart (NEOX), q/k/v biases.
 *  - any of them with tierllm.ffn_activation = "relu": relu(gate) * up in the feed-forward
 *    instead of SwiGLU (a ReLU-fied Llama, LLM in a Flash's sparse FFN; synth --act relu).
 *  - "opt" (OPT, FlexGen's family): LayerNorm (mean and variance, weight and bias) where
 *    the others take RMSNorm; learned absolute positions (position_embd.weight, row p for
 *    position p, added to the token's embedding) and no RoPE; a ReLU feed-forward of two
 *    matrices (ffn_up, ffn_down, no gate); biases everywhere; the classifier tied.
 * Biases are optional for every architecture: on q, k, v, the attention output, the
 * feed-forward matrices and the norms (added right after the product or the scaling).
 *
 * A weight matrix W with `rows` output features and `cols` input features is stored as
 * `rows` rows of `cols` elements in its GGUF type (GGUF ne = [cols, rows]); y = W x.
 * Norm vectors are always converted to f32 at load.
 */
#ifndef TL_MODEL_LLAMA_H
#define TL_MODEL_LLAMA_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"
#include "base/budget.h"
#include "base/threadpool.h"
#include "format/gguf.h"
#include "format/tensor_type.h"
#include "text/tokenizer.h"
#include "model/kv_select.h"
#include "model/sparsity.h"
#include "model/neurons.h"

typedef struct tl_weight {
    tl_type type;      /* type of `data` (F32 after a load-time conversion) */
    size_t rows, cols;
    const void *data;  /* NULL while not resident (streamed weights between uses) */
    const char *name;  /* the GGUF tensor name */
    tl_type file_type; /* type in the file */
    uint64_t file_offset, file_bytes;
    int convert;       /* 1: converted to f32 at load (norms, rows splitting blocks) */
    int runs;          /* 1: a flash-layout site tensor (model/flash_layout.h): its rows are
                          input channels' runs, multiplied by column products, never panels */
    int panels;        /* 1: `data` was repacked into 32-row panels when placed (kernels.h);
                          set by whoever points `data` at it */
} tl_weight;

typedef struct tl_llama_hparams {
    char arch[32];
    int32_t n_vocab, n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim, rope_dim;
    int32_t n_ctx_train;
    float rms_eps, rope_base;
    int32_t rope_mode; /* TL_ROPE_* (model/ops.h): which dims RoPE pairs */
    int32_t n_swa;     /* > 0: a row attends to the last n_swa positions only (its own too) */
    int32_t layer_norm;  /* 1: LayerNorm (x - mean) / sqrt(var + eps) (opt); 0: RMSNorm */
    int32_t ffn_relu;    /* 1: x += W_down relu(W_up x) (opt); 0: SwiGLU with ffn_gate */
    int32_t pos_learned; /* 1: learned positions, no RoPE (opt); the context may not pass
                            n_ctx_train, the rows of position_embd */
    int32_t ffn_gate_relu; /* 1: x += W_down (relu(W_gate x + b_gate) * (W_up x)), a ReLU-fied
                              Llama (tierllm.ffn_activation = "relu"); 0: SwiGLU */
    int32_t ffn_neurons;   /* 1: a flash-layout ReLU FFN stored by neuron with a predictor
                              (model/neurons.h) */
} tl_llama_hparams;

typedef struct tl_llama_layer {
    tl_weight attn_norm, ffn_norm; /* [n_embd], always resident f32 */
    tl_weight wq;     /* [n_head*head_dim][n_embd] */
    tl_weight wk, wv; /* [n_head_kv*head_dim][n_embd] */
    tl_weight wo;     /* [n_embd][n_head*head_dim] */
    tl_weight w_gate, w_up; /* [n_ff][n_embd]; w_gate's name NULL with ffn_relu */
    tl_weight w_down;       /* [n_embd][n_ff] */
    /* optional biases, f32 and resident like the norms; name NULL when absent */
    tl_weight bq, bk, bv;   /* [n_head*head_dim], [n_head_kv*head_dim] x2 */
    tl_weight bo;           /* [n_embd] */
    tl_weight b_up, b_down; /* [n_ff], [n_embd] */
    tl_weight b_gate;       /* [n_ff] */
    tl_weight attn_norm_b, ffn_norm_b; /* [n_embd] */
    /* flash layout (model/flash_layout.h): the four site tensors, runs by input channel,
     * which replace the seven matrices (those then keep their shapes, name NULL); name
     * NULL in a row-major file, and the FFN's two with a FFN by neuron (below) */
    tl_weight site[TL_SITE_COUNT];
    /* a ReLU FFN stored by neuron (hp.ffn_neurons; model/neurons.h): the runs, replacing
     * the FFN sites, and the predictor (f32 at load, resident); name NULL otherwise */
    tl_weight neurons;        /* [n_ff runs][3 or 2 n_embd] */
    tl_weight pred_v, pred_u; /* [rank][n_embd], [n_ff][rank] */
    tl_weight pred_b;         /* [n_ff] */
    int32_t shape_class;    /* the first layer whose 7 matrices have this layer's types and
                               shapes (the cost model prices such layers once) */
} tl_llama_layer;

typedef struct tl_llama tl_llama;

/* A loaded model: its weights' places in the file, tokenizer, and the budget, thread pool
 * and IO queue its forward pass and weight reads use. Where the weights live in memory is
 * decided above (exec/), which owns the placement. */
struct tl_llama {
    char *path;
    tl_gguf *gguf;
    tl_llama_hparams hp;
    tl_weight tok_embd;        /* [n_vocab][n_embd] */
    tl_weight output_norm;     /* [n_embd] */
    tl_weight output_norm_b;   /* optional [n_embd] */
    tl_weight pos_embd;        /* [n_ctx_train][n_embd] f32, resident (pos_learned only);
                                  name NULL otherwise */
    tl_weight output;          /* [n_vocab][n_embd] */
    tl_weight rope_freqs;      /* optional [rope_dim/2] frequency divisors (Llama 3); name
                                  NULL when absent */
    float *rope_divisors;      /* the same from metadata (tierllm.rope_freqs: a Hugging Face
                                  folder's rope_scaling), when there is no such tensor */
    tl_sparsity sparse;        /* activation sparsity: thresholds of a converted file, the
                                  level in force (0: dense), a calibration observer */
    int tied_output;           /* output.weight absent: the classifier is tok_embd */
    int flash;                 /* 1: the layers are in the flash layout (layers' site[]) */
    tl_neuron_info neuron_info; /* hp.ffn_neurons: the file's predictor figures */
    tl_neuron_window *window;  /* the neuron window, when placed (exec/); NULL: none */
    /* Flash layout, a site tensor that is not resident (data NULL): fetch_runs starts
     * reading the runs of channels chan[0..nc) (ascending) to *base + c * run bytes, where
     * they stay until the next fetch_runs; fetch_wait(upto) waits until the runs of
     * chan[0..upto) have arrived, and with upto >= nc until all have (then the next fetch
     * may begin; after an error it has waited for all). exec/ reads them; both are set
     * when weights are placed. */
    tl_status (*fetch_runs)(void *user, const tl_weight *w, const int32_t *chan, size_t nc,
                            const uint8_t **base);
    tl_status (*fetch_wait)(void *user, size_t upto);
    void *fetch_user;
    tl_weight **all;           /* every weight, in tl_llama_weights' order (walks over all) */
    size_t n_all;
    tl_llama_layer *layers;
    tl_tokenizer *tok;
    tl_budget *budget;
    tl_pool *pool;
    struct tl_tier *tier;      /* the model file, read-only (O_DIRECT unless disabled) */
    struct tl_tier *panel_tier; /* a converted copy streamed weights are read from, with
                                   the tensors kept in panels stored repacked (exec/
                                   panel_copy.h); NULL: none, weights come from `tier` */
    struct tl_aio *aio;        /* every weight read goes through this queue */
    tl_model_params params;
    int use_reference;         /* 1: scalar reference kernels everywhere (16-bit KV pages
                                  excepted: kv_cache.c decodes them with the fast
                                  conversion in both modes, which is exact) */
    /* The layers this process computes, [stage_first, stage_end): all of them unless the
     * params name a pipeline stage. Matrices of other layers, and the embedding and
     * classifier a stage does not use, are absent (name NULL): never placed, read or
     * counted. The KV cache holds the stage's layers only: layer l is its l - stage_first. */
    int32_t stage_first, stage_end;
    uint64_t weight_bytes, n_params;
};

/* Layers this process computes (every layer unless it is a pipeline stage). */
static inline int32_t tl_llama_stage_layers(const tl_llama *m) {
    return m->stage_end - m->stage_first;
}

/* Every weight of the model in a fixed order: token_embd, output_norm (and its bias),
 * output (unless tied), rope_freqs, position_embd (if present), then per layer
 * attn_norm (and bias), q, k, v, o, the biases present (q, k, v, o), ffn_norm (and bias),
 * gate (unless ffn_relu), up, down, their biases present; absent ones (a pipeline stage's
 * others) left out. */
size_t tl_llama_weights(tl_llama *m, tl_weight **out, size_t cap);

/* Opens the model file read-only and reads its header, hyperparameters, tokenizer and
 * weight directory; no weight is read yet (exec/ places them). *m is filled in; on an
 * error it is left closed. */
tl_status tl_llama_open(const char *path, const tl_model_params *params, tl_llama *m);
void tl_llama_close(tl_llama *m);
void tl_llama_describe(const tl_llama *m, tl_model_desc *d);

/* Reads hyperparameters from GGUF metadata and checks them for consistency. */
tl_status tl_llama_read_hparams(const tl_gguf *g, tl_llama_hparams *hp);

/* ---- forward pass ----
 * The forward pass works on *rows*: each row is one token of some sequence at some
 * position. A prompt is many rows of one sequence; a batched decode step is one row of
 * each of many sequences; both go through the same matrix products, and attention reads
 * each row's own sequence from the paged KV cache (kv/kv_cache.h). */

struct tl_kv;

/* Activation scratch for up to max_rows rows at once. */
typedef struct tl_llama_scratch {
    int32_t max_rows, max_ctx;
    float *xn, *q, *k, *v, *att_out, *gate, *up; /* [max_rows][...] */
    float *attn;               /* per thread: scores [attn_rows][group][max_ctx] + a page */
    size_t attn_floats;
    int32_t attn_rows;         /* rows of one sequence attended together (a row block) */
    int32_t *attn_block;       /* [max_rows + 1]: first row of each row block of a step */
    float *rc_block;           /* recompute (llama_forward.c): the four arrays below */
    const float **rc_x;        /* [max_pages] */
    float **rc_out;            /* [max_pages] */
    int32_t *rc_page, *rc_rows;/* [max_pages] */
    int32_t *run_chan;         /* flash layout: the channels a product needs [widest input] */
    /* a FFN stored by neuron: the predicted neurons' places [3][n_ff] (their slot or
     * index, the window's misses), the predictor's [max_rows][rank], a thread's dot
     * products [threads][2 max_rows], each neuron's down norm [n_ff] (measuring) */
    int32_t *neuron_idx;
    float *pred_t, *neuron_tmp, *neuron_norm;
    uint64_t neurons_used, neurons_total;  /* predicted neurons computed, and all, summed */
    double recall_kept, recall_all;        /* measuring: output mass predicted, and active */
    float *mm_scratch;         /* per thread: matmul (and flash runs product) scratch */
    size_t mm_scratch_floats;
    /* page-selective attention (model/kv_select.h): the caller sets `select`; a row that
     * is a sequence's only row in a step (decode) reads the pages sel marks */
    tl_kv_select select;
    int32_t page_tokens, max_pages;
    float *sel_block;          /* the buffers below, carved from one allocation */
    float *sel_ub, *sel_score, *sel_tmp;  /* [n_head][max_pages], [max_pages], [max_pages] */
    const float **sel_bounds;  /* [max_pages] */
    uint8_t *sel, *row_selective; /* [max_rows][max_pages], [max_rows] */
    double *mass_kept;         /* per thread, with select.measure: [2] kept mass, heads */
    uint64_t pages_read, pages_total; /* selective rows: pages attended and visible */
} tl_llama_scratch;

/* Attention takes a sequence's rows (a prompt chunk) in blocks that share each page's
 * reads: up to TL_ATTN_BLOCK_MAX_ROWS rows, fewer when their score rows would pass
 * TL_ATTN_BLOCK_SCORE_BYTES per thread (long contexts with many query heads per KV head).
 * tl_llama_attn_block_rows: that cap for a scratch sized for max_ctx positions (the cost
 * model prices attention by it). */
#define TL_ATTN_BLOCK_MAX_ROWS 16
#define TL_ATTN_BLOCK_SCORE_BYTES ((size_t)1 << 20)
int32_t tl_llama_attn_block_rows(const tl_llama_hparams *hp, int32_t max_ctx);

/* Budget bytes tl_llama_scratch_init will allocate. */
uint64_t tl_llama_scratch_bytes(const tl_llama *m, int32_t max_rows, int32_t max_ctx,
                                int32_t page_tokens);
tl_status tl_llama_scratch_init(tl_llama *m, int32_t max_rows, int32_t max_ctx,
                                int32_t page_tokens, tl_llama_scratch *s);
void tl_llama_scratch_free(tl_llama *m, tl_llama_scratch *s);
/* Page-selective attention on an initialized scratch: its buffers (budget bytes from
 * tl_llama_select_bytes) and parameters. Without it attention is exact. */
uint64_t tl_llama_select_bytes(const tl_llama *m, int32_t max_rows, int32_t max_ctx,
                               int32_t page_tokens);
tl_status tl_llama_select_init(tl_llama *m, tl_llama_scratch *s, const tl_kv_select *sp);

/* Rows of one forward step. Rows of one sequence are contiguous and in position order;
 * pos[i] = the sequence's KV length before the step + the row's offset in its run. */
typedef struct tl_llama_rows {
    int32_t n;
    const int32_t *seq; /* [n] KV sequence of each row */
    const int32_t *pos; /* [n] */
} tl_llama_rows;
/* The end of the run of rows of one sequence that starts at row i: the first row after i
 * of another sequence, or rows->n. Walking runs is how a step appends and commits each
 * sequence's KV once. */
static inline int32_t tl_llama_rows_run_end(const tl_llama_rows *rows, int32_t i) {
    int32_t e = i + 1;
    while (e < rows->n && rows->seq[e] == rows->seq[i]) e++;
    return e;
}

/* One layer over the rows, in place on x [n][n_embd]: appends each row's K/V at this
 * layer to the KV cache (the caller commits after the last layer). */
tl_status tl_llama_layer_forward(tl_llama *m, tl_llama_scratch *s, struct tl_kv *kv, int32_t layer,
                         const tl_llama_rows *rows, float *x);
/* The layer's attention stage alone: each row of s->q ([n][n_head * head_dim], RoPE
 * applied) attends over its sequence's KV at the stage's layer kl, every position up to
 * its own already appended (tl_kv_append) and viewable (tl_kv_wait), into s->att_out, in
 * blocks of s->attn_rows rows of one sequence on the pool. tl_llama_layer_forward calls
 * it; the planner's calibration times it alone (plan/calibrate.h). */
tl_status tl_llama_attend(tl_llama *m, tl_llama_scratch *s, struct tl_kv *kv, int32_t kl,
                          const tl_llama_rows *rows);
/* TL_ERR_CONTEXT when a context of n_ctx positions is longer than the model can hold
 * (learned positions: n_ctx_train; RoPE models have no such limit). */
tl_status tl_llama_check_context(const tl_llama *m, int32_t n_ctx);
/* Adds each row's learned position embedding to its token embedding in x (pos_learned
 * models; nothing otherwise). A position past the table is an error. */
tl_status tl_llama_add_positions(const tl_llama *m, const tl_llama_rows *rows, float *x);
/* logits[j] (n_vocab floats each) for rows idx[0..n_out) of x. */
void tl_llama_logits(tl_llama *m, tl_llama_scratch *s, const float *x, const int32_t *idx,
                     int32_t n_out, float *logits);

#endif
