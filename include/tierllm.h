/* tierllm.h - the public C API of tierllm.
 *
 * tierllm runs large language models stored as GGUF files on the CPU. All handles are
 * opaque. Every fallible function returns tl_status (0 = TL_OK, negative = error); the
 * message that explains the last error of the calling thread is tl_last_error().
 * The library never calls exit() or abort() on bad input.
 *
 * Typical use:
 *   tl_model_params mp = tl_model_default_params();
 *   tl_model *m; if (tl_model_open("model.gguf", &mp, &m) != TL_OK) puts(tl_last_error());
 *   tl_context_params cp = tl_context_default_params();
 *   tl_context *c; tl_context_open(m, &cp, &c);
 *   tl_generate(c, "Once upon", &gp, on_piece, user);
 *   tl_context_close(c); tl_model_close(m);
 */
#ifndef TIERLLM_H
#define TIERLLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t tl_status;

enum {
    TL_OK = 0,
    TL_ERR_INVALID = -1,     /* an argument is out of range or inconsistent */
    TL_ERR_IO = -2,          /* a read or write failed */
    TL_ERR_FORMAT = -3,      /* a file is malformed, truncated or hostile */
    TL_ERR_UNSUPPORTED = -4, /* valid, but not supported (tensor type, architecture) */
    TL_ERR_NOMEM = -5,       /* an allocation failed or would exceed the memory budget */
    TL_ERR_CONTEXT = -6,     /* the prompt or generation does not fit in the context */
    TL_ERR_NOSPACE = -7,     /* the disk is full */
    TL_ERR_CANCELLED = -8,   /* the caller's callback asked to stop */
    TL_ERR_BUSY = -9         /* every slot is in use now; try again later */
};

/* Short constant name of a status ("TL_ERR_FORMAT"). */
const char *tl_status_str(tl_status st);
/* The message describing the most recent error on this thread ("" if none). */
const char *tl_last_error(void);

/* ---- model ---------------------------------------------------------------------- */

typedef struct tl_model tl_model;

/* How streamed weights and spilled KV are read: a pread thread pool or io_uring. */
enum { TL_IO_AUTO = 0, TL_IO_POOL = 1, TL_IO_URING = 2 };

typedef struct tl_model_params {
    int32_t n_threads;         /* worker threads for compute; <= 0 means all cores */
    int32_t reference_kernels; /* 1: scalar reference kernels (slow; for verification) */
    uint64_t mem_budget;       /* bytes the engine may hold (weights, IO buffers, KV,
                                  activations, scratch); 0 = 80% of MemAvailable. Weights
                                  that do not fit stream from the model file. */
    int32_t prefetch;          /* streamed layers read ahead of compute (default 2) */
    int32_t overlap;           /* 1 (default): IO overlaps compute; 0: synchronous reads */
    int32_t io_backend;        /* TL_IO_AUTO (io_uring if it works), TL_IO_POOL, TL_IO_URING */
    int32_t io_queue_depth;    /* chunks in flight (default 8) */
    uint64_t io_chunk_bytes;   /* read chunk size (default 1 MiB) */
    int32_t direct_io;         /* 1 (default): O_DIRECT, bypassing the page cache */
    int32_t w_mem_pct;         /* at most this percent of the weights resident (default 100) */
    /* Order of reads on the one IO queue. TL_IO_KV_FIRST (default): the KV pages the next
     * attention needs go ahead of streamed weights read ahead; TL_IO_BY_NEED: weights and
     * KV pages in one line, in the order they were asked for, which is the order compute
     * needs them (a layer's weights are asked for `prefetch` layers ahead). Either way a
     * KV page attention is waiting for goes first. */
    int32_t io_order;
    /* A pipeline stage (exec/pipeline.h): this process holds and computes layers
     * [layer_first, layer_end) only; the first stage also embeds tokens and the last one
     * computes logits. 0 and 0 (the default): every layer, the whole model. */
    int32_t layer_first, layer_end;
    /* Activation sparsity: the share of each matrix's input channels, smallest magnitudes
     * first, set to zero before the product, by thresholds a converted file carries
     * (`tierllm convert --calib`). < 0 (the default): the file's suggested sparsity (0 for a
     * file without thresholds); 0: dense; up to but not including 1. */
    float sparsity;
    /* Flash-layout files (`tierllm convert --layout flash`): when a streamed matrix reads
     * only the runs of its non-zero input channels, two needed runs at most this many
     * bytes apart are read as one request, the gap with them (default 16 KiB), unless
     * the request would pass an eighth of the tensor (TL_FLASH_FETCH_PARTS). */
    uint64_t flash_gap_bytes;
    /* Flash-layout files of ReLU models, whose FFN is stored by neuron with a predictor of
     * the active neurons (model/flash_layout.h):
     * neuron_window: a DRAM cache of the neurons the last k tokens used, inside the budget,
     *   so a token reads only those newly predicted: -1 (default) the planner picks k,
     *   0 none, k > 0 that window;
     * neuron_predict: 1 (default) compute the predicted neurons only; 0 every neuron (the
     *   dense FFN read through the bundles);
     * neuron_measure: 1 to also compute every neuron (reading all of them) and count the
     *   share of the active neurons' output mass the prediction held (--stats), the
     *   result still the predicted neurons' alone. */
    int32_t neuron_window;
    int32_t neuron_predict;
    int32_t neuron_measure;
} tl_model_params;

