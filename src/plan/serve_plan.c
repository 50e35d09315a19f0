/* serve_plan.c - the serving policy and its re-planning (serve_plan.h says what holds). */
#include "plan/serve_plan.h"

#include <math.h>
#include <string.h>
#include <sys/vfs.h>
#include "base/status.h"
#include "exec/engine.h"
#include "plan/calibrate.h"

#define FREE_SHARE 1.10     /* rows that ride free: the step grows by at most 10% */
#define NEAR_BEST 0.97      /* candidates this close in throughput tie */
#define NEAR_CAPACITY 0.90  /* and this close in prompt capacity */
#define CHECK_STEPS 32      /* steps, and seconds of them, between re-plan checks */
#define CHECK_SECONDS 2.0
#define REPLAN_OFF 0.20     /* measured / predicted beyond 1 +- this: re-plan */

/* 1 when dir is on a filesystem held in memory (tmpfs, ramfs): KV pages "on disk" there
 * would take memory outside the budget, so the search keeps the KV in memory. */
static int in_memory_fs(const char *dir) {
    struct statfs f;
    if (statfs(dir, &f) != 0) return 0; /* opening the spill file will say what is wrong */
    return (unsigned long)f.f_type == 0x01021994ul /* tmpfs */ ||
           (unsigned long)f.f_type == 0x858458f6ul /* ramfs */;
}

/* What a step's prediction needs besides (g, c). */
typedef struct step_model {
    const tl_model *m;
    const tl_hw_profile *prof;
    const tl_weight_plan *wp;
    const tl_sched_params *sp;
    int32_t P, G;
} step_model;

/* T(g, c): generating rows at the mean context of a generation, prompt rows at the mean
 * start of a chunk. */
static double step_s(const step_model *sm, double g, double c) {
    const double at = sm->P / 2.0 - c / 2.0;
    const int32_t pt = sm->sp->page_tokens, w = sm->sp->kv_window;
    tl_serve_step s = {(int32_t)lround(g), (int32_t)lround(c), sm->P + sm->G / 2.0,
                       at > 0 ? at : 0, sm->sp->kv_bits, pt, sm->sp->n_ctx,
                       w > 0 ? (w + pt - 1) / pt : 0,
                       w > 0 ? (sm->sp->kv_sinks + pt - 1) / pt : 0};
    return tl_cost_serve_step(sm->m, sm->prof, sm->wp, &s, NULL);
}

