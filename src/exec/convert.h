/* convert.h - `tierllm convert`: a new GGUF with activation-sparsity thresholds calibrated
 * on sample text (model/sparsity.h), the input never modified.
 *
 * Steps: the input is parsed and refused when it is not a GGUF of a supported family, is
 * already converted, or is the output itself; the calibration text is tokenized and cut in
 * two: the first three quarters calibrate, the last quarter is held out.
 *  1. Thresholds: the dense model runs over the calibration tokens in windows and every
 *     layer's four matrix inputs go into histograms (model/sparsity.h).
 *  2. Allocation: which site takes how much of a sparsity S (model/sparsity.h). Greedy,
 *     from every site dense: each step raises by ALLOC_STEP the level of the site whose
 *     raise costs the least perplexity (on the last alloc_tokens calibration tokens) per
 *     unit of S it adds (a site's S is its level times its share of the layers' matrix
 *     bytes), until S reaches ALLOC_UNTIL or no site can rise. The path's levels, read at
 *     S = 0, 0.05, ..., 1, are the stored allocation. `uniform` skips it: every site at S.
 *  3. Default: when no sparsity is given, the largest candidate S whose perplexity on the
 *     held-out quarter stays within max_ppl_rise of the dense model's.
 * The output holds every key of the input and the tierllm.sparse.* keys: version, levels,
 * thresholds, alloc, default and calib_tokens. Its tensors are the input's, bytes copied
 * as they are, or with flash_layout each layer's matrices in the flash layout
 * (model/flash_layout.h, built by exec/flash_write.h once the model used for calibration
 * is closed, from a budget of the same size) and the tierllm.layout keys. It is written
 * whole or not at all (base/out_file.h): a full disk or an IO error leaves no partial
 * file.
 */
#ifndef TL_EXEC_CONVERT_H
#define TL_EXEC_CONVERT_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"
#include "model/neurons.h"

/* Fewer calibration tokens than this are refused: a quantile table from a few hundred
 * values per channel site says little about text the model has not seen. */
#define TL_CONVERT_MIN_CALIB_TOKENS 512
#define TL_CONVERT_CURVE_MAX 12

typedef struct tl_convert_params {
    const char *in_path, *out_path;
    const char *calib_text;
    size_t calib_len;
    float sparsity;       /* the file's default; < 0: chosen from the quality curve */
    float max_ppl_rise;   /* the choice's limit on held-out perplexity (default 0.02: +2%) */
    int32_t n_ctx;        /* calibration and evaluation windows (0: the model's, up to 512) */
    int32_t alloc_tokens; /* calibration tokens each allocation step evaluates (default 256) */
    int uniform;          /* 1: no allocation search; every site at S */
    int flash_layout;     /* 1: the layers' matrices in the flash layout (exec/flash_write.h) */
    /* A ReLU FFN in the flash layout is stored by neuron with a predictor of the active
     * neurons (exec/neuron_calib.h), fitted on the FFN inputs of the first
     * predictor_tokens calibration tokens (default 512): its rank (default 128) and the
     * share of the active neurons' output mass it must predict there (default 0.9999:
     * well above the recall held-out text needs, since a missed neuron can still flip a
     * greedy token whose logit is near a tie, and the extra neurons cost little). */
    int32_t predictor_rank, predictor_tokens;
    double predictor_recall;
    tl_model_params mp;   /* how the model runs during calibration (threads, budget) */
} tl_convert_params;

typedef struct tl_convert_report {
    size_t calib_tokens, heldout_tokens;
    int n_curve; /* candidates evaluated (0 when the sparsity was given) */
    float curve_sparsity[TL_CONVERT_CURVE_MAX];
    double curve_ppl[TL_CONVERT_CURVE_MAX];    /* held-out perplexity at each */
    double curve_reached[TL_CONVERT_CURVE_MAX];/* share of channels actually zeroed */
    float chosen;
    float alloc[21][4];    /* the allocation stored (TL_SPARSITY_ALLOC_POINTS x sites) */
    int alloc_steps, alloc_evals;
    uint64_t tensor_bytes; /* tensor data copied */
    tl_neuron_info neurons;/* a ReLU FFN by neuron: its predictors' figures (rank 0: none) */
} tl_convert_report;

tl_convert_params tl_convert_default_params(void);
tl_status tl_convert(const tl_convert_params *p, tl_convert_report *report);

#endif
