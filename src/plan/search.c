/* search.c - see search.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "plan/search.h"
#include "plan/lp.h"
#include "base/budget.h"
#include "base/status.h"
#include "exec/engine.h"
#include "kv/kv_cache.h"

void tl_plan_batch_params(const tl_policy *pol, tl_batch_params *bp) {
    bp->gbs = pol->gbs;
    bp->num_gb = pol->num_gb;
    bp->n_ctx = pol->n_ctx;
    bp->prefill_rows = pol->prefill_rows;
    bp->kv_bits = pol->kv_bits;
    bp->kv_mem_pct = pol->kv_mem_pct;
    bp->page_tokens = pol->page_tokens;
}

static tl_batch_params batch_params_of(const tl_policy *pol) {
    tl_batch_params bp = tl_batch_default_params();
    tl_plan_batch_params(pol, &bp);
    return bp;
}

uint64_t tl_plan_state_bytes(const tl_model *m, const tl_policy *pol) {
    if (pol->single && pol->kv_window_pages > 0)
        return tl_context_tiers_budget_bytes(m, pol->n_ctx, pol->prefill_rows, pol->kv_bits,
                                             pol->kv_window_pages, pol->kv_sink_pages,
                                             pol->kv_cache_pages, pol->kv_select > 0,
                                             pol->kv_recompute);
    if (pol->single) return tl_context_budget_bytes(m, pol->n_ctx, pol->prefill_rows);
    tl_batch_params bp = batch_params_of(pol);
    return tl_batch_budget_bytes(m, &bp);
}

int tl_plan_spills_kv(const tl_policy *pol) {
    return pol->kv_window_pages > 0 || (!pol->single && pol->kv_mem_pct < 100);
}

tl_policy tl_plan_default_policy(const tl_model *m, const tl_plan_request *rq) {
    tl_policy p;
    memset(&p, 0, sizeof p);
    tl_batch_params bp = tl_batch_default_params();
    p.single = rq->single;
    p.gbs = rq->single ? 1 : bp.gbs;
    p.num_gb = rq->single ? 1 : bp.num_gb;
    p.prefill_rows = rq->single ? 64 : bp.prefill_rows;
    p.w_mem_pct = 100;
    p.kv_mem_pct = 100;
    p.kv_bits = rq->kv_bits ? rq->kv_bits : 32;
    p.page_tokens = rq->page_tokens ? rq->page_tokens : 16;
    p.prefetch = m->lm.params.prefetch;
    p.overlap = rq->overlap;
    p.n_ctx = rq->n_ctx ? rq->n_ctx : tl_workload_prompt_max(&rq->w) + rq->w.gen_len;
    return p;
}

/* A context of n_ctx tokens per sequence holds the workload's longest prompt priced and
 * its generation, or a clear error. */
static tl_status context_holds(const tl_workload *w, int32_t n_ctx) {
    const int32_t longest = tl_workload_prompt_max(w);
    if (n_ctx >= longest + w->gen_len) return TL_OK;
    return tl_error_set(TL_ERR_CONTEXT, "a context of %d tokens cannot hold a %d-token prompt "
                        "and %d generated tokens", (int)n_ctx, (int)longest, (int)w->gen_len);
}

