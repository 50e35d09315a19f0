/* sparsity.c - activation sparsity: thresholds from a quantile table, applied at the four
 * sites of each layer; calibration histograms that build the table (sparsity.h). */
#include "model/sparsity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/budget.h"
#include "base/status.h"

static const char *const site_names[TL_SITE_COUNT] = {"attn_in", "attn_out", "ffn_in",
                                                      "ffn_mid"};

const char *tl_sparsity_site_name(int site) {
    return site >= 0 && site < TL_SITE_COUNT ? site_names[site] : "?";
}

static size_t row_of(int32_t layer, int site) {
    return ((size_t)layer * TL_SITE_COUNT + (size_t)site) * TL_SPARSITY_LEVELS;
}

static tl_status get_u32(const tl_gguf *g, const char *key, uint32_t *out, const char *what) {
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    if (!kv || kv->type != TL_GGUF_UINT32)
        return tl_error_set(TL_ERR_FORMAT, "%s: %s is missing or not a uint32", what, key);
    *out = (uint32_t)kv->v.u;
    return TL_OK;
}

/* The allocation, when the file has one (none: every site at S). */
static tl_status load_alloc(tl_sparsity *sp, const tl_gguf *g, const char *what) {
    if (!tl_gguf_find(g, "tierllm.sparse.alloc")) return TL_OK;
    uint64_t n;
    const void *v;
    tl_status st;
    if ((st = tl_gguf_get_arr(g, "tierllm.sparse.alloc", TL_GGUF_FLOAT32, &n, &v))) return st;
    if (n != (uint64_t)TL_SPARSITY_ALLOC_POINTS * TL_SITE_COUNT)
        return tl_error_set(TL_ERR_FORMAT, "%s: tierllm.sparse.alloc has %llu entries, "
                            "expected %d", what, (unsigned long long)n,
                            TL_SPARSITY_ALLOC_POINTS * TL_SITE_COUNT);
    if (!(sp->alloc = malloc((size_t)n * sizeof *sp->alloc)))
        return tl_error_set(TL_ERR_NOMEM, "out of memory");
    memcpy(sp->alloc, v, (size_t)n * sizeof *sp->alloc);
    for (int i = 0; i < TL_SPARSITY_ALLOC_POINTS; i++)
        for (int s = 0; s < TL_SITE_COUNT; s++) {
            const float a = sp->alloc[i * TL_SITE_COUNT + s];
            if (!(a >= 0 && a <= 1) ||
                (i > 0 && a < sp->alloc[(i - 1) * TL_SITE_COUNT + s]) || (i == 0 && a != 0))
                return tl_error_set(TL_ERR_FORMAT, "%s: allocation entry %d of %s is %g: levels "
                                    "must lie in [0, 1], start at 0 and not decrease", what, i,
                                    site_names[s], (double)a);
        }
    return TL_OK;
}

tl_status tl_sparsity_load(tl_sparsity *sp, const tl_gguf *g, int32_t n_layer, const char *what) {
    memset(sp, 0, sizeof *sp);
    sp->n_layer = n_layer;
    if (!(sp->thr = calloc((size_t)n_layer * TL_SITE_COUNT, sizeof *sp->thr)))
        return tl_error_set(TL_ERR_NOMEM, "out of memory");
    if (!tl_gguf_find(g, "tierllm.sparse.version")) return TL_OK; /* not converted */
    uint32_t version = 0, levels = 0;
    tl_status st;
    if ((st = get_u32(g, "tierllm.sparse.version", &version, what)) ||
        (st = get_u32(g, "tierllm.sparse.levels", &levels, what)) ||
        (st = get_u32(g, "tierllm.sparse.calib_tokens", &sp->calib_tokens, what)))
        return st;
    if (version != TL_SPARSITY_VERSION)
        return tl_error_set(TL_ERR_UNSUPPORTED, "%s: sparsity tables of version %u; this "
                            "engine reads version %d (convert the original file again)", what,
                            version, TL_SPARSITY_VERSION);
    if (levels != TL_SPARSITY_LEVELS)
        return tl_error_set(TL_ERR_FORMAT, "%s: tierllm.sparse.levels is %u, expected %d", what,
                            levels, TL_SPARSITY_LEVELS);
    const tl_gguf_kv *d = tl_gguf_find(g, "tierllm.sparse.default");
    if (!d || d->type != TL_GGUF_FLOAT32 || !(d->v.f >= 0 && d->v.f < 1))
        return tl_error_set(TL_ERR_FORMAT, "%s: tierllm.sparse.default is missing or not a "
                            "sparsity in [0, 1)", what);
    sp->file_default = (float)d->v.f;
    uint64_t n;
    const void *v;
    if ((st = load_alloc(sp, g, what))) return st;
    if ((st = tl_gguf_get_arr(g, "tierllm.sparse.thresholds", TL_GGUF_FLOAT32, &n, &v)))
        return st;
    const uint64_t want = (uint64_t)n_layer * TL_SITE_COUNT * TL_SPARSITY_LEVELS;
    if (n != want)
        return tl_error_set(TL_ERR_FORMAT, "%s: tierllm.sparse.thresholds has %llu entries, "
                            "expected %llu (%d layers x %d sites x %d levels)", what,
                            (unsigned long long)n, (unsigned long long)want, (int)n_layer,
                            TL_SITE_COUNT, TL_SPARSITY_LEVELS);
    if (!(sp->table = malloc((size_t)n * sizeof *sp->table)))
        return tl_error_set(TL_ERR_NOMEM, "out of memory");
    memcpy(sp->table, v, (size_t)n * sizeof *sp->table);
    for (int32_t l = 0; l < n_layer; l++)
        for (int s = 0; s < TL_SITE_COUNT; s++) {
            const float *t = sp->table + row_of(l, s);
            for (int i = 0; i < TL_SPARSITY_LEVELS; i++)
                if (!(isfinite(t[i]) && t[i] >= 0 && (i == 0 || t[i] >= t[i - 1])))
                    return tl_error_set(TL_ERR_FORMAT, "%s: sparsity threshold %d of layer %d, "
                                        "%s, is %g: thresholds must be finite, non-negative "
                                        "and not decrease", what, i, (int)l, site_names[s],
                                        (double)t[i]);
        }
    return TL_OK;
}

