/* residency.c - resident weights, the streaming ring, and its prefetch pipeline.
 *
 * States of a slot: EMPTY -> LOADING (its unit's reads are queued in the IO queue) ->
 * IN_USE (acquired: the reads were waited for, the unit's weight pointers point into
 * the slot) -> EMPTY (released: pointers cleared, the slot is refilled at once).
 * Issue order follows the forward pass: layers 0..n-1, then the output if this pass
 * needs logits, then the next pass's layers; at most `prefetch` units are LOADING while
 * one is IN_USE, so while layer l computes, the reads of l+1..l+prefetch are in flight.
 * Invariants: a slot is never refilled while IN_USE; units are acquired in issue order
 * (a mismatch drains the ring and restarts it, correct but slow); after an IO error the
 * manager stays in the error state and every later acquire returns the same error.
 * Reads are widened to the tier's alignment (O_DIRECT): a tensor's data pointer is its
 * tl_weight_extent's buffer plus the offset of the tensor inside the widened tl_weight_extent.
 * Flash layout: a layer's streamed site tensors are not in the ring. The one site buffer
 * is idle, or fetching (fetch_runs queued the reads of one tensor's needed runs, in the
 * order of its channels) until fetch_wait has waited them all; the product may wait for
 * them a part at a time (fetch_wait(upto): the reads of the first upto channels) and
 * multiply what has arrived meanwhile. A fetch may begin only when the buffer is idle,
 * and its runs stay valid until the next one begins.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "exec/residency.h"
#include "base/budget.h"
#include "base/clock.h"
#include "base/stats.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "model/flash_layout.h"
#include "tier/aio.h"
#include "tier/tier.h"

#define ALIGN ((uint64_t)TL_TIER_MAX_ALIGN)

static uint64_t align_down(uint64_t x) { return x & ~(ALIGN - 1); }
static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) & ~(ALIGN - 1); }

enum { SLOT_EMPTY, SLOT_LOADING, SLOT_IN_USE };

typedef struct slot {
    uint8_t *buf;
    int state, unit;
    uint64_t tags[TL_WEIGHT_UNIT_MAX];
    int n_tags;
} slot;

struct tl_residency {
    tl_llama *m;
    tl_weight_plan plan;
    int n_units;            /* n_layer + 1 */
    tl_weight_layout *units;          /* streamed parts of each unit (n_t == 0: fully resident) */
    void **resident;        /* budget buffers of resident weights */
    size_t *resident_bytes; /* and their sizes */
    size_t n_resident, cap_resident;
    slot *slots;
    int *queue;             /* issued, not yet acquired: slot indices in issue order */
    int q_head, q_len;
    int *seq;               /* streamed units of this pass, then of the next pass's layers */
    int seq_len, seq_cur;   /* seq_cur = units of the current pass in seq */
    int issue_idx, carried; /* next seq index to issue; issued units of the next pass */
    int need_output;
    uint64_t next_tag;
    uint8_t *row_buf;       /* embedding row reads */
    size_t row_buf_bytes;
    tl_status error;
    char error_msg[512];
    double stall_s;
    uint64_t bytes_disk, bytes_mem, passes;
    uint8_t *repack_tmp;    /* one panel per pool thread (tl_weight_repack_bytes) */
    size_t repack_stride;
    uint64_t panel_bytes;   /* resident weights in panels (repacked, or from the copy) */
    uint64_t streamed_panel_bytes; /* streamed weights repacked on arrival, all passes */
    double repack_s, arrival_repack_s; /* all repacking; of it, on arrival */
    /* flash layout: streamed site tensors, read run by run at their use (fetch_runs) */
    uint8_t *site_buf;      /* the largest streamed site tensor, aligned */
    uint64_t *site_tags;    /* one per run at most */
    uint32_t *site_chan_end;/* [i]: read i and those before it hold chan[0..site_chan_end[i]) */
    size_t site_tags_cap, site_n_tags; /* reads of the fetch in flight (0: none) */
    size_t site_waited;     /* of those, the first ones waited for */
    const tl_weight *site_w;
    double site_t0;
    uint64_t flash_gap;     /* a gap between needed runs this small is read through */
    uint64_t flash_needed, flash_read, flash_dense, flash_reads;
    double flash_fetch_s, flash_stall_s;
    tl_neuron_window window; /* a FFN by neuron: the plan's neuron window (model/neurons.h) */
    void *window_block;
    int measuring;          /* tl_residency_measure_passes: units arrive, nothing computes */
};

/* ---- the manager ---- */

static tl_status fail(tl_residency *r, tl_status st) {
    if (!r->error) {
        r->error = st;
        snprintf(r->error_msg, sizeof r->error_msg, "%s", tl_last_error());
    }
    return st;
}

static tl_status sticky(tl_residency *r) {
    return r->error ? tl_error_set(r->error, "%s", r->error_msg) : TL_OK;
}

static tl_status keep(tl_residency *r, void *buf, size_t bytes) {
    if (r->n_resident == r->cap_resident) {
        size_t cap = r->cap_resident ? 2 * r->cap_resident : 64;
        void **b = realloc(r->resident, cap * sizeof *b);
        if (!b) return tl_error_set(TL_ERR_NOMEM, "out of memory");
        r->resident = b;
        size_t *n = realloc(r->resident_bytes, cap * sizeof *n);
        if (!n) return tl_error_set(TL_ERR_NOMEM, "out of memory");
        r->resident_bytes = n;
        r->cap_resident = cap;
    }
    r->resident_bytes[r->n_resident] = bytes;
    r->resident[r->n_resident++] = buf;
    return TL_OK;
}