tl_status tl_plan_evaluate(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                           const tl_policy *pol_in, tl_plan_result *out) {
    memset(out, 0, sizeof *out);
    tl_policy pol = *pol_in;
    if (!pol.single) { /* spilled pages are rounded as tl_batch_generate rounds them */
        tl_batch_params bp = batch_params_of(&pol);
        pol.page_tokens = tl_batch_page_tokens(m, &bp);
    }
    tl_status hst = context_holds(w, pol.n_ctx);
    if (hst) return hst;
    tl_status cst = tl_llama_check_context(&m->lm, pol.n_ctx);
    if (cst) return cst;
    const tl_llama_hparams *hp = &m->lm.hp;
    if ((pol.kv_recompute > 0 || pol.kv_inputs) && m->lm.flash)
        return tl_error_set(TL_ERR_UNSUPPORTED, "policy: recomputing K and V needs row-major "
                            "matrices; this file is in the flash layout");
    if ((pol.kv_recompute > 0 || pol.kv_inputs) &&
        !tl_kv_recompute_fits(pol.kv_bits, hp->n_embd, hp->n_head_kv * hp->head_dim))
        return tl_error_set(TL_ERR_INVALID, "policy: recomputing K and V needs 32-bit KV and "
                            "input rows (%d) no wider than K and V together (%d)",
                            (int)hp->n_embd, (int)(2 * hp->n_head_kv * hp->head_dim));
    const uint64_t state = tl_plan_state_bytes(m, &pol);
    if (state == UINT64_MAX)
        return tl_error_set(TL_ERR_INVALID, "policy: the KV cache parameters are invalid");
    tl_weight_plan plan;
    tl_status st = tl_engine_plan_weights(m, state, pol.prefetch, pol.overlap, pol.w_mem_pct, &plan);
    if (st) return st;
    out->policy = pol;
    out->budget_bytes = tl_budget_limit(m->lm.budget);
    out->mem_bytes = tl_engine_base_used(m) + state + tl_weight_plan_bytes(&m->lm, &plan);
    out->streamed_bytes = plan.streamed_bytes;
    out->resident_bytes = plan.resident_bytes;
    if (out->mem_bytes > out->budget_bytes) /* cannot happen: plan_weights checked it */
        st = tl_error_set(TL_ERR_NOMEM, "dry run: %.1f MiB exceed the budget",
                          out->mem_bytes / 1048576.0);
    if (!st) st = tl_cost_predict(m, prof, w, &pol, &plan, &out->cost);
    tl_weight_plan_free(&plan);
    return st;
}

/* ---- the LP of one combination ---- */

typedef struct lp_builder {
    tl_plan_lp *lp;
    int32_t cap;
    tl_status st;
} lp_builder;

static void lp_pass(void *user, const tl_cost_pass *p) {
    lp_builder *b = user;
    tl_plan_lp *lp = b->lp;
    if (b->st) return;
    if (lp->n == b->cap) {
        int32_t cap = b->cap ? 2 * b->cap : 64;
        double *c = realloc(lp->count, (size_t)cap * sizeof *c);
        if (c) lp->count = c;
        double *d = realloc(lp->compute, (size_t)cap * sizeof *d);
        if (d) lp->compute = d;
        double *e = realloc(lp->wread, (size_t)cap * sizeof *e);
        if (e) lp->wread = e;
        double *f = realloc(lp->kv, (size_t)cap * sizeof *f);
        if (f) lp->kv = f;
        double *g = realloc(lp->slow, (size_t)cap * sizeof *g);
        if (g) lp->slow = g;
        double *h = realloc(lp->kvwait, (size_t)cap * sizeof *h);
        if (h) lp->kvwait = h;
        double *fw = realloc(lp->fwait, (size_t)cap * sizeof *fw);
        if (fw) lp->fwait = fw;
        if (!c || !d || !e || !f || !g || !h || !fw) {
            b->st = tl_error_set(TL_ERR_NOMEM, "out of memory");
            return;
        }
        b->cap = cap;
    }
    /* totals over the class's identical passes */
    lp->count[lp->n] = p->count;
    lp->compute[lp->n] = p->count * p->compute_s;
    lp->wread[lp->n] = p->count * p->weight_bytes / p->weight_bps;
    lp->kv[lp->n] = p->count * (p->kv_read_bytes / p->kv_read_bps +
                                p->kv_write_bytes / p->kv_write_bps);
    lp->slow[lp->n] = p->io_slowdown > 1 ? p->io_slowdown : 1;
    lp->kvwait[lp->n] = p->count * p->kv_wait_s; /* serial, as the flash wait */
    lp->fwait[lp->n] = p->count * p->flash_wait_s;
    lp->n++;
}

