/* calibrate.h - checking the profile's figures against the model itself: its file's
 * streaming, its resident matrices' matrix-vector rate, its first layer's products of many
 * rows, and what KV pages read beside the stream cost it.
 *
 * The profile measures a temporary file on the disk; the model file may sit on another
 * device or behind another cache (a virtual disk backed by the host's page cache reads
 * data it has just served at several times the speed of a fresh file, and no short probe
 * of ours reproduced the engine's own rate). So once the weights are placed, a few
 * passes of the engine's own streaming are timed with nothing else running (the
 * streamed units, up to 192 MiB of them, read once through the residency ring and IO
 * queue, tl_residency_measure_io; each pass continues where the one before stopped, not
 * at the first units again, which a host cache would serve warm; the median pass counts;
 * before them the streamed units, up to 1 GiB a pass, are read once untimed, so that the
 * samples read what was read one pass before, as the engine's second and later passes do;
 * a model that streams up to 192 MiB per pass, with overlap, is timed instead as decode
 * reads it: samples of whole passes through the ring, at least 128 MiB each (3, and up
 * to 9 while they have taken under a second),
 * tl_residency_measure_passes; a pass below one queue's worth (chunk x depth) too, many to a
 * sample, its rate then mostly its few reads' latency, which the large-read figures then
 * give every plan of this model, also one that would stream more at full depth and is so
 * priced slower than it reads), and the profile's read figures
 * for requests of the engine's chunk size and larger are scaled by measured / profiled
 * bandwidth (smaller requests, KV pages, keep theirs; see below). It costs a few hundred
 * MiB of IO (at least 512 MiB of sampled stream, or 3-9 samples of passes) and nothing
 * stays in memory (a policy with KV pages on disk adds tl_plan_calibrate_kv's reads). The
 * caller decides what a large ratio means (re-plan before the first block).
 */
#ifndef TL_PLAN_CALIBRATE_H
#define TL_PLAN_CALIBRATE_H

#include "plan/profile.h"
#include "plan/search.h"
#include "exec/model_handle.h"

/* Needs placed weights (m->res). *measured_bps and *ratio (measured / profiled at the
 * model's chunk and depth) are filled and the profile's large-read figures are scaled;
 * with nothing streamed ratio stays 1 - unless a flash-layout file's
 * sites are read at their turn: then the streamed sites' runs are read as a decode step
 * reads them (each channel at the share the cost model prices, through the engine's own
 * fetch) for about half a second, and the whole grid is scaled so that its figure at
 * their mean request is the rate measured. A token embedding left on disk has its row
 * reads timed too: 32 single rows and 32 full groups read together (prof->embd_row_s,
 * prof->embd_group_s, medians; 0 when it is in memory). The stream's samples' rates over
 * their median, each within [1/2, 2], go to prof->disk_spread (none for a flash file's
 * sites): tl_cost_predict's wall times are their mean over those rates. The stream's
 * rate over the one the profile's slowdowns were measured beside (prof->io_stream_bps;
 * a profile without it: the profile's figure at the model's chunk and depth) goes to
 * prof->io_rate_scale (0 for a flash file's sites): the cost model scales the compute's
 * slowdown beside the stream by it (io_compute_slowdown's excess). */
tl_status tl_plan_calibrate_disk(tl_model *m, tl_hw_profile *prof, double *measured_bps,
                                 double *ratio);

/* A decode pass as the ring calibration holds its units for: kv_bits KV, ctx positions
 * seen by each row (tl_plan_decode_ctx), n_mb micro-batches of `rows` sequences each. */
typedef struct tl_plan_decode_shape {
    int32_t kv_bits, rows, n_mb;
    double ctx;
} tl_plan_decode_shape;

/* The positions a decode step of a workload sees on average (its decode_ctx): the prompt
 * and half the generated tokens. */
static inline double tl_plan_decode_ctx(int32_t prompt_len, int32_t gen_len) {
    return prompt_len + 0.5 * gen_len;
}

/* The decode pass of a policy on a workload as block_walk (cost.c) prices it: one row for
 * a single sequence; else the block's sequences (the workload's, up to gbs x num_gb) in
 * micro-batches of gbs, `rows` their mean rounded up. */
tl_plan_decode_shape tl_plan_decode_shape_of(const tl_policy *pol, const tl_workload *w);