/* Submits the reads of tl_weight_layout L into buf; tags go to tags[]. */
static tl_status submit_layout(tl_residency *r, const tl_weight_layout *L, uint8_t *buf, uint64_t *tags) {
    for (int i = 0; i < L->n_e; i++) {
        tags[i] = ++r->next_tag;
        /* by need: weights share the KV prefetch's class, so the queue keeps the order of
         * asking (model params: io_order) */
        const tl_aio_class cls =
            r->m->params.io_order == TL_IO_BY_NEED ? TL_AIO_SOON : TL_AIO_ORDINARY;
        tl_tier *from = r->m->panel_tier ? r->m->panel_tier : r->m->tier;
        tl_status st = tl_aio_read_class(r->m->aio, from, L->e[i].file_off,
                                         buf + L->e[i].buf_off, L->e[i].len, tags[i], cls);
        if (st) {
            for (int j = 0; j < i; j++) tl_aio_wait(r->m->aio, tags[j]);
            return st;
        }
    }
    return TL_OK;
}

static tl_status wait_tags(tl_residency *r, const uint64_t *tags, int n) {
    tl_status first = TL_OK;
    char msg[512] = "";
    for (int i = 0; i < n; i++) {
        tl_status st = tl_aio_wait(r->m->aio, tags[i]);
        if (st && !first) {
            first = st;
            snprintf(msg, sizeof msg, "%s", tl_last_error());
        }
    }
    if (first) tl_error_set(first, "%s", msg);
    return first;
}

/* Repacks the weights of a just-read part (resident or a streamed unit's slot) that want
 * panels, each split over the pool's threads in whole panels, each thread with its own
 * one-panel temporary. */
typedef struct repack_job {
    tl_residency *r;
    const tl_weight_layout *L;
    uint8_t *buf;
    int threads;
} repack_job;

static void repack_task(void *arg, int task, int thread) {
    const repack_job *j = arg;
    uint8_t *tmp = j->r->repack_tmp + (size_t)thread * j->r->repack_stride;
    for (int i = 0; i < j->L->n_t; i++) {
        tl_weight *w = j->L->t[i].w;
        if (tl_weight_repacked_in_memory(j->r->m, w))
            tl_panels_pack_share(w->type, j->buf + j->L->t[i].buf_off, w->rows, w->cols,
                                 (size_t)task, (size_t)j->threads, tmp);
    }
}

/* Repacks, then returns the bytes repacked (0 when nothing wants panels). */
static uint64_t repack(tl_residency *r, const tl_weight_layout *L, uint8_t *buf) {
    uint64_t bytes = 0;
    for (int i = 0; i < L->n_t; i++)
        if (tl_weight_repacked_in_memory(r->m, L->t[i].w)) bytes += L->t[i].w->file_bytes;
    if (!bytes) return 0;
    const double t0 = tl_now();
    repack_job j = {r, L, buf, tl_pool_threads(r->m->pool)};
    tl_pool_run(r->m->pool, j.threads, repack_task, &j);
    r->repack_s += tl_now() - t0;
    return bytes;
}

/* Points the weights of a part at buf, each in the layout it was left in. */
static void point_at(tl_residency *r, const tl_weight_layout *L, uint8_t *buf) {
    for (int i = 0; i < L->n_t; i++) {
        L->t[i].w->data = buf + L->t[i].buf_off;
        L->t[i].w->panels = tl_weight_wants_panels(r->m, L->t[i].w);
    }
}

/* Resident parts are read LOAD_AHEAD at a time: while the oldest is waited for and
 * repacked, the reads of the next ones keep the queue busy (one part at a time left the
 * disk idle between parts and its queue a part deep). */
#define LOAD_AHEAD 8

typedef struct part_load {
    tl_weight_layout L;
    uint8_t *buf;
    uint64_t tags[TL_WEIGHT_UNIT_MAX];
} part_load;

/* The buffers every pass reads into (the ring's slots, the flash site buffer) are touched
 * when allocated: a read into pages never touched faults them in the thread that submits
 * it (with huge pages advised, compacting memory to find them), which would slow the
 * first pass and the disk calibration's samples. The pool's threads touch a buffer
 * TOUCH_PIECE at a time. */
#define TOUCH_PIECE ((size_t)2 << 20)

typedef struct touch_job {
    uint8_t *buf;
    size_t bytes;
} touch_job;

static void touch_task(void *arg, int task, int thread) {
    const touch_job *j = arg;
    (void)thread;
    const size_t at = (size_t)task * TOUCH_PIECE;
    memset(j->buf + at, 0, j->bytes - at < TOUCH_PIECE ? j->bytes - at : TOUCH_PIECE);
}

static void touch(tl_residency *r, uint8_t *buf, size_t bytes) {
    touch_job j = {buf, bytes};
    if (bytes)
        tl_pool_run(r->m->pool, (int)((bytes + TOUCH_PIECE - 1) / TOUCH_PIECE), touch_task, &j);
}

/* Allocates a resident part's budget buffer and queues its reads. */
static tl_status start_part(tl_residency *r, tl_weight *const *ws, int n, part_load *p) {
    tl_weight_layout_build(&p->L, ws, n);
    tl_status st = tl_budget_alloc(r->m->budget, p->L.bytes, ALIGN, ws[0]->name, (void **)&p->buf);
    if (st) return st;
    if ((st = keep(r, p->buf, p->L.bytes))) {
        tl_budget_free(r->m->budget, p->buf);
        return st;
    }
    return submit_layout(r, &p->L, p->buf, p->tags);
}

/* Waits for a started part, repacks it and points its weights there. */
static tl_status finish_part(tl_residency *r, part_load *p) {
    tl_status st = wait_tags(r, p->tags, p->L.n_e);
    if (st) return st;
    repack(r, &p->L, p->buf);
    point_at(r, &p->L, p->buf);
    for (int i = 0; i < p->L.n_t; i++) /* repacked here or read from the converted copy */
        if (p->L.t[i].w->panels) r->panel_bytes += p->L.t[i].w->file_bytes;
    return TL_OK;
}

