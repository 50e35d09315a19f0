/* calibrate.c - see calibrate.h. */
#include "plan/calibrate.h"

#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "base/cache_dir.h"
#include "exec/model_handle.h"
#include "plan/cost.h"
#include "plan/search.h"
#include "base/budget.h"
#include "base/clock.h"
#include "base/stats.h"
#include "base/status.h"
#include "exec/residency.h"
#include "format/tensor_type.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/flash_layout.h"
#include "model/ops.h"
#include "model/placement.h"
#include "tier/aio.h"
#include "tier/tier.h"

#define CALIBRATE_PASS_BYTES ((uint64_t)192 << 20)
/* whole passes timed together: at least this many bytes, and samples taken while they
 * have taken under CALIBRATE_SAMPLES_S: a run's passes read at the disk's rate over
 * seconds, which a few samples of a few chunks' time each do not pin down */
#define CALIBRATE_SAMPLE_BYTES ((uint64_t)128 << 20)
#define CALIBRATE_SAMPLES_S 1.0
/* samples of CALIBRATE_PASS_BYTES of a larger pass: at most this many (each costs that IO) */
#define CALIBRATE_LARGE_SAMPLES 5
/* streamed bytes per pass up to which a pass is read once before the samples */
#define CALIBRATE_WARM_BYTES ((uint64_t)1 << 30)

/* Flash layout: streamed sites' reads are timed for about FLASH_PROBE_S (or one pass over
 * them, if shorter). */
#define FLASH_PROBE_S 0.5

static double decode_share(void *user, int32_t layer, int site) {
    return tl_cost_flash_need_share(user, layer, site, 1);
}

/* A flash file whose streamed sites are read at their turn, with (nearly) nothing in the
 * ring: the sites' runs read as a decode step reads them (tl_residency_measure_flash, each
 * channel needed at the share the cost model prices; the engine's gap, cuts and queue),
 * into the site buffer. Such requests lie a few runs apart, where a random read of the
 * same size would not, and the disk serves the two at different rates. The whole disk
 * grid is scaled so that its figure at their mean size is the rate measured. No room in
 * the budget for the channel list: not measured. */
static tl_status calibrate_flash(tl_model *m, tl_hw_profile *prof, double *measured_bps,
                                 double *ratio) {
    if (!m->lm.flash || !tl_weight_plan_site_buf_bytes(&m->lm, tl_residency_plan(m->res)))
        return TL_OK;
    const int32_t depth = m->lm.params.io_queue_depth > TL_FLASH_MIN_QUEUE_DEPTH
                              ? m->lm.params.io_queue_depth : TL_FLASH_MIN_QUEUE_DEPTH;
    uint64_t widest = 0;
    for (int32_t l = m->lm.stage_first; l < m->lm.stage_end; l++)
        for (int s = 0; s < TL_SITE_COUNT; s++)
            if (m->lm.layers[l].site[s].rows > widest) widest = m->lm.layers[l].site[s].rows;
    int32_t *chan;
    if (tl_budget_alloc(m->lm.budget, (size_t)widest * sizeof *chan, 64,
                        "flash read calibration", (void **)&chan)) {
        tl_error_clear(); /* no room: not measured, not an error */
        return TL_OK;
    }
    double seconds = 0;
    uint64_t bytes = 0, reads = 0;
    tl_status st = tl_residency_measure_flash(m->res, decode_share, m, FLASH_PROBE_S, chan,
                                              &seconds, &bytes, &reads);
    tl_budget_free(m->lm.budget, chan);
    if (st) return tl_error_wrap(st, "calibrating the disk on the model file");
    if (!reads || !(seconds > 0)) return TL_OK;
    const double bps = (double)bytes / seconds, before =
        tl_profile_read_bps(prof, bytes / reads, depth);
    if (!(bps > 0) || !(before > 0)) return TL_OK;
    *measured_bps = bps;
    *ratio = bps / before;
    return tl_profile_set_read_bps(prof, bytes / reads, depth, bps);
}