enum { TL_IO_KV_FIRST = 0, TL_IO_BY_NEED = 1 };

tl_model_params tl_model_default_params(void);

/* Opens a GGUF model read-only and loads its weights. */
tl_status tl_model_open(const char *path, const tl_model_params *params, tl_model **out);
void tl_model_close(tl_model *model);

typedef struct tl_model_desc {
    char arch[32];
    int32_t n_vocab, n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim, n_ctx_train;
    int32_t bos_id, eos_id;
    uint64_t n_params, weight_bytes;
} tl_model_desc;

tl_status tl_model_describe(const tl_model *model, tl_model_desc *out);

/* Changes the activation sparsity in force (tl_model_params.sparsity; < 0: the file's) at
 * once: the next forward pass of every context of this model uses it, an open one too (its
 * earlier positions keep what they were computed with). Not synchronized: call it from the
 * thread that runs the model, between passes. In a pipeline it sets this rank's layers. */
tl_status tl_model_set_sparsity(tl_model *model, float sparsity);

/* Activation sparsity reached: bytes of the layers' matrix weights whose input channel was
 * zero (a column that need not be read or multiplied), of the bytes multiplied, since the
 * model opened or the last call with reset set; rows count once each. Both 0 when dense. */
void tl_model_sparsity_stats(tl_model *model, int reset, double *zeroed, double *seen);

/* Tokenizes UTF-8 text. Writes at most `cap` ids; *n_out receives the count needed.
 * Returns TL_ERR_INVALID if cap is too small (the ids written are a prefix). */
tl_status tl_tokenize(const tl_model *model, const char *text, size_t len, int add_bos,
                      int32_t *ids, size_t cap, size_t *n_out);
/* Returns the bytes of one token's piece (may be a partial UTF-8 sequence). */
tl_status tl_token_piece(const tl_model *model, int32_t id, const char **bytes, size_t *len);

/* ---- context: one sequence's state (KV cache) ------------------------------------- */

typedef struct tl_context tl_context;

