/* batch.c - batch generation: blocks of gbs x num_gb sequences through the block
 * schedule of engine.c, with the paged KV cache possibly spilling to the SSD.
 *
 * Per block: tokenize (a prompt that does not fit in n_ctx with one generated token is a
 * failed sequence: it takes no rows and is reported with its error);
 * prefill in steps of up to prefill_rows rows per micro-batch (each sequence contributes
 * a chunk of its prompt; a sequence's first token is sampled when its last prompt chunk
 * has run; a sequence with n_predict 0 skips prefill); then decode steps with one row per
 * unfinished sequence until every sequence stops (EOS, its n_predict, or the context).
 * Results are reported in input order at the end of each block, or, when the progress
 * callback asks to stop, those already complete at that step boundary. Sampling is per
 * sequence, seeded with seed + prompt index (or the caller's index for it), so a
 * sequence's tokens do not depend on which block or micro-batch it ran in.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/cache_dir.h"
#include "tierllm.h"
#include "exec/engine.h"
#include "exec/residency.h"
#include "exec/pipeline.h"
#include "base/clock.h"
#include "base/status.h"
#include "text/sampler.h"
#include "tier/aio.h"
#include "tier/tier.h"

typedef struct seq_state {
    int32_t index, kv_seq;
    int32_t *prompt, n_prompt, fed; /* prompt tokens, how many have run */
    int32_t *out, n_out, cap_out, limit;
    char *text;
    size_t text_len, text_cap;
    tl_utf8_stream utf8;
    tl_sampler smp;
    int32_t next;                   /* the sampled token not yet fed */
    int done, eos;
    tl_status fail;                 /* the prompt cannot run: reported with its message */
    char fail_msg[192];
} seq_state;

typedef struct batch {
    tl_model *m;
    tl_batch_params bp;
    tl_generate_params gp;
    tl_kv *kv;
    tl_llama_scratch scratch;
    int32_t rows_per_mb;
    float *x;                 /* [num_gb][rows_per_mb][n_embd] */
    float *logits;            /* [num_gb][gbs][n_vocab] */
    int32_t *tok, *seq, *pos, *lrow, *lseq, *mseqs; /* per micro-batch row arrays */
    tl_microbatch *mb;
    seq_state *ss;            /* [gbs * num_gb] */
    tl_batch_stats st;
    double t_start;
    uint64_t base_written, base_kv_read, base_weight_read; /* from before a re-plan */
    uint64_t base_repacked;
    double base_repack_s, base_arrival_repack_s;
    uint64_t base_pages_read, base_hits;
    const tl_fault_spec *spill_fault;
    const int32_t *seed_index;
    int stage_only;           /* a later pipeline rank: rows arrive in the pipe's buffers,
                                 so no hidden states or logits of its own */
} batch;

tl_batch_params tl_batch_default_params(void) {
    tl_batch_params p;
    memset(&p, 0, sizeof p);
    p.gbs = 8;
    p.num_gb = 4;
    p.n_ctx = 512;
    p.prefill_rows = 512;
    p.kv_bits = 32;
    p.kv_mem_pct = 100;
    p.page_tokens = 16;
    p.spill_dir = NULL;
    p.kv_window = 0;
    p.kv_sinks = 0;
    p.kv_cache_bytes = 0;
    p.kv_select = 0;
    return p;
}

static tl_kv_params kv_params(const batch *b) {
    tl_kv_params kp;
    memset(&kp, 0, sizeof kp);
    kp.n_layer = tl_llama_stage_layers(&b->m->lm);
    kp.kv_dim = b->m->lm.hp.n_head_kv * b->m->lm.hp.head_dim;
    kp.head_dim = b->m->lm.hp.head_dim;
    kp.page_tokens = b->bp.page_tokens;
    kp.bits = b->bp.kv_bits;
    kp.kv_mem_pct = b->bp.kv_mem_pct;
    kp.max_seqs = b->bp.gbs * b->bp.num_gb;
    kp.max_tokens = b->bp.n_ctx;
    kp.spill_dir = b->bp.spill_dir;
    kp.attn_window = b->m->lm.hp.n_swa;
    kp.max_block = b->rows_per_mb / b->bp.gbs; /* a prefill chunk per sequence */
    if (kp.max_block < 1) kp.max_block = 1;
    if (b->bp.kv_window > 0) {
        const int32_t P = kp.page_tokens;
        kp.placement = TL_KV_TEMPERATURE;
        kp.kv_mem_pct = 0;
        kp.window_pages = (b->bp.kv_window + P - 1) / P;
        kp.sink_pages = (b->bp.kv_sinks + P - 1) / P;
    }
    kp.key_bounds = b->bp.kv_select > 0;
    if (b->bp.kv_cache_bytes > 0) {
        int64_t pages = b->bp.kv_cache_bytes /
                        (int64_t)(tl_kv_slot_bytes(&kp) + TL_TIER_MAX_ALIGN);
        int64_t disk = (int64_t)kp.max_seqs * kp.n_layer * tl_kv_disk_pages(&kp, kp.max_tokens);
        kp.cache_pages = (int32_t)(pages < disk ? pages : disk);
    }
    return kp;
}