/* Reads the plan's resident parts (layers' attention and FFN, embedding, output). */
static tl_status load_residents(tl_residency *r, const tl_weight_plan *plan) {
    tl_llama *m = r->m;
    part_load ring[LOAD_AHEAD];
    int head = 0, len = 0;
    tl_status st = TL_OK;
    for (int u = 0; u <= m->hp.n_layer && !st; u++)
        for (int part = 0; part < 2 && !st; part++) {
            tl_weight *ws[TL_WEIGHT_UNIT_MAX];
            int n = 0;
            if (u < m->hp.n_layer) {
                const uint8_t *res = part ? plan->ffn_resident : plan->attn_resident;
                if (res[u]) n = tl_llama_layer_matrices(&m->layers[u], part, ws);
            } else if (u == m->hp.n_layer && part == 0 && plan->embd_resident && m->tok_embd.name) {
                ws[n++] = &m->tok_embd;
            } else if (u == m->hp.n_layer && part == 1 && plan->output_resident &&
                       !m->tied_output && m->output.name) {
                ws[n++] = &m->output;
            }
            if (!n) continue;
            if (len == LOAD_AHEAD) {
                st = finish_part(r, &ring[head]);
                head = (head + 1) % LOAD_AHEAD;
                len--;
                if (st) break;
            }
            st = start_part(r, ws, n, &ring[(head + len) % LOAD_AHEAD]);
            if (!st) len++;
        }
    for (; len > 0; len--, head = (head + 1) % LOAD_AHEAD) { /* after an error: drain */
        part_load *p = &ring[head];
        if (!st) st = finish_part(r, p);
        else {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", tl_last_error());
            wait_tags(r, p->tags, p->L.n_e);
            tl_error_set(st, "%s", msg);
        }
    }
    if (!st && plan->embd_resident && m->tied_output) {
        m->output.data = m->tok_embd.data;
        m->output.panels = m->tok_embd.panels;
    }
    return st;
}

/* ---- flash layout: the runs a site's non-zero inputs need (model/flash_layout.h) ----
 * Runs of needed channels are read into the site buffer at their offset in the tensor,
 * widened to the tier's alignment; two reads whose gap is at most flash_gap bytes become
 * one (reading the gap costs less than a request) unless it would pass 1 /
 * TL_FLASH_FETCH_PARTS of the tensor (so the product's parts have reads of their own);
 * runs whose widened ends overlap are then cut at the alignment, the next read taking
 * the rest.
 * Every read is urgent: the product waits for them in their order, a part at a time
 * (fetch_wait). */
static tl_status fetch_runs(void *user, const tl_weight *w, const int32_t *chan, size_t nc,
                            const uint8_t **base) {
    tl_residency *r = user;
    if (r->error) return sticky(r);
    if (r->site_n_tags) /* the last fetch was not waited out */
        return fail(r, tl_error_set(TL_ERR_INVALID, "a fetch of runs began before the last "
                                    "one was waited for"));
    tl_tier *from = r->m->panel_tier ? r->m->panel_tier : r->m->tier;
    const uint64_t al = from->align > 1 ? from->align : 1;
    const uint64_t run = tl_type_row_bytes(w->type, w->cols), t0 = align_down(w->file_offset);
    const uint64_t longest = w->file_bytes / TL_FLASH_FETCH_PARTS;
    *base = r->site_buf + (w->file_offset - t0);
    if (nc > r->site_tags_cap)
        return fail(r, tl_error_set(TL_ERR_INVALID, "%zu runs of %s asked for, %zu exist", nc,
                                    w->name, r->site_tags_cap));
    r->site_w = w;
    r->site_t0 = tl_now();
    uint64_t a = 0, b = 0, bytes = 0; /* the read being widened: [a, b) of the file */
    tl_status st = TL_OK;
    for (size_t i = 0; i <= nc && !st; i++) {
        uint64_t ca = 0, cb = 0;
        if (i < nc) {
            const uint64_t off = w->file_offset + (uint64_t)chan[i] * run;
            ca = off / al * al;
            cb = (off + run + al - 1) / al * al;
            if (b && cb <= b) continue; /* inside the read being widened */
            /* overlapping it (widened to the alignment) or close enough, and not too long */
            if (b && (ca < b || ca - b <= r->flash_gap) && cb - a <= longest) {
                b = cb;
                continue;
            }
            if (b && ca < b) ca = b; /* too long: the next read takes the rest of this run */
        }
        if (b) {
            const uint64_t tag = ++r->next_tag;
            st = tl_aio_read_class(r->m->aio, from, a, r->site_buf + (a - t0), (size_t)(b - a),
                                   tag, TL_AIO_NOW);
            if (!st) {
                r->site_chan_end[r->site_n_tags] = (uint32_t)i;
                r->site_tags[r->site_n_tags++] = tag, bytes += b - a;
            }
        }
        a = ca, b = cb;
    }
    r->flash_reads += r->site_n_tags;
    r->flash_read += bytes;
    r->flash_needed += (uint64_t)nc * run;
    r->flash_dense += w->file_bytes;
    r->bytes_disk += bytes;
    if (st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tl_last_error());
        wait_tags(r, r->site_tags, (int)r->site_n_tags);
        r->site_n_tags = 0;
        tl_error_set(st, "%s", msg);
        return fail(r, tl_error_wrap(st, "reading runs of %s", w->name));
    }
    return TL_OK;
}

static tl_status fetch_wait(void *user, size_t upto) {
    tl_residency *r = user;
    const double t_start = tl_now();
    size_t k = r->site_waited; /* reads [site_waited, k) hold a channel below upto */
    while (k < r->site_n_tags && (k ? r->site_chan_end[k - 1] : 0) < upto) k++;
    tl_status st = wait_tags(r, r->site_tags + r->site_waited, (int)(k - r->site_waited));
    if (st) { /* the rest still write into the buffer: wait them out too */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", tl_last_error());
        wait_tags(r, r->site_tags + k, (int)(r->site_n_tags - k));
        tl_error_set(st, "%s", msg);
        k = r->site_n_tags;
    }
    r->site_waited = k;
    const double now = tl_now();
    r->stall_s += now - t_start;
    r->flash_stall_s += now - t_start;
    if (k == r->site_n_tags) {
        if (k) r->flash_fetch_s += now - r->site_t0;
        r->site_n_tags = r->site_waited = 0;
    }
    if (st) return fail(r, tl_error_wrap(st, "reading runs of %s", r->site_w->name));
    if (r->error && r->site_n_tags) { /* failed elsewhere: no read left in the buffer */
        wait_tags(r, r->site_tags + k, (int)(r->site_n_tags - k));
        r->site_n_tags = r->site_waited = 0;
    }
    return r->error ? sticky(r) : TL_OK;
}