typedef struct tl_context_params {
    int32_t n_ctx;   /* context length in tokens; <= 0 means the model's training length,
                        capped at 4096 */
    int32_t n_batch; /* prompt tokens processed per matrix-matrix step; <= 0: 64 */
    int32_t kv_bits; /* KV storage: 32 (default, exact), 16, 8 or 4 (group-wise) */
    /* Where the KV cache lives. kv_window > 0: in tiers by temperature: the first kv_sinks
     * positions (attention sinks) and the last kv_window positions stay in memory, older
     * pages are written once to an unnamed file in spill_dir and read back for attention,
     * through a DRAM cache of kv_cache_bytes (-1: what the budget leaves once every weight
     * is resident). kv_window 0 (default): in memory when the whole context fits in the
     * budget beside the weights' minimum, else in tiers with a window of 256 positions.
     * kv_window < 0: always in memory. Results are the same in every placement. */
    int32_t kv_window, kv_sinks;
    int64_t kv_cache_bytes;
    const char *spill_dir;  /* NULL: $TMPDIR or /tmp */
    /* Page-selective attention (lossy, opt-in): kv_select in (0, 1] is the share of a
     * sequence's KV pages each generated token attends to: the sinks, the window (the
     * tiers' window, else 32 positions), the open page, and the pages whose keys bound
     * the highest attention logits for the current query. 0 (default): exact attention.
     * kv_select_measure = 1 also scores the pages left out (the KV must then be in
     * memory) and reports the attention mass the selection kept. */
    float kv_select;
    int32_t kv_select_measure;
    /* Recompute instead of load (KV in tiers, 32-bit KV): the first kv_recompute layers
     * store their disk pages as the layer's normalized input rows (n_embd floats per
     * position, half of K and V together without grouped-query attention) and attention
     * recomputes K and V from them; the others store K and V. 0 (default): none. K and V
     * recomputed from a page of rows may differ from those computed with the prompt in
     * the last bits (a different row count takes a different product kernel). */
    int32_t kv_recompute;
} tl_context_params;

tl_context_params tl_context_default_params(void);

tl_status tl_context_open(tl_model *model, const tl_context_params *params, tl_context **out);
void tl_context_close(tl_context *ctx);

/* What the engine measured since the context opened (or the last reset). */
typedef struct tl_run_stats {
    uint64_t forward_passes, tokens;  /* forward calls, token positions computed */
    uint64_t bytes_read_disk;         /* weight bytes read from the model file */
    uint64_t bytes_read_mem;          /* resident weight bytes used by compute */
    double io_busy_s;                 /* wall time with >= 1 read in flight */
    double stall_s;                   /* compute waiting for data not yet arrived */
    double compute_s;                 /* forward time minus stalls */
    double wall_s;                    /* forward time */
    /* placement */
    uint64_t budget_bytes, budget_peak_bytes;
    uint64_t weights_resident_bytes, weights_streamed_bytes; /* per forward pass */
    int32_t slots, io_uring;          /* layer buffers in the ring; 1 if io_uring */
    /* weights kept in the int8 kernels' 32-row panels (Q8_0/Q4_0 on AVX-512 VNNI CPUs):
     * resident bytes (repacked once at placement, or read so from the converted copy);
     * streamed bytes repacked on arrival (all passes since the reset); seconds of all
     * repacking since the model was placed */
    uint64_t weights_panel_bytes, weights_repacked_bytes;
    double weights_repack_s;
    double weights_arrival_repack_s; /* repacking streamed weights on arrival, since reset */
    /* flash-layout files: streamed matrices read only the runs of their non-zero input
     * channels - those runs' bytes, the bytes read (aligned, small gaps read through), the
     * bytes a dense pass would read, read requests; seconds from each fetch's start to
     * its last read's wait (reads and the product's compute overlap), and seconds the
     * product waited for reads */
    uint64_t flash_bytes_needed, flash_bytes_read, flash_bytes_dense, flash_reads;
    double flash_fetch_s, flash_stall_s;
    /* a ReLU FFN stored by neuron: neurons computed (predicted) and all, summed over
     * layers and passes; the neuron window's k, slots per layer, neurons looked up in it
     * and found; measuring (neuron_measure), the active neurons' output mass predicted,
     * and all of it */
    uint64_t neurons_used, neurons_total;
    int32_t neuron_window_k;
    uint32_t neuron_window_slots;
    uint64_t neuron_window_lookups, neuron_window_hits;
    double neuron_mass_kept, neuron_mass_all;
    /* KV tiers (all 0 when the KV cache is in memory) */
    int32_t kv_window_pages, kv_sink_pages, kv_cache_pages, kv_page_tokens;
    uint64_t kv_bytes_read, kv_pages_read;   /* from the spill file */
    uint64_t kv_cache_hits;                  /* disk pages found in memory instead */
    uint64_t kv_predicted_reads;             /* disk pages the model predicts were read */
    /* page selection (kv_select > 0): pages attended and visible over selective rows;
     * with kv_select_measure, the attention mass kept summed over (row, layer, head), and
     * that count */
    uint64_t kv_select_pages_read, kv_select_pages_total, kv_demand_reads;
    /* the hit-rate model of selection (kv/kv_cache.h): disk pages the selections used
     * (measured hit rate = 1 - kv_demand_reads / kv_select_disk_pages), and the predicted
     * hit rate's sums (predicted = kv_heat_ready / kv_heat_needed) */
    uint64_t kv_select_disk_pages;
    double kv_heat_needed, kv_heat_ready;
    double kv_select_mass_kept, kv_select_heads;
} tl_run_stats;

