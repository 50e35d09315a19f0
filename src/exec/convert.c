/* convert.c - calibrate activation-sparsity thresholds and write them into a new GGUF
 * (convert.h says what holds and why). */
#include "exec/convert.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "base/out_file.h"
#include "base/status.h"
#include "base/budget.h"
#include "exec/flash_write.h"
#include "exec/neuron_calib.h"
#include "exec/model_handle.h"
#include "exec/perplexity.h"
#include "format/gguf.h"
#include "format/hf_folder.h"
#include "model/sparsity.h"

/* The quality curve's candidates, in increasing order (0 is the dense baseline). */
static const float curve_candidates[] = {0.0f,  0.05f, 0.10f, 0.15f, 0.20f, 0.25f,
                                         0.30f, 0.40f, 0.50f, 0.60f, 0.70f};
#define N_CANDIDATES ((int)(sizeof curve_candidates / sizeof curve_candidates[0]))
_Static_assert(N_CANDIDATES <= TL_CONVERT_CURVE_MAX, "the report holds the whole curve");

_Static_assert(TL_SPARSITY_ALLOC_POINTS == 21 && TL_SITE_COUNT == 4,
               "the report's allocation is the stored one");
#define ALLOC_STEP 0.05f  /* a site's level rises in these steps */
#define ALLOC_MAX 0.95f   /* the highest level a site takes */
#define ALLOC_UNTIL 0.90f /* the search stops once S reaches this */

tl_convert_params tl_convert_default_params(void) {
    tl_convert_params p;
    memset(&p, 0, sizeof p);
    p.alloc_tokens = 256;
    p.sparsity = -1.0f;
    p.max_ppl_rise = 0.02f;
    p.predictor_rank = 128;
    p.predictor_tokens = 512;
    p.predictor_recall = 0.9999;
    p.mp = tl_model_default_params();
    return p;
}

