/* calibrate.c - see calibrate.h. */
#include "calibrate.h"
#include "../base/status.h"
#include "../exec/residency.h"

tl_status tl_plan_calibrate_disk(tl_model *m, tl_hw_profile *prof, double *measured_bps,
                                 double *ratio) {
    *measured_bps = 0;
    *ratio = 1;
    if (!m->res) return tl_error_set(TL_ERR_INVALID, "calibrating the disk: nothing placed");
    /* several passes (at least 2 and 512 MiB, at most 5): the disk's rate wanders, and
     * the median pass is what a run of many passes sees */
    double rate[5];
    int n = 0;
    uint64_t total = 0;
    while (n < 5 && (n < 2 || total < ((uint64_t)512 << 20))) {
        double seconds = 0;
        uint64_t bytes = 0;
        tl_status st = tl_residency_measure_io(m->res, &seconds, &bytes);
        if (st) return tl_error_wrap(st, "calibrating the disk on the model file");
        if (bytes < ((uint64_t)8 << 20) || seconds <= 0) return TL_OK;
        rate[n++] = (double)bytes / seconds;
        total += bytes;
    }
    for (int i = 1; i < n; i++) /* insertion sort, n <= 5 */
        for (int j = i; j > 0 && rate[j] < rate[j - 1]; j--) {
            double t = rate[j];
            rate[j] = rate[j - 1];
            rate[j - 1] = t;
        }
    *measured_bps = rate[n / 2];
    *ratio = *measured_bps / tl_profile_read_bps(prof, m->params.io_chunk_bytes,
                                                 m->params.io_queue_depth);
    /* only what was measured: requests of the engine's chunk size and larger (KV pages
     * are small reads; a cache that speeds up long streams need not speed them up) */
    for (int c = 0; c < TL_PROF_N_CHUNK; c++)
        if (tl_prof_chunks[c] >= m->params.io_chunk_bytes)
            for (int d = 0; d < TL_PROF_N_DEPTH; d++) prof->disk_read_bps[c][d] *= *ratio;
    /* cumulative: a second calibration measures against the already scaled figures */
    prof->io_stream_ratio = (prof->io_stream_ratio > 0 ? prof->io_stream_ratio : 1) * *ratio;
    return TL_OK;
}
