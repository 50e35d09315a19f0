/* test_sparsity.c - activation sparsity (model/sparsity.h) against plain references:
 * the calibration table's quantiles against the exact quantiles of the same values (sorted),
 * within one histogram bin; thresholding against a scalar loop; interpolation by hand;
 * level 0 leaves inputs untouched; hostile tables in a file are refused with messages.
 * Model-level agreement with NumPy and the quality curve are in tests/flash_cli.sh. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "base/budget.h"
#include "format/gguf.h"
#include "model/sparsity.h"

static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* One bin is 2^(1/64): a quantile read off the histogram is within that factor. */
#define BIN_FACTOR 1.0109f

static void test_calibration_quantiles(void) {
    tl_budget *b = NULL;
    CHECK(tl_budget_open(64 << 20, &b) == TL_OK);
    tl_sparsity_calib c;
    CHECK(tl_sparsity_calib_init(&c, 2, b) == TL_OK);
    enum { N = 20000, W = 100 };
    float *x = malloc(N * sizeof *x), *mag = malloc(N * sizeof *mag);
    uint64_t rng = 12345;
    for (int site = 0; site < TL_SITE_COUNT; site++)
        for (int32_t l = 0; l < 2; l++) {
            /* magnitudes spread over six octaves, signs mixed, a few exact zeros */
            for (int i = 0; i < N; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                const double u = (double)(rng >> 11) / 9007199254740992.0;
                x[i] = (float)(exp2(-3.0 + 6.0 * u) * ((rng >> 3) & 1 ? 1 : -1) * (1 + l + site));
                if (i % 997 == 0) x[i] = 0.0f;
            }
            for (int r = 0; r < N / W; r++) tl_sparsity_calib_observe(&c, l, site, x + r * W, 1, W);
        }
    float *table = malloc((size_t)2 * TL_SITE_COUNT * TL_SPARSITY_LEVELS * sizeof *table);
    CHECK(tl_sparsity_calib_table(&c, table) == TL_OK);
    /* the last (layer, site) seen used the same rng stream state order: recompute its
     * values and check every quantile of the last one exactly against sorting */
    for (int i = 0; i < N; i++) mag[i] = fabsf(x[i]);
    qsort(mag, N, sizeof *mag, cmp_float);
    const float *t = table + ((size_t)1 * TL_SITE_COUNT + TL_SITE_COUNT - 1) * TL_SPARSITY_LEVELS;
    CHECK(t[0] == 0.0f);
    CHECK(t[TL_SPARSITY_LEVELS - 1] == mag[N - 1]);
    int bad = 0;
    for (int i = 1; i < TL_SPARSITY_LEVELS - 1; i++) {
        /* the exact quantile: the value below which i% of the values fall */
        const float q = mag[(size_t)((double)N * i / 100.0) - 1];
        if (t[i] < t[i - 1]) bad++;
        if (q > 0 && !(t[i] >= q / BIN_FACTOR && t[i] <= q * BIN_FACTOR)) {
            if (bad < 3) printf("level %d: table %g, exact %g\n", i, (double)t[i], (double)q);
            bad++;
        }
        /* the share below t[i] is at least i% (thresholds round up to a bin's top) */
        size_t below = 0;
        while (below < N && mag[below] < t[i]) below++;
        if ((double)below < (double)N * i / 100.0 - 1) bad++;
    }
    CHECK(bad == 0);
    free(table);
    tl_sparsity_calib_free(&c);
    /* a site that saw nothing is an error, not a table of zeros */
    CHECK(tl_sparsity_calib_init(&c, 1, b) == TL_OK);
    float t1[TL_SITE_COUNT * TL_SPARSITY_LEVELS];
    CHECK(tl_sparsity_calib_table(&c, t1) == TL_ERR_INVALID);
    tl_sparsity_calib_free(&c);
    CHECK(tl_budget_used(b) == 0);
    tl_budget_close(b);
    free(x);
    free(mag);
}

