/* cost.h - the IO-aware cost model: what a policy will cost on this machine.
 *
 * Given the model (its tensors, types and shape), the workload (prompt length,
 * generation length, number of sequences), a policy (the engine's knobs) and the
 * hardware profile, it predicts every term of every forward pass the engine will run,
 * per layer, for prefill and for decode: compute, weight reads, KV reads and KV writes,
 * and the pass time with overlap (max of compute and IO, as FlexGen's T = max(T_compute,
 * T_io)) and without it (their sum). It walks the same schedule the engine runs (batch.c
 * / context.c): blocks of gbs x num_gb sequences, prefill chunks, one decode step per
 * generated token, so a prediction can be compared with a measurement term by term.
 *
 * The weight placement is not approximated: the caller passes the weight plan that the
 * engine's own placement code computes for the policy (tl_engine_plan_weights), so the
 * bytes streamed per pass are exactly what the engine will read.
 */
#ifndef TL_PLAN_COST_H
#define TL_PLAN_COST_H

#include <stdint.h>
#include "plan/profile.h"
#include "exec/residency.h"
#include "kv/kv_cache.h"
#include "model/llama.h"

/* Prompt lengths of a batch whose prompts differ, by quantile (tl_workload). */
#define TL_WORKLOAD_QUANTILES 16

/* prompt_len: the mean prompt. prompt_q, when prompt_q[0] > 0: the prompts' lengths at
 * evenly spaced ranks, shortest to longest, each standing for an equal share of them (with
 * fewer prompts than TL_WORKLOAD_QUANTILES, the first num_seqs entries, one prompt each):
 * a block's prefill takes as many steps as its longest prompt needs, and a step's rows are
 * those of the prompts not yet fed; all 0: every prompt is prompt_len long. */
typedef struct tl_workload {
    int32_t prompt_len, gen_len, num_seqs;
    int32_t prompt_q[TL_WORKLOAD_QUANTILES];
} tl_workload;

/* Fills w->prompt_q from n prompt lengths (sorted in place); prompt_len becomes their
 * mean (at least 1). */
void tl_workload_set_prompts(tl_workload *w, int32_t *lens, int32_t n);
/* The longest prompt the workload prices: the largest of prompt_q (the middle of the
 * longest share of the prompts, not necessarily the longest one), else prompt_len. */
int32_t tl_workload_prompt_max(const tl_workload *w);

/* The engine's knobs. single = 1: one sequence through tl_context (tierllm run); gbs
 * and num_gb are then 1 and prefill_rows is the context's n_batch. */
typedef struct tl_policy {
    int32_t single;
    int32_t gbs, num_gb;
    int32_t prefill_rows;
    int32_t w_mem_pct, kv_mem_pct, kv_bits, page_tokens;
    int32_t prefetch, overlap;
    int32_t n_ctx;            /* context per sequence (>= prompt_len + gen_len) */
    /* KV tiers by temperature (kv/kv_cache.h) when kv_window_pages > 0 (then kv_mem_pct
     * is not used): sinks and window in memory, the rest on disk, read through a cache of
     * kv_cache_pages; kv_select > 0: decode rows attend to that share of their pages */
    int32_t kv_window_pages, kv_sink_pages, kv_cache_pages;
    float kv_select;
    /* kv_select > 0: disk pages a decode step reads per disk page its selection uses (the
     * hit-rate model's forecast, tl_kv_select_read_forecast: staged pages left unused and
     * demand reads, cached pages not read); 0: the cache's share of the pages used is
     * served and the prefetch stages exactly the rest (no history) */
    float kv_select_reads;
    /* tiers, 32-bit KV: the first kv_recompute layers read disk pages as input rows and
     * recompute K and V (kv_cache.h); input rows are then written beside K and V */
    int32_t kv_recompute;
    int32_t kv_inputs;        /* input rows kept (written) though no layer recomputes */
} tl_policy;

/* The policy's KV format and placement (page size, bits, window, sinks, cache) as a
 * KV cache that is already open holds them. */
void tl_policy_set_kv(tl_policy *pol, const tl_kv_params *kp);

/* One set of terms (seconds and bytes). */
typedef struct tl_cost_terms {
    double compute_s, weight_read_s, kv_read_s, kv_write_s;
    double kv_wait_s;         /* compute waiting for KV pages read too late (cost.c) */
    double overlapped_s;      /* max(compute + KV wait, smax(compute, weight + KV IO)) */
    double serial_s;          /* compute + KV wait + weight + KV IO */
    double weight_bytes, kv_read_bytes, kv_write_bytes;
    double repack_s;          /* of compute_s: repacking streamed weights into panels */
} tl_cost_terms;

