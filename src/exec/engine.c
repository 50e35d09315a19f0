/* engine.c - see engine.h. Loop order of one step (block schedule):
 *   embed every micro-batch
 *   for each layer l:   acquire weights of l (prefetched by the residency ring)
 *       for each micro-batch k:   read-ahead KV pages of k+1 at l (or of 0 at l+1)
 *                                 wait for k's pages at l; compute l for k; release them
 *       release weights of l      (its slot is refilled with layer l+prefetch+1)
 *   commit each micro-batch's new K/V (full disk-homed pages are written asynchronously)
 *   output: acquire the output weights; logits of every micro-batch
 * Weights are queued before KV (the residency ring issues its reads first), as LLM in a
 * Flash loads weights before KV.
 */
#include <string.h>
#include "exec/engine.h"
#include "exec/residency.h"
#include "base/budget.h"
#include "base/status.h"

uint64_t tl_engine_base_used(const tl_model *m) {
    return m->res ? m->used_before_place : tl_budget_used(m->lm.budget);
}

tl_status tl_engine_plan_weights(const tl_model *m, uint64_t state_bytes, int prefetch,
                                 int overlap, int w_mem_pct, tl_weight_plan *plan) {
    const uint64_t limit = tl_budget_limit(m->lm.budget), used = tl_engine_base_used(m);
    const uint64_t floor = tl_weight_plan_minimum(&m->lm, prefetch, overlap);
    memset(plan, 0, sizeof *plan);
    if (used > limit || floor > limit - used || state_bytes > limit - used - floor)
        return tl_error_set(TL_ERR_NOMEM, "the memory budget of %.1f MiB is too small for "
                            "this model and context: the minimum is %.1f MiB (KV cache and "
                            "activations %.1f MiB, %d streamed-layer buffers and norms %.1f "
                            "MiB); raise --mem-budget or lower --ctx-size/--batch-size",
                            limit / 1048576.0, tl_mib_up(used + state_bytes + floor),
                            tl_mib_up(state_bytes), overlap ? prefetch + 1 : 1,
                            tl_mib_up(floor));
    /* --w-mem caps the resident share of the weights (a policy knob, FlexGen's wg) */
    uint64_t for_weights = limit - used - state_bytes;
    if (w_mem_pct < 100) {
        uint64_t cap = floor + m->lm.weight_bytes / 100 * (uint64_t)(w_mem_pct < 0 ? 0 : w_mem_pct);
        if (cap < for_weights) for_weights = cap;
    }
    return tl_weight_plan_make(&m->lm, for_weights, prefetch, overlap, plan);
}

tl_status tl_engine_place(tl_model *m, uint64_t state_bytes) {
    const uint64_t limit = tl_budget_limit(m->lm.budget), used = tl_budget_used(m->lm.budget);
    const tl_model_params *p = &m->lm.params;
    if (m->res) {
        if (used + state_bytes > limit)
            return tl_error_set(TL_ERR_NOMEM, "memory budget of %.1f MiB: this context needs "
                                "%.1f MiB but only %.1f MiB are free", limit / 1048576.0,
                                tl_mib_up(state_bytes), (limit - used) / 1048576.0);
        return TL_OK;
    }
    tl_weight_plan plan;
    m->used_before_place = used;
    tl_status st = tl_engine_plan_weights(m, state_bytes, p->prefetch, p->overlap,
                                          p->w_mem_pct, &plan);
    if (!st) st = tl_residency_open(&m->lm, &plan, &m->res);
    tl_weight_plan_free(&plan);
    return st;
}

void tl_engine_unplace(tl_model *m) {
    if (m->res) tl_residency_close(m->res);
    m->res = NULL;
}

/* x[i] = the embedding of tokens[i], from the resident matrix or small reads. */
static tl_status embed(tl_model *m, const int32_t *tokens, int32_t n, float *x) {
    return tl_residency_embeddings(m->res, tokens, n, x);
}

tl_status tl_engine_step(tl_model *m, tl_llama_scratch *s, tl_kv *kv, tl_microbatch *mb,
                         int32_t num_gb) {
    const int32_t L = m->lm.hp.n_layer, first = m->lm.stage_first, end = m->lm.stage_end;
    if ((first > 0 || end < L) && !m->pipe)
        return tl_error_set(TL_ERR_INVALID, "the model holds layers %d..%d of %d, a pipeline "
                            "stage, but has no pipeline to pass its rows on", (int)first,
                            (int)end - 1, (int)L);
    int need_output = 0;
    for (int32_t k = 0; k < num_gb && end == L; k++) need_output |= mb[k].n_logits > 0;
    tl_residency *r = m->res;
    tl_status st = tl_residency_begin_pass(r, need_output);
    for (int32_t k = 0; k < num_gb && !st && first == 0; k++) { /* later stages get x */
        st = embed(m, mb[k].tokens, mb[k].n_rows, mb[k].x);
        if (!st) st = tl_llama_add_positions(&m->lm, &mb[k].rows, mb[k].x);
    }
    /* KV layer kl of this stage is model layer first + kl */
    if (!st) st = tl_kv_prefetch(kv, mb[0].seqs, mb[0].n_seqs, 0);
    for (int32_t l = first; l < end && !st; l++) {
        const int32_t kl = l - first;
        if ((st = tl_residency_acquire(r, l))) break;
        for (int32_t k = 0; k < num_gb && !st; k++) {
            /* read ahead: the next micro-batch at this layer, or the first at the next */
            if (k + 1 < num_gb) st = tl_kv_prefetch(kv, mb[k + 1].seqs, mb[k + 1].n_seqs, kl);
            else if (l + 1 < end) st = tl_kv_prefetch(kv, mb[0].seqs, mb[0].n_seqs, kl + 1);
            if (!st) st = tl_kv_wait(kv, mb[k].seqs, mb[k].n_seqs, kl);
            if (!st) st = tl_llama_layer_forward(&m->lm, s, kv, l, &mb[k].rows, mb[k].x);
            tl_kv_release(kv, mb[k].seqs, mb[k].n_seqs, kl);
        }
        tl_residency_release(r, l);
    }
    for (int32_t k = 0; k < num_gb && !st; k++)
        for (int32_t i = 0, e; i < mb[k].rows.n && !st; i = e) { /* commit each run */
            e = tl_llama_rows_run_end(&mb[k].rows, i);
            st = tl_kv_seq_commit(kv, mb[k].rows.seq[i], e - i);
        }
    if (!st && need_output) {
        if (!(st = tl_residency_acquire(r, L))) {
            const size_t vocab = (size_t)m->lm.hp.n_vocab;
            for (int32_t k = 0; k < num_gb; k++)
                for (int32_t i = 0; i < mb[k].n_logits; i += s->max_rows) {
                    int32_t n = mb[k].n_logits - i < s->max_rows ? mb[k].n_logits - i : s->max_rows;
                    tl_llama_logits(&m->lm, s, mb[k].x, mb[k].logit_rows + i, n,
                                    mb[k].logits + (size_t)i * vocab);
                }
            tl_residency_release(r, L);
        }
    }
    return st;
}
