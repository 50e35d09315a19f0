/* calibrate.c - see calibrate.h. */
#include "calibrate.h"
#include "../base/status.h"
#include "../exec/residency.h"

tl_status tl_plan_calibrate_disk(tl_model *m, tl_hw_profile *prof, double *measured_bps,
                                 double *ratio) {
    *measured_bps = 0;
    *ratio = 1;
    if (!m->res) return tl_error_set(TL_ERR_INVALID, "calibrating the disk: nothing placed");
    double seconds = 0;
    uint64_t bytes = 0;
    tl_status st = tl_residency_measure_io(m->res, &seconds, &bytes);
    if (st) return tl_error_wrap(st, "calibrating the disk on the model file");
    if (bytes < ((uint64_t)8 << 20) || seconds <= 0) return TL_OK;
    *measured_bps = (double)bytes / seconds;
    *ratio = *measured_bps / tl_profile_read_bps(prof, m->params.io_chunk_bytes,
                                                 m->params.io_queue_depth);
    /* only what was measured: requests of the engine's chunk size and larger (KV pages
     * are small reads; a cache that speeds up long streams need not speed them up) */
    for (int c = 0; c < TL_PROF_N_CHUNK; c++)
        if (tl_prof_chunks[c] >= m->params.io_chunk_bytes)
            for (int d = 0; d < TL_PROF_N_DEPTH; d++) prof->disk_read_bps[c][d] *= *ratio;
    return TL_OK;
}
