/* plan_case.h - one planned-then-run workload, shared by bench_costmodel's table and its
 * held-out draw (heldout.c): the cost model's prediction of a policy (the planner's choice,
 * or given knobs) beside the measured prefill and decode, after the same placement and
 * calibration the CLI makes. */
#ifndef TL_BENCH_PLAN_CASE_H
#define TL_BENCH_PLAN_CASE_H

#include <stdint.h>
#include "tierllm.h"
#include "plan/search.h"

typedef struct bench_case {
    const char *path;      /* the model file */
    uint64_t budget_mib;
    int single;            /* latency regime */
    int prompt, gen, seqs;
    int automatic;         /* 1: the planner's choice; else the knobs below */
    int gbs, num_gb, kv_bits, kv_mem, prefetch, overlap, rows;
    const tl_policy *policy; /* not automatic: this whole policy instead of the knobs */
    double max_predicted_s;  /* > 0: a plan predicted longer than this is not run */
} bench_case;

typedef struct outcome {
    tl_plan_result plan;
    tl_plan_ranking ranked;  /* automatic: the search's best candidates */
    tl_hw_profile prof;      /* the profile the plan was made with (after calibration) */
    double measured_s, measured_tps, disk_bps;
    double pre_s, dec_s, pre_stall_s, dec_stall_s; /* measured, by phase */
    double pre_kv_wait_s, dec_kv_wait_s;             /* of the stalls, waiting for KV */
    /* run only: seconds of decode with a read in flight (-1: not measured; batch: -1) */
    double dec_read_busy_s;
    double kv_bytes_read, weight_bytes_read;         /* measured, batch only */
    int ok;
    int ran;                /* the workload started (planning and placement succeeded) */
    int too_long;           /* planned, but predicted longer than max_predicted_s: not run */
    int32_t replans;
    /* the first calibration's ratios (plan/calibrate.h; disk, compute and products 1
     * when not measured, the KV page's 0; cal_kv_alone: the page's factor from its reads
     * alone, before those beside the stream bounded it) */
    double cal_disk, cal_compute, cal_products, cal_kv_page, cal_kv_alone;
    /* the plan's whole prediction with the calibration's ring delay left out (the term's
     * ablation; = plan.cost.total_s when none was measured) */
    double total_no_ring_s;
    /* the same with the disk calibration's rate spread left out (priced at the median
     * rate alone; = plan.cost.total_s when there was no spread) */
    double total_no_spread_s;
    /* the same with the layer calibration's row scales left out (prof->layer_row_scale);
     * with the slowdown measured beside the model file's stream left out, the profile's
     * scaled by the stream's rate instead (prof->io_slowdown_stream); and with both left
     * out, the profile's slowdown as it stands (and prof->io_rate_scale) */
    double total_no_layer_s, total_no_stream_s, total_no_rate_s;
    /* the same with the layer row scales from each count's lowest round
     * (prof->layer_row_scale_lowest), not its median */
    double total_lowest_s;
    /* the same without the compute's cost per byte read (prof->io_stream_s_per_byte): the
     * slowdown ratios instead */
    double total_no_bytecost_s;
    char error[1024];       /* why it did not run (planning or placement refused it), or "" */
} outcome;

void print_policy(const tl_policy *p);
/* The planner's request for the case's workload (its context: prompt + generated). */
tl_plan_request bench_request(const bench_case *c);
/* Plans (or evaluates the given knobs), places, calibrates (`calibrate`) and re-plans as
 * the CLI does, then runs the workload under that policy; replan: batch's re-planner. */
outcome run_case(const bench_case *c, const tl_hw_profile *prof_in, int replan, int calibrate);

#endif
