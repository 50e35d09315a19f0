/* calibrate_kv.c - KV pages as a decode step reads its spill file (tl_plan_calibrate_kv,
 * calibrate.h).
 *
 * A decode step re-reads every disk page of every (sequence, layer) from one spill file,
 * written by prefill moments before. How fast a virtual disk serves that depends on the
 * file's size (which the host's cache may hold), on how recently it was written, and on
 * the order of the reads (the pages of one layer lie in runs of a prefill chunk's pages,
 * which a host's read-ahead follows): the profile's random reads of its own file give
 * none of the three. So a scratch file the size of the run's spill (capped) is written
 * in the spill directory, and its pages are read in a step's order, at the KV reads'
 * depth, in three short samples; the median rate is the page's rate alone. Beside a
 * stream of weights the same pages may read far slower (the host's cache holding the
 * model file and the spill file apart but not together): a step's pages are read between
 * the units of whole passes through the ring and timed against passes alone, and the
 * lower of the two rates is kept (calibrate.h).
 * Layout (kv_cache.c: a page takes the next slot when it goes to disk, at its sequence's
 * commit after a step's forward, layer by layer): step c's disk pages of layer l of
 * sequence s follow those of the sequences before it and of its layers before l, so that
 * page j of (s, l) lies in slot  ((c * S + s) * L + l) * g + j mod g,  c = j / g,
 * g the disk pages a prefill step stores per (sequence, layer).
 */
#include "plan/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include "base/budget.h"
#include "base/cache_dir.h"
#include "base/stats.h"
#include "base/status.h"
#include "exec/model_handle.h"
#include "exec/residency.h"
#include "model/llama.h"
#include "plan/cost.h"
#include "plan/search.h"
#include "tier/aio.h"
#include "tier/read_rate.h"
#include "tier/tier.h"

/* The scratch file: at most this large (a larger spill is timed on this much of its
 * layout: writing it takes seconds), and written only where the filesystem keeps this
 * much free beside it (the run's own spill file needs the room). */
#define SPILL_CAL_MAX_BYTES ((uint64_t)512 << 20)
#define SPILL_CAL_FREE_BYTES ((uint64_t)256 << 20)
/* Each sample reads for up to this long (a step's pages, wrapping); SPILL_CAL_SAMPLES
 * samples, the median kept: one sample of a file just written swings either way. */
#define SPILL_CAL_SAMPLE_S 0.12
#define SPILL_CAL_SAMPLES 3
/* Pages beside the stream: MIX_ROUNDS rounds of a pass alone and a pass with the pages, for
 * a plan that streams at most MIX_PASS_MAX_BYTES a pass (eight passes, a bounded cost). */
#define MIX_ROUNDS 3
#define MIX_PASS_MAX_BYTES ((uint64_t)256 << 20)
/* The most reads listed (a step of a long context over many sequences repeats itself). */
#define SPILL_CAL_MAX_READS ((size_t)1 << 18)

/* The spill a decode step reads: S sequences of L layers, D disk pages each, stored g at
 * a time per (sequence, layer), slots `stride` bytes apart. */
typedef struct spill_shape {
    int64_t S, L, D, g;
    uint64_t stride;
} spill_shape;

static spill_shape spill_shape_of(const tl_model *m, const tl_policy *pol,
                                  const tl_workload *w, uint64_t stride) {
    spill_shape sh = {0};
    const int32_t pt = pol->page_tokens > 0 ? pol->page_tokens : 1;
    const int64_t block = (int64_t)pol->gbs * pol->num_gb;
    sh.S = pol->single ? 1 : (w->num_seqs < block ? w->num_seqs : block);
    sh.L = tl_llama_stage_layers(&m->lm);
    const double full = floor((double)(w->prompt_len + w->gen_len) / pt);
    sh.D = (int64_t)tl_cost_kv_disk_pages(pol, full);
    /* a prefill chunk's rows per sequence (cost.c's block_walk), their full pages, and
     * of those the disk's share */
    int32_t chunk = pol->single ? pol->prefill_rows
                                : (pol->prefill_rows < pol->gbs ? pol->gbs : pol->prefill_rows) /
                                      (pol->gbs > 0 ? pol->gbs : 1);
    const double per_chunk = chunk > pt ? floor((double)chunk / pt) : 1;
    sh.g = full > 0 ? (int64_t)fmax(1, round(per_chunk * (double)sh.D / full)) : 1;
    sh.stride = stride;
    if (sh.S < 1) sh.S = 1;
    return sh;
}

