/* calibrate.h - checking the profile's disk figures against the model file itself.
 *
 * The profile measures a temporary file on the disk; the model file may sit on another
 * device or behind another cache (a virtual disk backed by the host's page cache reads
 * a file it has seen at several times the speed of a fresh one). Before planning, a few
 * hundred MiB of the model file are read the way the engine reads weights (O_DIRECT,
 * its chunk size and queue depth, through its IO queue), and every read figure of the
 * profile is scaled by measured / profiled bandwidth at that chunk and depth. It costs
 * a fraction of a second and nothing is kept in memory.
 */
#ifndef TL_PLAN_CALIBRATE_H
#define TL_PLAN_CALIBRATE_H

#include "profile.h"
#include "../model/llama.h"

/* Reads up to `bytes` of the model file (spread over it); *measured_bps and *ratio
 * (measured / profiled) are filled; the profile's read grid is scaled by ratio. */
tl_status tl_plan_calibrate_disk(tl_model *m, uint64_t bytes, tl_hw_profile *prof,
                                 double *measured_bps, double *ratio);

#endif