static tl_status check_paths(const tl_convert_params *p) {
    if (tl_hf_is_folder(p->in_path))
        return tl_error_set(TL_ERR_UNSUPPORTED, "convert reads GGUF files; %s is a folder",
                            p->in_path);
    struct stat a, b;
    if (stat(p->in_path, &a) != 0)
        return tl_error_set(TL_ERR_IO, "%s: %s", p->in_path, strerror(errno));
    if (stat(p->out_path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return tl_error_set(TL_ERR_INVALID, "the output %s is the input file: convert never "
                            "writes over its input", p->out_path);
    return tl_out_check_target(p->out_path);
}

/* Bytes of the predictors tl_neuron_calibrate fits from T rows (held until written). */
static uint64_t predictor_bytes(const tl_llama_hparams *hp, const tl_convert_params *p, size_t T) {
    uint64_t r = (uint64_t)(p->predictor_rank > 0 ? p->predictor_rank : 1);
    const uint64_t d = (uint64_t)hp->n_embd, f = (uint64_t)hp->n_ff;
    if (r > T) r = T;
    if (r > d) r = d;
    if (r > f) r = f;
    return (uint64_t)hp->n_layer * (r * d + f * r + f) * sizeof(float);
}

/* What the calibration run watches: every site for the histograms, and (a ReLU FFN
 * written by neuron) the first T rows of each layer's FFN input for its predictor. */
typedef struct calib_watch {
    tl_sparsity_calib *cal;
    float *X;      /* [n_layer][T][d], NULL: not kept */
    size_t T, d;
    size_t *rows;  /* [n_layer] kept so far */
} calib_watch;

static void watch(void *user, int32_t layer, int site, const float *x, size_t n, size_t width) {
    calib_watch *w = user;
    tl_sparsity_calib_observe(w->cal, layer, site, x, n, width);
    if (!w->X || site != TL_SITE_FFN_IN || width != w->d) return;
    const size_t have = w->rows[layer], take = n < w->T - have ? n : w->T - have;
    memcpy(w->X + ((size_t)layer * w->T + have) * w->d, x, take * w->d * sizeof(float));
    w->rows[layer] += take;
}

/* Runs the dense model over ids in windows of n_ctx, showing every site to the
 * histograms (and the FFN inputs to cw->X). */
static tl_status calibrate(tl_model *m, const int32_t *ids, size_t n, int32_t n_ctx,
                           calib_watch *cw) {
    tl_sparsity *sp = &m->lm.sparse;
    sp->observe = watch;
    sp->observe_user = cw;
    tl_status st = TL_OK;
    for (size_t a = 0; a < n && !st; a += (size_t)n_ctx) {
        const size_t len = n - a < (size_t)n_ctx ? n - a : (size_t)n_ctx;
        tl_context_params cp = tl_context_default_params();
        cp.n_ctx = (int32_t)len;
        tl_context *c = NULL;
        st = tl_context_open(m, &cp, &c);
        if (!st) st = tl_decode(c, ids + a, len, NULL);
        tl_context_close(c);
    }
    sp->observe = NULL;
    sp->observe_user = NULL;
    return st;
}

/* The held-out perplexity at each candidate; the default is the largest sparsity within
 * max_ppl_rise of the dense perplexity (0 when none is). */
static tl_status choose(tl_model *m, const int32_t *ids, size_t n, int32_t n_ctx,
                        float max_rise, float *logits, tl_convert_report *r) {
    r->chosen = 0.0f;
    for (int i = 0; i < N_CANDIDATES; i++) {
        tl_status st = tl_model_set_sparsity(m, curve_candidates[i]);
        double zeroed, seen;
        tl_model_sparsity_stats(m, 1, &zeroed, &seen);
        if (!st) st = tl_perplexity_into(m, ids, n, n_ctx, logits, &r->curve_ppl[i], NULL);
        if (st) return st;
        tl_model_sparsity_stats(m, 1, &zeroed, &seen);
        r->curve_sparsity[i] = curve_candidates[i];
        r->curve_reached[i] = seen > 0 ? zeroed / seen : 0.0;
        r->n_curve = i + 1;
        if (i > 0 && r->curve_ppl[i] <= r->curve_ppl[0] * (1.0 + max_rise))
            r->chosen = curve_candidates[i];
    }
    return tl_model_set_sparsity(m, 0.0f);
}

/* Each site's share of the layers' matrix bytes. */
static void site_shares(const tl_model *m, double share[TL_SITE_COUNT]) {
    const tl_llama_hparams *hp = &m->lm.hp;
    const double width[TL_SITE_COUNT] = {hp->n_embd, (double)hp->n_head * hp->head_dim,
                                         hp->n_embd, hp->n_ff};
    double total = 0;
    for (int s = 0; s < TL_SITE_COUNT; s++) {
        share[s] = 0;
        for (int32_t l = 0; l < hp->n_layer; l++)
            share[s] += m->lm.sparse.col_bytes[(size_t)l * TL_SITE_COUNT + s] * width[s];
        total += share[s];
    }
    for (int s = 0; s < TL_SITE_COUNT; s++) share[s] /= total;
}

static tl_status ppl_at(tl_model *m, const float *lv, float level, const int32_t *ids,
                        size_t n, int32_t n_ctx, float *logits, double *ppl) {
    tl_status st = tl_sparsity_set_site_levels(&m->lm.sparse, lv, level);
    return st ? st : tl_perplexity_into(m, ids, n, n_ctx, logits, ppl, NULL);
}

/* The greedy allocation (convert.h step 2) into r->alloc. */
static tl_status allocate(tl_model *m, const int32_t *ids, size_t n, int32_t n_ctx,
                          float *logits, tl_convert_report *r) {
    double share[TL_SITE_COUNT];
    site_shares(m, share);
    enum { MAX_PATH = 4 * 20 + 2 };
    float path_lv[MAX_PATH][TL_SITE_COUNT];
    double path_s[MAX_PATH];
    float lv[TL_SITE_COUNT] = {0};
    double s_now = 0, ppl_now;
    int len = 0;
    tl_status st = ppl_at(m, lv, 0.0f, ids, n, n_ctx, logits, &ppl_now);
    if (st) return st;
    r->alloc_evals = 1;
    memcpy(path_lv[len], lv, sizeof lv);
    path_s[len++] = 0;
    while (s_now < ALLOC_UNTIL && len < MAX_PATH) {
        int best = -1;
        double best_cost = 0, best_ppl = 0;
        for (int s = 0; s < TL_SITE_COUNT; s++) {
            if (lv[s] + ALLOC_STEP > ALLOC_MAX + 1e-6f || share[s] <= 0) continue;
            float cand[TL_SITE_COUNT];
            memcpy(cand, lv, sizeof cand);
            cand[s] += ALLOC_STEP;
            double ppl;
            if ((st = ppl_at(m, cand, (float)(s_now + share[s] * ALLOC_STEP), ids, n, n_ctx,
                             logits, &ppl)))
                return st;
            r->alloc_evals++;
            const double cost = (ppl - ppl_now) / (share[s] * ALLOC_STEP);
            if (best < 0 || cost < best_cost) {
                best = s;
                best_cost = cost;
                best_ppl = ppl;
            }
        }
        if (best < 0) break;
        lv[best] += ALLOC_STEP;
        s_now += share[best] * ALLOC_STEP;
        ppl_now = best_ppl;
        memcpy(path_lv[len], lv, sizeof lv);
        path_s[len++] = s_now;
    }
    r->alloc_steps = len - 1;
    /* the path read at S = i / (POINTS - 1); past its end, its last levels */
    for (int i = 0; i < TL_SPARSITY_ALLOC_POINTS; i++) {
        const double S = (double)i / (TL_SPARSITY_ALLOC_POINTS - 1);
        int k = 0;
        while (k + 1 < len && path_s[k + 1] < S) k++;
        for (int s = 0; s < TL_SITE_COUNT; s++) {
            if (k + 1 >= len) {
                r->alloc[i][s] = path_lv[len - 1][s];
                continue;
            }
            const double f = (S - path_s[k]) / (path_s[k + 1] - path_s[k]);
            r->alloc[i][s] = (float)(path_lv[k][s] + f * (path_lv[k + 1][s] - path_lv[k][s]));
        }
    }
    return tl_sparsity_set_level(&m->lm.sparse, 0.0f);
}

typedef struct copy_src {
    int fd;
    const tl_gguf *g;
    const char *path;
} copy_src;

static tl_status copy_fill(void *user, size_t index, uint64_t offset, void *dst, size_t len) {
    const copy_src *s = user;
    const uint64_t at = s->g->tensors[index].offset + offset;
    size_t done = 0;
    while (done < len) {
        const ssize_t got = pread(s->fd, (char *)dst + done, len - done, (off_t)(at + done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return tl_error_set(TL_ERR_IO, "%s: reading tensor '%s': %s", s->path,
                                s->g->tensors[index].name, strerror(errno));
        if (got == 0)
            return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' ends past the end of the file",
                                s->path, s->g->tensors[index].name);
        done += (size_t)got;
    }
    return TL_OK;
}

/* The input's keys and tensors (or, flash_layout, its tensors in that layout), then the
 * sparsity keys, into p->out_path. */
static tl_status write_output(const tl_convert_params *p, const tl_gguf *g,
                              const tl_llama_hparams *hp, const float *table, size_t table_n,
                              const float *alloc, float chosen, size_t calib_tokens,
                              const tl_neuron_predictors *np, uint64_t *tensor_bytes) {
    tl_gguf_writer *w = NULL;
    tl_flash_writer *fw = NULL;
    tl_budget *budget = NULL;
    tl_status st = tl_gguf_writer_open(&w);
    if (!st && p->flash_layout) {
        /* the writer's budget: the user's, or just what the largest site needs */
        uint64_t limit = p->mp.mem_budget ? p->mp.mem_budget : UINT64_MAX;
        const uint64_t held = np ? predictor_bytes(hp, p, np->rank) : 0; /* rank <= T */
        if (np && limit != UINT64_MAX) limit = held < limit ? limit - held : 1;
        if (!(st = tl_budget_open(limit, &budget)))
            st = tl_flash_writer_open(g, p->in_path, hp, np, budget, &fw);
        if (!st && tl_flash_writer_peak_bytes(fw) > tl_budget_limit(budget))
            st = tl_error_set(TL_ERR_NOMEM, "convert --layout flash builds each layer's "
                              "largest site tensor in memory: %.1f MiB, over the %.1f MiB "
                              "budget", tl_mib_up(tl_flash_writer_peak_bytes(fw)),
                              tl_budget_limit(budget) / 1048576.0);
    }
    for (uint64_t i = 0; !st && i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, "general.alignment") != 0) /* the writer's own alignment */
            st = tl_gguf_writer_copy_kv(w, &g->kv[i]);
    if (!st) st = tl_gguf_writer_set_u32(w, "tierllm.sparse.version", TL_SPARSITY_VERSION);
    if (!st) st = tl_gguf_writer_set_u32(w, "tierllm.sparse.levels", TL_SPARSITY_LEVELS);
    if (!st) st = tl_gguf_writer_set_u32(w, "tierllm.sparse.calib_tokens", (uint32_t)calib_tokens);
    if (!st) st = tl_gguf_writer_set_f32(w, "tierllm.sparse.default", chosen);
    if (!st)
        st = tl_gguf_writer_set_arr(w, "tierllm.sparse.thresholds", TL_GGUF_FLOAT32, table,
                                    (uint64_t)table_n);
    if (!st)
        st = tl_gguf_writer_set_arr(w, "tierllm.sparse.alloc", TL_GGUF_FLOAT32, alloc,
                                    (uint64_t)TL_SPARSITY_ALLOC_POINTS * TL_SITE_COUNT);
    *tensor_bytes = 0;
    for (uint64_t i = 0; !st && !fw && i < g->n_tensors; i++) {
        const tl_gguf_tensor *t = &g->tensors[i];
        st = tl_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne);
        *tensor_bytes += t->nbytes;
    }
    if (!st && fw) {
        st = tl_flash_writer_declare(fw, w);
        *tensor_bytes = tl_flash_writer_tensor_bytes(fw);
    }
    copy_src src = {-1, g, p->in_path};
    if (!st && !fw && (src.fd = open(p->in_path, O_RDONLY | O_CLOEXEC)) < 0)
        st = tl_error_set(TL_ERR_IO, "%s: %s", p->in_path, strerror(errno));
    if (!st) st = fw ? tl_gguf_writer_write(w, p->out_path, tl_flash_writer_fill, fw)
                     : tl_gguf_writer_write(w, p->out_path, copy_fill, &src);
    if (src.fd >= 0) close(src.fd);
    tl_flash_writer_close(fw);
    tl_budget_close(budget);
    tl_gguf_writer_close(w);
    return st;
}

tl_status tl_convert(const tl_convert_params *p, tl_convert_report *r) {
    memset(r, 0, sizeof *r);
    if (!p->in_path || !p->out_path || !p->calib_text)
        return tl_error_set(TL_ERR_INVALID, "convert needs an input, an output and "
                            "calibration text");
    if (p->flash_layout && (p->predictor_rank < 1 || p->predictor_tokens < 2 ||
                            !(p->predictor_recall > 0 && p->predictor_recall <= 1)))
        return tl_error_set(TL_ERR_INVALID, "convert: the neuron predictor's rank %d must be "
                            "at least 1, its calibration tokens %d at least 2 and its recall "
                            "%g in (0, 1]", (int)p->predictor_rank, (int)p->predictor_tokens,
                            p->predictor_recall);
    if (!(p->sparsity < 1) || !(p->max_ppl_rise >= 0))
        return tl_error_set(TL_ERR_INVALID, "convert: sparsity %g must be below 1 and the "
                            "perplexity limit %g not negative", (double)p->sparsity,
                            (double)p->max_ppl_rise);
    tl_status st = check_paths(p);
    if (st) return st;
    tl_gguf *g = NULL;
    if ((st = tl_gguf_open(p->in_path, &g))) return st;
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (!strncmp(g->kv[i].key, "tierllm.sparse.", 15) ||
            !strncmp(g->kv[i].key, "tierllm.layout", 14)) {
            st = tl_error_set(TL_ERR_INVALID, "%s is already converted (it has the key %.60s): "
                              "convert the original file", p->in_path, g->kv[i].key);
            tl_gguf_free(g);
            return st;
        }
    /* a ReLU FFN written by neuron keeps the FFN inputs of its first calibration rows
     * for the predictors (outside the model's budget, which gives up their bytes) */
    tl_llama_hparams ghp;
    if ((st = tl_llama_read_hparams(g, &ghp))) {
        tl_gguf_free(g);
        return st;
    }
    const int by_neuron = p->flash_layout && (ghp.ffn_gate_relu || ghp.ffn_relu);
    const size_t T = by_neuron ? (size_t)p->predictor_tokens : 0;
    const uint64_t x_bytes = (uint64_t)T * (uint64_t)ghp.n_embd * (uint64_t)ghp.n_layer * 4;
    tl_model_params mp = p->mp;
    mp.sparsity = 0.0f;
    if (mp.mem_budget && x_bytes >= mp.mem_budget) {
        tl_gguf_free(g);
        return tl_error_set(TL_ERR_NOMEM, "the neuron predictors' calibration rows need %.1f "
                            "MiB, over the %.1f MiB budget: lower --predictor-tokens",
                            tl_mib_up(x_bytes), mp.mem_budget / 1048576.0);
    }
    if (mp.mem_budget) mp.mem_budget -= x_bytes;
    calib_watch cw = {NULL, NULL, T, (size_t)ghp.n_embd, NULL};
    tl_neuron_predictors np = {0};
    tl_model *m = NULL;
    int32_t *ids = NULL;
    float *table = NULL;
    tl_sparsity_calib cal = {0};
    void *logits = NULL;
    size_t n = 0;
    if ((st = tl_model_open(p->in_path, &mp, &m))) goto out;
    const int32_t n_ctx = p->n_ctx > 0 ? p->n_ctx
                          : m->lm.hp.n_ctx_train < 512 ? m->lm.hp.n_ctx_train : 512;
    if (n_ctx < 2 || (st = tl_llama_check_context(&m->lm, n_ctx))) {
        if (!st) st = tl_error_set(TL_ERR_INVALID, "convert: a window of %d tokens", (int)n_ctx);
        goto out;
    }
    for (size_t cap = p->calib_len + 2;;) { /* again at the size it needs, if that is more */
        free(ids);
        if (!(ids = malloc(cap * sizeof *ids))) {
            st = tl_error_set(TL_ERR_NOMEM, "out of memory for the calibration tokens");
            goto out;
        }
        st = tl_tokenize(m, p->calib_text, p->calib_len, 1, ids, cap, &n);
        if (!st || n <= cap) break;
        cap = n;
    }
    if (st) goto out;
    if (n < TL_CONVERT_MIN_CALIB_TOKENS) {
        st = tl_error_set(TL_ERR_INVALID, "the calibration text is %zu tokens; at least %d are "
                          "needed", n, TL_CONVERT_MIN_CALIB_TOKENS);
        goto out;
    }
    r->calib_tokens = n / 4 * 3;
    r->heldout_tokens = n - r->calib_tokens;
    const int32_t L = m->lm.hp.n_layer;
    const size_t table_n = (size_t)L * TL_SITE_COUNT * TL_SPARSITY_LEVELS;
    const size_t na = (size_t)(p->alloc_tokens > 1 ? p->alloc_tokens : 2);
    /* the evaluations' logits, from the budget before the first context places the
     * weights in what is left of it */
    const size_t rows = tl_perplexity_rows(r->heldout_tokens > na ? r->heldout_tokens : na, n_ctx);
    if ((st = tl_budget_alloc(m->lm.budget, rows * (size_t)m->lm.hp.n_vocab * sizeof(float), 0,
                              "convert's perplexity logits", &logits)) ||
        (st = tl_sparsity_calib_init(&cal, L, m->lm.budget)))
        goto out;
    cw.cal = &cal;
    if (T) {
        cw.T = T < r->calib_tokens ? T : r->calib_tokens; /* (X sized for T) */
        cw.X = malloc((size_t)x_bytes);
        cw.rows = calloc((size_t)L, sizeof *cw.rows);
        if (!cw.X || !cw.rows) {
            st = tl_error_set(TL_ERR_NOMEM, "out of memory for the predictors' rows");
            goto out;
        }
    }
    if ((st = calibrate(m, ids, r->calib_tokens, n_ctx, &cw))) goto out;
    if (!(table = malloc(table_n * sizeof *table))) {
        st = tl_error_set(TL_ERR_NOMEM, "out of memory for the threshold table");
        goto out;
    }
    if ((st = tl_sparsity_calib_table(&cal, table))) goto out;
    tl_sparsity_calib_free(&cal);
    /* the model evaluates its own candidates with the table it is about to carry */
    if (!(m->lm.sparse.table = malloc(table_n * sizeof *table))) {
        st = tl_error_set(TL_ERR_NOMEM, "out of memory for the threshold table");
        goto out;
    }
    memcpy(m->lm.sparse.table, table, table_n * sizeof *table);
    if (p->uniform) {
        for (int i = 0; i < TL_SPARSITY_ALLOC_POINTS; i++)
            for (int s = 0; s < TL_SITE_COUNT; s++)
                r->alloc[i][s] = fminf((float)i / (TL_SPARSITY_ALLOC_POINTS - 1), 0.99f);
    } else {
        const size_t from = r->calib_tokens > na ? r->calib_tokens - na : 0;
        if ((st = allocate(m, ids + from, r->calib_tokens - from, n_ctx, logits, r))) goto out;
    }
    if (!(m->lm.sparse.alloc = malloc(sizeof r->alloc))) {
        st = tl_error_set(TL_ERR_NOMEM, "out of memory for the allocation");
        goto out;
    }
    memcpy(m->lm.sparse.alloc, r->alloc, sizeof r->alloc);
    if (p->sparsity >= 0) r->chosen = p->sparsity;
    else if ((st = choose(m, ids + r->calib_tokens, r->heldout_tokens, n_ctx, p->max_ppl_rise,
                          logits, r)))
        goto out;
    /* the flash writer takes a budget of the model's size: the model goes first */
    const tl_llama_hparams hp = m->lm.hp;
    tl_budget_free(m->lm.budget, logits);
    logits = NULL;
    tl_model_close(m);
    m = NULL;
    for (int32_t l = 0; cw.X && l < L; l++)
        if (cw.rows[l] != cw.T) {
            st = tl_error_set(TL_ERR_INVALID, "calibration kept %zu feed-forward inputs of layer "
                              "%d, not %zu", cw.rows[l], (int)l, cw.T);
            goto out;
        }
    if (cw.X) { /* the predictors, from the rows kept: in a budget of what the rows and
                   the predictors themselves leave */
        tl_budget *nb = NULL;
        const uint64_t held = predictor_bytes(&hp, p, cw.T);
        if (mp.mem_budget && held >= mp.mem_budget)
            st = tl_error_set(TL_ERR_NOMEM, "the neuron predictors need %.1f MiB, over the "
                              "%.1f MiB budget left", tl_mib_up(held), mp.mem_budget / 1048576.0);
        if (!st && !(st = tl_budget_open(mp.mem_budget ? mp.mem_budget - held : UINT64_MAX, &nb)))
            st = tl_neuron_calibrate(g, p->in_path, &hp, cw.X, cw.T, (size_t)p->predictor_rank,
                                     p->predictor_recall, nb, &np);
        tl_budget_close(nb);
        free(cw.X);
        cw.X = NULL;
        if (st) goto out;
        r->neurons = np.info;
    }
    st = write_output(p, g, &hp, table, table_n, &r->alloc[0][0], r->chosen, r->calib_tokens,
                      cw.rows ? &np : NULL, &r->tensor_bytes);
out:
    free(cw.X);
    free(cw.rows);
    tl_neuron_predictors_free(&np);
    tl_sparsity_calib_free(&cal);
    if (m) tl_budget_free(m->lm.budget, logits);
    free(table);
    free(ids);
    tl_model_close(m);
    tl_gguf_free(g);
    return st;
}