typedef struct tl_cost {
    /* one layer of one average prefill pass / decode pass */
    tl_cost_terms prefill_layer, decode_layer;
    /* the whole workload */
    tl_cost_terms prefill, decode;
    double prefill_passes, decode_passes;
    double prefill_s, decode_s, total_s;  /* wall time: overlapped or serial per policy */
    double tokens_per_s;                  /* generated tokens / total_s */
    const char *bottleneck;               /* largest term of the decode (or prefill) */
    /* decode's KV disk pages over the workload: those attention uses, and those read
     * (the rest are cache hits: hit rate = 1 - read / needed) */
    double decode_kv_pages_needed, decode_kv_pages_read;
} tl_cost;

/* One forward pass as the cost model sees it: `count` identical passes (full blocks
 * repeat), its compute seconds, the bytes it reads and writes, and the bandwidths those
 * transfers get. Passes are emitted in schedule order within a block. */
typedef struct tl_cost_pass {
    int prefill;              /* 1: a prefill step; 0: a decode step */
    int32_t block;            /* 0: the full blocks; 1: the last, partial block */
    int32_t step;             /* index within its phase */
    double compute_s, weight_bytes, kv_read_bytes, kv_write_bytes;
    double weight_bps, kv_read_bps, kv_write_bps;
    double count;
    double io_slowdown;       /* compute slowdown while the disk streams (time-weighted) */
    double kv_wait_s;         /* compute stalled on KV pages read one micro-batch ahead */
    double kv_pages_needed;   /* disk pages the pass's attention uses (read or cached) */
    double kv_pages_read;     /* of those, read from disk */
    double repack_s;          /* of compute_s: repacking streamed weights into panels */
    /* flash layout: bytes of the streamed sites' runs the pass reads at their turn, the
     * seconds they take, and of those the seconds compute waits (like kv_wait_s: a
     * site's reads wait for its input; its product overlaps them but for the last part) */
    double flash_bytes, flash_s, flash_wait_s;
    /* the pass as the residency ring lets its reads and compute overlap
     * (tl_cost_ring_pass_s; 0: not modelled): a lower bound on its overlapped time */
    double ring_s;
} tl_cost_pass;
typedef void (*tl_cost_pass_fn)(void *user, const tl_cost_pass *p);

/* Walks the schedule, emitting every pass (the LP in search.c is built from these). */
tl_status tl_cost_walk(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                       const tl_policy *pol, const tl_weight_plan *plan, tl_cost_pass_fn fn,
                       void *user);

/* Flash layout: the share of layer l's site `site` channels that a product of `rows` rows
 * needs, as cost.c prices the site's reads and product (non-zero in some row). */
double tl_cost_flash_need_share(const tl_model *m, int32_t l, int site, double rows);

/* Predicts the workload under the policy with weight plan `plan`. TL_ERR_INVALID for
 * an inconsistent workload/policy (message names it). With a disk calibration's spread
 * (prof->n_disk_spread > 1) and weights streamed, the wall times (prefill_s, decode_s,
 * total_s, tokens_per_s) are the mean of the predictions with the stream's figures at
 * each sample's rate, the terms those at the median; tl_cost_walk (the search's LP) and
 * tl_cost_serve_step price at the median. */
tl_status tl_cost_predict(const tl_model *m, const tl_hw_profile *prof, const tl_workload *w,
                          const tl_policy *pol, const tl_weight_plan *plan, tl_cost *out);

/* Seconds of repacking unit u's streamed weights into panels on arrival (residency.c),
 * paid in every pass that reads the unit (0 for a resident unit). */
double tl_cost_unit_repack_s(const tl_model *m, const tl_hw_profile *prof,
                             const tl_weight_plan *plan, int32_t u);

/* Seconds to read n embedding rows from disk as the engine does (exec/residency.h): groups
 * of up to K rows (tl_weight_embd_read_rows) in flight together, one after another. A
 * group of j rows is priced between the calibrated one row's (embd_row_s) and K rows'
 * (embd_group_s) reads, linearly in j; uncalibrated, as 64 KiB reads at depth 1 and at
 * depth K (tl_profile_read_bps). */
double tl_cost_embd_read_s(const tl_hw_profile *prof, int32_t K, int32_t n);

/* Seconds of attention at one layer for `rows` rows of one sequence at positions pos0 ..
 * pos0 + rows - 1 (each sees every position up to its own, all in open f32 pages), in
 * the blocks the engine takes for a context of n_ctx positions, in a pass over `layers`
 * layers shaped as this one (their KV read between two steps of this one); as the pass's
 * compute prices it. *per_mac (may be NULL) gets the part priced per MAC, the rest is the
 * KV read beyond the caches. */
double tl_cost_attention_s(const tl_model *m, const tl_hw_profile *prof, int32_t rows,
                           int32_t pos0, int32_t n_ctx, int32_t layers, double *per_mac);

/* Seconds of one prefill micro-batch at layer l: `rows` rows of one sequence at positions
 * 0 .. rows - 1 (each sees its own and the earlier ones, nothing stored yet), attention
 * in the blocks the engine takes for a context of n_ctx positions; as the pass's compute
 * prices it (tl_cost_pass_compute's layer term). *attn (may be NULL) gets its attention's
 * part. */