/* Seconds the ring calibration holds unit u for (below): the unit's compute in a decode
 * pass of shape d as the ring model takes it (cost.c, ring_time): the output unit
 * (u == n_layer) its product over every row, each layer an even share of the rest of the
 * pass (products, attention, element-wise work, fixed costs, the logits'); plus the unit's
 * repacking on arrival, which the ring model adds and a measuring pass skips. */
double tl_plan_ring_hold_s(const tl_model *m, const tl_hw_profile *prof,
                           const tl_weight_plan *wp, int32_t u, const tl_plan_decode_shape *d);

/* The ring's reads while the cores compute (calibrate_ring.c; after
 * tl_plan_calibrate_disk, _compute and _products, whose figures it uses): for a model
 * whose streamed units, up to 512 MiB a pass, go through the ring with overlap, up to
 * eleven held ring samples of at least 32 MiB (whole passes; at least three, no further
 * one past a second), each between two alone ones, with each streamed unit held
 * while the pool multiplies one row of a resident matrix (none resident that a hold can
 * end near its target with, or no room for its vectors: while the pool's threads spin on
 * registers, in eight runs a hold) for tl_plan_ring_hold_s of the plan's decode pass d,
 * so the cores are as busy while the reads run as that pass keeps them: a decode step of
 * many rows keeps them busier than one of one row, and the IO thread that retires the
 * reads waits for a core the longer. *delay_s and prof->ring_unit_delay_s get the
 * median over the held samples of the delay per streamed read that makes the ring model
 * take the held sample's time at the rate of the alone samples on either side
 * (tl_cost_ring_fit_delay; one sample's figure swings with the disk's noise, hence several;
 * one whose holds hid the reads is dropped); the cost model adds it to every streamed
 * unit's read. tl_plan_calibrate_disk sets it to 0 first. 0 when not measured (another
 * kind of plan, or over 512 MiB a pass). An IO error is the residency's. */
tl_status tl_plan_calibrate_ring(tl_model *m, tl_hw_profile *prof,
                                 const tl_plan_decode_shape *d, double *delay_s);

/* KV pages on disk, for a planned policy that spills KV and whose decode reads pages
 * (calibrate_kv.c): a scratch file laid out as the run's spill file will be for workload
 * w (its sequences, layers and disk pages, stored a prefill chunk's pages at a time; at
 * most 512 MiB of it) is written in spill_dir (NULL or "": $TMPDIR, else /tmp) and its
 * pages are read alone, in a decode step's order, at the KV reads' depth: the median of
 * three samples of about 0.12 s. A virtual disk serves such a file from the host's cache
 * at a rate the profile's random reads of its own file do not give (which file, how
 * large, how recently written, in what order). The profile's figures for reads below the
 * engine's chunk are scaled to that rate (a page no smaller than the chunk reads as the
 * stream: not timed). *page_scale: the factor applied to the page's read rate (0 when
 * nothing was measured). A directory that refuses the file or lacks room for it beside
 * 256 MiB free, or a budget with no room for the frames: not timed.
 * Where the weights stream (at most 256 MiB a pass), the step's pages are also read
 * between the units of whole passes through the ring (tl_residency_measure_passes), each
 * such pass against the passes alone on either side, three rounds: the pages' bytes over
 * the seconds they added to the pass is their rate beside the stream, and the lower of
 * the two rates is the one kept. A host whose cache serves the model file and a small
 * spill file each fast alone may hold neither once a step reads both, and the pages (and
 * the stream) then read at a fraction of their rates alone; the cost model adds the two
 * reads' seconds, so the pages carry what the mix costs. The rate beside the stream is
 * never kept above the rate alone: the KV wait (cost.c) prices the pages' queueing behind
 * the weight chunks, which a pass that reads them at once does not separate from their
 * reading. *alone_scale (NULL: not wanted): the factor the reads alone gave. */
tl_status tl_plan_calibrate_kv(tl_model *m, tl_hw_profile *prof, const tl_plan_result *plan,
                               const tl_workload *w, const char *spill_dir,
                               double *page_scale, double *alone_scale);

