/* cost.c - see cost.h. The formulas, each next to the code that evaluates it:
 *
 *   matmul(w, n)   = call(type(w), n) + n * rows(w) * cols(w) / macs(type(w), n)
 *                    the profile's measured per-call cost and rate
 *   attention(row) = ctx * n_head * head_dim * a(g, blk)
 *                    + stored * 2 * kv_dim * b[bits] / (blk * min(threads, jobs))
 *                    + kv_bytes * m(W) / blk
 *                    ctx = positions the row sees, stored = those in full pages committed
 *                    before the step (open pages are f32), blk = rows per attention block
 *                    (1 in decode); a from the profile's multi-head and grouped-query
 *                    figures, per block (own + shared / blk) and linear in 1 / g for g
 *                    query heads per kv head, the block figures times the calibrated
 *                    attn_block_scale (the model's own attention timed over a long
 *                    context, tl_plan_calibrate_attention); b[bits]: decoding a stored
 *                    element, timed on one thread (each kv head's job decodes its K
 *                    columns, then its V columns, once a block; jobs = blocks *
 *                    n_head_kv share the threads);
 *                    kv_bytes = the KV bytes the row reads at the layer (as stored), m(W)
 *                    = the profile's extra seconds per KV byte beyond the caches, times
 *                    miss(W) = (W - attn_cache_bytes) / (attn_mem_bytes - attn_cache_bytes)
 *                    clamped to [0, 1], W = the KV bytes the whole pass reads, a
 *                    sequence's KV counted once a step; when a sequence's rows form B
 *                    blocks in the step, they read its KV one after another: the
 *                    extra is kv_bytes (m(W) / B + (1 - 1 / B) m(max) miss(a row's KV at
 *                    the layer)), m(max) the profile's full extra
 *   elementwise    = rows * (4 * n_embd + 3 * n_ff) * e            norms, rope, swiglu, adds
 *   kv store       = rows * 2 * kv_dim * s[bits]     appending the rows' K and V, storing
 *                    full pages in the format (the profile's figure into fresh memory)
 *   layer compute  = sum over micro-batches k of [ g(rows_k) (sum of its 7 matmuls at
 *                    n = rows_k + elementwise + kv store + fixed) + attention of its rows ]
 *                    g = the calibrated layer_row_scale (1 up to 4 rows or unmeasured)
 *   wall (predict) = with weights streamed and the disk calibration's spread s_1..s_n,
 *                    the mean over k of the wall time with the stream's rates times s_k
 *   output compute = matmul(output, logit rows) + logit rows * n_vocab * e (sampling)
 *   repack         = per pass, streamed bytes of weights kept in panels / repack_bps(type)
 *                    (residency.c repacks a unit on arrival), added to compute
 *   weight reads   = streamed bytes of the unit / read_bps(io_chunk, io_depth)
 *   flash reads    = (flash layout) per streamed site tensor, its runs a pass needs: each
 *                    of C channels needed with probability p = 1 - z^rows, z the site's
 *                    level or the share of its calibration inputs that were exactly zero
 *                    if more (a ReLU's), each row's channels independent; needed runs of
 *                    R bytes read, with each stretch
 *                    of k <= kmax = gap / R unneeded runs between two needed ones read
 *                    through: bytes = C R (p + (1 - p) f), f = sum_{k <= kmax} k p^2 q^(k-1)
 *                    = 1 - (kmax + 1) q^kmax + kmax q^(kmax + 1) (the share of unneeded runs
 *                    in such stretches, q = 1 - p), requests = C p q^(kmax + 1) + 1, plus
 *                    the alignment (one tier block a request); a pass of several
 *                    micro-batches reads each one's runs;
 *                    requests at least K' (p + (1 - p) f), K' = TL_FLASH_FETCH_PARTS (no
 *                    request is much longer than 1 / K' of the tensor);
 *                    seconds T_r = bytes / read_bps(bytes per request, the flash queue's
 *                    depth); compute waits for them like the KV wait (a site's reads
 *                    wait for its input), but its product, T_c at the rows' need share,
 *                    runs in K parts of the needed channels (tl_flash_part_channels),
 *                    each once its runs arrived; the first arrives after
 *                    T_1 = T_r max(1 / K, min(1, depth x min(request, chunk) / bytes))
 *                    (no sooner than the requests the queue serves together), so the
 *                    site takes max(T_1 + T_c, T_r + T_c / K) and compute waits
 *                    max(T_1, T_r - T_c (1 - 1 / K))
 *   neuron reads   = (a ReLU FFN by neuron, model/neurons.h) the same formula over the
 *                    neuron runs, with p = the share of neurons the rows' union predicts
 *                    (the file's calibrated share; for r rows its mean union of r tokens)
 *                    times the share the neuron window misses (tl_neuron_window_hit)
 *   neuron compute = the predictor's two products + the neuron runs' product at n rows
 *                    times the share computed
 *   KV reads       = disk pages seen by the pass * read bytes / read_bps(slot_bytes, depth)
 *                    depth = the IO queue's for the KV cache's urgent class (weights and KV
 *                    pages share the queue; tl_aio_class_depth); read bytes =
 *                    slot_bytes, or the input rows' slot at a layer that recomputes;
 *                    while weights stream, at least the batches' device time, sum of
 *                    u + (pages(k) - 1) * v below (no weight chunk starts while an urgent
 *                    read is out, tier/aio.c, so a batch has the device to itself);
 *                    under page selection the pages seen are those the selection uses,
 *                    times kv_select_reads (the hit-rate model's forecast of the reads,
 *                    unused staged pages and demand reads, per page used)
 *   recompute      = per page read as input rows: the Wk and Wv products of page_tokens
 *                    rows, added to compute
 *   KV writes      = pages filled and homed on disk * (slot_bytes [+ input rows' slot])
 *                    / write_bps
 *   KV wait        = the pass's micro-batches in the engine's order (layer by layer),
 *                    each waiting w(k) = max(0, done(k) - t(k)) at t(k), then computing
 *                    c(k): the engine asks for micro-batch k's disk pages at t(k-1),
 *                    before it waits for k-1's (engine.c; the pass's first read has
 *                    nothing to hide it), as urgent reads (tier/aio.c): ahead of the
 *                    queued weight chunks, but behind those the device is already
 *                    serving, and behind the urgent reads asked for before them, so
 *                    done(k) = t(k-1) + read(k) when the batch before is done by then,
 *                    else max(t(k-1) + read(k) - d, done(k-1) + pages(k) * v);
 *                    read(k) = d + u + (pages(k) - 1) * v, the pages submitted together;
 *                    u = the profile's disk_urgent_read_s and v = the larger of its
 *                    disk_urgent_page_s (for a page of TL_PROF_URGENT_BYTES; a smaller
 *                    page's in proportion: a further page of a batch adds its transfer,
 *                    its latency hidden behind the batch's first) and slot_bytes /
 *                    read_bps(slot_bytes, depth) when weights stream in the pass (u, v
 *                    measured so: behind the stream, every core computing; the profile's
 *                    pages are smaller than some models'), else slot_bytes /
 *                    read_bps(slot_bytes, 1 and depth);
 *                    d = the weight chunks in flight ahead of a batch that finds no
 *                    urgent read out (the stream refilled the queue after them): half of
 *                    min(io_chunk x io_depth, prefetch x the mean streamed unit) (a chunk
 *                    asked for at a random moment of its read has half of it left), read
 *                    at the weights' rate, times the share of the pass the stream reads
 *                    (min(1, weight reads / compute)); not in u, the lower quartile of
 *                    the profile's urgent batches; where the ring runs ahead of the
 *                    compute (weight reads < compute, prefetch > 0), at least what is
 *                    left at t(k-1) of min(io_chunk x io_depth, the mean streamed unit)
 *                    at the weights' rate: a streamed layer's buffer frees as the layer
 *                    before it is released, so as each layer begins the ring puts one
 *                    unit's chunks in flight, and the batch asked for just then (the
 *                    layer's second micro-batch, or the next layer's first when there is
 *                    one) finds all of them ahead of it;
 *                    c(k) = micro-batch k's compute at one layer. Small micro-batches with
 *                    their KV on disk wait most: the compute of the micro-batch before
 *                    is too short to hide their page reads.
 *   pass time      = max(compute' + wait, smax(compute', weight + KV reads + KV writes),
 *                        ring + wait), wait = KV wait + the flash reads' wait,
 *                    with overlap (the wait is stalls on reads, already timed against the
 *                    compute before them: smax's jitter is between compute and IO),
 *                    smax(a, b) = (a^4 + b^4)^(1/4): max(a, b) when one side dominates
 *                    (within 1.5% once the smaller is at most half the larger), 2^(1/4) =
 *                    1.19 max at exact balance. Compute and IO overlap through a ring of
 *                    prefetch + 1 slots, and each unit's read and compute times jitter
 *                    (a disk's rate varies between passes over the same file), so a
 *                    balanced pipeline stalls on whichever stage is slow at the moment.
 *                    The exponent is fitted, not derived: bench_costmodel's decode passes
 *                    run longer than max() near balance and as max() far from it, and
 *                    smax with 4 follows both,
 *                    where
 *                    compute' = compute + (s - 1) * min(IO, compute): the part of the
 *                    compute that runs while the disk streams is s times slower
 *                    (s = the profile's slowdowns, io_slowdown_matvec for products of
 *                    <= 4 rows, io_slowdown_attn for attention and io_compute_slowdown
 *                    for the rest, weighted by time; the last as 1 + (s - 1) k, k = the
 *                    calibrated stream's rate over the rate of the stream the profile
 *                    measured s beside (io_stream_bps) within [1/4, 4]: the IO takes its
 *                    cycles per byte read; where the calibration timed a layer's
 *                    forward beside the model file's own stream, io_slowdown_stream
 *                    instead; and where it measured what each byte that stream read
 *                    cost the forward, io_stream_s_per_byte = c, s = 1 + c B / IO for all
 *                    of the pass's compute, B the pass's bytes read and written: the
 *                    loss is c B when the compute outlasts the IO (pass_io_cost))
 *                    and ring = tl_cost_ring_pass_s: the pass as the residency ring's
 *                    buffers let its weight reads run ahead of the compute (each streamed
 *                    unit read in its bytes / read_bps(io_chunk, io_depth), the disk one
 *                    read at a time; the layers share the compute less the output's
 *                    product and each streamed unit's repacking, which it keeps)
 *                  = compute + KV wait + weight + KV reads + KV writes   without overlap
 * One pass of the engine reads every streamed layer once (and the output when any row
 * needs logits), whatever the number of micro-batches: the block schedule's reuse.
 * Prefill feeds each sequence `chunk` prompt tokens a step; a block of prompts that differ
 * in length (tl_workload's quantiles) takes the steps its longest needs, a step's rows
 * being those of the prompts not yet fed.
 * A pass is the unit of overlap: the residency ring reads ahead across layers and into
 * the next pass, so the pass, not the single layer, is where smax() applies; per-layer
 * terms are reported as the pass's terms divided by n_layer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "plan/cost.h"
#include "exec/model_handle.h"
#include "base/status.h"
#include "format/tensor_type.h"
#include "kernels/kernels.h"
#include "model/flash_layout.h"
#include "model/placement.h"
#include "tier/aio.h"
#include "tier/tier.h"

#define SLOT_ALIGN ((double)TL_TIER_MAX_ALIGN)

double tl_cost_matmul(const tl_hw_profile *prof, const tl_weight *w, double n) {
    if (n <= 0) return 0;
    double macs = n * (double)w->rows * (double)w->cols;
    return tl_profile_matmul_call_s(prof, (int32_t)w->type, n) +
           macs / tl_profile_matmul_macs(prof, (int32_t)w->type, n);
}

/* The depth the KV cache's reads run at: its prefetch and demand reads are urgent. */
static int32_t kv_read_depth(const tl_model *m) {
    return tl_aio_class_depth(m->lm.params.io_queue_depth, TL_AIO_SOON);
}

