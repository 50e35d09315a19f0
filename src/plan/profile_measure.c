/* profile_measure.c - measuring the hardware profile (tl_profile_measure, profile.h): the
 * driver. The stages themselves live in profile_disk.c, profile_compute.c and
 * profile_interference.c (profile_measure.h).
 *
 * Six stages in a fixed order, each bounded in time: memory/FMA probes; disk (a scratch
 * file read back over the chunk x depth grid); matmul; interference (matmul while the
 * disk streams, and urgent reads behind that stream); element-wise ops; attention. The
 * order is what the stages read of each other: interference falls back on the disk grid,
 * attention on the FMA peak, the matmul rates and the element-wise cost. The disk stage's
 * file stays open for the interference stage and is closed after it.
 *
 * Memory: the stages run one after another and each frees what it allocated, so the
 * measurement holds at most its largest stage (tl_profile_measure_bytes computes it from
 * the stages' sizes in profile_measure.h). Only the memory probe's buffer scales: 1 GiB
 * where the limit allows, down to PROBE_MIN_BYTES, still far beyond any last-level cache
 * (the cost model does not read mem_read_bps; it is reported beside the benchmarks). The
 * other stages' sizes are what makes their figures mean what the cost model assumes
 * (weights streamed from DRAM, the engine's IO queue settings), so under a smaller limit
 * the measurement is refused.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "plan/profile_measure.h"
#include "plan/profile.h"
#include "base/budget.h"
#include "base/clock.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/probe.h"
#include "format/tensor_type.h"
#include "tier/tier.h"

#define PROBE_MAX_BYTES ((uint64_t)1 << 30)   /* the memory probe's buffer ... */
#define PROBE_MIN_BYTES ((uint64_t)256 << 20) /* ... and its least (8x a 32 MiB LLC) */

/* ---- memory ---- */

static uint64_t huge_round(uint64_t b) { /* what tl_probe_buffer faults in */
    const uint64_t huge = (uint64_t)2 << 20;
    return (b + huge - 1) / huge * huge;
}

/* Bytes of matrix copies, activations and scratch of one matmul stage
 * (tl__profile_measure_matmul, tl__profile_measure_interference): `copies` of an R x C
 * matrix of `type`, products of up to n rows, repacked into panels when `panels`. */
static uint64_t matmul_stage_bytes(tl_type type, uint64_t threads, size_t n, int panels) {
    const uint64_t R = TL__PROF_MM_ROWS, C = TL__PROF_MM_COLS;
    const uint64_t mb = R * tl_type_row_bytes(type, C);
    const uint64_t copies = TL__PROF_MM_MIN_BYTES / mb + 1;
    const uint64_t sf = (tl_matmul_scratch_floats(C, n) + 15) / 16 * 16;
    /* the repacking's one-panel temporary per thread (tl__profile_repack_copies) */
    const uint64_t repack_tmp = panels ? threads * tl_panels_tmp_bytes(type, C) : 0;
    return huge_round(copies * mb) + ((uint64_t)n * C + (uint64_t)n * R + threads * sf + C) * 4 +
           repack_tmp;
}

