/* engine.h - placing the weights under the budget, and running forward passes over
 * micro-batches of rows with the weights and KV pages they need (exec/engine.c).
 *
 * A *block* is num_gb micro-batches of rows. One step runs, for each layer, every
 * micro-batch (FlexGen's zig-zag order): a streamed layer's weights are read once per
 * block, and while micro-batch k computes, the disk KV pages of micro-batch k+1 for this
 * layer are already being read. A single sequence is a block of one micro-batch.
 */
#ifndef TL_EXEC_ENGINE_H
#define TL_EXEC_ENGINE_H

#include "kv/kv_cache.h"
#include "exec/model_handle.h"
#include "exec/residency.h"

/* The first caller fixes the placement: what the budget leaves after `state_bytes`
 * (KV, activations, ...) decides which weights are resident and which stream. Later
 * callers only check that their state fits. */
tl_status tl_engine_place(tl_model *m, uint64_t state_bytes);

/* The weight plan tl_engine_place makes for these knobs when `state_bytes` of other
 * state share the budget, without placing anything: the exact dry run the planner uses.
 * TL_ERR_NOMEM (with the minimum in the message) when it cannot fit. */
tl_status tl_engine_plan_weights(const tl_model *m, uint64_t state_bytes, int prefetch,
                                 int overlap, int w_mem_pct, tl_weight_plan *plan);

/* Budget bytes in use before any placement: what a new placement starts from (the
 * model's own allocations). Dry runs use it, so they are right even while a placement
 * that is about to be replaced is still held. */
uint64_t tl_engine_base_used(const tl_model *m);

/* Frees the placement (no context or batch may be using it), so the next caller of
 * tl_engine_place places the weights again, under the model's current params. */
void tl_engine_unplace(tl_model *m);

/* Between steps of a context (benchmarks, re-planning): the KV cache's size in pages (at
 * most what the context opened with) and the page-selection share (0: exact; > 0 only
 * for a context opened with selection). */
tl_status tl_context_tune_kv(tl_context *c, int32_t cache_pages, float select_share);
/* Between steps of a selective context: the hit-rate model's forecast of the next step's
 * disk reads per disk page its selection uses (tl_kv_select_read_forecast). */
tl_status tl_context_select_read_forecast(const tl_context *c, double *ratio);
/* Between steps of a context opened with kv_recompute > 0 (its input rows kept): the
 * first `layers` layers recompute K and V from them from now on, the others load. */
tl_status tl_context_set_kv_recompute(tl_context *c, int32_t layers);
/* Between steps: the read rate of the context's KV spill file now (tl_kv_time_disk_reads). */
tl_status tl_context_time_disk_reads(tl_context *c, int depth, double seconds, double *bps);
/* The KV placement a context chose (tiers, window, cache...). */
const tl_kv_params *tl_context_kv_params(const tl_context *c);

/* A context whose KV cache does not fit in memory keeps this many recent positions (and
 * tl_context_default_params' kv_sinks first ones) in memory when not told otherwise. */
enum { TL_KV_AUTO_WINDOW = 256 };
/* Budget bytes a context of (n_ctx, n_batch) holds with its KV in tiers (window and sink
 * pages in memory, a cache of cache_pages disk pages, key bounds and the selection's
 * scratch when select, input rows kept when recompute > 0), as tl_context_open accounts
 * them. */
uint64_t tl_context_tiers_budget_bytes(const tl_model *m, int32_t n_ctx, int32_t n_batch,
                                       int32_t bits, int32_t window_pages, int32_t sink_pages,
                                       int32_t cache_pages, int select, int32_t recompute);
/* Disk pages (all layers) of such a context once full. */
int64_t tl_context_tiers_disk_pages(const tl_model *m, int32_t n_ctx, int32_t window_pages,
                                    int32_t sink_pages);
/* Budget bytes a single-sequence context of (n_ctx, n_batch) holds (context.c). */
uint64_t tl_context_budget_bytes(const tl_model *m, int32_t n_ctx, int32_t n_batch);

/* Budget bytes a batch run with these parameters holds besides the weights (batch.c). */
uint64_t tl_batch_budget_bytes(const tl_model *m, const tl_batch_params *bp);
/* The KV page size a batch run will use (rounded up to whole TL_TIER_MAX_ALIGN units when KV
 * may spill). */
int32_t tl_batch_page_tokens(const tl_model *m, const tl_batch_params *bp);

/* Before each block of a batch run (the first included: the weights are placed by
 * then), a planner may replace the policy of the rest of the run: the hook sees the counters so far and the number of prompts left, and returns
 * 1 after writing new batch params (and possibly changing m->lm.params: prefetch, overlap,
 * w_mem_pct), 0 to keep going. On 1 the run frees its state, places the weights again
 * and continues with the new params. */
typedef int (*tl_batch_replan_fn)(void *user, tl_model *m, const tl_batch_stats *so_far,
                                  int32_t prompts_left, tl_batch_params *bp);
/* What a batch run takes beyond tl_batch_generate's arguments. */
typedef struct tl_batch_run {
    tl_batch_replan_fn replan;         /* NULL: the policy never changes */
    void *replan_user;
    const tl_fault_spec *spill_fault;  /* tests: faults injected into the KV spill file */
    const int32_t *seed_index;         /* prompt i samples with seed + seed_index[i] (NULL:
                                          + i), so a resumed run that leaves out finished
                                          prompts samples each prompt as the first run did */
} tl_batch_run;
tl_status tl_batch_generate_ex(tl_model *m, const tl_batch_params *bp,
                               const tl_generate_params *gp, const char *const *prompts,
                               const int32_t *n_predict, int32_t n_prompts,
                               tl_batch_result_fn on_result, tl_batch_progress_fn on_progress,
                               void *user, const tl_batch_run *run, tl_batch_stats *stats);

typedef struct tl_microbatch {
    int32_t n_rows;
    const int32_t *tokens;  /* [n_rows] */
    tl_llama_rows rows;     /* seq and pos of each row (rows.n == n_rows) */
    float *x;               /* [n_rows][n_embd] hidden states, owned by the caller */
    const int32_t *logit_rows; /* rows whose logits are wanted */
    int32_t n_logits;
    float *logits;          /* [n_logits][n_vocab] */
    const int32_t *seqs;    /* distinct sequences of the micro-batch, for KV prefetch */
    int32_t n_seqs;
} tl_microbatch;

/* One forward step of a block. On success every row's K/V is committed to the cache. */
tl_status tl_engine_step(tl_model *m, tl_llama_scratch *s, tl_kv *kv, tl_microbatch *mb,
                         int32_t num_gb);

#endif