tl_status tl_context_get_stats(const tl_context *ctx, tl_run_stats *out);
void tl_context_reset_stats(tl_context *ctx);

/* Forgets all tokens in the context. */
void tl_context_reset(tl_context *ctx);

/* Appends tokens to the context and computes them. If `logits` is not NULL it receives
 * n_vocab floats: the logits after the last token. */
tl_status tl_decode(tl_context *ctx, const int32_t *tokens, size_t n, float *logits);

/* As tl_decode, but `logits` receives n * n_vocab floats, one row per token. */
tl_status tl_decode_all_logits(tl_context *ctx, const int32_t *tokens, size_t n,
                               float *logits);

/* Perplexity of `ids` (n >= 2): exp of the mean negative log-likelihood of each token
 * given those before it, in windows of n_ctx tokens (each in a fresh context; a window's
 * first token is not scored). *n_scored (may be NULL): the tokens scored. */
tl_status tl_perplexity(tl_model *model, const int32_t *ids, size_t n, int32_t n_ctx,
                        double *ppl, size_t *n_scored);

/* ---- sampling and generation ------------------------------------------------------ */

typedef struct tl_sampler_params {
    float temperature;        /* 0 = greedy */
    int32_t top_k;            /* <= 0: disabled */
    float top_p;              /* >= 1: disabled */
    float repeat_penalty;     /* 1 = disabled */
    int32_t repeat_last_n;    /* tokens considered by the repetition penalty */
    uint64_t seed;
} tl_sampler_params;

tl_sampler_params tl_sampler_default_params(void);
/* TL_ERR_INVALID with a message naming the setting unless: temperature >= 0, top_k >= 0,
 * 0 < top_p <= 1, repeat_penalty > 0 and repeat_last_n >= 0 (all finite). */
tl_status tl_sampler_params_check(const tl_sampler_params *p);

typedef struct tl_generate_params {
    int32_t n_predict;        /* tokens to generate; < 0: until EOS or the context is full */
    int32_t add_bos;          /* prepend BOS to the prompt (1 default) */
    int32_t stop_at_eos;      /* 1 default */
    tl_sampler_params sampler;
} tl_generate_params;

tl_generate_params tl_generate_default_params(void);

typedef struct tl_generate_stats {
    int32_t n_prompt, n_generated;
    int32_t n_decoded; /* single-token forward passes (n_generated - 1 normally) */
    double prefill_seconds, decode_seconds;
    int32_t finish_eos; /* 1 if generation stopped at EOS */
} tl_generate_stats;

/* Called with each generated piece of text, always complete UTF-8 sequences. Return
 * nonzero to stop. `token` is the id that completed the text (-1 at the final flush). */
typedef int (*tl_piece_fn)(void *user, int32_t token, const char *text, size_t len);

/* Resets the context, evaluates the prompt, then samples up to n_predict tokens. */
tl_status tl_generate(tl_context *ctx, const char *prompt, const tl_generate_params *params,
                      tl_piece_fn on_piece, void *user, tl_generate_stats *stats);

/* ---- batch generation (FlexGen's block schedule) ---------------------------------- */