/* A KV format's per-value figure in one of the profile's tl_prof_kvbits-indexed tables
 * (0 for a format the profile does not list). */
static double kv_bits_figure(const double fig[TL_PROF_N_KVBITS], int32_t bits) {
    for (int i = 0; i < TL_PROF_N_KVBITS; i++)
        if (tl_prof_kvbits[i] == bits) return fig[i];
    return 0;
}

/* Seconds per MAC of attention for rows taken in blocks of `block` rows (llama.h), from
 * the profile's two points b = 1 and b = TL_ATTN_BLOCK_MAX_ROWS of one head grouping: a
 * part every row pays (the arithmetic) and a part the block shares (reading K and V),
 * c(b) = shared / b + own. */
static double attn_block_line(double s1, double sb, double block) {
    const double B = TL_ATTN_BLOCK_MAX_ROWS;
    if (sb <= 0 || sb > s1) sb = s1;
    const double shared = (s1 - sb) * B / (B - 1), own = s1 - shared;
    return own + shared / (block > 1 ? block : 1);
}

/* The same for query heads sharing each kv head in groups of `group`: the group shares
 * its job's page views and reads, so the cost is linear in 1/group through the profile's
 * multi-head (1) and grouped (TL_PROF_GQA_GROUP) figures, never below the FMA bound
 * (QK and AV: 4 FLOPs per MAC of the profile's count). A profile without the grouped
 * figures prices every grouping as multi-head. */
static double attn_s_per_mac(const tl_hw_profile *prof, double block, double group) {
    const double k = prof->attn_block_scale > 0 ? prof->attn_block_scale : 1;
    const double c1 = attn_block_line(prof->attn_s_per_mac, k * prof->attn_block_s_per_mac,
                                      block);
    if (group <= 1 || prof->attn_gqa_s_per_mac <= 0) return c1;
    double cg = attn_block_line(prof->attn_gqa_s_per_mac, k * prof->attn_gqa_block_s_per_mac,
                                block);
    if (cg > c1) cg = c1; /* sharing a kv head never costs more (noise in the profile) */
    const double G = TL_PROF_GQA_GROUP, x = (1 - 1 / group) / (1 - 1 / G);
    const double c = c1 + (cg - c1) * x, fma = prof->fma_flops > 0 ? 4.0 / prof->fma_flops : 0;
    return c > fma ? c : fma;
}

/* Flash layout: the share of a site's channels a product of `rows` rows needs (non-zero
 * in some row), each row's zeros a share `level`, independently. */
static double flash_need_share(double level, double rows) {
    return level > 0 ? 1 - pow(level, rows > 1 ? rows : 1) : 1;
}

/* The share of zeros a product of layer l's site s sees in each row: the level in force,
 * or more where calibration saw that many inputs exactly zero (a ReLU's: the table's
 * threshold stays 0 up to that share). */
static double site_zero_share(const tl_model *m, int32_t l, int s) {
    const tl_sparsity *sp = &m->lm.sparse;
    double level = sp->site_level[s];
    if (sp->table) {
        const float *row = sp->table + ((size_t)l * TL_SITE_COUNT + (size_t)s) * TL_SPARSITY_LEVELS;
        int i = 0;
        while (i + 1 < TL_SPARSITY_LEVELS && row[i + 1] == 0.0f) i++;
        const double zeros = (double)i / (TL_SPARSITY_LEVELS - 1);
        if (zeros > level) level = zeros;
    }
    return level;
}

double tl_cost_flash_need_share(const tl_model *m, int32_t l, int site, double rows) {
    return flash_need_share(site_zero_share(m, l, site), rows);
}

/* A FFN by neuron (model/neurons.h): the share of a layer's neurons a product of `rows`
 * rows computes, the union of their predicted sets. The file measured the union of k
 * consecutive tokens' sets for k up to its window_k; beyond, blocks of window_k tokens
 * are taken as independent. */
static double neuron_share(const tl_model *m, double rows) {
    const tl_neuron_info *ni = &m->lm.neuron_info;
    if (!m->lm.params.neuron_predict) return 1;
    if (rows <= 1 || ni->window_k <= 0) return ni->predicted;
    if (rows <= ni->window_k) return ni->window_mean[(int)rows - 1];
    const double u = ni->window_mean[ni->window_k - 1];
    return 1 - pow(1 - u, rows / ni->window_k);
}

/* The share of a layer's neurons a decode token reads with the plan's neuron window:
 * the predicted ones the window did not hold, by the file's hit rate for its k. */
static double neuron_read_share(const tl_model *m, const tl_weight_plan *plan, double rows) {
    const tl_neuron_info *ni = &m->lm.neuron_info;
    const double share = neuron_share(m, rows);
    if (!plan->window_slots || !m->lm.params.neuron_predict ||
        share * m->lm.hp.n_ff > plan->window_slots) /* a product the window cannot hold */
        return share;
    return share * (1 - tl_neuron_window_hit(ni, plan->window_k, plan->window_slots,
                                             m->lm.hp.n_ff));
}

/* Bytes of the layers' streamed units read ahead through the ring per pass (a flash
 * layer's streamed sites are read at their turn instead: flash_reads). */
static double ring_layer_bytes(const tl_model *m, const tl_weight_plan *plan) {
    double b = 0;
    for (int32_t l = 0; l < m->lm.hp.n_layer && !m->lm.flash; l++)
        b += tl_weight_plan_unit_bytes(&m->lm, plan, l);
    return b;
}

/* The residency ring (exec/residency.c) in steady state: how long one pass takes when unit
 * u (layers 0..U-1, then the output, U) computes c[u] seconds and, when r[u] > 0, is
 * streamed and read in r[u] seconds. The ring has n_slots buffers; a read is issued as soon
 * as a buffer is empty, in the order of the pass's streamed units and, once the pass has
 * begun, of the next pass's streamed layers (not its output: whether that pass needs
 * logits is not known yet); the disk serves one read at a time in issue order; a unit
 * computes once its read is done and frees its buffer when it has. So a pass whose
 * streamed units bunch together waits for them even while the compute of its resident
 * units could have hidden their reads, had the ring had room to read that far ahead.
 * `passes` passes from an empty ring: the last one's seconds (tl_cost_ring_pass_s: of three,
 * the steady state), or (total) all of them (tl_cost_ring_run_s). start_wait > 0: each pass
 * begins with an urgent read (a token embedding's row on disk), which waits for the reads
 * the disk has in flight, at most start_wait seconds of them (the IO queue's depth). */
static double ring_sim(const double *c, const double *r, int32_t U, int n_slots, int passes,
                       int total, double start_wait) {
    int32_t seq[TL_COST_RING_MAX_UNITS], n_seq = 0;  /* streamed units of one pass, in order */
    if (U < 0 || U >= TL_COST_RING_MAX_UNITS) return 0;
    for (int32_t u = 0; u <= U; u++)
        if (r[u] > 0) seq[n_seq++] = u;
    if (n_seq == 0 || n_slots < 1 || passes < 1) return 0;
    /* at most n_slots reads are outstanding (issued, not yet used), and never more than
     * two passes' worth: the times they are done, in a ring of RING_MAX_SLOTS */
    enum { RING_MAX_SLOTS = 128 };
    if (n_slots > 2 * n_seq) n_slots = 2 * n_seq;
    if (n_slots > RING_MAX_SLOTS) n_slots = RING_MAX_SLOTS;
    double done[RING_MAX_SLOTS];
    double now = 0, disk = 0, start = 0;
    int issued = 0, used = 0; /* reads issued; units acquired (issued - used: buffers held) */
    for (int p = 0; p < passes; p++) {
        start = now;
        for (int32_t u = 0; u <= U; u++) {
            /* issue while a buffer is empty: this pass's units, then the next's layers */
            for (;;) {
                const int ip = issued / n_seq, iu = seq[issued % n_seq];
                if (issued - used == n_slots || ip >= passes || ip > p + 1 ||
                    (ip == p + 1 && iu == U))
                    break;
                disk = (disk > now ? disk : now) + r[iu];
                done[issued++ % RING_MAX_SLOTS] = disk;
            }
            /* the pass's first urgent read waits for the reads in flight, up to
             * start_wait of them */
            if (u == 0 && start_wait > 0 && disk > now) now += fmin(disk - now, start_wait);
            if (r[u] > 0 && done[used % RING_MAX_SLOTS] > now) now = done[used % RING_MAX_SLOTS];
            now += c[u];
            if (r[u] > 0) used++; /* its buffer is free once it has computed */
        }
    }
    return total ? now : now - start;
}

double tl_cost_ring_pass_s(const double *c, const double *r, int32_t U, int n_slots,
                           double start_wait) {
    return ring_sim(c, r, U, n_slots, 3, 0, start_wait);
}

double tl_cost_ring_run_s(const double *c, const double *r, int32_t U, int n_slots,
                          int n_passes, double start_wait) {
    return ring_sim(c, r, U, n_slots, n_passes, 1, start_wait);
}

/* The ring from empty with every streamed read d longer */
static double ring_delayed(const double *c, const double *r, double *rd, int32_t U,
                           int n_slots, int n_passes, double d) {
    for (int32_t u = 0; u <= U; u++) rd[u] = r[u] > 0 ? r[u] + d : 0;
    return ring_sim(c, rd, U, n_slots, n_passes, 1, 0);
}

