/* serve_plan.h - the serving policy (`tierllm serve --policy auto`): how many sequences run
 * at once, the KV format, the largest prefill chunk, and each step's prompt rows as the
 * number of generating sequences changes, from the cost model (plan/cost.h) on the
 * engine's own memory plan; then corrected by what the steps measure.
 *
 * A serving step is one forward pass over g generating rows and c prompt rows; it costs
 * T(g, c) = smax(compute of g + c rows, the streamed weights' read) (tl_cost_serve_step),
 * and T is the inter-token latency of everyone in it. The prompt rows c(g) of a step with g
 * generating rows are the larger of:
 *  - the rows that ride free: the largest c with T(g, c) <= 1.1 T(g, 0). With weights
 *    streamed a step costs one weight pass up to the compute bound (FlexGen's
 *    max(T_compute, T_io)), so prompts join at nobody's cost; in memory few rows are free;
 *  - the latency budget: the largest c with T(g, c) <= itl_max (default: twice the
 *    full-load decode step T(S, 0)): a joining prompt at most doubles the others' latency,
 *    and with fewer sequences generating the same budget admits larger chunks;
 * within 1..c_max (the scheduler's prefill_chunk, which sizes its buffers). With the
 * default budget the second rule always admits the first's rows (T(g, 0) <= T(S, 0));
 * the first is the floor under a tighter budget (--max-itl-ms). The table
 * c(g), g = 1..S, is the re-plan by load: the scheduler asks it every step.
 *
 * Steady state at full load (every slot taken; requests of P prompt and G generated
 * tokens): a sequence holds its slot for ceil(P / c) prefill steps and G decode steps, so
 * g = S G / (G + ceil(P / c(g))) generate at once (a fixed point, iterated), and prompts
 * can keep at most c(g) G / P generating; a step adds g P / G prompt rows on average.
 * Aggregate throughput = g / T(g, g P / G); its ITL at worst T(g, c(g)).
 *
 * The search: slots S in powers of two up to TL_SERVE_PLAN_MAX_SEQS, KV bits 32 and 16 (8
 * and 4 when lossy KV is allowed), c_max from 16 to 512, the KV all in memory or in tiers
 * (the sinks and a window of 32, 64 or 128 positions in memory, older pages on disk and
 * read back at every step: exact, slower, and it fits more sequences beside streamed
 * weights); a candidate's memory is the
 * scheduler's exact budget plus the weight plan the engine makes for what is left
 * (tl_engine_plan_weights), and only those that fit are ranked: by throughput (ties
 * within 3%), then by prompt capacity, the prompt rows a full-load step takes per second
 * (ties within 10%: the fluid model sees requests arriving evenly, and capacity is what
 * absorbs a burst of them), then by the lower full-load ITL (slots past the products'
 * saturation buy nothing but latency), then the KV all in memory over tiers (tiers that
 * buy nothing only add disk traffic), then by less memory.
 *
 * Calibration at start: the profile is measured minutes or days before, on a scratch file;
 * the model's own streaming and products are timed once the weights are placed as planned
 * (as batch's replanner does before its first block), and the search runs again on the
 * corrected profile.
 *
 * Re-planning by measurement: the replanner is the scheduler's step policy. It sums what
 * steps took against what the model predicted for the same (g, c); every 32 steps (and at
 * least 2 s of them), when the two differ by more than 20%, it corrects its profile copy
 * (the disk's figures when the steps were mostly waiting for weights, else the compute's)
 * and rebuilds the table. The slots and c_max stay: they size memory that is allocated.
 */
#ifndef TL_PLAN_SERVE_PLAN_H
#define TL_PLAN_SERVE_PLAN_H

#include "plan/cost.h"
#include "exec/sched.h"

#define TL_SERVE_PLAN_MAX_SEQS 512

