/* llama_forward.c - the Llama forward pass over rows (tokens of one or many sequences).
 *
 * Read top to bottom this is the whole model (shapes in brackets, n = rows, d = n_embd,
 * qd = n_head*head_dim, kvd = n_head_kv*head_dim, f = n_ff):
 *   x[n][d] = token_embd[tokens]                      (by exec/, which holds the rows)
 *   (OPT: x += position_embd[pos] by tl_llama_add_positions)
 *   per layer (tl_llama_layer_forward):
 *               xn = norm(x) * attn_norm (+ bias)       norm: RMSNorm, or OPT's LayerNorm
 *               q[n][qd], k[n][kvd], v[n][kvd] = xn Wq^T, xn Wk^T, xn Wv^T (+ biases)
 *               rope(q, k) at each row's position (not OPT); append k, v to the row's
 *               sequence
 *               att[n][qd] = causal GQA attention of each row over its sequence's pages
 *                            (over its last n_swa positions with a sliding window)
 *               x += att Wo^T (+ bias)
 *               xn = norm(x) * ffn_norm (+ bias)
 *               x += (silu(xn Wgate^T) * (xn Wup^T)) Wdown^T      [n][f] inside
 *                 (ReLU-fied: relu(xn Wgate^T + b_gate) in place of silu(xn Wgate^T))
 *                 (OPT: x += relu(xn Wup^T + b_up) Wdown^T + b_down)
 *   logits = norm(x) * output_norm (+ bias)  Woutput^T            (tl_llama_logits)
 * With activation sparsity (model/sparsity.h) the inputs of each matrix product whose
 * magnitude is under the layer's threshold for that input are zeroed first. In the flash
 * layout (model/flash_layout.h) the matrices that share an input are one site tensor of
 * runs by input channel, and a product takes only the runs of its non-zero inputs
 * (site_products).
 * All rows go through each matrix at once (matrix-matrix products), whether they are a
 * prompt of one sequence or one token of each of many sequences. Weights are made
 * resident by the caller (exec/) around each layer, or for a streamed flash site, read by
 * exec/ through m->fetch_runs when its input is known; this file never does IO.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "model/llama.h"
#include "model/flash_layout.h"
#include "model/ops.h"
#include "base/status.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"

int32_t tl_llama_attn_block_rows(const tl_llama_hparams *hp, int32_t max_ctx) {
    const size_t group = (size_t)(hp->n_head / hp->n_head_kv);
    size_t block = TL_ATTN_BLOCK_SCORE_BYTES /
                   (group * (size_t)(max_ctx > 0 ? max_ctx : 1) * sizeof(float));
    return (int32_t)(block < 1 ? 1 : block > TL_ATTN_BLOCK_MAX_ROWS ? TL_ATTN_BLOCK_MAX_ROWS : block);
}

typedef struct scratch_buf { float **ptr; size_t floats; const char *what; } scratch_buf;

/* One table serves sizing and allocation, so the budget check before a run is exact. */
static size_t scratch_table(const tl_llama *m, tl_llama_scratch *s, int32_t max_rows,
                            int32_t max_ctx, int32_t page_tokens, scratch_buf *t) {
    const tl_llama_hparams *hp = &m->hp;
    const size_t nr = (size_t)max_rows, d = (size_t)hp->n_embd, f = (size_t)hp->n_ff;
    const size_t qd = (size_t)hp->n_head * hp->head_dim;
    const size_t kvd = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t threads = (size_t)tl_pool_threads(m->pool);
    const size_t group = (size_t)(hp->n_head / hp->n_head_kv);
    size_t widest = f > d ? f : d;
    if (qd > widest) widest = qd;
    /* matrix products of max_rows rows, and of a page of rows (attention's recompute) */
    s->mm_scratch_floats = tl_matmul_scratch_floats(
        widest, nr > (size_t)page_tokens ? nr : (size_t)page_tokens);
    if (m->flash) { /* products by runs: pieces of at most the longest run */
        size_t longest = 0;
        for (int site = 0; site < TL_SITE_COUNT; site++) {
            const size_t run = (size_t)tl_flash_site_run(hp, site);
            if (run > longest) longest = run;
        }
        const size_t rf = tl_colmat_scratch_floats(longest, nr);
        if (rf > s->mm_scratch_floats) s->mm_scratch_floats = rf;
    }
    const size_t block = (size_t)tl_llama_attn_block_rows(hp, max_ctx);
    s->attn_rows = (int32_t)(block < nr ? block : nr);
    /* per thread: the block's scores, and one kv head's K or V columns of a stored page
     * decoded (tl_kv_view_head) */
    s->attn_floats = (size_t)s->attn_rows * group * (size_t)max_ctx +
                     (size_t)page_tokens * (size_t)hp->head_dim;
    size_t n = 0;
    t[n++] = (scratch_buf){&s->xn, nr * (d > qd ? d : qd), "activations"};
    t[n++] = (scratch_buf){&s->q, nr * qd, "activations"};
    t[n++] = (scratch_buf){&s->k, nr * kvd, "activations"};
    t[n++] = (scratch_buf){&s->v, nr * kvd, "activations"};
    t[n++] = (scratch_buf){&s->att_out, nr * qd, "activations"};
    t[n++] = (scratch_buf){&s->gate, nr * f, "activations"};
    t[n++] = (scratch_buf){&s->up, nr * f, "activations"};
    t[n++] = (scratch_buf){&s->attn, threads * s->attn_floats, "attention scratch"};
    t[n++] = (scratch_buf){(float **)(void *)&s->attn_block, nr + 1, "attention scratch"};
    /* recompute: per page of a sequence, its index, rows, and two pointers */
    const size_t pages = ((size_t)max_ctx + (size_t)page_tokens - 1) / (size_t)page_tokens;
    t[n++] = (scratch_buf){&s->rc_block, pages * (2 + 2 * sizeof(void *) / sizeof(float)),
                           "recompute scratch"};
    if (m->flash) /* ints, as many as the widest input's channels */
        t[n++] = (scratch_buf){(float **)(void *)&s->run_chan, widest, "flash channels"};
    if (hp->ffn_neurons) { /* model/ops_neurons.c */
        size_t rank = 1;
        for (int32_t l = 0; l < hp->n_layer; l++)
            if (m->layers[l].pred_v.rows > rank) rank = m->layers[l].pred_v.rows;
        t[n++] = (scratch_buf){(float **)(void *)&s->neuron_idx, 3 * f, "neuron places"};
        t[n++] = (scratch_buf){&s->pred_t, nr * rank, "neuron predictor"};
        t[n++] = (scratch_buf){&s->neuron_tmp, threads * (2 * nr + d), "neuron products"};
        t[n++] = (scratch_buf){&s->neuron_norm, f, "neuron products"};
    }
    t[n++] = (scratch_buf){&s->mm_scratch,
                           threads * (s->mm_scratch_floats ? s->mm_scratch_floats : 1),
                           "matmul scratch"};
    return n;
}

