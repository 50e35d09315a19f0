/* kv_cache.c - the paged KV cache (kv_cache.h): page tables, page frames from the budget,
 * placement, the spill file's slots (reused once their page is cleared), prefetch/staging,
 * sticky errors.
 *
 * States of a page (one per (seq, layer, index)):
 *   EMPTY  no frame.
 *   OPEN   frame = f32 K rows then f32 V rows (page_tokens x kv_dim each): being appended,
 *          or full but not stored yet (stored by the commit that completes it, or by a
 *          later commit if that one ran out of budget).
 *   MEM    full, homed in memory: frame = the stored page (page_bytes; with 32 bits the
 *          OPEN frame itself, kept as is).
 *   DISK   full, homed on disk at `slot` (offset slot * frame_slot), written once while
 *          the page lives.
 *          frame = the aligned write buffer while the write is in flight (`writing`, its
 *          tag in the write ring) or while a prefetch pinned it (`pinned`), else NULL;
 *          stage = the staging frame a prefetch reads into (`reading` until waited).
 * Invariants: pages [0, stored) of a (seq, layer) are MEM or DISK, later ones OPEN or
 * EMPTY; a DISK page has a frame iff writing || pinned; no frame with a request in flight
 * is freed before that request is waited for; a slot is written again only after the
 * page that held it was cleared (its sequence closed: page_clear waits for its write and
 * any read first), so the spill file grows to the most disk pages alive at once, not with
 * every sequence ever served; at most ring_cap writes are in flight (a commit waits
 * for the oldest when the ring is full). Errors of the spill IO are sticky (err, errmsg):
 * every later call returns the same status and message. One thread calls this API.
 * Tags: 0x4B << 56 | instance << 40 | counter, apart from the residency's small counters.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/status.h"
#include "format/tensor_type.h"
#include "kv/kv_cache.h"
#include "base/clock.h"
#include "kernels/kernels.h"
#include "tier/read_rate.h"
#include "tier/tier.h"

enum { PG_EMPTY, PG_OPEN, PG_MEM, PG_DISK };
enum { SLOT_ALIGN = TL_TIER_MAX_ALIGN, FRAME_ALIGN = 64 };
#define KV_TAG ((uint64_t)0x4B << 56) /* then 16 bits of instance, 40 of counter */
/* The spill file is made ready this far ahead of its last slot (tl_tier_reserve): a page
 * written past the file's end would be an extending write, which the filesystem runs one
 * at a time, each waiting for the device. */
#define SPILL_RESERVE_BYTES ((uint64_t)64 << 20)

typedef struct kv_page {
    uint8_t *frame, *stage;
    uint64_t slot, wtag, rtag;
    uint8_t state, writing, reading, pinned, cached;
    uint8_t form;  /* what a disk page's frame holds: FORM_KV, FORM_X (input rows only), or
                      FORM_BOTH (the write buffer: K and V, then the input rows) */
    uint8_t sform; /* what its stage holds (FORM_KV or FORM_X) */
} kv_page;

enum { FORM_KV = 0, FORM_X = 1, FORM_BOTH = 2 };

typedef struct kv_sl { /* per (seq, layer) */
    int32_t pending, stored, selective;
    int32_t used_disk; /* disk pages the last selection used */
} kv_sl;
typedef struct kv_seq { int32_t open, len; } kv_seq;
typedef struct kv_wr { kv_page *pg; uint64_t tag; int32_t seq, layer, page; } kv_wr;

struct tl_kv {
    tl_kv_params p;
    tl_budget *budget;
    tl_aio *aio;
    tl_tier *tier; /* the spill file (maybe wrapped in the fault shim), or NULL */
    int32_t group, np;
    size_t row_bytes, page_bytes, f32_bytes, slot_bytes;
    size_t x_bytes, x_slot; /* a page's input rows (recompute), and rounded up to a slot */
    size_t frame_slot;      /* a slot frame and a page's stride in the spill file: slot_bytes,
                               + x_slot when input rows are kept */
    void *meta; /* one budget block holding the four tables below */
    kv_page *pages;
    kv_sl *sl;
    kv_seq *seqs;
    kv_wr *ring;
    float *bounds;   /* key_bounds: [seq][layer][page][2][kv_dim], min then max */
    float *heat;     /* key_bounds: [seq][layer][page], the page-need estimate (below) */
    size_t ring_cap, ring_head, ring_n;
    uint64_t next_slot, tag_base, next_tag, frames, frames_peak;
    uint64_t reserved;    /* spill file bytes made ready for writes (tl_tier_reserve) */
    uint64_t *free_slots; /* slots of cleared disk pages, reused before next_slot grows */
    size_t n_free, free_cap;
    uint8_t **spare;      /* slot frames not in use, kept for reuse (see slot_free) */
    size_t n_spare, spare_cap;
    int64_t cache_used;   /* disk pages whose frame is a cached copy */
    int32_t cache_cap;    /* the cache size the budget was checked for */
    tl_kv_stats stats;
    tl_status err;
    char errmsg[1024];
};

static atomic_uint kv_instances;

/* ---- sizes and the budget formula ---- */

static uint64_t pages_per_sl(const tl_kv_params *p);

/* Full pages of a (seq, layer) with n full pages that are homed on disk. */
static uint64_t disk_of(const tl_kv_params *p, uint64_t n) {
    if (p->placement == TL_KV_TEMPERATURE) {
        uint64_t keep = (uint64_t)p->sink_pages + (uint64_t)p->window_pages;
        return n > keep ? n - keep : 0;
    }
    return n * (uint64_t)(100 - p->kv_mem_pct) / 100;
}

/* 1 when some page may be homed on disk (a spill file is needed). */
static int spills(const tl_kv_params *p) { return disk_of(p, pages_per_sl(p)) > 0; }

static tl_status check_params(const tl_kv_params *p) {
    if (!p) return tl_error_set(TL_ERR_INVALID, "kv: no parameters");
    if (p->n_layer < 1 || p->n_layer > 4096 || p->kv_dim < 1 || p->kv_dim > (1 << 20) ||
        p->head_dim < 1 || p->kv_dim % p->head_dim != 0)
        return tl_error_set(TL_ERR_INVALID, "kv: bad shape: %d layers, kv_dim %d, head_dim %d",
                            (int)p->n_layer, (int)p->kv_dim, (int)p->head_dim);
    if (p->page_tokens < 1 || p->page_tokens > 65536)
        return tl_error_set(TL_ERR_INVALID, "kv: page_tokens %d out of range [1, 65536]",
                            (int)p->page_tokens);
    if (p->bits != 32 && p->bits != 16 && p->bits != 8 && p->bits != 4)
        return tl_error_set(TL_ERR_INVALID, "kv: bits %d (32, 16, 8 or 4)", (int)p->bits);
    if (p->bits == 4 && p->head_dim % 2 != 0)
        return tl_error_set(TL_ERR_INVALID, "kv: 4-bit KV needs an even head_dim, not %d",
                            (int)p->head_dim);
    if (p->kv_mem_pct < 0 || p->kv_mem_pct > 100)
        return tl_error_set(TL_ERR_INVALID, "kv: kv_mem_pct %d out of range [0, 100]",
                            (int)p->kv_mem_pct);
    if (p->max_seqs < 1 || p->max_seqs > 65536 || p->max_tokens < 1 ||
        p->max_tokens > (1 << 26) || p->max_block < 0)
        return tl_error_set(TL_ERR_INVALID, "kv: max_seqs %d, max_tokens %d, max_block %d",
                            (int)p->max_seqs, (int)p->max_tokens, (int)p->max_block);
    uint64_t np = ((uint64_t)p->max_tokens + (uint64_t)p->page_tokens - 1) / (uint64_t)p->page_tokens;
    if ((uint64_t)p->max_seqs * (uint64_t)p->n_layer * np > ((uint64_t)1 << 28))
        return tl_error_set(TL_ERR_INVALID, "kv: page table of %" PRIu64 " pages is too large",
                            (uint64_t)p->max_seqs * (uint64_t)p->n_layer * np);
    if (p->placement != TL_KV_SPREAD && p->placement != TL_KV_TEMPERATURE)
        return tl_error_set(TL_ERR_INVALID, "kv: placement %d (spread or temperature)",
                            (int)p->placement);
    if (p->sink_pages < 0 || p->window_pages < 0 || p->cache_pages < 0 ||
        (p->placement == TL_KV_TEMPERATURE && p->window_pages < 1))
        return tl_error_set(TL_ERR_INVALID, "kv: %d sink pages, %d window pages, %d cache "
                            "pages (the temperature rule needs a window of at least one "
                            "page)", (int)p->sink_pages, (int)p->window_pages,
                            (int)p->cache_pages);
    if (spills(p) && (!p->spill_dir || !p->spill_dir[0]))
        return tl_error_set(TL_ERR_INVALID, "kv: pages homed on disk need a spill directory");
    const int any = (p->recompute[0] | p->recompute[1] | p->recompute[2] | p->recompute[3]) != 0;
    if (p->input_dim < 0 || (any && p->input_dim == 0) ||
        (p->input_dim > 0 && !tl_kv_recompute_fits(p->bits, p->input_dim, p->kv_dim)))
        return tl_error_set(TL_ERR_INVALID, "kv: recomputing layers needs 32-bit KV and input "
                            "rows no wider than K and V together (bits %d, input_dim %d, "
                            "kv_dim %d)", (int)p->bits, (int)p->input_dim, (int)p->kv_dim);
    for (int32_t l = p->n_layer; l < 256 && any; l++)
        if (tl_kv_params_recomputes(p, l))
            return tl_error_set(TL_ERR_INVALID, "kv: layer %d recomputes, of %d layers",
                                (int)l, (int)p->n_layer);
    return TL_OK;
}

