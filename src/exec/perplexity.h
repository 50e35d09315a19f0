/* perplexity.h - tl_perplexity (tierllm.h) over a caller's logits buffer, for callers that
 * take the buffer from the budget before anything else does (exec/convert.h: once weights
 * are placed the budget may hold no room for it). */
#ifndef TL_EXEC_PERPLEXITY_H
#define TL_EXEC_PERPLEXITY_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"

/* The logits rows a run over n tokens in windows of n_ctx needs. */
size_t tl_perplexity_rows(size_t n, int32_t n_ctx);

/* tl_perplexity with `logits` of at least tl_perplexity_rows(n, n_ctx) x n_vocab floats. */
tl_status tl_perplexity_into(tl_model *m, const int32_t *ids, size_t n, int32_t n_ctx,
                             float *logits, double *ppl, size_t *n_scored);

#endif