uint64_t tl_llama_scratch_bytes(const tl_llama *m, int32_t max_rows, int32_t max_ctx,
                                int32_t page_tokens) {
    tl_llama_scratch s;
    scratch_buf t[20];
    size_t n = scratch_table(m, &s, max_rows, max_ctx, page_tokens, t);
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += t[i].floats * sizeof(float) + 64;
    return bytes;
}

tl_status tl_llama_scratch_init(tl_llama *m, int32_t max_rows, int32_t max_ctx,
                                int32_t page_tokens, tl_llama_scratch *s) {
    memset(s, 0, sizeof *s);
    if (max_rows <= 0 || max_ctx <= 0 || page_tokens <= 0)
        return tl_error_set(TL_ERR_INVALID, "rows %d, context %d and page size %d must be "
                            "positive", (int)max_rows, (int)max_ctx, (int)page_tokens);
    s->max_rows = max_rows;
    s->max_ctx = max_ctx;
    s->page_tokens = page_tokens;
    s->max_pages = (max_ctx + page_tokens - 1) / page_tokens;
    scratch_buf t[20];
    size_t n = scratch_table(m, s, max_rows, max_ctx, page_tokens, t);
    for (size_t i = 0; i < n; i++) {
        tl_status st = tl_budget_calloc(m->budget, t[i].floats * sizeof(float), t[i].what,
                                        (void **)t[i].ptr);
        if (st) {
            tl_llama_scratch_free(m, s);
            return st;
        }
    }
    uint8_t *b = (uint8_t *)s->rc_block; /* 64-byte aligned: pointers first */
    s->rc_x = (const float **)(void *)b;
    s->rc_out = (float **)(void *)(b + (size_t)s->max_pages * sizeof(void *));
    s->rc_page = (int32_t *)(void *)(b + 2 * (size_t)s->max_pages * sizeof(void *));
    s->rc_rows = s->rc_page + s->max_pages;
    return TL_OK;
}

/* Floats of the page-selection buffers: ub, score, tmp, the bounds pointers (2 floats
 * each), sel and the row flags (bytes), and two doubles per thread. */