/* The site buffer and its tags, when a flash layer streams. */
static tl_status open_flash(tl_residency *r, const tl_weight_plan *plan) {
    tl_llama *m = r->m;
    const uint64_t bytes = tl_weight_plan_site_buf_bytes(m, plan);
    if (!bytes) return TL_OK;
    const size_t tag_bytes = (size_t)tl_weight_site_tags_bytes(m) - 64,
                 per_read = sizeof *r->site_tags + sizeof *r->site_chan_end;
    tl_status st = tl_budget_alloc(m->budget, (size_t)bytes, ALIGN, "flash site buffer",
                                   (void **)&r->site_buf);
    if (!st) touch(r, r->site_buf, (size_t)bytes);
    if (!st) st = tl_budget_alloc(m->budget, tag_bytes, 64, "flash read tags",
                                  (void **)&r->site_tags);
    if (st) return st;
    r->site_tags_cap = tag_bytes / per_read;
    r->site_chan_end = (uint32_t *)(r->site_tags + r->site_tags_cap);
    r->flash_gap = m->params.flash_gap_bytes;
    m->fetch_runs = fetch_runs;
    m->fetch_wait = fetch_wait;
    m->fetch_user = r;
    const uint64_t window = tl_weight_plan_window_bytes(m, plan);
    if (window) { /* the neuron window (model/neurons.h): the plan's bytes, ALIGN included */
        if ((st = tl_budget_alloc(m->budget, (size_t)(window - ALIGN), ALIGN, "neuron window",
                                  (void **)&r->window_block)))
            return st;
        tl_neuron_window_init(&r->window, r->window_block, m->hp.n_layer, (uint32_t)m->hp.n_ff,
                              plan->window_slots, tl_neuron_run_bytes(m), plan->window_k);
        m->window = &r->window;
    }
    return TL_OK;
}

/* Reads a tensor and converts it to f32 (norms; rows that split quant blocks). */
static tl_status load_converted(tl_residency *r, tl_weight *w) {
    tl_weight_layout L;
    tl_weight *one = w;
    tl_weight_layout_build(&L, &one, 1);
    uint8_t *raw;
    float *dst;
    size_t n = w->rows * w->cols;
    tl_status st = tl_budget_alloc(r->m->budget, L.bytes, ALIGN, w->name, (void **)&raw);
    if (st) return st;
    uint64_t tags[TL_WEIGHT_UNIT_MAX];
    st = submit_layout(r, &L, raw, tags);
    if (!st) st = wait_tags(r, tags, L.n_e);
    if (!st) st = tl_budget_alloc(r->m->budget, n * sizeof(float), 64, w->name, (void **)&dst);
    if (!st) {
        tl_dequant_row(w->file_type, raw + L.t[0].buf_off, dst, n);
        w->data = dst;
        st = keep(r, dst, n * sizeof(float));
        if (st) tl_budget_free(r->m->budget, dst);
    }
    tl_budget_free(r->m->budget, raw);
    return st;
}

tl_status tl_residency_open(tl_llama *m, const tl_weight_plan *plan, tl_residency **out) {
    *out = NULL;
    const int L = m->hp.n_layer;
    tl_residency *r = calloc(1, sizeof *r);
    if (!r) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    r->m = m;
    r->n_units = L + 1;
    r->plan = *plan;
    r->plan.attn_resident = malloc((size_t)L);
    r->plan.ffn_resident = malloc((size_t)L);
    r->units = calloc((size_t)r->n_units, sizeof *r->units);
    r->seq = malloc(2 * (size_t)r->n_units * sizeof *r->seq);
    r->queue = malloc(((size_t)plan->n_slots + 1) * sizeof *r->queue);
    r->slots = calloc((size_t)plan->n_slots + 1, sizeof *r->slots);
    tl_status st = TL_OK;
    if (!r->plan.attn_resident || !r->plan.ffn_resident || !r->units || !r->seq || !r->queue ||
        !r->slots) {
        st = tl_error_set(TL_ERR_NOMEM, "out of memory");
        goto fail;
    }
    memcpy(r->plan.attn_resident, plan->attn_resident, (size_t)L);
    memcpy(r->plan.ffn_resident, plan->ffn_resident, (size_t)L);
    /* converted tensors first: their raw reads are transient */
    for (size_t i = 0; i < m->n_all && !st; i++)
        if (m->all[i]->convert) st = load_converted(r, m->all[i]);
    const uint64_t repack_bytes = tl_weight_repack_bytes(m);
    if (!st && repack_bytes) {
        const int threads = tl_pool_threads(m->pool);
        r->repack_stride = (size_t)(repack_bytes - ALIGN) / (size_t)threads;
        st = tl_budget_alloc(m->budget, repack_bytes - ALIGN, ALIGN, "weight repacking",
                             (void **)&r->repack_tmp);
    }
    if (!st) st = load_residents(r, plan);
    if (!st && !plan->embd_resident && m->tok_embd.name) {
        r->row_buf_bytes = tl_weight_row_buf_bytes(m);
        st = tl_budget_alloc(m->budget, r->row_buf_bytes, ALIGN, "embedding row buffer",
                             (void **)&r->row_buf);
    }
    for (int u = 0; u <= L && !st; u++) {
        tl_weight *ws[TL_WEIGHT_UNIT_MAX];
        /* a flash layer's streamed sites are read at their use (fetch_runs), not here */
        int n = m->flash && u < L ? 0 : tl_weight_plan_unit_weights(m, plan, u, ws);
        if (n) tl_weight_layout_build(&r->units[u], ws, n);
    }
    if (!st) st = open_flash(r, plan);
    for (int i = 0; i < plan->n_slots && !st; i++) {
        st = tl_budget_alloc(m->budget, plan->slot_bytes, ALIGN, "layer buffer",
                             (void **)&r->slots[i].buf);
        if (!st) touch(r, r->slots[i].buf, plan->slot_bytes);
        r->slots[i].state = SLOT_EMPTY;
        r->slots[i].unit = -1;
    }
    if (st) goto fail;
    /* weights read while the pool computes: the IO thread gets a core between the pool's
     * runs, not only after the scheduler's slice (threadpool.h) */
    if (plan->streamed_bytes || m->flash) tl_pool_set_yield(m->pool, 1);
    *out = r;
    return TL_OK;
fail:
    tl_residency_close(r);
    return st;
}