/* A token embedding left on disk is read in groups of rows (urgent reads in flight
 * together, waited for at once) as each pass begins: the latency of small reads, which
 * the disk grid's cells, scaled for streams or for KV pages beside them, do not give.
 * EMBD_SAMPLES single rows are timed, then as many full groups (tl_weight_embd_read_rows)
 * at other rows; a group of one row is the single row's figure, and with room in the
 * budget for one row but not a group, only the single row is timed (no room at all:
 * nothing measured). */
#define EMBD_SAMPLES 32
static tl_status calibrate_embedding(tl_model *m, tl_hw_profile *prof) {
    prof->embd_row_s = prof->embd_group_s = 0;
    const tl_weight *w = &m->lm.tok_embd;
    if (w->data || !w->name) return TL_OK;
    int32_t K = tl_weight_embd_read_rows(&m->lm);
    float *rows = NULL;
    if (tl_budget_alloc(m->lm.budget, (size_t)K * w->cols * sizeof(float), 64,
                        "embedding rows", (void **)&rows)) {
        tl_error_clear(); /* no room for a group: one row, else not measured */
        K = 1;
        if (tl_budget_alloc(m->lm.budget, (size_t)w->cols * sizeof(float), 64,
                            "embedding row", (void **)&rows)) {
            tl_error_clear();
            return TL_OK;
        }
    }
    double one = 0, group = 0;
    tl_status st = tl_residency_measure_embedding(m->res, EMBD_SAMPLES, 1, 0, rows, &one);
    if (!st && K > 1)
        st = tl_residency_measure_embedding(m->res, EMBD_SAMPLES, K, EMBD_SAMPLES, rows, &group);
    tl_budget_free(m->lm.budget, rows);
    if (st) return tl_error_wrap(st, "calibrating the embedding's reads");
    prof->embd_row_s = one;
    prof->embd_group_s = tl_weight_embd_read_rows(&m->lm) == 1 ? one : group; /* 0: untimed */
    return TL_OK;
}