static size_t select_floats(const tl_llama *m, int32_t max_rows, int32_t max_ctx,
                            int32_t page_tokens) {
    const size_t pages = ((size_t)max_ctx + (size_t)page_tokens - 1) / (size_t)page_tokens;
    const size_t nr = (size_t)max_rows, threads = (size_t)tl_pool_threads(m->pool);
    return (size_t)m->hp.n_head * pages + 2 * pages + 2 * pages + 2 + (nr * pages + nr + 3) / 4 +
           4 * threads + 4;
}

uint64_t tl_llama_select_bytes(const tl_llama *m, int32_t max_rows, int32_t max_ctx,
                               int32_t page_tokens) {
    return select_floats(m, max_rows, max_ctx, page_tokens) * sizeof(float) + 64;
}

tl_status tl_llama_select_init(tl_llama *m, tl_llama_scratch *s, const tl_kv_select *sp) {
    tl_status st = tl_budget_calloc(m->budget,
                                    select_floats(m, s->max_rows, s->max_ctx, s->page_tokens) *
                                        sizeof(float), "page selection scratch",
                                    (void **)&s->sel_block);
    if (st) return st;
    s->select = *sp;
    const size_t P = (size_t)s->max_pages, threads = (size_t)tl_pool_threads(m->pool);
    const int32_t max_rows = s->max_rows;
    uint8_t *b = (uint8_t *)s->sel_block; /* calloc'd from the budget: 64-byte aligned */
    s->mass_kept = (double *)(void *)b;
    b += 2 * threads * sizeof(double);
    s->sel_bounds = (const float **)(void *)b;
    b += P * sizeof(float *);
    s->sel_ub = (float *)(void *)b;
    b += (size_t)m->hp.n_head * P * sizeof(float);
    s->sel_score = (float *)(void *)b;
    b += P * sizeof(float);
    s->sel_tmp = (float *)(void *)b;
    b += P * sizeof(float);
    s->sel = b;
    s->row_selective = b + (size_t)max_rows * P;
    return TL_OK;
}

void tl_llama_scratch_free(tl_llama *m, tl_llama_scratch *s) {
    float *bufs[] = {s->xn, s->q, s->k, s->v, s->att_out, s->gate, s->up, s->attn,
                     (float *)(void *)s->attn_block, s->rc_block, s->mm_scratch,
                     s->sel_block, (float *)(void *)s->run_chan,
                     (float *)(void *)s->neuron_idx, s->pred_t, s->neuron_tmp, s->neuron_norm};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) tl_budget_free(m->budget, bufs[i]);
    memset(s, 0, sizeof *s);
}

static void matmul(tl_llama *m, tl_llama_scratch *s, const tl_weight *w, const float *X,
                   size_t n, float *Y) {
    tl_op_matmul(m, w, X, n, Y, s->mm_scratch, s->mm_scratch_floats);
}

/* The products of the nw matrices ws fed by one sparsity site with n rows of X: Ys[i] =
 * X ws[i]^T. Row-major matrices go through matmul; in the flash layout the site's runs
 * of the channels non-zero in some row are multiplied (model/flash_layout.h). */
static tl_status site_products(tl_llama *m, tl_llama_scratch *s, int32_t l, int site,
                               const tl_weight *const *ws, size_t nw, const float *X, size_t n,
                               float *const *Ys) {
    const tl_weight *w = &m->layers[l].site[site];
    if (!w->name) {
        tl_op_matmul_multi(m, ws, nw, X, n, Ys, s->mm_scratch, s->mm_scratch_floats);
        return TL_OK;
    }
    size_t lens[TL_MATMUL_MULTI_MAX];
    for (size_t i = 0; i < nw; i++) lens[i] = ws[i]->rows;
    tl_status st = tl_op_runs_product(m, w, X, n, Ys, lens, nw, s->run_chan, s->mm_scratch,
                                      s->mm_scratch_floats);
    return st ? tl_error_wrap(st, "layer %d", (int)l) : TL_OK;
}

static void add_rows(float *x, const float *y, size_t count) {
    for (size_t i = 0; i < count; i++) x[i] += y[i];
}

/* ---- attention over the paged KV cache ---- */

typedef struct attn_job {
    tl_llama *m;
    tl_llama_scratch *s;
    struct tl_kv *kv;
    int32_t layer;     /* in the KV cache (the stage's layer index) */
    const tl_llama_rows *rows;
    const float *q;
    float *out;
    /* First failure (a page not in memory: a programmer error). Tasks on several pool
     * threads may fail at once, so the first one sets it by compare-and-swap from TL_OK;
     * the caller reads it once tl_pool_run has returned, when every task has finished. */
    atomic_int status;
} attn_job;

static void attn_fail(attn_job *j, tl_status st) {
    int ok = TL_OK;
    atomic_compare_exchange_strong_explicit(&j->status, &ok, (int)st, memory_order_relaxed,
                                            memory_order_relaxed);
}

