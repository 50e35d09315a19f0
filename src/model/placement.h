/* placement.h - the weight placement policy: a pure function from the model's shape, the
 * budget and the prefetch knobs to which weights stay resident (exec/residency.h carries
 * the plan out).
 *
 * A *unit* is what the forward pass asks for at once: unit l < n_layer is layer l, unit
 * n_layer is the output projection. The weight plan says which parts (a layer's
 * attention matrices, its FFN matrices, the output, the token embedding) are resident;
 * everything else streams through a ring of slot buffers, each sized for the largest
 * streamed unit. Norms and tensors converted at load are always resident.
 */
#ifndef TL_MODEL_PLACEMENT_H
#define TL_MODEL_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>
#include "model/llama.h"

typedef struct tl_weight_plan {
    uint8_t *attn_resident, *ffn_resident; /* [n_layer] */
    int output_resident, embd_resident;
    int prefetch;       /* units read ahead of the one computing */
    int overlap;        /* 0: read each unit synchronously when it is needed */
    int n_slots;        /* ring buffers (0 when nothing streams) */
    uint64_t slot_bytes, resident_bytes, streamed_bytes, total_bytes;
    /* a FFN by neuron (model/neurons.h): the neuron window's slots per layer, and the k
     * whose calibrated union they hold (0, 0: no window) */
    uint32_t window_slots;
    int32_t window_k;
} tl_weight_plan;

/* The default placement policy (replaceable by the planner): a pure function of the
 * model's tensor sizes and the budget left for weights. Value per byte decides: every
 * resident byte of attention, FFN or output saves one byte of IO per forward pass, so
 * those come first, attention before FFN (smaller, needed first in a layer, as LLM in a
 * Flash keeps it), then the output; the token embedding comes last because streaming it
 * costs one row read per token, not the whole matrix. A FFN stored by neuron with a
 * predictor (model/neurons.h) gets a neuron window from the budget first: of k = 0 ..
 * the file's calibrated windows (or the k m->params.neuron_window asks), the plan that
 * reads the fewest bytes per decode token by the file's predicted share and hit rates. TL_ERR_NOMEM (with the minimum in
 * the message) when even full streaming does not fit. The plan owns its arrays. */
tl_status tl_weight_plan_make(const tl_llama *m, uint64_t weight_budget, int prefetch,
                              int overlap, tl_weight_plan *plan);
void tl_weight_plan_free(tl_weight_plan *plan);
/* Budget bytes of the all-streamed plan: the least the weights can live with. */
uint64_t tl_weight_plan_minimum(const tl_llama *m, int prefetch, int overlap);
/* Bytes read from the model file for unit u in each pass (0 when it is resident). */
uint64_t tl_weight_plan_unit_bytes(const tl_llama *m, const tl_weight_plan *p, int unit);
/* Flash layout (model/flash_layout.h): a layer's streamed site tensors are not read
 * through the ring but at their use, only the runs the step's inputs need, into one
 * buffer of this many bytes (the largest streamed site tensor, aligned); 0: none. */
uint64_t tl_weight_plan_site_buf_bytes(const tl_llama *m, const tl_weight_plan *p);
/* Budget bytes of the read tags beside that buffer: a tag and a channel end per read, one
 * read per run of the widest site at most. */
uint64_t tl_weight_site_tags_bytes(const tl_llama *m);
/* A FFN by neuron: the bytes of every layer's neuron runs, one size for all the stage's
 * layers (the neuron window's slots); 0 when they differ (a K-quant mix giving layers
 * different types: no window) or there are none. */
size_t tl_neuron_run_bytes(const tl_llama *m);
/* Budget bytes of the plan's neuron window (0: none). */
uint64_t tl_weight_plan_window_bytes(const tl_llama *m, const tl_weight_plan *plan);
/* Bytes the plan needs from the budget (resident buffers, slots, row buffer). */
uint64_t tl_weight_plan_bytes(const tl_llama *m, const tl_weight_plan *plan);

/* Most tensors one unit reads (a layer's attention or FFN matrices, or the output). */
enum { TL_WEIGHT_UNIT_MAX = 8 };

/* Where a set of tensors lands in one buffer: their file ranges widened to
 * TL_TIER_MAX_ALIGN and merged where they touch, in file order. */
typedef struct tl_weight_placed { tl_weight *w; size_t buf_off; } tl_weight_placed;
typedef struct tl_weight_extent { uint64_t file_off; size_t len, buf_off; } tl_weight_extent;
typedef struct tl_weight_layout {
    tl_weight_placed t[TL_WEIGHT_UNIT_MAX];
    tl_weight_extent e[TL_WEIGHT_UNIT_MAX];
    int n_t, n_e;
    size_t bytes;
} tl_weight_layout;
void tl_weight_layout_build(tl_weight_layout *L, tl_weight *const *ws, int n);

/* A layer's attention (part 0) or FFN (part 1) matrices, without those converted to f32
 * at load (always resident, never streamed). Returns the count.
 * In the flash layout (model/flash_layout.h) the parts are sites, grouped by how well
 * they stream: part 0, kept resident first, is wo's and w_down's runs (n_embd elements
 * each, a few KiB: read selectively, they cost a request per run or read their gaps
 * through), part 1 the bundles of q, k, v and of gate, up (runs several times longer, so
 * their selective reads are large). */
int tl_llama_layer_matrices(const tl_llama_layer *L, int part, tl_weight **ws);
/* The weights of unit u that the plan streams. Returns the count. */
int tl_weight_plan_unit_weights(const tl_llama *m, const tl_weight_plan *p, int u,
                                tl_weight **ws);
/* A token embedding left on disk is read up to TL_EMBD_READ_ROWS rows at a time, each row
 * its own urgent read and all of them in flight together (exec/residency.h): a step's rows
 * then wait for the IO queue once a group rather than once a row. tl_weight_embd_read_rows:
 * the group for this model, fewer rows where the buffer would pass 1/16 of the embedding's
 * bytes (a small embedding is better kept in memory than a large buffer for it), at least
 * one. tl_weight_row_slot_bytes: one row's slot in the buffer (a row widened to the
 * alignment at both ends); tl_weight_row_buf_bytes: the buffer. */
#define TL_EMBD_READ_ROWS 16
int32_t tl_weight_embd_read_rows(const tl_llama *m);
uint64_t tl_weight_row_slot_bytes(const tl_llama *m);
uint64_t tl_weight_row_buf_bytes(const tl_llama *m);

/* 1 when w is repacked into 32-row panels (kernels.h) once its bytes are in memory,
 * resident or streamed: where this CPU's kernels want them, on the fast path. Every such
 * tensor is always in panels when computed with, so results do not depend on placement.
 * A token embedding is, only when it is also the classifier (tied). */
int tl_weight_wants_panels(const tl_llama *m, const tl_weight *w);
/* 1 when w's bytes arrive in the file's layout and are repacked in memory: it wants
 * panels and is not read from a converted copy that stores it repacked (m->panel_tier
 * holds every such tensor but the token embedding, and so a classifier tied to it). */
int tl_weight_repacked_in_memory(const tl_llama *m, const tl_weight *w);
/* Bytes of the repacking temporaries (one panel per pool thread; 0 when none is wanted),
 * held from placement to close and counted in tl_weight_plan_bytes. */
uint64_t tl_weight_repack_bytes(const tl_llama *m);

#endif
