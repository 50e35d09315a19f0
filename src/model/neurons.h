/* neurons.h - a ReLU FFN read by neuron (LLM in a Flash 3.1-3.3): what a converted file
 * says of its predictor, and the neuron window, a DRAM cache of the neuron runs recent
 * tokens used.
 *
 * A flash-layout file of a ReLU model keeps each layer's FFN as one run per neuron (its
 * gate row, up row and down column: model/flash_layout.h) and a low-rank predictor of the
 * neurons a token activates. A token reads only the runs of its predicted neurons; the
 * window keeps runs in memory after use so that the next tokens, whose active sets
 * overlap, read only the neurons new to them. The window is a fixed number of slots per
 * layer (its memory is planned inside the budget), filled least-recently-used first: it
 * holds the union of the last k tokens' predicted sets while that union fits, so sized by
 * window_union[k-1] (the union's 95th percentile) its hit rate is near window_hit[k-1] or
 * above (tl_neuron_window_hit: the k' whose mean union fits). One size of run for every
 * layer: a file whose layers' runs differ (a K-quant mix) gets no window.
 * Where a neuron's run lies (slot or file) never changes a result: the products take the
 * neurons in ascending order whatever their place.
 */
#ifndef TL_MODEL_NEURONS_H
#define TL_MODEL_NEURONS_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"

/* The window sizes k = 1 .. TL_NEURON_WINDOW_MAX a file's calibration measured. */
#define TL_NEURON_WINDOW_MAX 16

/* The converted file's predictor and what calibration measured of it
 * (tierllm.neurons.*); rank 0: the file has no neuron runs. */
typedef struct tl_neuron_info {
    int32_t rank;
    float recall;      /* share of the active neurons' output mass predicted */
    float active;      /* mean share of a layer's neurons active per token */
    float predicted;   /* mean share predicted per token */
    int32_t window_k;  /* entries below */
    float window_hit[TL_NEURON_WINDOW_MAX];   /* [k-1]: share of a token's predicted neurons
                                                 that one of the k tokens before predicted */
    float window_union[TL_NEURON_WINDOW_MAX]; /* [k-1]: the share of a layer's neurons in
                                                 the union of k consecutive tokens'
                                                 predicted sets, its 95th percentile over
                                                 the tokens (the largest over layers) */
    float window_mean[TL_NEURON_WINDOW_MAX];  /* [k-1]: that union's mean share */
} tl_neuron_info;

/* The window's slots: per layer `capacity` runs of `run_bytes` each. */
typedef struct tl_neuron_window {
    int32_t n_layer, k;    /* k: the window it was sized for (reported) */
    uint32_t capacity, n_ff;
    size_t run_bytes;      /* a slot's stride: the run's bytes, as in the file */
    uint8_t *slots;        /* [n_layer][capacity][run_bytes] */
    int32_t *slot_of;      /* [n_layer][n_ff]: the neuron's slot, -1 when not held */
    int32_t *neuron_of;    /* [n_layer][capacity]: the slot's neuron, -1 when free */
    uint32_t *last_used;   /* [n_layer][capacity]: the step that last used the slot */
    uint32_t *step;        /* [n_layer]: steps (products) so far */
    uint64_t lookups, hits;
} tl_neuron_window;

/* The hit rate a window of `slots` per layer is expected to reach, sized for k tokens:
 * least-recently-used slots hold the last k' tokens' neurons for the largest k' whose
 * mean union fits them (k' >= k), so the file's window_hit[k'-1]. */
double tl_neuron_window_hit(const tl_neuron_info *ni, int32_t k, uint32_t slots, int32_t n_ff);

/* Bytes of a window's arrays (each part 64-byte aligned, as tl_neuron_window_init lays
 * them out in one block). */
uint64_t tl_neuron_window_bytes(int32_t n_layer, uint32_t n_ff, uint32_t capacity,
                                size_t run_bytes);
/* Lays the window out in `block` (tl_neuron_window_bytes, 64-byte aligned), empty. */
void tl_neuron_window_init(tl_neuron_window *w, void *block, int32_t n_layer, uint32_t n_ff,
                           uint32_t capacity, size_t run_bytes, int32_t k);
/* The slots of layer l. */
static inline uint8_t *tl_neuron_window_slots(const tl_neuron_window *w, int32_t l) {
    return w->slots + (size_t)l * w->capacity * w->run_bytes;
}
/* One product of layer l needs neurons chan[0..n) (ascending, n <= capacity): slot[t] gets
 * the slot of each neuron held (marked used now); the others are listed in miss[0..*n_miss)
 * by their position t in chan. `count`: add them to the lookups and hits. */
void tl_neuron_window_lookup(tl_neuron_window *w, int32_t l, const int32_t *chan, size_t n,
                             int32_t *slot, int32_t *miss, size_t *n_miss, int count);
/* Puts the missed neurons' runs, read to base + neuron * src_run_bytes, in slots (free
 * ones first, then those used longest ago, never one used by this product) and sets their
 * slot[]. */
void tl_neuron_window_fill(tl_neuron_window *w, int32_t l, const int32_t *chan, int32_t *slot,
                           const int32_t *miss, size_t n_miss, const uint8_t *base,
                           size_t src_run_bytes);

#endif
