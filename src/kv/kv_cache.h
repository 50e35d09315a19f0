/* kv_cache.h - the paged KV cache: fixed-size pages of K and V per layer, a page table
 * per sequence, pages homed in memory or on the SSD.
 *
 * A page holds `page_tokens` consecutive positions of one sequence at one layer: K rows
 * then V rows, each row kv_dim values, stored as f32 (bits 32), f16 (16), or group-wise
 * quantized (8 or 4: groups of `group` values along the head dimension, each with an f32
 * min and scale, FlexGen's scheme) when the page is stored. Sequences of different
 * lengths share one pool of page frames; nothing is padded.
 *
 * Homes: the last (partial) page of a sequence is always in memory (appends go there).
 * Full pages are homed by one of two rules:
 *  - spread (TL_KV_SPREAD): when a page fills up, kv_mem_pct percent of each sequence's
 *    full pages stay in memory, the others, spread evenly among its pages, go to disk;
 *  - temperature (TL_KV_TEMPERATURE): the first sink_pages of each (sequence, layer)
 *    (attention sinks) and its window_pages most recent full pages stay in memory; a
 *    page that leaves the window goes to disk.
 * A disk page is written once, asynchronously, to a slot of the spill file (O_DIRECT,
 * created in spill_dir, deleted at close), and never rewritten while the page lives; a
 * closed sequence's slots are reused by later pages. When its write completes
 * its frame stays in memory as a cached copy if the DRAM cache (cache_pages frames, all
 * sequences and layers together) has room, and is released otherwise; a disk page read
 * for attention is kept the same way. A cached page is never evicted, so the cache holds
 * the first disk pages that reach it: under exact attention every disk page is read at
 * every step, and a cache that evicted by recency would miss on every read of that
 * cyclic scan, while a fixed set of C cached pages saves C reads per step.
 * Reading: before attention at layer l, tl_kv_prefetch() queues reads of the disk pages
 * of the given sequences at that layer into staging frames; tl_kv_wait() waits for them;
 * tl_kv_view() then gives f32 K/V rows for any page (dequantized into the caller's
 * scratch when stored quantized); tl_kv_release() frees the staging frames.
 * All frames come from the budget; IO goes through the shared tl_aio queue.
 * Errors (ENOSPC, EIO on the spill file) are sticky: every later call returns them.
 */
#ifndef TL_KV_KV_CACHE_H
#define TL_KV_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"
#include "base/budget.h"
#include "tier/aio.h"

typedef struct tl_kv_params {
    int32_t n_layer;
    int32_t kv_dim;       /* values per token per layer in K (and in V) */
    int32_t head_dim;     /* quantization groups never straddle heads */
    int32_t page_tokens;  /* positions per page (default 16) */
    int32_t bits;         /* 32, 16, 8 or 4 */
    int32_t kv_mem_pct;   /* 0..100: share of full pages homed in memory */
    int32_t max_seqs;     /* sequences alive at once */
    int32_t max_tokens;   /* per sequence (context length) */
    const char *spill_dir;/* where the spill file is created (needed if kv_mem_pct < 100) */
    int32_t max_block;    /* most positions appended to a sequence between two commits
                             (prefill block); 0 = page_tokens. Only tl_kv_budget_bytes uses
                             it: open f32 pages per (seq, layer) <= 1 + ceil(max_block /
                             page_tokens). */
    int32_t placement;    /* TL_KV_SPREAD (kv_mem_pct) or TL_KV_TEMPERATURE */
    int32_t sink_pages;   /* temperature: first pages of each (seq, layer) kept in memory */
    int32_t window_pages; /* temperature: most recent full pages kept in memory */
    int32_t cache_pages;  /* disk pages kept in memory after their write or read */
    int32_t key_bounds;   /* 1: keep each full page's per-channel key min and max in memory
                             (2 kv_dim floats), for page selection */
    /* Recompute instead of load: input_dim > 0 keeps each page's input rows (input_dim
     * f32 values per position: the attention block's normalized input) beside its K and
     * V (a disk slot holds both; needs bits 32 and input_dim <= 2 kv_dim), and a layer
     * whose bit l of recompute[l / 64] is set (layers < 256) reads a disk page's input
     * rows instead of its K and V; attention recomputes K and V from them (model/). */
    int32_t input_dim;
    uint64_t recompute[4];
    /* > 0: attention sees only each row's last attn_window positions (a sliding window):
     * prefetch skips the disk pages wholly before the next row's window (the attention
     * that follows never asks for them). 0: every page may be needed. */
    int32_t attn_window;
} tl_kv_params;

