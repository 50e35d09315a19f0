/* placement.c - the weight placement policy: which weights the budget keeps resident.
 *
 * A pure function of the model's tensor sizes, the budget and the prefetch knobs; it
 * reads no weight and allocates only the plan's flag arrays. Its byte counts are exact
 * for what exec/residency.c allocates (the same layouts, widened to TL_TIER_MAX_ALIGN,
 * the largest alignment a tier asks of a read), so a plan that fits the budget is one
 * the residency can carry out.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "model/placement.h"
#include "base/budget.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "tier/tier.h"

#define ALIGN ((uint64_t)TL_TIER_MAX_ALIGN)

static uint64_t align_down(uint64_t x) { return x & ~(ALIGN - 1); }
static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) & ~(ALIGN - 1); }

/* Builds the merged, aligned extents of tensors ws[0..n) (n <= TL_WEIGHT_UNIT_MAX). The
 * planner builds layouts by the thousand: an insertion sort by file offset, not qsort. */
void tl_weight_layout_build(tl_weight_layout *L, tl_weight *const *ws, int n) {
    L->n_t = L->n_e = 0;
    L->bytes = 0;
    for (int i = 0; i < n; i++) {
        int j = L->n_t++;
        for (; j > 0 && L->t[j - 1].w->file_offset > ws[i]->file_offset; j--) L->t[j] = L->t[j - 1];
        L->t[j] = (tl_weight_placed){ws[i], 0};
    }
    for (int i = 0; i < L->n_t; i++) {
        const tl_weight *w = L->t[i].w;
        uint64_t a0 = align_down(w->file_offset), a1 = align_up(w->file_offset + w->file_bytes);
        tl_weight_extent *last = L->n_e ? &L->e[L->n_e - 1] : NULL;
        if (last && a0 <= last->file_off + last->len) { /* overlaps or touches: merge */
            uint64_t end = a1 > last->file_off + last->len ? a1 : last->file_off + last->len;
            L->bytes += (size_t)(end - (last->file_off + last->len));
            last->len = (size_t)(end - last->file_off);
        } else {
            L->e[L->n_e++] = (tl_weight_extent){a0, (size_t)(a1 - a0), L->bytes};
            L->bytes += (size_t)(a1 - a0);
            last = &L->e[L->n_e - 1];
        }
        L->t[i].buf_off = last->buf_off + (size_t)(w->file_offset - last->file_off);
    }
}

/* A layer's attention (part 0) or FFN (part 1) matrices, without those converted to
 * f32 at load (always resident, never streamed) or absent (a ReLU FFN's gate). Returns
 * the count. */
int tl_llama_layer_matrices(const tl_llama_layer *L, int part, tl_weight **ws) {
    tl_llama_layer *ly = (tl_llama_layer *)L;
    if (ly->neurons.name) { /* a FFN by neuron: attention first, the neurons' runs last */
        int n = 0;
        if (part == 0) {
            if (ly->site[TL_SITE_ATTN_IN].name) ws[n++] = &ly->site[TL_SITE_ATTN_IN];
            if (ly->site[TL_SITE_ATTN_OUT].name) ws[n++] = &ly->site[TL_SITE_ATTN_OUT];
        } else {
            ws[n++] = &ly->neurons;
        }
        return n;
    }
    if (ly->site[0].name) { /* flash layout: see placement.h */
        static const int sites[2][2] = {{TL_SITE_ATTN_OUT, TL_SITE_FFN_MID},
                                        {TL_SITE_ATTN_IN, TL_SITE_FFN_IN}};
        int n = 0;
        for (int i = 0; i < 2; i++)
            if (ly->site[sites[part][i]].name) ws[n++] = &ly->site[sites[part][i]];
        return n;
    }
    tl_weight *attn[4] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo};
    tl_weight *ffn[3] = {&ly->w_gate, &ly->w_up, &ly->w_down};
    tl_weight **src = part ? ffn : attn;
    int n = 0;
    for (int i = 0; i < (part ? 3 : 4); i++)
        if (src[i]->name && !src[i]->convert) ws[n++] = src[i];
    return n;
}