tl_status tl_plan_calibrate_disk(tl_model *m, tl_hw_profile *prof, double *measured_bps,
                                 double *ratio) {
    *measured_bps = 0;
    *ratio = 1;
    prof->ring_unit_delay_s = 0; /* tl_plan_calibrate_ring's, for these rates */
    prof->n_disk_spread = 0;
    prof->io_rate_scale = 0;
    if (!m->res) return tl_error_set(TL_ERR_INVALID, "calibrating the disk: nothing placed");
    tl_status est = calibrate_embedding(m, prof);
    if (est) return est;
    /* several passes (at least 3 and 512 MiB, at most CALIBRATE_LARGE_SAMPLES), each over
     * the streamed units up to CALIBRATE_PASS_BYTES from where the pass before stopped:
     * the disk's rate wanders from one pass over the same file to the next, and the median
     * pass is what a run of many passes sees. At least 3, so that one pass cannot decide:
     * of 2 passes the median is their mean, and a single fast pass pulls it, and every
     * prediction, too short. The cap keeps this a fixed cost however much streams. */
    double rate[TL_PROF_N_SPREAD];
    int n = 0, cursor = 0;
    uint64_t total = 0;
    /* a pass that fits in a sample is timed as decode takes it: whole passes through the
     * ring (tl_residency_measure_passes), whose read-ahead stops at the next pass's layers
     * and at the ring's buffers; a stream of small units kept back to back reads faster
     * than that. A pass too small to fill the queue once is timed so too, many to a
     * sample: its time is mostly its few reads' latency, from wherever the file is (a
     * small file is often in a cache the profile's own file was not), and the rate it
     * gives is the one every pass of this plan reads at */
    const tl_weight_plan *wp = tl_residency_plan(m->res);
    const uint64_t per_pass = wp->streamed_bytes;
    if (!m->lm.flash && wp->overlap && per_pass > 0 && per_pass <= CALIBRATE_PASS_BYTES) {
        const int n_passes = (int)((CALIBRATE_SAMPLE_BYTES + per_pass - 1) / per_pass);
        double spent = 0; /* 3 samples, up to 9 while they stay short (a slow build: fewer) */
        /* one pass untimed first: the samples read what was read a pass before, as the
         * run's later passes do (below) */
        double warm_s = 0;
        uint64_t warm_b = 0;
        tl_status wst = tl_residency_measure_passes(m->res, 1, NULL, NULL, &warm_s, &warm_b);
        if (wst) return tl_error_wrap(wst, "calibrating the disk on the model file");
        while (n < 3 || (n < TL_PROF_N_SPREAD && spent < CALIBRATE_SAMPLES_S)) {
            double seconds = 0;
            uint64_t bytes = 0;
            const double t0 = tl_now();
            tl_status st =
                tl_residency_measure_passes(m->res, n_passes, NULL, NULL, &seconds, &bytes);
            if (st) return tl_error_wrap(st, "calibrating the disk on the model file");
            if (bytes == 0 || seconds <= 0) break;
            rate[n++] = (double)bytes / seconds;
            spent += tl_now() - t0;
        }
    }
    /* the engine reads the same streamed units every pass, so from its second pass on it
     * reads what it read one pass before: the samples below are taken so, after one
     * untimed pass over them (up to CALIBRATE_WARM_BYTES; beyond that a host's cache is
     * unlikely to hold a pass, and the samples read as the run's passes do, cold). A
     * first read of a file the host has not served lately runs at a fraction of the
     * rate of every later pass. */
    if (n == 0 && !m->lm.flash && per_pass > 0 && per_pass <= CALIBRATE_WARM_BYTES) {
        uint64_t warmed = 0;
        int warm_cursor = 0;
        while (warmed < per_pass) {
            double seconds = 0;
            uint64_t bytes = 0;
            const uint64_t left = per_pass - warmed; /* up to the pass's end, not on */
            tl_status st = tl_residency_measure_io(
                m->res, left < CALIBRATE_PASS_BYTES ? left : CALIBRATE_PASS_BYTES,
                &warm_cursor, &seconds, &bytes);
            if (st) return tl_error_wrap(st, "calibrating the disk on the model file");
            if (bytes < ((uint64_t)8 << 20)) break; /* too little streams to sample */
            warmed += bytes;
        }
    }
    while (n == 0 ||
           (total > 0 && n < CALIBRATE_LARGE_SAMPLES && (n < 3 || total < ((uint64_t)512 << 20)))) {
        double seconds = 0;
        uint64_t bytes = 0;
        tl_status st = tl_residency_measure_io(m->res, CALIBRATE_PASS_BYTES, &cursor, &seconds,
                                                 &bytes);
        if (st) return tl_error_wrap(st, "calibrating the disk on the model file");
        if ((bytes < ((uint64_t)8 << 20) || seconds <= 0) && !n)
            return calibrate_flash(m, prof, measured_bps, ratio);
        if (bytes < ((uint64_t)8 << 20) || seconds <= 0) break; /* the samples taken stand */
        rate[n++] = (double)bytes / seconds;
        total += bytes;
    }
    double sorted[TL_PROF_N_SPREAD];
    memcpy(sorted, rate, (size_t)n * sizeof *rate);
    *measured_bps = tl_median(sorted, (size_t)n);
    /* each sample's rate over the median, within [1/2, 2]: a sample further off is a stall
     * or a pass out of a cache, not a rate the run's many passes keep */
    for (int i = 0; i < n; i++)
        prof->disk_spread[i] = fmin(2, fmax(0.5, rate[i] / *measured_bps));
    prof->n_disk_spread = n;
    *ratio = *measured_bps / tl_profile_read_bps(prof, m->lm.params.io_chunk_bytes,
                                                 m->lm.params.io_queue_depth);
    /* the stream beside which the profile timed its slowdowns read at its own rate, not
     * always at the grid's figure (another request size, another minute of the disk) */
    prof->io_rate_scale = prof->io_stream_bps > 0 ? *measured_bps / prof->io_stream_bps : *ratio;
    /* only what was measured: requests of the engine's chunk size and larger (KV pages
     * are small reads; a cache that speeds up long streams need not speed them up) */
    tl_profile_scale_reads(prof, m->lm.params.io_chunk_bytes, 1, *ratio);
    return TL_OK;
}