double tl_cost_ring_fit_delay(const double *c, const double *r, int32_t U, int n_slots,
                              int n_passes, double measured_s) {
    if (U < 0 || U >= TL_COST_RING_MAX_UNITS || !(measured_s > 0) || n_passes < 1) return 0;
    double rd[TL_COST_RING_MAX_UNITS], mean_r = 0;
    int32_t streamed = 0;
    for (int32_t u = 0; u <= U; u++)
        if (r[u] > 0) streamed++, mean_r += r[u];
    if (!streamed) return 0;
    mean_r /= streamed;
    const double reads = (double)streamed * n_passes; /* streamed reads in the sample */
    const double at0 = ring_sim(c, r, U, n_slots, n_passes, 1, 0);
    if (!(at0 > 0)) return 0;
    double d = 0;
    if (at0 < measured_s) {
        /* the ring's time grows with d; at hi the reads alone take measured_s */
        double lo = 0, hi = measured_s / reads;
        for (int it = 0; it < 50; it++) {
            const double mid = 0.5 * (lo + hi);
            if (ring_delayed(c, r, rd, U, n_slots, n_passes, mid) < measured_s) lo = mid;
            else hi = mid;
        }
        d = 0.5 * (lo + hi);
    }
    /* where compute hides most reads the ring's time hardly moves with d, and the
     * sample's noise would fit as a large d (or none): that sample cannot tell */
    const double step = 0.1 * mean_r;
    const double grow = ring_delayed(c, r, rd, U, n_slots, n_passes, d + step) -
                        ring_delayed(c, r, rd, U, n_slots, n_passes, d);
    return grow < 0.5 * reads * step ? -1 : d;
}

/* tl_cost_ring_pass_s for a pass of `compute` seconds whose output unit takes out_s of them
 * (< 0: the pass needs no logits, so the output is neither computed nor read) and each
 * unit u its repacking on arrival rep[u] (streamed units; out_s includes the output's),
 * the rest shared equally by the layers; r holds every unit's read time and is left as it
 * was. */
static double ring_time(double *c, double *r, const double *rep, int32_t U, int n_slots,
                        double compute, double out_s, double start_wait) {
    if (U < 1) return 0;
    const double r_out = r[U];
    double rest = compute - (out_s > 0 ? out_s : 0);
    for (int32_t u = 0; u < U; u++) rest -= rep[u];
    for (int32_t u = 0; u < U; u++) c[u] = (rest > 0 ? rest / U : 0) + rep[u];
    c[U] = out_s > 0 ? out_s : 0;
    if (out_s < 0) r[U] = 0;
    const double t = tl_cost_ring_pass_s(c, r, U, n_slots, start_wait);
    r[U] = r_out;
    return t;
}

/* Seconds of layer l's 7 matmuls of `rows` rows. The search prices thousands of passes
 * of identical layers, so results are remembered by (rows, the layer's weight types and
 * shapes) in a few slots (memo may be NULL). */
enum { MM_MEMO = 4 };
typedef struct mm_memo { int32_t layer[MM_MEMO], rows[MM_MEMO]; double s[MM_MEMO]; int next; } mm_memo;
static const tl_weight *layer_weight(const tl_model *m, int32_t l, int i) {
    const tl_llama_layer *L = &m->lm.layers[l];
    const tl_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    return ws[i];
}
static int same_shapes(const tl_model *m, int32_t a, int32_t b) {
    return m->lm.layers[a].shape_class == m->lm.layers[b].shape_class;
}
static void memo_init(mm_memo *mo) {
    for (int i = 0; i < MM_MEMO; i++) mo->layer[i] = -1;
    mo->next = 0;
}
static double layer_matmul_s(const tl_model *m, const tl_hw_profile *prof, int32_t l,
                             int32_t rows, mm_memo *mo) {
    for (int i = 0; mo && i < MM_MEMO; i++)
        if (mo->layer[i] >= 0 && mo->rows[i] == rows && same_shapes(m, mo->layer[i], l))
            return mo->s[i];
    double mm = 0;
    for (int i = 0; i < 7; i++) /* a ReLU FFN has no gate */
        if (layer_weight(m, l, i)->name) mm += tl_cost_matmul(prof, layer_weight(m, l, i), rows);
    /* flash layout: the site tensors' products take the runs of the channels in use, at
     * the rate of the row kernels that work as they do: streaming the weights in their
     * type, or beyond TL_COLMAT_STREAM_MAX_N rows multiplying f32 panels (the F32 GEMM's) */
    for (int s = 0; s < TL_SITE_COUNT; s++) {
        tl_weight w = m->lm.layers[l].site[s];
        if (!w.name) continue;
        if (rows > TL_COLMAT_STREAM_MAX_N) w.type = TL_TYPE_F32;
        mm += tl_cost_matmul(prof, &w, rows) * flash_need_share(site_zero_share(m, l, s), rows);
    }
    /* a FFN by neuron: the predictor's two products, and the neurons it predicts (their
     * rows and columns, priced as one product over their runs) */
    const tl_llama_layer *ly = &m->lm.layers[l];
    if (ly->neurons.name) {
        mm += tl_cost_matmul(prof, &ly->pred_v, rows) + tl_cost_matmul(prof, &ly->pred_u, rows);
        mm += tl_cost_matmul(prof, &ly->neurons, rows) * neuron_share(m, rows);
    }
    if (mo) {
        mo->layer[mo->next] = l, mo->rows[mo->next] = rows, mo->s[mo->next] = mm;
        mo->next = (mo->next + 1) % MM_MEMO;
    }
    return mm;
}

/* KV bytes one layer's attention reads for a micro-batch whose rows see ctx positions, of
 * which `stored` in stored pages (open pages are f32), taking rows in blocks of `block`
 * (a block reads each position once). */
static double mb_kv_bytes(const tl_model *m, int32_t kv_bits, double ctx, double stored,
                          double block) {
    const double kvd = (double)m->lm.hp.n_head_kv * m->lm.hp.head_dim;
    const double open = ctx > stored ? ctx - stored : 0;
    /* a stored position: K and V rows as tl_cost_kv_page_bytes counts them */
    const double stored_pos = tl_cost_kv_page_bytes(m, kv_bits, 1);
    return (2 * kvd * open * 4 + stored * stored_pos) / (block > 1 ? block : 1);
}

/* The share of KV reads that miss the caches when W bytes of KV are read before any of
 * them again: none up to the profile's attn_cache_bytes (its in-cache figures were timed
 * with that much), all from attn_mem_bytes (where its extra per byte was timed), linear
 * between. */
static double kv_miss_share(const tl_hw_profile *prof, double w) {
    const double lo = prof->attn_cache_bytes, hi = prof->attn_mem_bytes;
    if (!(hi > lo)) return 0;
    return w <= lo ? 0 : w >= hi ? 1 : (w - lo) / (hi - lo);
}

/* Seconds per KV byte the attention of a pass pays beyond the profile's in-cache rates:
 * the pass reads W bytes of KV (every layer of the stage, every micro-batch, each
 * sequence's KV once a step however many blocks its rows form) before it reads any of
 * them again, so the caches hold less of it the larger W is; the profile's extra
 * (attn_mem_s_per_byte) times kv_miss_share(W). */
static double pass_kv_mem_s_per_byte(const tl_model *m, const tl_hw_profile *prof,
                                     int32_t kv_bits, const double *ctx, const double *stored,
                                     int32_t n_mb, double block, double seq_blocks) {
    if (!(prof->attn_mem_s_per_byte > 0)) return 0;
    double w = 0;
    for (int32_t k = 0; k < n_mb; k++)
        w += mb_kv_bytes(m, kv_bits, ctx[k], stored[k], block * fmax(1, seq_blocks));
    w *= m->lm.stage_end - m->lm.stage_first;
    return kv_miss_share(prof, w) * prof->attn_mem_s_per_byte;
}

/* Seconds a micro-batch's attention at one layer pays for KV beyond the caches (the rows
 * as mb_layer_compute takes them): each sequence's first block reads the KV from where
 * the pass left it, at the pass's mem_s_per_byte; its other seq_blocks - 1 blocks read it
 * again from the caches, but for the share of it that misses them, at the profile's full
 * extra: kv_miss_share of one row's KV at the layer (a row at the chunk's mean position). */
static double kv_mem_s(const tl_model *m, const tl_hw_profile *prof, int32_t kv_bits,
                       int32_t rows, double block, double seq_blocks, double ctx,
                       double stored, double mem_s_per_byte) {
    if (!(prof->attn_mem_s_per_byte > 0) || rows <= 0) return 0;
    const double B = fmax(1, seq_blocks), bytes = mb_kv_bytes(m, kv_bits, ctx, stored, block);
    const double row_kv = mb_kv_bytes(m, kv_bits, ctx / rows, stored / rows, 1);
    const double again = (1 - 1 / B) * kv_miss_share(prof, row_kv) * prof->attn_mem_s_per_byte;
    return bytes * (mem_s_per_byte / B + again);
}

/* The calibrated factor of a layer's work beside attention for a micro-batch of `rows`
 * rows (profile.h: layer_row_scale): the grid's point at or below rows; 1 for up to 4 rows
 * or where nothing was measured. */
static double layer_row_scale(const tl_hw_profile *prof, int32_t rows) {
    if (rows <= 4) return 1;
    int k = 0;
    while (k + 1 < TL_PROF_N_ROWS && tl_prof_rows[k + 1] <= rows) k++;
    return prof->layer_row_scale[k] > 0 ? prof->layer_row_scale[k] : 1;
}

/* One micro-batch of `rows` rows at layer l, attention taking them in blocks of `block`
 * rows (1 in decode): its 7 matmuls, attention over ctx visible positions of which
 * `stored` in stored pages (decoded once per block), element-wise work and the per-layer
 * fixed cost; `blocks`: its attention blocks (<= 0: rows / block, rounded; a step that
 * mixes generating rows and a prompt chunk gives its own, as its mean block undercounts
 * them); `seq_blocks`: the blocks one sequence's rows form in the step (their mean), which
 * read the same KV one after another (kv_mem_s). *matvec: the matmuls' part when the
 * products have <= 4 rows, *attn: the attention's part (each slows down differently while
 * the disk streams). */