static tl_status check_params(tl_batch_params *p) {
    p->spill_dir = tl_scratch_dir(p->spill_dir);
    if (p->gbs < 1 || p->gbs > 4096 || p->num_gb < 1 || p->num_gb > 4096 ||
        (int64_t)p->gbs * p->num_gb > 65536)
        return tl_error_set(TL_ERR_INVALID, "gbs %d x num_gb %d: each must be 1..4096 and the "
                            "block at most 65536 sequences", (int)p->gbs, (int)p->num_gb);
    if (p->n_ctx < 2 || p->page_tokens < 1 || p->prefill_rows < 1)
        return tl_error_set(TL_ERR_INVALID, "context %d, page size %d and prefill rows %d "
                            "must be positive", (int)p->n_ctx, (int)p->page_tokens,
                            (int)p->prefill_rows);
    if (p->kv_bits != 32 && p->kv_bits != 16 && p->kv_bits != 8 && p->kv_bits != 4)
        return tl_error_set(TL_ERR_INVALID, "--kv-bits must be 32, 16, 8 or 4 (got %d)",
                            (int)p->kv_bits);
    if (!(p->kv_select >= 0 && p->kv_select <= 1))
        return tl_error_set(TL_ERR_INVALID, "kv_select %g is outside [0, 1]",
                            (double)p->kv_select);
    if (p->kv_window < 0 || p->kv_sinks < 0 || p->kv_cache_bytes < 0)
        return tl_error_set(TL_ERR_INVALID, "KV window %d, sinks %d and cache %lld bytes must "
                            "not be negative", (int)p->kv_window, (int)p->kv_sinks,
                            (long long)p->kv_cache_bytes);
    if (p->kv_mem_pct < 0 || p->kv_mem_pct > 100)
        return tl_error_set(TL_ERR_INVALID, "--kv-mem must be 0..100 (got %d)",
                            (int)p->kv_mem_pct);
    return TL_OK;
}

static void seq_free(seq_state *s) {
    free(s->prompt);
    free(s->out);
    free(s->text);
    tl_sampler_free(&s->smp);
    memset(s, 0, sizeof *s);
    s->kv_seq = -1; /* no KV sequence open */
}

static void batch_free(batch *b) {
    tl_model *m = b->m;
    if (b->ss)
        for (int32_t i = 0; i < b->bp.gbs * b->bp.num_gb; i++) seq_free(&b->ss[i]);
    free(b->ss);
    if (b->kv) tl_kv_close(b->kv);
    tl_llama_scratch_free(&m->lm, &b->scratch);
    tl_budget_free(m->lm.budget, b->x);
    tl_budget_free(m->lm.budget, b->logits);
    free(b->tok);
    free(b->seq);
    free(b->pos);
    free(b->lrow);
    free(b->lseq);
    free(b->mseqs);
    free(b->mb);
    b->ss = NULL;
    b->kv = NULL;
    b->x = b->logits = NULL;
    b->tok = b->seq = b->pos = b->lrow = b->lseq = b->mseqs = NULL;
    b->mb = NULL;
}

static int32_t gcd32(int32_t a, int32_t b) {
    while (b) { int32_t t = a % b; a = b; b = t; }
    return a;
}

/* Spilled pages are written with O_DIRECT in TL_TIER_MAX_ALIGN units: a page whose size is
 * not a multiple of it would pad its slot and write more than the KV it holds. When KV
 * may spill, page_tokens is rounded up so that a page is a whole number of units. */
static void align_pages(const tl_model *m, tl_batch_params *p) {
    if (p->kv_mem_pct >= 100 && p->kv_window <= 0) return;
    tl_kv_params kp;
    memset(&kp, 0, sizeof kp);
    kp.kv_dim = m->lm.hp.n_head_kv * m->lm.hp.head_dim;
    kp.head_dim = m->lm.hp.head_dim;
    kp.page_tokens = 1;
    kp.bits = p->kv_bits;
    size_t per_token = tl_kv_page_bytes(&kp);
    if (per_token == 0) return;
    const int32_t A = TL_TIER_MAX_ALIGN;
    int32_t unit = A / gcd32(A, (int32_t)(per_token % (size_t)A)); /* gcd(a, 0) = a */
    p->page_tokens = (p->page_tokens + unit - 1) / unit * unit;
}

static uint64_t budget_bytes(const batch *b);
static void fill_io_stats(batch *b);

int32_t tl_batch_page_tokens(const tl_model *m, const tl_batch_params *bp) {
    tl_batch_params p = *bp;
    align_pages(m, &p);
    return p.page_tokens;
}