typedef struct tl_batch_params {
    int32_t gbs;            /* sequences per micro-batch (default 8) */
    int32_t num_gb;         /* micro-batches per block (default 4) */
    int32_t n_ctx;          /* prompt + generated tokens per sequence (default 512) */
    int32_t prefill_rows;   /* prompt rows per micro-batch per step (default 512) */
    int32_t kv_bits;        /* KV storage: 32 (default, exact), 16, 8 or 4 */
    int32_t kv_mem_pct;     /* share of full KV pages homed in memory (default 100) */
    int32_t page_tokens;    /* positions per KV page (default 16) */
    const char *spill_dir;  /* where KV spill files go (default: $TMPDIR or /tmp) */
    int32_t kv_window;      /* > 0: KV in tiers by temperature instead of kv_mem_pct: each
                               sequence's last kv_window positions and first kv_sinks stay
                               in memory, older pages go to disk (default 0: kv_mem_pct) */
    int32_t kv_sinks;
    int64_t kv_cache_bytes; /* memory caching disk KV pages (default 0) */
    float kv_select;        /* page-selective attention for generated tokens (lossy,
                               opt-in; see tl_context_params.kv_select); 0: exact */
} tl_batch_params;

tl_batch_params tl_batch_default_params(void);

typedef struct tl_batch_result {
    int32_t index;               /* the prompt's position in the input */
    const int32_t *tokens;       /* generated ids */
    int32_t n_tokens, n_prompt;
    const char *text;            /* generated text, valid UTF-8 */
    size_t text_len;
    int32_t finish_eos;          /* 1: stopped at EOS; 0: length (n_predict or context) */
    tl_status status;            /* TL_OK, or why this prompt failed (the rest run on) */
    const char *error;           /* the failure's message when status != TL_OK, else NULL */
    int32_t last_in_block;       /* 1 on the last result reported for a block */
} tl_batch_result;

typedef struct tl_batch_stats {
    int32_t done_prompts, total_prompts;
    int32_t failed_prompts;      /* of the done ones, reported with an error */
    uint64_t prompt_tokens, generated_tokens;
    double prefill_s, decode_s, elapsed_s;
    double prefill_stall_s, decode_stall_s; /* of which waiting for weights or KV */
    double prefill_kv_wait_s, decode_kv_wait_s; /* of the stalls, waiting for KV pages */
    uint64_t prefill_passes, decode_passes; /* forward passes (each reads the streamed
                                               weights once) */
    uint64_t ssd_bytes_written;  /* KV pages written to the spill file */
    uint64_t kv_bytes_read;      /* KV pages read back from the spill file */
    uint64_t weight_bytes_read;  /* weights streamed from the model file */
    /* as tl_run_stats: resident weight bytes in panels, streamed bytes repacked into
     * panels on arrival, seconds of all repacking (placement included) */
    uint64_t weight_panel_bytes, weight_bytes_repacked;
    double weight_repack_s;
    double weight_arrival_repack_s; /* of weight_repack_s: streamed weights, on arrival */
    int32_t replans;             /* times the policy was replaced between blocks */
    uint64_t kv_pages_read;      /* disk KV pages read back (the cache's misses) */
    uint64_t kv_cache_hits;      /* disk KV pages attention found in memory instead */
    uint64_t kv_predicted_reads; /* disk KV pages the cache model predicts were read */
    /* of prefill_s and decode_s: seconds this process's IO queue had a read in flight */
    double prefill_io_busy_s, decode_io_busy_s;
} tl_batch_stats;

/* Called once per prompt, in input order, when its block is complete. Return nonzero to
 * stop the run (TL_ERR_CANCELLED). */
typedef int (*tl_batch_result_fn)(void *user, const tl_batch_result *r);
/* Called after every step with the counters so far. Return nonzero to stop at this step
 * boundary: the prompts of the current block that are already complete are reported
 * (in input order, the unfinished ones skipped), then the run returns TL_ERR_CANCELLED. */
typedef int (*tl_batch_progress_fn)(void *user, const tl_batch_stats *s);

/* Generates for every prompt, gbs * num_gb at a time. n_predict[i] (or gp->n_predict
 * when n_predict is NULL) caps prompt i; 0 generates nothing. A prompt that cannot run
 * (it does not fit in n_ctx with one generated token) is reported with its status and
 * message, and the others run. */
tl_status tl_batch_generate(tl_model *model, const tl_batch_params *bp,
                            const tl_generate_params *gp, const char *const *prompts,
                            const int32_t *n_predict, int32_t n_prompts,
                            tl_batch_result_fn on_result, tl_batch_progress_fn on_progress,
                            void *user, tl_batch_stats *stats);

