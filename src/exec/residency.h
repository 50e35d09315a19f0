/* residency.h - carrying out a weight plan (model/placement.h): the resident weights, and
 * the ring of `prefetch + 1` slot buffers through which every other unit streams from
 * the model file while the forward pass computes.
 *
 * Token-embedding rows of a non-resident embedding are read on demand: one small read
 * per token, a group of them in flight together.
 */
#ifndef TL_EXEC_RESIDENCY_H
#define TL_EXEC_RESIDENCY_H

#include <stdint.h>
#include "model/placement.h"
#include "tier/tier.h"

typedef struct tl_residency tl_residency;

/* Allocates the resident weights and slots from the model's budget and reads the
 * resident weights (through the model's IO queue). */
tl_status tl_residency_open(tl_llama *m, const tl_weight_plan *plan, tl_residency **out);
void tl_residency_close(tl_residency *r);

/* A forward pass begins; it will use units 0..n_layer-1 and, if need_output, n_layer. */
tl_status tl_residency_begin_pass(tl_residency *r, int need_output);
/* Makes unit u's weights available (waits for its reads; the wait is stall time). */
tl_status tl_residency_acquire(tl_residency *r, int unit);
/* The pass is done with unit u: its slot may be refilled. */
void tl_residency_release(tl_residency *r, int unit);
/* Outside a pass (no unit acquired): unit u's weights read into the ring's first slot and
 * bound as tl_residency_acquire binds them, with nothing read ahead and no counter of the
 * run's (passes, bytes, stalls, repacking) touched, for a caller that times work on them
 * (plan/calibrate.h); whatever the ring held is dropped. tl_residency_unborrow unbinds
 * them and leaves the ring empty. Nothing to do for a fully resident unit. */
tl_status tl_residency_borrow(tl_residency *r, int u);
void tl_residency_unborrow(tl_residency *r, int u);
/* Outside a pass (nothing acquired; at most one unit borrowed, which the ring's first
 * buffer holds): the ring's second buffer, emptied and lent as scratch to a caller that
 * times work beside reads of its own (plan/calibrate.h) until tl_residency_unspare; *bytes
 * its size. NULL (0) when the ring has a single buffer. While lent it holds no weights,
 * tl_residency_sweep leaves it out (the caller's reads land in it), and nothing may be
 * acquired or borrowed. */
uint8_t *tl_residency_spare(tl_residency *r, size_t *bytes);
void tl_residency_unspare(tl_residency *r);
/* Reads through the memory the weights hold (the ring's buffers, then the resident
 * weights' buffers, but for those holding layer `layer`'s products and ring buffers
 * reads are landing in: as one sequence from *cursor on, wrapping; *cursor moves past
 * what was read), one byte a cache line, up to max_bytes and at most once over it all;
 * returns the bytes read. A caller timing a layer's work over and over sweeps before
 * each time, so that each starts as the layer's first use in a pass does: after the rest
 * of what the pass touches went through the caches (as much as the model holds: a small
 * model's pass stays in them, and so does the sweep). */
uint64_t tl_residency_sweep(const tl_residency *r, int32_t layer, uint64_t max_bytes,
                            uint64_t *cursor);
/* Writes the embedding rows of ids[0..n) as f32 into dst [n][n_embd]: copies from
 * memory, or, for an embedding left on disk, one small urgent read per row, up to
 * tl_weight_embd_read_rows of them submitted together, then waited for (model/placement.h).
 * An id outside the vocabulary is an error (nothing read). */
tl_status tl_residency_embeddings(tl_residency *r, const int32_t *ids, int32_t n, float *dst);

/* Reads every streamed unit once through the same ring and queue, with nothing else
 * running: the pure IO time of one forward pass (the bound benchmarks compare with).
 * max_bytes > 0 stops submitting units once that many bytes are on their way (a shorter
 * sample of the same streaming), starting at unit *cursor (NULL: 0) and wrapping; *cursor
 * is left at the unit after the last one read, so each sample continues where the one
 * before stopped, as the engine's cycle does, instead of reading the same first units
 * again from a host cache that has just served them. */
