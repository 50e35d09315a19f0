/* sched.h - continuous batching: sequences join a running batch and leave it at step
 * boundaries (the serving engine's core; serve/ drives it from one thread).
 *
 * One step runs one forward pass (tl_engine_step) over every sequence in flight: each
 * generating sequence feeds its last sampled token (one row), and the sequences still
 * reading their prompt feed the next chunk of it, up to prefill_chunk prompt rows per step
 * over all of them, oldest first. So a long prompt joining never stalls the others for
 * more than one chunk's worth of compute, and every sequence shares each layer's weight
 * read (streamed weights are read once per step for all of them). A step with no
 * sequence generating gives prompts all of its max_seqs + prefill_chunk rows, still at
 * most prefill_chunk per sequence.
 *
 * A sequence's tokens do not depend on what else runs beside it: each row's arithmetic is
 * its own (llama.h), its sampler is its own (seeded by its request), so a sequence run
 * alone and the same sequence among others give the same tokens.
 *
 * The KV cache holds max_seqs sequences of n_ctx positions, in memory or in tiers (the
 * sinks and a recent window in memory, the rest on disk; kv/kv_cache.h); a sequence's
 * pages are taken when it is submitted and returned (their disk slots for reuse) when it
 * finishes or is cancelled. Not
 * thread-safe: one thread submits, cancels and steps.
 */
#ifndef TL_EXEC_SCHED_H
#define TL_EXEC_SCHED_H

#include <stdint.h>
#include "tierllm.h"

typedef struct tl_sched tl_sched;

/* The step policy (optional): the serving planner's re-plan (plan/serve_plan.h). Each
 * step asks `chunk` for its prompt rows given how many of its sequences generate (the
 * answer is clamped to 1..prefill_chunk; a step with none generating still gives prompts
 * every row), and tells `observe` (may be NULL) what the step held and how long it took.
 * Both run on the thread that steps. */
typedef struct tl_sched_policy {
    int32_t (*chunk)(void *user, int32_t gen_rows);
    void (*observe)(void *user, int32_t gen_rows, int32_t prompt_rows, double seconds,
                    double stall_s); /* stall_s: waiting for weight and KV page reads */
    void *user;
} tl_sched_policy;

typedef struct tl_sched_params {
    int32_t max_seqs;      /* sequences in flight at once (default 16) */
    int32_t n_ctx;         /* positions per sequence, prompt and generated (default: the
                              model's training context, at most 4096) */
    int32_t prefill_chunk; /* prompt rows per step over all joining sequences while some
                              sequence generates (default 64) */
    int32_t kv_bits;       /* 32 (default), 16, 8 or 4 */
    int32_t page_tokens;   /* KV page size in positions (default 16) */
    int32_t kv_window;     /* > 0: KV in tiers: each sequence keeps its first kv_sinks and
                              last kv_window positions' pages in memory, older pages go to
                              the disk (read back each step); 0 (default): all in memory */
    int32_t kv_sinks;      /* with tiers (default 16) */
    const char *spill_dir; /* with tiers: where the spill file goes (default $TMPDIR or
                              /tmp); must outlive tl_sched_open only */
    tl_sched_policy policy; /* zero: prefill_chunk every step */
} tl_sched_params;

tl_sched_params tl_sched_default_params(void);

/* The directory KV tiers spill to: spill_dir, else $TMPDIR, else /tmp. */
const char *tl_sched_spill_dir(const tl_sched_params *p);

/* *out = *in with the defaults filled in (n_ctx), checked against the model: what
 * tl_sched_open would run with. out may be in. */
tl_status tl_sched_resolve_params(const tl_model *m, const tl_sched_params *in,
                                  tl_sched_params *out);

/* Budget bytes a scheduler with these parameters holds (activations, logits, KV). */
uint64_t tl_sched_budget_bytes(const tl_model *m, const tl_sched_params *p);

/* Places the model's weights (the first placement decides what streams) and allocates
 * the state, all under the model's memory budget: TL_ERR_NOMEM with the numbers when it
 * does not fit. */
tl_status tl_sched_open(tl_model *m, const tl_sched_params *p, tl_sched **out);
void tl_sched_close(tl_sched *s);
const tl_sched_params *tl_sched_get_params(const tl_sched *s);

typedef struct tl_sched_request {
    const int32_t *prompt;     /* n_prompt >= 1 token ids (copied) */
    int32_t n_prompt;
    int32_t max_tokens;        /* >= 1; generation also stops when the context is full */
    int32_t stop_at_eos;       /* 1: the EOS token ends the sequence (it is not emitted) */
    tl_sampler_params sampler; /* checked; its seed makes the sequence reproducible */
} tl_sched_request;

/* Adds a sequence; it starts at the next step. *id identifies it until its last event.
 * TL_ERR_CONTEXT when the prompt leaves no room for a generated token in n_ctx,
 * TL_ERR_BUSY when max_seqs sequences are in flight, TL_ERR_INVALID for a bad request
 * (token ids outside the vocabulary, max_tokens < 1, sampler settings). */
tl_status tl_sched_submit(tl_sched *s, const tl_sched_request *rq, int64_t *id);

/* Ends a sequence now (between steps): its KV pages are returned; no event follows. An
 * unknown id (already finished) is ignored. */
void tl_sched_cancel(tl_sched *s, int64_t id);

/* Sequences in flight (submitted, not finished or cancelled). */
int32_t tl_sched_active(const tl_sched *s);

enum { TL_SCHED_RUNNING = 0, TL_SCHED_STOP = 1, TL_SCHED_LENGTH = 2 };

typedef struct tl_sched_event {
    int64_t id;
    int32_t token;  /* the token sampled this step, or -1 (a sequence that ended at EOS) */
    int32_t finish; /* TL_SCHED_RUNNING, or why the sequence ended with this event: EOS
                       (TL_SCHED_STOP), max_tokens or the context (TL_SCHED_LENGTH) */
    int32_t n_prompt, n_generated; /* the sequence's counts after this event */
} tl_sched_event;

/* One step over every sequence in flight (its prompt rows: see tl_sched_policy). ev receives one event per sequence that
 * sampled a token or ended this step (at most max_seqs; cap must be at least that);
 * a sequence still reading its prompt produces none. A finished sequence's KV pages are
 * returned before this returns. With nothing in flight: TL_OK and *n_events 0. An engine
 * error (an IO error reading streamed weights) is returned, and is final: the KV of the
 * step's sequences may be half written, so every sequence is dropped (no more events)
 * and later submits and steps return the same error. */
tl_status tl_sched_step(tl_sched *s, tl_sched_event *ev, int32_t cap, int32_t *n_events);

typedef struct tl_sched_stats {
    uint64_t steps, prompt_tokens, generated_tokens;
    uint64_t submitted, finished, cancelled;
    int32_t active, prefilling;        /* now */
    double step_s;                     /* time in steps */
    uint64_t weight_bytes_read;        /* streamed weights read from disk */
    uint64_t kv_pages_mem;             /* KV pages in memory at the peak */
    uint64_t kv_pages_disk;            /* KV page slots the spill file holds (the peak of
                                          pages on disk at once) */
    uint64_t kv_bytes_read;            /* KV pages read back from the disk */
    uint64_t kv_pages_written;         /* KV pages written to the disk */
    double stall_s;                    /* waiting for weight reads */
} tl_sched_stats;

void tl_sched_get_stats(const tl_sched *s, tl_sched_stats *out);

#endif