static double mb_layer_compute(const tl_model *m, const tl_hw_profile *prof, int32_t l,
                               int32_t kv_bits, int32_t rows, double block, double blocks,
                               double seq_blocks, double ctx, double stored,
                               double mem_s_per_byte, double *matvec, double *attn,
                               mm_memo *mo) {
    const tl_llama_hparams *hp = &m->lm.hp;
    const double d = hp->n_embd, f = hp->n_ff, hd = hp->head_dim;
    const double kvd = (double)hp->n_head_kv * hd;
    const double b = block > 1 ? block : 1;
    const double attn_per_pos =
        hp->n_head * hd * attn_s_per_mac(prof, b, (double)hp->n_head / hp->n_head_kv);
    /* each kv head's job decodes its own K columns of a stored page for the scores, then
     * its V columns for the sum, once a block; the jobs (a block's kv heads) run on the
     * threads, and the profile times the decoding on one */
    const double jobs = (blocks > 0 ? blocks : round(rows / b)) * hp->n_head_kv;
    const double par = fmax(1, fmin(prof->n_threads, jobs));
    const double decode_per_pos =
        2.0 * kvd * kv_bits_figure(prof->attn_decode_s, kv_bits) / b / par;
    if (matvec) *matvec = 0;
    if (attn) *attn = 0;
    if (rows <= 0) return 0;
    const double mm = layer_matmul_s(m, prof, l, rows, mo);
    if (matvec && rows <= 4) *matvec = mm;
    const double kv_mem = kv_mem_s(m, prof, kv_bits, rows, b, seq_blocks, ctx, stored,
                                   mem_s_per_byte);
    const double at = ctx * attn_per_pos + stored * decode_per_pos + kv_mem;
    if (attn) *attn = at;
    const double rest = mm + rows * (4 * d + 3 * f) * prof->elementwise_s +
                        rows * 2 * kvd * kv_bits_figure(prof->kv_store_s, kv_bits) +
                        prof->layer_fixed_s;
    return rest * layer_row_scale(prof, rows) + at;
}

/* cost.h */
double tl_cost_prefill_layer_s(const tl_model *m, const tl_hw_profile *prof, int32_t l,
                               int32_t kv_bits, int32_t rows, int32_t n_ctx, double *attn) {
    if (attn) *attn = 0;
    if (rows <= 0) return 0;
    const double cap = tl_llama_attn_block_rows(&m->lm.hp, n_ctx);
    const double seq_blocks = ceil(rows / cap), block = rows / seq_blocks;
    const double ctx[1] = {(double)rows * (rows + 1) / 2}, stored[1] = {0};
    const double mem = pass_kv_mem_s_per_byte(m, prof, kv_bits, ctx, stored, 1, block,
                                              seq_blocks);
    return mb_layer_compute(m, prof, l, kv_bits, rows, block, 0, seq_blocks, ctx[0],
                            stored[0], mem, NULL, attn, NULL);
}

/* cost.h: the rows as mb_layer_compute takes them, in a pass `layers` layers deep */
double tl_cost_attention_s(const tl_model *m, const tl_hw_profile *prof, int32_t rows,
                           int32_t pos0, int32_t n_ctx, int32_t layers, double *per_mac) {
    const tl_llama_hparams *hp = &m->lm.hp;
    if (per_mac) *per_mac = 0;
    if (rows <= 0) return 0;
    const double cap = tl_llama_attn_block_rows(hp, n_ctx);
    const double seq_blocks = ceil(rows / cap), block = rows / seq_blocks;
    const double ctx = (double)rows * pos0 + (double)rows * (rows + 1) / 2;
    const double w = mb_kv_bytes(m, 32, ctx, 0, block * seq_blocks) * (layers > 1 ? layers : 1);
    const double mem = prof->attn_mem_s_per_byte > 0
                           ? kv_miss_share(prof, w) * prof->attn_mem_s_per_byte : 0;
    const double pm =
        ctx * hp->n_head * hp->head_dim *
        attn_s_per_mac(prof, block, (double)hp->n_head / hp->n_head_kv);
    if (per_mac) *per_mac = pm;
    return pm + kv_mem_s(m, prof, 32, rows, block, seq_blocks, ctx, 0, mem);
}

/* cost.h; a full group is never priced below one row */
double tl_cost_embd_read_s(const tl_hw_profile *prof, int32_t K, int32_t n) {
    if (n <= 0) return 0;
    double one = prof->embd_row_s, group = prof->embd_group_s;
    if (!(one > 0)) one = 65536.0 / tl_profile_read_bps(prof, 65536, 1);
    if (!(group > 0)) group = K * 65536.0 / tl_profile_read_bps(prof, 65536, K);
    if (group < one || K < 2) group = one;
    const int32_t full = n / K, rest = n % K;
    return full * group + (rest > 0 ? one + (group - one) * (rest - 1) / (K - 1) : 0);
}

/* tl_cost_pass_compute, with the attention blocks of a single micro-batch given (blocks >
 * 0) or derived from its rows (0), and the blocks each sequence's rows form (seq_blocks,
 * mb_layer_compute). */
static double pass_compute(const tl_model *m, const tl_hw_profile *prof, int32_t kv_bits,
                           const int32_t *rows, const double *ctx_sum, const double *stored_sum,
                           int32_t n_mb, double attn_block, double blocks, double seq_blocks,
                           int32_t logit_rows, int embd_resident, double *slowdown) {
    const tl_llama_hparams *hp = &m->lm.hp;
    const double d = hp->n_embd;
    double t = 0, all_rows = 0, t_matvec = 0, t_attn = 0;
    mm_memo mo;
    memo_init(&mo);
    /* a layer shaped as the one before costs the same */
    double layer_t = 0, layer_mv = 0, layer_at = 0;
    const int32_t first = m->lm.stage_first; /* a pipeline stage computes its layers only */
    const double mem = pass_kv_mem_s_per_byte(m, prof, kv_bits, ctx_sum, stored_sum, n_mb,
                                              attn_block, seq_blocks);
    for (int32_t l = first; l < m->lm.stage_end; l++) {
        if (l == first || !same_shapes(m, l, l - 1)) {
            layer_t = layer_mv = layer_at = 0;
            for (int32_t k = 0; k < n_mb; k++) {
                double mv, at;
                layer_t += mb_layer_compute(m, prof, l, kv_bits, rows[k], attn_block,
                                            n_mb == 1 ? blocks : 0, seq_blocks, ctx_sum[k],
                                            stored_sum[k], mem, &mv, &at, &mo);
                layer_mv += mv;
                layer_at += at;
            }
        }
        t += layer_t;
        t_matvec += layer_mv;
        t_attn += layer_at;
    }
    for (int32_t k = 0; k < n_mb; k++) all_rows += rows[k] > 0 ? rows[k] : 0;
    /* embedding (the first stage's work): a copy per row when resident, else each
     * micro-batch's rows read in groups (tl_cost_embd_read_s); the logits (the last
     * stage's) */
    if (first > 0) {
    } else if (embd_resident) t += all_rows * d * prof->elementwise_s;
    else {
        const int32_t group = tl_weight_embd_read_rows(&m->lm);
        for (int32_t k = 0; k < n_mb; k++) t += tl_cost_embd_read_s(prof, group, rows[k]);
    }
    if (logit_rows > 0 && m->lm.stage_end == hp->n_layer) {
        const tl_weight *out = m->lm.tied_output ? &m->lm.tok_embd : &m->lm.output;
        const double out_mm = tl_cost_matmul(prof, out, logit_rows);
        t += out_mm;
        if (logit_rows <= 4) t_matvec += out_mm; /* slows down as the layers' products do */
        t += logit_rows * (d + (double)hp->n_vocab) * prof->elementwise_s;
    }
    if (slowdown) { /* the time-weighted slowdown while the disk streams */
        double sm = prof->io_compute_slowdown > 1 ? prof->io_compute_slowdown : 1;
        double sv = prof->io_slowdown_matvec > 1 ? prof->io_slowdown_matvec : 1;
        double sa = prof->io_slowdown_attn > 1 ? prof->io_slowdown_attn : 1;
        /* the profile's slowdowns were measured beside its own file's stream (at
         * io_stream_bps; the calibration's io_rate_scale is relative to it); the IO
         * takes its cycles per byte, so a calibrated stream k times as fast takes k
         * times as many from each second of the products' and element-wise compute it
         * overlaps (within [1/4, 4]). The memory-bound kinds (matrix-vector products,
         * attention over KV beyond the caches) keep the profile's figures: the
         * compute-bound work is the one whose slowdown was seen to follow the bytes. */
        const double k = prof->io_rate_scale > 0 ? fmin(4, fmax(0.25, prof->io_rate_scale)) : 1;
        sm = 1 + (sm - 1) * k;
        /* measured beside this model file's own stream: that figure, not the extrapolation */
        if (prof->io_slowdown_stream > 0) sm = fmax(1, prof->io_slowdown_stream);
        *slowdown = t > 0 ? (t_matvec * sv + t_attn * sa + (t - t_matvec - t_attn) * sm) / t
                          : sm;
    }
    return t;
}

double tl_cost_pass_compute(const tl_model *m, const tl_hw_profile *prof, int32_t kv_bits,
                            const int32_t *rows, const double *ctx_sum,
                            const double *stored_sum, int32_t n_mb, double attn_block,
                            double seq_blocks, int32_t logit_rows, int embd_resident,
                            double *slowdown) {
    return pass_compute(m, prof, kv_bits, rows, ctx_sum, stored_sum, n_mb, attn_block, 0,
                        seq_blocks, logit_rows, embd_resident, slowdown);
}

double tl_cost_kv_page_bytes(const tl_model *m, int32_t kv_bits, int32_t page_tokens) {
    const double kvd = (double)m->lm.hp.n_head_kv * m->lm.hp.head_dim, hd = m->lm.hp.head_dim;
    double row;
    if (kv_bits >= 16) row = kvd * kv_bits / 8.0;
    else {
        /* group-wise: groups of 64 along the head (or the whole head), f32 min + scale */
        double group = (int)hd % 64 == 0 ? 64 : hd;
        row = kvd / group * (group * kv_bits / 8.0 + 8.0);
    }
    return 2.0 * page_tokens * row;
}

void tl_policy_set_kv(tl_policy *pol, const tl_kv_params *kp) {
    pol->page_tokens = kp->page_tokens;
    pol->kv_bits = kp->bits;
    pol->kv_window_pages = kp->placement == TL_KV_TEMPERATURE ? kp->window_pages : 0;
    pol->kv_sink_pages = kp->placement == TL_KV_TEMPERATURE ? kp->sink_pages : 0;
    pol->kv_cache_pages = kp->cache_pages;
    pol->kv_inputs = kp->input_dim > 0;
    pol->kv_recompute = 0;
    while (pol->kv_recompute < kp->n_layer && tl_kv_params_recomputes(kp, pol->kv_recompute))
        pol->kv_recompute++;
}

/* Pages homed on disk among the first n full pages of one (sequence, layer), by
 * kv_cache.c's rules: temperature (all but sinks and window) or spread (a share). */