/* c(g): the larger of the free rows and the latency budget's, in 1..c_max. */
static int32_t chunk_for(const step_model *sm, int32_t g, double itl_max, int32_t cmax) {
    const double t0 = step_s(sm, g, 0);
    const double limit = itl_max > FREE_SHARE * t0 ? itl_max : FREE_SHARE * t0;
    if (step_s(sm, g, cmax) <= limit) return cmax;
    int32_t lo = 1, hi = cmax; /* T(g, lo) <= limit or lo == 1; T(g, hi) > limit */
    if (step_s(sm, g, 1) > limit) return 1;
    while (hi - lo > 1) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (step_s(sm, g, mid) <= limit) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* The full-load steady state (serve_plan.h) of plan->sched, each load's chunk from
 * chunk_for (what its table holds, or will). */
static void steady_state(const step_model *sm, tl_serve_plan *plan) {
    const double S = plan->sched.max_seqs, P = sm->P, G = sm->G;
    double g = S;
    for (int it = 0; it < 16; it++) {
        int32_t gi = (int32_t)lround(g);
        if (gi < 1) gi = 1;
        const int32_t c = chunk_for(sm, gi, plan->itl_max_s, plan->sched.prefill_chunk);
        double next = S * G / (G + ceil(P / c));
        if (next > c * G / P) next = c * G / P; /* prompts feed no more than this */
        if (next > S) next = S;
        if (fabs(next - g) < 0.01) {
            g = next;
            break;
        }
        g = (g + next) / 2;
    }
    int32_t gi = (int32_t)lround(g);
    if (gi < 1) gi = 1;
    plan->gen_rows = g;
    plan->step_s = step_s(sm, gi, g * P / G);
    plan->chunk_full = chunk_for(sm, gi, plan->itl_max_s, plan->sched.prefill_chunk);
    plan->itl_s = step_s(sm, gi, plan->chunk_full);
    plan->tokens_per_s = plan->step_s > 0 ? g / plan->step_s : 0;
}

static void fill_table(const step_model *sm, tl_serve_plan *plan) {
    for (int32_t g = 1; g <= plan->sched.max_seqs && g <= TL_SERVE_PLAN_MAX_SEQS; g++)
        plan->chunk_by_gen[g] = chunk_for(sm, g, plan->itl_max_s, plan->sched.prefill_chunk);
    plan->chunk_by_gen[0] = plan->sched.prefill_chunk;
}

/* One candidate: its memory dry run, then its steady state (and its table when `table`).
 * TL_ERR_NOMEM when it does not fit; *wp is then empty. */
static tl_status evaluate(const tl_model *m, const tl_hw_profile *prof, double itl_user,
                          int table, tl_serve_plan *c, tl_weight_plan *wp) {
    const uint64_t state = tl_sched_budget_bytes(m, &c->sched);
    if (state == UINT64_MAX) return tl_error_set(TL_ERR_NOMEM, "the KV cache's size overflows");
    const tl_model_params *mp = &m->lm.params;
    tl_status st = tl_engine_plan_weights(m, state, mp->prefetch, mp->overlap, mp->w_mem_pct, wp);
    if (st) return st;
    c->mem_bytes = tl_engine_base_used(m) + state + tl_weight_plan_bytes(&m->lm, wp);
    c->streamed_bytes = wp->streamed_bytes;
    const step_model sm = {m, prof, wp, &c->sched, c->prompt_len, c->gen_len};
    c->decode_step_s = step_s(&sm, c->sched.max_seqs, 0);
    c->itl_from_user = itl_user > 0;
    c->itl_max_s = itl_user > 0 ? itl_user : 2 * c->decode_step_s;
    if (table) fill_table(&sm, c);
    steady_state(&sm, c);
    return TL_OK;
}

/* Prompt rows a full-load step takes per second: how fast a burst of prompts is absorbed. */
static double prompt_capacity(const tl_serve_plan *p) {
    return p->itl_s > 0 ? p->chunk_full / p->itl_s : 0;
}

/* a ranks before b (serve_plan.h): throughput, ties within 3%; then prompt capacity, ties
 * within 10%; then the lower ITL; then the KV all in memory (tiers that buy nothing only
 * add disk traffic); then less memory. */
static int better(const tl_serve_plan *a, const tl_serve_plan *b) {
    if (a->tokens_per_s < NEAR_BEST * b->tokens_per_s) return 0;
    if (b->tokens_per_s < NEAR_BEST * a->tokens_per_s) return 1;
    const double ca = prompt_capacity(a), cb = prompt_capacity(b);
    if (ca < NEAR_CAPACITY * cb) return 0;
    if (cb < NEAR_CAPACITY * ca) return 1;
    if (a->itl_s != b->itl_s) return a->itl_s < b->itl_s;
    if ((a->sched.kv_window > 0) != (b->sched.kv_window > 0)) return a->sched.kv_window == 0;
    return a->mem_bytes < b->mem_bytes;
}

tl_status tl_serve_plan_search(const tl_model *m, const tl_hw_profile *prof,
                               const tl_serve_request *rq, tl_serve_plan *out) {
    memset(out, 0, sizeof *out);
    tl_sched_params base = tl_sched_default_params();
    base.n_ctx = rq->n_ctx;
    if (rq->max_seqs > 0) base.max_seqs = rq->max_seqs;
    if (rq->max_chunk > 0) base.prefill_chunk = rq->max_chunk;
    if (rq->kv_bits > 0) base.kv_bits = rq->kv_bits;
    tl_status st = tl_sched_resolve_params(m, &base, &base);
    if (st) return st;
    if (rq->max_seqs > TL_SERVE_PLAN_MAX_SEQS)
        return tl_error_set(TL_ERR_INVALID, "the serving planner plans at most %d sequences "
                            "(got %d)", TL_SERVE_PLAN_MAX_SEQS, (int)rq->max_seqs);
    const int32_t n_ctx = base.n_ctx;
    int32_t P = rq->prompt_len > 0 ? rq->prompt_len : (256 < n_ctx / 2 ? 256 : n_ctx / 2);
    if (P < 1) P = 1;
    int32_t G = rq->gen_len > 0 ? rq->gen_len : (128 < n_ctx - P ? 128 : n_ctx - P);
    if (G < 1 || (int64_t)P + G > n_ctx)
        return tl_error_set(TL_ERR_INVALID, "a request of %d prompt and %d generated tokens "
                            "does not fit the context of %d positions", (int)P, (int)G,
                            (int)n_ctx);
    static const int32_t all_bits[] = {32, 16, 8, 4};
    static const int32_t chunks[] = {16, 32, 64, 128, 256, 512};
    /* KV windows (positions kept in memory besides the sinks; 0: all in memory), those
     * shorter than the context */
    int32_t windows[4] = {0, 0, 0, 0}, n_windows = 1;
    base.spill_dir = rq->spill_dir;
    if (rq->kv_window > 0) windows[0] = rq->kv_window;
    else if (rq->kv_window == 0 && !in_memory_fs(tl_sched_spill_dir(&base)))
        for (int32_t w = 32; w <= 128; w *= 2)
            if (w + base.kv_sinks < n_ctx) windows[n_windows++] = w;
    const int n_bits = rq->kv_bits > 0 ? 1 : rq->allow_lossy_kv ? 4 : 2;
    const int n_chunks = rq->max_chunk > 0 ? 1 : (int)(sizeof chunks / sizeof chunks[0]);
    uint64_t least = UINT64_MAX; /* the smallest memory among candidates, for the message */
    int have = 0;
    for (int32_t S = rq->max_seqs > 0 ? rq->max_seqs : 1; S <= TL_SERVE_PLAN_MAX_SEQS;
         S = rq->max_seqs > 0 ? TL_SERVE_PLAN_MAX_SEQS + 1 : 2 * S)
        for (int b = 0; b < n_bits; b++)
            for (int k = 0; k < n_chunks; k++)
            for (int wi = 0; wi < n_windows; wi++) {
                tl_serve_plan c;
                memset(&c, 0, sizeof c);
                c.sched = base;
                c.sched.max_seqs = S;
                c.sched.kv_bits = rq->kv_bits > 0 ? rq->kv_bits : all_bits[b];
                c.sched.prefill_chunk = rq->max_chunk > 0 ? rq->max_chunk : chunks[k];
                c.sched.kv_window = windows[wi];
                c.sched.spill_dir = rq->spill_dir;
                c.prompt_len = P;
                c.gen_len = G;
                out->candidates++;
                tl_weight_plan wp;
                memset(&wp, 0, sizeof wp);
                st = evaluate(m, prof, rq->max_itl_s, 0, &c, &wp);
                tl_weight_plan_free(&wp);
                if (st) {
                    tl_error_clear();
                    const uint64_t state = tl_sched_budget_bytes(m, &c.sched);
                    if (state != UINT64_MAX && tl_engine_base_used(m) + state < least)
                        least = tl_engine_base_used(m) + state;
                    continue;
                }
                out->feasible++;
                if (!have || better(&c, out)) {
                    const int32_t n = out->candidates, f = out->feasible;
                    *out = c;
                    out->candidates = n, out->feasible = f;
                    have = 1;
                }
            }
    if (!have)
        return tl_error_set(TL_ERR_NOMEM, "the memory budget of %.1f MiB holds no serving "
                            "policy: the smallest needs more than %.1f MiB before any weight "
                            "buffer; raise --mem-budget or lower --ctx-size",
                            tl_budget_limit(m->lm.budget) / 1048576.0,
                            least == UINT64_MAX ? 0.0 : least / 1048576.0);
    /* the chosen one's table (the ranking needed only its steady state) */
    tl_weight_plan wp;
    memset(&wp, 0, sizeof wp);
    st = evaluate(m, prof, rq->max_itl_s, 1, out, &wp);
    tl_weight_plan_free(&wp);
    return st;
}

tl_status tl_serve_plan_calibrated(tl_model *m, tl_hw_profile *prof,
                                   const tl_serve_request *rq, tl_serve_plan *out,
                                   double *disk_ratio, double *compute_ratio) {
    *disk_ratio = *compute_ratio = 1;
    tl_status st = tl_serve_plan_search(m, prof, rq, out);
    if (st || m->res) return st; /* placed already: nothing to calibrate without moving it */
    const uint64_t state = tl_sched_budget_bytes(m, &out->sched);
    if ((st = tl_engine_place(m, state))) return st;
    double bps;
    if (tl_plan_calibrate_disk(m, prof, &bps, disk_ratio)) {
        tl_error_clear();
        *disk_ratio = 1;
    }
    if (tl_plan_calibrate_compute(m, prof, compute_ratio)) {
        tl_error_clear();
        *compute_ratio = 1;
    }
    double products = 1; /* prefill chunks and batched decode steps */
    if (tl_plan_calibrate_products(m, prof, &products)) tl_error_clear(), products = 1;
    double delay = 0; /* the ring's reads beside compute */
    /* a decode step of every sequence the scheduler holds (tl_cost_serve_step's) */
    const int32_t rows = out->sched.max_seqs > 0 ? out->sched.max_seqs : 1;
    const tl_plan_decode_shape ds = {out->sched.kv_bits, rows, 1,
                                     tl_plan_decode_ctx(out->prompt_len, out->gen_len)};
    if (tl_plan_calibrate_ring(m, prof, &ds, &delay))
        tl_error_clear(), delay = 0;
    /* each corrected the profile's figures already: plan on them; the placement stays
     * when the plan keeps the scheduler's shape (the same state bytes, so the same weight
     * plan), sparing a second read of the resident weights */
    const tl_sched_params before = out->sched;
    if (*disk_ratio != 1 || *compute_ratio != 1 || products != 1 || delay > 0)
        st = tl_serve_plan_search(m, prof, rq, out);
    if (st || tl_sched_budget_bytes(m, &out->sched) != tl_sched_budget_bytes(m, &before))
        tl_engine_unplace(m);
    return st;
}

/* ---- re-planning ---- */

tl_status tl_serve_replanner_init(tl_serve_replanner *r, const tl_model *m,
                                  const tl_hw_profile *prof, const tl_serve_plan *plan) {
    memset(r, 0, sizeof *r);
    r->m = m;
    r->prof = *prof;
    r->plan = *plan;
    const uint64_t state = tl_sched_budget_bytes(m, &plan->sched);
    const tl_model_params *mp = &m->lm.params;
    return tl_engine_plan_weights(m, state == UINT64_MAX ? 0 : state, mp->prefetch, mp->overlap,
                                  mp->w_mem_pct, &r->wplan);
}

void tl_serve_replanner_free(tl_serve_replanner *r) { tl_weight_plan_free(&r->wplan); }

double tl_serve_replanner_step_s(const tl_serve_replanner *r, int32_t g, int32_t c) {
    const step_model sm = {r->m, &r->prof, &r->wplan, &r->plan.sched, r->plan.prompt_len,
                           r->plan.gen_len};
    return step_s(&sm, g, c);
}

static int32_t policy_chunk(void *user, int32_t gen_rows) {
    const tl_serve_replanner *r = user;
    if (gen_rows < 1) return r->plan.sched.prefill_chunk;
    if (gen_rows > r->plan.sched.max_seqs) gen_rows = r->plan.sched.max_seqs;
    if (gen_rows > TL_SERVE_PLAN_MAX_SEQS) gen_rows = TL_SERVE_PLAN_MAX_SEQS;
    return r->plan.chunk_by_gen[gen_rows];
}

static void policy_observe(void *user, int32_t gen_rows, int32_t prompt_rows, double seconds,
                           double stall_s) {
    tl_serve_replanner *r = user;
    r->pred_s += tl_serve_replanner_step_s(r, gen_rows, prompt_rows);
    r->meas_s += seconds;
    r->stall_s += stall_s;
    if (++r->steps < CHECK_STEPS || r->meas_s < CHECK_SECONDS) return;
    r->checks++;
    const double ratio = r->pred_s > 0 ? r->meas_s / r->pred_s : 1;
    r->last_ratio = ratio;
    const int io_bound = r->stall_s > r->meas_s / 2;
    r->pred_s = r->meas_s = r->stall_s = 0;
    r->steps = 0;
    if (fabs(ratio - 1) <= REPLAN_OFF) return;
    /* the steps waited on weights most of the time: the disk is what was off */
    if (io_bound) tl_profile_scale_disk(&r->prof, ratio);
    else tl_profile_scale_compute(&r->prof, ratio);
    const step_model sm = {r->m, &r->prof, &r->wplan, &r->plan.sched, r->plan.prompt_len,
                           r->plan.gen_len};
    r->plan.decode_step_s = step_s(&sm, r->plan.sched.max_seqs, 0);
    if (!r->plan.itl_from_user) r->plan.itl_max_s = 2 * r->plan.decode_step_s;
    fill_table(&sm, &r->plan);
    steady_state(&sm, &r->plan);
    r->replans++;
}

tl_sched_policy tl_serve_replanner_policy(tl_serve_replanner *r) {
    return (tl_sched_policy){policy_chunk, policy_observe, r};
}
