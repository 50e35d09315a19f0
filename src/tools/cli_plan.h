/* cli_plan.h - policies on the command line (cli_plan.c). */
#ifndef TL_TOOLS_CLI_PLAN_H
#define TL_TOOLS_CLI_PLAN_H

#include <stdio.h>
#include "plan/search.h"

/* The profile for this model's thread count: `profile_path` if given, else the cached
 * one for this machine, else measured now (saying so on stderr) within the model's
 * --mem-budget, or refused before measuring when the budget is too small for that. */
tl_status cli_profile(const tl_model *m, const char *profile_path, tl_hw_profile *prof);

/* Streams the weights from a converted copy (exec/panel_copy.h), saying on stderr, after
 * `who`, whether it was written or reused. */
tl_status cli_use_weights_copy(tl_model *m, const char *who);

void cli_print_policy(FILE *f, const char *label, const tl_plan_result *r);
void cli_print_prediction(FILE *f, const char *label, const tl_plan_result *r,
                          const tl_workload *w);

/* A measurement to print beside a prediction; a negative value is "not measured". */
/* What a run measured, beside the plan's prediction; a term the run does not measure is
 * CLI_NOT_MEASURED and prints as a prediction only. */
#define CLI_NOT_MEASURED (-1.0)
typedef struct cli_measured {
    double wall_s, passes, compute_s, io_busy_s;
    double weight_bytes, kv_read_bytes, kv_write_bytes;
    double kv_wait_s; /* compute waiting for KV pages */
    double repack_s;  /* of compute: repacking streamed weights into panels on arrival */
} cli_measured;
/* Every term CLI_NOT_MEASURED. */
static inline cli_measured cli_measured_none(void) {
    cli_measured m = {CLI_NOT_MEASURED, CLI_NOT_MEASURED, CLI_NOT_MEASURED, CLI_NOT_MEASURED,
                      CLI_NOT_MEASURED, CLI_NOT_MEASURED, CLI_NOT_MEASURED, CLI_NOT_MEASURED,
                      CLI_NOT_MEASURED};
    return m;
}
void cli_print_terms(FILE *f, const char *phase, const tl_cost_terms *pred, double pred_wall,
                     double pred_passes, const cli_measured *meas);

#endif
