/* context.c - the public context API: decoding token blocks and generating text.
 *
 * A context owns one sequence's state (KV cache, activations). Prompts longer than
 * n_batch are evaluated in n_batch-sized blocks (matrix-matrix products); generation
 * then decodes one token at a time. A prompt that does not fit in the context is an
 * error before any compute, never a silent truncation.
 *
 * The KV cache is in memory when the whole context fits in the budget beside the weights'
 * minimum; otherwise (or when asked) it lives in tiers by temperature (kv/kv_cache.h): a
 * window of recent positions and the first positions in memory, older pages on disk, read
 * back for attention through a DRAM cache. The weights are placed first with what the KV
 * minimum leaves (weights before KV, as LLM in a Flash orders them); an automatic cache
 * gets what is left once every weight is resident.
 */
#include <stdlib.h>
#include <string.h>
#include "tierllm.h"
#include "base/cache_dir.h"
#include "base/clock.h"
#include "base/status.h"
#include "model/llama.h"
#include "text/sampler.h"
#include "tier/aio.h"
#include "exec/engine.h"
#include "exec/residency.h"
#include "exec/pipeline.h"

struct tl_context {
    tl_model *model;
    tl_kv *kv;                     /* one sequence */
    tl_kv_params kp;               /* its placement */
    int32_t cache_cap;             /* the cache size it opened with */
    uint64_t kv_predicted_reads;   /* disk pages the model predicts the steps read */
    tl_kv_stats kv_base;           /* KV counters at the last stats reset */
    int32_t seq;
    int32_t n_ctx, n_batch;
    tl_llama_scratch scratch;
    float *x;                      /* [n_batch][n_embd] hidden states */
    int32_t *pos, *seqs, *row_idx; /* [n_batch] row positions, sequence ids, 0..n-1 */
    tl_status broken;              /* a failed step leaves the cache inconsistent */
    tl_run_stats stats;            /* counters of this context */
    tl_residency_stats res_base;   /* residency counters at the last stats reset */
    tl_aio_stats aio_base;
};

tl_context_params tl_context_default_params(void) {
    tl_context_params p;
    p.n_ctx = 0;
    p.n_batch = 0;
    p.kv_bits = 32;
    p.kv_window = 0;
    p.kv_sinks = 16;
    p.kv_cache_bytes = -1;
    p.spill_dir = NULL;
    p.kv_select = 0;
    p.kv_select_measure = 0;
    p.kv_recompute = 0;
    return p;
}

enum { KV_PAGE_TOKENS = 16, KV_AUTO_WINDOW = TL_KV_AUTO_WINDOW };

static tl_kv_params kv_params(const tl_model *m, int32_t n_ctx, int32_t n_batch,
                              int32_t bits) {
    tl_kv_params kp;
    memset(&kp, 0, sizeof kp);
    kp.n_layer = tl_llama_stage_layers(&m->lm);
    kp.kv_dim = m->lm.hp.n_head_kv * m->lm.hp.head_dim;
    kp.head_dim = m->lm.hp.head_dim;
    kp.page_tokens = KV_PAGE_TOKENS;
    kp.bits = bits;
    kp.kv_mem_pct = 100;
    kp.max_seqs = 1;
    kp.max_tokens = n_ctx;
    kp.max_block = n_batch; /* positions appended between two commits */
    kp.attn_window = m->lm.hp.n_swa;
    return kp;
}

/* Budget bytes of everything but the KV cache. */
static uint64_t activation_bytes(const tl_model *m, int32_t n_ctx, int32_t n_batch) {
    return tl_llama_scratch_bytes(&m->lm, n_batch, n_ctx, KV_PAGE_TOKENS) +
           (uint64_t)n_batch * (size_t)m->lm.hp.n_embd * sizeof(float) + 64;
}

uint64_t tl_context_budget_bytes(const tl_model *m, int32_t n_ctx, int32_t n_batch) {
    if (n_batch > n_ctx) n_batch = n_ctx;
    const tl_kv_params kp = kv_params(m, n_ctx, n_batch, 32);
    return activation_bytes(m, n_ctx, n_batch) + tl_kv_budget_bytes(&kp, 1);
}

/* Budget bytes of a context's state: activations, page selection, and the KV cache with
 * a layer's disk pages staged twice (the engine reads layer l+1's while l's are used). */