/* The bytes of one page's input rows (0 when they are not kept). */
static uint64_t input_page_bytes(const tl_kv_params *p) {
    return (uint64_t)p->page_tokens * (uint64_t)p->input_dim * sizeof(float);
}

static int32_t quant_group(const tl_kv_params *p) {
    return p->head_dim % 64 == 0 ? 64 : p->head_dim;
}

static size_t row_bytes(const tl_kv_params *p) {
    if (p->bits == 32 || p->bits == 16) return (size_t)p->kv_dim * (size_t)p->bits / 8;
    return tl_kv_quant_row_bytes(p->kv_dim, quant_group(p), p->bits);
}

static size_t slot_of(size_t page_bytes) {
    return (page_bytes + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
}

static uint64_t pages_per_sl(const tl_kv_params *p) {
    return ((uint64_t)p->max_tokens + (uint64_t)p->page_tokens - 1) / (uint64_t)p->page_tokens;
}

/* Spread rule: page i of a (seq, layer) is homed on disk iff floor((i+1)d) > floor(i d),
 * d = the disk share: the disk pages are spread evenly, and floor(n d) of the first n are
 * on disk. (The temperature rule homes every full page in memory first; commit moves the
 * page that leaves the window to disk.) */
static int on_disk(const tl_kv_params *p, uint64_t i) {
    if (p->placement == TL_KV_TEMPERATURE) return 0;
    uint64_t d = (uint64_t)(100 - p->kv_mem_pct);
    return (i + 1) * d / 100 > i * d / 100;
}

/* Bytes of the page tables (one budget block): pages, (seq, layer) counters, sequences,
 * the write ring, the free disk slots. *ring_cap gets the ring's capacity. */
static uint64_t meta_bytes(const tl_kv_params *p, uint64_t *ring_cap, uint64_t off[7]) {
    uint64_t sl = (uint64_t)p->max_seqs * (uint64_t)p->n_layer, np = pages_per_sl(p);
    uint64_t nd = disk_of(p, np); /* disk pages per (seq, layer) */
    uint64_t cap = 2 * sl < sl * nd ? 2 * sl : sl * nd;
    if (cap > 256) cap = 256; /* enough to keep the disk busy; more only costs memory */
    if (cap == 0) cap = 1;
    *ring_cap = cap;
    uint64_t o = 0;
    off[0] = o; o += sl * np * sizeof(kv_page);
    o = (o + 63) / 64 * 64; off[1] = o; o += sl * sizeof(kv_sl);
    o = (o + 63) / 64 * 64; off[2] = o; o += (uint64_t)p->max_seqs * sizeof(kv_seq);
    o = (o + 63) / 64 * 64; off[3] = o; o += cap * sizeof(kv_wr);
    /* free slots: at most every disk page there can be at once */
    o = (o + 63) / 64 * 64; off[6] = o; o += sl * nd * sizeof(uint64_t);
    off[4] = off[5] = o;
    if (p->key_bounds) { /* the bounds, then the pages' heat */
        const uint64_t nb = sl * np;
        o = (o + 63) / 64 * 64; off[4] = o; o += nb * 2 * (uint64_t)p->kv_dim * sizeof(float);
        o = (o + 63) / 64 * 64; off[5] = o; o += nb * sizeof(float);
    }
    return o;
}

size_t tl_kv_page_bytes(const tl_kv_params *p) {
    if (!p || p->kv_dim < 1 || p->page_tokens < 1 || p->head_dim < 1 ||
        (p->bits != 32 && p->bits != 16 && p->bits != 8 && p->bits != 4))
        return 0;
    return 2 * (size_t)p->page_tokens * row_bytes(p);
}

/* The bound, with S = max_seqs, L = n_layer, NP = ceil(max_tokens / page_tokens) pages per
 * (seq, layer), ND of them homed on disk at most (spread: floor(NP (100 - kv_mem_pct) /
 * 100), as the rule puts floor(n d) of the first n pages on disk; temperature:
 * NP - sink_pages - window_pages), NM = NP - ND, C = cache_pages,
 * OPEN = 1 + ceil(max_block / page_tokens) open f32 pages per (seq, layer) (2 when
 * max_block <= page_tokens), W = min(2 S L, S L ND, 256) write buffers in flight (the ring),
 * and each budget block costing its size + its alignment (the allocator's header):
 *   S L (NM (page_bytes + 64) + OPEN (f32_page_bytes + 64))   resident and open pages
 *   + S L (NM + OPEN) input_page_bytes                          their input rows
 *   + (active ND + W + C) (slot_bytes + SLOT_ALIGN)            staging, writes, cache
 *   + meta + 64                            page tables, write ring, free-slot stack
 * slot_bytes = page_bytes rounded up to SLOT_ALIGN (TL_TIER_MAX_ALIGN), plus the input
 * rows rounded up likewise when they are kept (tl_kv_slot_bytes). A page being
 * stored holds its open frame and its new frame for a moment; both are counted. A page
 * pinned by a prefetch while its write was in flight keeps its write buffer in place of a
 * staging frame. A page leaving the temperature window is copied into a write buffer
 * before its frame is freed, and only then is the page entering the window stored. */
uint64_t tl_kv_budget_bytes(const tl_kv_params *p, int32_t active) {
    if (check_params(p) != TL_OK || active < 0) return UINT64_MAX;
    uint64_t S = (uint64_t)p->max_seqs, L = (uint64_t)p->n_layer, np = pages_per_sl(p);
    uint64_t nd = disk_of(p, np), nm = np - nd, C = (uint64_t)p->cache_pages;
    uint64_t P = (uint64_t)p->page_tokens, M = p->max_block ? (uint64_t)p->max_block : P;
    uint64_t open = 1 + (M + P - 1) / P;
    uint64_t page = tl_kv_page_bytes(p), f32 = 2 * P * (uint64_t)p->kv_dim * 4;
    uint64_t slot = tl_kv_slot_bytes(p), cap, off[7];
    uint64_t meta = meta_bytes(p, &cap, off);
    uint64_t w = nd ? cap : 0;
    return S * L * (nm * (page + FRAME_ALIGN) + open * (f32 + FRAME_ALIGN)) +
           S * L * (nm + open) * input_page_bytes(p) +
           ((uint64_t)active * nd + w + (nd ? C : 0)) * (slot + SLOT_ALIGN) + meta +
           FRAME_ALIGN;
}

size_t tl_kv_slot_bytes(const tl_kv_params *p) {
    const uint64_t x = input_page_bytes(p);
    return slot_of(tl_kv_page_bytes(p)) + (x ? slot_of((size_t)x) : 0);
}

size_t tl_kv_read_bytes(const tl_kv_params *p, int recompute) {
    return recompute && p->input_dim > 0 ? slot_of((size_t)input_page_bytes(p))
                                         : slot_of(tl_kv_page_bytes(p));
}

int64_t tl_kv_disk_pages(const tl_kv_params *p, int64_t len) {
    if (check_params(p) != TL_OK || len <= 0) return 0;
    return (int64_t)disk_of(p, (uint64_t)len / (uint64_t)p->page_tokens);
}

int64_t tl_kv_predict_step_reads(const tl_kv_params *p, int32_t n_seqs, int64_t len) {
    int64_t d = (int64_t)n_seqs * p->n_layer * tl_kv_disk_pages(p, len);
    return d > p->cache_pages ? d - p->cache_pages : 0;
}

/* ---- small helpers ---- */

static kv_page *page_at(const tl_kv *kv, int32_t seq, int32_t layer, int32_t i) {
    return &kv->pages[((size_t)seq * (size_t)kv->p.n_layer + (size_t)layer) * (size_t)kv->np +
                      (size_t)i];
}

static kv_sl *sl_at(const tl_kv *kv, int32_t seq, int32_t layer) {
    return &kv->sl[(size_t)seq * (size_t)kv->p.n_layer + (size_t)layer];
}

static tl_status sticky(const tl_kv *kv) {
    return kv->err ? tl_error_set(kv->err, "%s", kv->errmsg) : TL_OK;
}

/* Makes the current error (status st, message tl_last_error()) sticky unless an earlier
 * one is; returns the sticky error. */
static tl_status stick(tl_kv *kv, tl_status st) {
    if (!kv->err) {
        kv->err = st;
        snprintf(kv->errmsg, sizeof kv->errmsg, "%s", tl_last_error());
    }
    return sticky(kv);
}

static tl_status frame_alloc(tl_kv *kv, size_t size, size_t align, uint8_t **out,
                             const char *what, int32_t seq, int32_t layer, int32_t i) {
    char name[160];
    snprintf(name, sizeof name, "KV %s (seq %d, layer %d, page %d)", what, (int)seq,
             (int)layer, (int)i);
    void *f;
    tl_status st = tl_budget_alloc(kv->budget, size, align, name, &f);
    if (st != TL_OK) return st;
    *out = f;
    if (++kv->frames > kv->frames_peak) kv->frames_peak = kv->frames;
    return TL_OK;
}

static void frame_free(tl_kv *kv, uint8_t **f) {
    if (!*f) return;
    tl_budget_free(kv->budget, *f);
    *f = NULL;
    kv->frames--;
}

/* Slot frames (staging frames, write buffers, cached copies: slot_bytes each) turn over
 * thousands of times per decoded token. Each released one is kept (still counted in the
 * budget) for the next, up to spare_cap of them: a fresh allocation for every page read
 * makes the kernel fault new pages in under every O_DIRECT read, a large share of the
 * read's cost. The spares never exceed the slot frames once in use at the same time,
 * so the budget's peak is unchanged. */
static tl_status slot_alloc(tl_kv *kv, uint8_t **out, const char *what, int32_t seq,
                            int32_t layer, int32_t i) {
    if (kv->n_spare == 0)
        return frame_alloc(kv, kv->frame_slot, SLOT_ALIGN, out, what, seq, layer, i);
    *out = kv->spare[--kv->n_spare];
    if (++kv->frames > kv->frames_peak) kv->frames_peak = kv->frames;
    return TL_OK;
}

static void slot_free(tl_kv *kv, uint8_t **f) {
    if (!*f) return;
    if (kv->n_spare == kv->spare_cap) {
        frame_free(kv, f);
        return;
    }
    kv->spare[kv->n_spare++] = *f;
    *f = NULL;
    kv->frames--;
}

/* A page's frame: a slot frame when the page is homed on disk, else a memory frame. */
static void page_frame_free(tl_kv *kv, kv_page *pg) {
    if (pg->state == PG_DISK) slot_free(kv, &pg->frame);
    else frame_free(kv, &pg->frame);
}

static int recomputes(const tl_kv *kv, int32_t layer) {
    return tl_kv_params_recomputes(&kv->p, layer);
}

/* Bytes a read of a layer's disk page takes: its input rows when the layer recomputes,
 * else K and V. */
static size_t read_bytes(const tl_kv *kv, int32_t layer) {
    return recomputes(kv, layer) ? kv->x_slot : kv->slot_bytes;
}

/* 1 when a disk page's frame (or stage) of this form serves attention at the layer now:
 * input rows serve only a layer that recomputes; K and V serve either. */
static int form_serves(const tl_kv *kv, int32_t layer, int form) {
    return form != FORM_X || recomputes(kv, layer);
}

static uint64_t new_tag(tl_kv *kv) {
    return kv->tag_base | (kv->next_tag++ & (((uint64_t)1 << 40) - 1));
}

static tl_status check_seq(const tl_kv *kv, int32_t seq, const char *what) {
    if (seq < 0 || seq >= kv->p.max_seqs || !kv->seqs[seq].open)
        return tl_error_set(TL_ERR_INVALID, "kv %s: sequence %d is not open", what, (int)seq);
    return TL_OK;
}

/* 1 when seq is open and layer exists (the accessors that return 0 or NULL otherwise). */
static int sl_valid(const tl_kv *kv, int32_t seq, int32_t layer, const char *what) {
    return kv && check_seq(kv, seq, what) == TL_OK && layer >= 0 && layer < kv->p.n_layer;
}

static tl_status check_layer(const tl_kv *kv, int32_t layer, const char *what) {
    if (layer < 0 || layer >= kv->p.n_layer)
        return tl_error_set(TL_ERR_INVALID, "kv %s: layer %d out of range [0, %d)", what,
                            (int)layer, (int)kv->p.n_layer);
    return TL_OK;
}

/* ---- encoding ---- */

/* Stores an open page (f32 K rows, then V rows) in the configured format. */
static void encode_page(const tl_kv *kv, const float *f32, uint8_t *out) {
    size_t D = (size_t)kv->p.kv_dim, rows = 2 * (size_t)kv->p.page_tokens;
    for (size_t r = 0; r < rows; r++) {
        const float *x = f32 + r * D;
        uint8_t *o = out + r * kv->row_bytes;
        if (kv->p.bits == 32) {
            memcpy(o, x, D * sizeof(float));
        } else if (kv->p.bits == 16) {
            tl_f32_row_to_f16_fast(x, (uint16_t *)(void *)o, D);
        } else {
            tl_kv_quant_row(x, kv->p.kv_dim, kv->group, kv->p.bits, o);
        }
    }
}

/* ---- the DRAM cache of disk pages ---- */

/* A disk page's frame (a finished write buffer or a read staging frame) is no longer
 * needed for IO: it stays as a cached copy while the cache has room, else it is freed.
 * Cached pages are never evicted (see kv_cache.h: a fixed set serves an exact scan). */
static void keep_or_free(tl_kv *kv, kv_page *pg) {
    if (kv->cache_used < kv->p.cache_pages) {
        pg->cached = 1;
        kv->cache_used++;
    } else {
        slot_free(kv, &pg->frame);
    }
}

/* ---- the write ring ---- */

/* Finishes the oldest write in the ring: waits for it if `block`, else only if it has
 * completed. *progress is set when an entry was removed. */
static tl_status ring_pop(tl_kv *kv, int block, int *progress) {
    *progress = 0;
    if (kv->ring_n == 0) return TL_OK;
    kv_wr *w = &kv->ring[kv->ring_head];
    kv_page *pg = w->pg;
    tl_status st = TL_OK;
    if (pg->writing && pg->wtag == w->tag) { /* else the sequence closed and waited */
        if (!block && !tl_aio_poll(kv->aio, w->tag)) return TL_OK;
        st = tl_aio_wait(kv->aio, w->tag);
        pg->writing = 0;
        if (!pg->pinned) {
            if (st == TL_OK) keep_or_free(kv, pg);
            else slot_free(kv, &pg->frame);
        }
        if (st == TL_OK) {
            kv->stats.pages_written++;
            kv->stats.bytes_written += kv->frame_slot;
        } else {
            tl_error_wrap(st, "KV spill write (seq %d, layer %d, page %d)", (int)w->seq,
                          (int)w->layer, (int)w->page);
            st = stick(kv, st);
        }
    }
    kv->ring_head = (kv->ring_head + 1) % kv->ring_cap;
    kv->ring_n--;
    *progress = 1;
    return st;
}

/* Reaps the writes that have completed, oldest first. */
static tl_status reap(tl_kv *kv) {
    int progress = 1;
    while (progress) {
        tl_status st = ring_pop(kv, 0, &progress);
        if (st != TL_OK) return st;
    }
    return TL_OK;
}

/* Waits for every write in flight; returns the first error (all are waited). */
static tl_status drain(tl_kv *kv) {
    tl_status first = TL_OK;
    int progress;
    while (kv->ring_n > 0) {
        tl_status st = ring_pop(kv, 1, &progress);
        if (first == TL_OK) first = st;
    }
    return first;
}

/* Waits for the read of a staged page; keeps the staging frame. */
static tl_status finish_read(tl_kv *kv, kv_page *pg, int32_t seq, int32_t layer, int32_t i) {
    if (!pg->reading) return TL_OK;
    pg->reading = 0;
    double t0 = tl_now();
    tl_status st = tl_aio_wait(kv->aio, pg->rtag);
    kv->stats.wait_s += tl_now() - t0;
    if (st != TL_OK) {
        tl_error_wrap(st, "KV spill read (seq %d, layer %d, page %d)", (int)seq, (int)layer,
                      (int)i);
        return stick(kv, st);
    }
    kv->stats.pages_read++;
    kv->stats.bytes_read += pg->sform == FORM_X ? kv->x_slot : kv->slot_bytes;
    return TL_OK;
}

/* ---- storing a full page ---- */

/* Writes page i to the next slot of the spill file, once: its stored bytes are `src` (in
 * the stored format) or, when `f32` is set, encoded from that open f32 frame. The page's
 * old frame is freed and the write buffer becomes its frame until the write completes. */
static tl_status write_out(tl_kv *kv, kv_page *pg, int32_t seq, int32_t layer, int32_t i,
                           const uint8_t *src, const float *f32) {
    tl_status st;
    int progress;
    if (kv->ring_n == kv->ring_cap) { /* bound the write buffers in flight */
        const double t0 = tl_now();
        while (kv->ring_n == kv->ring_cap)
            if ((st = ring_pop(kv, 1, &progress)) != TL_OK) break;
        kv->stats.write_wait_s += tl_now() - t0;
        if (st != TL_OK) return st;
    }
    uint8_t *buf;
    st = slot_alloc(kv, &buf, "spill write buffer", seq, layer, i);
    if (st != TL_OK) return st;
    if (f32) encode_page(kv, f32, buf);
    else memcpy(buf, src, kv->page_bytes);
    memset(buf + kv->page_bytes, 0, kv->slot_bytes - kv->page_bytes);
    if (kv->x_bytes) { /* the input rows, after the f32 K and V rows (the frame of a 32-bit
                          page kept in memory is its open frame) */
        memcpy(buf + kv->slot_bytes, (f32 ? (const uint8_t *)f32 : src) + kv->f32_bytes,
               kv->x_bytes);
        memset(buf + kv->slot_bytes + kv->x_bytes, 0, kv->x_slot - kv->x_bytes);
    }
    uint64_t tag = new_tag(kv);
    const int reuse = kv->n_free > 0;
    const uint64_t slot = reuse ? kv->free_slots[kv->n_free - 1] : kv->next_slot;
    const uint64_t end = (slot + 1) * kv->frame_slot;
    if (end > kv->reserved) { /* past the space made ready: make the next 64 MiB ready */
        kv->reserved = end + SPILL_RESERVE_BYTES;
        if (tl_tier_reserve(kv->tier, kv->reserved) != TL_OK) {
            tl_error_clear(); /* no room for it: no more tries; the writes extend the file */
            kv->reserved = UINT64_MAX; /* and report a full disk themselves */
        }
    }
    st = tl_aio_write(kv->aio, kv->tier, slot * kv->frame_slot, buf, kv->frame_slot, tag);
    if (st != TL_OK) {
        slot_free(kv, &buf);
        tl_error_wrap(st, "KV spill write (seq %d, layer %d, page %d)", (int)seq, (int)layer,
                      (int)i);
        return stick(kv, st);
    }
    frame_free(kv, &pg->frame);
    pg->frame = buf;
    if (reuse) kv->n_free--;
    else kv->next_slot++;
    pg->slot = slot;
    pg->state = PG_DISK;
    pg->form = kv->x_bytes ? FORM_BOTH : FORM_KV;
    pg->writing = 1;
    pg->wtag = tag;
    kv_wr *w = &kv->ring[(kv->ring_head + kv->ring_n++) % kv->ring_cap];
    w->pg = pg;
    w->tag = tag;
    w->seq = seq;
    w->layer = layer;
    w->page = i;
    return TL_OK;
}

static size_t page_index(const tl_kv *kv, int32_t seq, int32_t layer, int32_t i) {
    return ((size_t)seq * (size_t)kv->p.n_layer + (size_t)layer) * (size_t)kv->np + (size_t)i;
}

/* The per-channel minimum and maximum of the page's K rows (exact f32, before storing). */
static void note_bounds(tl_kv *kv, int32_t seq, int32_t layer, int32_t i, const float *f32) {
    const size_t D = (size_t)kv->p.kv_dim;
    float *mn = kv->bounds + page_index(kv, seq, layer, i) * 2 * D, *mx = mn + D;
    memcpy(mn, f32, D * sizeof(float));
    memcpy(mx, f32, D * sizeof(float));
    for (int32_t r = 1; r < kv->p.page_tokens; r++) {
        const float *k = f32 + (size_t)r * D;
        for (size_t j = 0; j < D; j++) {
            mn[j] = k[j] < mn[j] ? k[j] : mn[j];
            mx[j] = k[j] > mx[j] ? k[j] : mx[j];
        }
    }
}

/* Stores full page i: encoded into a memory frame, or written to disk (spread rule). */
static tl_status store_page(tl_kv *kv, int32_t seq, int32_t layer, int32_t i) {
    kv_page *pg = page_at(kv, seq, layer, i);
    const float *f32 = (const float *)(const void *)pg->frame;
    if (kv->bounds) {
        note_bounds(kv, seq, layer, i, f32);
        kv->heat[page_index(kv, seq, layer, i)] = 1; /* new pages are read until judged */
    }
    if (on_disk(&kv->p, (uint64_t)i)) return write_out(kv, pg, seq, layer, i, NULL, f32);
    if (kv->p.bits != 32) {
        uint8_t *f;
        tl_status st = frame_alloc(kv, kv->page_bytes, FRAME_ALIGN, &f, "stored page", seq,
                                   layer, i);
        if (st != TL_OK) return st;
        encode_page(kv, f32, f);
        frame_free(kv, &pg->frame);
        pg->frame = f;
    }
    pg->state = PG_MEM;
    return TL_OK;
}

/* Temperature rule: storing page `next` of a (seq, layer) pushes page next - window out
 * of the window; unless it is a sink, it goes to disk. */
static tl_status leave_window(tl_kv *kv, int32_t seq, int32_t layer, int32_t next) {
    int32_t j = next - kv->p.window_pages;
    if (kv->p.placement != TL_KV_TEMPERATURE || j < kv->p.sink_pages) return TL_OK;
    kv_page *pg = page_at(kv, seq, layer, j);
    if (pg->state != PG_MEM) return TL_OK;
    return write_out(kv, pg, seq, layer, j, pg->frame, NULL);
}

/* ---- open / close ---- */

/* The spill file has no name (see tl_tier_file_open_scratch): it cannot outlive the
 * process, whether it exits, fails or is killed. */
static tl_status open_spill(tl_kv *kv, const char *dir) {
    tl_status st = tl_tier_file_open_scratch(dir, TL_TIER_FILE_DIRECT, &kv->tier);
    return st ? tl_error_wrap(st, "kv: spill file") : TL_OK;
}

tl_status tl_kv_open(const tl_kv_params *p, tl_budget *budget, tl_aio *aio, tl_kv **out) {
    if (!out) return tl_error_set(TL_ERR_INVALID, "kv open: no output");
    *out = NULL;
    tl_status st = check_params(p);
    if (st != TL_OK) return st;
    if (!budget || (spills(p) && !aio))
        return tl_error_set(TL_ERR_INVALID, "kv open: no budget or IO queue");
    tl_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return tl_error_set(TL_ERR_NOMEM, "kv: out of memory");
    kv->p = *p;
    kv->p.spill_dir = NULL; /* not kept: the caller's string may go away */
    kv->budget = budget;
    kv->aio = aio;
    kv->group = quant_group(p);
    kv->np = (int32_t)pages_per_sl(p);
    kv->row_bytes = row_bytes(p);
    kv->page_bytes = tl_kv_page_bytes(p);
    kv->f32_bytes = 2 * (size_t)p->page_tokens * (size_t)p->kv_dim * sizeof(float);
    kv->slot_bytes = slot_of(kv->page_bytes);
    kv->x_bytes = (size_t)input_page_bytes(p);
    kv->x_slot = kv->x_bytes ? slot_of(kv->x_bytes) : 0;
    kv->frame_slot = kv->slot_bytes + kv->x_slot;
    kv->cache_cap = p->cache_pages;
    uint64_t cap, off[7], mb = meta_bytes(p, &cap, off);
    st = tl_budget_calloc(budget, (size_t)mb, "KV page tables", &kv->meta);
    if (st != TL_OK) {
        free(kv);
        return st;
    }
    uint8_t *m = kv->meta;
    kv->pages = (kv_page *)(void *)(m + off[0]);
    kv->sl = (kv_sl *)(void *)(m + off[1]);
    kv->seqs = (kv_seq *)(void *)(m + off[2]);
    kv->ring = (kv_wr *)(void *)(m + off[3]);
    kv->free_slots = (uint64_t *)(void *)(m + off[6]);
    kv->free_cap = (size_t)p->max_seqs * (size_t)p->n_layer * (size_t)disk_of(p, pages_per_sl(p));
    if (p->key_bounds) {
        kv->bounds = (float *)(void *)(m + off[4]);
        kv->heat = (float *)(void *)(m + off[5]);
    }
    kv->ring_cap = (size_t)cap;
    unsigned inst = atomic_fetch_add(&kv_instances, 1);
    kv->tag_base = KV_TAG | ((uint64_t)(inst & 0xFFFF) << 40);
    if (spills(p)) {
        /* spares: the write ring and two layers' staging of every sequence at most */
        kv->spare_cap = (size_t)cap + 2 * (size_t)p->max_seqs * disk_of(p, pages_per_sl(p));
        kv->spare = malloc(kv->spare_cap * sizeof *kv->spare);
        st = kv->spare ? open_spill(kv, p->spill_dir)
                       : tl_error_set(TL_ERR_NOMEM, "kv: out of memory for %zu frame pointers",
                                      kv->spare_cap);
        if (st != TL_OK) {
            free(kv->spare);
            tl_budget_free(budget, kv->meta);
            free(kv);
            return st;
        }
    }
    *out = kv;
    return TL_OK;
}

/* Waits for the page's IO and frees its frames. */
static void page_clear(tl_kv *kv, kv_page *pg, int32_t seq, int32_t layer, int32_t i) {
    if (pg->writing) {
        tl_status st = tl_aio_wait(kv->aio, pg->wtag);
        pg->writing = 0; /* its ring entry is now dead */
        if (st == TL_OK) {
            kv->stats.pages_written++;
            kv->stats.bytes_written += kv->frame_slot;
        } else {
            tl_error_wrap(st, "KV spill write (seq %d, layer %d, page %d)", (int)seq,
                          (int)layer, (int)i);
            stick(kv, st);
        }
    }
    (void)finish_read(kv, pg, seq, layer, i);
    if (pg->state == PG_DISK && kv->n_free < kv->free_cap) /* idle now: reusable */
        kv->free_slots[kv->n_free++] = pg->slot;
    if (pg->cached) kv->cache_used--;
    page_frame_free(kv, pg);
    slot_free(kv, &pg->stage);
    memset(pg, 0, sizeof *pg);
}

void tl_kv_close(tl_kv *kv) {
    if (!kv) return;
    (void)drain(kv);
    for (int32_t s = 0; s < kv->p.max_seqs; s++)
        for (int32_t l = 0; l < kv->p.n_layer; l++)
            for (int32_t i = 0; i < kv->np; i++) page_clear(kv, page_at(kv, s, l, i), s, l, i);
    kv->spare_cap = 0;
    while (kv->n_spare) tl_budget_free(kv->budget, kv->spare[--kv->n_spare]);
    free(kv->spare);
    tl_budget_free(kv->budget, kv->meta);
    if (kv->tier) tl_tier_close(kv->tier);
    free(kv);
}

/* ---- sequences ---- */

tl_status tl_kv_seq_open(tl_kv *kv, int32_t *seq) {
    if (!kv || !seq) return tl_error_set(TL_ERR_INVALID, "kv seq open: null argument");
    *seq = -1;
    tl_status st = sticky(kv);
    if (st == TL_OK) st = reap(kv);
    if (st != TL_OK) return st;
    for (int32_t s = 0; s < kv->p.max_seqs; s++) {
        if (kv->seqs[s].open) continue;
        kv->seqs[s].open = 1;
        kv->seqs[s].len = 0;
        for (int32_t l = 0; l < kv->p.n_layer; l++) *sl_at(kv, s, l) = (kv_sl){0, 0, 0, 0};
        *seq = s;
        return TL_OK;
    }
    return tl_error_set(TL_ERR_INVALID, "kv: all %d sequences are in use", (int)kv->p.max_seqs);
}

void tl_kv_seq_close(tl_kv *kv, int32_t seq) {
    if (!kv || check_seq(kv, seq, "seq close") != TL_OK) return;
    for (int32_t l = 0; l < kv->p.n_layer; l++) {
        for (int32_t i = 0; i < kv->np; i++) page_clear(kv, page_at(kv, seq, l, i), seq, l, i);
        *sl_at(kv, seq, l) = (kv_sl){0, 0, 0, 0};
    }
    kv->seqs[seq].open = 0;
    kv->seqs[seq].len = 0;
}

int32_t tl_kv_seq_len(const tl_kv *kv, int32_t seq) {
    if (!kv || check_seq(kv, seq, "seq len") != TL_OK) return 0;
    return kv->seqs[seq].len;
}

int32_t tl_kv_visible(const tl_kv *kv, int32_t seq, int32_t layer) {
    if (!sl_valid(kv, seq, layer, "visible")) return 0;
    return kv->seqs[seq].len + sl_at(kv, seq, layer)->pending;
}

tl_status tl_kv_append(tl_kv *kv, int32_t seq, int32_t layer, const float *k, const float *v,
                       int32_t n) {
    if (!kv) return tl_error_set(TL_ERR_INVALID, "kv append: no cache");
    tl_status st = sticky(kv);
    if (st == TL_OK) st = check_seq(kv, seq, "append");
    if (st == TL_OK) st = check_layer(kv, layer, "append");
    if (st != TL_OK) return st;
    if (n < 0 || (n > 0 && (!k || !v)))
        return tl_error_set(TL_ERR_INVALID, "kv append: %d rows, k %p, v %p", (int)n,
                            (const void *)k, (const void *)v);
    kv_sl *sl = sl_at(kv, seq, layer);
    int64_t pos0 = (int64_t)kv->seqs[seq].len + sl->pending;
    if (pos0 + n > kv->p.max_tokens)
        return tl_error_set(TL_ERR_CONTEXT,
                            "kv append: sequence %d layer %d: %" PRId64 " + %d positions "
                            "exceed the context of %d",
                            (int)seq, (int)layer, pos0, (int)n, (int)kv->p.max_tokens);
    if (n == 0) return TL_OK;
    if ((st = reap(kv)) != TL_OK) return st;
    /* open frames: f32 K rows, V rows, then the input rows when they are kept */
    const int32_t P = kv->p.page_tokens;
    const size_t D = (size_t)kv->p.kv_dim;
    for (int32_t i = (int32_t)(pos0 / P); i <= (int32_t)((pos0 + n - 1) / P); i++) {
        kv_page *pg = page_at(kv, seq, layer, i);
        if (pg->state != PG_EMPTY) continue;
        st = frame_alloc(kv, kv->f32_bytes + kv->x_bytes, FRAME_ALIGN, &pg->frame, "open page",
                         seq, layer, i);
        if (st != TL_OK) return st; /* frames allocated so far stay, empty and open */
        pg->state = PG_OPEN;
    }
    for (int32_t r = 0; r < n; r++) {
        int64_t pos = pos0 + r;
        float *f = (float *)(void *)page_at(kv, seq, layer, (int32_t)(pos / P))->frame;
        size_t row = (size_t)(pos % P);
        memcpy(f + row * D, k + (size_t)r * D, D * sizeof(float));
        memcpy(f + ((size_t)P + row) * D, v + (size_t)r * D, D * sizeof(float));
    }
    sl->pending += n;
    return TL_OK;
}

tl_status tl_kv_seq_commit(tl_kv *kv, int32_t seq, int32_t n) {
    if (!kv) return tl_error_set(TL_ERR_INVALID, "kv commit: no cache");
    tl_status st = sticky(kv);
    if (st == TL_OK) st = check_seq(kv, seq, "commit");
    if (st != TL_OK) return st;
    for (int32_t l = 0; l < kv->p.n_layer; l++)
        if (sl_at(kv, seq, l)->pending != n)
            return tl_error_set(TL_ERR_INVALID,
                                "kv commit of %d positions of sequence %d: layer %d has %d "
                                "appended", (int)n, (int)seq, (int)l,
                                (int)sl_at(kv, seq, l)->pending);
    kv->seqs[seq].len += n;
    for (int32_t l = 0; l < kv->p.n_layer; l++) sl_at(kv, seq, l)->pending = 0;
    if ((st = reap(kv)) != TL_OK) return st;
    int32_t full = kv->seqs[seq].len / kv->p.page_tokens;
    for (int32_t l = 0; l < kv->p.n_layer; l++) {
        kv_sl *sl = sl_at(kv, seq, l);
        while (sl->stored < full) {
            if ((st = leave_window(kv, seq, l, sl->stored)) != TL_OK) return st;
            if ((st = store_page(kv, seq, l, sl->stored)) != TL_OK) return st;
            sl->stored++;
        }
    }
    return TL_OK;
}

/* ---- reading ---- */

static tl_status check_seqs(const tl_kv *kv, const int32_t *seqs, int32_t n_seqs,
                            int32_t layer, const char *what) {
    tl_status st = sticky(kv);
    if (st == TL_OK && (n_seqs < 0 || (n_seqs > 0 && !seqs)))
        st = tl_error_set(TL_ERR_INVALID, "kv %s: %d sequences", what, (int)n_seqs);
    if (st == TL_OK && n_seqs > 0) st = check_layer(kv, layer, what);
    for (int32_t j = 0; st == TL_OK && j < n_seqs; j++) st = check_seq(kv, seqs[j], what);
    return st;
}

/* Queues the read of disk page i into a new staging frame (waited by finish_read), in
 * IO class cls: SOON for a prefetch, NOW for a page attention waits for. */
static tl_status stage_read(tl_kv *kv, kv_page *pg, int32_t seq, int32_t layer, int32_t i,
                            tl_aio_class cls) {
    tl_status st = slot_alloc(kv, &pg->stage, "staging frame", seq, layer, i);
    if (st != TL_OK) return st;
    pg->rtag = new_tag(kv);
    const int x = recomputes(kv, layer); /* input rows sit after K and V in the slot */
    pg->sform = x ? FORM_X : FORM_KV;
    st = tl_aio_read_class(kv->aio, kv->tier,
                           pg->slot * kv->frame_slot + (x ? kv->slot_bytes : 0),
                           pg->stage + (x ? kv->slot_bytes : 0), read_bytes(kv, layer),
                           pg->rtag, cls);
    if (st != TL_OK) {
        slot_free(kv, &pg->stage);
        tl_error_wrap(st, "KV spill read (seq %d, layer %d, page %d)", (int)seq, (int)layer,
                      (int)i);
        return stick(kv, st);
    }
    pg->reading = 1;
    return TL_OK;
}

tl_status tl_kv_prefetch(tl_kv *kv, const int32_t *seqs, int32_t n_seqs, int32_t layer) {
    if (!kv) return tl_error_set(TL_ERR_INVALID, "kv prefetch: no cache");
    tl_status st = check_seqs(kv, seqs, n_seqs, layer, "prefetch");
    if (st == TL_OK) st = reap(kv);
    if (st != TL_OK) return st;
    for (int32_t j = 0; j < n_seqs; j++) {
        int32_t s = seqs[j], stored = sl_at(kv, s, layer)->stored;
        /* the next row (position len) sees positions from len + 1 - attn_window on */
        const int32_t lo = kv->p.attn_window > 0 ? kv->seqs[s].len + 1 - kv->p.attn_window : 0;
        for (int32_t i = 0; i < stored; i++) {
            if ((i + 1) * kv->p.page_tokens <= lo) continue; /* wholly before the window */
            kv_page *pg = page_at(kv, s, layer, i);
            if (pg->state != PG_DISK || pg->stage || pg->pinned) continue;
            const int selective = kv->heat && sl_at(kv, s, layer)->selective;
            const float heat = selective ? kv->heat[page_index(kv, s, layer, i)] : 1;
            const int served = pg->frame && form_serves(kv, layer, pg->form);
            if (selective) { /* the share of the next selection expected in memory */
                kv->stats.heat_needed += heat;
                if (served || heat >= TL_KV_HEAT_FETCH) kv->stats.heat_ready += heat;
            }
            if (selective && heat < TL_KV_HEAT_FETCH && !served)
                continue; /* not likely needed: a demand read if it is */
            if (served) { /* cached, or its write is in flight: no read */
                if (!pg->cached) pg->pinned = 1; /* keeps the write buffer until release */
                kv->stats.cache_hits++;
                continue;
            }
            /* on an error, what is queued so far is undone by release */
            if ((st = stage_read(kv, pg, s, layer, i, TL_AIO_SOON)) != TL_OK) return st;
        }
    }
    return TL_OK;
}

tl_status tl_kv_wait(tl_kv *kv, const int32_t *seqs, int32_t n_seqs, int32_t layer) {
    if (!kv) return tl_error_set(TL_ERR_INVALID, "kv wait: no cache");
    tl_status st = check_seqs(kv, seqs, n_seqs, layer, "wait");
    if (st != TL_OK) return st;
    tl_status first = TL_OK;
    for (int32_t j = 0; j < n_seqs; j++) {
        int32_t s = seqs[j], stored = sl_at(kv, s, layer)->stored;
        for (int32_t i = 0; i < stored; i++) {
            st = finish_read(kv, page_at(kv, s, layer, i), s, layer, i);
            if (first == TL_OK) first = st;
        }
    }
    return first != TL_OK ? first : reap(kv);
}

void tl_kv_release(tl_kv *kv, const int32_t *seqs, int32_t n_seqs, int32_t layer) {
    if (!kv || !seqs || layer < 0 || layer >= kv->p.n_layer) return;
    for (int32_t j = 0; j < n_seqs; j++) {
        int32_t s = seqs[j];
        if (check_seq(kv, s, "release") != TL_OK) continue;
        int32_t stored = sl_at(kv, s, layer)->stored;
        for (int32_t i = 0; i < stored; i++) {
            kv_page *pg = page_at(kv, s, layer, i);
            if (pg->state != PG_DISK) continue;
            tl_status rs = finish_read(kv, pg, s, layer, i);
            if (pg->stage) {
                if (rs == TL_OK && !pg->frame) { /* the page read: keep it if there is room */
                    pg->frame = pg->stage;
                    pg->form = pg->sform;
                    pg->stage = NULL;
                    keep_or_free(kv, pg);
                } else {
                    slot_free(kv, &pg->stage);
                }
            }
            if (pg->pinned) {
                pg->pinned = 0;
                if (!pg->writing) keep_or_free(kv, pg);
            }
        }
    }
}

/* The bytes of a viewable page (NULL for an open page), and its visible rows. */
/* The bytes a view of page pg would read and their form: *src NULL when the page is not
 * viewable now (on disk and not staged or pinned); an open page's are its f32 frame. No
 * error is set: tl_kv_touch_head calls it from worker threads for a hint. */
static const uint8_t *page_bytes_now(const kv_page *pg, int *form) {
    *form = FORM_KV;
    if (pg->state == PG_OPEN || pg->state == PG_MEM) return pg->frame;
    if (pg->state == PG_DISK && pg->stage && !pg->reading) {
        *form = pg->sform;
        return pg->stage;
    }
    if (pg->state == PG_DISK && (pg->pinned || pg->cached)) {
        *form = pg->form;
        return pg->frame;
    }
    return NULL;
}

static tl_status view_source(tl_kv *kv, int32_t seq, int32_t layer, int32_t page,
                             const char *what, kv_page **pgp, const uint8_t **src,
                             int32_t *rows, int *form) {
    tl_status st = check_seqs(kv, &seq, 1, layer, what);
    if (st != TL_OK) return st;
    const int32_t P = kv->p.page_tokens;
    int32_t vis = tl_kv_visible(kv, seq, layer);
    if (page < 0 || (int64_t)page * P >= vis)
        return tl_error_set(TL_ERR_INVALID,
                            "kv %s: page %d of sequence %d layer %d is past its %d "
                            "positions", what, (int)page, (int)seq, (int)layer, (int)vis);
    *rows = vis - page * P < P ? vis - page * P : P;
    kv_page *pg = page_at(kv, seq, layer, page);
    *pgp = pg;
    *src = NULL;
    *form = FORM_KV;
    if (pg->state == PG_OPEN) return TL_OK; /* its f32 frame: *src stays NULL */
    *src = page_bytes_now(pg, form);
    if (!*src) {
        return tl_error_set(TL_ERR_INVALID,
                            "kv %s: page %d of sequence %d layer %d is on disk and %s "
                            "(tl_kv_prefetch and tl_kv_wait first)", what, (int)page, (int)seq,
                            (int)layer, pg->stage ? "its read was not waited for" : "not staged");
    }
    return TL_OK;
}

/* Decodes columns [col, col + width) of n stored rows of the halves [h0, h1) of a page
 * (0: K, 1: V) into scratch, rows width apart, half h at (h - h0) * page_tokens * width:
 * quantization groups never straddle a head (quant_group), so a head's columns, or a
 * whole row's, are whole groups. */
static void decode_cols(const tl_kv *kv, const uint8_t *in, int32_t n, int32_t col,
                        int32_t width, int h0, int h1, float *scratch) {
    const size_t W = (size_t)width, P = (size_t)kv->p.page_tokens;
    const size_t off = kv->p.bits == 16 ? (size_t)col * 2
                                        : tl_kv_quant_row_bytes(col, kv->group, kv->p.bits);
    for (int half = h0; half < h1; half++) {
        for (size_t r = 0; r < (size_t)n; r++) {
            const uint8_t *src = in + (half * P + r) * kv->row_bytes + off;
            float *x = scratch + (size_t)(half - h0) * P * W + r * W;
            if (kv->p.bits == 16) { /* exact: kernels.h */
                tl_f16_row_to_f32_fast((const uint16_t *)(const void *)src, x, W);
            } else {
                tl_kv_dequant_row(src, width, kv->group, kv->p.bits, x);
            }
        }
    }
}

/* Views of columns [col, col + width) of the halves [h0, h1) of a page (0: K, 1: V): into
 * the page for f32 (rows kv_dim apart), else decoded into scratch (rows width apart); *x
 * gets half h0, and with both halves *v gets V. */
static tl_status view_cols(tl_kv *kv, int32_t seq, int32_t layer, int32_t page, int32_t col,
                           int32_t width, int h0, int h1, float *scratch, const float **x,
                           const float **v, size_t *ld, int32_t *n) {
    kv_page *pg;
    const uint8_t *src;
    int32_t rows;
    int form;
    tl_status st = view_source(kv, seq, layer, page, "view", &pg, &src, &rows, &form);
    if (st != TL_OK) return st;
    const size_t P = (size_t)kv->p.page_tokens, D = (size_t)kv->p.kv_dim;
    if (src && form == FORM_X)
        return tl_error_set(TL_ERR_INVALID, "kv view: page %d of sequence %d layer %d holds "
                            "input rows only (recompute it: tl_kv_page_inputs)", (int)page,
                            (int)seq, (int)layer);
    if (!src || kv->p.bits == 32) { /* f32 rows: the open frame, or the stored page */
        const float *f = (const float *)(const void *)(src ? src : pg->frame);
        *x = f + (size_t)h0 * P * D + col;
        if (v) *v = f + P * D + col;
        *ld = D;
    } else {
        if (!scratch) return tl_error_set(TL_ERR_INVALID, "kv view: no scratch buffer");
        decode_cols(kv, src, rows, col, width, h0, h1, scratch);
        *x = scratch;
        if (v) *v = scratch + P * (size_t)width;
        *ld = (size_t)width;
    }
    *n = rows;
    return TL_OK;
}

tl_status tl_kv_view(tl_kv *kv, int32_t seq, int32_t layer, int32_t page, float *scratch,
                     const float **k, const float **v, int32_t *n) {
    if (!kv || !k || !v || !n) return tl_error_set(TL_ERR_INVALID, "kv view: null argument");
    size_t ld;
    return view_cols(kv, seq, layer, page, 0, kv->p.kv_dim, 0, 2, scratch, k, v, &ld, n);
}

tl_status tl_kv_view_head(tl_kv *kv, int32_t seq, int32_t layer, int32_t page, int32_t head,
                          int values, float *scratch, const float **x, size_t *ld,
                          int32_t *n) {
    if (!kv || !x || !ld || !n) return tl_error_set(TL_ERR_INVALID, "kv view: null argument");
    const int32_t H = kv->p.head_dim;
    if (head < 0 || H <= 0 || ((int64_t)head + 1) * H > kv->p.kv_dim)
        return tl_error_set(TL_ERR_INVALID, "kv view: kv head %d of a %d-wide row of "
                            "%d-wide heads", (int)head, (int)kv->p.kv_dim, (int)H);
    const int h = values ? 1 : 0;
    return view_cols(kv, seq, layer, page, head * H, H, h, h + 1, scratch, x, NULL, ld, n);
}

void tl_kv_touch_head(const tl_kv *kv, int32_t seq, int32_t layer, int32_t page,
                      int32_t head, int values) {
    if (!kv || seq < 0 || seq >= kv->p.max_seqs || !kv->seqs[seq].open || layer < 0 ||
        layer >= kv->p.n_layer || page < 0 || head < 0)
        return;
    const int32_t P = kv->p.page_tokens, H = kv->p.head_dim;
    const int32_t vis = kv->seqs[seq].len + sl_at(kv, seq, layer)->pending;
    if ((int64_t)page * P >= vis || ((int64_t)head + 1) * H > kv->p.kv_dim) return;
    const int32_t rows = vis - page * P < P ? vis - page * P : P;
    const kv_page *pg = page_at(kv, seq, layer, page);
    int form;
    const uint8_t *src = page_bytes_now(pg, &form);
    if (!src || form == FORM_X) return;
    const int f32 = pg->state == PG_OPEN || kv->p.bits == 32;
    const size_t rb = f32 ? (size_t)kv->p.kv_dim * 4 : kv->row_bytes;
    size_t off, len;
    if (f32) {
        off = (size_t)head * H * 4, len = (size_t)H * 4;
    } else if (kv->p.bits == 16) {
        off = (size_t)head * H * 2, len = (size_t)H * 2;
    } else {
        off = tl_kv_quant_row_bytes(head * H, kv->group, kv->p.bits);
        len = tl_kv_quant_row_bytes(H, kv->group, kv->p.bits);
    }
    const uint8_t *base = src + (values ? (size_t)P * rb : 0) + off;
    for (int32_t r = 0; r < rows; r++) { /* every line of [row + 0, row + len) */
        const uintptr_t a = (uintptr_t)(base + (size_t)r * rb), end = a + len;
        for (uintptr_t l = a & ~(uintptr_t)63; l < end; l += 64)
            __builtin_prefetch((const void *)l);
    }
}

int tl_kv_page_inputs(tl_kv *kv, int32_t seq, int32_t layer, int32_t page, const float **x,
                      float **out, int32_t *n) {
    kv_page *pg;
    const uint8_t *src;
    int form;
    if (!kv || !recomputes(kv, layer) || page < 0 || page >= tl_kv_stored_pages(kv, seq, layer))
        return 0;
    if (view_source(kv, seq, layer, page, "page inputs", &pg, &src, n, &form) != TL_OK ||
        !src || form != FORM_X)
        return 0;
    *x = (const float *)(const void *)(src + kv->slot_bytes);
    *out = (float *)(void *)(uintptr_t)src; /* a slot frame of this cache's, writable */
    return 1;
}

void tl_kv_recomputed(tl_kv *kv, int32_t seq, int32_t layer, int32_t page) {
    kv_page *pg;
    const uint8_t *src;
    int32_t rows;
    int form;
    if (!kv || page < 0 || page >= tl_kv_stored_pages(kv, seq, layer) ||
        view_source(kv, seq, layer, page, "recomputed", &pg, &src, &rows, &form) != TL_OK || !src)
        return;
    if (pg->stage && src == pg->stage) pg->sform = FORM_BOTH;
    else pg->form = FORM_BOTH;
}

tl_status tl_kv_append_inputs(tl_kv *kv, int32_t seq, int32_t layer, const float *x,
                              int32_t n) {
    if (!kv) return tl_error_set(TL_ERR_INVALID, "kv append inputs: no cache");
    tl_status st = check_seqs(kv, &seq, 1, layer, "append inputs");
    if (st != TL_OK) return st;
    const kv_sl *sl = sl_at(kv, seq, layer);
    if (!kv->x_bytes || n < 0 || n > sl->pending || (n > 0 && !x))
        return tl_error_set(TL_ERR_INVALID, "kv append inputs: %s, %d rows of %d appended at "
                            "layer %d", kv->x_bytes ? "input rows kept" : "no input rows kept",
                            (int)n, (int)sl->pending, (int)layer);
    const int32_t P = kv->p.page_tokens;
    const size_t X = (size_t)kv->p.input_dim;
    const int64_t pos0 = (int64_t)kv->seqs[seq].len + sl->pending - n;
    for (int32_t r = 0; r < n; r++) { /* the rows tl_kv_append just wrote: open frames */
        const int64_t pos = pos0 + r;
        uint8_t *f = page_at(kv, seq, layer, (int32_t)(pos / P))->frame + kv->f32_bytes;
        memcpy(f + (size_t)(pos % P) * X * sizeof(float), x + (size_t)r * X, X * sizeof(float));
    }
    return TL_OK;
}

int tl_kv_recomputes(const tl_kv *kv, int32_t layer) { return kv && recomputes(kv, layer); }

int tl_kv_keeps_inputs(const tl_kv *kv) { return kv && kv->x_bytes > 0; }

tl_status tl_kv_set_recompute_layers(tl_kv *kv, int32_t layers) {
    if (!kv) return tl_error_set(TL_ERR_INVALID, "kv recompute: no cache");
    if (layers < 0 || (layers > 0 && !kv->x_bytes))
        return tl_error_set(TL_ERR_INVALID, "kv recompute: %d layers, and input rows are %s",
                            (int)layers, kv->x_bytes ? "kept" : "not kept");
    tl_kv_set_recompute(&kv->p, kv->p.input_dim, layers);
    return TL_OK;
}

/* ---- page selection ---- */

int32_t tl_kv_stored_pages(const tl_kv *kv, int32_t seq, int32_t layer) {
    if (!sl_valid(kv, seq, layer, "stored pages")) return 0;
    return sl_at(kv, seq, layer)->stored;
}

const float *tl_kv_key_bounds(const tl_kv *kv, int32_t seq, int32_t layer, int32_t page) {
    if (!kv || !kv->bounds || page < 0 || page >= tl_kv_stored_pages(kv, seq, layer))
        return NULL;
    return kv->bounds + page_index(kv, seq, layer, page) * 2 * (size_t)kv->p.kv_dim;
}

int tl_kv_page_ready(const tl_kv *kv, int32_t seq, int32_t layer, int32_t page) {
    if (!sl_valid(kv, seq, layer, "page ready") || page < 0 || page >= kv->np) return 0;
    const kv_page *pg = page_at(kv, seq, layer, page);
    return pg->state == PG_OPEN || pg->state == PG_MEM ||
           (pg->state == PG_DISK && ((pg->frame && form_serves(kv, layer, pg->form)) ||
                                     pg->stage));
}

tl_status tl_kv_require(tl_kv *kv, int32_t seq, int32_t layer, const int32_t *pages,
                        int32_t n) {
    if (!kv) return tl_error_set(TL_ERR_INVALID, "kv require: no cache");
    tl_status st = check_seqs(kv, &seq, 1, layer, "require");
    if (st != TL_OK) return st;
    const int32_t stored = sl_at(kv, seq, layer)->stored;
    for (int32_t j = 0; j < n; j++) { /* queue every missing read, then wait for them */
        const int32_t i = pages[j];
        if (i < 0 || i >= stored) continue; /* the open page is always in memory */
        kv_page *pg = page_at(kv, seq, layer, i);
        if (pg->state != PG_DISK || pg->stage ||
            (pg->frame && form_serves(kv, layer, pg->form)))
            continue;
        if ((st = stage_read(kv, pg, seq, layer, i, TL_AIO_NOW)) != TL_OK) return st;
        kv->stats.demand_reads++;
    }
    for (int32_t j = 0; j < n; j++) {
        const int32_t i = pages[j];
        if (i < 0 || i >= stored) continue;
        if ((st = finish_read(kv, page_at(kv, seq, layer, i), seq, layer, i)) != TL_OK)
            return st;
    }
    return TL_OK;
}

void tl_kv_note_selection(tl_kv *kv, int32_t seq, int32_t layer, const uint8_t *sel,
                          int32_t n) {
    if (!sl_valid(kv, seq, layer, "note selection") || !kv->heat) return;
    kv_sl *sl = sl_at(kv, seq, layer);
    float *h = kv->heat + page_index(kv, seq, layer, 0);
    sl->used_disk = 0;
    for (int32_t i = 0; i < sl->stored; i++) {
        const int used = i < n && sel[i];
        h[i] = (1 - TL_KV_HEAT_KEEP) * (float)used + TL_KV_HEAT_KEEP * h[i];
        if (used && page_at(kv, seq, layer, i)->state == PG_DISK) sl->used_disk++;
    }
    kv->stats.select_disk_pages += (uint64_t)sl->used_disk;
    sl->selective = 1;
}

tl_status tl_kv_select_read_forecast(const tl_kv *kv, double *ratio) {
    if (!kv || !ratio) return tl_error_set(TL_ERR_INVALID, "kv read forecast: no cache");
    double staged = 0, demand = 0, used = 0;
    for (int32_t s = 0; s < kv->p.max_seqs; s++) {
        if (!kv->seqs[s].open) continue;
        const int32_t lo = kv->p.attn_window > 0 ? kv->seqs[s].len + 1 - kv->p.attn_window : 0;
        for (int32_t l = 0; kv->heat && l < kv->p.n_layer; l++) {
            const kv_sl *sl = sl_at(kv, s, l);
            if (!sl->selective) continue;
            used += sl->used_disk;
            const float *h = kv->heat + page_index(kv, s, l, 0);
            for (int32_t i = 0; i < sl->stored; i++) { /* as tl_kv_prefetch decides */
                const kv_page *pg = page_at(kv, s, l, i);
                if ((i + 1) * kv->p.page_tokens <= lo || pg->state != PG_DISK ||
                    (pg->frame && form_serves(kv, l, pg->form)))
                    continue;
                if (h[i] >= TL_KV_HEAT_FETCH) staged += 1;
                else demand += h[i];
            }
        }
    }
    if (!(used > 0))
        return tl_error_set(TL_ERR_INVALID, "kv read forecast: no selection has used a disk "
                            "page yet");
    *ratio = (staged + demand) / used;
    return TL_OK;
}

void tl_kv_forget_selection(tl_kv *kv) {
    if (!kv) return;
    for (size_t i = 0; i < (size_t)kv->p.max_seqs * (size_t)kv->p.n_layer; i++)
        kv->sl[i].selective = 0;
}

void tl_kv_set_cache_pages(tl_kv *kv, int32_t pages) {
    if (!kv || pages < 0) return;
    kv->p.cache_pages = pages < kv->cache_cap ? pages : kv->cache_cap;
    const size_t n = (size_t)kv->p.max_seqs * (size_t)kv->p.n_layer * (size_t)kv->np;
    for (size_t i = 0; i < n && kv->cache_used > pages; i++) {
        kv_page *pg = &kv->pages[i];
        if (!pg->cached) continue;
        pg->cached = 0;
        kv->cache_used--;
        slot_free(kv, &pg->frame);
    }
}

/* The reads an exact decode step's prefetch issues, in its order: each layer, each open
 * sequence, its disk pages from the attention window's start on that the cache does not
 * serve; *max_pages: the most of one layer. */
static tl_status step_reads(const tl_kv *kv, uint64_t **offs, uint64_t **lens, size_t *n,
                            size_t *max_pages) {
    size_t cap = 0, k = 0;
    for (int32_t l = 0; l < kv->p.n_layer; l++)
        for (int32_t s = 0; s < kv->p.max_seqs; s++)
            if (kv->seqs[s].open) cap += (size_t)sl_at(kv, s, l)->stored;
    *offs = malloc((cap ? cap : 1) * sizeof **offs);
    *lens = malloc((cap ? cap : 1) * sizeof **lens);
    if (!*offs || !*lens) {
        free(*offs), free(*lens);
        return tl_error_set(TL_ERR_NOMEM, "kv timed reads: a list of %zu reads", cap);
    }
    *max_pages = 0;
    for (int32_t l = 0; l < kv->p.n_layer; l++) {
        const size_t first = k;
        const int x = recomputes(kv, l);
        for (int32_t s = 0; s < kv->p.max_seqs; s++) {
            if (!kv->seqs[s].open) continue;
            const int32_t lo = kv->p.attn_window > 0 ? kv->seqs[s].len + 1 - kv->p.attn_window : 0;
            for (int32_t i = 0; i < sl_at(kv, s, l)->stored; i++) {
                const kv_page *pg = page_at(kv, s, l, i);
                if ((i + 1) * kv->p.page_tokens <= lo || pg->state != PG_DISK ||
                    (pg->frame && form_serves(kv, l, pg->form)))
                    continue;
                (*offs)[k] = pg->slot * kv->frame_slot + (x ? kv->slot_bytes : 0);
                (*lens)[k++] = read_bytes(kv, l);
            }
        }
        if (k - first > *max_pages) *max_pages = k - first;
    }
    *n = k;
    return TL_OK;
}

tl_status tl_kv_time_disk_reads(tl_kv *kv, int depth, double seconds, double *bps) {
    if (!kv || !bps) return tl_error_set(TL_ERR_INVALID, "kv timed reads: no cache");
    tl_status st = sticky(kv);
    if (st != TL_OK) return st;
    if (!(seconds > 0))
        return tl_error_set(TL_ERR_INVALID, "kv timed reads: %g seconds", seconds);
    uint64_t *offs = NULL, *lens = NULL;
    size_t n = 0, max_pages = 0;
    if (kv->tier && (st = step_reads(kv, &offs, &lens, &n, &max_pages)) != TL_OK) return st;
    if (n == 0 || depth < 1 || (size_t)depth > kv->n_spare) {
        free(offs), free(lens);
        return tl_error_set(TL_ERR_INVALID, "kv timed reads: %zu disk pages to read, %zu "
                            "spare frames for depth %d", n, kv->n_spare, depth);
    }
    /* the frames a step stages at once: a layer's pages and the next layer's prefetch */
    size_t n_bufs = 2 * max_pages < kv->n_spare ? 2 * max_pages : kv->n_spare;
    if (n_bufs < (size_t)depth) n_bufs = (size_t)depth;
    st = tl_tier_time_read_list(kv->tier, offs, lens, n, kv->frame_slot, depth,
                                kv->spare + kv->n_spare - n_bufs, n_bufs, seconds, bps);
    free(offs), free(lens);
    return st == TL_OK ? TL_OK : tl_error_wrap(st, "kv timed reads of the spill file");
}

void tl_kv_get_stats(const tl_kv *kv, tl_kv_stats *out) {
    memset(out, 0, sizeof *out);
    if (!kv) return;
    *out = kv->stats;
    out->mem_pages_peak = kv->frames_peak;
    out->cache_pages = (uint64_t)kv->cache_used;
    out->spill_slots = kv->next_slot;
}

void tl_kv_set_spill_fault(tl_kv *kv, const tl_fault_spec *spec) {
    if (!kv || !kv->tier) return;
    (void)drain(kv);
    for (int32_t s = 0; s < kv->p.max_seqs; s++)
        for (int32_t l = 0; l < kv->p.n_layer; l++)
            for (int32_t i = 0; i < kv->np; i++)
                (void)finish_read(kv, page_at(kv, s, l, i), s, l, i);
    tl_tier *f;
    tl_status st = tl_tier_fault_open(kv->tier, spec, &f);
    if (st != TL_OK) {
        stick(kv, st);
        return;
    }
    kv->tier = f;
}