uint64_t tl_batch_budget_bytes(const tl_model *m, const tl_batch_params *bp) {
    batch b;
    memset(&b, 0, sizeof b);
    b.m = (tl_model *)m;
    b.bp = *bp;
    if (check_params(&b.bp) != TL_OK) return UINT64_MAX; /* also defaults the spill dir */
    align_pages(m, &b.bp); /* as tl_batch_generate will */
    b.rows_per_mb = bp->prefill_rows < bp->gbs ? bp->gbs : bp->prefill_rows;
    return budget_bytes(&b);
}

static uint64_t budget_bytes(const batch *b) {
    const tl_model *m = b->m;
    const uint64_t nb = (uint64_t)b->bp.num_gb;
    tl_kv_params kp = kv_params(b);
    const uint64_t kv = tl_kv_budget_bytes(&kp, 2 * b->bp.gbs); /* two micro-batches staged */
    if (kv == UINT64_MAX) return UINT64_MAX; /* invalid KV parameters: nothing fits */
    const uint64_t sel = b->bp.kv_select > 0 ? tl_llama_select_bytes(&m->lm, b->rows_per_mb,
                                                                      b->bp.n_ctx,
                                                                      b->bp.page_tokens)
                                             : 0;
    const uint64_t rows = b->stage_only ? 0 :
        nb * (uint64_t)b->rows_per_mb * (uint64_t)m->lm.hp.n_embd * sizeof(float) + 64 +
        nb * (uint64_t)b->bp.gbs * (uint64_t)m->lm.hp.n_vocab * sizeof(float) + 64;
    return sel + tl_llama_scratch_bytes(&m->lm, b->rows_per_mb, b->bp.n_ctx, b->bp.page_tokens) +
           rows + kv;
}

static tl_status batch_init(batch *b) {
    tl_model *m = b->m;
    const int32_t gbs = b->bp.gbs, ng = b->bp.num_gb;
    const size_t R = (size_t)b->rows_per_mb, n_all = (size_t)ng * R;
    tl_status st = tl_engine_place(m, budget_bytes(b));
    if (st) return st;
    b->tok = malloc(n_all * sizeof *b->tok);
    b->seq = malloc(n_all * sizeof *b->seq);
    b->pos = malloc(n_all * sizeof *b->pos);
    b->lrow = malloc((size_t)ng * gbs * sizeof *b->lrow);
    b->lseq = malloc((size_t)ng * gbs * sizeof *b->lseq);
    b->mseqs = malloc((size_t)ng * gbs * sizeof *b->mseqs);
    b->mb = calloc((size_t)ng, sizeof *b->mb);
    b->ss = calloc((size_t)ng * gbs, sizeof *b->ss);
    if (!b->tok || !b->seq || !b->pos || !b->lrow || !b->lseq || !b->mseqs || !b->mb || !b->ss)
        return tl_error_set(TL_ERR_NOMEM, "out of memory");
    if ((st = tl_llama_scratch_init(&m->lm, b->rows_per_mb, b->bp.n_ctx, b->bp.page_tokens,
                                    &b->scratch)))
        return st;
    if (!b->stage_only &&
        ((st = tl_budget_alloc(m->lm.budget, n_all * (size_t)m->lm.hp.n_embd * sizeof(float), 64,
                               "hidden states", (void **)&b->x)) ||
         (st = tl_budget_alloc(m->lm.budget, (size_t)ng * gbs * (size_t)m->lm.hp.n_vocab *
                               sizeof(float), 64, "logits", (void **)&b->logits))))
        return st;
    tl_kv_params kp = kv_params(b);
    if (b->bp.kv_select > 0) { /* always read: the tiers' sinks and window, else 32 positions */
        const int32_t P = kp.page_tokens;
        tl_kv_select sp;
        sp.page_share = b->bp.kv_select;
        sp.sink_pages = kp.placement == TL_KV_TEMPERATURE ? kp.sink_pages
                                                          : (b->bp.kv_sinks + P - 1) / P;
        sp.window_pages = kp.placement == TL_KV_TEMPERATURE ? kp.window_pages : (32 + P - 1) / P;
        sp.measure = 0;
        if ((st = tl_llama_select_init(&m->lm, &b->scratch, &sp))) return st;
    }
    st = tl_kv_open(&kp, m->lm.budget, m->lm.aio, &b->kv);
    if (!st && b->spill_fault) tl_kv_set_spill_fault(b->kv, b->spill_fault);
    return st;
}