/* Waits out every queued read and empties the ring; the reads' results (and errors) are
 * dropped because those units will be read again, so the caller's message is kept. */
static void drain(tl_residency *r) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", tl_last_error());
    while (r->q_len > 0) {
        slot *s = &r->slots[r->queue[r->q_head]];
        wait_tags(r, s->tags, s->n_tags);
        s->state = SLOT_EMPTY;
        s->unit = -1;
        r->q_head = (r->q_head + 1) % (r->plan.n_slots + 1);
        r->q_len--;
    }
    r->carried = 0;
    tl_error_set(TL_OK, "%s", msg);
}

void tl_residency_close(tl_residency *r) {
    if (!r) return;
    drain(r);
    tl_pool_set_yield(r->m->pool, 0);
    /* every weight pointer points into buffers freed below: clear them, so a placement
     * that follows (re-planning) starts from "nothing resident", not from stale memory */
    for (size_t i = 0; i < r->m->n_all; i++) r->m->all[i]->data = NULL, r->m->all[i]->panels = 0;
    r->m->output.data = NULL;
    r->m->output.panels = 0;
    if (r->m->fetch_user == r) {
        if (r->site_n_tags) { /* a fetch not waited for: its reads end before the buffer */
            char msg[512];
            snprintf(msg, sizeof msg, "%s", tl_last_error());
            wait_tags(r, r->site_tags + r->site_waited, (int)(r->site_n_tags - r->site_waited));
            tl_error_set(TL_OK, "%s", msg);
        }
        r->m->fetch_runs = NULL, r->m->fetch_wait = NULL, r->m->fetch_user = NULL;
    }
    tl_budget_free(r->m->budget, r->site_buf);
    tl_budget_free(r->m->budget, r->site_tags);
    if (r->m->window == &r->window) r->m->window = NULL;
    tl_budget_free(r->m->budget, r->window_block);
    if (r->slots)
        for (int i = 0; i < r->plan.n_slots; i++) tl_budget_free(r->m->budget, r->slots[i].buf);
    for (size_t i = 0; i < r->n_resident; i++) tl_budget_free(r->m->budget, r->resident[i]);
    tl_budget_free(r->m->budget, r->row_buf);
    tl_budget_free(r->m->budget, r->repack_tmp);
    free(r->resident);
    free(r->resident_bytes);
    free(r->slots);
    free(r->queue);
    free(r->seq);
    free(r->units);
    free(r->plan.attn_resident);
    free(r->plan.ffn_resident);
    free(r);
}

/* Issues unit seq[issue_idx] into a free slot, while there is one. */
static tl_status fill(tl_residency *r) {
    if (!r->plan.overlap) return TL_OK;
    while (r->issue_idx < r->seq_len) {
        int free_slot = -1;
        for (int i = 0; i < r->plan.n_slots; i++)
            if (r->slots[i].state == SLOT_EMPTY) { free_slot = i; break; }
        if (free_slot < 0) break;
        int u = r->seq[r->issue_idx];
        slot *s = &r->slots[free_slot];
        tl_status st = submit_layout(r, &r->units[u], s->buf, s->tags);
        if (st) return fail(r, st);
        s->n_tags = r->units[u].n_e;
        s->state = SLOT_LOADING;
        s->unit = u;
        r->queue[(r->q_head + r->q_len) % (r->plan.n_slots + 1)] = free_slot;
        r->q_len++;
        if (r->issue_idx >= r->seq_cur) r->carried++;
        r->issue_idx++;
    }
    return TL_OK;
}

tl_status tl_residency_begin_pass(tl_residency *r, int need_output) {
    if (r->error) return sticky(r);
    const int L = r->m->hp.n_layer;
    /* anything still queued from the previous pass that is not a carried unit of this
     * pass means the last pass stopped early: start clean */
    if (r->q_len != r->carried) drain(r);
    int carried = r->carried;
    r->need_output = need_output;
    r->seq_len = 0;
    for (int u = 0; u < L; u++)
        if (r->units[u].n_t) r->seq[r->seq_len++] = u;
    if (need_output && r->units[L].n_t) r->seq[r->seq_len++] = L;
    r->seq_cur = r->seq_len;
    for (int u = 0; u < L; u++)
        if (r->units[u].n_t) r->seq[r->seq_len++] = u;
    r->issue_idx = carried;
    r->carried = 0;
    r->bytes_mem += r->plan.resident_bytes;
    r->passes++;
    return fill(r);
}

