/* replan.h - re-planning during a batch run (FlexGen keeps one static policy).
 *
 * Before the first block (the weights are placed by then) it times one pass of the
 * engine's own weight streaming (plan/calibrate.h); if the model file reads more than
 * 20% faster or slower than the profile says, the profile copy is corrected and the
 * search runs again before anything is computed.
 * After each block the replanner compares what the block measured with what the plan
 * predicted for it: the IO queue's read-busy seconds against the predicted read time
 * (the disk's real bandwidth), and compute seconds (step time minus stalls) against the
 * predicted compute (the kernels' real rate). When either is off by more than 20%, the
 * profile copy it holds is corrected by the measured ratio (every disk read figure, or
 * every compute rate), the search runs again for the prompts that are left, and if it
 * picks a different policy the run switches to it before the next block. Each decision
 * is logged for --stats.
 */
#ifndef TL_PLAN_REPLAN_H
#define TL_PLAN_REPLAN_H

#include "plan/search.h"
#include "exec/engine.h"
#include "tier/aio.h"

#define TL_REPLAN_LOG 16

typedef struct tl_replanner {
    tl_hw_profile prof;          /* corrected as measurements come in */
    tl_plan_request rq;
    tl_plan_result current;      /* the policy in force and its search result */
    double threshold;            /* relative deviation that triggers (0.2) */
    /* counters at the start of the block in progress */
    tl_batch_stats prev;
    tl_aio_stats aio_prev;
    int32_t prompts_at_block;    /* prompts left when the block started */
    int32_t started;             /* the pre-run calibration has been done */
    int32_t no_calibration;      /* 1: none before the first block (blocks' figures only) */
    double disk_ratio;           /* model file streaming / profile, measured before block 1 */
    /* the whole run's prediction with the profile calibrated before block 1
     * (has_calibrated): the first policy's, or the new one's when that calibration
     * changed the policy (first_switch), which is then the one the run started with */
    tl_cost calibrated;
    int32_t has_calibrated, first_switch;
    tl_plan_result first; /* the policy the run started with, when first_switch */
    int32_t checks, replans, switches;
    double last_io_ratio, last_compute_ratio; /* measured / predicted, last block */
    double hook_s;               /* wall seconds in the hook: calibration, checks, searches */
    char log[TL_REPLAN_LOG][320];
    int32_t n_log;
} tl_replanner;

/* Starts with the chosen policy (already applied to the model and batch params). */
void tl_replanner_init(tl_replanner *r, const tl_model *m, const tl_hw_profile *prof,
                       const tl_plan_request *rq, const tl_plan_result *chosen);
/* The tl_batch_replan_fn: pass the replanner as `user`. */
int tl_replanner_hook(void *user, tl_model *m, const tl_batch_stats *so_far,
                      int32_t prompts_left, tl_batch_params *bp);

/* Writes a policy's knobs: the model's (placement not yet made, or about to be made
 * again) and the batch's (bp may be NULL for a single-sequence policy). */
void tl_plan_apply(const tl_policy *pol, tl_model *m, tl_batch_params *bp);
/* A single-sequence policy's context parameters: n_ctx, n_batch, the KV format, and its
 * KV tiers (window, sinks and cache in tl_context_params' units) when it has them. */
void tl_plan_context_params(const tl_policy *pol, const tl_model *m, tl_context_params *cp);

#endif