void tl_plan_lp_free(tl_plan_lp *lp) {
    free(lp->count);
    free(lp->compute);
    free(lp->wread);
    free(lp->kv);
    free(lp->slow);
    free(lp->kvwait);
    free(lp->fwait);
    memset(lp, 0, sizeof *lp);
}

tl_status tl_plan_lp_build(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                           const tl_policy *pol_in, tl_plan_lp *lp) {
    memset(lp, 0, sizeof *lp);
    tl_policy pol = *pol_in;
    lp->overlap = pol.overlap;
    lp->kv_free = !pol.single;
    /* the two ends of each continuous knob, through the engine's own accounting */
    tl_policy kv_disk = pol, kv_mem = pol;
    kv_disk.kv_mem_pct = lp->kv_free ? 0 : 100;
    kv_mem.kv_mem_pct = 100;
    if (!pol.single) {
        tl_batch_params bp = batch_params_of(&kv_disk);
        kv_disk.page_tokens = kv_mem.page_tokens = tl_batch_page_tokens(m, &bp);
    }
    const uint64_t s0 = tl_plan_state_bytes(m, &kv_disk), s1 = tl_plan_state_bytes(m, &kv_mem);
    if (s0 == UINT64_MAX || s1 == UINT64_MAX)
        return tl_error_set(TL_ERR_INVALID, "policy: the KV cache parameters are invalid");
    tl_weight_plan none, all;
    const uint64_t floor = tl_weight_plan_minimum(&m->lm, pol.prefetch, pol.overlap);
    tl_status st = tl_weight_plan_make(&m->lm, floor, pol.prefetch, pol.overlap, &none);
    if (st) return st;
    if ((st = tl_weight_plan_make(&m->lm, UINT64_MAX / 2, pol.prefetch, pol.overlap, &all))) {
        tl_weight_plan_free(&none);
        return st;
    }
    lp->base = (double)tl_engine_base_used(m) + (double)s0 + (double)floor;
    lp->r_w = (double)all.total_bytes - (double)floor;
    lp->r_k = lp->kv_free ? (double)s1 - (double)s0 : 0;
    lp->budget = (double)tl_budget_limit(m->lm.budget);
    lp_builder b = {lp, 0, TL_OK};
    st = tl_cost_walk(m, prof, w, &kv_disk, &none, lp_pass, &b);
    if (!st) st = b.st;
    tl_weight_plan_free(&none);
    tl_weight_plan_free(&all);
    if (st) tl_plan_lp_free(lp);
    return st;
}

double tl_plan_lp_eval(const tl_plan_lp *lp, double x_w, double x_k) {
    if (!lp->kv_free) x_k = 1;
    if (lp->base + x_w * lp->r_w + x_k * lp->r_k > lp->budget * (1 + 1e-12)) return HUGE_VAL;
    double t = 0;
    for (int32_t i = 0; i < lp->n; i++) {
        double io = (1 - x_w) * lp->wread[i] + (1 - x_k) * lp->kv[i];
        double wait = (1 - x_k) * lp->kvwait[i] + (1 - x_w) * lp->fwait[i];
        double c = lp->compute[i] + wait + (lp->slow[i] - 1) * io;
        t += lp->overlap ? (c > io ? c : io) : lp->compute[i] + wait + io;
    }
    return t;
}

