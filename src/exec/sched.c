/* sched.c - continuous batching (sched.h says what holds and why).
 *
 * Sequences live in max_seqs slots, each with its own KV sequence, sampler and prompt.
 * A step builds one micro-batch: first the generating slots, one row each (their last
 * sampled token), then the prefilling slots in submission order, each taking as much of
 * its remaining prompt as the step's prefill_chunk rows leave. Rows of one sequence are
 * contiguous and in position order, as the forward pass needs. After tl_engine_step every
 * row's K/V is committed; each generating slot, and each prefilling slot whose prompt just
 * ended, samples from its last row's logits.
 */
#include "exec/sched.h"

#include <stdlib.h>
#include <string.h>
#include "base/cache_dir.h"
#include "base/clock.h"
#include "base/status.h"
#include "exec/engine.h"
#include "exec/residency.h"
#include "text/sampler.h"

typedef struct slot {
    int used;
    int64_t id, order;     /* order: submission count, for prefill's first-come order */
    int32_t kv_seq;
    int32_t *prompt, n_prompt, fed;
    int32_t next;          /* the sampled token to feed next (generating) */
    int32_t n_out, max_tokens, stop_at_eos;
    tl_sampler smp;
} slot;

struct tl_sched {
    tl_model *m;
    tl_sched_params p;
    int32_t rows_cap;      /* max_seqs + prefill_chunk */
    tl_kv *kv;
    tl_llama_scratch scratch;
    float *x, *logits;     /* [rows_cap][n_embd], [max_seqs][n_vocab] */
    void *smp_scratch;     /* the samplers' shared scratch (they sample one at a time) */
    int32_t *tok, *seq, *pos, *lrow, *lslot, *mseqs; /* per step */
    slot *slots;
    int64_t next_id, next_order;
    tl_status broken;
    tl_sched_stats st;
};

tl_sched_params tl_sched_default_params(void) {
    tl_sched_params p;
    p.max_seqs = 16;
    p.n_ctx = 0;
    p.prefill_chunk = 64;
    p.kv_bits = 32;
    p.page_tokens = 16;
    p.kv_window = 0;
    p.kv_sinks = 16;
    p.spill_dir = NULL;
    p.policy = (tl_sched_policy){NULL, NULL, NULL};
    return p;
}

/* The parameters with defaults filled in, checked against the model. */
static tl_status resolve(const tl_model *m, const tl_sched_params *in, tl_sched_params *p) {
    if (in != p) *p = in ? *in : tl_sched_default_params();
    if (p->n_ctx <= 0) p->n_ctx = m->lm.hp.n_ctx_train < 4096 ? m->lm.hp.n_ctx_train : 4096;
    if (p->max_seqs < 1 || p->max_seqs > 4096 || p->prefill_chunk < 1 ||
        p->prefill_chunk > 65536 || p->n_ctx < 2 || p->n_ctx > (1 << 24) ||
        p->page_tokens < 1 || p->page_tokens > 4096)
        return tl_error_set(TL_ERR_INVALID, "scheduler: max_seqs %d (1..4096), prefill chunk "
                            "%d (1..65536), context %d (2..2^24) or page size %d (1..4096) "
                            "is out of range", (int)p->max_seqs, (int)p->prefill_chunk,
                            (int)p->n_ctx, (int)p->page_tokens);
    if (p->kv_window < 0 || p->kv_sinks < 0 || p->kv_window > (1 << 24) || p->kv_sinks > (1 << 24))
        return tl_error_set(TL_ERR_INVALID, "scheduler: KV window %d and sinks %d must be "
                            "0..2^24", (int)p->kv_window, (int)p->kv_sinks);
    if (p->kv_bits != 32 && p->kv_bits != 16 && p->kv_bits != 8 && p->kv_bits != 4)
        return tl_error_set(TL_ERR_INVALID, "kv_bits must be 32, 16, 8 or 4 (got %d)",
                            (int)p->kv_bits);
    return tl_llama_check_context(&m->lm, p->n_ctx);
}

const char *tl_sched_spill_dir(const tl_sched_params *p) {
    return tl_scratch_dir(p->spill_dir);
}