/* The weights of unit u that the plan streams (attn/ffn parts, or the output). */
int tl_weight_plan_unit_weights(const tl_llama *m, const tl_weight_plan *p, int u, tl_weight **ws) {
    int n = 0;
    if (u == m->hp.n_layer) {
        if (!p->output_resident && m->output.name) ws[n++] = (tl_weight *)&m->output;
        return n;
    }
    if (!p->attn_resident[u]) n += tl_llama_layer_matrices(&m->layers[u], 0, ws + n);
    if (!p->ffn_resident[u]) n += tl_llama_layer_matrices(&m->layers[u], 1, ws + n);
    return n;
}

static uint64_t part_cost(tl_weight *const *ws, int n) {
    tl_weight_layout L;
    tl_weight_layout_build(&L, ws, n);
    return L.bytes + ALIGN; /* one budget allocation, aligned */
}

/* Bytes of the f32 tensors converted at load, and the largest raw read they need. */
static void converted_bytes(const tl_llama *m, uint64_t *held, uint64_t *temp) {
    tl_weight *const *all = m->all;
    *held = *temp = 0;
    for (size_t i = 0; i < m->n_all; i++)
        if (all[i]->convert) {
            *held += (uint64_t)all[i]->rows * all[i]->cols * sizeof(float) + 64;
            uint64_t t = align_up(all[i]->file_bytes + ALIGN) + ALIGN;
            if (t > *temp) *temp = t;
        }
}

uint64_t tl_weight_row_slot_bytes(const tl_llama *m) {
    /* a row widened to the alignment at both ends spans at most one block more than it */
    return align_up(tl_type_row_bytes(m->tok_embd.type, m->tok_embd.cols)) + ALIGN;
}

int32_t tl_weight_embd_read_rows(const tl_llama *m) {
    const uint64_t k = m->tok_embd.file_bytes / (16 * tl_weight_row_slot_bytes(m));
    return k < 1 ? 1 : k > TL_EMBD_READ_ROWS ? TL_EMBD_READ_ROWS : (int32_t)k;
}

uint64_t tl_weight_row_buf_bytes(const tl_llama *m) {
    return (uint64_t)tl_weight_embd_read_rows(m) * tl_weight_row_slot_bytes(m);
}

int tl_weight_wants_panels(const tl_llama *m, const tl_weight *w) {
    /* a token embedding that is no classifier is only looked up, a row at a time: in
     * panels a row's quants are 4 bytes in each of a panel's cache line pairs */
    if (w == &m->tok_embd && !m->tied_output) return 0;
    return !m->use_reference && !w->convert && !w->runs && tl_panels_wanted(w->type, w->rows);
}

int tl_weight_repacked_in_memory(const tl_llama *m, const tl_weight *w) {
    /* a tied classifier is the embedding's bytes, which the copy keeps in rows */
    const int embedding = w == &m->tok_embd || (m->tied_output && w == &m->output);
    return tl_weight_wants_panels(m, w) && (!m->panel_tier || embedding);
}

/* The largest temporary one of w's panels needs, when it is repacked in memory. */
static size_t repack_tmp(const tl_llama *m, const tl_weight *w) {
    return w->name && tl_weight_repacked_in_memory(m, w) ? tl_panels_tmp_bytes(w->type, w->cols)
                                                         : 0;
}

uint64_t tl_weight_repack_bytes(const tl_llama *m) {
    /* the planner asks per candidate plan: one layer of each shape class stands for all */
    size_t most = repack_tmp(m, &m->tok_embd);
    if (!m->tied_output && repack_tmp(m, &m->output) > most) most = repack_tmp(m, &m->output);
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        if (m->layers[l].shape_class != l) continue;
        tl_weight *ws[TL_WEIGHT_UNIT_MAX];
        for (int part = 0; part < 2; part++) {
            const int n = tl_llama_layer_matrices(&m->layers[l], part, ws);
            for (int i = 0; i < n; i++)
                if (repack_tmp(m, ws[i]) > most) most = repack_tmp(m, ws[i]);
        }
    }
    if (!most) return 0;
    const uint64_t threads = m->pool ? (uint64_t)tl_pool_threads(m->pool) : 1;
    return threads * align_up(most) + ALIGN;
}