tl_status tl_residency_acquire(tl_residency *r, int u) {
    if (r->error) return sticky(r);
    tl_weight_layout *L = &r->units[u];
    if (!L->n_t) return TL_OK; /* fully resident */
    int head = r->q_len ? r->queue[r->q_head] : -1;
    if (head < 0 || r->slots[head].unit != u) {
        /* not what was prefetched (or no overlap): read it now, synchronously */
        drain(r);
        int idx = -1;
        for (int i = 0; i < r->seq_cur; i++)
            if (r->seq[i] == u) { idx = i; break; }
        slot *s = &r->slots[0];
        tl_status st = submit_layout(r, L, s->buf, s->tags);
        if (st) return fail(r, st);
        s->n_tags = L->n_e;
        s->state = SLOT_LOADING;
        s->unit = u;
        r->queue[r->q_head] = 0;
        r->q_len = 1;
        r->issue_idx = idx >= 0 ? idx + 1 : r->seq_len;
        head = 0;
        if ((st = fill(r))) return st;
    }
    slot *s = &r->slots[head];
    double t0 = tl_now();
    tl_status st = wait_tags(r, s->tags, s->n_tags);
    r->stall_s += tl_now() - t0;
    s->n_tags = 0;
    r->q_head = (r->q_head + 1) % (r->plan.n_slots + 1);
    r->q_len--;
    if (st) {
        s->state = SLOT_EMPTY;
        return fail(r, tl_error_wrap(st, "reading weights of %s", L->t[0].w->name));
    }
    s->state = SLOT_IN_USE;
    r->bytes_disk += L->bytes;
    if (r->measuring) return TL_OK; /* tl_residency_measure_passes: nothing will compute */
    const double t_repack = r->repack_s;
    r->streamed_panel_bytes += repack(r, L, s->buf);
    r->arrival_repack_s += r->repack_s - t_repack;
    point_at(r, L, s->buf);
    return TL_OK;
}

void tl_residency_release(tl_residency *r, int u) {
    tl_weight_layout *L = &r->units[u];
    if (!L->n_t) return;
    for (int i = 0; i < r->plan.n_slots; i++)
        if (r->slots[i].state == SLOT_IN_USE && r->slots[i].unit == u) {
            r->slots[i].state = SLOT_EMPTY;
            r->slots[i].unit = -1;
        }
    for (int i = 0; i < L->n_t; i++) L->t[i].w->data = NULL;
    if (!r->error) fill(r);
}

tl_status tl_residency_borrow(tl_residency *r, int u) {
    if (r->error) return sticky(r);
    tl_weight_layout *L = &r->units[u];
    if (!L->n_t) return TL_OK; /* fully resident */
    drain(r);
    slot *s = &r->slots[0];
    tl_status st = submit_layout(r, L, s->buf, s->tags);
    if (!st) st = wait_tags(r, s->tags, L->n_e);
    if (st) return fail(r, tl_error_wrap(st, "reading weights of %s", L->t[0].w->name));
    const double repack_s = r->repack_s; /* outside a pass: not the run's repacking */
    repack(r, L, s->buf);
    r->repack_s = repack_s;
    s->state = SLOT_IN_USE;
    s->unit = u;
    point_at(r, L, s->buf);
    return TL_OK;
}

void tl_residency_unborrow(tl_residency *r, int u) {
    tl_weight_layout *L = &r->units[u];
    if (!L->n_t) return;
    for (int i = 0; i < L->n_t; i++) L->t[i].w->data = NULL;
    r->slots[0].state = SLOT_EMPTY;
    r->slots[0].unit = -1;
}

uint8_t *tl_residency_spare(tl_residency *r, size_t *bytes) {
    *bytes = 0;
    if (r->plan.n_slots < 2) return NULL;
    drain(r); /* what the ring read ahead lands before the buffer is lent */
    if (r->slots[1].state != SLOT_EMPTY) return NULL;
    r->slots[1].state = SLOT_LOADING; /* the caller's reads land in it: the sweep leaves it */
    *bytes = (size_t)r->plan.slot_bytes;
    return r->slots[1].buf;
}

void tl_residency_unspare(tl_residency *r) {
    if (r->plan.n_slots >= 2 && r->slots[1].state == SLOT_LOADING && r->slots[1].unit < 0)
        r->slots[1].state = SLOT_EMPTY;
}

/* The memory the weights hold as one sequence of buffers: the ring's, then the resident
 * ones (tl_residency_sweep). */
static size_t held_count(const tl_residency *r) {
    return (size_t)r->plan.n_slots + r->n_resident;
}
static const uint8_t *held_buf(const tl_residency *r, size_t i) {
    const size_t ring = (size_t)r->plan.n_slots;
    return i < ring ? r->slots[i].buf : r->resident[i - ring];
}
static uint64_t held_bytes(const tl_residency *r, size_t i) {
    const size_t ring = (size_t)r->plan.n_slots;
    return i < ring ? r->plan.slot_bytes : r->resident_bytes[i - ring];
}
/* 1 when the sweep leaves buffer i out: a ring buffer reads are landing in, or one that
 * holds a product of layer `layer` (the ring's bound to it, or a resident buffer one of its
 * matrices points into). */
static int left_out(const tl_residency *r, size_t i, int32_t layer) {
    if (i < (size_t)r->plan.n_slots && r->slots[i].state == SLOT_LOADING) return 1;
    if (layer < 0 || layer >= r->m->hp.n_layer) return 0;
    if (i < (size_t)r->plan.n_slots)
        return r->slots[i].state == SLOT_IN_USE && r->slots[i].unit == layer;
    const uint8_t *b = held_buf(r, i);
    for (int part = 0; part < 2; part++) {
        tl_weight *ws[TL_WEIGHT_UNIT_MAX];
        const int n = tl_llama_layer_matrices(&r->m->layers[layer], part, ws);
        for (int k = 0; k < n; k++) {
            const uint8_t *d = ws[k]->data;
            if (d && d >= b && d < b + held_bytes(r, i)) return 1;
        }
    }
    return 0;
}

uint64_t tl_residency_sweep(const tl_residency *r, int32_t layer, uint64_t max_bytes,
                            uint64_t *cursor) {
    const size_t n = held_count(r);
    uint64_t held = 0; /* the buffers' bytes, but for the layer's own */
    for (size_t i = 0; i < n; i++) held += left_out(r, i, layer) ? 0 : held_bytes(r, i);
    if (held == 0) return 0;
    const uint64_t want = max_bytes < held ? max_bytes : held, at = *cursor % held;
    size_t i = 0;
    uint64_t from = at, done = 0;
    for (;; i++) { /* the buffer the cursor lies in */
        const uint64_t b = left_out(r, i, layer) ? 0 : held_bytes(r, i);
        if (from < b) break;
        from -= b;
    }
    while (done < want) {
        const uint64_t b = left_out(r, i, layer) ? 0 : held_bytes(r, i);
        const uint64_t take = b - from < want - done ? b - from : want - done;
        const volatile uint8_t *p = held_buf(r, i) + from; /* volatile: each read is made */
        for (uint64_t k = 0; k < take; k += 64) (void)p[k];
        done += take;
        from += take;
        if (from == b) i = (i + 1) % n, from = 0;
    }
    *cursor = (at + done) % held;
    return done;
}