/* Appends a token's text to the sequence's output. */
static tl_status take_token(batch *b, seq_state *s, int32_t tok) {
    if (s->n_out == s->cap_out) {
        int32_t cap = s->cap_out ? 2 * s->cap_out : 64;
        int32_t *o = realloc(s->out, (size_t)cap * sizeof *o);
        if (!o) return tl_error_set(TL_ERR_NOMEM, "out of memory");
        s->out = o;
        s->cap_out = cap;
    }
    s->out[s->n_out++] = tok;
    tl_sampler_accept(&s->smp, tok);
    const char *bytes;
    size_t len;
    if (tl_token_piece(b->m, tok, &bytes, &len) != TL_OK) len = 0;
    if (s->text_len + 3 * len + 8 > s->text_cap) {
        size_t cap = (s->text_cap ? 2 * s->text_cap : 256) + 3 * len + 8;
        char *t = realloc(s->text, cap);
        if (!t) return tl_error_set(TL_ERR_NOMEM, "out of memory");
        s->text = t;
        s->text_cap = cap;
    }
    s->text_len += tl_utf8_stream_push(&s->utf8, bytes, len, s->text + s->text_len);
    return TL_OK;
}

/* Samples the next token of a sequence from its logits and decides whether it stops. */
static tl_status sample(batch *b, seq_state *s, float *logits) {
    int32_t tok = tl_sampler_sample(&s->smp, logits);
    const int32_t eos = tl_tokenizer_eos(b->m->lm.tok);
    if (b->gp.stop_at_eos && tok == eos) {
        s->done = s->eos = 1;
        return TL_OK;
    }
    tl_status st = take_token(b, s, tok);
    s->next = tok;
    if (s->n_out >= s->limit || s->n_prompt + s->n_out >= b->bp.n_ctx) s->done = 1;
    b->st.generated_tokens++;
    return st;
}

/* Builds micro-batch k for this step: prompt chunks (prefill) or one row per unfinished
 * sequence (decode). Returns the number of rows. */
static int32_t build(batch *b, int32_t k, int32_t n_seqs_block, int prefill, int32_t chunk) {
    const int32_t gbs = b->bp.gbs, R = b->rows_per_mb;
    tl_microbatch *mb = &b->mb[k];
    int32_t *tok = b->tok + (size_t)k * R, *seq = b->seq + (size_t)k * R;
    int32_t *pos = b->pos + (size_t)k * R, *lrow = b->lrow + (size_t)k * gbs;
    int32_t *mseqs = b->mseqs + (size_t)k * gbs;
    int32_t n = 0, nl = 0, ns = 0;
    for (int32_t i = k * gbs; i < (k + 1) * gbs && i < n_seqs_block; i++) {
        seq_state *s = &b->ss[i];
        int32_t len;
        if (s->fail) continue; /* no rows, no KV sequence */
        if (prefill) {
            len = s->n_prompt - s->fed < chunk ? s->n_prompt - s->fed : chunk;
            for (int32_t j = 0; j < len; j++) tok[n + j] = s->prompt[s->fed + j];
        } else {
            len = s->done ? 0 : 1;
            if (len) tok[n] = s->next;
        }
        if (!len) continue;
        const int32_t base = tl_kv_seq_len(b->kv, s->kv_seq);
        for (int32_t j = 0; j < len; j++) {
            seq[n + j] = s->kv_seq;
            pos[n + j] = base + j;
        }
        if (prefill) s->fed += len;
        if (!prefill || s->fed == s->n_prompt) {
            lrow[nl] = n + len - 1;
            b->lseq[k * gbs + nl] = i;
            nl++;
        }
        mseqs[ns++] = s->kv_seq;
        n += len;
    }
    *mb = (tl_microbatch){n, tok, {n, seq, pos}, b->x + (size_t)k * R * b->m->lm.hp.n_embd,
                          lrow, nl, b->logits + (size_t)k * gbs * b->m->lm.hp.n_vocab, mseqs, ns};
    return n;
}

/* Builds micro-batches k0..k1 of this step and keeps the non-empty ones contiguous from
 * k0. Returns their count. */
static int32_t build_range(batch *b, int32_t k0, int32_t k1, int32_t n_seqs_block, int prefill,
                           int32_t chunk) {
    const int32_t gbs = b->bp.gbs;
    int32_t n_mb = 0;
    for (int32_t k = k0; k < k1; k++) {
        if (build(b, k, n_seqs_block, prefill, chunk) == 0) continue;
        const int32_t to = k0 + n_mb;
        if (to != k) {
            b->mb[to] = b->mb[k];
            memmove(b->lseq + (size_t)to * gbs, b->lseq + (size_t)k * gbs,
                    (size_t)gbs * sizeof *b->lseq);
        }
        n_mb++;
    }
    return n_mb;
}

/* The engine step over micro-batches k0..k0+n_mb (this process's layers), with the cache
 * model's prediction of the disk pages it reads and its stalls counted by phase. */