static uint64_t context_state_bytes(const tl_model *m, const tl_context_params *p,
                                    const tl_kv_params *kp, int32_t n_ctx, int32_t n_batch) {
    return activation_bytes(m, n_ctx, n_batch) + tl_kv_budget_bytes(kp, 2) +
           (p->kv_select > 0 ? tl_llama_select_bytes(&m->lm, n_batch, n_ctx, KV_PAGE_TOKENS)
                             : 0);
}

/* Budget bytes free for this context's state: beside a placement, what it left; before
 * one, what the weights' minimum leaves. */
static uint64_t room_for_state(const tl_model *m) {
    const tl_model_params *mp = &m->lm.params;
    const uint64_t limit = tl_budget_limit(m->lm.budget), used = tl_budget_used(m->lm.budget);
    uint64_t floor = m->res ? 0 : tl_weight_plan_minimum(&m->lm, mp->prefetch, mp->overlap);
    return limit > used + floor ? limit - used - floor : 0;
}

static int32_t pages_up(int64_t tokens) {
    return (int32_t)((tokens + KV_PAGE_TOKENS - 1) / KV_PAGE_TOKENS);
}

/* The KV parameters of tiers by temperature: window and sinks in pages, a cache of
 * cache_pages, key bounds when pages are selected. */
static void tiers_kv(tl_kv_params *kp, int32_t window_pages, int32_t sink_pages,
                     int32_t cache_pages, int select, const char *spill_dir) {
    kp->key_bounds = select;
    kp->placement = TL_KV_TEMPERATURE;
    kp->kv_mem_pct = 0;
    kp->window_pages = window_pages;
    kp->sink_pages = sink_pages;
    kp->cache_pages = cache_pages;
    kp->spill_dir = spill_dir;
}

uint64_t tl_context_tiers_budget_bytes(const tl_model *m, int32_t n_ctx, int32_t n_batch,
                                       int32_t bits, int32_t window_pages, int32_t sink_pages,
                                       int32_t cache_pages, int select, int32_t recompute) {
    if (n_batch > n_ctx) n_batch = n_ctx;
    tl_kv_params kp = kv_params(m, n_ctx, n_batch, bits);
    tiers_kv(&kp, window_pages, sink_pages, cache_pages, select, "/");
    tl_kv_set_recompute(&kp, recompute > 0 ? m->lm.hp.n_embd : 0, recompute);
    tl_context_params p = tl_context_default_params();
    p.kv_select = select ? 1.0f : 0.0f;
    return context_state_bytes(m, &p, &kp, n_ctx, n_batch);
}

int64_t tl_context_tiers_disk_pages(const tl_model *m, int32_t n_ctx, int32_t window_pages,
                                    int32_t sink_pages) {
    tl_kv_params kp = kv_params(m, n_ctx, 1, 32);
    tiers_kv(&kp, window_pages, sink_pages, 0, 0, "/");
    return (int64_t)kp.n_layer * tl_kv_disk_pages(&kp, n_ctx);
}