/* Resident matrices timed per calibration: enough to stream from DRAM, not from cache. */
#define COMPUTE_MIN_BYTES ((uint64_t)128 << 20)
#define COMPUTE_MAX_BYTES ((uint64_t)384 << 20)
/* Less than COMPUTE_MIN_BYTES resident: the model's products are timed in pass order
 * (small_model_products), all of them when at most this many bytes stream per pass, else
 * the units of the pass's first this many bytes (each unit is read three times) */
#define SMALL_MODEL_STREAM_BYTES ((uint64_t)64 << 20)
#define SMALL_MODEL_PASSES 3
/* passes over the resident matrices, at 1 row and at 4, the median of each kept */
#define COMPUTE_PASSES 7

/* The share of a flash-layout site tensor's channels a decode step needs, as the cost
 * model prices it (tl_cost_flash_need_share); -1 when w is no site tensor. */
static double decode_share_of(const tl_model *m, const tl_weight *w) {
    for (int32_t l = m->lm.stage_first; l < m->lm.stage_end; l++)
        for (int s = 0; s < TL_SITE_COUNT; s++)
            if (&m->lm.layers[l].site[s] == w) return tl_cost_flash_need_share(m, l, s, 1);
    return -1;
}

/* A site tensor's channels a decode step multiplies: each kept at decode_share_of's
 * share, drawn from a seed of its own, into chan; returns their count. */
static size_t decode_channels(const tl_model *m, const tl_weight *w, int32_t *chan) {
    uint64_t seed = w->file_offset;
    return tl_flash_draw_channels(w->rows, decode_share_of(m, w), &seed, chan);
}

/* One pass over the matrices, each as decode multiplies it: a flash-layout site tensor by
 * column products over the channels a decode step needs (decode_channels; *predicted, when
 * not NULL, gets the cost model's price, the dense product's times the share), the
 * others by the matrix-vector kernel. The products' time, without choosing channels. */
static double decode_products_pass(tl_model *m, const tl_hw_profile *prof,
                                   tl_weight *const *use, size_t n, int32_t rows,
                                   const float *X, float *Y, int32_t *chan, float *scratch,
                                   size_t sf, double *predicted) {
    double t = 0;
    for (size_t i = 0; i < n; i++) {
        const tl_weight *w = use[i];
        double share = 1;
        if (w->runs) {
            const size_t len = w->cols, nc = decode_channels(m, w, chan);
            float *const Ys[1] = {Y};
            share = (double)nc / (double)w->rows;
            const double t0 = tl_now();
            tl_op_runs_multiply(&m->lm, w, w->data, 0, chan, nc, X, w->rows, 1, Ys, &len, 1,
                                scratch, sf, 0);
            t += tl_now() - t0;
        } else {
            const double t0 = tl_now();
            tl_op_matmul(&m->lm, w, X, rows, Y, scratch, sf);
            t += tl_now() - t0;
        }
        if (predicted) *predicted += tl_cost_matmul(prof, w, rows) * share;
    }
    return t;
}

int tl__calibrate_buffers(tl_model *m, size_t n, size_t rows, size_t cols, const char *what,
                          float **X, float **Y, float **scratch, size_t *sf) {
    const size_t threads = (size_t)tl_pool_threads(m->lm.pool);
    *sf = (tl_matmul_scratch_floats(cols, n) + 15) / 16 * 16;
    *X = *Y = *scratch = NULL;
    if (tl_budget_calloc(m->lm.budget, n * cols * sizeof(float), what, (void **)X) ||
        tl_budget_calloc(m->lm.budget, n * rows * sizeof(float), what, (void **)Y) ||
        tl_budget_calloc(m->lm.budget, threads * *sf * sizeof(float), what, (void **)scratch)) {
        tl_budget_free(m->lm.budget, *X), tl_budget_free(m->lm.budget, *Y);
        tl_budget_free(m->lm.budget, *scratch);
        tl_error_clear();
        return 0;
    }
    return 1;
}

void tl__calibrate_free(tl_model *m, float *X, float *Y, float *scratch) {
    tl_budget_free(m->lm.budget, X), tl_budget_free(m->lm.budget, Y);
    tl_budget_free(m->lm.budget, scratch);
}