void tl_sparsity_free(tl_sparsity *sp) {
    free(sp->table);
    free(sp->alloc);
    free(sp->col_bytes);
    free(sp->thr);
    memset(sp, 0, sizeof *sp);
}

float tl_sparsity_threshold_at(const tl_sparsity *sp, int32_t layer, int site, double level) {
    if (!sp->table || !(level > 0)) return 0.0f;
    const float *t = sp->table + row_of(layer, site);
    const double pos = level * (TL_SPARSITY_LEVELS - 1);
    int i = (int)pos;
    if (i >= TL_SPARSITY_LEVELS - 1) return t[TL_SPARSITY_LEVELS - 1];
    const double frac = pos - i;
    return (float)((double)t[i] + frac * ((double)t[i + 1] - (double)t[i]));
}

tl_status tl_sparsity_set_site_levels(tl_sparsity *sp, const float *site_level, float level) {
    int any = 0;
    for (int s = 0; s < TL_SITE_COUNT; s++) {
        if (!(site_level[s] >= 0 && site_level[s] < 1))
            return tl_error_set(TL_ERR_INVALID, "sparsity %g of %s is outside [0, 1)",
                                (double)site_level[s], site_names[s]);
        any |= site_level[s] > 0;
    }
    if (any && !sp->table)
        return tl_error_set(TL_ERR_INVALID, "sparsity %g needs thresholds calibrated for this "
                            "model: run `tierllm convert --calib TEXT` and use its output",
                            (double)level);
    sp->level = any ? level : 0.0f;
    for (int s = 0; s < TL_SITE_COUNT; s++) sp->site_level[s] = site_level[s];
    for (int32_t l = 0; l < sp->n_layer; l++)
        for (int s = 0; s < TL_SITE_COUNT; s++)
            sp->thr[(size_t)l * TL_SITE_COUNT + (size_t)s] =
                tl_sparsity_threshold_at(sp, l, s, site_level[s]);
    return TL_OK;
}

tl_status tl_sparsity_set_level(tl_sparsity *sp, float level) {
    if (!(level >= 0 && level < 1))
        return tl_error_set(TL_ERR_INVALID, "sparsity %g is outside [0, 1)", (double)level);
    float lv[TL_SITE_COUNT];
    const double pos = (double)level * (TL_SPARSITY_ALLOC_POINTS - 1);
    const int i = (int)pos;
    const double frac = pos - i;
    for (int s = 0; s < TL_SITE_COUNT; s++) {
        if (!sp->alloc) {
            lv[s] = level;
            continue;
        }
        const float a = sp->alloc[i * TL_SITE_COUNT + s];
        const float b = i + 1 < TL_SPARSITY_ALLOC_POINTS ? sp->alloc[(i + 1) * TL_SITE_COUNT + s] : a;
        lv[s] = (float)((double)a + frac * ((double)b - (double)a));
        if (lv[s] > 0.99f) lv[s] = 0.99f; /* a site's level stays below 1, as S does */
    }
    return tl_sparsity_set_site_levels(sp, lv, level);
}

