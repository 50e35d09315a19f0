/* neuron_fit.h - a low-rank predictor of a ReLU FFN's active neurons (LLM in a Flash,
 * arXiv 2312.11514, section 3.1), fitted per layer on calibration rows.
 *
 * Neuron i of a layer is active at input x when z_i = Wact[i] . x + bias[i] > 0. The
 * predictor replaces Wact by a rank-r factorisation U V (V: rank x d, U: f x rank), chosen
 * as the best rank-r approximation of the calibration pre-activations Z = X Wact^T in
 * neuron space (U = the top right singular vectors of Z, V = U^T Wact), and shifts every
 * score by one threshold tau per layer so that the predicted sets hold a target share of
 * the neurons' output mass on the calibration rows. tau is negative when the low-rank
 * scores are too coarse to meet the target at the bias alone: the predictor then predicts
 * more neurons, never less recall.
 */
#ifndef TL_MODEL_NEURON_FIT_H
#define TL_MODEL_NEURON_FIT_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"

struct tl_budget;

typedef struct tl_neuron_fit_in {
    size_t T, d, f, rank; /* calibration rows, input width, neurons, predictor rank
                           * (1 <= rank <= min(T, d, f)) */
    const float *X;       /* [T][d] the FFN inputs (normed hidden rows) */
    const float *Wact;    /* [f][d] the activation matrix (the gate of a ReLU-gated FFN) */
    const float *bias;    /* [f], NULL: zeros */
    const float *mass;    /* [T][f] >= 0: each neuron's output mass at each row (0 when
                           * inactive) */
    double recall;        /* in (0, 1]: the share of the total mass (summed over all rows and
                           * neurons) that the predicted sets must hold on these rows */
    uint64_t seed;        /* for the random test matrix of the range finder */
} tl_neuron_fit_in;

typedef struct tl_neuron_fit_report {
    double recall;          /* mass share reached on the rows (1 when the total mass is 0) */
    double predicted_share; /* mean over rows of (predicted neurons / f) */
    double active_share;    /* mean over rows of (neurons with z > 0) / f */
    double margin;          /* tau: the calibrated score threshold subtracted into pb */
} tl_neuron_fit_report;

/* Fits V [rank][d], U [f][rank] and pb [f] so that neuron i is predicted active at input x
 * iff s_i = sum_j U[i][j] * (sum_c V[j][c] x[c]) + pb[i] > 0, and the rows of X, evaluated
 * as tl_neuron_predict does, meet in->recall. U and V come out already rounded to F16
 * precision (the file stores them as F16) and the margin is calibrated with those rounded
 * values. Scratch comes from the budget (about (2*T + 2*k + rank + 64) * f floats, k =
 * min(rank + 16, T, d, f)); TL_ERR_NOMEM if it does not fit; TL_ERR_INVALID for bad sizes (a zero size, rank
 * > min(T, d, f)), a recall outside (0, 1], negative or non-finite mass, or non-finite
 * scores. `rep` may be NULL. On error V, U and pb are unspecified. */
tl_status tl_neuron_fit_predictor(const tl_neuron_fit_in *in, struct tl_budget *budget,
                                  float *V, float *U, float *pb, tl_neuron_fit_report *rep);

/* mask[t*f + i] = 1 iff row t of X (n rows, width d) is predicted to activate neuron i, else
 * 0; computed in f32 (t = V x, then s = U t + pb; s > 0), with a fixed summation order, so
 * the same inputs give the same mask on every call. The engine's products sum in another
 * order: a score within f32 rounding of 0 may fall the other way there. scratch: n*rank
 * floats. */
void tl_neuron_predict(const float *V, const float *U, const float *pb, size_t d, size_t f,
                       size_t rank, const float *X, size_t n, uint8_t *mask, float *scratch);

#endif