void tl__calibrate_kv_params(const tl_model *m, int32_t layers, int32_t max_tokens,
                             int32_t max_block, int32_t page_tokens, tl_kv_params *kp) {
    const tl_llama_hparams *hp = &m->lm.hp;
    memset(kp, 0, sizeof *kp);
    kp->n_layer = layers;
    kp->kv_dim = hp->n_head_kv * hp->head_dim;
    kp->head_dim = hp->head_dim;
    kp->page_tokens = page_tokens;
    kp->bits = 32;
    kp->kv_mem_pct = 100;
    kp->max_seqs = 1;
    kp->max_tokens = max_tokens;
    kp->max_block = max_block;
    kp->attn_window = hp->n_swa;
}

/* Every pool thread in a task at once: the pool awake, as a run's products find it. */
typedef struct pool_barrier { atomic_int arrived; int n; } pool_barrier;
static void barrier_task(void *arg, int task, int thread) {
    (void)task, (void)thread;
    pool_barrier *b = arg;
    atomic_fetch_add(&b->arrived, 1);
    /* a thread still asleep needs a core to wake on: give it one */
    while (atomic_load(&b->arrived) < b->n) sched_yield();
}

/* A model's decode products in pass order (units 0..n_layer: each layer's products, then
 * the output's), each streamed unit first read into the ring on its own (borrowed, not
 * timed), as a pass meets them: where the model's weights fit in the caches they are
 * multiplied from there, which the profile's figures, timed beyond the caches, do not know,
 * and a unit just read is multiplied as the run multiplies it. The units up to the one
 * that brings their weights to `cap` bytes, each product at small_model_rows[r] rows while
 * its unit is borrowed. measured[r]: those products' time in one pass (each its fastest
 * of SMALL_MODEL_PASSES); predicted[r]: the profile's price of them. A flash or neuron
 * layout, or no room in the budget for the buffers: nothing measured (0). */