tl_status tl_sched_resolve_params(const tl_model *m, const tl_sched_params *in,
                                  tl_sched_params *out) {
    return resolve(m, in, out);
}

static tl_kv_params kv_params(const tl_model *m, const tl_sched_params *p) {
    tl_kv_params kp;
    memset(&kp, 0, sizeof kp);
    kp.n_layer = tl_llama_stage_layers(&m->lm);
    kp.kv_dim = m->lm.hp.n_head_kv * m->lm.hp.head_dim;
    kp.head_dim = m->lm.hp.head_dim;
    kp.page_tokens = p->page_tokens;
    kp.bits = p->kv_bits;
    kp.kv_mem_pct = 100;
    kp.max_seqs = p->max_seqs;
    kp.max_tokens = p->n_ctx;
    kp.attn_window = m->lm.hp.n_swa;
    kp.max_block = p->prefill_chunk; /* a sequence appends at most a chunk per step */
    if (p->kv_window > 0) {
        const int32_t P = p->page_tokens;
        kp.placement = TL_KV_TEMPERATURE;
        kp.kv_mem_pct = 0;
        kp.window_pages = (p->kv_window + P - 1) / P;
        kp.sink_pages = (p->kv_sinks + P - 1) / P;
        kp.spill_dir = tl_sched_spill_dir(p);
    }
    return kp;
}

static uint64_t budget_bytes(const tl_model *m, const tl_sched_params *p) {
    const uint64_t rows = (uint64_t)p->max_seqs + (uint64_t)p->prefill_chunk;
    tl_kv_params kp = kv_params(m, p);
    /* disk pages of two layers staged: the engine reads layer l + 1 while l computes */
    const uint64_t kv = tl_kv_budget_bytes(&kp, 2 * p->max_seqs);
    if (kv == UINT64_MAX) return UINT64_MAX;
    return tl_llama_scratch_bytes(&m->lm, (int32_t)rows, p->n_ctx, p->page_tokens) +
           rows * (uint64_t)m->lm.hp.n_embd * sizeof(float) + 64 +
           tl_sampler_scratch_bytes((size_t)m->lm.hp.n_vocab) + 64 +
           (uint64_t)p->max_seqs * (uint64_t)m->lm.hp.n_vocab * sizeof(float) + 64 + kv;
}

uint64_t tl_sched_budget_bytes(const tl_model *m, const tl_sched_params *in) {
    tl_sched_params p;
    if (resolve(m, in, &p)) {
        tl_error_clear();
        return UINT64_MAX;
    }
    return budget_bytes(m, &p);
}

static void slot_free(slot *s) {
    free(s->prompt);
    tl_sampler_free(&s->smp);
    memset(s, 0, sizeof *s);
    s->kv_seq = -1;
}

void tl_sched_close(tl_sched *s) {
    if (!s) return;
    tl_model *m = s->m;
    for (int32_t i = 0; s->slots && i < s->p.max_seqs; i++) slot_free(&s->slots[i]);
    free(s->slots);
    if (s->kv) tl_kv_close(s->kv);
    tl_llama_scratch_free(&m->lm, &s->scratch);
    tl_budget_free(m->lm.budget, s->x);
    tl_budget_free(m->lm.budget, s->logits);
    tl_budget_free(m->lm.budget, s->smp_scratch);
    free(s->tok), free(s->seq), free(s->pos), free(s->lrow), free(s->lslot), free(s->mseqs);
    free(s);
}

