/* search.h - choosing the policy: FlexGen's search, made safe.
 *
 * The discrete knobs (gbs, num_gb, KV bits, prefetch depth, prefill rows) are
 * enumerated; for each combination a linear program over the continuous ones (the
 * resident share of the weights x_w and of the KV pages x_k) minimizes the predicted
 * time of the whole workload under the memory budget; the LP's fractions become the
 * engine's percentages; then every candidate goes through an exact dry run of the memory
 * plan (the same functions the engine places and allocates with), and only candidates
 * that fit are ranked, by the full cost model (cost.h) on the real weight plan. So the
 * chosen policy never exceeds the budget, and its prediction is the one the run is
 * compared with.
 *
 * The LP of one combination (pass classes i with count n_i, compute C_i, all-streamed
 * weight read seconds W_i, all-on-disk KV seconds K_i):
 *   minimize   sum_i n_i t_i
 *   subject to t_i >= C_i + (s - 1) IO_i                    (overlap: T = max(C', IO))
 *              t_i >= IO_i = (1 - x_w) W_i + (1 - x_k) K_i
 *              (s: compute slowdown while the disk streams; C' = C + (s-1) min(IO, C) in
 *              the cost model, which the first row bounds from above, exactly when IO <= C)
 *              (without overlap: t_i >= C_i + (1 - x_w) W_i + (1 - x_k) K_i)
 *              (the cost model's overlap is a soft maximum, cost.c: this linear max is
 *              its lower bound, and the ranking below uses the cost model itself)
 *              base + x_w R_w + x_k R_k <= budget            (memory)
 *              0 <= x_w, x_k <= 1
 * R_w: budget bytes of keeping every streamable weight resident rather than none;
 * R_k: of homing every full KV page in memory rather than on disk; base: the rest (the
 * all-streamed minimum, activations, open KV pages, staging), all from the engine's own
 * accounting.
 */
#ifndef TL_PLAN_SEARCH_H
#define TL_PLAN_SEARCH_H

#include "plan/cost.h"

typedef struct tl_plan_request {
    tl_workload w;
    int32_t single;          /* 1: the latency regime, one sequence (tierllm run) */
    int32_t n_ctx;           /* context per sequence; 0: prompt_len + gen_len */
    int32_t kv_bits;         /* 0: search 32 and 16 (and 8, 4 with allow_lossy_kv) */
    int32_t allow_lossy_kv;
    int32_t overlap;         /* 1: IO overlaps compute (the engine's default) */
    int32_t page_tokens;     /* 0: 16 */
} tl_plan_request;

typedef struct tl_plan_result {
    tl_policy policy;
    tl_cost cost;
    uint64_t mem_bytes;      /* the dry run's bytes (everything the run will hold) */
    uint64_t budget_bytes;
    uint64_t streamed_bytes; /* weight bytes read per pass under the plan */
    uint64_t resident_bytes; /* weight bytes kept in memory */
    double lp_objective;     /* the LP's optimum for the chosen combination */
    double lp_xw, lp_xk;
    int32_t combinations, lp_solves, feasible;
    /* the choice among near ties (TL_PLAN_ERROR_SPREAD): robust_pick 1 when the policy
     * predicted fastest (nominal_s) was passed over for this one, whose prediction rises
     * least when the disk or the compute is slower by the spread: its worst case
     * robust_worst_s against the passed-over one's nominal_worst_s (both 0 when no other
     * candidate was within the spread) */
    int32_t robust_pick;
    double nominal_s, robust_worst_s, nominal_worst_s;
} tl_plan_result;

/* The search's best candidates, best first, distinct policies: one per combination of
 * the batch knobs (its best KV share), so runners-up differ in more than a percent of KV
 * placement; with the KV in tiers each cache size and recompute count is its own. */