/* Rows ids[0..n) (n <= tl_weight_embd_read_rows) of an embedding on disk: every row's read is
 * submitted, then all are waited for (each one, also after a failure: the buffer is
 * reused), then converted. A failure names the first row that failed, with its message. */
static tl_status read_embd_rows(tl_residency *r, const int32_t *ids, int32_t n, float *dst) {
    tl_llama *m = r->m;
    const tl_weight *w = &m->tok_embd;
    const size_t rb = tl_type_row_bytes(w->type, w->cols);
    const uint64_t slot = tl_weight_row_slot_bytes(m);
    uint64_t tags[TL_EMBD_READ_ROWS];
    int32_t issued = 0, bad = -1;
    tl_status st = TL_OK;
    char msg[512] = "";
    const double t0 = tl_now();
    for (; issued < n; issued++) {
        const uint64_t off = w->file_offset + (uint64_t)ids[issued] * rb;
        const uint64_t a0 = align_down(off), a1 = align_up(off + rb);
        tags[issued] = ++r->next_tag;
        st = tl_aio_read_urgent(m->aio, m->tier, a0, r->row_buf + (size_t)issued * slot,
                                (size_t)(a1 - a0), tags[issued]);
        if (st) {
            bad = issued;
            snprintf(msg, sizeof msg, "%s", tl_last_error());
            break;
        }
        r->bytes_disk += a1 - a0;
    }
    for (int32_t i = 0; i < issued; i++) {
        const tl_status wst = tl_aio_wait(m->aio, tags[i]);
        if (wst && !st) {
            st = wst, bad = i;
            snprintf(msg, sizeof msg, "%s", tl_last_error());
        }
    }
    r->stall_s += tl_now() - t0;
    if (st) {
        tl_error_set(st, "%s", msg);
        return fail(r, tl_error_wrap(st, "reading the embedding of token %d", (int)ids[bad]));
    }
    for (int32_t i = 0; i < n; i++) {
        const uint64_t off = w->file_offset + (uint64_t)ids[i] * rb;
        tl_dequant_row(w->type, r->row_buf + (size_t)i * slot + (off - align_down(off)),
                       dst + (size_t)i * w->cols, w->cols);
    }
    return TL_OK;
}

tl_status tl_residency_embeddings(tl_residency *r, const int32_t *ids, int32_t n, float *dst) {
    tl_llama *m = r->m;
    const tl_weight *w = &m->tok_embd;
    const size_t rb = tl_type_row_bytes(w->type, w->cols);
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->hp.n_vocab)
            return tl_error_set(TL_ERR_INVALID, "token id %d is outside the vocabulary (0..%d)",
                                (int)ids[i], (int)m->hp.n_vocab - 1);
    if (w->data) {
        for (int32_t i = 0; i < n; i++) {
            float *row = dst + (size_t)i * w->cols;
            if (w->panels) tl_panels_dequant_row(w->type, w->data, w->cols, (size_t)ids[i], row);
            else tl_dequant_row(w->type, (const uint8_t *)w->data + (size_t)ids[i] * rb, row,
                                w->cols);
        }
        return TL_OK;
    }
    if (r->error) return sticky(r);
    const int32_t K = tl_weight_embd_read_rows(m);
    for (int32_t i = 0; i < n; i += K) {
        const int32_t k = n - i < K ? n - i : K;
        const tl_status st = read_embd_rows(r, ids + i, k, dst + (size_t)i * w->cols);
        if (st) return st;
    }
    return TL_OK;
}

static tl_status measure(tl_residency *r, uint64_t max_bytes, int *cursor, double *seconds,
                         uint64_t *bytes) {
    *seconds = 0;
    *bytes = 0;
    if (r->error) return sticky(r);
    drain(r);
    const int n_slots = r->plan.n_slots;
    tl_status st = TL_OK;
    int unit_of[65], oldest = 0, in_flight = 0; /* slots used round robin, FIFO order */
    uint64_t submitted = 0;
    double t0 = tl_now();
    const int n_units = r->m->hp.n_layer + 1;
    const int first = cursor && *cursor > 0 ? *cursor % n_units : 0;
    int k = 0;
    for (; k < n_units && n_slots > 0 && !st; k++) {
        const int u = (first + k) % n_units;
        if (!r->units[u].n_t) continue;
        if (max_bytes && submitted >= max_bytes) break;
        submitted += r->units[u].bytes;
        if (in_flight == n_slots) { /* wait for the oldest before reusing its slot */
            slot *o = &r->slots[oldest];
            st = wait_tags(r, o->tags, o->n_tags);
            *bytes += r->units[unit_of[oldest]].bytes;
            oldest = (oldest + 1) % n_slots;
            in_flight--;
        }
        int i = (oldest + in_flight) % n_slots;
        if (!st && !(st = submit_layout(r, &r->units[u], r->slots[i].buf, r->slots[i].tags))) {
            r->slots[i].n_tags = r->units[u].n_e;
            unit_of[i] = u;
            in_flight++;
        }
    }
    for (; in_flight > 0; in_flight--, oldest = (oldest + 1) % n_slots) {
        tl_status w = wait_tags(r, r->slots[oldest].tags, r->slots[oldest].n_tags);
        if (!st) st = w;
        *bytes += r->units[unit_of[oldest]].bytes;
    }
    *seconds = tl_now() - t0;
    if (cursor) *cursor = (first + k) % n_units;
    for (int i = 0; i < n_slots; i++) r->slots[i].state = SLOT_EMPTY;
    return st ? fail(r, st) : TL_OK;
}

tl_status tl_residency_measure_io(tl_residency *r, uint64_t max_bytes, int *cursor,
                                  double *seconds, uint64_t *bytes) {
    return measure(r, max_bytes, cursor, seconds, bytes);
}