/* The KV placement of a context (see the top of this file). */
static tl_status plan_kv(const tl_model *m, const tl_context_params *p, int32_t n_ctx,
                         int32_t n_batch, tl_kv_params *kp) {
    *kp = kv_params(m, n_ctx, n_batch, p->kv_bits);
    kp->key_bounds = p->kv_select > 0;
    const uint64_t act = activation_bytes(m, n_ctx, n_batch) +
                         (p->kv_select > 0 ? tl_llama_select_bytes(&m->lm, n_batch, n_ctx,
                                                                   KV_PAGE_TOKENS) : 0);
    int32_t window = p->kv_window;
    if (window < 0) return TL_OK;
    if (window == 0) {
        if (act + tl_kv_budget_bytes(kp, 2) <= room_for_state(m)) return TL_OK;
        window = KV_AUTO_WINDOW;
    }
    if (p->kv_recompute < 0 || p->kv_recompute > 256)
        return tl_error_set(TL_ERR_INVALID, "KV tiers: %d layers recomputing (0 to 256)",
                            (int)p->kv_recompute);
    if (p->kv_recompute > 0 && m->lm.flash) /* recompute multiplies Wk, Wv by rows */
        return tl_error_set(TL_ERR_UNSUPPORTED, "KV recompute needs row-major K and V "
                            "matrices; this file is in the flash layout");
    if (p->kv_sinks < 0 || (p->kv_cache_bytes < 0 && p->kv_cache_bytes != -1))
        return tl_error_set(TL_ERR_INVALID, "KV tiers: %d sink positions, a cache of %lld "
                            "bytes", (int)p->kv_sinks, (long long)p->kv_cache_bytes);
    tiers_kv(kp, pages_up(window), pages_up(p->kv_sinks), 0, p->kv_select > 0,
             tl_scratch_dir(p->spill_dir));
    tl_kv_set_recompute(kp, p->kv_recompute > 0 ? m->lm.hp.n_embd : 0, p->kv_recompute);
    const int64_t disk_max = (int64_t)kp->n_layer * tl_kv_disk_pages(kp, n_ctx);
    const uint64_t slot = tl_kv_slot_bytes(kp) + TL_TIER_MAX_ALIGN; /* and its header */
    int64_t cache = 0;
    if (p->kv_cache_bytes >= 0) {
        cache = p->kv_cache_bytes / (int64_t)slot;
    } else { /* what is left once every weight is resident */
        const uint64_t state = act + tl_kv_budget_bytes(kp, 2);
        const uint64_t limit = tl_budget_limit(m->lm.budget), used = tl_budget_used(m->lm.budget);
        uint64_t weights = 0;
        if (!m->res) {
            tl_weight_plan wp;
            tl_status st = tl_weight_plan_make(&m->lm, UINT64_MAX, m->lm.params.prefetch,
                                               m->lm.params.overlap, &wp);
            if (st) return st;
            weights = wp.total_bytes;
            tl_weight_plan_free(&wp);
        }
        if (limit > used + weights + state) cache = (int64_t)((limit - used - weights - state) / slot);
    }
    kp->cache_pages = (int32_t)(cache < disk_max ? cache : disk_max);
    return TL_OK;
}

/* The context length (the model's, at most 4096, unless given) and prompt rows per step. */
static void context_sizes(const tl_model *m, const tl_context_params *p, int32_t *n_ctx,
                          int32_t *n_batch) {
    *n_ctx = p->n_ctx > 0 ? p->n_ctx : m->lm.hp.n_ctx_train;
    if (p->n_ctx <= 0 && *n_ctx > 4096) *n_ctx = 4096;
    *n_batch = p->n_batch > 0 ? p->n_batch : 64;
    if (*n_batch > *n_ctx) *n_batch = *n_ctx;
}

tl_status tl_context_open(tl_model *model, const tl_context_params *params, tl_context **out) {
    *out = NULL;
    tl_context_params p = params ? *params : tl_context_default_params();
    int32_t n_ctx, n_batch;
    context_sizes(model, &p, &n_ctx, &n_batch);
    tl_status cst = tl_llama_check_context(&model->lm, n_ctx);
    if (cst) return cst;
    if (p.kv_bits != 32 && p.kv_bits != 16 && p.kv_bits != 8 && p.kv_bits != 4)
        return tl_error_set(TL_ERR_INVALID, "kv_bits must be 32, 16, 8 or 4 (got %d)",
                            (int)p.kv_bits);
    if (!(p.kv_select >= 0 && p.kv_select <= 1))
        return tl_error_set(TL_ERR_INVALID, "kv_select %g is outside [0, 1]", (double)p.kv_select);
    tl_kv_params kp;
    tl_status st = plan_kv(model, &p, n_ctx, n_batch, &kp);
    if (st) return st;
    const uint64_t x_bytes = (uint64_t)n_batch * (size_t)model->lm.hp.n_embd * sizeof(float) + 64;
    /* the engine reads a layer's disk pages ahead while the previous layer's are in use */
    st = tl_engine_place(model, context_state_bytes(model, &p, &kp, n_ctx, n_batch));
    if (st) return st;
    tl_context *c = calloc(1, sizeof *c);
    if (!c) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    c->model = model;
    c->kp = kp;
    c->cache_cap = kp.cache_pages;
    c->n_ctx = n_ctx;
    c->n_batch = n_batch;
    c->pos = malloc((size_t)n_batch * sizeof *c->pos);
    c->seqs = malloc((size_t)n_batch * sizeof *c->seqs);
    c->row_idx = malloc((size_t)n_batch * sizeof *c->row_idx);
    if (!c->pos || !c->seqs || !c->row_idx) st = tl_error_set(TL_ERR_NOMEM, "out of memory");
    for (int32_t i = 0; !st && i < n_batch; i++) c->row_idx[i] = i;
    if (!st) st = tl_llama_scratch_init(&model->lm, n_batch, n_ctx, kp.page_tokens, &c->scratch);
    if (!st && p.kv_select > 0) {
        tl_kv_select sp;
        sp.page_share = p.kv_select;
        sp.sink_pages = kp.placement == TL_KV_TEMPERATURE ? kp.sink_pages : pages_up(p.kv_sinks);
        sp.window_pages = kp.placement == TL_KV_TEMPERATURE ? kp.window_pages : pages_up(32);
        sp.measure = p.kv_select_measure != 0;
        st = tl_llama_select_init(&model->lm, &c->scratch, &sp);
    }
    if (!st) st = tl_budget_alloc(model->lm.budget, x_bytes - 64, 64, "hidden states", (void **)&c->x);
    if (!st) st = tl_kv_open(&kp, model->lm.budget, model->lm.aio, &c->kv);
    if (!st) st = tl_kv_seq_open(c->kv, &c->seq);
    if (st) {
        tl_context_close(c);
        return st;
    }
    tl_context_reset_stats(c);
    *out = c;
    return TL_OK;
}