/* The same for compute, whose memory-bound rates drift with the machine's memory
 * bandwidth (on a shared host, within minutes): matrix-vector products over the
 * resident matrices (128-384 MiB of them; a flash-layout site tensor by column products
 * over the channels a decode step needs, drawn at the share the cost model prices, and
 * priced as it prices them) are timed, median of 7 passes, against the profile's
 * prediction for them, and *ratio = measured / predicted scales the profile's rates for
 * 1-row products; the same products of 4 rows are timed too, and their ratio scales the
 * 4-row rates (2 rows: the two ratios' geometric mean; a flash layout's column products
 * are timed at 1 row only, whose ratio then serves all three). Larger products re-read
 * their weights from cache and keep their figures. With less resident, a model with
 * neither flash nor neuron layout is timed in pass order instead: the units' 1-row and
 * 4-row products, a streamed unit first borrowed into the ring (tl_residency_borrow) once
 * for both, each product's fastest of 3 passes - every unit when at most 64 MiB stream
 * per pass (a small model's weights are multiplied from
 * the caches, which the profile's figures do not know), else the first units up to 64 MiB
 * (a unit just read is multiplied as the run multiplies it; the profile's figures come from
 * one moment of a machine whose memory-bound rates wander). Call with no unit acquired;
 * an IO error reading a unit is the residency's, as in tl_plan_calibrate_disk. Its
 * buffers come from the budget (none free: skipped). */
tl_status tl_plan_calibrate_compute(tl_model *m, tl_hw_profile *prof, double *ratio);

/* A layer's forward over many rows against the cost model's price of it (its products,
 * whose rate depends on the matrices' shapes, which the profile times at one size, and its
 * norms, RoPE, KV append and hand-overs, which the profile times on their own;
 * calibrate_products.c): the first layer's forward is timed over n rows of a fresh
 * sequence at each of the profile's row counts n from 16 to 512 (TL_PLAN_PRODUCTS_POINTS
 * of them; the median of 5 samples each, 3 for a layer whose forward is long; two rounds
 * of all, a third when those two differ by more than 5%, and the median ratio of each row
 * count kept: a run meets the machine's slow spells as the rounds do), and
 * prof->layer_row_scale at each grid count over 4 rows gets (measured - the priced
 * attention) / the priced rest at the highest count timed at or below it (8 rows
 * the one at 16), the rest taking at least half the time measured; the cost model prices
 * a layer's work beside attention times it. *ratio: that ratio at whichever count is
 * furthest from 1 (1: nothing measured). The layer's weights are the resident ones or its
 * unit read on its own (tl_residency_borrow: one unit of IO, nothing read ahead, the run's
 * counters untouched); the forwards then go round the resident layers shaped as it (up to
 * 64 MiB of them), as a pass takes its layers, and where those are fewer (a streamed layer
 * is alone) each forward comes after a sweep over the other memory the weights hold
 * (tl_residency_sweep), so that 64 MiB pass through the caches between two uses of one
 * layer's weights: a layer is not timed from a cache the run does not give it. Their
 * scratch, rows and KV cache (one sequence, f32, in memory) come from the budget, for the
 * most rows it has room for; counts whose forwards would take over 0.4 s a round (twice
 * the count before) are not timed either (the counts above the timed ones take the
 * highest's ratio; no room for 16: nothing measured). It costs a few dozen forwards of
 * one layer. Where the plan streams weights through the ring, the forward at the most rows
 * whose forward takes up to 60 ms (16 at least) is then timed beside the model file's
 * stream too (tl__calibrate_stream_slowdown): prof->io_slowdown_stream, the compute's
 * slowdown the cost model takes for this model in place of the profile's
 * (io_stream_cal_bps the rate; both 0 when not measured). A flash or neuron layout keeps
 * the profile's figures. It calls
 * tl_plan_calibrate_attention first (for every layout), so the attention it subtracts is
 * priced as measured. Call with no unit acquired. */
tl_status tl_plan_calibrate_products(tl_model *m, tl_hw_profile *prof, double *ratio);

/* The model's own attention against its price (calibrate_attention.c): the engine's
 * attention stage (tl_llama_attend) alone, for a prompt chunk of TL_PLAN_ATTN_ROWS rows at
 * the end of a context of TL_PLAN_ATTN_POS positions (fewer where the model's window or
 * the budget's room ends, not under TL_PLAN_ATTN_MIN_POS: then nothing is measured) over a
 * KV cache of one layer shaped as the model's (f32, in memory, made-up keys and values;
 * copies of it taken in turn, as a pass reads its layers', up to 32 MiB of them, fewer
 * where the budget has no room before fewer positions); the median of 9 samples.
 * prof->attn_block_scale gets (measured - the priced reads beyond the caches) / the
 * priced per-MAC part (tl_cost_attention_s), within [1/4, 4], and *ratio that factor (1:
 * nothing measured). The profile times attention on two small models of head size 64
 * only; how fast a model's attention runs per MAC changes with its head size, kv heads
 * and grouping, and with the machine's spell. tl_plan_calibrate_products calls it first,
 * so that a layer's price beside attention is fitted with attention priced as measured.
 * Its state comes from the budget (no room: nothing measured). */