/* Page j of layer l of sequence s: its byte offset in the spill file. */
static uint64_t page_offset(const spill_shape *sh, int64_t s, int64_t l, int64_t j) {
    const int64_t c = j / sh->g;
    return (uint64_t)(((c * sh->S + s) * sh->L + l) * sh->g + j % sh->g) * sh->stride;
}

/* Pages read between the units of a streamed pass (tl_residency_measure_passes' hold):
 * at its i-th streamed unit of n, the pages of the layers up to i L / n, so that a pass
 * reads a step's pages spread over its units as decode does. */
typedef struct mix_reads {
    tl_aio *q;
    tl_tier *file;
    const uint64_t *offs;
    size_t n_offs, per_layer;
    int64_t L, next_layer;
    uint64_t len;
    int32_t depth;
    uint8_t **bufs;
    int units, seen; /* streamed units a pass (counted on a first pass), seen this pass */
    uint64_t bytes;
    tl_status st;
} mix_reads;

static void read_layers(mix_reads *r, int64_t upto) {
    if (upto > r->L) upto = r->L;
    size_t a = (size_t)r->next_layer * r->per_layer, b = (size_t)upto * r->per_layer;
    if (b > r->n_offs) b = r->n_offs;
    r->next_layer = upto;
    uint64_t sub = a, done = a;
    while (!r->st && done < b) {
        while (!r->st && sub < b && sub - done < (uint64_t)r->depth) {
            r->st = tl_aio_read(r->q, r->file, r->offs[sub], r->bufs[sub % (uint64_t)r->depth],
                                (size_t)r->len, sub);
            if (!r->st) sub++;
        }
        if (!r->st && !(r->st = tl_aio_wait(r->q, done))) done++, r->bytes += r->len;
    }
}

static void mix_hold(void *user, int unit) {
    (void)unit;
    mix_reads *r = user;
    r->seen++;
    if (r->units > 0) read_layers(r, (int64_t)r->seen * r->L / r->units);
}

static void count_hold(void *user, int unit) {
    (void)unit;
    ((mix_reads *)user)->units++;
}

/* Whether dir's filesystem keeps `bytes` free beyond SPILL_CAL_FREE_BYTES. */
static int room_for(const char *dir, uint64_t bytes) {
    struct statvfs v;
    return statvfs(dir, &v) == 0 &&
           (uint64_t)v.f_bavail * (uint64_t)v.f_frsize >= bytes + SPILL_CAL_FREE_BYTES;
}

/* A step's pages read between a streamed pass's units against the pass alone: the
 * median over MIX_ROUNDS rounds of the pages' bytes over the seconds they added to the
 * pass (against the mean of the alone passes on either side); 0 when not timed (an error
 * reading either file is the run's to report, as in time_spill_steps). */