/* the product rows the compute calibration times: one, and the most the 4-row rates cover */
enum { COMPUTE_ROWS4 = 4 };
static const int32_t small_model_rows[2] = {1, COMPUTE_ROWS4};
static tl_status small_model_products(tl_model *m, const tl_hw_profile *prof, uint64_t cap,
                                      double measured[2], double predicted[2]) {
    measured[0] = measured[1] = predicted[0] = predicted[1] = 0;
    const int32_t L = m->lm.hp.n_layer;
    if (m->lm.flash || m->lm.stage_first != 0 || m->lm.stage_end != L) return TL_OK;
    const tl_weight *out = m->lm.tied_output ? NULL : &m->lm.output;
    size_t max_rows = out ? out->rows : 0, max_cols = out ? out->cols : 0;
    for (int32_t l = 0; l < L; l++) {
        tl_weight *ws[TL_WEIGHT_UNIT_MAX];
        if (m->lm.layers[l].neurons.name) return TL_OK;
        for (int part = 0; part < 2; part++) {
            const int n = tl_llama_layer_matrices(&m->lm.layers[l], part, ws);
            for (int i = 0; i < n; i++) {
                if (ws[i]->rows > max_rows) max_rows = ws[i]->rows;
                if (ws[i]->cols > max_cols) max_cols = ws[i]->cols;
            }
        }
    }
    const size_t threads = (size_t)tl_pool_threads(m->lm.pool);
    float *X, *Y, *scratch;
    size_t sf;
    if (!tl__calibrate_buffers(m, (size_t)small_model_rows[1], max_rows, max_cols,
                               "compute calibration", &X, &Y, &scratch, &sf))
        return TL_OK;
    /* each product's fastest of the passes: a product that meets a slow spell of the
     * machine (the host taking a core, another thread's burst) is not its rate, and a
     * small model's whole pass is short enough for a few such spells to be most of it */
    const size_t slots = (size_t)L * TL_WEIGHT_UNIT_MAX + 1;
    double *best = malloc(2 * slots * sizeof *best); /* [r * slots + product] */
    double price[2] = {0, 0};
    if (!best) {
        tl__calibrate_free(m, X, Y, scratch);
        return TL_OK; /* nothing measured */
    }
    for (size_t c = 0; c < (size_t)small_model_rows[1] * max_cols; c++) X[c] = 1.0f;
    tl_status st = TL_OK;
    int32_t n_products = 0;
    for (int pass = 0; pass < SMALL_MODEL_PASSES && !st; pass++) {
        uint64_t bytes = 0;
        for (int32_t u = 0, k = 0; u <= L && !st && bytes < cap; u++, n_products = k) {
            tl_weight *ws[TL_WEIGHT_UNIT_MAX];
            int n = 0;
            if (u < L) {
                n = tl_llama_layer_matrices(&m->lm.layers[u], 0, ws);
                n += tl_llama_layer_matrices(&m->lm.layers[u], 1, ws + n);
            } else if (out) {
                ws[n++] = (tl_weight *)out;
            }
            if (!n || (st = tl_residency_borrow(m->res, u))) continue;
            /* a borrowed unit's read may have left the pool's threads asleep; a run's
             * products, read ahead, find them awake */
            pool_barrier b = {0, (int)threads};
            tl_pool_run(m->lm.pool, (int)threads, barrier_task, &b);
            for (int i = 0; i < n; i++, k++) {
                for (int r = 0; r < 2; r++) {
                    const double t0 = tl_now();
                    tl_op_matmul(&m->lm, ws[i], X, small_model_rows[r], Y, scratch, sf);
                    const double dt = tl_now() - t0;
                    double *b_k = &best[(size_t)r * slots + (size_t)k];
                    if (!pass) price[r] += tl_cost_matmul(prof, ws[i], small_model_rows[r]);
                    if (!pass || dt < *b_k) *b_k = dt;
                }
                bytes += ws[i]->file_bytes;
            }
            tl_residency_unborrow(m->res, u);
        }
    }
    tl__calibrate_free(m, X, Y, scratch);
    if (st) {
        free(best);
        return tl_error_wrap(st, "calibrating compute: reading a layer");
    }
    for (int r = 0; r < 2; r++) {
        double sum = 0;
        for (int32_t k = 0; k < n_products; k++) sum += best[(size_t)r * slots + (size_t)k];
        measured[r] = sum;
        predicted[r] = price[r];
    }
    free(best);
    return TL_OK;
}

/* The memory-bound products (up to 4 rows, the matrix-vector kernel on one group) follow
 * the ratios measured at 1 row (r1) and 4 rows (r4; 2 rows their geometric mean): a
 * spell of faster or slower memory moves a 1-row product by more than a 4-row one, whose
 * kernel does four rows' arithmetic on each weight it reads. Larger ones re-read their
 * weights from cache, so a ratio measured on 1-row products does not carry over, and they
 * keep their figures. */
static void scale_matvec(tl_hw_profile *prof, double r1, double r4) {
    for (int ty = 0; ty < TL_PROF_N_TYPE; ty++)
        for (int r = 0; r < TL_PROF_N_ROWS; r++)
            if (tl_prof_rows[r] <= 4) {
                const double ratio = tl_prof_rows[r] == 1   ? r1
                                     : tl_prof_rows[r] == 4 ? r4
                                                            : sqrt(r1 * r4);
                prof->matmul_macs[ty][r] /= ratio;
                prof->matmul_call_s[ty][r] *= ratio;
            }
}