tl_pipe_shape tl_context_pipe_shape(const tl_model *m, const tl_context_params *params) {
    const tl_context_params p = params ? *params : tl_context_default_params();
    int32_t n_ctx, n_batch;
    context_sizes(m, &p, &n_ctx, &n_batch);
    return (tl_pipe_shape){1, n_batch, 1};
}

tl_status tl_context_pipeline_work(tl_context *c) {
    if (!c->model->pipe)
        return tl_error_set(TL_ERR_INVALID, "the context's model is not a pipeline stage");
    const double t0 = tl_now();
    tl_kv_seq_close(c->kv, c->seq); /* the pipe opens rank 0's sequence as its own */
    tl_status st = tl_pipe_work(c->model->pipe, &c->scratch, c->kv, 1);
    c->stats.wall_s += tl_now() - t0;
    if (st) c->broken = st;
    else tl_context_reset(c);
    return st;
}

tl_status tl_context_tune_kv(tl_context *c, int32_t cache_pages, float select_share) {
    if (!(select_share >= 0 && select_share <= 1) || (select_share > 0 && !c->scratch.sel_block))
        return tl_error_set(TL_ERR_INVALID, "page selection share %g: the context was opened "
                            "%s selection", (double)select_share,
                            c->scratch.sel_block ? "with" : "without");
    tl_kv_set_cache_pages(c->kv, cache_pages);
    c->kp.cache_pages = cache_pages < c->cache_cap ? cache_pages : c->cache_cap;
    c->scratch.select.page_share = select_share;
    if (select_share == 0) tl_kv_forget_selection(c->kv);
    return TL_OK;
}

tl_status tl_context_select_read_forecast(const tl_context *c, double *ratio) {
    if (!c || !c->kv) return tl_error_set(TL_ERR_INVALID, "read forecast: no context KV cache");
    return tl_kv_select_read_forecast(c->kv, ratio);
}

tl_status tl_context_set_kv_recompute(tl_context *c, int32_t layers) {
    if (layers > 0 && c->model->lm.flash)
        return tl_error_set(TL_ERR_UNSUPPORTED, "KV recompute needs row-major K and V "
                            "matrices; this file is in the flash layout");
    tl_status st = tl_kv_set_recompute_layers(c->kv, layers);
    if (!st) tl_kv_set_recompute(&c->kp, c->kp.input_dim, layers);
    return st;
}

const tl_kv_params *tl_context_kv_params(const tl_context *c) { return &c->kp; }

tl_status tl_context_time_disk_reads(tl_context *c, int depth, double seconds, double *bps) {
    if (!c || !c->kv) return tl_error_set(TL_ERR_INVALID, "timed reads: no context KV cache");
    return tl_kv_time_disk_reads(c->kv, depth, seconds, bps);
}