/* Checks batch params and that the block schedule fits the model's memory budget,
 * without running anything (the error says what the minimum is). */
tl_status tl_batch_check(tl_model *model, const tl_batch_params *bp);

/* ---- synthetic models ------------------------------------------------------------ */

/* Shape and type of a synthetic Llama model with random weights (for benchmarks: speed
 * does not depend on the values). Presets: "stories260k", "tinyllama-1.1b", "llama2-7b". */
typedef struct tl_synth_params {
    int32_t n_vocab, n_embd, n_ff, n_layer, n_head, n_head_kv, n_ctx;
    int32_t weight_type;    /* GGML type id of the matrices: 0 F32, 1 F16, 2 Q4_0, 3 Q4_1,
                               6 Q5_0, 7 Q5_1, 8 Q8_0, 10-14 Q2_K..Q6_K, 30 BF16 */
    int32_t tied_output;    /* 1: no output.weight (classifier tied to the embedding) */
    float rope_base;
    uint64_t seed;
    int32_t mix;            /* 0, or a llama.cpp K-quant mix (tl_synth_mix): each matrix's
                               type by llama.cpp's rules for that file type (weight_type is
                               then ignored) */
    int32_t family;         /* TL_SYNTH_LLAMA; TL_SYNTH_QWEN2: architecture "qwen2", q/k/v
                               biases, RoPE on pairs half a rotation apart; TL_SYNTH_OPT:
                               "opt", LayerNorm, learned positions, ReLU FFN, biases, tied
                               (n_head_kv must equal n_head) */
    int32_t rope_freqs;     /* 1: a Llama 3 rope_freqs.weight (Llama 3.1's scaling: factor
                               8, low/high frequency factors 1 and 4, 8192 positions) */
    int32_t n_swa;          /* > 0: <arch>.attention.sliding_window (Mistral) */
    /* > 0 (Llama or Qwen2): a ReLU-fied feed-forward, relu(gate x + b) * up x
     * (tierllm.ffn_activation "relu"), with each neuron's bias b set so that this share of
     * the neurons is zero on average: the gate's inputs are RMS-normalized and its weights
     * uniform, so each pre-activation is near N(0, 1/3) whatever the token, and which
     * neurons are active depends on the input (0: SwiGLU) */
    float relu_sparsity;
    /* with relu_sparsity: > 0 makes each gate row a mix of this many directions per layer
     * (95% of its variance) and its own noise (5%), so the pre-activations of a layer are
     * nearly of this rank, as trained models' are (which is why low-rank predictors of the
     * active neurons work, LLM in a Flash 3.1); 0: every gate row independent (full rank) */
    int32_t gate_rank;
} tl_synth_params;

enum { TL_SYNTH_LLAMA = 0, TL_SYNTH_QWEN2 = 1, TL_SYNTH_OPT = 2 };

/* llama.cpp's K-quant mixes, numbered as its file types (general.file_type). */
typedef enum tl_synth_mix {
    TL_MIX_NONE = 0,
    TL_MIX_Q2_K = 10,
    TL_MIX_Q3_K_S = 11,
    TL_MIX_Q3_K_M = 12,
    TL_MIX_Q3_K_L = 13,
    TL_MIX_Q4_K_S = 14,
    TL_MIX_Q4_K_M = 15,
    TL_MIX_Q5_K_S = 16,
    TL_MIX_Q5_K_M = 17,
    TL_MIX_Q6_K = 18
} tl_synth_mix;

/* "Q4_K_M" for TL_MIX_Q4_K_M, "?" for an unknown mix. */
const char *tl_synth_mix_name(int32_t mix);
/* Fills *out with a preset's shape (F32 weights, seed 1); TL_ERR_INVALID if unknown. */
tl_status tl_synth_preset(const char *name, tl_synth_params *out);
/* Writes the model to `path` (atomically: a temporary file renamed into place). */
tl_status tl_synth_write(const tl_synth_params *params, const char *path);
/* Bytes the file will have. */
uint64_t tl_synth_file_bytes(const tl_synth_params *params);

#ifdef __cplusplus
}
#endif

#endif