tl_status tl_residency_measure_flash(tl_residency *r, tl_flash_share_fn share, void *user,
                                     double max_s, int32_t *chan, double *seconds,
                                     uint64_t *bytes, uint64_t *reads) {
    *seconds = 0;
    *bytes = *reads = 0;
    if (r->error) return sticky(r);
    tl_llama *m = r->m;
    if (!r->site_buf || m->fetch_runs != fetch_runs) return TL_OK;
    /* the run's counters stay the run's */
    const double stall = r->stall_s, fetch_s = r->flash_fetch_s, fstall = r->flash_stall_s;
    const uint64_t disk = r->bytes_disk, f_read = r->flash_read, f_need = r->flash_needed;
    const uint64_t f_dense = r->flash_dense, f_reads = r->flash_reads;
    uint64_t seed = 0x5eed0f1a5b7e5ull;
    tl_status st = TL_OK;
    const double t_start = tl_now();
    for (int32_t l = m->stage_first; l < m->stage_end && !st; l++) {
        if (*seconds > 0 && tl_now() - t_start >= max_s) break;
        for (int s = 0; s < TL_SITE_COUNT && !st; s++) {
            const tl_weight *w = &m->layers[l].site[s];
            if (!w->name || w->data) continue;
            const size_t nc = tl_flash_draw_channels(w->rows, share(user, l, s), &seed, chan);
            const uint64_t before = r->flash_read, n_before = r->flash_reads;
            const double t0 = tl_now();
            const uint8_t *base;
            st = fetch_runs(r, w, chan, nc, &base);
            if (!st) st = fetch_wait(r, SIZE_MAX);
            *seconds += tl_now() - t0;
            *bytes += r->flash_read - before;
            *reads += r->flash_reads - n_before;
        }
    }
    r->stall_s = stall, r->flash_fetch_s = fetch_s, r->flash_stall_s = fstall;
    r->bytes_disk = disk, r->flash_read = f_read, r->flash_needed = f_need;
    r->flash_dense = f_dense, r->flash_reads = f_reads;
    return st;
}

tl_status tl_residency_measure_embedding(tl_residency *r, int n, int rows, int first,
                                         float *dst, double *median_s) {
    *median_s = 0;
    const tl_weight *w = &r->m->tok_embd;
    if (w->data || !w->name || n < 1 || rows < 1) return TL_OK;
    enum { MAX_SAMPLES = 64 };
    double t[MAX_SAMPLES];
    int32_t ids[TL_EMBD_READ_ROWS];
    if (n > MAX_SAMPLES) n = MAX_SAMPLES;
    if (rows > tl_weight_embd_read_rows(r->m)) rows = tl_weight_embd_read_rows(r->m);
    const double stall = r->stall_s;
    const uint64_t disk = r->bytes_disk;
    tl_status st = TL_OK;
    for (int i = 0; i < n && !st; i++) {
        /* ids spread over the vocabulary (a large prime stride), rarely adjacent */
        for (int j = 0; j < rows; j++)
            ids[j] = (int32_t)(((uint64_t)(first + i * rows + j) * 7919 + 17) %
                               (uint64_t)w->rows);
        const double t0 = tl_now();
        st = tl_residency_embeddings(r, ids, rows, dst);
        t[i] = tl_now() - t0;
    }
    r->stall_s = stall, r->bytes_disk = disk;
    if (!st) *median_s = tl_median(t, (size_t)n);
    return st;
}

tl_status tl_residency_measure_passes(tl_residency *r, int n_passes,
                                      tl_residency_hold_fn hold, void *user, double *seconds,
                                      uint64_t *bytes) {
    *seconds = 0;
    *bytes = 0;
    if (r->error) return sticky(r);
    if (!r->plan.overlap || n_passes < 1) return TL_OK;
    const int L = r->m->hp.n_layer;
    /* the run's counters stay the run's */
    const double stall = r->stall_s;
    const uint64_t disk = r->bytes_disk, mem = r->bytes_mem, passes = r->passes;
    drain(r);
    tl_status st = TL_OK;
    r->measuring = 1; /* units arrive and are let go: no repacking, nothing bound */
    const double t0 = tl_now();
    for (int p = 0; p < n_passes && !st; p++) {
        st = tl_residency_begin_pass(r, 1);
        for (int u = 0; u <= L && !st; u++)
            if (!(st = tl_residency_acquire(r, u))) {
                if (hold && r->units[u].n_t) hold(user, u);
                tl_residency_release(r, u);
            }
    }
    *seconds = tl_now() - t0;
    *bytes = r->bytes_disk - disk;
    r->measuring = 0;
    drain(r); /* the next pass's units read ahead: not counted, dropped */
    r->stall_s = stall;
    r->bytes_disk = disk, r->bytes_mem = mem, r->passes = passes;
    return st;
}

void tl_residency_get_stats(const tl_residency *r, tl_residency_stats *out) {
    out->passes = r->passes;
    out->stall_s = r->stall_s;
    out->bytes_read_disk = r->bytes_disk;
    out->bytes_read_mem = r->bytes_mem;
    out->panel_bytes = r->panel_bytes;
    out->streamed_panel_bytes = r->streamed_panel_bytes;
    out->repack_s = r->repack_s;
    out->arrival_repack_s = r->arrival_repack_s;
    out->flash_bytes_needed = r->flash_needed;
    out->flash_bytes_read = r->flash_read;
    out->flash_bytes_dense = r->flash_dense;
    out->flash_reads = r->flash_reads;
    out->flash_fetch_s = r->flash_fetch_s;
    out->flash_stall_s = r->flash_stall_s;
    out->window_k = r->window_block ? r->window.k : 0;
    out->window_slots = r->window_block ? r->window.capacity : 0;
    out->window_lookups = r->window_block ? r->window.lookups : 0;
    out->window_hits = r->window_block ? r->window.hits : 0;
}

const tl_weight_plan *tl_residency_plan(const tl_residency *r) { return &r->plan; }
