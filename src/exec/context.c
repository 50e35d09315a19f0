/* context.c - the public context API: decoding token blocks and generating text.
 *
 * A context owns one sequence's state (KV cache, activations). Prompts longer than
 * n_batch are evaluated in n_batch-sized blocks (matrix-matrix products); generation
 * then decodes one token at a time. A prompt that does not fit in the context is an
 * error before any compute, never a silent truncation.
 */
#include <stdlib.h>
#include <string.h>
#include "tierllm.h"
#include "../base/clock.h"
#include "../base/status.h"
#include "../model/llama.h"
#include "../text/sampler.h"
#include "../tier/aio.h"
#include "residency.h"

struct tl_context {
    tl_model *model;
    tl_llama_state state;
    tl_run_stats stats;            /* counters of this context */
    tl_residency_stats res_base;   /* residency counters at the last stats reset */
    tl_aio_stats aio_base;
};

tl_context_params tl_context_default_params(void) {
    tl_context_params p;
    p.n_ctx = 0;
    p.n_batch = 0;
    return p;
}

/* The first context fixes the placement: what the budget leaves after this context's
 * KV cache and activations decides which weights are resident and which stream. */
static tl_status place_weights(tl_model *m, uint64_t state_bytes) {
    const uint64_t limit = tl_budget_limit(m->budget), used = tl_budget_used(m->budget);
    const tl_model_params *p = &m->params;
    if (m->res) {
        if (used + state_bytes > limit)
            return tl_error_set(TL_ERR_NOMEM, "memory budget of %.1f MiB: another context "
                                "needs %.1f MiB but only %.1f MiB are free", limit / 1048576.0,
                                state_bytes / 1048576.0, (limit - used) / 1048576.0);
        return TL_OK;
    }
    const uint64_t minimum = used + state_bytes + tl_weight_plan_minimum(m, p->prefetch, p->overlap);
    if (minimum > limit)
        return tl_error_set(TL_ERR_NOMEM, "the memory budget of %.1f MiB is too small for "
                            "this model and context: the minimum is %.1f MiB (KV cache and "
                            "activations %.1f MiB, %d streamed-layer buffers and norms %.1f "
                            "MiB); raise --mem-budget or lower --ctx-size/--batch-size",
                            limit / 1048576.0, minimum / 1048576.0, state_bytes / 1048576.0,
                            p->overlap ? p->prefetch + 1 : 1,
                            (minimum - used - state_bytes) / 1048576.0);
    tl_weight_plan plan;
    tl_status st = tl_weight_plan_make(m, limit - used - state_bytes, p->prefetch, p->overlap,
                                       &plan);
    if (!st) st = tl_residency_open(m, &plan, &m->res);
    tl_weight_plan_free(&plan);
    return st;
}

tl_status tl_context_open(tl_model *model, const tl_context_params *params, tl_context **out) {
    *out = NULL;
    tl_context_params p = params ? *params : tl_context_default_params();
    int32_t n_ctx = p.n_ctx > 0 ? p.n_ctx : model->hp.n_ctx_train;
    if (p.n_ctx <= 0 && n_ctx > 4096) n_ctx = 4096;
    int32_t n_batch = p.n_batch > 0 ? p.n_batch : 64;
    if (n_batch > n_ctx) n_batch = n_ctx;
    tl_status st = place_weights(model, tl_llama_state_bytes(model, n_ctx, n_batch));
    if (st) return st;
    tl_context *c = calloc(1, sizeof *c);
    if (!c) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    c->model = model;
    st = tl_llama_state_init(model, n_ctx, n_batch, &c->state);
    if (st) {
        free(c);
        return st;
    }
    tl_context_reset_stats(c);
    *out = c;
    return TL_OK;
}

void tl_context_close(tl_context *c) {
    if (!c) return;
    tl_llama_state_free(c->model, &c->state);
    free(c);
}

void tl_context_reset(tl_context *c) { c->state.n_past = 0; }

void tl_context_reset_stats(tl_context *c) {
    memset(&c->stats, 0, sizeof c->stats);
    tl_residency_get_stats(c->model->res, &c->res_base);
    tl_aio_get_stats(c->model->aio, &c->aio_base);
}

tl_status tl_context_get_stats(const tl_context *c, tl_run_stats *out) {
    const tl_model *m = c->model;
    tl_residency_stats rs;
    tl_aio_stats as;
    tl_residency_get_stats(m->res, &rs);
    tl_aio_get_stats(m->aio, &as);
    *out = c->stats;
    out->stall_s = rs.stall_s - c->res_base.stall_s;
    out->bytes_read_disk = rs.bytes_read_disk - c->res_base.bytes_read_disk;
    out->bytes_read_mem = rs.bytes_read_mem - c->res_base.bytes_read_mem;
    out->io_busy_s = as.read_busy_s - c->aio_base.read_busy_s;
    out->compute_s = out->wall_s - out->stall_s;
    const tl_weight_plan *p = tl_residency_plan(m->res);
    out->budget_bytes = tl_budget_limit(m->budget);
    out->budget_peak_bytes = tl_budget_peak(m->budget);
    out->weights_resident_bytes = p->resident_bytes;
    out->weights_streamed_bytes = p->streamed_bytes;
    out->slots = p->n_slots;
    out->io_uring = tl_aio_uses_uring(m->aio);
    return TL_OK;
}

static tl_status decode(tl_context *c, const int32_t *tokens, size_t n, float *logits,
                        int all) {
    tl_llama_state *s = &c->state;
    if ((size_t)s->n_past + n > (size_t)s->n_ctx)
        return tl_error_set(TL_ERR_CONTEXT, "%zu tokens do not fit in the context: %d of %d "
                            "positions are in use", n, (int)s->n_past, (int)s->n_ctx);
    const size_t vocab = (size_t)c->model->hp.n_vocab;
    for (size_t i = 0; i < n; i += (size_t)s->n_batch) {
        size_t len = n - i < (size_t)s->n_batch ? n - i : (size_t)s->n_batch;
        float *out = NULL;
        if (logits && all) out = logits + i * vocab;
        else if (logits && i + len == n) out = logits;
        double t0 = tl_now();
        tl_status st = tl_llama_forward(c->model, s, tokens + i, len, out, all);
        c->stats.wall_s += tl_now() - t0;
        if (st) return st;
        c->stats.forward_passes++;
        c->stats.tokens += len;
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
    return tl_tokenizer_encode(m->tok, text, len, add_bos, ids, cap, n_out);
}

tl_status tl_token_piece(const tl_model *m, int32_t id, const char **bytes, size_t *len) {
    return tl_tokenizer_piece(m->tok, id, bytes, len);
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
    if (tl_tokenizer_piece(c->model->tok, tok, &bytes, &len) != TL_OK) return 0;
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
    const size_t n_ctx = (size_t)c->state.n_ctx, vocab = (size_t)m->hp.n_vocab;
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
    const int32_t eos = tl_tokenizer_eos(m->tok);
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
        if ((size_t)c->state.n_past >= n_ctx) break; /* context full: stop cleanly */
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