/* Flash layout: the buffer a streamed site tensor's runs are read into (all of its
 * bytes, aligned, when every channel is needed), the largest such; 0 when none streams. */
static uint64_t site_buf_bytes(const tl_llama *m, const tl_weight_plan *p) {
    if (!m->flash) return 0;
    uint64_t most = 0;
    tl_weight *ws[TL_WEIGHT_UNIT_MAX];
    for (int u = 0; u < m->hp.n_layer; u++) {
        int n = tl_weight_plan_unit_weights(m, p, u, ws);
        for (int i = 0; i < n; i++) {
            const uint64_t b = align_up(ws[i]->file_offset + ws[i]->file_bytes) -
                               align_down(ws[i]->file_offset);
            if (b > most) most = b;
        }
    }
    return most;
}

uint64_t tl_weight_plan_site_buf_bytes(const tl_llama *m, const tl_weight_plan *p) {
    return site_buf_bytes(m, p);
}

uint64_t tl_weight_site_tags_bytes(const tl_llama *m) {
    size_t most = 0;
    for (int32_t l = 0; l < m->hp.n_layer; l++) {
        for (int s = 0; s < TL_SITE_COUNT; s++)
            if (m->layers[l].site[s].rows > most) most = m->layers[l].site[s].rows;
        if (m->layers[l].neurons.rows > most) most = m->layers[l].neurons.rows;
    }
    return (uint64_t)most * (sizeof(uint64_t) + sizeof(uint32_t)) + 64; /* tag, channel end */
}

size_t tl_neuron_run_bytes(const tl_llama *m) {
    size_t run = 0;
    for (int32_t l = m->stage_first; l < m->stage_end; l++) {
        const tl_weight *w = &m->layers[l].neurons;
        if (!w->name) return 0;
        const size_t b = tl_type_row_bytes(w->type, w->cols);
        if (run && b != run) return 0;
        run = b;
    }
    return run;
}

uint64_t tl_weight_plan_window_bytes(const tl_llama *m, const tl_weight_plan *p) {
    if (!p->window_slots || !m->hp.ffn_neurons || !tl_neuron_run_bytes(m)) return 0;
    return tl_neuron_window_bytes(m->hp.n_layer, (uint32_t)m->hp.n_ff, p->window_slots,
                                  tl_neuron_run_bytes(m)) + ALIGN;
}

uint64_t tl_weight_plan_bytes(const tl_llama *m, const tl_weight_plan *p) {
    const int L = m->hp.n_layer;
    uint64_t held, temp, total = 0, slot = 0;
    converted_bytes(m, &held, &temp);
    held += tl_weight_repack_bytes(m);
    total = held;
    const uint64_t site_buf = site_buf_bytes(m, p);
    if (site_buf) total += site_buf + ALIGN + tl_weight_site_tags_bytes(m);
    total += tl_weight_plan_window_bytes(m, p);
    tl_weight *ws[TL_WEIGHT_UNIT_MAX];
    for (int u = 0; u <= L; u++) {
        /* a flash layer's streamed sites are read at their use, not through the ring */
        int n = m->flash && u < L ? 0 : tl_weight_plan_unit_weights(m, p, u, ws);
        if (n) {
            uint64_t b = part_cost(ws, n) - ALIGN;
            if (b > slot) slot = b;
        }
        if (u < L) {
            tl_weight *ws2[TL_WEIGHT_UNIT_MAX];
            int na;
            if (p->attn_resident[u] && (na = tl_llama_layer_matrices(&m->layers[u], 0, ws2)))
                total += part_cost(ws2, na);
            if (p->ffn_resident[u] && (na = tl_llama_layer_matrices(&m->layers[u], 1, ws2)))
                total += part_cost(ws2, na);
        } else if (p->output_resident && !m->tied_output && m->output.name) {
            tl_weight *o = (tl_weight *)&m->output;
            total += part_cost(&o, 1);
        }
    }
    if (!m->tok_embd.name) {
        /* a later pipeline stage embeds nothing */
    } else if (p->embd_resident) {
        tl_weight *e = (tl_weight *)&m->tok_embd;
        total += part_cost(&e, 1);
    } else {
        total += tl_weight_row_buf_bytes(m) + ALIGN;
    }
    int slots = slot ? (p->overlap ? p->prefetch + 1 : 1) : 0;
    total += (uint64_t)slots * (slot + ALIGN);
    /* the converted tensors' raw reads happen before the slots exist */
    return total > held + temp ? total : held + temp;
}