/* Whether pages can keep input rows to recompute K and V from: 32-bit KV, and rows no
 * wider than K and V together (a slot holds both forms). */
static inline int tl_kv_recompute_fits(int32_t bits, int32_t input_dim, int32_t kv_dim) {
    return bits == 32 && input_dim <= 2 * kv_dim;
}

/* Input rows of input_dim kept (0: none), and the first `layers` layers recompute from
 * them (clamped to [0, min(n_layer, 256)]); the others load K and V. */
static inline void tl_kv_set_recompute(tl_kv_params *p, int32_t input_dim, int32_t layers) {
    for (int i = 0; i < 4; i++) p->recompute[i] = 0;
    p->input_dim = input_dim;
    for (int32_t l = 0; l < layers && l < p->n_layer && l < 256; l++)
        p->recompute[l / 64] |= (uint64_t)1 << (l % 64);
}

/* 1 when layer l's disk pages hold input rows (see tl_kv_params.recompute). */
static inline int tl_kv_params_recomputes(const tl_kv_params *p, int32_t l) {
    return l >= 0 && l < 256 && (p->recompute[l / 64] >> (l % 64) & 1);
}

enum { TL_KV_SPREAD = 0, TL_KV_TEMPERATURE = 1 };

typedef struct tl_kv tl_kv;

typedef struct tl_kv_stats {
    uint64_t bytes_written;  /* to the spill file */
    uint64_t bytes_read;     /* from the spill file */
    uint64_t pages_written, pages_read;
    uint64_t cache_hits;     /* disk pages a prefetch found in memory (cached, or their
                                write still in flight): pages_read are the misses */
    uint64_t cache_pages;    /* disk pages cached now */
    uint64_t demand_reads;   /* disk pages read by tl_kv_require (not prefetched in time) */
    /* page selection: disk pages the selections used (1 - demand_reads / select_disk_pages
     * is the measured hit rate), and the heat of the disk pages each selective prefetch
     * judged, all of them and those in memory or staged after it (heat_ready / heat_needed
     * is the predicted hit rate of the next selection) */
    uint64_t select_disk_pages;
    double heat_needed, heat_ready;
    uint64_t mem_pages_peak; /* frames in memory at once */
    uint64_t spill_slots;    /* page slots the spill file holds: the most disk pages alive
                                at once (slots of closed sequences are reused) */
    double wait_s;           /* time tl_kv_wait blocked on page reads still in flight */
    double write_wait_s;     /* time a commit blocked with the write ring full, waiting
                                for the oldest write in flight (tl_kv_seq_commit) */
} tl_kv_stats;

/* Bytes of one stored page (K and V) in this format. */
size_t tl_kv_page_bytes(const tl_kv_params *p);
/* Bytes one disk page occupies in the spill file and in a slot frame (a staging or cache
 * frame): K and V, plus the input rows when they are kept, each rounded up to 4 KiB. */
size_t tl_kv_slot_bytes(const tl_kv_params *p);
/* Full pages of one (sequence, layer) homed on disk when the sequence holds `len`
 * positions. */
int64_t tl_kv_disk_pages(const tl_kv_params *p, int64_t len);
/* Predicted disk pages read by one exact step (every layer) of n_seqs sequences holding
 * `len` positions each, once the cache is full or holds every disk page: the disk pages
 * beyond the fixed set the cache keeps. The hit rate is 1 - reads / disk pages. */
int64_t tl_kv_predict_step_reads(const tl_kv_params *p, int32_t n_seqs, int64_t len);
/* Budget bytes the cache needs at most for these parameters, when each of `active`
 * sequences is read at one layer at a time (resident pages + staging + write buffers). */
uint64_t tl_kv_budget_bytes(const tl_kv_params *p, int32_t active);

tl_status tl_kv_open(const tl_kv_params *p, tl_budget *budget, tl_aio *aio, tl_kv **out);
/* Waits for pending writes, frees every frame, closes and deletes the spill file. */
void tl_kv_close(tl_kv *kv);

/* Sequences: ids are 0..max_seqs-1. */
tl_status tl_kv_seq_open(tl_kv *kv, int32_t *seq);
void tl_kv_seq_close(tl_kv *kv, int32_t seq); /* frees its frames (disk slots are not reused) */
int32_t tl_kv_seq_len(const tl_kv *kv, int32_t seq);

/* Writes K and V rows (f32, n rows of kv_dim) of layer `layer` for positions
 * [len, len+n) of the sequence. Call for every layer, then tl_kv_seq_commit(n). */