typedef struct tl_serve_request {
    int32_t prompt_len, gen_len; /* a typical request (0: 256 and 128, within n_ctx) */
    int32_t n_ctx;               /* positions per sequence (0: the scheduler's default) */
    int32_t max_seqs, max_chunk, kv_bits; /* > 0: fixed by the user; 0: searched */
    int32_t allow_lossy_kv;      /* search 8- and 4-bit KV too */
    int32_t kv_window;           /* KV tiers: 0: searched (all in memory, or windows of 32,
                                    64, 128 positions with the rest on disk; not when the
                                    spill directory is tmpfs or ramfs); > 0: that window;
                                    < 0: all in memory */
    const char *spill_dir;       /* where disk KV pages go (NULL: $TMPDIR or /tmp) */
    double max_itl_s;            /* 0: twice the full-load decode step */
} tl_serve_request;

typedef struct tl_serve_plan {
    tl_sched_params sched;       /* max_seqs, n_ctx, kv_bits, prefill_chunk = c_max */
    int32_t prompt_len, gen_len; /* the request it was planned for */
    int32_t chunk_by_gen[TL_SERVE_PLAN_MAX_SEQS + 1]; /* c(g) for g = 1..max_seqs */
    double itl_max_s;            /* the latency budget the table keeps */
    int32_t itl_from_user;       /* 1: itl_max_s was asked for; 0: 2 x decode_step_s */
    /* full load, predicted */
    double gen_rows;             /* sequences generating at once */
    double step_s;               /* the mean step */
    double itl_s;                /* a step with a full chunk */
    int32_t chunk_full;          /* that chunk: c(g) at the full-load g */
    double tokens_per_s;         /* aggregate generated tokens per second */
    double decode_step_s;        /* T(max_seqs, 0) */
    uint64_t mem_bytes;          /* everything the server's engine holds */
    uint64_t streamed_bytes;     /* weight bytes read per step */
    int32_t candidates, feasible;
} tl_serve_plan;

/* Searches; TL_ERR_NOMEM (with the minimum) when no candidate fits the model's budget,
 * TL_ERR_INVALID for a request that cannot be (prompt and generation beyond n_ctx). */
tl_status tl_serve_plan_search(const tl_model *m, const tl_hw_profile *prof,
                               const tl_serve_request *rq, tl_serve_plan *out);

typedef struct tl_serve_replanner {
    const tl_model *m;
    tl_hw_profile prof;          /* corrected as steps are measured */
    tl_serve_plan plan;          /* its table is the one in force */
    tl_weight_plan wplan;        /* the placement the plan assumes (the engine's own) */
    double pred_s, meas_s, stall_s; /* since the last check */
    int32_t steps;
    int32_t checks, replans;
    double last_ratio;           /* measured / predicted at the last check */
} tl_serve_replanner;

/* The search; then, with the weights placed as it planned, the engine's own streaming and
 * resident products are timed (plan/calibrate.h), which corrects *prof, and the search
 * runs again on the corrected figures. The weights stay placed when the final plan's
 * scheduler holds the same state bytes (tl_sched_open then keeps that placement), and are
 * unplaced otherwise (and on an error). *disk_ratio and *compute_ratio are measured /
 * profiled (1: not measured: nothing streams, or too little is resident). With the
 * weights already placed it is the search alone. */
tl_status tl_serve_plan_calibrated(tl_model *m, tl_hw_profile *prof,
                                   const tl_serve_request *rq, tl_serve_plan *out,
                                   double *disk_ratio, double *compute_ratio);

/* The replanner for a plan (the engine must place its weights as the plan's dry run did:
 * the scheduler opened with plan->sched does). */
tl_status tl_serve_replanner_init(tl_serve_replanner *r, const tl_model *m,
                                  const tl_hw_profile *prof, const tl_serve_plan *plan);
void tl_serve_replanner_free(tl_serve_replanner *r);
/* The step policy to put in the scheduler's parameters (r must outlive the scheduler). */
tl_sched_policy tl_serve_replanner_policy(tl_serve_replanner *r);
/* Seconds of one step of g generating and c prompt rows, as the replanner predicts now. */
double tl_serve_replanner_step_s(const tl_serve_replanner *r, int32_t g, int32_t c);

#endif