uint64_t tl_weight_plan_minimum(const tl_llama *m, int prefetch, int overlap) {
    tl_weight_plan p;
    memset(&p, 0, sizeof p);
    p.attn_resident = calloc((size_t)m->hp.n_layer, 1);
    p.ffn_resident = calloc((size_t)m->hp.n_layer, 1);
    p.prefetch = prefetch;
    p.overlap = overlap;
    uint64_t b = p.attn_resident && p.ffn_resident ? tl_weight_plan_bytes(m, &p) : UINT64_MAX;
    tl_weight_plan_free(&p);
    return b;
}

void tl_weight_plan_free(tl_weight_plan *p) {
    free(p->attn_resident);
    free(p->ffn_resident);
    memset(p, 0, sizeof *p);
}

uint64_t tl_weight_plan_unit_bytes(const tl_llama *m, const tl_weight_plan *p, int unit) {
    tl_weight *ws[TL_WEIGHT_UNIT_MAX];
    int n = unit < 0 || unit > m->hp.n_layer ? 0 : tl_weight_plan_unit_weights(m, p, unit, ws);
    return n ? part_cost(ws, n) - ALIGN : 0;
}

static void plan_totals(const tl_llama *m, tl_weight_plan *p) {
    tl_weight *ws[TL_WEIGHT_UNIT_MAX];
    uint64_t slot = 0, streamed = 0;
    for (int u = 0; u <= m->hp.n_layer; u++) {
        int n = tl_weight_plan_unit_weights(m, p, u, ws);
        if (!n) continue;
        uint64_t b = part_cost(ws, n) - ALIGN;
        streamed += b;
        if (b > slot && !(m->flash && u < m->hp.n_layer)) slot = b;
    }
    p->slot_bytes = slot;
    p->n_slots = slot ? (p->overlap ? p->prefetch + 1 : 1) : 0;
    p->streamed_bytes = streamed;
    p->total_bytes = tl_weight_plan_bytes(m, p);
    p->resident_bytes = m->weight_bytes > streamed ? m->weight_bytes - streamed : 0;
}

/* Sets k of the n flags, evenly spaced: flag l is set when floor((l+1)k/n) > floor(lk/n). */
static void spread_flags(uint8_t *flags, int n, int k) {
    for (int l = 0; l < n; l++)
        flags[l] = (uint8_t)((int64_t)(l + 1) * k / n > (int64_t)l * k / n);
}

/* The greedy fills layers from the first one, so the streamed parts would all be the last
 * layers: while the resident first layers compute, the reader can fill its few buffers
 * and then idles, and the streamed layers then wait on the disk one after another. The
 * same number of resident parts spread evenly over the layers lets the reader stream
 * during every resident layer's compute. Layers of one model have one shape, so the bytes
 * do not change; if they did (budget exceeded), the greedy's choice stays. */