tl_status tl_kv_append(tl_kv *kv, int32_t seq, int32_t layer, const float *k, const float *v,
                       int32_t n);
/* The n appended positions are complete in every layer: the length grows by n, and
 * pages that became full are stored (quantized, and written out if homed on disk). */
tl_status tl_kv_seq_commit(tl_kv *kv, int32_t seq, int32_t n);

/* Reading pages for attention at one layer. */
tl_status tl_kv_prefetch(tl_kv *kv, const int32_t *seqs, int32_t n_seqs, int32_t layer);
tl_status tl_kv_wait(tl_kv *kv, const int32_t *seqs, int32_t n_seqs, int32_t layer);
void tl_kv_release(tl_kv *kv, const int32_t *seqs, int32_t n_seqs, int32_t layer);

/* Number of positions of `seq` visible at `layer` (committed + appended, not committed). */
int32_t tl_kv_visible(const tl_kv *kv, int32_t seq, int32_t layer);
/* f32 views of page `page` (positions page*page_tokens ..) of seq at layer: *k and *v
 * point to `*n` rows of kv_dim floats. For f32 pages they point into the page; otherwise
 * the page is decoded into `scratch` (2 * page_tokens * kv_dim floats). The page must be
 * in memory (its home, or staged by prefetch+wait). */
tl_status tl_kv_view(tl_kv *kv, int32_t seq, int32_t layer, int32_t page, float *scratch,
                     const float **k, const float **v, int32_t *n);

/* One kv head's K (values 0) or V (values 1) rows of a page: head_dim columns from
 * head * head_dim. f32 pages give a pointer into the page, rows *ld = kv_dim floats
 * apart; stored formats decode only those columns into `scratch` (page_tokens * head_dim
 * floats), rows *ld = head_dim apart. Attention reads one kv head per job, K for the
 * scores and then V for the sum, so decoding whole pages there would do the work
 * 2 * n_kv_heads times. */
tl_status tl_kv_view_head(tl_kv *kv, int32_t seq, int32_t layer, int32_t page, int32_t head,
                          int values, float *scratch, const float **x, size_t *ld,
                          int32_t *n);
/* A hint, nothing else: asks the CPU to bring the bytes tl_kv_view_head would read for
 * the K (values 0) or V (values 1) rows of that head into the cache. Does nothing for a
 * page that is not viewable or arguments out of range; sets no error and changes no
 * state, so worker threads may call it beside views while no thread changes the cache. */
void tl_kv_touch_head(const tl_kv *kv, int32_t seq, int32_t layer, int32_t page,
                      int32_t head, int values);

void tl_kv_get_stats(const tl_kv *kv, tl_kv_stats *out);

/* The spill file's read rate now (bytes/s), as an exact decode step's prefetch reads it:
 * its reads (each layer's disk pages from the attention window on that the cache does not
 * hold, in order), `depth` in flight, into as many frames as a step stages at once, for
 * about `seconds`, through a private queue of the default backend (the cache's own IO
 * queue is not used, so nothing of it waits). A virtual disk's rate depends on the order
 * and on the frames' footprint, so random reads into a few buffers would overstate it. The buffers are the cache's spare slot frames, already in the budget:
 * TL_ERR_INVALID when there is nothing to read, or fewer than depth frames are spare
 * (call between steps, after a step that read disk pages). Reads only; the cache's state
 * is unchanged. For a prediction that must use the disk the engine reads, at the same
 * time (bench_longctx). */
tl_status tl_kv_time_disk_reads(tl_kv *kv, int depth, double seconds, double *bps);

/* ---- recompute instead of load ----
 * With input rows kept, call tl_kv_append_inputs right after each tl_kv_append with the
 * same n rows. At a layer that recomputes, prefetch reads disk pages' input rows only;
 * before attention the caller recomputes K and V of each such page it will view
 * (tl_kv_page_inputs gives the rows and where K and V go, in the page's own frame; RoPE
 * at the page's positions), then marks it (tl_kv_recomputed), and tl_kv_view works as
 * for any page. tl_kv_view refuses a page still held as input rows only. */
tl_status tl_kv_append_inputs(tl_kv *kv, int32_t seq, int32_t layer, const float *x,
                              int32_t n);
/* 1 when full page `page` is viewable at a layer that recomputes and held as input rows
 * only: *x = its rows (*n of input_dim floats), *out = where its K rows then V rows go
 * (2 page_tokens kv_dim floats). Reads only, so threads may call it for different pages. */
int tl_kv_page_inputs(tl_kv *kv, int32_t seq, int32_t layer, int32_t page, const float **x,
                      float **out, int32_t *n);
