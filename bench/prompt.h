/* prompt.h - the benchmarks' prompts: word sequences tokenized to an exact length. */
#ifndef TL_BENCH_PROMPT_H
#define TL_BENCH_PROMPT_H

#include "tierllm.h"

/* A prompt of exactly n_tokens tokens (with BOS) in m's vocabulary, from a 16-word list
 * in an order set by `variant` (so prompts differ); malloc'd, NULL when out of memory. */
char *bench_make_prompt(tl_model *m, int n_tokens, int variant);

#endif