/* ---- recompute instead of load (kv/kv_cache.h) ----
 * Before attention at a layer that recomputes, every viewable page of the step's
 * sequences held as input rows gets its K (with RoPE at the page's positions) and V back,
 * one task per page: the two products of page_tokens rows, in the page's own frame. */

/* y[i] += b[i]: a bias after a matrix product. */
static void add_bias(float *y, const void *b, size_t n) {
    const float *bf = b;
    for (size_t i = 0; i < n; i++) y[i] += bf[i];
}

/* n rows of `width` each get the same bias. */
static void add_bias_rows(float *y, const tl_weight *b, size_t n, size_t width) {
    if (!b->name) return;
    for (size_t i = 0; i < n; i++) add_bias(y + i * width, b->data, width);
}

/* RoPE of one row of n_heads heads at position pos, as the model's family rotates
 * (none for learned positions). */
static void rope(const tl_llama *m, float *x, int n_heads, int32_t pos) {
    const tl_llama_hparams *hp = &m->hp;
    if (hp->pos_learned) return;
    tl_op_rope(x, n_heads, hp->head_dim, hp->rope_dim, pos, hp->rope_base, hp->rope_mode,
               m->rope_freqs.name ? m->rope_freqs.data : m->rope_divisors);
}

/* RoPE of n rows of q (n_head heads each) and k (n_head_kv heads), each row at its
 * position: the frequencies once, each row's angles once for its q and its k. */
static void rope_rows(const tl_llama *m, const tl_llama_rows *rows, float *q, float *k) {
    const tl_llama_hparams *hp = &m->hp;
    if (hp->pos_learned) return;
    const size_t qd = (size_t)hp->n_head * hp->head_dim;
    const size_t kvd = (size_t)hp->n_head_kv * hp->head_dim;
    const float *div = m->rope_freqs.name ? m->rope_freqs.data : m->rope_divisors;
    double freq[2048]; /* rope_dim <= head_dim <= 4096 (the loader's bound) */
    float cs[4096];
    tl_op_rope_freqs(hp->rope_dim, hp->rope_base, freq);
    for (int32_t i = 0; i < rows->n; i++) {
        tl_op_rope_angles(hp->rope_dim, rows->pos[i], freq, div, cs);
        tl_op_rope_rotate(q + (size_t)i * qd, hp->n_head, hp->head_dim, hp->rope_dim,
                          hp->rope_mode, cs);
        tl_op_rope_rotate(k + (size_t)i * kvd, hp->n_head_kv, hp->head_dim, hp->rope_dim,
                          hp->rope_mode, cs);
    }
}

typedef struct recompute_job {
    tl_llama *m;
    tl_llama_scratch *s;
    int32_t layer;
    int32_t n;               /* pages */
    const int32_t *page;     /* [n] page indices (positions page * page_tokens ..) */
    const float *const *x;   /* [n] input rows */
    float *const *out;       /* [n] K rows then V rows */
    const int32_t *rows;     /* [n] rows in the page */
} recompute_job;

static void recompute_task(void *arg, int task, int thread) {
    const recompute_job *j = arg;
    const tl_llama_hparams *hp = &j->m->hp;
    const tl_llama_layer *L = &j->m->layers[j->layer];
    const size_t kvd = (size_t)hp->n_head_kv * hp->head_dim, P = (size_t)j->s->page_tokens;
    const tl_weight *w[2] = {&L->wk, &L->wv};
    float *scratch = j->s->mm_scratch + (size_t)thread * j->s->mm_scratch_floats;
    const size_t n = (size_t)j->rows[task];
    for (int i = 0; i < 2; i++) {
        float *y = j->out[task] + (size_t)i * P * kvd;
        tl_op_matmul_serial(j->m, w[i], 0, kvd, j->x[task], n, y, kvd, scratch);
    }
    if (L->bk.name || L->bv.name)
        for (size_t t = 0; t < n; t++) {
            if (L->bk.name) add_bias(j->out[task] + t * kvd, L->bk.data, kvd);
            if (L->bv.name) add_bias(j->out[task] + (P + t) * kvd, L->bv.data, kvd);
        }
    for (size_t t = 0; t < n; t++)
        rope(j->m, j->out[task] + t * kvd, hp->n_head_kv, j->page[task] * (int32_t)P + (int32_t)t);
}

