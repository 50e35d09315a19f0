/* calibrate.c - see calibrate.h. */
#include <stdlib.h>
#include <string.h>
#include "calibrate.h"
#include "../base/clock.h"
#include "../base/status.h"
#include "../tier/aio.h"
#include "../tier/tier.h"

#define REGION ((uint64_t)16 << 20)

tl_status tl_plan_calibrate_disk(tl_model *m, uint64_t bytes, tl_hw_profile *prof,
                                 double *measured_bps, double *ratio) {
    *measured_bps = 0;
    *ratio = 1;
    const uint64_t size = m->tier->size;
    uint64_t regions = bytes / REGION;
    if (regions < 1) regions = 1;
    if (regions * REGION > size) regions = size / REGION;
    if (regions < 1) return TL_OK; /* a model this small: nothing worth measuring */
    uint8_t *buf = aligned_alloc(4096, REGION);
    if (!buf) return tl_error_set(TL_ERR_NOMEM, "calibrating the disk: out of memory");
    /* the file's tail, where the planner streams from (the value order keeps the first
     * layers' and attention weights resident), read twice: the first pass settles the
     * device and its caches as a run that streams every pass would, the second is timed */
    const uint64_t start = (size - regions * REGION) / 4096 * 4096;
    tl_status st = TL_OK;
    double t0 = 0;
    for (int pass = 0; pass < 2 && !st; pass++) {
        t0 = tl_now();
        for (uint64_t i = 0; i < regions && !st; i++) {
            uint64_t tag = ((uint64_t)1 << 62) + (uint64_t)pass * regions + i; /* unique */
            st = tl_aio_read(m->aio, m->tier, start + i * REGION, buf, REGION, tag);
            if (!st) st = tl_aio_wait(m->aio, tag);
        }
    }
    double dt = tl_now() - t0;
    free(buf);
    if (st) return tl_error_wrap(st, "calibrating the disk on the model file");
    *measured_bps = (double)(regions * REGION) / dt;
    const double profiled = tl_profile_read_bps(prof, m->params.io_chunk_bytes,
                                                m->params.io_queue_depth);
    *ratio = *measured_bps / profiled;
    for (int c = 0; c < TL_PROF_N_CHUNK; c++)
        for (int d = 0; d < TL_PROF_N_DEPTH; d++) prof->disk_read_bps[c][d] *= *ratio;
    return TL_OK;
}
