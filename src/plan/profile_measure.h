/* profile_measure.h - internal to measuring the hardware profile (tl_profile_measure).
 *
 * profile_measure.c drives the stages in their fixed order and accounts for their memory;
 * profile_disk.c measures the disk alone, profile_compute.c the kernels alone (matmul,
 * element-wise, attention), profile_interference.c both at once. The sizes below are
 * shared between the stage that allocates them and tl_profile_measure_bytes, which must
 * count exactly what the stages hold, so each is defined once, here.
 */
#ifndef TL_PLAN_PROFILE_MEASURE_H
#define TL_PLAN_PROFILE_MEASURE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"
#include "plan/profile.h"
#include "base/threadpool.h"
#include "format/tensor_type.h"
#include "model/llama.h"
#include "tier/tier.h"

/* matmul stages: R x C matrices, copies cycled until they exceed the last-level cache */
#define TL__PROF_MM_ROWS 8192
#define TL__PROF_MM_COLS 2048
#define TL__PROF_MM_SMALL_ROWS 1024 /* the second size: separates per-call cost from the rate */
#define TL__PROF_MM_MIN_BYTES ((size_t)96 << 20) /* weights cycled per type: beyond the LLC */
/* rows of the products the interference stage times as prefill's (compute-bound) */
#define TL__PROF_SLOWDOWN_ROWS 128
/* the interference stage's stream: requests this large (a streamed layer's unit), two at
 * once */
#define TL__PROF_STREAM_UNIT ((uint64_t)16 << 20)
/* urgent reads timed together in one batch (a micro-batch's KV pages) */
enum { TL__PROF_URGENT_BATCH = 32 };
/* positions the attention stage decodes at most (its KV and time buffers), and those it
 * prefills in blocks (more: a prefill is fast, and the slope needs a longer run) */
#define TL__PROF_AT_POS 1024
#define TL__PROF_AT_BLOCK_POS 2016
/* the deep model of the attention stage (KV beyond the caches): the attention model's
 * layers, TL__PROF_AT_DEEP_LAYERS of them, decoded up to TL__PROF_AT_DEEP_POS positions,
 * where its f32 KV is 64 x 1024 x 4 KiB = 256 MiB */
#define TL__PROF_AT_DEEP_LAYERS 64
#define TL__PROF_AT_DEEP_POS 1024

typedef void (*tl__profile_progress)(void *user, const char *line);

/* ---- disk (profile_disk.c) ---- */

/* The disk stage: writes a scratch file in dir, then reads it over the chunk x depth grid
 * into p->disk_read_bps and p->disk_write_bps. On success the file is handed to *keep
 * (when keep is not NULL) for the interference stage to read; the caller closes it. */
tl_status tl__profile_measure_disk(const char *dir, tl_hw_profile *p,
                                   tl__profile_progress progress, void *user,
                                   tl_tier **keep);
/* Streams t as the engine streams weights and times batches of urgent reads on the way,
 * into lat1 (batches of 1) and latn (batches of TL__PROF_URGENT_BATCH), up to cap each,
 * until *stop is set. bufs holds the queue's default depth of default chunks and then
 * TL__PROF_URGENT_BATCH pages of TL_PROF_URGENT_BYTES. */
tl_status tl__profile_disk_urgent(tl_tier *t, uint8_t *bufs, atomic_int *stop, double *lat1,
                                  int *n1, double *latn, int *nn, int cap);

/* The buffer a reading thread of the interference stage needs, for
 * tl__profile_disk_urgent above or tl__profile_disk_stream below. */
uint64_t tl__profile_reader_bytes(void);
/* Streams t as the residency reads streamed weights: requests of TL__PROF_STREAM_UNIT
 * (a unit the IO queue splits into its chunks), two in flight, each waited for whole,
 * until *stop is set. bufs holds 2 x TL__PROF_STREAM_UNIT. *bytes: the bytes of the
 * requests it waited for. */
tl_status tl__profile_disk_stream(tl_tier *t, uint8_t *bufs, atomic_int *stop,
                                  uint64_t *bytes);

/* ---- compute (profile_compute.c) ---- */

/* `copies` back-to-back copies of one R x C matrix of random weights in `type`, in memory
 * like the engine's weights; `row` is C floats of scratch. NULL when out of memory. */
uint8_t *tl__profile_weight_copies(tl_type type, size_t R, size_t C, size_t copies,
                                   float *row, uint64_t *seed);
/* Repacks each of the copies in place into panels over the pool, as the residency does
 * with a streamed unit on arrival, timing each: the median bytes per second (0 and *st
 * set when out of memory). Each thread takes a one-panel temporary
 * (tl_panels_tmp_bytes). */
double tl__profile_repack_copies(tl_pool *pool, tl_type type, uint8_t *W, size_t R, size_t C,
                                 size_t copies, tl_status *st);
/* The matmul stage: p->matmul_macs and p->matmul_call_s for every type and row count. */
tl_status tl__profile_measure_matmul(tl_pool *pool, tl_hw_profile *p,
                                     tl__profile_progress progress, void *user);
/* The element-wise stage: p->elementwise_s. */
tl_status tl__profile_measure_elementwise(tl_hw_profile *p);
/* The tiny model the attention stage decodes with, its grouped-query model, its deep model. */
void tl__profile_attention_model(tl_synth_params *sp);
void tl__profile_attention_gqa_model(tl_synth_params *sp);
void tl__profile_attention_deep_model(tl_synth_params *sp);
/* The attention stage: p->attn_s_per_mac, p->attn_block_s_per_mac, their grouped-query
 * pair, p->attn_decode_s, the beyond-the-caches figures and p->layer_fixed_s, from
 * synthetic models written to dir. Reads p->fma_flops, p->matmul_macs and
 * p->elementwise_s, so it runs after those stages. */
tl_status tl__profile_measure_attention(int32_t threads, const char *dir, tl_hw_profile *p,
                                        tl__profile_progress progress, void *user);

/* ---- compute while the disk streams (profile_interference.c) ---- */

/* The interference stage: p->io_slowdown_matvec, p->io_compute_slowdown,
 * p->io_slowdown_attn, the rate its stream read at (p->io_stream_bps) and the urgent
 * read times p->disk_urgent_read_s / _page_s, reading t (the disk stage's file). Reads
 * p->disk_read_bps, so it runs after the disk stage. */
tl_status tl__profile_measure_interference(tl_pool *pool, tl_tier *t, tl_hw_profile *p,
                                           tl__profile_progress progress, void *user);
/* The bytes its attention takes beside the products' (`threads` compute threads). */
uint64_t tl__profile_interference_attn_bytes(uint64_t threads);

#endif