double tl_cost_prefill_layer_s(const tl_model *m, const tl_hw_profile *prof, int32_t l,
                               int32_t kv_bits, int32_t rows, int32_t n_ctx, double *attn);

/* Building blocks (also used by the LP in search.c and checked in tests):
 * seconds of one forward pass's compute over micro-batches of `rows[k]` rows (k <
 * n_mb), the rows of micro-batch k attending to `ctx_sum[k]` visible positions in all
 * (`stored_sum[k]` of them in stored pages that must be decoded), attention taking a
 * sequence's rows in blocks of `attn_block` rows on average (1 in decode; llama.h),
 * `seq_blocks` such blocks per sequence in the pass (1 in decode; they read the sequence's
 * KV one after another, the caches serving all but the first when it fits them),
 * `logit_rows` rows needing logits; without any IO. *slowdown (may be NULL) gets the
 * factor this compute slows by while the disk streams (the profile's three, time-weighted). */
double tl_cost_pass_compute(const tl_model *m, const tl_hw_profile *prof, int32_t kv_bits,
                            const int32_t *rows, const double *ctx_sum,
                            const double *stored_sum, int32_t n_mb, double attn_block,
                            double seq_blocks, int32_t logit_rows, int embd_resident,
                            double *slowdown);
/* The residency ring in steady state: seconds of one decode pass whose unit u (layers
 * 0..U-1, the output U; U < TL_COST_RING_MAX_UNITS, else 0) computes c[u] seconds and, when
 * r[u] > 0, is streamed and read in r[u] seconds, through n_slots buffers (cost.c says
 * how reads are issued); 0 when nothing streams. start_wait > 0: the pass begins with an
 * urgent read (a token embedding's row on disk) that waits for the reads in flight, at
 * most start_wait seconds of them (the IO queue's chunk x depth at the disk's rate). */
#define TL_COST_RING_MAX_UNITS 1025
double tl_cost_ring_pass_s(const double *c, const double *r, int32_t U, int n_slots,
                           double start_wait);
/* The same ring from empty: seconds of n_passes passes in all (the first one's reads
 * hidden by nothing), as tl_residency_measure_passes times them; 0 as above. */
double tl_cost_ring_run_s(const double *c, const double *r, int32_t U, int n_slots,
                          int n_passes, double start_wait);
/* The delay d >= 0 per streamed unit (r[u] > 0) such that the ring from empty with every
 * streamed unit's read taking r[u] + d gives `measured_s` (tl_cost_ring_run_s, no start
 * wait): what a calibration's held passes show beyond the ring's own overlap. 0 when the
 * ring at d = 0 already takes measured_s or longer, or when nothing streams; -1 when the
 * sample cannot tell: at that d the ring's time grows by less than half of every streamed
 * read's delay (compute hides most reads, so noise would fit as any d). */
double tl_cost_ring_fit_delay(const double *c, const double *r, int32_t U, int n_slots,
                              int n_passes, double measured_s);
/* Seconds of one matrix product of `n` rows with weight w. */
double tl_cost_matmul(const tl_hw_profile *prof, const tl_weight *w, double n);

/* One step of the serving scheduler (exec/sched.h): gen_rows sequences feed one row each
 * at a mean of gen_ctx visible positions, and prompt_rows rows of prompts start at a mean
 * position prompt_at, all in one micro-batch; the plan's streamed weights are read once;
 * the KV cache is in memory or in tiers (kv_bits, page_tokens; n_ctx sizes attention's
 * blocks). */
typedef struct tl_serve_step {
    int32_t gen_rows, prompt_rows;
    double gen_ctx, prompt_at;
    int32_t kv_bits, page_tokens, n_ctx;
    /* KV in tiers (window_pages > 0): each sequence's first sink_pages and last
     * window_pages full pages in memory, the older ones on disk, read back at every step
     * (generating rows: theirs at gen_ctx; the prompt rows: one sequence's at prompt_at),
     * and each full page leaving the window written once */
    int32_t window_pages, sink_pages;
} tl_serve_step;
/* The step's wall seconds (overlapped, or serial, as the plan's overlap says); its terms
 * in *out when out is not NULL. */
double tl_cost_serve_step(const tl_model *m, const tl_hw_profile *prof,
                          const tl_weight_plan *plan, const tl_serve_step *s,
                          tl_cost_terms *out);

/* Bytes of one stored KV page (K and V) for this model and policy. */
double tl_cost_kv_page_bytes(const tl_model *m, int32_t kv_bits, int32_t page_tokens);

/* Pages homed on disk among the first full_pages full pages of one (sequence, layer)
 * under the policy's KV placement (kv_cache.c's rules). */
double tl_cost_kv_disk_pages(const tl_policy *pol, double full_pages);

#endif