static void spread_resident(const tl_llama *m, tl_weight_plan *p, uint64_t budget) {
    const int L = m->hp.n_layer;
    uint8_t *keep_attn = malloc((size_t)L), *keep_ffn = malloc((size_t)L);
    if (!keep_attn || !keep_ffn) { /* a tl_weight_layout preference: keep the greedy's choice */
        free(keep_attn), free(keep_ffn);
        return;
    }
    memcpy(keep_attn, p->attn_resident, (size_t)L);
    memcpy(keep_ffn, p->ffn_resident, (size_t)L);
    /* over the layers present: a pipeline stage's others hold nothing to keep */
    const int a = m->stage_first, n = m->stage_end - m->stage_first;
    int ka = 0, kf = 0;
    for (int l = a; l < a + n; l++) ka += p->attn_resident[l], kf += p->ffn_resident[l];
    spread_flags(p->attn_resident + a, n, ka);
    spread_flags(p->ffn_resident + a, n, kf);
    if (tl_weight_plan_bytes(m, p) > budget) {
        memcpy(p->attn_resident, keep_attn, (size_t)L);
        memcpy(p->ffn_resident, keep_ffn, (size_t)L);
    }
    free(keep_attn), free(keep_ffn);
}

/* The plan for a neuron window of `slots` per layer (0: none) taken from the budget first. */
static tl_status plan_make(const tl_llama *m, uint64_t budget, int prefetch, int overlap,
                           uint32_t slots, int32_t k, tl_weight_plan *p) {
    const int L = m->hp.n_layer;
    memset(p, 0, sizeof *p);
    p->window_slots = slots;
    p->window_k = k;
    p->attn_resident = calloc((size_t)L, 1);
    p->ffn_resident = calloc((size_t)L, 1);
    if (!p->attn_resident || !p->ffn_resident) {
        tl_weight_plan_free(p);
        return tl_error_set(TL_ERR_NOMEM, "out of memory");
    }
    p->prefetch = prefetch;
    p->overlap = overlap;
    uint64_t minimum = tl_weight_plan_bytes(m, p);
    if (minimum > budget) {
        tl_weight_plan_free(p);
        if (m->flash)
            return tl_error_set(TL_ERR_NOMEM, "%.1f MiB are left for weights, but streaming "
                                "needs at least %.1f MiB (a buffer of the largest flash-layout "
                                "tensor, the output's, and norms%s)", budget / 1048576.0,
                                tl_mib_up(minimum),
                                slots ? ", with a neuron window of --neuron-window tokens"
                                      : "");
        return tl_error_set(TL_ERR_NOMEM, "%.1f MiB are left for weights, but streaming "
                            "needs at least %.1f MiB (%d layer buffers of the largest layer "
                            "plus norms)", budget / 1048576.0, tl_mib_up(minimum),
                            overlap ? prefetch + 1 : 1);
    }
    /* everything resident needs no streaming buffers, so it may fit where the greedy's
     * last steps (resident parts plus the buffers of what still streams) do not */
    memset(p->attn_resident, 1, (size_t)L);
    memset(p->ffn_resident, 1, (size_t)L);
    p->output_resident = p->embd_resident = 1;
    p->window_slots = 0, p->window_k = 0; /* nothing streams: no window */
    if (tl_weight_plan_bytes(m, p) <= budget) {
        plan_totals(m, p);
        return TL_OK;
    }
    p->window_slots = slots, p->window_k = k;
    memset(p->attn_resident, 0, (size_t)L);
    memset(p->ffn_resident, 0, (size_t)L);
    p->output_resident = p->embd_resident = 0;
    /* greedy in value order: attention of each layer, the output, FFN of each layer,
     * the embedding (with a tied output: both at once). An item that does not fit is
     * skipped and later, smaller ones are still tried. An embedding smaller than one IO
     * queue (chunk x depth) goes first: a step's row read, urgent, still waits for the
     * chunks the queue already has in flight, up to a queue's worth, where the same bytes
     * of a layer save only their own read. */
    const uint64_t queue_bytes = (uint64_t)m->params.io_chunk_bytes *
                                 (uint64_t)m->params.io_queue_depth;
    const int embd_first = m->tok_embd.name && m->tok_embd.file_bytes < queue_bytes;
    for (int step = 0; step < 2 * L + 2; step++) {
        const int item = !embd_first ? step : step == 0 ? 2 * L + 1 : step - 1;
        uint8_t one = 0, *flag = &one;
        if (item < L) flag = &p->attn_resident[item];
        else if (item > L && item <= 2 * L) flag = &p->ffn_resident[item - L - 1];
        int is_output = item == L, is_embd = item == 2 * L + 1;
        if (is_output && m->tied_output) continue;
        if (is_output) p->output_resident = 1;
        else if (is_embd) { p->embd_resident = 1; if (m->tied_output) p->output_resident = 1; }
        else *flag = 1;
        if (tl_weight_plan_bytes(m, p) <= budget) continue;
        if (is_output) p->output_resident = 0;
        else if (is_embd) { p->embd_resident = 0; if (m->tied_output) p->output_resident = 0; }
        else *flag = 0;
    }
    /* tied: the output is the embedding, resident only together with it */
    if (m->tied_output) p->output_resident = p->embd_resident;
    spread_resident(m, p, budget);
    plan_totals(m, p);
    return TL_OK;
}