static void recompute_pages(tl_llama *m, tl_llama_scratch *s, struct tl_kv *kv, int32_t l,
                            int32_t kl, const tl_llama_rows *rows) {
    for (int32_t i = 0, e; i < rows->n; i = e) {
        e = tl_llama_rows_run_end(rows, i);
        const int32_t seq = rows->seq[i], stored = tl_kv_stored_pages(kv, seq, kl);
        int32_t n = 0;
        for (int32_t p = 0; p < stored; p++)
            if (tl_kv_page_inputs(kv, seq, kl, p, &s->rc_x[n], &s->rc_out[n], &s->rc_rows[n]))
                s->rc_page[n++] = p;
        if (n == 0) continue;
        recompute_job j = {m, s, l, n, s->rc_page, s->rc_x, s->rc_out, s->rc_rows};
        tl_pool_run(m->pool, n, recompute_task, &j);
        for (int32_t k = 0; k < n; k++) tl_kv_recomputed(kv, seq, kl, s->rc_page[k]);
    }
}

/* Pages ahead of the one being read whose head slice attention asks the CPU to fetch: a
 * head's slice of a page is rows a kv row apart, whose lines the hardware prefetchers do
 * not follow from one page to the next. */
enum { TOUCH_AHEAD = 2 };

/* Block b of rows (consecutive rows of one sequence, positions ascending), kv head g: the
 * `group` query heads that share kv head g. Each page is viewed once for the whole block
 * and its K (then V) slice serves every row of the block while it is in L1; each row's
 * arithmetic is the same as alone (its scores, its softmax over its whole row, its V sum
 * in page order), so the block size never changes a result. */
static void attn_task(void *arg, int task, int thread) {
    attn_job *j = arg;
    const tl_llama_hparams *hp = &j->m->hp;
    const int hd = hp->head_dim, n_head = hp->n_head, n_kv = hp->n_head_kv;
    const int group = n_head / n_kv;
    const tl_llama_scratch *s = j->s;
    const int b = task / n_kv, g = task % n_kv;
    const int32_t r0 = s->attn_block[b], r1 = s->attn_block[b + 1];
    const int32_t seq = j->rows->seq[r0], last = j->rows->pos[r1 - 1];
    const size_t qd = (size_t)n_head * hd, max_ctx = (size_t)s->max_ctx;
    const size_t row_scores = (size_t)group * max_ctx;
    float *scores = s->attn + (size_t)thread * s->attn_floats; /* [rows][group][max_ctx] */
    float *page_buf = scores + (size_t)s->attn_rows * row_scores;
    const int fast = !j->m->use_reference;
    const float scale = 1.0f / sqrtf((float)hd);
    const uint8_t *sel = r1 - r0 == 1 && s->sel_block && s->row_selective[r0]
                             ? s->sel + (size_t)r0 * (size_t)s->max_pages : NULL;
    const int measure = sel && s->select.measure;
    const int32_t P = s->page_tokens;
    /* a sliding window hides positions before pos - n_swa + 1: pages wholly before the
     * block's first row's window are not read (their scores are masked below) */
    const int32_t lo_block = hp->n_swa > 0 && j->rows->pos[r0] + 1 > hp->n_swa
                                 ? j->rows->pos[r0] + 1 - hp->n_swa : 0;
    /* pass 1: scores of every visible position (left-out pages: -inf, unless measured) */
    for (int32_t p = 0, t0 = 0; t0 <= last; p++) {
        const float *K;
        int32_t n;
        if (t0 + P <= lo_block) { /* a full page (the last one holds `last`) */
            t0 += P;
            continue;
        }
        if (sel && !sel[p] && !measure) { /* a selective block is one row */
            const int32_t cnt = P < last + 1 - t0 ? P : last + 1 - t0;
            for (int h = 0; h < group; h++)
                for (int32_t t = 0; t < cnt; t++) scores[(size_t)h * max_ctx + t0 + t] = -INFINITY;
            t0 += P;
            continue;
        }
        size_t ld;
        tl_kv_touch_head(j->kv, seq, j->layer, p + TOUCH_AHEAD, g, 0);
        tl_status st = tl_kv_view_head(j->kv, seq, j->layer, p, g, 0, page_buf, &K, &ld, &n);
        if (st || n <= 0) {
            attn_fail(j, st ? st : TL_ERR_INVALID);
            return;
        }
        for (int32_t r = r0; r < r1; r++) {
            const int32_t pos = j->rows->pos[r];
            if (pos < t0) continue;
            const int32_t cnt = n < pos + 1 - t0 ? n : pos + 1 - t0;
            const float *q = j->q + (size_t)r * qd + (size_t)g * group * hd;
            (fast ? tl_attn_scores_fast : tl_attn_scores_ref)(
                q, (size_t)group, (size_t)hd, K, ld, (size_t)cnt, scale,
                scores + (size_t)(r - r0) * row_scores + t0, max_ctx);
        }
        t0 += n;
    }
    for (int32_t r = r0; r < r1; r++) {
        const int32_t pos = j->rows->pos[r];
        float *out = j->out + (size_t)r * qd + (size_t)g * group * hd;
        const int32_t lo = hp->n_swa > 0 && pos + 1 > hp->n_swa ? pos + 1 - hp->n_swa : 0;
        for (int h = 0; h < group; h++) {
            float *sc = scores + (size_t)(r - r0) * row_scores + (size_t)h * max_ctx;
            for (int32_t t = 0; t < lo; t++) sc[t] = -INFINITY; /* outside the window */
            if (fast) tl_softmax_fast(sc, (size_t)pos + 1);
            else tl_softmax_ref(sc, (size_t)pos + 1);
            memset(out + (size_t)h * hd, 0, (size_t)hd * sizeof *out);
            if (measure) { /* the mass the selection keeps, then the selection's softmax */
                double kept = 0;
                for (int32_t t = 0; t <= pos; t++)
                    if (sel[t / P]) kept += sc[t];
                s->mass_kept[2 * (size_t)thread] += kept;
                s->mass_kept[2 * (size_t)thread + 1] += 1;
                const float inv = kept > 0 ? (float)(1.0 / kept) : 0.0f;
                for (int32_t t = 0; t <= pos; t++) sc[t] = sel[t / P] ? sc[t] * inv : 0.0f;
            }
        }
    }
    /* pass 2: weighted sum of V */
    for (int32_t p = 0, t0 = 0; t0 <= last; p++) {
        const float *V;
        int32_t n;
        if ((sel && !sel[p]) || t0 + P <= lo_block) {
            t0 += P;
            continue;
        }
        size_t ld;
        tl_kv_touch_head(j->kv, seq, j->layer, p + TOUCH_AHEAD, g, 1);
        if (tl_kv_view_head(j->kv, seq, j->layer, p, g, 1, page_buf, &V, &ld, &n) || n <= 0)
            return;
        for (int32_t r = r0; r < r1; r++) {
            const int32_t pos = j->rows->pos[r];
            if (pos < t0) continue;
            const int32_t cnt = n < pos + 1 - t0 ? n : pos + 1 - t0;
            float *out = j->out + (size_t)r * qd + (size_t)g * group * hd;
            (fast ? tl_attn_values_fast : tl_attn_values_ref)(
                out, (size_t)group, (size_t)hd, scores + (size_t)(r - r0) * row_scores + t0,
                max_ctx, V, ld, (size_t)cnt);
        }
        t0 += n;
    }
}