void tl_sparsity_apply(tl_sparsity *sp, int32_t layer, int site, float *x, size_t n,
                       size_t width) {
    if (sp->observe) sp->observe(sp->observe_user, layer, site, x, n, width);
    if (!(sp->level > 0)) return;
    const size_t k = (size_t)layer * TL_SITE_COUNT + (size_t)site;
    const float t = sp->thr[k];
    uint64_t zeroed = 0;
    for (size_t i = 0; t > 0 && i < n * width; i++)
        if (fabsf(x[i]) < t) {
            x[i] = 0.0f;
            zeroed++;
        }
    const double col = sp->col_bytes ? sp->col_bytes[k] : 1.0;
    sp->zeroed += (double)zeroed * col;
    sp->seen += (double)(n * width) * col;
}

/* ---- calibration ---- */

tl_status tl_sparsity_calib_init(tl_sparsity_calib *c, int32_t n_layer, tl_budget *budget) {
    memset(c, 0, sizeof *c);
    c->n_layer = n_layer;
    c->budget = budget;
    const size_t sites = (size_t)n_layer * TL_SITE_COUNT;
    void *h = NULL, *mx = NULL;
    tl_status st = tl_budget_calloc(budget, sites * TL_CALIB_BINS * sizeof *c->hist,
                                    "calibration histograms", &h);
    if (!st) st = tl_budget_calloc(budget, sites * sizeof *c->max_seen, "calibration maxima", &mx);
    c->hist = h;
    c->max_seen = mx;
    if (st) tl_sparsity_calib_free(c);
    return st;
}

void tl_sparsity_calib_free(tl_sparsity_calib *c) {
    if (c->budget) {
        tl_budget_free(c->budget, c->hist);
        tl_budget_free(c->budget, c->max_seen);
    }
    memset(c, 0, sizeof *c);
}

/* The bin of magnitude a: floor((log2 a - MIN_EXP) * BINS_PER_OCTAVE), clamped. */
static int bin_of(float a) {
    if (!(a > 0)) return 0;
    const double b = (log2((double)a) - TL_CALIB_MIN_EXP) * TL_CALIB_BINS_PER_OCTAVE;
    if (b < 0) return 0;
    if (b >= TL_CALIB_BINS) return TL_CALIB_BINS - 1;
    return (int)b;
}

/* The upper edge of bin b. */
static float bin_top(int b) {
    return (float)exp2((double)TL_CALIB_MIN_EXP + (double)(b + 1) / TL_CALIB_BINS_PER_OCTAVE);
}

void tl_sparsity_calib_observe(void *user, int32_t layer, int site, const float *x, size_t n,
                               size_t width) {
    tl_sparsity_calib *c = user;
    const size_t k = (size_t)layer * TL_SITE_COUNT + (size_t)site;
    uint64_t *h = c->hist + k * TL_CALIB_BINS;
    float mx = c->max_seen[k];
    for (size_t i = 0; i < n * width; i++) {
        const float a = fabsf(x[i]);
        if (!isfinite(a)) continue; /* a non-finite activation says nothing of magnitudes */
        h[bin_of(a)]++;
        if (a > mx) mx = a;
    }
    c->max_seen[k] = mx;
}

tl_status tl_sparsity_calib_table(const tl_sparsity_calib *c, float *table) {
    for (int32_t l = 0; l < c->n_layer; l++)
        for (int s = 0; s < TL_SITE_COUNT; s++) {
            const size_t k = (size_t)l * TL_SITE_COUNT + (size_t)s;
            const uint64_t *h = c->hist + k * TL_CALIB_BINS;
            uint64_t total = 0;
            for (int b = 0; b < TL_CALIB_BINS; b++) total += h[b];
            if (total == 0)
                return tl_error_set(TL_ERR_INVALID, "calibration saw no activations at layer "
                                    "%d, %s", (int)l, site_names[s]);
            float *t = table + row_of(l, s);
            t[0] = 0.0f;
            uint64_t cum = 0;
            int b = -1;
            for (int i = 1; i < TL_SPARSITY_LEVELS - 1; i++) {
                /* the first bin whose cumulative count reaches i% of the values */
                const double want = (double)total * i / (TL_SPARSITY_LEVELS - 1);
                while ((double)cum < want && b + 1 < TL_CALIB_BINS) cum += h[++b];
                /* the first bin holds the zeros: a level within it zeroes nothing more */
                float top = b <= 0 ? 0.0f : bin_top(b);
                if (top > c->max_seen[k]) top = c->max_seen[k];
                t[i] = top > t[i - 1] ? top : t[i - 1];
            }
            t[TL_SPARSITY_LEVELS - 1] = c->max_seen[k] > t[TL_SPARSITY_LEVELS - 2]
                                            ? c->max_seen[k] : t[TL_SPARSITY_LEVELS - 2];
        }
    return TL_OK;
}