/* A tl_sparsity with a hand-made table: site s of layer l has t[i] = (l + 1) * (s + 1) * i. */
static void make_table(tl_sparsity *sp, int32_t n_layer) {
    memset(sp, 0, sizeof *sp);
    sp->n_layer = n_layer;
    sp->thr = calloc((size_t)n_layer * TL_SITE_COUNT, sizeof *sp->thr);
    sp->table = malloc((size_t)n_layer * TL_SITE_COUNT * TL_SPARSITY_LEVELS * sizeof *sp->table);
    for (int32_t l = 0; l < n_layer; l++)
        for (int s = 0; s < TL_SITE_COUNT; s++)
            for (int i = 0; i < TL_SPARSITY_LEVELS; i++)
                sp->table[((size_t)l * TL_SITE_COUNT + s) * TL_SPARSITY_LEVELS + i] =
                    (float)((l + 1) * (s + 1) * i);
}

static int observed;
static void count_observe(void *user, int32_t layer, int site, const float *x, size_t n,
                          size_t width) {
    (void)user; (void)layer; (void)site; (void)x;
    observed += (int)(n * width);
}

static void test_apply(void) {
    tl_sparsity sp;
    make_table(&sp, 3);
    /* interpolation: level 0.255 is 25.5 along the table */
    CHECK(fabsf(tl_sparsity_threshold_at(&sp, 2, TL_SITE_FFN_MID, 0.255) - 3 * 4 * 25.5f) < 1e-3f);
    CHECK(tl_sparsity_threshold_at(&sp, 1, TL_SITE_ATTN_IN, 0.0) == 0.0f);
    CHECK(tl_sparsity_set_level(&sp, 1.0f) == TL_ERR_INVALID);
    CHECK(tl_sparsity_set_level(&sp, -0.1f) == TL_ERR_INVALID);
    CHECK(tl_sparsity_set_level(&sp, 0.4f) == TL_OK);
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = (float)((i % 2 ? -1 : 1) * (i * 37 % 499));
    memcpy(y, x, sizeof x);
    sp.observe = count_observe;
    tl_sparsity_apply(&sp, 1, TL_SITE_FFN_IN, y, 4, 16);
    CHECK(observed == 64);
    const float t = 2 * 3 * 40.0f; /* layer 1, site 2, level 40 */
    int zeroed = 0, wrong = 0;
    for (int i = 0; i < 64; i++) {
        const float want = fabsf(x[i]) < t ? 0.0f : x[i];
        wrong += y[i] != want;
        zeroed += fabsf(x[i]) < t;
    }
    CHECK(wrong == 0);
    CHECK(zeroed > 0 && zeroed < 64);
    CHECK(sp.zeroed == (uint64_t)zeroed && sp.seen == 64);
    /* level 0: untouched, bit for bit, and the observer still sees the inputs */
    CHECK(tl_sparsity_set_level(&sp, 0.0f) == TL_OK);
    memcpy(y, x, sizeof x);
    tl_sparsity_apply(&sp, 1, TL_SITE_FFN_IN, y, 4, 16);
    CHECK(memcmp(x, y, sizeof x) == 0);
    CHECK(observed == 128);
    /* without a table only 0 is allowed */
    free(sp.table);
    sp.table = NULL;
    CHECK(tl_sparsity_set_level(&sp, 0.3f) == TL_ERR_INVALID);
    tl_sparsity_free(&sp);
}

/* A header whose metadata has the sparsity keys (thresholds `t`, n of them). */
static float alloc[TL_SPARSITY_ALLOC_POINTS * TL_SITE_COUNT];

static tl_status load_keys(uint32_t version, const float *t, uint64_t n, float deflt,
                           tl_sparsity *sp) {
    tl_gguf_writer *w = NULL;
    tl_gguf *g = NULL;
    tl_status st = tl_gguf_writer_open(&w);
    if (!st) st = tl_gguf_writer_set_u32(w, "tierllm.sparse.version", version);
    if (!st) st = tl_gguf_writer_set_u32(w, "tierllm.sparse.levels", TL_SPARSITY_LEVELS);
    if (!st) st = tl_gguf_writer_set_u32(w, "tierllm.sparse.calib_tokens", 1000);
    if (!st) st = tl_gguf_writer_set_f32(w, "tierllm.sparse.default", deflt);
    if (!st) st = tl_gguf_writer_set_arr(w, "tierllm.sparse.thresholds", TL_GGUF_FLOAT32, t, n);
    if (!st)
        st = tl_gguf_writer_set_arr(w, "tierllm.sparse.alloc", TL_GGUF_FLOAT32, alloc,
                                    TL_SPARSITY_ALLOC_POINTS * TL_SITE_COUNT);
    if (!st) st = tl_gguf_writer_parse(w, "test", &g);
    if (!st) st = tl_sparsity_load(sp, g, 2, "test");
    tl_gguf_free(g);
    tl_gguf_writer_close(w);
    return st;
}