/* llama.h */
tl_status tl_llama_attend(tl_llama *m, tl_llama_scratch *s, struct tl_kv *kv, int32_t kl,
                          const tl_llama_rows *rows) {
    int32_t n_blocks = 0; /* each sequence's rows in blocks of at most attn_rows */
    for (int32_t i = 0, e; i < rows->n; i = e) {
        e = tl_llama_rows_run_end(rows, i);
        for (int32_t b = i; b < e; b += s->attn_rows) s->attn_block[n_blocks++] = b;
    }
    s->attn_block[n_blocks] = rows->n;
    attn_job j = {m, s, kv, kl, rows, s->q, s->att_out, TL_OK};
    tl_pool_run(m->pool, (int)(n_blocks * m->hp.n_head_kv), attn_task, &j);
    const tl_status st = (tl_status)atomic_load_explicit(&j.status, memory_order_relaxed);
    if (st)
        return tl_error_set(st, "attention at layer %d could not read a KV page",
                            (int)(kl + m->stage_first));
    return TL_OK;
}

/* Chooses the pages row r (the only row of seq in this step) attends to at KV layer l (the
 * stage's index), makes them viewable, and records the choice for the next prefetch there. */
static tl_status select_pages(tl_llama *m, tl_llama_scratch *s, struct tl_kv *kv, int32_t l,
                              int32_t seq, int32_t pos, const float *q, int32_t r) {
    const int32_t n_full = tl_kv_stored_pages(kv, seq, l);
    const int32_t n_pages = pos / s->page_tokens + 1;
    if (n_full <= 0) return TL_OK;
    for (int32_t p = 0; p < n_full; p++) {
        s->sel_bounds[p] = tl_kv_key_bounds(kv, seq, l, p);
        if (!s->sel_bounds[p]) return TL_OK; /* no bounds kept: exact attention */
    }
    tl_kv_select_scores(q, m->hp.n_head, m->hp.n_head_kv, m->hp.head_dim, s->sel_bounds,
                        n_full, s->sel_ub, s->sel_score);
    uint8_t *sel = s->sel + (size_t)r * (size_t)s->max_pages;
    int32_t chosen = tl_kv_select_pages(&s->select, s->sel_score, n_full, n_pages, s->sel_tmp,
                                        sel);
    if (m->hp.n_swa > 0) /* pages wholly before the window would be masked: not read */
        for (int32_t p = 0; p < n_full && (p + 1) * s->page_tokens <= pos + 1 - m->hp.n_swa; p++)
            if (sel[p]) sel[p] = 0, chosen--;
    s->pages_read += (uint64_t)chosen;
    s->pages_total += (uint64_t)n_pages;
    int32_t *need = (int32_t *)(void *)s->sel_ub; /* the scores are no longer needed */
    int32_t n_need = 0;
    for (int32_t p = 0; p < n_full; p++)
        if (sel[p] && !tl_kv_page_ready(kv, seq, l, p)) need[n_need++] = p;
    tl_status st = tl_kv_require(kv, seq, l, need, n_need);
    if (st) return st;
    tl_kv_note_selection(kv, seq, l, sel, n_full);
    s->row_selective[r] = 1;
    return TL_OK;
}

