/* batch_pipe.h - planning a pipeline's batch run (tools/cmd_batch.c with --pipeline):
 * each rank's stage prediction, the automatic layer split, and the report of predicted
 * against measured per stage. Every function is called by every rank at the same point
 * of the run (they exchange small messages over the pipe's link). */
#ifndef TL_TOOLS_BATCH_PIPE_H
#define TL_TOOLS_BATCH_PIPE_H

#include "tierllm.h"
#include "tools/cli_pipe.h"
#include "plan/search.h"

/* The prediction of the manual policy bp for the workload of rq (also batch's --stats). */
tl_status batch_evaluate_manual(tl_model *m, const tl_hw_profile *prof,
                                const tl_plan_request *rq, const tl_batch_params *bp,
                                tl_plan_result *chosen);
/* A stage's prediction for the workload rank 0 shared: its passes' compute and IO
 * (stage_s; -1: none, said on stderr), wave passes per block, and the seconds its messages
 * take on the link it sends on (to the next rank; the last rank's logits to rank 0), timed
 * by tl_pipe_measure_link: net_s = messages x latency + bytes / rate. Sends overlap compute,
 * so the stage takes max(stage_s, net_s). Fails only when the link's timing failed (the
 * job must end: a peer may be waiting); a stage without a prediction is said on stderr. */
typedef struct batch_stage_pred {
    double stage_s, passes, net_s, link_bps, link_latency_s;
} batch_stage_pred;
tl_status batch_predict_stage(tl_model *m, const cli_pipe *pp, const tl_plan_request *rq,
                              const tl_batch_params *bp, const char *profile_path,
                              batch_stage_pred *out);
/* --policy auto on a pipeline: this rank's KV placement (the share of its KV pages kept
 * in memory; the weights take what its budget leaves) for the block shape bp that every
 * rank shares, at its own budget and with its host's profile (tl_plan_place on its
 * stage): sets bp->kv_mem_pct and prints the choice. */
tl_status batch_place_stage(tl_model *m, const cli_pipe *pp, const tl_plan_request *rq,
                            tl_batch_params *bp, const char *profile_path);
/* --pipeline-layers auto: sets mp's layer range to the split rank 0 chose (L layers);
 * with place (--policy auto), each range is judged with its own KV placement. */
tl_status batch_split_auto(cli_pipe *pp, const char *model_path, tl_model_params *mp,
                           const tl_batch_params *bp, const tl_plan_request *rq,
                           const char *profile_path, int32_t L, int place);
/* After the run: every rank's prediction and measurement to rank 0, which prints them. */
void batch_report_pipeline(tl_model *m, const cli_pipe *pp, const batch_stage_pred *pred,
                           double elapsed_s, const tl_batch_stats *bs);

#endif