tl_status tl_sched_open(tl_model *m, const tl_sched_params *in, tl_sched **out) {
    *out = NULL;
    tl_sched_params p;
    tl_status st = resolve(m, in, &p);
    if (st) return st;
    tl_sched *s = calloc(1, sizeof *s);
    if (!s) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    s->m = m;
    s->p = p;
    s->rows_cap = p.max_seqs + p.prefill_chunk;
    const size_t R = (size_t)s->rows_cap, S = (size_t)p.max_seqs;
    s->tok = malloc(R * sizeof *s->tok);
    s->seq = malloc(R * sizeof *s->seq);
    s->pos = malloc(R * sizeof *s->pos);
    s->lrow = malloc(S * sizeof *s->lrow);
    s->lslot = malloc(S * sizeof *s->lslot);
    s->mseqs = malloc(S * sizeof *s->mseqs);
    s->slots = calloc(S, sizeof *s->slots);
    if (!s->tok || !s->seq || !s->pos || !s->lrow || !s->lslot || !s->mseqs || !s->slots)
        st = tl_error_set(TL_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !st && i < S; i++) s->slots[i].kv_seq = -1;
    if (!st) st = tl_engine_place(m, budget_bytes(m, &p));
    if (!st) st = tl_llama_scratch_init(&m->lm, s->rows_cap, p.n_ctx, p.page_tokens, &s->scratch);
    if (!st) st = tl_budget_alloc(m->lm.budget, R * (size_t)m->lm.hp.n_embd * sizeof(float), 64,
                                  "hidden states", (void **)&s->x);
    if (!st) st = tl_budget_alloc(m->lm.budget, S * (size_t)m->lm.hp.n_vocab * sizeof(float), 64,
                                  "logits", (void **)&s->logits);
    if (!st) st = tl_budget_alloc(m->lm.budget, tl_sampler_scratch_bytes((size_t)m->lm.hp.n_vocab),
                                  64, "sampler scratch", &s->smp_scratch);
    if (!st) {
        tl_kv_params kp = kv_params(m, &p);
        st = tl_kv_open(&kp, m->lm.budget, m->lm.aio, &s->kv);
    }
    if (st) {
        tl_sched_close(s);
        return st;
    }
    *out = s;
    return TL_OK;
}

const tl_sched_params *tl_sched_get_params(const tl_sched *s) { return &s->p; }

int32_t tl_sched_active(const tl_sched *s) { return (int32_t)s->st.active; }

static slot *find(tl_sched *s, int64_t id) {
    for (int32_t i = 0; i < s->p.max_seqs; i++)
        if (s->slots[i].used && s->slots[i].id == id) return &s->slots[i];
    return NULL;
}

/* Returns a slot's KV pages and empties it. */
static void end_slot(tl_sched *s, slot *sl) {
    if (sl->kv_seq >= 0) tl_kv_seq_close(s->kv, sl->kv_seq);
    slot_free(sl);
    s->st.active--;
}

tl_status tl_sched_submit(tl_sched *s, const tl_sched_request *rq, int64_t *id) {
    *id = -1;
    if (s->broken) return tl_error_set(s->broken, "the scheduler stopped after an error");
    const int32_t n_vocab = s->m->lm.hp.n_vocab;
    if (!rq || !rq->prompt || rq->n_prompt < 1 || rq->max_tokens < 1)
        return tl_error_set(TL_ERR_INVALID, "a request needs a prompt of at least one token "
                            "and max_tokens >= 1");
    if (rq->n_prompt >= s->p.n_ctx)
        return tl_error_set(TL_ERR_CONTEXT, "the prompt is %d tokens; the context holds %d "
                            "(prompt plus at least one generated token)", (int)rq->n_prompt,
                            (int)s->p.n_ctx);
    for (int32_t i = 0; i < rq->n_prompt; i++)
        if (rq->prompt[i] < 0 || rq->prompt[i] >= n_vocab)
            return tl_error_set(TL_ERR_INVALID, "token id %d is outside the vocabulary "
                                "(0..%d)", (int)rq->prompt[i], (int)n_vocab - 1);
    tl_status st = tl_sampler_params_check(&rq->sampler);
    if (st) return st;
    /* a sequence never holds more than n_ctx tokens: a longer history (outside the budget,
     * like the slot's prompt copy) would change nothing */
    tl_sampler_params sp = rq->sampler;
    if (sp.repeat_last_n > s->p.n_ctx) sp.repeat_last_n = s->p.n_ctx;
    slot *sl = NULL;
    for (int32_t i = 0; i < s->p.max_seqs && !sl; i++)
        if (!s->slots[i].used) sl = &s->slots[i];
    if (!sl)
        return tl_error_set(TL_ERR_BUSY, "all %d sequences are in flight", (int)s->p.max_seqs);
    if (!(sl->prompt = malloc((size_t)rq->n_prompt * sizeof *sl->prompt)))
        return tl_error_set(TL_ERR_NOMEM, "out of memory");
    memcpy(sl->prompt, rq->prompt, (size_t)rq->n_prompt * sizeof *sl->prompt);
    sl->n_prompt = rq->n_prompt;
    sl->max_tokens = rq->max_tokens;
    sl->stop_at_eos = rq->stop_at_eos;
    if ((st = tl_sampler_init_shared(&sl->smp, &sp, (size_t)n_vocab, s->smp_scratch)) ||
        (st = tl_kv_seq_open(s->kv, &sl->kv_seq))) {
        slot_free(sl);
        return st;
    }
    for (int32_t j = 0; j < sl->n_prompt; j++) tl_sampler_accept(&sl->smp, sl->prompt[j]);
    sl->used = 1;
    sl->id = *id = s->next_id++;
    sl->order = s->next_order++;
    s->st.active++;
    s->st.submitted++;
    return TL_OK;
}