static tl_status run_local(batch *b, int32_t k0, int32_t n_mb, int prefill) {
    /* the cache model: every disk page of the step's sequences is read, but for the fixed
     * set the cache holds */
    const tl_kv_params kp = kv_params(b);
    tl_microbatch *mb = b->mb + k0;
    int64_t disk = 0;
    for (int32_t k = 0; k < n_mb; k++)
        for (int32_t j = 0; j < mb[k].n_seqs; j++)
            disk += (int64_t)kp.n_layer *
                    tl_kv_disk_pages(&kp, tl_kv_seq_len(b->kv, mb[k].seqs[j]));
    b->st.kv_predicted_reads += (uint64_t)(disk > kp.cache_pages ? disk - kp.cache_pages : 0);
    tl_residency_stats r0, r1;
    tl_kv_stats k0s, k1s;
    tl_residency_get_stats(b->m->res, &r0);
    tl_kv_get_stats(b->kv, &k0s);
    tl_status st = tl_engine_step(b->m, &b->scratch, b->kv, mb, n_mb);
    tl_residency_get_stats(b->m->res, &r1);
    tl_kv_get_stats(b->kv, &k1s);
    /* stalls: waiting for weights (residency), for KV pages, or for KV writes to finish */
    const double stall = r1.stall_s - r0.stall_s + (k1s.wait_s - k0s.wait_s) +
                         (k1s.write_wait_s - k0s.write_wait_s);
    if (prefill) {
        b->st.prefill_stall_s += stall;
        b->st.prefill_kv_wait_s += k1s.wait_s - k0s.wait_s;
        b->st.prefill_passes += r1.passes - r0.passes;
    } else {
        b->st.decode_stall_s += stall;
        b->st.decode_kv_wait_s += k1s.wait_s - k0s.wait_s;
        b->st.decode_passes += r1.passes - r0.passes;
    }
    return st;
}

/* Samples each sequence that finished its prompt or decoded a row in micro-batches
 * k0..k0+n_mb, from their logits. */
static tl_status sample_range(batch *b, int32_t k0, int32_t n_mb, int prefill) {
    const int32_t gbs = b->bp.gbs;
    tl_status st = TL_OK;
    for (int32_t k = k0; k < k0 + n_mb && !st; k++) {
        b->st.prompt_tokens += prefill ? (uint64_t)b->mb[k].n_rows : 0;
        for (int32_t j = 0; j < b->mb[k].n_logits && !st; j++)
            st = sample(b, &b->ss[b->lseq[(size_t)k * gbs + j]],
                        b->mb[k].logits + (size_t)j * b->m->lm.hp.n_vocab);
    }
    return st;
}

/* Seconds the IO queue had a read in flight so far (0 without a queue). */
static double io_busy_now(const batch *b) {
    if (!b->m->lm.aio) return 0;
    tl_aio_stats as;
    tl_aio_get_stats(b->m->lm.aio, &as);
    return as.read_busy_s;
}

/* Adds a stretch of wall time that began at t0 (and io0, io_busy_now's then) to its phase. */
static void phase_add(batch *b, int prefill, double t0, double io0) {
    const double dt = tl_now() - t0, io = io_busy_now(b) - io0;
    if (prefill) b->st.prefill_s += dt, b->st.prefill_io_busy_s += io;
    else b->st.decode_s += dt, b->st.decode_io_busy_s += io;
}

/* One step over every non-empty micro-batch, then sampling. */
static tl_status step(batch *b, int32_t n_seqs_block, int prefill, int32_t chunk, int *any) {
    const int32_t n_mb = build_range(b, 0, b->bp.num_gb, n_seqs_block, prefill, chunk);
    *any = n_mb > 0;
    if (n_mb == 0) return TL_OK;
    const double t0 = tl_now(), io0 = io_busy_now(b);
    tl_status st = run_local(b, 0, n_mb, prefill);
    if (!st) st = sample_range(b, 0, n_mb, prefill);
    phase_add(b, prefill, t0, io0);
    return st;
}

/* ---- rank 0 of a pipeline (exec/pipeline.h) ----
 * The block's micro-batches are split into waves, as many as the pipeline has ranks (at
 * most num_gb). Each wave goes through its own prefill and decode steps; rank 0 launches
 * a wave's step (its layers, then the hidden states on) and moves to the next wave while
 * the later ranks work on it, and collects the logits of a wave's step just before
 * launching its next one. With as many waves as ranks every rank is busy once the
 * pipeline has filled. */
typedef struct wave {
    int32_t k0, k1;   /* its micro-batches */
    int prefill;      /* 1 prefill, 0 decode */
    int32_t n_mb;     /* micro-batches of the step in flight (0: none) */
    int done;
} wave;

/* Builds and launches wave w's next step; marks it done when it has none. */
static tl_status wave_launch(batch *b, wave *w, int32_t n_seqs_block, int32_t chunk) {
    while (!w->done) {
        w->n_mb = build_range(b, w->k0, w->k1, n_seqs_block, w->prefill,
                              w->prefill ? chunk : 1);
        if (w->n_mb) break;
        if (w->prefill) w->prefill = 0;
        else w->done = 1;
    }
    if (w->done) return TL_OK;
    const double t0 = tl_now(), io0 = io_busy_now(b);
    tl_status st = run_local(b, w->k0, w->n_mb, w->prefill);
    if (!st) st = tl_pipe_forward(b->m->pipe, b->mb + w->k0, w->n_mb);
    phase_add(b, w->prefill, t0, io0);
    return st;
}

