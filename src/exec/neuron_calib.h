/* neuron_calib.h - the predictors of a ReLU FFN's active neurons for `tierllm convert
 * --layout flash` (model/neurons.h), fitted on the FFN inputs the calibration run saw.
 *
 * Per layer: the FFN's matrices are read from the input file and dequantized, each
 * calibration row's true activations h and output masses |h_i| * |down_i| computed, and
 * model/neuron_fit.h fits the rank-r predictor that holds `recall` of that mass. The
 * fitted predictors are then run over the same rows, in order, to measure what the
 * engine's neuron window would see: for k = 1 .. TL_NEURON_WINDOW_MAX, the share of a
 * token's predicted neurons one of the k tokens before it predicted (the hit rate a
 * window of k tokens has) and the size of the union of k consecutive predicted sets (the
 * slots it needs: the 95th percentile over the rows, the largest over the layers).
 * Recall and shares are over all layers' rows (the recall weighed by mass). Memory: the
 * layer's three matrices in f32 and a few [rows][n_ff] arrays at a time, from the budget.
 */
#ifndef TL_EXEC_NEURON_CALIB_H
#define TL_EXEC_NEURON_CALIB_H

#include <stddef.h>
#include "tierllm.h"
#include "format/gguf.h"
#include "model/neurons.h"

struct tl_budget;
struct tl_llama_hparams;

typedef struct tl_neuron_predictors {
    int32_t n_layer;
    size_t d, f, rank;
    float *V, *U, *pb;   /* [n_layer][rank][d], [n_layer][f][rank], [n_layer][f] (malloc) */
    tl_neuron_info info; /* what goes into the file's tierllm.neurons.* keys */
} tl_neuron_predictors;

/* X: [n_layer][T][d] each layer's FFN inputs on T consecutive calibration tokens. */
tl_status tl_neuron_calibrate(const tl_gguf *in, const char *in_path,
                              const struct tl_llama_hparams *hp, const float *X, size_t T,
                              size_t rank, double recall, struct tl_budget *budget,
                              tl_neuron_predictors *out);
void tl_neuron_predictors_free(tl_neuron_predictors *p);

#endif