tl_status tl_plan_lp_solve(const tl_plan_lp *plp, double *x_w, double *x_k, double *objective) {
    tl_lp *lp;
    const int n = plp->n;
    tl_status st = tl_lp_new(2 + n, &lp);
    if (st) return st;
    /* times are in seconds; scale the memory row to GiB so the LP is well conditioned */
    const double gib = 1073741824.0;
    tl_lp_set_col(lp, 0, 0, 1, 0);
    tl_lp_set_col(lp, 1, plp->kv_free ? 0 : 1, 1, 0);
    for (int i = 0; i < n && !st; i++) {
        const int idx[3] = {2 + i, 0, 1};
        const double val[3] = {1, plp->wread[i], plp->kv[i]};
        const double wait = plp->kvwait[i], fw = plp->fwait[i];
        if (plp->overlap) {
            /* t >= IO and t >= C + W (1 - x_k) + F (1 - x_w) + (s - 1) IO, W the KV wait,
             * F the flash reads' */
            const double s1 = plp->slow[i] - 1;
            const double val2[3] = {1, s1 * plp->wread[i] + fw, s1 * plp->kv[i] + wait};
            tl_lp_set_col(lp, 2 + i, plp->compute[i], TL_LP_INF, 1);
            st = tl_lp_add_row(lp, 3, idx, val, plp->wread[i] + plp->kv[i], TL_LP_INF);
            if (!st && (s1 > 0 || wait > 0 || fw > 0))
                st = tl_lp_add_row(lp, 3, idx, val2,
                                   plp->compute[i] + wait + fw +
                                       s1 * (plp->wread[i] + plp->kv[i]),
                                   TL_LP_INF);
        } else {
            const double val3[3] = {1, plp->wread[i] + fw, plp->kv[i] + wait};
            tl_lp_set_col(lp, 2 + i, 0, TL_LP_INF, 1);
            st = tl_lp_add_row(lp, 3, idx, val3,
                               plp->compute[i] + wait + fw + plp->wread[i] + plp->kv[i],
                               TL_LP_INF);
        }
    }
    const int midx[2] = {0, 1};
    const double mval[2] = {plp->r_w / gib, plp->r_k / gib};
    const double room = (plp->budget - plp->base) / gib;
    if (!st && room < 0)
        st = tl_error_set(TL_ERR_NOMEM, "lp: the fixed part of the plan (%.1f MiB) exceeds "
                          "the budget (%.1f MiB)", tl_mib_up((uint64_t)plp->base),
                          plp->budget / 1048576.0);
    if (!st) st = tl_lp_add_row(lp, 2, midx, mval, -TL_LP_INF, room);
    double *x = st ? NULL : malloc((size_t)(2 + n) * sizeof *x);
    if (!st && !x) st = tl_error_set(TL_ERR_NOMEM, "out of memory");
    if (!st) st = tl_lp_solve(lp, x, objective);
    if (!st) {
        *x_w = x[0] < 0 ? 0 : x[0] > 1 ? 1 : x[0];
        *x_k = x[1] < 0 ? 0 : x[1] > 1 ? 1 : x[1];
    }
    free(x);
    tl_lp_free(lp);
    return st;
}

/* ---- the search ---- */

/* Pages that fit, at most `cap`. */
static double floor_pages(double fit, int64_t cap) {
    fit = floor(fit);
    return fit < (double)cap ? fit : (double)cap;
}

static int better(const tl_plan_result *a, const tl_plan_result *b) {
    return a->cost.total_s < b->cost.total_s * (1 - 1e-9);
}

/* The candidates so far, best first by key: the prediction, raised by the recompute margin
 * where a policy recomputes K and V (search.h). A policy offered twice is kept once. */
typedef struct ranking {
    tl_plan_result r[TL_PLAN_RANKED];
    double key[TL_PLAN_RANKED];
    int n;
} ranking;

static double rank_key(const tl_plan_result *r) {
    return r->cost.total_s * (r->policy.kv_recompute > 0 ? 1 + TL_PLAN_RECOMPUTE_MARGIN : 1);
}

static void offer(ranking *rk, const tl_plan_result *r) {
    for (int i = 0; i < rk->n; i++)
        if (!memcmp(&rk->r[i].policy, &r->policy, sizeof r->policy)) return;
    const double key = rank_key(r);
    int at = rk->n;
    while (at > 0 && key < rk->key[at - 1] * (1 - 1e-9)) at--; /* ties: the first offered */
    if (at >= TL_PLAN_RANKED) return;
    const int keep = rk->n < TL_PLAN_RANKED ? rk->n : TL_PLAN_RANKED - 1;
    memmove(&rk->r[at + 1], &rk->r[at], (size_t)(keep - at) * sizeof rk->r[0]);
    memmove(&rk->key[at + 1], &rk->key[at], (size_t)(keep - at) * sizeof rk->key[0]);
    rk->r[at] = *r;
    rk->key[at] = key;
    rk->n = keep + 1;
}

