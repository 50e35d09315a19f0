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
/* This stage's predicted seconds (out[0]; -1: none, said on stderr) and wave passes per
 * block (out[1]) for the workload rank 0 shared. */
void batch_predict_stage(tl_model *m, const cli_pipe *pp, const tl_plan_request *rq,
                         const tl_batch_params *bp, const char *profile_path, double out[2]);
/* --pipeline-layers auto: sets mp's layer range to the split rank 0 chose (L layers). */
tl_status batch_split_auto(cli_pipe *pp, const char *model_path, tl_model_params *mp,
                           const tl_batch_params *bp, const tl_plan_request *rq,
                           const char *profile_path, int32_t L);
/* After the run: every rank's prediction and measurement to rank 0, which prints them. */
void batch_report_pipeline(tl_model *m, const cli_pipe *pp, const double pred[2],
                           double elapsed_s, const tl_batch_stats *bs);

#endif