static void test_load(void) {
    enum { N = 2 * TL_SITE_COUNT * TL_SPARSITY_LEVELS };
    static float t[N + 1];
    for (int i = 0; i < N; i++) t[i] = (float)(i % TL_SPARSITY_LEVELS) * 0.01f;
    /* an allocation that keeps attn_in dense and puts the rest on the other three */
    for (int i = 0; i < TL_SPARSITY_ALLOC_POINTS; i++)
        for (int s = 0; s < TL_SITE_COUNT; s++)
            alloc[i * TL_SITE_COUNT + s] = s == 0 ? 0.0f : 0.9f * (float)i / (TL_SPARSITY_ALLOC_POINTS - 1);
    tl_sparsity sp;
    CHECK(load_keys(1, t, N, 0.4f, &sp) == TL_OK);
    CHECK(sp.table && sp.file_default == 0.4f && sp.calib_tokens == 1000);
    /* S = 0.525 lies halfway between the rows for 0.5 and 0.55: 0.9 x 0.525 at each site but
     * the first, whose thresholds stay 0 */
    CHECK(tl_sparsity_set_level(&sp, 0.525f) == TL_OK);
    CHECK(sp.site_level[0] == 0.0f && fabsf(sp.site_level[3] - 0.9f * 0.525f) < 1e-6f);
    CHECK(sp.thr[0] == 0.0f && sp.thr[TL_SITE_COUNT + 0] == 0.0f);
    CHECK(fabsf(sp.thr[2] - 0.9f * 0.525f) < 1e-5f); /* layer 0's table: t[i] = i / 100 */
    tl_sparsity_free(&sp);
    struct { uint32_t version; uint64_t n; float deflt; int bad_at; float bad; const char *words; }
    cases[] = {
        {2, N, 0.4f, -1, 0, "version 2"},
        {1, N - 1, 0.4f, -1, 0, "expected 808"},
        {1, N + 1, 0.4f, -1, 0, "expected 808"},
        {1, N, 1.0f, -1, 0, "tierllm.sparse.default"},
        {1, N, 0.4f, 5, -1.0f, "must be finite, non-negative"},
        {1, N, 0.4f, 7, NAN, "must be finite, non-negative"},
        {1, N, 0.4f, 150, 0.0f, "not decrease"},
        {1, N, 0.4f, -2, 0.1f, "start at 0"},  /* the allocation's row 0, site 0 */
        {1, N, 0.4f, -3, 1.5f, "lie in [0, 1]"},
        {1, N, 0.4f, -4, 0.0f, "not decrease"}, /* a level lower than the row before */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        /* bad_at >= 0: a threshold; -2, -3, -4: allocation entries 0, 41 and 83 (row 0 site
         * 0, row 10 site 1, row 20 site 3) */
        float *at = cases[k].bad_at >= 0 ? &t[cases[k].bad_at]
                    : cases[k].bad_at == -2 ? &alloc[0]
                    : cases[k].bad_at == -3 ? &alloc[10 * TL_SITE_COUNT + 1]
                    : cases[k].bad_at == -4 ? &alloc[20 * TL_SITE_COUNT + 3] : NULL;
        const float keep = at ? *at : 0;
        if (at) *at = cases[k].bad;
        tl_status st = load_keys(cases[k].version, t, cases[k].n, cases[k].deflt, &sp);
        CHECK(st != TL_OK);
        CHECK_MSG(strstr(tl_last_error(), cases[k].words) != NULL, "case %zu: %s", k,
                  tl_last_error());
        tl_sparsity_free(&sp);
        if (at) *at = keep;
    }
}

int main(void) {
    test_calibration_quantiles();
    test_apply();
    test_load();
    return tl_test_finish("test_sparsity");
}