/* Collects the logits of wave w's step in flight and samples. */
static tl_status wave_complete(batch *b, wave *w) {
    if (!w->n_mb) return TL_OK;
    const double t0 = tl_now(), io0 = io_busy_now(b);
    tl_status st = tl_pipe_collect(b->m->pipe, b->mb + w->k0, w->n_mb);
    if (!st) st = sample_range(b, w->k0, w->n_mb, w->prefill);
    phase_add(b, w->prefill, t0, io0);
    w->n_mb = 0;
    return st;
}

/* The block's prefill and decode through the pipeline, wave by wave. */
static tl_status pipeline_block(batch *b, int32_t n_seqs_block, int32_t chunk,
                                tl_batch_progress_fn on_progress, void *user, int *stop) {
    wave waves[TL_PIPE_MAX_WAVES];
    const int32_t n_w = tl_batch_pipe_waves(tl_pipe_size(b->m->pipe), b->bp.num_gb);
    for (int32_t i = 0; i < n_w; i++)
        waves[i] = (wave){(int32_t)((int64_t)i * b->bp.num_gb / n_w),
                          (int32_t)((int64_t)(i + 1) * b->bp.num_gb / n_w), 1, 0, 0};
    tl_status st = TL_OK;
    for (int active = 1; active && !st;) {
        active = 0;
        for (int32_t i = 0; i < n_w && !st; i++) {
            st = wave_complete(b, &waves[i]);
            if (!st && !*stop) st = wave_launch(b, &waves[i], n_seqs_block, chunk);
            active |= waves[i].n_mb > 0;
            if (!st && on_progress) {
                fill_io_stats(b);
                *stop = *stop || on_progress(user, &b->st) != 0;
            }
        }
    }
    return st;
}

static void fill_io_stats(batch *b) {
    tl_kv_stats ks;
    tl_residency_stats rs;
    tl_kv_get_stats(b->kv, &ks);
    tl_residency_get_stats(b->m->res, &rs);
    b->st.ssd_bytes_written = b->base_written + ks.bytes_written;
    b->st.kv_bytes_read = b->base_kv_read + ks.bytes_read;
    b->st.kv_pages_read = b->base_pages_read + ks.pages_read;
    b->st.kv_cache_hits = b->base_hits + ks.cache_hits;
    b->st.weight_bytes_read = b->base_weight_read + rs.bytes_read_disk;
    b->st.weight_panel_bytes = rs.panel_bytes;
    b->st.weight_bytes_repacked = b->base_repacked + rs.streamed_panel_bytes;
    b->st.weight_repack_s = b->base_repack_s + rs.repack_s;
    b->st.weight_arrival_repack_s = b->base_arrival_repack_s + rs.arrival_repack_s;
    b->st.elapsed_s = tl_now() - b->t_start;
}

/* Between blocks: a new policy for the rest of the run. Everything the block schedule
 * holds is freed, the weights are placed again under the model's (possibly changed)
 * params, and the state is rebuilt for the new batch params. */
static tl_status replace_policy(batch *b, const tl_batch_params *bp) {
    fill_io_stats(b);
    b->base_written = b->st.ssd_bytes_written;
    b->base_kv_read = b->st.kv_bytes_read;
    b->base_pages_read = b->st.kv_pages_read;
    b->base_hits = b->st.kv_cache_hits;
    b->base_weight_read = b->st.weight_bytes_read;
    b->base_repacked = b->st.weight_bytes_repacked;
    b->base_repack_s = b->st.weight_repack_s;
    b->base_arrival_repack_s = b->st.weight_arrival_repack_s;
    batch_free(b);
    tl_engine_unplace(b->m);
    b->bp = *bp;
    tl_status st = check_params(&b->bp);
    if (!st) st = tl_llama_check_context(&b->m->lm, b->bp.n_ctx);
    if (st) return st;
    align_pages(b->m, &b->bp);
    b->rows_per_mb = b->bp.prefill_rows < b->bp.gbs ? b->bp.gbs : b->bp.prefill_rows;
    return batch_init(b);
}

tl_status tl_batch_check(tl_model *m, const tl_batch_params *bpp) {
    batch b;
    memset(&b, 0, sizeof b);
    b.m = m;
    b.bp = bpp ? *bpp : tl_batch_default_params();
    tl_status st = check_params(&b.bp);
    if (!st) st = tl_llama_check_context(&m->lm, b.bp.n_ctx);
    if (st) return st;
    align_pages(m, &b.bp);
    b.rows_per_mb = b.bp.prefill_rows < b.bp.gbs ? b.bp.gbs : b.bp.prefill_rows;
    const uint64_t need = budget_bytes(&b);
    if (m->res) { /* placed already: the state must fit beside it, as tl_engine_place */
        const uint64_t limit = tl_budget_limit(m->lm.budget), used = tl_budget_used(m->lm.budget);
        if (used > limit || need > limit - used)
            return tl_error_set(TL_ERR_NOMEM, "memory budget of %.1f MiB: this batch needs "
                                "%.1f MiB but only %.1f MiB are free", limit / 1048576.0,
                                need / 1048576.0, (limit - used) / 1048576.0);
        return TL_OK;
    }
    tl_weight_plan plan;
    st = tl_engine_plan_weights(m, need, m->lm.params.prefetch, m->lm.params.overlap,
                                m->lm.params.w_mem_pct, &plan);
    tl_weight_plan_free(&plan);
    return st;
}