/* The page's K and V were written to *out: it is viewed as K and V from now on. */
void tl_kv_recomputed(tl_kv *kv, int32_t seq, int32_t layer, int32_t page);
/* 1 when input rows are kept (tl_kv_params.input_dim > 0). */
int tl_kv_keeps_inputs(const tl_kv *kv);
/* Between steps: the first `layers` layers recompute from now on (input rows kept). */
tl_status tl_kv_set_recompute_layers(tl_kv *kv, int32_t layers);
/* Bytes a read of one disk page takes: its input rows (recompute) or its K and V. */
size_t tl_kv_read_bytes(const tl_kv_params *p, int recompute);
/* 1 when the cache's layer recomputes. */
int tl_kv_recomputes(const tl_kv *kv, int32_t layer);

/* ---- page selection ----
 * With key_bounds, attention may read only some pages (model/kv_select.h picks them).
 * The hit-rate model: each full page of a (seq, layer) has a heat, the estimate of the
 * probability that the next selection there uses it: 1 for a new page, then after each
 * selection heat = KEEP * heat + (1 - KEEP) * used (an average over recent selections
 * weighted toward the last: recency, and how often the page's attention bound ranked it
 * among the pages attention needs). The next prefetch at that layer stages the disk
 * pages whose heat is at least FETCH; the others are read on demand if selected. The
 * predicted hit rate of the next selection is the heat in memory or staged over all the
 * heat (tl_kv_stats). With KEEP 1/2 and FETCH 1/2, a page used by the last selection is
 * staged, and so is one skipped once after being used by every selection since it was
 * written. */
#define TL_KV_HEAT_KEEP 0.5f
#define TL_KV_HEAT_FETCH 0.5f

/* Full pages of seq at layer (those with key bounds). */
int32_t tl_kv_stored_pages(const tl_kv *kv, int32_t seq, int32_t layer);
/* Per-channel key minimum then maximum (2 kv_dim floats) of a full page, or NULL. */
const float *tl_kv_key_bounds(const tl_kv *kv, int32_t seq, int32_t layer, int32_t page);
/* 1 when the page can be viewed without a read: homed in memory, cached, or staged. */
int tl_kv_page_ready(const tl_kv *kv, int32_t seq, int32_t layer, int32_t page);
/* Makes the listed pages viewable, reading (and waiting for) those that are not: each
 * such read counts in demand_reads. Release frees them as it frees prefetched ones. */
tl_status tl_kv_require(tl_kv *kv, int32_t seq, int32_t layer, const int32_t *pages,
                        int32_t n);
/* Records which full pages attention used (sel[p] != 0, p < n): their heat is updated. */
void tl_kv_note_selection(tl_kv *kv, int32_t seq, int32_t layer, const uint8_t *sel,
                          int32_t n);
/* The hit-rate model's forecast of the next selective step's disk reads, per disk page its
 * selections use: (the pages the prefetch will stage (heat >= FETCH) + the expected demand
 * reads (the heat of the pages it will not stage)) / the disk pages the last selections
 * used, over every selective (seq, layer), cached and in-flight pages not counted. Above
 * 1 when staged pages go unused. TL_ERR_INVALID before a selection used a disk page. */
tl_status tl_kv_select_read_forecast(const tl_kv *kv, double *ratio);
/* Every prefetch stages every disk page again (attention turned exact). */
void tl_kv_forget_selection(tl_kv *kv);
/* A new cache size, at most the one the cache opened with (its budget): pages cached
 * beyond it are released. Call between steps. */
void tl_kv_set_cache_pages(tl_kv *kv, int32_t pages);

/* Group-wise quantization of one row of `n` values in groups of `group` (FlexGen): each
 * group stores min and scale = (max - min) / (2^bits - 1) as f32, then values
 * q = round((x - min) / scale) packed (4 bits: two per byte, low nibble first). */
size_t tl_kv_quant_row_bytes(int32_t n, int32_t group, int32_t bits);
void tl_kv_quant_row(const float *x, int32_t n, int32_t group, int32_t bits, uint8_t *out);
void tl_kv_dequant_row(const uint8_t *in, int32_t n, int32_t group, int32_t bits, float *x);

/* ---- testing only ---- */
/* Waits for the spill IO in flight, then wraps the spill tier in the fault shim
 * (tl_tier_fault_open): call counting starts at this point. No-op without a spill file;
 * a failure to wrap becomes the sticky error. */
void tl_kv_set_spill_fault(tl_kv *kv, const tl_fault_spec *spec);

#endif