void tl_context_close(tl_context *c) {
    if (!c) return;
    if (c->kv) tl_kv_close(c->kv);
    tl_llama_scratch_free(&c->model->lm, &c->scratch);
    tl_budget_free(c->model->lm.budget, c->x);
    free(c->pos);
    free(c->seqs);
    free(c->row_idx);
    free(c);
}

void tl_context_reset(tl_context *c) {
    tl_kv_seq_close(c->kv, c->seq);
    c->broken = tl_kv_seq_open(c->kv, &c->seq);
}

void tl_context_reset_stats(tl_context *c) {
    memset(&c->stats, 0, sizeof c->stats);
    c->kv_predicted_reads = 0;
    c->scratch.pages_read = c->scratch.pages_total = 0;
    c->scratch.neurons_used = c->scratch.neurons_total = 0;
    c->scratch.recall_kept = c->scratch.recall_all = 0;
    if (c->scratch.mass_kept)
        memset(c->scratch.mass_kept, 0, 2 * (size_t)tl_pool_threads(c->model->lm.pool) *
                                            sizeof(double));
    tl_kv_get_stats(c->kv, &c->kv_base);
    tl_residency_get_stats(c->model->res, &c->res_base);
    tl_aio_get_stats(c->model->lm.aio, &c->aio_base);
}

tl_status tl_context_get_stats(const tl_context *c, tl_run_stats *out) {
    const tl_model *m = c->model;
    tl_residency_stats rs;
    tl_aio_stats as;
    tl_residency_get_stats(m->res, &rs);
    tl_aio_get_stats(m->lm.aio, &as);
    *out = c->stats;
    out->stall_s = rs.stall_s - c->res_base.stall_s;
    out->bytes_read_disk = rs.bytes_read_disk - c->res_base.bytes_read_disk;
    out->bytes_read_mem = rs.bytes_read_mem - c->res_base.bytes_read_mem;
    out->io_busy_s = as.read_busy_s - c->aio_base.read_busy_s;
    out->compute_s = out->wall_s - out->stall_s;
    const tl_weight_plan *p = tl_residency_plan(m->res);
    out->budget_bytes = tl_budget_limit(m->lm.budget);
    out->budget_peak_bytes = tl_budget_peak(m->lm.budget);
    out->weights_resident_bytes = p->resident_bytes;
    out->weights_streamed_bytes = p->streamed_bytes;
    out->slots = p->n_slots;
    out->weights_panel_bytes = rs.panel_bytes;
    out->weights_repacked_bytes = rs.streamed_panel_bytes - c->res_base.streamed_panel_bytes;
    out->weights_repack_s = rs.repack_s;
    out->weights_arrival_repack_s = rs.arrival_repack_s - c->res_base.arrival_repack_s;
    out->io_uring = tl_aio_uses_uring(m->lm.aio);
    out->flash_bytes_needed = rs.flash_bytes_needed - c->res_base.flash_bytes_needed;
    out->flash_bytes_read = rs.flash_bytes_read - c->res_base.flash_bytes_read;
    out->flash_bytes_dense = rs.flash_bytes_dense - c->res_base.flash_bytes_dense;
    out->flash_reads = rs.flash_reads - c->res_base.flash_reads;
    out->flash_fetch_s = rs.flash_fetch_s - c->res_base.flash_fetch_s;
    out->flash_stall_s = rs.flash_stall_s - c->res_base.flash_stall_s;
    out->neurons_used = c->scratch.neurons_used;
    out->neurons_total = c->scratch.neurons_total;
    out->neuron_window_k = rs.window_k;
    out->neuron_window_slots = rs.window_slots;
    out->neuron_window_lookups = rs.window_lookups - c->res_base.window_lookups;
    out->neuron_window_hits = rs.window_hits - c->res_base.window_hits;
    out->neuron_mass_kept = c->scratch.recall_kept;
    out->neuron_mass_all = c->scratch.recall_all;
    out->kv_select_pages_read = c->scratch.pages_read;
    out->kv_select_pages_total = c->scratch.pages_total;
    for (int t = 0; c->scratch.mass_kept && t < tl_pool_threads(m->lm.pool); t++) {
        out->kv_select_mass_kept += c->scratch.mass_kept[2 * t];
        out->kv_select_heads += c->scratch.mass_kept[2 * t + 1];
    }
    if (c->kp.placement == TL_KV_TEMPERATURE || c->kp.key_bounds) {
        tl_kv_stats ks;
        tl_kv_get_stats(c->kv, &ks);
        out->kv_window_pages = c->kp.window_pages;
        out->kv_sink_pages = c->kp.sink_pages;
        out->kv_cache_pages = c->kp.cache_pages;
        out->kv_page_tokens = c->kp.page_tokens;
        out->kv_bytes_read = ks.bytes_read - c->kv_base.bytes_read;
        out->kv_pages_read = ks.pages_read - c->kv_base.pages_read;
        out->kv_cache_hits = ks.cache_hits - c->kv_base.cache_hits;
        out->kv_predicted_reads = c->kv_predicted_reads;
        out->kv_demand_reads = ks.demand_reads - c->kv_base.demand_reads;
        out->kv_select_disk_pages = ks.select_disk_pages - c->kv_base.select_disk_pages;
        out->kv_heat_needed = ks.heat_needed - c->kv_base.heat_needed;
        out->kv_heat_ready = ks.heat_ready - c->kv_base.heat_ready;
    }
    return TL_OK;
}