/* The params a run opens with: checked, pages aligned, rows per micro-batch. */
static tl_status open_params(batch *b, const tl_batch_params *bpp) {
    b->bp = bpp ? *bpp : tl_batch_default_params();
    tl_status st = check_params(&b->bp);
    if (!st) st = tl_llama_check_context(&b->m->lm, b->bp.n_ctx);
    if (st) return st;
    align_pages(b->m, &b->bp);
    b->rows_per_mb = b->bp.prefill_rows < b->bp.gbs ? b->bp.gbs : b->bp.prefill_rows;
    return TL_OK;
}

tl_pipe_shape tl_batch_pipe_shape(const tl_model *m, const tl_batch_params *bp) {
    batch b;
    memset(&b, 0, sizeof b);
    b.m = (tl_model *)m;
    if (open_params(&b, bp)) return (tl_pipe_shape){0, 0, 0}; /* tl_pipe_open refuses it */
    return (tl_pipe_shape){b.bp.num_gb, b.bp.num_gb * b.rows_per_mb, b.bp.num_gb * b.bp.gbs};
}

tl_status tl_batch_pipeline_work(tl_model *m, const tl_batch_params *bpp, tl_batch_stats *stats) {
    if (!m->pipe) return tl_error_set(TL_ERR_INVALID, "the model is not a pipeline stage");
    batch b;
    memset(&b, 0, sizeof b);
    b.m = m;
    b.t_start = tl_now();
    b.stage_only = 1;
    tl_status st = open_params(&b, bpp);
    if (!st) st = batch_init(&b);
    if (!st) st = tl_pipe_work(m->pipe, &b.scratch, b.kv, b.bp.gbs * b.bp.num_gb);
    if (b.kv) fill_io_stats(&b);
    if (stats) *stats = b.st;
    batch_free(&b);
    return st;
}

tl_status tl_batch_generate(tl_model *m, const tl_batch_params *bpp, const tl_generate_params *gpp,
                            const char *const *prompts, const int32_t *n_predict,
                            int32_t n_prompts, tl_batch_result_fn on_result,
                            tl_batch_progress_fn on_progress, void *user,
                            tl_batch_stats *stats) {
    return tl_batch_generate_ex(m, bpp, gpp, prompts, n_predict, n_prompts, on_result,
                                on_progress, user, NULL, stats);
}

/* Sets up sequence i of the block for prompt `index`. A prompt that cannot run becomes a
 * failed sequence (done, with its message); only real errors are returned. */
static tl_status seq_start(batch *b, seq_state *s, int32_t index, const char *p,
                           const int32_t *n_predict) {
    tl_model *m = b->m;
    seq_free(s);
    s->index = index;
    size_t np = 0;
    tl_status st = tl_tokenize(m, p, strlen(p), b->gp.add_bos, NULL, 0, &np);
    if (st && st != TL_ERR_INVALID) return st; /* INVALID: only the count was asked for */
    if (np == 0 || np >= (size_t)b->bp.n_ctx) {
        s->fail = TL_ERR_CONTEXT;
        snprintf(s->fail_msg, sizeof s->fail_msg, "the prompt is %zu tokens; the context "
                 "holds %d (prompt plus at least one generated token): raise --ctx-size", np,
                 (int)b->bp.n_ctx);
        s->n_prompt = (int32_t)(np < INT32_MAX ? np : INT32_MAX);
        s->done = 1;
        return TL_OK;
    }
    s->prompt = malloc(np * sizeof *s->prompt);
    if (!s->prompt) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    if ((st = tl_tokenize(m, p, strlen(p), b->gp.add_bos, s->prompt, np, &np))) return st;
    s->n_prompt = (int32_t)np;
    int32_t lim = n_predict ? n_predict[index] : b->gp.n_predict;
    s->limit = lim < 0 ? b->bp.n_ctx : lim;
    tl_sampler_params sp = b->gp.sampler;
    sp.seed += (uint64_t)(b->seed_index ? b->seed_index[index] : index);
    if ((st = tl_sampler_init(&s->smp, &sp, (size_t)m->lm.hp.n_vocab))) return st;
    for (int32_t j = 0; j < s->n_prompt; j++) tl_sampler_accept(&s->smp, s->prompt[j]);
    if ((st = tl_kv_seq_open(b->kv, &s->kv_seq))) return st;
    if (s->limit == 0) { /* nothing to generate: the prompt need not run either */
        s->done = 1;
        s->fed = s->n_prompt;
    }
    return TL_OK;
}