/* out = the family's norm of n rows of x, scaled by w (and shifted by b when present). */
static void norm(const tl_llama *m, const float *x, const tl_weight *w, const tl_weight *b,
                 size_t n, float *out) {
    const size_t d = (size_t)m->hp.n_embd;
    if (m->hp.layer_norm) tl_op_layernorm(x, w->data, b->name ? b->data : NULL, n, d, m->hp.rms_eps, out);
    else {
        tl_op_rmsnorm(m, x, w->data, n, d, m->hp.rms_eps, out);
        add_bias_rows(out, b, n, d);
    }
}

tl_status tl_llama_check_context(const tl_llama *m, int32_t n_ctx) {
    if (m->hp.pos_learned && n_ctx > m->hp.n_ctx_train)
        return tl_error_set(TL_ERR_CONTEXT, "a context of %d positions is longer than the %d "
                            "positions this model has learned embeddings for", (int)n_ctx,
                            (int)m->hp.n_ctx_train);
    return TL_OK;
}

tl_status tl_llama_add_positions(const tl_llama *m, const tl_llama_rows *rows, float *x) {
    if (!m->hp.pos_learned) return TL_OK;
    const size_t d = (size_t)m->hp.n_embd;
    const float *table = m->pos_embd.data;
    for (int32_t i = 0; i < rows->n; i++) {
        if (rows->pos[i] < 0 || rows->pos[i] >= m->hp.n_ctx_train)
            return tl_error_set(TL_ERR_CONTEXT, "position %d is past the %d learned positions "
                                "of the model", (int)rows->pos[i], (int)m->hp.n_ctx_train);
        add_bias(x + (size_t)i * d, table + (size_t)rows->pos[i] * d, d);
    }
    return TL_OK;
}