static double disk_pages(const tl_policy *pol, double full_pages) {
    if (pol->kv_window_pages > 0) {
        const double keep = (double)pol->kv_sink_pages + pol->kv_window_pages;
        return full_pages > keep ? full_pages - keep : 0;
    }
    if (pol->single) return 0;
    return floor(full_pages * (100 - pol->kv_mem_pct) / 100.0);
}

double tl_cost_kv_disk_pages(const tl_policy *pol, double full_pages) {
    return disk_pages(pol, full_pages);
}

/* Disk pages a decode row at position `pos` reads at one layer: all of its disk pages, or
 * under page selection those the page budget takes beyond the pages always read (the
 * open page, sinks and window: model/kv_select.c's rule; the others are the disk pages). */
static double decode_disk_pages(const tl_policy *pol, double pos, int32_t pt) {
    const double full = floor(pos / pt), disk = disk_pages(pol, full);
    if (pol->kv_select <= 0) return disk;
    const double n_pages = full + 1, keep = (double)pol->kv_sink_pages + pol->kv_window_pages;
    const double always = (n_pages - full) + (full < keep ? full : keep);
    double take = ceil((double)pol->kv_select * n_pages) - always;
    if (take < 0) take = 0;
    return take < disk ? take : disk;
}

/* Disk pages of the first `full` full pages of one (sequence, layer) that a row at
 * position pos never reads under a sliding window of W positions (0: none): those wholly
 * before pos + 1 - W (kv_cache.c's prefetch and the attention skip them). Temperature
 * homes pages [sinks, full - window) on disk; a spread placement its share of any range. */
static double disk_pages_outside_window(const tl_policy *pol, double pos, double full,
                                        int32_t pt, int32_t W) {
    if (W <= 0 || full <= 0) return 0;
    double before = floor((pos + 1 - W) / pt);
    if (before <= 0) return 0;
    if (before > full) before = full;
    if (pol->kv_window_pages > 0) {
        const double lo = pol->kv_sink_pages, hi = full - pol->kv_window_pages;
        const double top = before < hi ? before : hi;
        return top > lo ? top - lo : 0;
    }
    return disk_pages(pol, full) * before / full;
}

/* Of `need` disk pages a pass reads out of `disk` it could read, those the cache serves:
 * the cache keeps a fixed set of cache_pages disk pages (the first written), so an exact
 * pass finds min(C, disk) of them there, and a pass reading a subset finds its share. */
static double cache_hits(const tl_policy *pol, double need, double disk) {
    const double c = pol->kv_cache_pages;
    if (disk <= 0 || c <= 0) return 0;
    return need >= disk ? (c < disk ? c : disk) : need * (c < disk ? c / disk : 1.0);
}

/* Flash layout: the bytes, seconds and compute's wait of one pass's site reads (formula at
 * the top), for passes of `rows` rows per product. */
static void flash_reads(const tl_model *m, const tl_hw_profile *prof, const tl_weight_plan *plan,
                        double rows, double *bytes, double *seconds, double *wait) {
    *bytes = *seconds = *wait = 0;
    if (!m->lm.flash) return;
    const tl_tier *from = m->lm.panel_tier ? m->lm.panel_tier : m->lm.tier;
    const double al = from && from->align > 1 ? (double)from->align : 1;
    const double gap = (double)m->lm.params.flash_gap_bytes;
    int32_t depth = m->lm.params.io_queue_depth;
    if (depth < TL_FLASH_MIN_QUEUE_DEPTH) depth = TL_FLASH_MIN_QUEUE_DEPTH;
    for (int32_t l = m->lm.stage_first; l < m->lm.stage_end; l++) {
        tl_weight *ws[TL_WEIGHT_UNIT_MAX];
        const int n = tl_weight_plan_unit_weights(&m->lm, plan, l, ws);
        for (int i = 0; i < n; i++) {
            const tl_weight *w = ws[i];
            const double p = w == &m->lm.layers[l].neurons
                                 ? neuron_read_share(m, plan, rows)
                                 : flash_need_share(
                                       site_zero_share(m, l, (int)(w - m->lm.layers[l].site)),
                                       rows);
            const double q = 1 - p;
            const double R = (double)tl_type_row_bytes(w->type, w->cols), C = (double)w->rows;
            const double K = floor(gap / R);
            /* sum_{k=1..K} k p^2 q^(k-1), in closed form */
            const double f = 1 - (K + 1) * pow(q, K) + K * pow(q, K + 1);
            double req = p > 0 ? C * p * pow(q, K + 1) + 1 : 0;
            const double cut = ceil(TL_FLASH_FETCH_PARTS * (p + q * f)); /* reads cut at 1/K' */
            if (p > 0 && req < cut) req = cut;
            const double b = C * R * (p + q * f) + req * al;
            *bytes += b;
            if (req <= 0) continue;
            const double s = b / tl_profile_read_bps(prof, (uint64_t)(b / req), depth);
            *seconds += s;
            if (w == &m->lm.layers[l].neurons) { /* read whole before its product */
                *wait += s;
                continue;
            }
            tl_weight wc = *w; /* the product as layer_matmul_s prices it */
            if (rows > TL_COLMAT_STREAM_MAX_N) wc.type = TL_TYPE_F32;
            const double c = tl_cost_matmul(prof, &wc, rows) * p;
            const double nc = C * p;
            const double parts = fmax(1, ceil(nc / (double)tl_flash_part_channels(
                                                       (size_t)ceil(nc))));
            /* the first part's runs: 1 / parts of the reads, but no sooner than the
             * requests the queue serves together (the flash depth, each at most a chunk) */
            const double together = depth * fmin(b / req, (double)m->lm.params.io_chunk_bytes);
            const double first = s * fmax(1 / parts, fmin(1, together / b));
            *wait += fmax(s - c * (1 - 1 / parts), first);
        }
    }
}

typedef struct acc {
    tl_cost_terms t;
    double wall, passes;
} acc;

/* The overlapped time of a pass: the soft maximum above. */
static double overlap_s(double compute, double io) {
    if (compute <= 0 || io <= 0) return compute > io ? compute : io;
    double hi = compute > io ? compute : io, r = (compute > io ? io : compute) / hi;
    return hi * pow(1 + r * r * r * r, 0.25);
}

/* Bytes over a rate, 0 for none. */
static double io_s(double bytes, double bps) { return bytes > 0 && bps > 0 ? bytes / bps : 0; }

/* Where the stream calibration measured what each byte the model file's stream reads
 * costs the compute (prof->io_stream_s_per_byte = k), the pass's slowdown is that cost of
 * its own reads and writes: 1 + k B / I (B their bytes, I their seconds), so that
 * add_pass's (slowdown - 1) min(I, compute) is k B when the compute outlasts the IO, and k
 * times the bytes read while it computes otherwise. */
static void pass_io_cost(const tl_hw_profile *prof, tl_cost_pass *p) {
    const double k = prof->io_stream_s_per_byte;
    const double b = p->weight_bytes + p->kv_read_bytes + p->kv_write_bytes;
    const double s = io_s(p->weight_bytes, p->weight_bps) +
                     io_s(p->kv_read_bytes, p->kv_read_bps) +
                     io_s(p->kv_write_bytes, p->kv_write_bps);
    if (k > 0 && b > 0 && s > 0) p->io_slowdown = 1 + k * b / s;
}

static void add_pass(acc *a, const tl_cost_pass *p, int overlap) {
    double compute = p->compute_s;
    const double wbytes = p->weight_bytes;
    const double kvr_bytes = p->kv_read_bytes, kvw_bytes = p->kv_write_bytes;
    double wr = wbytes / p->weight_bps, kr = kvr_bytes / p->kv_read_bps;
    double kw = kvw_bytes / p->kv_write_bps;
    /* flash reads wait for their site's input: the wait is like the KV wait */
    double io = wr + kr + kw, wait = p->kv_wait_s + p->flash_wait_s;
    if (overlap && p->io_slowdown > 1) compute += (p->io_slowdown - 1) * (io < compute ? io : compute);
    a->t.compute_s += compute;
    a->t.repack_s += p->repack_s;
    a->t.kv_wait_s += p->kv_wait_s;
    a->t.weight_read_s += wr;
    a->t.kv_read_s += kr;
    a->t.kv_write_s += kw;
    a->t.weight_bytes += wbytes;
    a->t.kv_read_bytes += kvr_bytes;
    a->t.kv_write_bytes += kvw_bytes;
    a->t.weight_bytes += p->flash_bytes;
    a->t.weight_read_s += p->flash_s;
    /* the waits are stalls on reads already timed against the compute before them: the
     * jitter allowance is between compute and IO, not between a wait and its own reads */
    /* ... and never shorter than the ring lets it be (plus the waits it does not see) */
    const double both = fmax(fmax(compute + wait, overlap_s(compute, io)), p->ring_s + wait);
    a->t.overlapped_s += both;
    a->t.serial_s += compute + wait + io;
    a->wall += overlap ? both : compute + wait + io;
    a->passes += 1;
}

/* The pass's KV wait (formula at the top): pages[k] disk pages of micro-batch k per
 * layer, in the engine's order, each batch asked for before the wait for the one before
 * (its drain + first_s + (pages - 1) page_s, or its pages after the batch before when
 * that is still being read); the drain is drain_s, or, where the ring runs ahead of the
 * compute (unit_s > 0), at least what is left of the unit_s of chunks the ring put in
 * flight as the layer began. *batch_s: the device time of the batches (without the
 * drain, which is the weight chunks' own reading). */
static double pass_kv_wait(const tl_model *m, const tl_hw_profile *prof, int32_t kv_bits,
                           const int32_t *rows, double block, double seq_blocks,
                           const double *ctx, const double *stored, const double *pages,
                           int32_t n_mb, double first_s, double page_s, double drain_s,
                           const tl_weight_plan *plan, double unit_s, double *batch_s) {
    double wait = 0, t = 0, asked = 0, prev_done = 0;
    double layer_t = 0, asked_layer_t = 0; /* when the layer of `asked` began */
    int any = 0;
    mm_memo mo;
    memo_init(&mo);
    *batch_s = 0;
    for (int32_t k = 0; k < n_mb; k++) any |= pages[k] > 0;
    if (!any) return 0;
    const double mem = pass_kv_mem_s_per_byte(m, prof, kv_bits, ctx, stored, n_mb, block,
                                              seq_blocks);
    const int32_t first = m->lm.stage_first, last = m->lm.stage_end - 1;
    for (int32_t l = first; l <= last; l++) {
        /* a streamed layer before released its buffer: the ring's next unit goes in flight */
        const int32_t before = l > first ? l - 1 : last;
        if (unit_s > 0 && tl_weight_plan_unit_bytes(&m->lm, plan, before) > 0) layer_t = t;
        for (int32_t k = 0; k < n_mb; k++) {
            if (rows[k] <= 0) continue;
            double done = asked;
            if (pages[k] > 0) {
                const double batch = first_s + (pages[k] - 1) * page_s;
                const double drain = fmax(drain_s, unit_s - (asked - asked_layer_t));
                *batch_s += batch;
                done = asked >= prev_done ? asked + drain + batch
                                          : fmax(asked + batch, prev_done + pages[k] * page_s);
                prev_done = done;
            }
            asked = t; /* the next batch: asked for before this one is waited for */
            asked_layer_t = layer_t;
            const double w = done > t ? done - t : 0;
            wait += w;
            t += w + mb_layer_compute(m, prof, l, kv_bits, rows[k], block, 0, seq_blocks,
                                      ctx[k], stored[k], mem, NULL, NULL, &mo);
        }
    }
    return wait;
}

