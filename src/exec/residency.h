/* residency.h - which weights live in memory and which stream from the model file.
 *
 * A *unit* is what the forward pass asks for at once: unit l < n_layer is layer l, unit
 * n_layer is the output projection. The weight plan says which parts (a layer's
 * attention matrices, its FFN matrices, the output, the token embedding) are resident;
 * everything else streams through a ring of `prefetch + 1` slot buffers, each sized for
 * the largest streamed unit. Norms and tensors converted at load are always resident.
 * Token-embedding rows of a non-resident embedding are read on demand (one small read
 * per token).
 */
#ifndef TL_EXEC_RESIDENCY_H
#define TL_EXEC_RESIDENCY_H

#include <stdint.h>
#include "model/llama.h"

typedef struct tl_weight_plan {
    uint8_t *attn_resident, *ffn_resident; /* [n_layer] */
    int output_resident, embd_resident;
    int prefetch;       /* units read ahead of the one computing */
    int overlap;        /* 0: read each unit synchronously when it is needed */
    int n_slots;        /* ring buffers (0 when nothing streams) */
    uint64_t slot_bytes, resident_bytes, streamed_bytes, total_bytes;
} tl_weight_plan;

/* The default placement policy (replaceable by the planner): a pure function of the
 * model's tensor sizes and the budget left for weights. Value per byte decides: every
 * resident byte of attention, FFN or output saves one byte of IO per forward pass, so
 * those come first, attention before FFN (smaller, needed first in a layer, as LLM in a
 * Flash keeps it), then the output; the token embedding comes last because streaming it
 * costs one row read per token, not the whole matrix. TL_ERR_NOMEM (with the minimum in
 * the message) when even full streaming does not fit. The plan owns its arrays. */
tl_status tl_weight_plan_make(const tl_model *m, uint64_t weight_budget, int prefetch,
                              int overlap, tl_weight_plan *plan);
void tl_weight_plan_free(tl_weight_plan *plan);
/* Budget bytes of the all-streamed plan: the least the weights can live with. */
uint64_t tl_weight_plan_minimum(const tl_model *m, int prefetch, int overlap);
/* Bytes read from the model file for unit u in each pass (0 when it is resident). */
uint64_t tl_weight_plan_unit_bytes(const tl_model *m, const tl_weight_plan *p, int unit);
/* Bytes the plan needs from the budget (resident buffers, slots, row buffer). */
uint64_t tl_weight_plan_bytes(const tl_model *m, const tl_weight_plan *plan);

typedef struct tl_residency tl_residency;

/* Allocates the resident weights and slots from the model's budget and reads the
 * resident weights (through the model's IO queue). */
tl_status tl_residency_open(tl_model *m, const tl_weight_plan *plan, tl_residency **out);
void tl_residency_close(tl_residency *r);

/* A forward pass begins; it will use units 0..n_layer-1 and, if need_output, n_layer. */
tl_status tl_residency_begin_pass(tl_residency *r, int need_output);
/* Makes unit u's weights available (waits for its reads; the wait is stall time). */
tl_status tl_residency_acquire(tl_residency *r, int unit);
/* The pass is done with unit u: its slot may be refilled. */
void tl_residency_release(tl_residency *r, int unit);
/* Writes token `id`'s embedding row as f32 (from memory or one small read). */
tl_status tl_residency_embedding(tl_residency *r, int32_t id, float *dst);

/* Reads every streamed unit once through the same ring and queue, with nothing else
 * running: the pure IO time of one forward pass (the bound benchmarks compare with). */
tl_status tl_residency_measure_io(tl_residency *r, double *seconds, uint64_t *bytes);

typedef struct tl_residency_stats {
    uint64_t passes;  /* forward passes begun */
    double stall_s;
    uint64_t bytes_read_disk, bytes_read_mem;
} tl_residency_stats;
void tl_residency_get_stats(const tl_residency *r, tl_residency_stats *out);
const tl_weight_plan *tl_residency_plan(const tl_residency *r);

#endif