tl_status tl_residency_measure_io(tl_residency *r, uint64_t max_bytes, int *cursor,
                                  double *seconds, uint64_t *bytes);

/* Flash layout: reads the needed runs of streamed site tensors as a pass would, each
 * channel of layer l's site s needed with probability share(user, l, s) (drawn from a fixed
 * seed into chan, which holds the widest site's channels), through fetch_runs and
 * fetch_wait with nothing computing, site after site from the first layer until max_s has
 * passed or every streamed site was read once. *seconds: the fetches' time; *bytes,
 * *reads: what they read, in how many requests. The run's counters are left as they
 * were. Nothing streamed in the flash layout: nothing measured (all 0). */
typedef double (*tl_flash_share_fn)(void *user, int32_t layer, int site);
tl_status tl_residency_measure_flash(tl_residency *r, tl_flash_share_fn share, void *user,
                                     double max_s, int32_t *chan, double *seconds,
                                     uint64_t *bytes, uint64_t *reads);

/* Reads n groups of `rows` rows (1 .. tl_weight_embd_read_rows) of a token embedding
 * that is not resident, as tl_residency_embeddings reads them (one urgent read each, a
 * group in flight together), the k-th row read at id (first + k) * 7919 + 17 modulo the
 * vocabulary (spread over it; a caller timing twice starts the second after the first's
 * rows), into dst ([rows][n_embd] floats); *median_s: the median group's seconds. The
 * run's counters are left as they were. An embedding in memory measures nothing
 * (*median_s 0). */
tl_status tl_residency_measure_embedding(tl_residency *r, int n, int rows, int first,
                                         float *dst, double *median_s);

/* Runs n_passes forward passes' streaming as decode takes it: each pass begun (logits
 * needed), every unit acquired and released in order, so the ring reads ahead as in a run
 * (into every empty buffer, up to the next pass's layers); units are neither repacked nor
 * bound. hold NULL: nothing computes, each unit is let go at once; else hold(user, u) runs
 * once each streamed unit u has arrived, before its buffer is let go: work standing for
 * what a step computes meanwhile, which cannot use u's weights (they are not bound).
 * *seconds: the passes' wall time; *bytes: what they read. The run's counters are left as
 * they were and the ring empty. A plan without overlap measures nothing. Call with no unit
 * acquired. */
typedef void (*tl_residency_hold_fn)(void *user, int unit);
tl_status tl_residency_measure_passes(tl_residency *r, int n_passes,
                                      tl_residency_hold_fn hold, void *user, double *seconds,
                                      uint64_t *bytes);

typedef struct tl_residency_stats {
    uint64_t passes;  /* forward passes begun */
    double stall_s;
    uint64_t bytes_read_disk, bytes_read_mem;
    /* weights in 32-row panels (kernels.h): resident ones (repacked once at placement, or
     * read so from the converted copy), streamed ones repacked each time they arrive
     * (summed over passes), and the time repacking took */
    uint64_t panel_bytes, streamed_panel_bytes;
    double repack_s, arrival_repack_s; /* all repacking; of it, streamed weights on arrival */
    /* flash layout: runs read at their use - the needed runs' bytes, the bytes read
     * (widened to the alignment, gaps read through), the site tensors' whole bytes (as if
     * every run were needed), requests, the time from each fetch's start to its last
     * read's wait, and the time compute waited for them */
    uint64_t flash_bytes_needed, flash_bytes_read, flash_bytes_dense, flash_reads;
    double flash_fetch_s, flash_stall_s;
    /* the neuron window (model/neurons.h): its k and slots per layer, neurons looked up
     * in it and found */
    int32_t window_k;
    uint32_t window_slots;
    uint64_t window_lookups, window_hits;
} tl_residency_stats;
void tl_residency_get_stats(const tl_residency *r, tl_residency_stats *out);
const tl_weight_plan *tl_residency_plan(const tl_residency *r);



#endif