#define TL_PLAN_RANKED 5
typedef struct tl_plan_ranking {
    tl_plan_result cand[TL_PLAN_RANKED];
    int32_t n;
    int32_t chosen;          /* the index of the search's choice */
} tl_plan_ranking;

/* KV tiers: layers recompute K and V (tl_policy.kv_recompute) only when predicted faster
 * than loading by this share: the disk term is measured minutes before the run, and a
 * virtual disk's rate drifts in between. */
#define TL_PLAN_RECOMPUTE_MARGIN 0.05

/* The cost model's error spread: candidates predicted within this share of the fastest
 * are near ties it cannot order (it stands for the 90th-percentile |error| that
 * bench_costmodel --heldout measures). Among them the search takes the one whose
 * prediction is least sensitive to the uncertain terms: the least worst case of its time
 * with every disk transfer, or every product, slower by this share. */
#define TL_PLAN_ERROR_SPREAD 0.10

/* Searches; TL_ERR_NOMEM (with the minimum) if no candidate fits the model's budget. */
tl_status tl_plan_search(const tl_model *m, const tl_hw_profile *prof,
                         const tl_plan_request *rq, tl_plan_result *out);
/* The same, and (ranked may be NULL) the best candidates by prediction, fastest first, the
 * chosen one among them. */
tl_status tl_plan_search_ranked(const tl_model *m, const tl_hw_profile *prof,
                                const tl_plan_request *rq, tl_plan_result *out,
                                tl_plan_ranking *ranked);

/* The best placement for one given combination of the discrete knobs (pol's gbs, num_gb,
 * KV bits, prefetch, prefill rows, page size, context): as the search does for each of
 * its combinations, the LP over the resident shares, then exact dry runs from its KV
 * fraction down (the weights take what the budget leaves). TL_ERR_NOMEM when no KV share
 * fits. For the ranks of a pipeline, which share the block shape but place their own
 * stage. */
tl_status tl_plan_place(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                        const tl_policy *pol, tl_plan_result *out);

/* The exact dry run and prediction of one given policy: TL_ERR_NOMEM if it does not fit. */
tl_status tl_plan_evaluate(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                           const tl_policy *pol, tl_plan_result *out);

/* Writes the policy's batch knobs (block shape, prefill rows, KV format and placement,
 * page size, context) into bp; other fields are left as they are. */
void tl_plan_batch_params(const tl_policy *pol, tl_batch_params *bp);

/* Budget bytes of everything a policy's run holds but the weights (the same functions the
 * engine places with: a batch, a context, or a context with its KV in tiers). */
uint64_t tl_plan_state_bytes(const tl_model *m, const tl_policy *pol);

/* 1 when the policy homes KV pages on disk (tiers, or a batch's share below 100%). */
int tl_plan_spills_kv(const tl_policy *pol);

/* The policy a request starts from (the engine's defaults for that regime). */
tl_policy tl_plan_default_policy(const tl_model *m, const tl_plan_request *rq);

/* The LP of one combination, for tests: build it, evaluate its objective at a point
 * (HUGE_VAL if the point breaks the memory row), solve it. */
typedef struct tl_plan_lp {
    int32_t n;                         /* pass classes */
    double *count, *compute, *wread, *kv, *slow;
    double *kvwait;                    /* KV wait with all KV on disk, ~ (1 - x_k) */
    double *fwait;                     /* flash reads' wait with all weights streamed,
                                        * ~ (1 - x_w) */
    double base, r_w, r_k, budget;
    int overlap, kv_free;              /* kv_free: x_k is a variable (KV may spill) */
} tl_plan_lp;
tl_status tl_plan_lp_build(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                           const tl_policy *pol, tl_plan_lp *out);
double tl_plan_lp_eval(const tl_plan_lp *lp, double x_w, double x_k);
tl_status tl_plan_lp_solve(const tl_plan_lp *lp, double *x_w, double *x_k, double *objective);
void tl_plan_lp_free(tl_plan_lp *lp);

#endif