static tl_status decode(tl_context *c, const int32_t *tokens, size_t n, float *logits,
                        int all) {
    if (c->broken)
        return tl_error_set(c->broken, "the context failed earlier; reset it before reuse");
    const int32_t past = tl_kv_seq_len(c->kv, c->seq);
    if ((size_t)past + n > (size_t)c->n_ctx)
        return tl_error_set(TL_ERR_CONTEXT, "%zu tokens do not fit in the context: %d of %d "
                            "positions are in use", n, (int)past, (int)c->n_ctx);
    const size_t vocab = (size_t)c->model->lm.hp.n_vocab;
    for (size_t i = 0; i < n; i += (size_t)c->n_batch) {
        int32_t len = (int32_t)(n - i < (size_t)c->n_batch ? n - i : (size_t)c->n_batch);
        int32_t base = tl_kv_seq_len(c->kv, c->seq);
        for (int32_t j = 0; j < len; j++) {
            c->pos[j] = base + j;
            c->seqs[j] = c->seq;
        }
        tl_microbatch mb = {len, tokens + i, {len, c->seqs, c->pos}, c->x, NULL, 0, NULL,
                            &c->seq, 1};
        if (logits && all) { /* every row's logits */
            mb.logit_rows = c->row_idx;
            mb.n_logits = len;
            mb.logits = logits + i * vocab;
        } else if (logits && i + (size_t)len == n) { /* the last row's */
            mb.logit_rows = &c->row_idx[len - 1];
            mb.n_logits = 1;
            mb.logits = logits;
        }
        c->kv_predicted_reads += (uint64_t)tl_kv_predict_step_reads(&c->kp, 1, base);
        double t0 = tl_now();
        tl_status st = tl_engine_step(c->model, &c->scratch, c->kv, &mb, 1);
        if (!st && c->model->pipe) { /* the later stages; chunks without logits overlap */
            st = tl_pipe_forward(c->model->pipe, &mb, 1);
            if (!st && mb.n_logits) st = tl_pipe_collect(c->model->pipe, &mb, 1);
        }
        c->stats.wall_s += tl_now() - t0;
        if (st) {
            c->broken = st;
            return st;
        }
        c->stats.forward_passes++;
        c->stats.tokens += (uint64_t)len;
    }
    return TL_OK;
}

tl_status tl_decode(tl_context *c, const int32_t *tokens, size_t n, float *logits) {
    return decode(c, tokens, n, logits, 0);
}

tl_status tl_decode_all_logits(tl_context *c, const int32_t *tokens, size_t n, float *logits) {
    return decode(c, tokens, n, logits, 1);
}

tl_status tl_tokenize(const tl_model *m, const char *text, size_t len, int add_bos,
                      int32_t *ids, size_t cap, size_t *n_out) {
    return tl_tokenizer_encode(m->lm.tok, text, len, add_bos, ids, cap, n_out);
}

tl_status tl_token_piece(const tl_model *m, int32_t id, const char **bytes, size_t *len) {
    return tl_tokenizer_piece(m->lm.tok, id, bytes, len);
}

tl_generate_params tl_generate_default_params(void) {
    tl_generate_params p;
    p.n_predict = 128;
    p.add_bos = 1;
    p.stop_at_eos = 1;
    p.sampler = tl_sampler_default_params();
    return p;
}