uint64_t tl_profile_measure_bytes(int32_t n_threads) {
    const uint64_t threads = (uint64_t)tl__profile_threads(n_threads);
    uint64_t peak = PROBE_MIN_BYTES;
#define STAGE(b) do { uint64_t b_ = (b); if (b_ > peak) peak = b_; } while (0)
    /* disk: one buffer of the largest chunk x depth */
    STAGE(tl_prof_chunks[TL_PROF_N_CHUNK - 1] * (uint64_t)tl_prof_depths[TL_PROF_N_DEPTH - 1]);
    for (int t = 0; t < TL_PROF_N_TYPE; t++)
        STAGE(matmul_stage_bytes(tl_type_table[t].type, threads,
                                 (size_t)tl_prof_rows[TL_PROF_N_ROWS - 1],
                                 tl_panels_wanted(tl_type_table[t].type, TL__PROF_MM_ROWS) &&
                                     tl_panels_wanted(tl_type_table[t].type,
                                                      TL__PROF_MM_SMALL_ROWS)));
    /* interference: Q8_0 copies up to TL__PROF_SLOWDOWN_ROWS rows, the attention's K and V,
     * and the reader's buffer */
    STAGE(matmul_stage_bytes(TL_TYPE_Q8_0, threads, TL__PROF_SLOWDOWN_ROWS,
                             tl_panels_wanted(TL_TYPE_Q8_0, TL__PROF_MM_ROWS)) +
          tl__profile_interference_attn_bytes(threads) + tl__profile_reader_bytes());
    /* attention: the model's weights (resident), its f32 KV, and a margin for the
     * context's activations, logits and the file writer's chunk */
    tl_synth_params sp;
    tl__profile_attention_model(&sp);
    STAGE(tl_synth_file_bytes(&sp) +
          2ull * (uint64_t)sp.n_layer * (TL__PROF_AT_BLOCK_POS + 16) * (uint64_t)sp.n_embd * 4 +
          ((uint64_t)16 << 20));
    tl__profile_attention_gqa_model(&sp);
    STAGE(tl_synth_file_bytes(&sp) +
          2ull * (uint64_t)sp.n_layer * (TL__PROF_AT_BLOCK_POS + 16) *
              (uint64_t)(sp.n_embd / sp.n_head * sp.n_head_kv) * 4 +
          ((uint64_t)16 << 20));
    tl__profile_attention_deep_model(&sp);
    STAGE(tl_synth_file_bytes(&sp) +
          2ull * (uint64_t)sp.n_layer * TL__PROF_AT_DEEP_POS * (uint64_t)sp.n_embd * 4 +
          ((uint64_t)16 << 20));
#undef STAGE
    return peak;
}

tl_status tl_profile_measure(int32_t n_threads, const char *disk_dir, uint64_t mem_limit,
                             void (*progress)(void *user, const char *line), void *user,
                             tl_hw_profile *out) {
    if (!out) return tl_error_set(TL_ERR_INVALID, "profile: no output");
    const uint64_t need = tl_profile_measure_bytes(n_threads);
    if (mem_limit && mem_limit < need)
        return tl_error_set(TL_ERR_NOMEM, "measuring the hardware profile needs %.1f MiB of "
                            "memory, more than the limit of %.1f MiB", tl_mib_up(need),
                            mem_limit / 1048576.0);
    const uint64_t probe = mem_limit && mem_limit < PROBE_MAX_BYTES
                               ? mem_limit / ((uint64_t)2 << 20) * ((uint64_t)2 << 20)
                               : PROBE_MAX_BYTES;
    memset(out, 0, sizeof *out);
    double t_start = tl_now();
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    out->measured_unix = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
    int32_t threads = tl__profile_threads(n_threads);
    out->n_threads = threads;
    tl_profile_machine_key(threads, out->machine, sizeof out->machine);
    if (disk_dir) {
        if (strlen(disk_dir) >= sizeof out->disk_dir)
            return tl_error_set(TL_ERR_INVALID, "profile: directory name too long: %s",
                                disk_dir);
        snprintf(out->disk_dir, sizeof out->disk_dir, "%s", disk_dir);
    } else {
        tl__profile_default_dir(threads, out->disk_dir, sizeof out->disk_dir);
    }
    tl_pool *pool;
    tl_status st = tl_pool_open(threads, &pool);
    if (st != TL_OK) return st;
    tl__profile_say(progress, user, "memory bandwidth and FMA peak (%d threads)", (int)threads);
    out->mem_read_bps = tl_probe_read_bandwidth(pool, (size_t)probe, 5);
    out->fma_flops = tl_probe_fma_peak(pool, 5);
    if (!(out->mem_read_bps > 0) || !(out->fma_flops > 0))
        st = tl_error_set(TL_ERR_NOMEM, "profile: memory probe failed (%.1f MiB buffer)",
                          probe / 1048576.0);
    tl_tier *disk = NULL;
    if (st == TL_OK) st = tl__profile_measure_disk(out->disk_dir, out, progress, user, &disk);
    if (st == TL_OK) st = tl__profile_measure_matmul(pool, out, progress, user);
    if (st == TL_OK) st = tl__profile_measure_interference(pool, disk, out, progress, user);
    tl_tier_close(disk);
    tl_pool_close(pool);
    if (st == TL_OK) {
        tl__profile_say(progress, user, "element-wise ops");
        st = tl__profile_measure_elementwise(out);
    }
    if (st == TL_OK)
        st = tl__profile_measure_attention(threads, out->disk_dir, out, progress, user);
    if (st != TL_OK) return st;
    out->profile_seconds = tl_now() - t_start;
    tl_error_clear();
    return TL_OK;
}