static void time_mixed(tl_model *m, tl_tier *file, const uint64_t *offs, size_t n,
                       size_t per_layer, int64_t L, uint64_t len, int32_t depth,
                       uint8_t **bufs, double *mixed_bps) {
    *mixed_bps = 0;
    const tl_weight_plan *wp = m->res ? tl_residency_plan(m->res) : NULL;
    if (!wp || m->lm.flash || !wp->overlap || wp->streamed_bytes == 0 ||
        wp->streamed_bytes > MIX_PASS_MAX_BYTES)
        return;
    tl_aio_params ap = tl_aio_default_params();
    ap.chunk_bytes = (size_t)len;
    ap.queue_depth = depth;
    mix_reads r = {.file = file, .offs = offs, .n_offs = n, .per_layer = per_layer, .L = L,
                   .len = len, .depth = depth, .bufs = bufs};
    if (tl_aio_open(&ap, &r.q)) {
        tl_error_clear();
        return;
    }
    double s = 0, alone[MIX_ROUNDS + 1], mixed[MIX_ROUNDS], pages[MIX_ROUNDS];
    uint64_t b = 0;
    tl_status st = tl_residency_measure_passes(m->res, 1, count_hold, &r, &s, &b);
    if (!st) st = tl_residency_measure_passes(m->res, 1, NULL, NULL, &alone[0], &b);
    int got = 0;
    for (int i = 0; !st && !r.st && r.units > 0 && i < MIX_ROUNDS; i++) {
        r.seen = 0, r.next_layer = 0, r.bytes = 0;
        st = tl_residency_measure_passes(m->res, 1, mix_hold, &r, &mixed[i], &b);
        pages[i] = (double)r.bytes;
        if (!st) st = tl_residency_measure_passes(m->res, 1, NULL, NULL, &alone[i + 1], &b);
        if (!st && !r.st && pages[i] > 0) got++;
    }
    tl_aio_close(r.q);
    tl_error_clear();
    if (!st && !r.st && got == MIX_ROUNDS)
        *mixed_bps = tl_plan_kv_rate_beside(alone, mixed, pages, MIX_ROUNDS);
}

/* calibrate.h */
double tl_plan_kv_rate_beside(const double *alone_s, const double *mixed_s,
                              const double *bytes, int rounds) {
    double rate[TL_PLAN_KV_ROUNDS_MAX];
    int n = 0;
    for (int i = 0; i < rounds && n < TL_PLAN_KV_ROUNDS_MAX; i++) {
        const double extra = mixed_s[i] - 0.5 * (alone_s[i] + alone_s[i + 1]);
        rate[n++] = extra > 0 ? bytes[i] / extra : HUGE_VAL;
    }
    return n ? tl_median(rate, (size_t)n) : 0;
}

/* The pages of one step read from a scratch file of the spill's layout in dir, `len`
 * bytes each, `depth` in flight: the median of SPILL_CAL_SAMPLES samples in *bps; 0 when
 * not timed (a budget with no room for the frames, a directory without room or refusing
 * the file, nothing on disk): the run's own spill file reports its errors. *mixed_bps: the
 * same pages' rate beside the stream (time_mixed), 0 when not timed. */
static void time_spill_steps(tl_model *m, const char *dir, spill_shape sh, uint64_t len,
                             int32_t depth, double *bps, double *mixed_bps) {
    *bps = *mixed_bps = 0;
    if (sh.D < 1 || depth < 1 || depth > 64 || len == 0 || len > sh.stride) return;
    /* a spill past the cap keeps its runs and its layers; fewer pages per (seq, layer) */
    while (sh.S * sh.L * sh.D * (int64_t)sh.stride > (int64_t)SPILL_CAL_MAX_BYTES && sh.D > sh.g)
        sh.D = sh.D / 2 > sh.g ? sh.D / 2 : sh.g;
    while (sh.S * sh.L * sh.D * (int64_t)sh.stride > (int64_t)SPILL_CAL_MAX_BYTES && sh.S > 1)
        sh.S /= 2;
    const int64_t chunks = (sh.D + sh.g - 1) / sh.g;
    const uint64_t file_bytes = (uint64_t)(chunks * sh.S * sh.L * sh.g) * sh.stride;
    if (file_bytes > 2 * SPILL_CAL_MAX_BYTES || !room_for(dir, file_bytes)) return;
    size_t n = (size_t)(sh.S * sh.L * sh.D);
    if (n > SPILL_CAL_MAX_READS) n = SPILL_CAL_MAX_READS;
    uint64_t *offs = malloc(n * sizeof *offs);
    uint8_t *buf = NULL;
    const size_t buf_bytes = (size_t)(sh.stride * (uint64_t)depth);
    if (!offs || tl_budget_alloc(m->lm.budget, buf_bytes, TL_TIER_MAX_ALIGN,
                                 "KV spill read calibration", (void **)&buf)) {
        free(offs);
        tl_error_clear();
        return;
    }
    /* a step's order: layer by layer, each sequence's pages in turn */
    size_t k = 0;
    for (int64_t l = 0; l < sh.L && k < n; l++)
        for (int64_t s = 0; s < sh.S && k < n; s++)
            for (int64_t j = 0; j < sh.D && k < n; j++) offs[k++] = page_offset(&sh, s, l, j);
    for (size_t i = 0; i < buf_bytes; i++) buf[i] = (uint8_t)(i * 131);
    tl_tier *file = NULL;
    tl_status st = tl_profile_write_scratch(dir, file_bytes, buf, buf_bytes, &file);
    uint8_t *bufs[64];
    for (int32_t i = 0; i < depth; i++) bufs[i] = buf + (size_t)i * sh.stride;
    double rate[SPILL_CAL_SAMPLES];
    int got = 0;
    for (int i = 0; !st && i < SPILL_CAL_SAMPLES; i++) {
        st = tl_tier_time_read_list(file, offs, NULL, k, len, depth, bufs, (size_t)depth,
                                    SPILL_CAL_SAMPLE_S, &rate[i]);
        if (!st && rate[i] > 0) got++;
    }
    if (!st && got == SPILL_CAL_SAMPLES) *bps = tl_median(rate, SPILL_CAL_SAMPLES);
    if (!st && *bps > 0)
        time_mixed(m, file, offs, k, (size_t)(sh.S * sh.D), sh.L, len, depth, bufs, mixed_bps);
    if (file) tl_tier_close(file);
    tl_error_clear();
    tl_budget_free(m->lm.budget, buf);
    free(offs);
}

