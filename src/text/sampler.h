/* sampler.h - choosing the next token from logits.
 *
 * Order (as llama.cpp): repetition penalty over the last repeat_last_n tokens, then
 * greedy if temperature <= 0; otherwise top-k, temperature, softmax, top-p, and a draw
 * from a seeded xoshiro256** generator, so a fixed seed reproduces the same text.
 */
#ifndef TL_TEXT_SAMPLER_H
#define TL_TEXT_SAMPLER_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"

typedef struct tl_sampler {
    tl_sampler_params p;
    uint64_t rng[4];
    int32_t *history; /* ring of recent tokens */
    size_t n_history, cap_history, head;
    struct tl_cand *cand; /* scratch [n_vocab] */
    size_t n_vocab;
    int cand_shared;      /* 1: cand is the caller's (tl_sampler_init_shared) */
} tl_sampler;

tl_status tl_sampler_init(tl_sampler *s, const tl_sampler_params *p, size_t n_vocab);
/* Bytes of the scratch a sampler over n_vocab tokens uses while it samples. */
size_t tl_sampler_scratch_bytes(size_t n_vocab);
/* The same as tl_sampler_init with the caller's scratch (tl_sampler_scratch_bytes, 8-byte
 * aligned), kept after tl_sampler_free: samplers that never sample at the same time
 * (one thread sampling many sequences) share one, allocated where the caller accounts
 * for it. */
tl_status tl_sampler_init_shared(tl_sampler *s, const tl_sampler_params *p, size_t n_vocab,
                                 void *scratch);
void tl_sampler_free(tl_sampler *s);
/* Records a token (prompt or generated) for the repetition penalty. */
void tl_sampler_accept(tl_sampler *s, int32_t token);
/* Picks a token from logits[n_vocab] (logits may be modified). */
int32_t tl_sampler_sample(tl_sampler *s, float *logits);

#endif
