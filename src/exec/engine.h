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

#include "../kv/kv_cache.h"
#include "../model/llama.h"

/* The first caller fixes the placement: what the budget leaves after `state_bytes`
 * (KV, activations, ...) decides which weights are resident and which stream. Later
 * callers only check that their state fits. */
tl_status tl_engine_place(tl_model *m, uint64_t state_bytes);

/* Budget bytes a single-sequence context of (n_ctx, n_batch) holds (context.c). */
uint64_t tl_context_budget_bytes(const tl_model *m, int32_t n_ctx, int32_t n_batch);

/* Budget bytes a batch run with these parameters holds besides the weights (batch.c). */
uint64_t tl_batch_budget_bytes(const tl_model *m, const tl_batch_params *bp);

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
