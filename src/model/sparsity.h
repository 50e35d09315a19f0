/* sparsity.h - training-free activation sparsity (LLM in a Flash for SwiGLU models).
 *
 * Each matrix product y = W x of a layer skips the input channels x_j whose magnitude is
 * below a threshold: those x_j are set to zero before the product, so a kernel that reads
 * only the columns of the non-zero channels computes the same y as the dense kernel on the
 * thresholded x. Matrices that share an input share its threshold: four sites per layer,
 *   ATTN_IN  the normed input of wq, wk, wv;   ATTN_OUT the attention output, into wo;
 *   FFN_IN   the normed input of w_gate, w_up; FFN_MID  silu(gate) * up (or a ReLU FFN's
 *            relu(up)), into w_down. ReLU's own zeros are in that site's table: up to
 *            ReLU's share of zeros its threshold is 0 and nothing more is zeroed.
 *
 * Thresholds come from calibration on sample text (tl_sparsity_calib, run by
 * `tierllm convert --calib`): for each layer and site, the magnitude below which a share s
 * of the channels fell, at s = 0, 1/100, ..., 1 (TL_SPARSITY_LEVELS entries, a quantile
 * table); the threshold at a site's level is the table interpolated linearly.
 *
 * The sites do not bear zeros equally (dropping small attention inputs costs more than
 * dropping small FFN ones), so a sparsity S is not the same level at every site: S is the
 * share of the layer's matrix weights whose columns are skipped, each site weighing the
 * bytes of the matrices it feeds, and the allocation, each site's level for S, is found at
 * conversion (exec/convert.h: a greedy search on the calibration text) and stored for
 * S = 0, 1/20, ..., 1 (TL_SPARSITY_ALLOC_POINTS rows; between them, interpolated). A file
 * without an allocation uses S at every site. Tables and allocation travel in the GGUF as
 * metadata (tierllm.sparse.*), so one converted file runs at any sparsity. At S = 0 nothing
 * is thresholded and the pass is the dense one, bit for bit.
 */
#ifndef TL_MODEL_SPARSITY_H
#define TL_MODEL_SPARSITY_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"
#include "format/gguf.h"

struct tl_budget;

enum { TL_SITE_ATTN_IN, TL_SITE_ATTN_OUT, TL_SITE_FFN_IN, TL_SITE_FFN_MID, TL_SITE_COUNT };
#define TL_SPARSITY_LEVELS 101 /* the table's sparsities: 0, 0.01, ..., 1 */
#define TL_SPARSITY_ALLOC_POINTS 21 /* the allocation's sparsities: 0, 0.05, ..., 1 */
#define TL_SPARSITY_VERSION 1  /* tierllm.sparse.version this engine reads and writes */

const char *tl_sparsity_site_name(int site);

/* Watches the activations at each site (calibration); called before thresholding with the
 * n rows of `width` channels the site's matrices are about to multiply. */
typedef void (*tl_sparsity_observe_fn)(void *user, int32_t layer, int site, const float *x,
                                       size_t n, size_t width);

typedef struct tl_sparsity {
    int32_t n_layer;
    float *table;      /* [n_layer][TL_SITE_COUNT][TL_SPARSITY_LEVELS], NULL: not calibrated */
    float *alloc;      /* [TL_SPARSITY_ALLOC_POINTS][TL_SITE_COUNT] each site's level for
                          S = i / (POINTS - 1); NULL: every site at S */
    float level;       /* the sparsity in force, S (0: dense) */
    float site_level[TL_SITE_COUNT]; /* each site's level for it */
    float *thr;        /* [n_layer][TL_SITE_COUNT]: the thresholds at those levels */
    float file_default;/* tierllm.sparse.default: the sparsity the file suggests */
    uint32_t calib_tokens;
    tl_sparsity_observe_fn observe;
    void *observe_user;
    double *col_bytes; /* [n_layer][TL_SITE_COUNT]: weight bytes per input channel of the
                          matrices each site feeds (set by the loader; NULL: 1 each) */
    double zeroed, seen; /* weight bytes whose input channel was zero, of those multiplied,
                            while a sparsity is in force, since reset */
} tl_sparsity;

/* Reads a converted file's table (none: sp->table stays NULL and only level 0 is allowed).
 * Refuses a table of the wrong version, size, or with thresholds that are negative, not
 * finite or decrease along a row. */
tl_status tl_sparsity_load(tl_sparsity *sp, const tl_gguf *g, int32_t n_layer, const char *what);
void tl_sparsity_free(tl_sparsity *sp);

/* Sets the sparsity in force, 0 <= level < 1 (the table's last entry is the largest
 * magnitude seen, so 1 would zero everything); level > 0 needs a table. Each site's level
 * comes from the allocation. */
tl_status tl_sparsity_set_level(tl_sparsity *sp, float level);
/* Sets each site's level directly (the allocation search); `level` records their
 * byte-weighted mean, as given. */
tl_status tl_sparsity_set_site_levels(tl_sparsity *sp, const float *site_level, float level);

/* The threshold of (layer, site) at `level` from the table, interpolated linearly. */
float tl_sparsity_threshold_at(const tl_sparsity *sp, int32_t layer, int site, double level);

/* At one site: shows x to the observer, then zeroes the channels below the threshold in
 * force (nothing at level 0). n rows of width floats, in place. */
void tl_sparsity_apply(tl_sparsity *sp, int32_t layer, int site, float *x, size_t n,
                       size_t width);

/* ---- calibration ---- */

/* Magnitudes seen at every (layer, site), as log-spaced histograms: TL_CALIB_BINS_PER_OCTAVE
 * bins per factor of two from 2^TL_CALIB_MIN_EXP to 2^TL_CALIB_MAX_EXP (smaller magnitudes,
 * zeros included, fall in the first bin, larger in the last), so memory does not grow with
 * the text and a quantile is exact to within one bin, 1/64 of an octave (about 1.1%). */
#define TL_CALIB_BINS_PER_OCTAVE 64
#define TL_CALIB_MIN_EXP (-40)
#define TL_CALIB_MAX_EXP 24
#define TL_CALIB_BINS ((TL_CALIB_MAX_EXP - TL_CALIB_MIN_EXP) * TL_CALIB_BINS_PER_OCTAVE)

typedef struct tl_sparsity_calib {
    int32_t n_layer;
    struct tl_budget *budget;
    uint64_t *hist;  /* [n_layer][TL_SITE_COUNT][TL_CALIB_BINS] */
    float *max_seen; /* [n_layer][TL_SITE_COUNT] */
} tl_sparsity_calib;

/* The histograms are taken from `budget` (the model's: they count in --mem-budget). */
tl_status tl_sparsity_calib_init(tl_sparsity_calib *c, int32_t n_layer, struct tl_budget *budget);
void tl_sparsity_calib_free(tl_sparsity_calib *c);
/* The observer to attach (user = the tl_sparsity_calib). */
void tl_sparsity_calib_observe(void *user, int32_t layer, int site, const float *x, size_t n,
                               size_t width);
/* The quantile table, [n_layer][TL_SITE_COUNT][TL_SPARSITY_LEVELS]: entry i is the upper
 * edge of the bin where the cumulative count first reaches i% of the values (entry 0 is 0,
 * entry 100 the largest magnitude seen; a level whose quantile falls in the first bin, that
 * of zeros and magnitudes under 2^TL_CALIB_MIN_EXP, is 0). Fails when some site saw nothing. */
tl_status tl_sparsity_calib_table(const tl_sparsity_calib *c, float *table);

#endif