/* LP, then exact dry runs and predictions around its KV fraction; the best of them is
 * offered. */
static void try_combination(const tl_model *m, const tl_hw_profile *prof,
                            const tl_workload *w, tl_policy pol, ranking *rk,
                            int32_t *lp_solves, int32_t *feasible) {
    tl_plan_lp lp;
    if (tl_plan_lp_build(m, prof, w, &pol, &lp)) return;
    double x_w = 1, x_k = 1, obj = 0;
    tl_status st = tl_plan_lp_solve(&lp, &x_w, &x_k, &obj);
    tl_plan_lp_free(&lp);
    (*lp_solves)++;
    if (st) return;
    /* weights take whatever the budget leaves (w_mem 100): in the LP's optimum either the
     * memory row binds or x_w = 1, so this is the LP's x_w given the KV choice */
    pol.w_mem_pct = 100;
    int32_t pct = pol.single ? 100 : (int32_t)floor(x_k * 100 + 1e-9);
    int tried = 0, have = 0;
    tl_plan_result best;
    memset(&best, 0, sizeof best);
    for (int32_t p = pct; p >= 0 && tried < 12; p -= p > pct - 5 ? 1 : 5, tried++) {
        pol.kv_mem_pct = p;
        tl_plan_result r;
        if (tl_plan_evaluate(m, prof, w, &pol, &r)) {
            if (pol.single) break;
            continue; /* does not fit: less KV in memory */
        }
        (*feasible)++;
        r.lp_objective = obj;
        r.lp_xw = x_w;
        r.lp_xk = x_k;
        if (!have || better(&r, &best)) {
            best = r;
            have = 1;
        }
        if (pol.single || p < pct - 2) break;
    }
    if (have) offer(rk, &best);
}

tl_status tl_plan_place(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                        const tl_policy *pol, tl_plan_result *out) {
    ranking rk;
    rk.n = 0;
    int32_t solves = 0, feasible = 0;
    memset(out, 0, sizeof *out);
    try_combination(m, prof, w, *pol, &rk, &solves, &feasible);
    if (rk.n) *out = rk.r[0];
    /* the LP's fraction is a guide; the dry runs near it may all miss when the LP's memory
     * row is looser than the exact plan: then every 5% from all KV in memory to none */
    tl_status last = TL_OK;
    int have = rk.n > 0;
    for (int32_t p = 100; !have && p >= 0; p -= 5) {
        tl_policy q = *pol;
        q.w_mem_pct = 100;
        q.kv_mem_pct = p;
        last = tl_plan_evaluate(m, prof, w, &q, out);
        if (last == TL_OK) have = 1, feasible++;
    }
    if (!have) /* the dry run with no KV in memory says what is short */
        return tl_error_wrap(last, "no KV placement of gbs %d x num_gb %d (%d-bit KV, %d "
                             "prompt rows) fits the memory budget of %.1f MiB", (int)pol->gbs,
                             (int)pol->num_gb, (int)pol->kv_bits, (int)pol->prefill_rows,
                             tl_budget_limit(m->lm.budget) / 1048576.0);
    tl_error_clear(); /* dry runs that did not fit left their messages */
    out->combinations = 1;
    out->lp_solves = solves;
    out->feasible = feasible;
    return TL_OK;
}

/* The latency regime when no policy keeps the KV cache in memory: KV in tiers, the
 * engine's automatic window and sinks in memory, the rest on disk read through a DRAM
 * cache. The budget left beside the KV minimum goes to resident weights and to that
 * cache; under exact attention a byte of either saves one byte read per token, but
 * weights are also read by every prefill pass and a cached page serves only decode, so
 * the split is searched by direct evaluation: cache sizes from none to every page the
 * budget can hold once the weights are at their minimum. With each, the number of
 * layers that recompute K and V from input rows instead of reading them: the layers are
 * alike, so a count decides it, from the bytes saved against the products' time; a count
 * above 0 is taken only when predicted faster than loading by TL_PLAN_RECOMPUTE_MARGIN. */