void tl_sched_cancel(tl_sched *s, int64_t id) {
    slot *sl = find(s, id);
    if (!sl) return;
    end_slot(s, sl);
    s->st.cancelled++;
}

/* Appends `len` rows of slot i's tokens at its next positions; the last one's logits
 * are wanted when `sample`. Returns the row count after. */
static int32_t put_rows(tl_sched *s, int32_t n, int32_t i, const int32_t *toks, int32_t len,
                        int sample, int32_t *n_logits, int32_t *n_seqs) {
    slot *sl = &s->slots[i];
    const int32_t base = tl_kv_seq_len(s->kv, sl->kv_seq);
    for (int32_t j = 0; j < len; j++) {
        s->tok[n + j] = toks[j];
        s->seq[n + j] = sl->kv_seq;
        s->pos[n + j] = base + j;
    }
    if (sample) {
        s->lrow[*n_logits] = n + len - 1;
        s->lslot[(*n_logits)++] = i;
    }
    s->mseqs[(*n_seqs)++] = sl->kv_seq;
    return n + len;
}

/* The step's rows: generating slots first, then prompt chunks oldest first. With no
 * sequence generating, no one's inter-token latency is at stake: prompts take every row
 * the step has room for, each still at most prefill_chunk (the KV cache's bound on what
 * one sequence appends between commits, which its budget is sized by). */
static tl_microbatch build(tl_sched *s, int32_t *n_prompt_rows) {
    int32_t n = 0, nl = 0, ns = 0;
    for (int32_t i = 0; i < s->p.max_seqs; i++) {
        slot *sl = &s->slots[i];
        if (sl->used && sl->fed == sl->n_prompt) n = put_rows(s, n, i, &sl->next, 1, 1, &nl, &ns);
    }
    int32_t chunk = s->p.prefill_chunk;
    if (n && s->p.policy.chunk) {
        const int32_t want = s->p.policy.chunk(s->p.policy.user, n);
        chunk = want < 1 ? 1 : want < chunk ? want : chunk;
    }
    int32_t budget = n ? chunk : s->rows_cap;
    *n_prompt_rows = 0;
    while (budget > 0) {
        int32_t oldest = -1;
        for (int32_t i = 0; i < s->p.max_seqs; i++) {
            const slot *sl = &s->slots[i];
            if (!sl->used || sl->fed == sl->n_prompt) continue;
            int taken = 0; /* one chunk per sequence per step: its positions follow its KV */
            for (int32_t k = 0; k < ns && !taken; k++) taken = s->mseqs[k] == sl->kv_seq;
            if (!taken && (oldest < 0 || sl->order < s->slots[oldest].order)) oldest = i;
        }
        if (oldest < 0) break;
        slot *sl = &s->slots[oldest];
        const int32_t cap = budget < s->p.prefill_chunk ? budget : s->p.prefill_chunk;
        const int32_t left = sl->n_prompt - sl->fed, len = left < cap ? left : cap;
        n = put_rows(s, n, oldest, sl->prompt + sl->fed, len, len == left, &nl, &ns);
        sl->fed += len;
        budget -= len;
        *n_prompt_rows += len;
    }
    return (tl_microbatch){n, s->tok, {n, s->seq, s->pos}, s->x, s->lrow, nl, s->logits,
                           s->mseqs, ns};
}