#define TL_PLAN_ATTN_ROWS 64
#define TL_PLAN_ATTN_POS 2048
#define TL_PLAN_ATTN_MIN_POS 256
tl_status tl_plan_calibrate_attention(tl_model *m, tl_hw_profile *prof, double *ratio);

/* Its rounds: round_r[q] holds round q's ratios at the TL_PLAN_PRODUCTS_POINTS row
 * counts (0: not measured). Sets r[] to the median measured ratio of each row count over
 * rounds 0..q (0 where none was measured) and returns 1 when no further round is wanted:
 * after the second when the two agree within TL_PLAN_PRODUCTS_AGREE (relative) at every count, else
 * after the TL_PLAN_PRODUCTS_ROUNDS-th. */
#define TL_PLAN_PRODUCTS_POINTS 6
#define TL_PLAN_PRODUCTS_ROUNDS 3
#define TL_PLAN_PRODUCTS_AGREE 0.05
int tl_plan_products_round(const double (*round_r)[TL_PLAN_PRODUCTS_POINTS], int q,
                           double *r);

/* KV pages' rate beside the stream from tl_plan_calibrate_kv's rounds: round i read
 * bytes[i] of pages in a pass of mixed_s[i] seconds between passes alone of alone_s[i] and
 * alone_s[i + 1] (rounds + 1 of them); each round's rate is its bytes over the seconds the
 * pages added to the mean of its neighbours (HUGE_VAL where they added none), and the
 * median round's is returned (0 for no rounds; rounds past TL_PLAN_KV_ROUNDS_MAX are not
 * read). */
#define TL_PLAN_KV_ROUNDS_MAX 16
double tl_plan_kv_rate_beside(const double *alone_s, const double *mixed_s,
                              const double *bytes, int rounds);

/* Internal to the calibrations (calibrate*.c): X [n][cols], Y [n][rows] and every pool
 * thread's scratch for products of n rows, zeroed, from the budget; *sf: each thread's
 * scratch floats. 0 when the budget has no room (then nothing is measured, which is not an
 * error), 1 when allocated (tl__calibrate_free frees). */
int tl__calibrate_buffers(tl_model *m, size_t n, size_t rows, size_t cols, const char *what,
                          float **X, float **Y, float **scratch, size_t *sf);
void tl__calibrate_free(tl_model *m, float *X, float *Y, float *scratch);
/* The caller's work timed alone and while the plan's streamed units stream from the model
 * file through a queue of the engine's backend, chunk and depth (calibrate_stream.c):
 * work(user, &seconds) times the work once; samples alternate alone, held, alone, ...
 * (STREAM_PAIRS held), and *slowdown is the median over the held ones of held / the mean
 * of the alone ones on either side; *stream_bps the rate the stream read at while held
 * samples were timed; *s_per_byte the median over the held ones of the share of the held
 * sample's time the stream took (1 - the alone mean / held) times the sample's seconds, per
 * byte the stream read in it: what each byte read costs the cores, on a machine where the
 * IO's copies and interrupts take their time (a host's, a guest's). The chunks land in
 * the ring's spare buffer (tl_residency_spare) or the budget; with room for the queue's
 * depth in neither, the spare buffer's chunks are the depth (2 of half its size each,
 * where it holds fewer). All 0 when nothing was
 * measured: a plan that streams nothing through the ring, a flash layout, or neither
 * room in the budget nor a spare buffer. An IO error reading the file, or the work's
 * error, is returned. */
typedef tl_status (*tl__calibrate_work_fn)(void *user, double *seconds);
tl_status tl__calibrate_stream_slowdown(tl_model *m, tl__calibrate_work_fn work, void *user,
                                        double *slowdown, double *stream_bps,
                                        double *s_per_byte);
/* The KV cache a calibration times the model's layers with: `layers` layers shaped as the
 * model's, one sequence of up to max_tokens positions appended up to max_block at a time,
 * f32, in memory, in pages of page_tokens, the model's attention window. */
struct tl_kv_params;
void tl__calibrate_kv_params(const tl_model *m, int32_t layers, int32_t max_tokens,
                             int32_t max_block, int32_t page_tokens, struct tl_kv_params *kp);

#endif