tl_status tl_llama_layer_forward(tl_llama *m, tl_llama_scratch *s, struct tl_kv *kv, int32_t l,
                         const tl_llama_rows *rows, float *x) {
    const tl_llama_hparams *hp = &m->hp;
    const tl_llama_layer *L = &m->layers[l];
    const int32_t kl = l - m->stage_first; /* the layer's place in this stage's KV cache */
    const size_t n = (size_t)rows->n, d = (size_t)hp->n_embd, f = (size_t)hp->n_ff;
    const size_t qd = (size_t)hp->n_head * hp->head_dim;
    const size_t kvd = (size_t)hp->n_head_kv * hp->head_dim;
    if (rows->n > s->max_rows)
        return tl_error_set(TL_ERR_INVALID, "%d rows exceed the scratch for %d", (int)rows->n,
                            (int)s->max_rows);

    /* attention block */
    norm(m, x, &L->attn_norm, &L->attn_norm_b, n, s->xn);
    tl_sparsity_apply(&m->sparse, l, TL_SITE_ATTN_IN, s->xn, n, d);
    const tl_weight *qkv[] = {&L->wq, &L->wk, &L->wv};
    float *const qkv_out[] = {s->q, s->k, s->v};
    tl_status pst = site_products(m, s, l, TL_SITE_ATTN_IN, qkv, 3, s->xn, n, qkv_out);
    if (pst) return pst;
    add_bias_rows(s->q, &L->bq, n, qd);
    add_bias_rows(s->k, &L->bk, n, kvd);
    add_bias_rows(s->v, &L->bv, n, kvd);
    for (size_t i = 0; i < n; i++)
        if (rows->pos[i] >= s->max_ctx)
            return tl_error_set(TL_ERR_CONTEXT, "position %d is past the context of %d",
                                (int)rows->pos[i], (int)s->max_ctx);
    rope_rows(m, rows, s->q, s->k);
    for (int32_t i = 0, e; i < rows->n; i = e) { /* append each sequence's run of rows */
        e = tl_llama_rows_run_end(rows, i);
        tl_status st = tl_kv_append(kv, rows->seq[i], kl, s->k + (size_t)i * kvd,
                                    s->v + (size_t)i * kvd, e - i);
        if (!st && tl_kv_keeps_inputs(kv)) /* for layers that recompute from them */
            st = tl_kv_append_inputs(kv, rows->seq[i], kl, s->xn + (size_t)i * d, e - i);
        if (st) return st;
    }
    for (int32_t i = 0, e; s->sel_block && i < rows->n; i = e) { /* selection: decode rows */
        e = tl_llama_rows_run_end(rows, i);
        for (int32_t r = i; r < e; r++) s->row_selective[r] = 0;
        if (s->select.page_share > 0 && e - i == 1) {
            tl_status st = select_pages(m, s, kv, kl, rows->seq[i], rows->pos[i],
                                        s->q + (size_t)i * qd, i);
            if (st) return st;
        }
    }
    if (tl_kv_recomputes(kv, kl)) recompute_pages(m, s, kv, l, kl, rows);
    if ((pst = tl_llama_attend(m, s, kv, kl, rows))) return pst;
    tl_sparsity_apply(&m->sparse, l, TL_SITE_ATTN_OUT, s->att_out, n, qd);
    const tl_weight *wo = &L->wo;
    if ((pst = site_products(m, s, l, TL_SITE_ATTN_OUT, &wo, 1, s->att_out, n, &s->xn)))
        return pst; /* xn reused as [n][d] output */
    add_bias_rows(s->xn, &L->bo, n, d);
    add_rows(x, s->xn, n * d);

    /* feed-forward block */
    norm(m, x, &L->ffn_norm, &L->ffn_norm_b, n, s->xn);
    if (hp->ffn_neurons) { /* by neuron, the predicted ones (model/ops_neurons.c) */
        const int one_seq = tl_llama_rows_run_end(rows, 0) == rows->n;
        if ((pst = tl_op_neuron_ffn(m, s, l, s->xn, n, one_seq, s->xn)))
            return tl_error_wrap(pst, "layer %d", (int)l);
        add_bias_rows(s->xn, &L->b_down, n, d);
        add_rows(x, s->xn, n * d);
        return TL_OK;
    }
    tl_sparsity_apply(&m->sparse, l, TL_SITE_FFN_IN, s->xn, n, d);
    if (hp->ffn_relu) {
        const tl_weight *up = &L->w_up;
        if ((pst = site_products(m, s, l, TL_SITE_FFN_IN, &up, 1, s->xn, n, &s->gate)))
            return pst;
        add_bias_rows(s->gate, &L->b_up, n, f);
        tl_op_relu(s->gate, n * f);
        tl_sparsity_apply(&m->sparse, l, TL_SITE_FFN_MID, s->gate, n, f);
    } else {
        const tl_weight *gate_up[] = {&L->w_gate, &L->w_up};
        float *const gate_up_out[] = {s->gate, s->up};
        if ((pst = site_products(m, s, l, TL_SITE_FFN_IN, gate_up, 2, s->xn, n, gate_up_out)))
            return pst;
        add_bias_rows(s->up, &L->b_up, n, f);
        add_bias_rows(s->gate, &L->b_gate, n, f);
        if (hp->ffn_gate_relu) tl_op_reglu(s->gate, s->up, n * f);
        else tl_op_swiglu(m, s->gate, s->up, n * f);
        tl_sparsity_apply(&m->sparse, l, TL_SITE_FFN_MID, s->gate, n, f);
    }
    const tl_weight *down = &L->w_down;
    if ((pst = site_products(m, s, l, TL_SITE_FFN_MID, &down, 1, s->gate, n, &s->xn)))
        return pst;
    add_bias_rows(s->xn, &L->b_down, n, d);
    add_rows(x, s->xn, n * d);
    return TL_OK;
}

void tl_llama_logits(tl_llama *m, tl_llama_scratch *s, const float *x, const int32_t *idx,
                     int32_t n_out, float *logits) {
    const size_t d = (size_t)m->hp.n_embd;
    for (int32_t i = 0; i < n_out; i++) /* gather the rows, normalized, into xn */
        norm(m, x + (size_t)idx[i] * d, &m->output_norm, &m->output_norm_b, 1,
             s->xn + (size_t)i * d);
    matmul(m, s, &m->output, s->xn, (size_t)n_out, logits);
}