/* Streams one token's bytes through the UTF-8 assembler to the callback. */
static int emit(tl_context *c, tl_utf8_stream *u, int32_t tok, tl_piece_fn fn, void *user) {
    const char *bytes;
    size_t len;
    if (tl_tokenizer_piece(c->model->lm.tok, tok, &bytes, &len) != TL_OK) return 0;
    char stackbuf[256];
    char *buf = len + 8 <= sizeof stackbuf ? stackbuf : malloc(len + 8);
    if (!buf) return 0;
    size_t n = tl_utf8_stream_push(u, bytes, len, buf);
    int stop = n && fn ? fn(user, tok, buf, n) : 0;
    if (buf != stackbuf) free(buf);
    return stop;
}

tl_status tl_generate(tl_context *c, const char *prompt, const tl_generate_params *params,
                      tl_piece_fn on_piece, void *user, tl_generate_stats *stats) {
    tl_generate_params gp = params ? *params : tl_generate_default_params();
    tl_model *m = c->model;
    tl_generate_stats local = {0};
    tl_generate_stats *gs = stats ? stats : &local;
    memset(gs, 0, sizeof *gs);
    tl_context_reset(c);
    if (c->broken) return c->broken;
    const size_t n_ctx = (size_t)c->n_ctx, vocab = (size_t)m->lm.hp.n_vocab;
    const size_t plen = prompt ? strlen(prompt) : 0;

    size_t n_prompt = 0;
    tl_status st = tl_tokenize(m, prompt ? prompt : "", plen, gp.add_bos, NULL, 0, &n_prompt);
    if (st && st != TL_ERR_INVALID) return st;
    if (n_prompt == 0)
        return tl_error_set(TL_ERR_INVALID, "empty prompt and no BOS token to start from");
    if (n_prompt >= n_ctx)
        return tl_error_set(TL_ERR_CONTEXT, "the prompt is %zu tokens but the context holds "
                            "%zu (leaving room for at least one generated token); raise "
                            "--ctx-size or shorten the prompt", n_prompt, n_ctx);
    int32_t *ids = malloc(n_prompt * sizeof *ids);
    float *logits = malloc(vocab * sizeof *logits);
    tl_sampler smp;
    memset(&smp, 0, sizeof smp);
    if (!ids || !logits) {
        st = tl_error_set(TL_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((st = tl_tokenize(m, prompt ? prompt : "", plen, gp.add_bos, ids, n_prompt, &n_prompt)))
        goto done;
    if ((st = tl_sampler_init(&smp, &gp.sampler, vocab))) goto done;
    for (size_t i = 0; i < n_prompt; i++) tl_sampler_accept(&smp, ids[i]);

    double t0 = tl_now();
    if ((st = tl_decode(c, ids, n_prompt, logits))) goto done;
    gs->n_prompt = (int32_t)n_prompt;
    gs->prefill_seconds = tl_now() - t0;

    tl_utf8_stream u = {0};
    const int32_t eos = tl_tokenizer_eos(m->lm.tok);
    size_t limit = gp.n_predict < 0 ? n_ctx - n_prompt : (size_t)gp.n_predict;
    t0 = tl_now();
    for (size_t i = 0; i < limit; i++) {
        int32_t tok = tl_sampler_sample(&smp, logits);
        if (gp.stop_at_eos && tok == eos) {
            gs->finish_eos = 1;
            break;
        }
        tl_sampler_accept(&smp, tok);
        gs->n_generated++;
        if (emit(c, &u, tok, on_piece, user)) {
            st = TL_ERR_CANCELLED;
            break;
        }
        if (i + 1 == limit) break;
        if ((size_t)tl_kv_seq_len(c->kv, c->seq) >= n_ctx) break; /* context full: stop */
        if ((st = tl_decode(c, &tok, 1, logits))) break;
        gs->n_decoded++;
    }
    gs->decode_seconds = tl_now() - t0;
    char tail[8];
    size_t nt = tl_utf8_stream_flush(&u, tail);
    if (nt && on_piece && st == TL_OK) on_piece(user, -1, tail, nt);
    if (st == TL_ERR_CANCELLED) st = TL_OK; /* the caller asked to stop */
done:
    tl_sampler_free(&smp);
    free(ids);
    free(logits);
    return st;
}