/* Reports the block's results in input order: all of them, or (stopping) the complete
 * ones. Returns TL_ERR_CANCELLED when the result callback asks to stop. */
static tl_status report_block(batch *b, int32_t n_blk, int stopping, tl_batch_result_fn on_result,
                              void *user) {
    int32_t last = -1;
    for (int32_t i = 0; i < n_blk; i++)
        if (!stopping || b->ss[i].done) last = i;
    for (int32_t i = 0; i <= last; i++) {
        seq_state *s = &b->ss[i];
        if (stopping && !s->done) continue;
        if (s->text) s->text_len += tl_utf8_stream_flush(&s->utf8, s->text + s->text_len);
        tl_batch_result r = {s->index, s->out, s->n_out, s->n_prompt, s->text ? s->text : "",
                             s->text_len, s->eos, s->fail, s->fail ? s->fail_msg : NULL,
                             i == last};
        b->st.done_prompts++;
        if (s->fail) b->st.failed_prompts++;
        if (on_result && on_result(user, &r))
            return tl_error_set(TL_ERR_CANCELLED, "stopped by the result callback");
    }
    return TL_OK;
}

tl_status tl_batch_generate_ex(tl_model *m, const tl_batch_params *bpp,
                               const tl_generate_params *gpp, const char *const *prompts,
                               const int32_t *n_predict, int32_t n_prompts,
                               tl_batch_result_fn on_result, tl_batch_progress_fn on_progress,
                               void *user, const tl_batch_run *run, tl_batch_stats *stats) {
    batch b;
    memset(&b, 0, sizeof b);
    b.m = m;
    b.bp = bpp ? *bpp : tl_batch_default_params();
    b.gp = gpp ? *gpp : tl_generate_default_params();
    b.t_start = tl_now();
    b.st.total_prompts = n_prompts;
    b.spill_fault = run ? run->spill_fault : NULL;
    b.seed_index = run ? run->seed_index : NULL;
    tl_status st = check_params(&b.bp);
    if (!st) st = tl_llama_check_context(&m->lm, b.bp.n_ctx);
    if (!st) st = tl_sampler_params_check(&b.gp.sampler);
    if (!st && m->pipe && run && run->replan)
        st = tl_error_set(TL_ERR_INVALID, "a pipeline's batch run cannot re-plan: every rank "
                          "holds the same policy");
    if (st) return st;
    align_pages(m, &b.bp);
    b.rows_per_mb = b.bp.prefill_rows < b.bp.gbs ? b.bp.gbs : b.bp.prefill_rows;
    int32_t block = b.bp.gbs * b.bp.num_gb;
    int stop = 0;
    if ((st = batch_init(&b))) goto out;
    for (int32_t first = 0; first < n_prompts && !st && !stop; first += block) {
        if (run && run->replan) { /* before each block: the planner may change the policy */
            tl_batch_params nbp = b.bp;
            fill_io_stats(&b);
            if (run->replan(run->replan_user, m, &b.st, n_prompts - first, &nbp)) {
                b.st.replans++;
                if ((st = replace_policy(&b, &nbp))) break;
                block = b.bp.gbs * b.bp.num_gb;
            }
        }
        int32_t n_blk = n_prompts - first < block ? n_prompts - first : block;
        for (int32_t i = 0; i < n_blk; i++) seq_free(&b.ss[i]);
        for (int32_t i = 0; i < n_blk && !st; i++)
            st = seq_start(&b, &b.ss[i], first + i, prompts[first + i], n_predict);
        int32_t chunk = b.rows_per_mb / b.bp.gbs;
        if (!st && m->pipe) st = pipeline_block(&b, n_blk, chunk, on_progress, user, &stop);
        for (int prefill = 1; prefill >= 0 && !m->pipe; prefill--) { /* prefill, then decode */
            int any = 1;
            while (!st && any && !stop) {
                st = step(&b, n_blk, prefill, prefill ? chunk : 1, &any);
                if (on_progress) {
                    fill_io_stats(&b);
                    stop = on_progress(user, &b.st) != 0;
                }
            }
        }
        if (!st) st = report_block(&b, n_blk, stop, on_result, user);
        for (int32_t i = 0; i < n_blk; i++) {
            if (b.ss[i].kv_seq >= 0) tl_kv_seq_close(b.kv, b.ss[i].kv_seq);
            seq_free(&b.ss[i]);
        }
    }
    if (!st && stop)
        st = tl_error_set(TL_ERR_CANCELLED, "stopped at a step boundary; the complete "
                          "results were reported");
out:
    if (b.kv) fill_io_stats(&b);
    if (stats) *stats = b.st;
    batch_free(&b);
    return st;
}