/* Neuron window (model/neurons.h): the slots per layer that hold the union of k tokens'
 * predicted neurons, by the file's calibration (with a tenth to spare), at most n_ff. */
static uint32_t window_slots_for(const tl_llama *m, int32_t k) {
    const tl_neuron_info *ni = &m->neuron_info;
    if (k <= 0 || ni->window_k <= 0) return 0;
    const float share = ni->window_union[(k < ni->window_k ? k : ni->window_k) - 1];
    double slots = ceil(1.1 * share * (double)m->hp.n_ff);
    if (slots < 1) slots = 1;
    return slots > (double)m->hp.n_ff ? (uint32_t)m->hp.n_ff : (uint32_t)slots;
}

/* Bytes a decode token reads under plan p by the file's calibration: the streamed
 * attention sites whole (their sparsity aside), each streamed layer's predicted neurons
 * that the window misses, the output. */
static double token_read_bytes(const tl_llama *m, const tl_weight_plan *p) {
    const tl_neuron_info *ni = &m->neuron_info;
    const double hit = tl_neuron_window_hit(ni, p->window_k, p->window_slots, m->hp.n_ff);
    double b = 0;
    for (int u = m->stage_first; u <= m->hp.n_layer; u++) {
        if (u < m->hp.n_layer && u >= m->stage_end) continue;
        tl_weight *ws[TL_WEIGHT_UNIT_MAX];
        const int n = tl_weight_plan_unit_weights(m, p, u, ws);
        for (int i = 0; i < n; i++)
            b += (double)ws[i]->file_bytes *
                 (ws[i] == &m->layers[u < m->hp.n_layer ? u : 0].neurons
                      ? (double)ni->predicted * (1 - hit) : 1.0);
    }
    return b;
}

tl_status tl_weight_plan_make(const tl_llama *m, uint64_t budget, int prefetch, int overlap,
                              tl_weight_plan *p) {
    const int32_t asked = m->params.neuron_window;
    /* no window where it would hold nothing: no neuron runs of one size, every neuron
     * computed (no prediction, or measuring) */
    if (!m->hp.ffn_neurons || asked == 0 || m->neuron_info.window_k <= 0 ||
        !tl_neuron_run_bytes(m) || !m->params.neuron_predict || m->params.neuron_measure)
        return plan_make(m, budget, prefetch, overlap, 0, 0, p);
    /* the window asked for, or the planner's choice of k: the plan that reads least per
     * token (ties: the smaller window), from no window up; a window only adds bytes, so
     * when the first does not fit, none does */
    const int32_t k0 = asked > 0 ? asked : 0, k1 = asked > 0 ? asked : m->neuron_info.window_k;
    tl_status st = plan_make(m, budget, prefetch, overlap, window_slots_for(m, k0), k0, p);
    if (st) return st;
    double best = token_read_bytes(m, p);
    for (int32_t k = k0 + 1; k <= k1; k++) {
        tl_weight_plan c;
        if (plan_make(m, budget, prefetch, overlap, window_slots_for(m, k), k, &c)) continue;
        const double b = token_read_bytes(m, &c);
        if (b < best) {
            tl_weight_plan_free(p);
            *p = c;
            best = b;
        } else {
            tl_weight_plan_free(&c);
        }
    }
    return TL_OK;
}