/* The drain a pass's KV batch waits for while weights stream (formula at the top): half
 * the weight bytes in flight (the IO queue's chunks, at most the units the ring reads
 * ahead), for the share of the pass the stream is reading. */
static double stream_drain_s(double in_flight_bytes, double weight_read_s, double compute_s,
                             double wbps) {
    if (!(weight_read_s > 0) || !(wbps > 0)) return 0;
    const double busy = compute_s > weight_read_s ? weight_read_s / compute_s : 1;
    return busy * 0.5 * in_flight_bytes / wbps;
}

/* The chunks of one streamed unit the ring puts in flight as a layer begins, in seconds of
 * reading, where the ring runs ahead of the compute (its weight reads take less than the
 * pass's compute, so every buffer is full and a unit is asked for only as a layer's
 * buffer frees): a KV batch asked for soon after waits for what is left of them. Where
 * the stream cannot keep up, stream_drain_s's random moment holds instead: 0. */
static double ring_unit_drain_s(double unit_bytes, double queue_bytes, double weight_read_s,
                                double compute_s, double wbps) {
    if (!(unit_bytes > 0) || !(wbps > 0) || !(weight_read_s < compute_s)) return 0;
    return fmin(unit_bytes, queue_bytes) / wbps;
}

/* The bandwidth a pass's KV reads are priced at: bytes / kbps, or, while weights stream,
 * the batches' device time when longer (ordinary chunks wait while urgent reads run). */
static double pass_kv_bps(double bytes, double kbps, double batch_s) {
    return bytes > 0 && batch_s > bytes / kbps ? bytes / batch_s : kbps;
}

/* Seconds to recompute one page's K and V from its input rows (kv_cache.h): the two
 * products of page_tokens rows, at the profile's rate for that many rows. */
static double recompute_page_s(const tl_model *m, const tl_hw_profile *prof, int32_t pt) {
    const tl_llama_layer *l0 = &m->lm.layers[0];
    return tl_cost_matmul(prof, &l0->wk, pt) + tl_cost_matmul(prof, &l0->wv, pt);
}

/* cost.h */
double tl_cost_unit_repack_s(const tl_model *m, const tl_hw_profile *prof,
                             const tl_weight_plan *plan, int32_t u) {
    tl_weight *ws[TL_WEIGHT_UNIT_MAX];
    const int n = tl_weight_plan_unit_weights(&m->lm, plan, u, ws);
    double s = 0;
    for (int i = 0; i < n; i++) {
        const int ti = tl_type_index(ws[i]->type);
        if (ti >= 0 && prof->repack_bps[ti] > 0 && tl_weight_repacked_in_memory(&m->lm, ws[i]))
            s += (double)ws[i]->file_bytes / prof->repack_bps[ti];
    }
    return s;
}