static void try_tiers(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                      const tl_policy *base, ranking *rk, int32_t *combos, int32_t *feasible) {
    const int32_t pt = 16;
    tl_context_params cp = tl_context_default_params();
    tl_policy pol = *base;
    pol.page_tokens = pt;
    pol.kv_window_pages = (TL_KV_AUTO_WINDOW + pt - 1) / pt;
    pol.kv_sink_pages = (cp.kv_sinks + pt - 1) / pt;
    pol.kv_mem_pct = 0;
    pol.w_mem_pct = 100;
    const int64_t disk = tl_context_tiers_disk_pages(m, pol.n_ctx, pol.kv_window_pages,
                                                     pol.kv_sink_pages);
    const double slot = ceil(tl_cost_kv_page_bytes(m, pol.kv_bits, pt) / TL_TIER_MAX_ALIGN) *
                            TL_TIER_MAX_ALIGN + TL_TIER_MAX_ALIGN;
    const int32_t nb[5] = {16, 32, 64, 128, 256}, longest = tl_workload_prompt_max(w);
    for (int32_t pf = 1; pf <= (base->overlap ? 2 : 1); pf++)
        for (int i = 0; i < 5; i++) {
            if (i > 0 && nb[i - 1] >= longest) break;
            pol.prefetch = base->overlap ? pf : 0;
            pol.prefill_rows = nb[i] < pol.n_ctx ? nb[i] : pol.n_ctx;
            pol.kv_cache_pages = 0;
            pol.kv_recompute = pol.kv_inputs = 0;
            const uint64_t state0 = tl_plan_state_bytes(m, &pol);
            const double floor = (double)tl_weight_plan_minimum(&m->lm, pol.prefetch, pol.overlap);
            double room = (double)tl_budget_limit(m->lm.budget) - (double)tl_engine_base_used(m) -
                          (double)state0 - floor;
            double most = room > 0 ? floor_pages(room / slot, disk) : 0;
            static const double share[7] = {0, 0.125, 0.25, 0.5, 0.75, 0.9, 1};
            for (int k = 0; k < 7; k++) {
                if (k > 0 && most <= 0) break;
                pol.kv_cache_pages = (int32_t)(most * share[k]);
                /* layers that recompute K and V instead of reading them (32-bit KV): a
                 * recomputing page reads its input rows and costs two products */
                const int32_t L = m->lm.hp.n_layer;
                const int32_t rc[6] = {0, 1, L / 4, L / 2, 3 * L / 4, L};
                const int n_rc = pol.kv_bits == 32 && !m->lm.flash ? 6 : 1;
                for (int r = 0; r < n_rc; r++) {
                    if (r > 0 && rc[r] <= rc[r - 1]) continue;
                    pol.kv_recompute = rc[r];
                    pol.kv_inputs = rc[r] > 0;
                    (*combos)++;
                    tl_plan_result res;
                    if (tl_plan_evaluate(m, prof, w, &pol, &res)) continue;
                    (*feasible)++;
                    offer(rk, &res); /* recompute ranked with its margin (rank_key) */
                }
            }
        }
}

/* A candidate's prediction with every disk transfer slower by the error spread (reads,
 * urgent page reads, writes), or every compute figure slower by it: the larger (HUGE_VAL
 * if either evaluation fails), ranked as the key is (the recompute margin added). */