/* Samples slot i's next token from its logits; fills its event. */
static void sample(tl_sched *s, int32_t i, float *logits, tl_sched_event *ev) {
    slot *sl = &s->slots[i];
    const int32_t tok = tl_sampler_sample(&sl->smp, logits);
    *ev = (tl_sched_event){sl->id, tok, TL_SCHED_RUNNING, sl->n_prompt, sl->n_out};
    if (sl->stop_at_eos && tok == tl_tokenizer_eos(s->m->lm.tok)) {
        ev->token = -1;
        ev->finish = TL_SCHED_STOP;
        return;
    }
    tl_sampler_accept(&sl->smp, tok);
    sl->next = tok;
    ev->n_generated = ++sl->n_out;
    s->st.generated_tokens++;
    if (sl->n_out >= sl->max_tokens || sl->n_prompt + sl->n_out >= s->p.n_ctx)
        ev->finish = TL_SCHED_LENGTH;
}

tl_status tl_sched_step(tl_sched *s, tl_sched_event *ev, int32_t cap, int32_t *n_events) {
    *n_events = 0;
    if (s->broken) return tl_error_set(s->broken, "the scheduler stopped after an error");
    if (cap < s->p.max_seqs)
        return tl_error_set(TL_ERR_INVALID, "room for %d events; a step may produce %d",
                            (int)cap, (int)s->p.max_seqs);
    int32_t prompt_rows;
    tl_microbatch mb = build(s, &prompt_rows);
    if (mb.n_rows == 0) return TL_OK;
    const int32_t gen_rows = mb.n_rows - prompt_rows;
    const double t0 = tl_now();
    tl_residency_stats r0, r1;
    tl_kv_stats k0, k1;
    tl_residency_get_stats(s->m->res, &r0);
    tl_kv_get_stats(s->kv, &k0);
    tl_status st = tl_engine_step(s->m, &s->scratch, s->kv, &mb, 1);
    tl_residency_get_stats(s->m->res, &r1);
    tl_kv_get_stats(s->kv, &k1);
    s->st.weight_bytes_read += r1.bytes_read_disk - r0.bytes_read_disk;
    s->st.stall_s += r1.stall_s - r0.stall_s;
    if (st) { /* the step's KV may be half appended: nothing in flight can continue */
        for (int32_t i = 0; i < s->p.max_seqs; i++)
            if (s->slots[i].used) end_slot(s, &s->slots[i]);
        s->broken = st;
        return st;
    }
    s->st.steps++;
    s->st.prompt_tokens += (uint64_t)prompt_rows;
    for (int32_t j = 0; j < mb.n_logits; j++) {
        const int32_t i = s->lslot[j];
        sample(s, i, s->logits + (size_t)j * s->m->lm.hp.n_vocab, &ev[*n_events]);
        if (ev[(*n_events)++].finish != TL_SCHED_RUNNING) {
            end_slot(s, &s->slots[i]);
            s->st.finished++;
        }
    }
    const double seconds = tl_now() - t0;
    s->st.step_s += seconds;
    if (s->p.policy.observe) /* waiting on the disk: weights, KV pages and KV writes */
        s->p.policy.observe(s->p.policy.user, gen_rows, prompt_rows, seconds,
                            (r1.stall_s - r0.stall_s) + (k1.wait_s - k0.wait_s) +
                                (k1.write_wait_s - k0.write_wait_s));
    return TL_OK;
}

void tl_sched_get_stats(const tl_sched *s, tl_sched_stats *out) {
    *out = s->st;
    out->prefilling = 0;
    for (int32_t i = 0; i < s->p.max_seqs; i++)
        out->prefilling += s->slots[i].used && s->slots[i].fed < s->slots[i].n_prompt;
    tl_kv_stats ks;
    tl_kv_get_stats(s->kv, &ks);
    out->kv_pages_mem = ks.mem_pages_peak;
    out->kv_pages_disk = ks.spill_slots;
    out->kv_bytes_read = ks.bytes_read;
    out->kv_pages_written = ks.pages_written;
}