tl_status tl_plan_calibrate_kv(tl_model *m, tl_hw_profile *prof, const tl_plan_result *plan,
                               const tl_workload *w, const char *spill_dir,
                               double *page_scale, double *alone_scale) {
    *page_scale = 0;
    if (alone_scale) *alone_scale = 0;
    const tl_policy *pol = &plan->policy;
    const tl_cost_terms *dec = &plan->cost.decode;
    if (!tl_plan_spills_kv(pol) || !(dec->kv_read_bytes > 0) || !w) return TL_OK;
    const uint64_t page = (uint64_t)tl_cost_kv_page_bytes(m, pol->kv_bits, pol->page_tokens);
    const int32_t depth = tl_aio_class_depth(m->lm.params.io_queue_depth, TL_AIO_SOON);
    const double before = tl_profile_read_bps(prof, page, depth);
    if (!(before > 0)) return TL_OK;
    /* a page no smaller than the engine's chunk reads as the stream does: its rate is the
     * disk calibration's */
    const uint64_t chunk = (page + TL_TIER_MAX_ALIGN - 1) / TL_TIER_MAX_ALIGN *
                           TL_TIER_MAX_ALIGN;
    if (chunk >= m->lm.params.io_chunk_bytes) return TL_OK;
    /* input rows kept for recompute lie after each page's K and V in its slot */
    const uint64_t x_slot =
        pol->kv_inputs || pol->kv_recompute > 0
            ? (uint64_t)ceil((double)pol->page_tokens * m->lm.hp.n_embd * 4 / TL_TIER_MAX_ALIGN) *
                  TL_TIER_MAX_ALIGN
            : 0;
    double alone = 0, mixed = 0;
    time_spill_steps(m, tl_scratch_dir(spill_dir), spill_shape_of(m, pol, w, chunk + x_slot),
                     chunk, depth, &alone, &mixed);
    const double at_chunk = tl_profile_read_bps(prof, chunk, depth);
    if (alone > 0 && at_chunk > 0) {
        if (alone_scale) *alone_scale = alone / at_chunk; /* every cell below the chunk moves so */
        const double rate = mixed > 0 ? fmin(alone, mixed) : alone;
        tl_profile_scale_reads(prof, m->lm.params.io_chunk_bytes, 0, rate / at_chunk);
        *page_scale = tl_profile_read_bps(prof, page, depth) / before;
    }
    return TL_OK;
}