static double worst_case_s(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                           const tl_policy *pol) {
    const double f = 1 + TL_PLAN_ERROR_SPREAD;
    tl_hw_profile slow = *prof;
    tl_profile_scale_disk(&slow, f);
    slow.disk_urgent_read_s *= f;
    slow.disk_urgent_page_s *= f;
    slow.disk_write_bps /= f;
    tl_plan_result a, b;
    if (tl_plan_evaluate(m, &slow, w, pol, &a)) return HUGE_VAL;
    slow = *prof;
    tl_profile_scale_compute(&slow, f);
    if (tl_plan_evaluate(m, &slow, w, pol, &b)) return HUGE_VAL;
    a.cost.total_s = a.cost.total_s > b.cost.total_s ? a.cost.total_s : b.cost.total_s;
    return rank_key(&a);
}

tl_status tl_plan_search(const tl_model *m, const tl_hw_profile *prof,
                         const tl_plan_request *rq, tl_plan_result *out) {
    return tl_plan_search_ranked(m, prof, rq, out, NULL);
}

tl_status tl_plan_search_ranked(const tl_model *m, const tl_hw_profile *prof,
                                const tl_plan_request *rq, tl_plan_result *out,
                                tl_plan_ranking *ranked) {
    memset(out, 0, sizeof *out);
    if (ranked) ranked->n = ranked->chosen = 0;
    const tl_workload *w = &rq->w;
    if (w->prompt_len < 1 || w->gen_len < 1 || w->num_seqs < 1 ||
        (rq->single && w->num_seqs != 1))
        return tl_error_set(TL_ERR_INVALID, "plan: prompt length %d, generation length %d and "
                            "%d sequences (one in the latency regime) are not a workload",
                            (int)w->prompt_len, (int)w->gen_len, (int)w->num_seqs);
    tl_policy base = tl_plan_default_policy(m, rq);
    tl_status hst = context_holds(w, base.n_ctx);
    if (hst) return hst;
    tl_status cst = tl_llama_check_context(&m->lm, base.n_ctx);
    if (cst) return cst;
    int32_t bits[4], n_bits = 0;
    if (rq->kv_bits) bits[n_bits++] = rq->kv_bits;
    else if (rq->single) bits[n_bits++] = 32; /* one sequence's KV is small: keep it exact */
    else {
        bits[n_bits++] = 32;
        bits[n_bits++] = 16;
        if (rq->allow_lossy_kv) { bits[n_bits++] = 8; bits[n_bits++] = 4; }
    }
    int32_t combos = 0, solves = 0, feasible = 0;
    ranking rk;
    rk.n = 0;
    if (rq->single) {
        const int32_t nb[6] = {16, 32, 64, 128, 256, 512}, longest = tl_workload_prompt_max(w);
        for (int32_t pf = 1; pf <= 4; pf++)
            for (int i = 0; i < 6; i++) {
                if (i > 0 && nb[i - 1] >= longest) break; /* larger changes nothing */
                tl_policy pol = base;
                pol.prefetch = rq->overlap ? pf : 0;
                pol.prefill_rows = nb[i] < base.n_ctx ? nb[i] : base.n_ctx;
                combos++;
                try_combination(m, prof, w, pol, &rk, &solves, &feasible);
                if (!rq->overlap) break;
            }
        if (!rk.n) try_tiers(m, prof, w, &base, &rk, &combos, &feasible);
    } else {
        const int32_t S = w->num_seqs;
        for (int32_t gbs = 1; gbs <= 512; gbs *= 2) {
            if (gbs / 2 >= S) break;
            const int32_t max_gb = (S + gbs - 1) / gbs;
            for (int32_t ng = 1; ng <= 64; ng = ng < max_gb && 2 * ng > max_gb ? max_gb : 2 * ng) {
                if (ng > max_gb) break;
                for (int ib = 0; ib < n_bits; ib++)
                    for (int32_t pf = 1; pf <= 2; pf++)
                        for (int ir = 0; ir < 4; ir++) {
                            /* prompt rows per micro-batch and step: one token per sequence
                             * (least memory), 64, 512 (the default), 2048 */
                            const int32_t cand[4] = {gbs, 64, 512, 2048};
                            const int32_t rows = cand[ir];
                            if (rows < gbs || (ir > 0 && rows == gbs)) continue;
                            tl_policy pol = base;
                            pol.gbs = gbs;
                            pol.num_gb = ng;
                            pol.kv_bits = bits[ib];
                            pol.prefetch = rq->overlap ? pf : 0;
                            pol.prefill_rows = rows;
                            combos++;
                            try_combination(m, prof, w, pol, &rk, &solves, &feasible);
                            if (!rq->overlap && pf == 1) break;
                        }
                if (ng == max_gb) break;
            }
        }
    }
    if (!rk.n) {
        /* the minimum to report: the least the search tried (a batch's smallest
         * candidate, not the default policy, whose block and prompt rows may need far more) */
        tl_policy least = base;
        if (!rq->single) {
            least.gbs = least.num_gb = least.prefill_rows = 1;
            least.kv_bits = bits[n_bits - 1];
            least.kv_mem_pct = 0;
            least.prefetch = rq->overlap ? 1 : 0;
        }
        tl_weight_plan p;
        tl_status st =
            tl_engine_plan_weights(m, tl_plan_state_bytes(m, &least), 1, rq->overlap, 100, &p);
        if (!st) tl_weight_plan_free(&p);
        char msg[768];
        if (st && !rq->single)
            snprintf(msg, sizeof msg, "even its smallest policy (one sequence per micro-batch, "
                     "one prompt token per step, %d-bit KV on disk) needs more: %s",
                     (int)least.kv_bits, tl_last_error());
        else
            snprintf(msg, sizeof msg, "%s", st ? tl_last_error() : "");
        if (rq->single) { /* what the smallest KV tiers need */
            tl_policy t = base;
            t.prefetch = 1;
            t.prefill_rows = 16 < base.n_ctx ? 16 : base.n_ctx;
            t.kv_window_pages = (TL_KV_AUTO_WINDOW + 15) / 16;
            t.kv_sink_pages = (tl_context_default_params().kv_sinks + 15) / 16;
            const size_t len = strlen(msg);
            snprintf(msg + len, sizeof msg - len, "%swith the KV cache in tiers (a %d-position "
                     "window) the minimum is %.1f MiB", len ? "; " : "",
                     (int)TL_KV_AUTO_WINDOW,
                     tl_mib_up(tl_engine_base_used(m) + tl_plan_state_bytes(m, &t) +
                               tl_weight_plan_minimum(&m->lm, 1, rq->overlap)));
        }
        return tl_error_set(TL_ERR_NOMEM, "no policy fits the memory budget of %.1f MiB "
                            "(%d combinations tried)%s%s",
                            tl_budget_limit(m->lm.budget) / 1048576.0, (int)combos,
                            *msg ? ": " : "", msg);
    }
    /* near ties (TL_PLAN_ERROR_SPREAD): the least worst case */
    int pick = 0;
    const int ties = rk.n > 1 && rk.key[1] <= rk.key[0] * (1 + TL_PLAN_ERROR_SPREAD);
    const double nominal_worst = ties ? worst_case_s(m, prof, w, &rk.r[0].policy) : 0;
    double pick_worst = nominal_worst;
    for (int i = 1; ties && i < rk.n && rk.key[i] <= rk.key[0] * (1 + TL_PLAN_ERROR_SPREAD); i++) {
        const double wc = worst_case_s(m, prof, w, &rk.r[i].policy);
        if (wc < pick_worst * (1 - 1e-9)) pick = i, pick_worst = wc;
    }
    tl_error_clear();
    *out = rk.r[pick];
    out->robust_pick = pick > 0;
    out->nominal_s = rk.r[0].cost.total_s;
    out->robust_worst_s = pick_worst;
    out->nominal_worst_s = nominal_worst;
    if (ranked) {
        for (int i = 0; i < rk.n; i++) ranked->cand[i] = rk.r[i];
        ranked->n = rk.n;
        ranked->chosen = pick;
    }
    out->combinations = combos;
    out->lp_solves = solves;
    out->feasible = feasible;
    return TL_OK;
}