static int by_length(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* cost.h */
void tl_workload_set_prompts(tl_workload *w, int32_t *lens, int32_t n) {
    memset(w->prompt_q, 0, sizeof w->prompt_q);
    if (n < 1) return;
    qsort(lens, (size_t)n, sizeof *lens, by_length);
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += lens[i];
    w->prompt_len = sum / n >= 1 ? (int32_t)(sum / n + 0.5) : 1;
    const int32_t nq = n < TL_WORKLOAD_QUANTILES ? n : TL_WORKLOAD_QUANTILES;
    /* quantile i: the prompt at the middle of the i-th of nq equal shares of the ranks */
    for (int32_t i = 0; i < nq; i++) {
        const int32_t v = lens[(int32_t)(((double)i + 0.5) * n / nq)];
        w->prompt_q[i] = v > 0 ? v : 1;
    }
}

int32_t tl_workload_prompt_max(const tl_workload *w) {
    int32_t mx = 0;
    for (int i = 0; i < TL_WORKLOAD_QUANTILES; i++)
        if (w->prompt_q[i] > mx) mx = w->prompt_q[i];
    return mx > 0 ? mx : w->prompt_len;
}

/* A block of n_seqs sequences' prompt lengths, shortest first, each standing for n_seqs /
 * count of its sequences: the workload's quantiles, re-ranked to n_seqs points when the
 * block has fewer sequences than quantiles (the middle of each of n_seqs equal shares of
 * the ranks); the mean alone when the workload gives none. Returns the count. */
static int32_t block_prompts(const tl_workload *w, int32_t n_seqs, double *len) {
    int32_t nq = 0;
    while (nq < TL_WORKLOAD_QUANTILES && w->prompt_q[nq] > 0) nq++;
    if (nq == 0 || n_seqs < 1) {
        len[0] = w->prompt_len;
        return 1;
    }
    if (n_seqs >= nq) {
        for (int32_t i = 0; i < nq; i++) len[i] = w->prompt_q[i];
        return nq;
    }
    for (int32_t i = 0; i < n_seqs; i++)
        len[i] = w->prompt_q[(int32_t)(((double)i + 0.5) * nq / n_seqs)];
    return n_seqs;
}

/* One block of n_seqs sequences through the engine's schedule (batch.c; context.c is the
 * case gbs = num_gb = 1): emits each pass. */
static void block_walk(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                       const tl_policy *pol, const tl_weight_plan *plan, int32_t n_seqs,
                       int32_t block_index, tl_cost_pass_fn fn, void *user) {
    /* L: the layers this process computes and keeps KV for (a pipeline stage's, or all);
     * unit n_layer is the output projection */
    const int32_t L = tl_llama_stage_layers(&m->lm), U = m->lm.hp.n_layer;
    const int32_t P = w->prompt_len, pt = pol->page_tokens;
    const int32_t swa = m->lm.hp.n_swa; /* a sliding window: disk pages before it unread */
    int32_t n_mb = (n_seqs + pol->gbs - 1) / pol->gbs;
    int32_t rows[4096];
    double ctx[4096], stored[4096]; /* visible positions; those in stored (full) pages */
    double pages[4096];             /* disk pages each micro-batch reads per layer */
    if (n_mb > 4096) n_mb = 4096;
    const double layers_bytes = ring_layer_bytes(m, plan);
    const double out_bytes = tl_weight_plan_unit_bytes(&m->lm, plan, U);
    double layers_repack = 0, out_repack = tl_cost_unit_repack_s(m, prof, plan, U);
    for (int32_t l = 0; l < U; l++) layers_repack += tl_cost_unit_repack_s(m, prof, plan, l);
    const double wbps = tl_profile_read_bps(prof, m->lm.params.io_chunk_bytes, m->lm.params.io_queue_depth);
    /* the ring's overlap (tl_cost_ring_pass_s): each unit's read time, when the whole model is
     * this process's and its streamed units go through the ring */
    double ring_r[TL_COST_RING_MAX_UNITS], ring_c[TL_COST_RING_MAX_UNITS];
    double ring_rep[TL_COST_RING_MAX_UNITS];
    const int ring = plan->overlap && plan->n_slots > 0 && !m->lm.flash &&
                     U < TL_COST_RING_MAX_UNITS && U > 0 && L == U && layers_bytes + out_bytes > 0;
    for (int32_t u = 0; ring && u <= U; u++) {
        ring_r[u] = tl_weight_plan_unit_bytes(&m->lm, plan, u) / wbps;
        /* a streamed unit's read waits longer while the cores compute (calibrated) */
        if (ring_r[u] > 0 && prof->ring_unit_delay_s > 0) ring_r[u] += prof->ring_unit_delay_s;
        ring_rep[u] = tl_cost_unit_repack_s(m, prof, plan, u);
    }
    /* a token embedding on disk: each pass's first group of row reads waits for the
     * chunks in flight, at most the IO queue's (chunk x depth) */
    const double embd_wait = !plan->embd_resident && m->lm.tok_embd.name
                                 ? (double)m->lm.params.io_chunk_bytes *
                                       (double)m->lm.params.io_queue_depth / wbps
                                 : 0;
    const tl_weight *out_w = m->lm.tied_output ? &m->lm.tok_embd : &m->lm.output;
    const double page = tl_cost_kv_page_bytes(m, pol->kv_bits, pt);
    const double slot = ceil(page / SLOT_ALIGN) * SLOT_ALIGN;
    /* recompute: input rows written beside K and V; layers that recompute read them */
    const int inputs = pol->kv_inputs || pol->kv_recompute > 0;
    const double x_slot = inputs ? ceil(pt * (double)m->lm.hp.n_embd * 4 / SLOT_ALIGN) * SLOT_ALIGN : 0;
    const double rc_share = pol->kv_recompute > 0 ? fmin(pol->kv_recompute, L) / L : 0;
    const double wslot = slot + x_slot, rslot = (1 - rc_share) * slot + rc_share * x_slot;
    const double rc_page_s = rc_share > 0 ? recompute_page_s(m, prof, pt) : 0;
    const double kbps = tl_profile_read_bps(prof, (uint64_t)slot, kv_read_depth(m));
    const int streams = layers_bytes > 0;
    const double first_s = streams ? prof->disk_urgent_read_s
                                   : slot / tl_profile_read_bps(prof, (uint64_t)slot, 1);
    /* a page's transfer time scales with the bytes a read takes (input rows: fewer) */
    const double urgent_page_s =
        prof->disk_urgent_page_s * fmin(1, slot / (double)TL_PROF_URGENT_BYTES);
    const double page_s =
        (streams ? fmax(urgent_page_s, slot / kbps) : slot / kbps) * rslot / slot;
    const double weights_read_s = layers_bytes / wbps;
    int32_t streamed_units = 0;
    for (int32_t u = 0; u < U; u++)
        streamed_units += tl_weight_plan_unit_bytes(&m->lm, plan, u) > 0;
    const double queue_bytes = (double)m->lm.params.io_chunk_bytes *
                               (double)m->lm.params.io_queue_depth;
    const double unit_bytes = streamed_units > 0 ? layers_bytes / streamed_units : 0;
    const double ahead_bytes = unit_bytes * (plan->n_slots > 1 ? plan->n_slots - 1 : 1);
    /* a ring that reads ahead: a unit goes in flight as a layer's buffer frees */
    const double ring_unit_bytes =
        plan->overlap && plan->n_slots > 1 && !m->lm.flash ? unit_bytes : 0;
    const double in_flight = ahead_bytes < queue_bytes ? ahead_bytes : queue_bytes;
    const double wr_bps = prof->disk_write_bps;
    const int spill = pol->kv_window_pages > 0 || (!pol->single && pol->kv_mem_pct < 100);
    /* prefill: chunks of `chunk` prompt tokens per sequence and step */
    int32_t chunk = pol->single ? pol->prefill_rows
                                : (pol->prefill_rows < pol->gbs ? pol->gbs : pol->prefill_rows) / pol->gbs;
    if (chunk < 1) chunk = 1;
    /* the engine sizes attention's blocks for its context (n_ctx per sequence) */
    const double block_cap = tl_llama_attn_block_rows(&m->lm.hp, pol->n_ctx > 0 ? pol->n_ctx : P + w->gen_len);
    /* the block's prompts (their lengths differ: a step feeds those not yet fed, and the
     * block takes as many steps as its longest needs) */
    double plen[TL_WORKLOAD_QUANTILES];
    const int32_t n_plen = block_prompts(w, n_seqs, plen);
    const double p_longest = plen[n_plen - 1];
    for (int32_t fed = 0; fed < p_longest; fed += chunk) {
        double kv_read = 0, kv_write = 0, disk_all = 0, logits = 0, fed_rows = 0, fed_seqs = 0;
        for (int32_t k = 0; k < n_mb; k++) {
            int32_t s_here = n_seqs - k * pol->gbs < pol->gbs ? n_seqs - k * pol->gbs : pol->gbs;
            const double share = (double)s_here / n_plen; /* sequences per prompt length */
            double r = 0;
            ctx[k] = stored[k] = pages[k] = 0;
            for (int32_t i = 0; i < n_plen; i++) {
                if (plen[i] <= fed) continue;
                const double len = plen[i] - fed < chunk ? plen[i] - fed : chunk;
                r += share * len;
                fed_seqs += share;
                if (fed + len >= plen[i]) logits += share; /* its prompt's last step */
                /* rows at positions fed..fed+len-1 see pos+1 positions each */
                ctx[k] += share * (len * fed + len * (len + 1) / 2);
                /* pages fill during the step but are stored at its commit: the rows decode
                 * only the full pages committed before it */
                stored[k] += share * len * floor((double)fed / pt) * pt;
                if (spill) { /* the chunk's first row sees the most (a window hides the rest) */
                    const double full = floor((double)fed / pt);
                    pages[k] += share * (disk_pages(pol, full) -
                                         disk_pages_outside_window(pol, fed, full, pt, swa));
                    kv_write += share * L *
                                (disk_pages(pol, floor((fed + len) / pt)) - disk_pages(pol, full)) *
                                wslot;
                }
            }
            rows[k] = r > 0 ? (int32_t)fmax(1, round(r)) : 0;
            fed_rows += r;
            disk_all += L * pages[k];
        }
        const int last = logits > 0; /* some prompt ends: the output projection runs */
        const double len = fed_seqs > 0 ? fed_rows / fed_seqs : 1; /* a sequence's rows */
        double read_pages = 0;
        if (disk_all > 0) { /* prefill rows attend to every page: the cache serves its set */
            const double keep = 1 - cache_hits(pol, disk_all, disk_all) / disk_all;
            for (int32_t k = 0; k < n_mb; k++) pages[k] *= keep;
            read_pages = disk_all * keep;
            kv_read = read_pages * rslot;
        }
        int32_t logit_rows = last ? (int32_t)fmax(1, round(logits)) : 0;
        double slow = 1;
        /* a sequence's len rows in blocks of at most block_cap: their mean size */
        const double seq_blocks = ceil((double)len / block_cap), block = len / seq_blocks;
        double c = tl_cost_pass_compute(m, prof, pol->kv_bits, rows, ctx, stored, n_mb, block,
                                        seq_blocks, logit_rows, plan->embd_resident, &slow);
        c += layers_repack + (last ? out_repack : 0);
        /* pages read as input rows are recomputed once before attention */
        c += read_pages * rc_share * rc_page_s;
        double flash_b = 0, flash_s = 0, flash_w = 0; /* a product: a micro-batch's rows */
        for (int32_t k = 0; k < n_mb; k++) {
            double b, t, wt;
            flash_reads(m, prof, plan, rows[k], &b, &t, &wt);
            flash_b += b, flash_s += t, flash_w += wt;
        }
        double batch_s;
        const double kv_wait = pass_kv_wait(
            m, prof, pol->kv_bits, rows, block, seq_blocks, ctx, stored, pages, n_mb, first_s,
            page_s, stream_drain_s(in_flight, weights_read_s, c, wbps), plan,
            ring_unit_drain_s(ring_unit_bytes, queue_bytes, weights_read_s, c, wbps), &batch_s);
        tl_cost_pass p = {1, block_index, fed / chunk, c, layers_bytes + (last ? out_bytes : 0),
                          kv_read, kv_write, wbps,
                          pass_kv_bps(kv_read, kbps, streams ? batch_s : 0), wr_bps, 1, slow,
                          kv_wait, read_pages, read_pages,
                          layers_repack + (last ? out_repack : 0), flash_b, flash_s, flash_w,
                          ring ? ring_time(ring_c, ring_r, ring_rep, U, plan->n_slots, c,
                                           last ? tl_cost_matmul(prof, out_w, logit_rows) +
                                                      out_repack : -1,
                                           embd_wait)
                               : 0};
        pass_io_cost(prof, &p);
        fn(user, &p);
    }
    /* decode: gen_len - 1 steps, step j feeds position P + j - 1 of every sequence */
    for (int32_t j = 1; j < w->gen_len; j++) {
        const int32_t before = P + j - 1; /* positions committed before the step */
        double kv_read = 0, kv_write = 0, disk_all = 0, need_all = 0;
        for (int32_t k = 0; k < n_mb; k++) {
            int32_t s_here = n_seqs - k * pol->gbs < pol->gbs ? n_seqs - k * pol->gbs : pol->gbs;
            rows[k] = s_here;
            ctx[k] = (double)s_here * (before + 1);
            stored[k] = (double)s_here * floor((double)before / pt) * pt;
            pages[k] = 0;
            if (spill) {
                double d0 = disk_pages(pol, floor((double)before / pt));
                double d1 = disk_pages(pol, floor((double)(before + 1) / pt));
                double read = decode_disk_pages(pol, before, pt) -
                              disk_pages_outside_window(pol, before, floor((double)before / pt),
                                                        pt, swa);
                pages[k] = s_here * (read > 0 ? read : 0);
                disk_all += s_here * L * d0;
                need_all += L * pages[k];
                kv_write += s_here * L * (d1 - d0) * wslot;
            }
        }
        double read_pages = 0;
        if (need_all > 0) {
            /* the cache serves its share of the pages used; a selection's read forecast
             * counts what the cache holds already */
            const double keep = pol->kv_select > 0 && pol->kv_select_reads > 0
                                    ? pol->kv_select_reads
                                    : 1 - cache_hits(pol, need_all, disk_all) / need_all;
            for (int32_t k = 0; k < n_mb; k++) pages[k] *= keep;
            read_pages = need_all * keep;
            kv_read = read_pages * rslot;
        }
        double slow = 1;
        double c = tl_cost_pass_compute(m, prof, pol->kv_bits, rows, ctx, stored, n_mb, 1, 1,
                                        n_seqs, plan->embd_resident, &slow) +
                   layers_repack + out_repack;
        /* pages read as input rows are recomputed (cached ones hold K and V: written) */
        c += read_pages * rc_share * rc_page_s;
        double flash_b = 0, flash_s = 0, flash_w = 0;
        for (int32_t k = 0; k < n_mb; k++) {
            double b, t, wt;
            flash_reads(m, prof, plan, rows[k], &b, &t, &wt);
            flash_b += b, flash_s += t, flash_w += wt;
        }
        double batch_s;
        const double kv_wait = pass_kv_wait(
            m, prof, pol->kv_bits, rows, 1, 1, ctx, stored, pages, n_mb, first_s, page_s,
            stream_drain_s(in_flight, weights_read_s, c, wbps), plan,
            ring_unit_drain_s(ring_unit_bytes, queue_bytes, weights_read_s, c, wbps), &batch_s);
        tl_cost_pass p = {0, block_index, j - 1, c, layers_bytes + out_bytes, kv_read, kv_write,
                          wbps, pass_kv_bps(kv_read, kbps, streams ? batch_s : 0), wr_bps, 1,
                          slow, kv_wait, need_all, read_pages, layers_repack + out_repack,
                          flash_b, flash_s, flash_w,
                          ring ? ring_time(ring_c, ring_r, ring_rep, U, plan->n_slots, c,
                                           tl_cost_matmul(prof, out_w, n_seqs) + out_repack,
                                           embd_wait)
                               : 0};
        pass_io_cost(prof, &p);
        fn(user, &p);
    }
}

typedef struct walk_scale { tl_cost_pass_fn fn; void *user; double count; } walk_scale;

static void scaled_pass(void *user, const tl_cost_pass *p) {
    walk_scale *sc = user;
    tl_cost_pass q = *p;
    q.count = sc->count;
    sc->fn(sc->user, &q);
}

typedef struct predict_acc {
    acc pre, dec;
    int overlap;
    double kv_needed, kv_read_pages;
} predict_acc;

static void predict_pass(void *user, const tl_cost_pass *p) {
    predict_acc *pa = user;
    acc one;
    memset(&one, 0, sizeof one);
    add_pass(&one, p, pa->overlap);
    acc *a = p->prefill ? &pa->pre : &pa->dec;
    a->t.compute_s += one.t.compute_s * p->count;
    a->t.repack_s += one.t.repack_s * p->count;
    a->t.weight_read_s += one.t.weight_read_s * p->count;
    a->t.kv_read_s += one.t.kv_read_s * p->count;
    a->t.kv_write_s += one.t.kv_write_s * p->count;
    a->t.kv_wait_s += one.t.kv_wait_s * p->count;
    a->t.overlapped_s += one.t.overlapped_s * p->count;
    a->t.serial_s += one.t.serial_s * p->count;
    a->t.weight_bytes += one.t.weight_bytes * p->count;
    a->t.kv_read_bytes += one.t.kv_read_bytes * p->count;
    a->t.kv_write_bytes += one.t.kv_write_bytes * p->count;
    a->wall += one.wall * p->count;
    a->passes += p->count;
    if (!p->prefill) {
        pa->kv_needed += p->kv_pages_needed * p->count;
        pa->kv_read_pages += p->kv_pages_read * p->count;
    }
}

static void scale_terms(tl_cost_terms *dst, const tl_cost_terms *src, double f) {
    dst->compute_s = src->compute_s * f;
    dst->repack_s = src->repack_s * f;
    dst->weight_read_s = src->weight_read_s * f;
    dst->kv_read_s = src->kv_read_s * f;
    dst->kv_write_s = src->kv_write_s * f;
    dst->kv_wait_s = src->kv_wait_s * f;
    dst->overlapped_s = src->overlapped_s * f;
    dst->serial_s = src->serial_s * f;
    dst->weight_bytes = src->weight_bytes * f;
    dst->kv_read_bytes = src->kv_read_bytes * f;
    dst->kv_write_bytes = src->kv_write_bytes * f;
}

static const char *largest(const tl_cost_terms *t) {
    const double v[4] = {t->compute_s, t->weight_read_s, t->kv_read_s, t->kv_write_s};
    const char *name[4] = {"compute", "weight reads", "KV reads", "KV writes"};
    if (t->compute_s >= t->weight_read_s + t->kv_read_s + t->kv_write_s) return name[0];
    int best = 1;
    for (int i = 2; i < 4; i++)
        if (v[i] > v[best]) best = i;
    return name[best];
}

tl_status tl_cost_walk(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                       const tl_policy *pol, const tl_weight_plan *plan, tl_cost_pass_fn fn,
                       void *user) {
    if (w->prompt_len < 1 || w->gen_len < 1 || w->num_seqs < 1)
        return tl_error_set(TL_ERR_INVALID, "workload: prompt length %d, generation length %d "
                            "and number of sequences %d must all be at least 1",
                            (int)w->prompt_len, (int)w->gen_len, (int)w->num_seqs);
    if (pol->gbs < 1 || pol->num_gb < 1 || pol->page_tokens < 1 || pol->prefill_rows < 1 ||
        (int64_t)pol->gbs * pol->num_gb > 65536 ||
        (pol->single && (pol->gbs != 1 || pol->num_gb != 1 || w->num_seqs != 1)))
        return tl_error_set(TL_ERR_INVALID, "policy: gbs %d, num_gb %d, page %d, prefill rows "
                            "%d for %d sequences", (int)pol->gbs, (int)pol->num_gb,
                            (int)pol->page_tokens, (int)pol->prefill_rows, (int)w->num_seqs);
    const int32_t block = pol->gbs * pol->num_gb;
    const int32_t full = w->num_seqs / block, rest = w->num_seqs % block;
    /* every full block costs the same: walked once, emitted with count = full */
    walk_scale sc = {fn, user, full};
    if (full > 0) block_walk(m, prof, w, pol, plan, block, 0, scaled_pass, &sc);
    if (rest > 0) block_walk(m, prof, w, pol, plan, rest, full > 0, fn, user);
    return TL_OK;
}

static tl_status predict_at(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                            const tl_policy *pol, const tl_weight_plan *plan, tl_cost *out) {
    memset(out, 0, sizeof *out);
    predict_acc pa;
    memset(&pa, 0, sizeof pa);
    pa.overlap = pol->overlap;
    tl_status st = tl_cost_walk(m, prof, w, pol, plan, predict_pass, &pa);
    if (st) return st;
    acc pre = pa.pre, dec = pa.dec;
    out->prefill = pre.t;
    out->decode = dec.t;
    out->prefill_passes = pre.passes;
    out->decode_passes = dec.passes;
    const double L = tl_llama_stage_layers(&m->lm);
    if (pre.passes > 0) scale_terms(&out->prefill_layer, &pre.t, 1.0 / (pre.passes * L));
    if (dec.passes > 0) scale_terms(&out->decode_layer, &dec.t, 1.0 / (dec.passes * L));
    out->prefill_s = pre.wall;
    out->decode_s = dec.wall;
    out->total_s = pre.wall + dec.wall;
    out->tokens_per_s = out->total_s > 0 ? (double)w->num_seqs * w->gen_len / out->total_s : 0;
    out->bottleneck = largest(dec.passes > 0 ? &dec.t : &pre.t);
    out->decode_kv_pages_needed = pa.kv_needed;
    out->decode_kv_pages_read = pa.kv_read_pages;
    return TL_OK;
}

tl_status tl_cost_predict(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                          const tl_policy *pol, const tl_weight_plan *plan, tl_cost *out) {
    tl_status st = predict_at(m, prof, w, pol, plan, out);
    if (st || prof->n_disk_spread < 2 || plan->streamed_bytes == 0) return st;
    /* the wall times: their mean over the disk calibration's sample rates (the stream's
     * figures, chunks of the engine's size and up, as the calibration scaled them); the
     * terms stay those at the median rate */
    double pre = 0, dec = 0;
    for (int32_t k = 0; k < prof->n_disk_spread; k++) {
        tl_hw_profile at = *prof;
        at.n_disk_spread = 0;
        tl_profile_scale_reads(&at, m->lm.params.io_chunk_bytes, 1, prof->disk_spread[k]);
        tl_cost c;
        if ((st = predict_at(m, &at, w, pol, plan, &c))) return st;
        pre += c.prefill_s;
        dec += c.decode_s;
    }
    out->prefill_s = pre / prof->n_disk_spread;
    out->decode_s = dec / prof->n_disk_spread;
    out->total_s = out->prefill_s + out->decode_s;
    out->tokens_per_s = out->total_s > 0 ? (double)w->num_seqs * w->gen_len / out->total_s : 0;
    return TL_OK;
}

/* A serving step (cost.h): one micro-batch of the generating rows (attention blocks of
 * one row) and the prompt rows (blocks of their chunk, capped as the engine caps them),
 * attention's block size their row-weighted mean; every streamed unit read once, the
 * output included (some row needs logits). Open pages are f32, so each row decodes only
 * the full pages before its position. KV in tiers: every disk page a row's sequence has
 * is read at every step (no cache), through the IO queue beside the weights, and the
 * step's new full pages are written (once the window is full). */
double tl_cost_serve_step(const tl_model *m, const tl_hw_profile *prof,
                          const tl_weight_plan *plan, const tl_serve_step *s,
                          tl_cost_terms *out) {
    const int32_t U = m->lm.hp.n_layer, L = tl_llama_stage_layers(&m->lm);
    const int32_t pt = s->page_tokens > 0 ? s->page_tokens : 16;
    const int32_t g = s->gen_rows > 0 ? s->gen_rows : 0, c = s->prompt_rows > 0 ? s->prompt_rows : 0;
    acc a;
    memset(&a, 0, sizeof a);
    if (g + c == 0) {
        if (out) *out = a.t;
        return 0;
    }
    /* a pipeline stage's absent layers count 0 */
    const double layers_bytes = ring_layer_bytes(m, plan);
    double layers_repack = 0;
    for (int32_t l = 0; l < U; l++) layers_repack += tl_cost_unit_repack_s(m, prof, plan, l);
    const double out_bytes = tl_weight_plan_unit_bytes(&m->lm, plan, U);
    const double out_repack = tl_cost_unit_repack_s(m, prof, plan, U);
    const double gctx = s->gen_ctx > 1 ? s->gen_ctx : 1, at = s->prompt_at > 0 ? s->prompt_at : 0;
    const int32_t rows[1] = {g + c};
    const double ctx[1] = {g * gctx + c * at + (double)c * (c + 1) / 2};
    const double stored[1] = {g * floor((gctx - 1) / pt) * pt + c * floor(at / pt) * pt};
    const double cap = tl_llama_attn_block_rows(&m->lm.hp, s->n_ctx > 0 ? s->n_ctx : (int32_t)(at + c + 1));
    const double cblock = c > 0 ? (double)c / ceil((double)c / cap) : 0;
    const double block = (g * 1.0 + c * cblock) / (g + c);
    const int32_t logit_rows = g + (c > 0);
    double slow = 1;
    /* each generating row is a block of its own; the prompt chunk's rows fill its blocks */
    const double cblocks = c > 0 ? ceil((double)c / cap) : 0, blocks = g + cblocks;
    /* a prompt chunk alone: its blocks share the sequence's KV; beside generating rows the
     * step's mean block already spreads the chunk's reads, so none is counted shared */
    const double seq_blocks = g == 0 && c > 0 ? cblocks : 1;
    const double compute = pass_compute(m, prof, s->kv_bits, rows, ctx, stored, 1, block, blocks,
                                        seq_blocks, logit_rows, plan->embd_resident, &slow) +
                           layers_repack + out_repack;
    const double wbps = tl_profile_read_bps(prof, m->lm.params.io_chunk_bytes, m->lm.params.io_queue_depth);
    double kv_read = 0, kv_write = 0, kbps = 1;
    if (s->window_pages > 0) { /* KV in tiers: disk pages read back, pages leaving written */
        const double keep = (double)s->window_pages + (s->sink_pages > 0 ? s->sink_pages : 0);
        const double gd = fmax(0, floor((gctx - 1) / pt) - keep);
        const double cd = c > 0 ? fmax(0, floor(at / pt) - keep) : 0;
        const double slot = ceil(tl_cost_kv_page_bytes(m, s->kv_bits, pt) / SLOT_ALIGN) * SLOT_ALIGN;
        kv_read = L * (g * gd + cd) * slot;
        /* pages leaving the window: a generating row fills 1/pt of one once its sequence
         * has disk pages; the prompt chunk, the pages its rows push out of the window */
        const double cleave = c > 0 ? fmax(0, floor((at + c) / pt) - keep) - cd : 0;
        kv_write = L * (g * (gd > 0) / (double)pt + cleave) * slot;
        kbps = tl_profile_read_bps(prof, (uint64_t)slot, kv_read_depth(m));
    }
    double flash_b, flash_s, flash_w; /* the step's rows in one product */
    flash_reads(m, prof, plan, g + c, &flash_b, &flash_s, &flash_w);
    tl_cost_pass p = {.prefill = c > 0, .compute_s = compute,
                            .flash_bytes = flash_b, .flash_s = flash_s, .flash_wait_s = flash_w,
                            .weight_bytes = layers_bytes + out_bytes, .weight_bps = wbps,
                            .kv_read_bytes = kv_read, .kv_write_bytes = kv_write,
                            .kv_read_bps = kbps, .kv_write_bps = prof->disk_write_bps > 0
                                                                   ? prof->disk_write_bps : 1,
                            .count = 1, .io_slowdown = slow,
                            .repack_s = layers_repack + out_repack};
    pass_io_cost(prof, &p);
    add_pass(&a, &p, plan->overlap);
    if (out) *out = a.t;
    return a.wall;
}