tl_status tl_plan_calibrate_compute(tl_model *m, tl_hw_profile *prof, double *ratio) {
    *ratio = 1;
    if (!m->res) return tl_error_set(TL_ERR_INVALID, "calibrating compute: nothing placed");
    tl_weight *const *all = m->lm.all, **use = malloc(m->lm.n_all * sizeof *use);
    size_t n = 0, max_rows = 0, max_cols = 0;
    uint64_t bytes = 0;
    if (!use) return TL_OK; /* nothing measured */
    for (size_t i = 0; i < m->lm.n_all && bytes < COMPUTE_MAX_BYTES; i++) {
        tl_weight *w = all[i];
        if (!w->data || w->convert || w->rows < 2 || w->cols < 2 || w == &m->lm.tok_embd) continue;
        if (w->runs && decode_share_of(m, w) < 0) continue; /* a FFN by neuron: its own op */
        use[n++] = w;
        bytes += tl_type_row_bytes(w->type, w->cols) * w->rows;
        if (w->rows > max_rows) max_rows = w->rows;
        if (w->cols > max_cols) max_cols = w->cols;
    }
    if (bytes < COMPUTE_MIN_BYTES) { /* too little resident to stream from DRAM */
        free(use);
        const uint64_t cap = tl_residency_plan(m->res)->streamed_bytes > SMALL_MODEL_STREAM_BYTES
                                 ? SMALL_MODEL_STREAM_BYTES : UINT64_MAX;
        double measured[2], predicted[2];
        tl_status st = small_model_products(m, prof, cap, measured, predicted);
        if (st || !(measured[0] > 0) || !(predicted[0] > 0)) return st;
        *ratio = measured[0] / predicted[0];
        scale_matvec(prof, *ratio,
                     measured[1] > 0 && predicted[1] > 0 ? measured[1] / predicted[1] : *ratio);
        return TL_OK;
    }
    const size_t threads = (size_t)tl_pool_threads(m->lm.pool);
    /* a site tensor's rows are its channels, its columns its outputs: every buffer sized
     * for the wider of the two */
    const size_t wide = max_rows > max_cols ? max_rows : max_cols;
    /* 1 row, then ROWS4 rows (not for a flash layout's column products: one row each) */
    enum { ROWS4 = COMPUTE_ROWS4 };
    int flash = 0;
    for (size_t i = 0; i < n; i++) flash |= use[i]->runs != 0;
    size_t sf = tl_matmul_scratch_floats(max_cols, ROWS4);
    if (tl_colmat_scratch_floats(wide, 1) > sf) sf = tl_colmat_scratch_floats(wide, 1);
    sf = (sf + 15) / 16 * 16;
    float *X = NULL, *Y = NULL, *scratch = NULL;
    int32_t *chan = NULL;
    const size_t xy = ROWS4 * wide * sizeof(float);
    /* from the budget like everything else; if it has no room, nothing is measured */
    if (tl_budget_calloc(m->lm.budget, xy, "compute calibration", (void **)&X) ||
        tl_budget_calloc(m->lm.budget, xy, "compute calibration", (void **)&Y) ||
        tl_budget_calloc(m->lm.budget, threads * sf * sizeof(float), "compute calibration",
                         (void **)&scratch) ||
        tl_budget_alloc(m->lm.budget, wide * sizeof *chan, 64, "compute calibration",
                        (void **)&chan)) {
        tl_budget_free(m->lm.budget, X), tl_budget_free(m->lm.budget, Y);
        tl_budget_free(m->lm.budget, scratch);
        tl_error_clear();
        free(use);
        return TL_OK;
    }
    for (size_t c = 0; c < ROWS4 * wide; c++) X[c] = 1.0f; /* no zero for column products */
    double predicted = 0, predicted4 = 0, t[COMPUTE_PASSES], t4[COMPUTE_PASSES];
    for (int r = 0; r < COMPUTE_PASSES; r++)
        t[r] = decode_products_pass(m, prof, use, n, 1, X, Y, chan, scratch, sf,
                                    r ? NULL : &predicted);
    for (int r = 0; r < COMPUTE_PASSES && !flash; r++)
        t4[r] = decode_products_pass(m, prof, use, n, ROWS4, X, Y, chan, scratch, sf,
                                     r ? NULL : &predicted4);
    tl_budget_free(m->lm.budget, X), tl_budget_free(m->lm.budget, Y), tl_budget_free(m->lm.budget, scratch);
    tl_budget_free(m->lm.budget, chan);
    free(use);
    const double measured = tl_median(t, COMPUTE_PASSES),
                 measured4 = flash ? 0 : tl_median(t4, COMPUTE_PASSES);
    if (predicted <= 0 || measured <= 0) return TL_OK;
    *ratio = measured / predicted;
    scale_matvec(prof, *ratio, predicted4 > 0 && measured4 > 0 ? measured4 / predicted4 : *ratio);
    return TL_OK;
}
