/* profile_compute.c - the kernel stages of the hardware profile (profile_measure.h), each
 * on its own with nothing else running.
 *
 * matmul: tl_op_matmul on TL__PROF_MM_ROWS x TL__PROF_MM_COLS matrices of every profile
 * type, cycled through copies larger than the last-level cache so every call streams its
 * weights from DRAM as decode does; a second, smaller matrix separates the fixed cost of a
 * call from its rate. Weights are in the layout the engine computes them in (32-row
 * panels where the CPU wants them, kernels.h), and the repacking into panels that
 * streamed weights take on arrival is timed over the same copies.
 * element-wise: swiglu and rmsnorm over a buffer beyond the caches.
 * attention: token-by-token decode of a tiny synthetic model with f32 KV; a robust line
 * through per-window medians of the per-token times gives the cost per visible position,
 * its intercept (less the matrix products and element-wise work) the fixed cost per
 * layer; the same model prefilled in chunks of one attention block (TL_ATTN_BLOCK_MAX_ROWS
 * rows) gives the per-position cost when a block shares the reads. Both again on a
 * grouped-query model of the same head size, twice the width and query heads, with a kv
 * head per TL_PROF_GQA_GROUP query heads (a kv head's reads shared across its group). A
 * deep model of the same layers, decoded far enough that its KV outgrows the caches, gives
 * the extra cost per KV byte read there.
 * Stored KV formats are costed by timing their row decoding directly, and storing rows
 * in each format by appending them to a fresh cache. Each synthetic
 * model's file is unlinked as soon as it is open, so it cannot outlive the process.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef __GLIBC__ /* (defined by the headers above) */
#include <malloc.h>
#endif
#include <string.h>
#include <unistd.h>
#include "plan/profile_measure.h"
#include "base/clock.h"
#include "base/rng.h"
#include "base/stats.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "kernels/probe.h"
#include "format/tensor_type.h"
#include "kv/kv_cache.h"
#include "exec/model_handle.h"
#include "model/ops.h"

/* tiny model for the attention fit: up to TL__PROF_AT_POS positions decoded with f32 KV,
 * and with stored (decoded) KV, whose cost grows faster with the position */
#define AT_RUNS 3 /* each attention run is repeated, the medians kept */
#define AT_RUN_S 10.0 /* a run stops early after this long (a loaded machine) ... */
#define AT_MIN_POS 160 /* ... once it has this many positions */
#define AT_SKIP 32 /* first positions left out of the fit (warm-up) */
#define AT_WIN 32  /* positions per median window */

/* A hidden temporary file name in dir, unique to this process and moment; 0 if it does
 * not fit. */
static int temp_name(const char *dir, const char *ext, char *out, size_t cap) {
    unsigned long long us = (unsigned long long)(tl_now() * 1e6);
    int n = snprintf(out, cap, "%s/.tierllm-profile-%ld-%llu.%s", dir, (long)getpid(), us, ext);
    return n >= 0 && (size_t)n < cap;
}

/* `copies` back-to-back copies of one R x C matrix of random weights in `type` (more
 * bytes than the last-level cache, so cycling through them streams from DRAM); `row` is
 * C floats of scratch. NULL when out of memory. */
uint8_t *tl__profile_weight_copies(tl_type type, size_t R, size_t C, size_t copies,
                                   float *row, uint64_t *seed) {
    const size_t rb = tl_type_row_bytes(type, C), mb = R * rb;
    /* memory like the engine's weights (2 MiB-aligned, huge pages advised): on 4 KiB
     * pages every page of a streamed matrix costs a TLB miss and a page walk, so the rates
     * would understate what decode reaches on the engine's own weight memory */
    uint8_t *W = tl_probe_buffer(copies * mb);
    if (!W) return NULL;
    for (size_t j = 0; j < R; j++) {
        for (size_t c = 0; c < C; c++) row[c] = tl_rand_sym(seed);
        tl_quant_row(type, row, W + j * rb, C);
    }
    for (size_t k = 1; k < copies; k++) memcpy(W + k * mb, W, mb);
    return W;
}

/* ---- matmul ---- */

/* Repacking copies into panels over the pool (each thread a share of the panels, with its
 * own one-panel temporary), as the residency does with a streamed unit on arrival. */
typedef struct repack_job {
    tl_type type;
    uint8_t *W;
    size_t rows, cols, threads;
    uint8_t *tmp;
    size_t tmp_bytes;
} repack_job;

static void repack_task(void *arg, int task, int thread) {
    const repack_job *j = arg;
    tl_panels_pack_share(j->type, j->W, j->rows, j->cols, (size_t)task, j->threads,
                         j->tmp + (size_t)thread * j->tmp_bytes);
}

double tl__profile_repack_copies(tl_pool *pool, tl_type type, uint8_t *W, size_t R, size_t C,
                                 size_t copies, tl_status *st) {
    const size_t threads = (size_t)tl_pool_threads(pool), mb = R * tl_type_row_bytes(type, C);
    repack_job j = {type, NULL, R, C, threads, NULL, tl_panels_tmp_bytes(type, C)};
    j.tmp = malloc(threads * j.tmp_bytes);
    double t[64];
    size_t n = 0;
    if (!j.tmp) {
        *st = tl_error_set(TL_ERR_NOMEM, "matmul profile: out of memory");
        return 0;
    }
    for (size_t c = 0; c < copies; c++) {
        j.W = W + c * mb;
        const double t0 = tl_now();
        tl_pool_run(pool, (int)threads, repack_task, &j);
        if (n < 64) t[n++] = tl_now() - t0;
    }
    free(j.tmp);
    return (double)mb / tl_median(t, n);
}

tl_status tl__profile_measure_matmul(tl_pool *pool, tl_hw_profile *p,
                                     tl__profile_progress progress, void *user) {
    const size_t R = TL__PROF_MM_ROWS, C = TL__PROF_MM_COLS;
    const size_t NMAX = (size_t)tl_prof_rows[TL_PROF_N_ROWS - 1];
    const size_t threads = (size_t)tl_pool_threads(pool);
    size_t sf = (tl_matmul_scratch_floats(C, NMAX) + 15) / 16 * 16; /* 64-byte slices */
    float *X = aligned_alloc(64, NMAX * C * sizeof(float));
    float *Y = aligned_alloc(64, NMAX * R * sizeof(float));
    float *scratch = aligned_alloc(64, threads * sf * sizeof(float));
    float *row = malloc(C * sizeof(float));
    tl_status st = TL_OK;
    if (!X || !Y || !scratch || !row) {
        st = tl_error_set(TL_ERR_NOMEM, "matmul profile: out of memory");
        goto done;
    }
    uint64_t seed = 7;
    for (size_t i = 0; i < NMAX * C; i++) X[i] = tl_rand_sym(&seed);
    tl_llama mm;
    memset(&mm, 0, sizeof mm); /* tl_op_matmul reads only pool and use_reference */
    mm.pool = pool;
    mm.use_reference = 0;
    for (int ti = 0; ti < TL_PROF_N_TYPE && st == TL_OK; ti++) {
        tl_type type = tl_type_table[ti].type;
        size_t rb = tl_type_row_bytes(type, C), mb = R * rb;
        size_t copies = TL__PROF_MM_MIN_BYTES / mb + 1;
        tl__profile_say(progress, user, "matmul: %s, %zu x %zu, %zu copies (%zu MiB)",
                        tl_type_name(type), R, C, copies, copies * mb >> 20);
        uint8_t *W = tl__profile_weight_copies(type, R, C, copies, row, &seed);
        if (!W) {
            st = tl_error_set(TL_ERR_NOMEM, "matmul profile: out of memory for %zu MiB of %s",
                              copies * mb >> 20, tl_type_name(type));
            break;
        }
        /* a second, smaller matrix (TL__PROF_MM_SMALL_ROWS of the same rows): two sizes
         * separate the per-call cost (dispatch, chunking) from the per-MAC rate */
        const size_t Rs = TL__PROF_MM_SMALL_ROWS, mbs = Rs * rb;
        tl_weight w, ws;
        memset(&w, 0, sizeof w);
        w.type = w.file_type = type;
        w.rows = R;
        w.cols = C;
        /* the first Rs rows of panels are panels: both sizes share the repacked copies */
        w.panels = tl_panels_wanted(type, R) && tl_panels_wanted(type, Rs);
        p->repack_bps[ti] =
            w.panels ? tl__profile_repack_copies(pool, type, W, R, C, copies, &st) : 0;
        if (st) {
            free(W);
            break;
        }
        ws = w;
        ws.rows = Rs;
        size_t cur = 0, cur_s = 0, copies_s = copies * mb / mbs;
        for (int ri = 0; ri < TL_PROF_N_ROWS; ri++) {
            size_t n = (size_t)tl_prof_rows[ri];
            int reps = n <= 64 ? 7 : 3;
            double t[7], ts[7];
            for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
                w.data = W + cur * mb;
                cur = (cur + 1) % copies;
                double t0 = tl_now();
                tl_op_matmul(&mm, &w, X, n, Y, scratch, sf);
                if (r >= 0) t[r] = tl_now() - t0;
                ws.data = W + cur_s * mbs; /* the small matrix cycles over the same copies */
                cur_s = (cur_s + 1) % copies_s;
                t0 = tl_now();
                tl_op_matmul(&mm, &ws, X, n, Y, scratch, sf);
                if (r >= 0) ts[r] = tl_now() - t0;
            }
            const double tl_ = tl_median(t, (size_t)reps), tsm = tl_median(ts, (size_t)reps);
            const double macs_l = (double)n * R * C, macs_s = (double)n * Rs * C;
            /* t = call + macs / rate, fitted through both sizes */
            double rate = tl_ > tsm ? (macs_l - macs_s) / (tl_ - tsm) : macs_l / tl_;
            double call = tsm - macs_s / rate;
            if (call < 0 || rate <= 0) {
                call = 0;
                rate = macs_l / tl_;
            }
            p->matmul_macs[ti][ri] = rate;
            p->matmul_call_s[ti][ri] = call;
        }
        free(W);
    }
done:
    free(X);
    free(Y);
    free(scratch);
    free(row);
    return st;
}

/* ---- element-wise ---- */

tl_status tl__profile_measure_elementwise(tl_hw_profile *p) {
    const size_t N = (size_t)1 << 20, D = 2048;
    float *g0 = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
    float *u = malloc(N * sizeof(float)), *o = malloc(N * sizeof(float));
    float *w = malloc(D * sizeof(float));
    if (!g0 || !g || !u || !o || !w) {
        free(g0), free(g), free(u), free(o), free(w);
        return tl_error_set(TL_ERR_NOMEM, "element-wise profile: out of memory");
    }
    uint64_t seed = 11;
    for (size_t i = 0; i < N; i++) g0[i] = tl_rand_sym(&seed), u[i] = tl_rand_sym(&seed);
    for (size_t i = 0; i < D; i++) w[i] = 1.0f + 0.5f * tl_rand_sym(&seed);
    double ts[6], tr[6];
    for (int r = 0; r < 6; r++) {
        memcpy(g, g0, N * sizeof(float)); /* same inputs every time (no drift to denormals) */
        double t0 = tl_now();
        tl_swiglu_fast(g, u, N);
        ts[r] = tl_now() - t0;
        t0 = tl_now();
        tl_rmsnorm_fast(g0, w, N / D, D, 1e-5f, o);
        tr[r] = tl_now() - t0;
    }
    p->elementwise_s = 0.5 * (tl_median(ts + 1, 5) + tl_median(tr + 1, 5)) / (double)N;
    free(g0), free(g), free(u), free(o), free(w);
    return TL_OK;
}

/* ---- attention ---- */

/* A line y = a + b*x through the points: Theil-Sen (median of pairwise slopes, then the
 * median intercept), robust against the odd slow token. */
static tl_status fit_line(const double *x, const double *y, size_t n, double *a, double *b) {
    double *tmp = malloc((n * (n - 1) / 2 + n) * sizeof *tmp);
    if (!tmp) return tl_error_set(TL_ERR_NOMEM, "attention profile: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (x[j] != x[i]) tmp[k++] = (y[j] - y[i]) / (x[j] - x[i]);
    *b = k ? tl_median(tmp, k) : 0;
    for (size_t i = 0; i < n; i++) tmp[i] = y[i] - *b * x[i];
    *a = tl_median(tmp, n);
    free(tmp);
    return TL_OK;
}

static double model_matmul_seconds(tl_model *m) {
    const tl_llama_hparams *hp = &m->lm.hp;
    size_t nw = 7 * (size_t)hp->n_layer + 1, maxk = 0, maxr = 0;
    const tl_weight **ws = malloc(nw * sizeof *ws);
    if (!ws) return -1;
    size_t k = 0;
    for (int32_t l = 0; l < hp->n_layer; l++) {
        tl_llama_layer *L = &m->lm.layers[l];
        const tl_weight *lw[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
                                  &L->w_down};
        for (int i = 0; i < 7; i++)
            if (lw[i]->name) ws[k++] = lw[i]; /* a ReLU FFN has no gate */
    }
    ws[k++] = m->lm.tied_output ? &m->lm.tok_embd : &m->lm.output;
    nw = k;
    for (size_t i = 0; i < nw; i++) {
        maxk = ws[i]->cols > maxk ? ws[i]->cols : maxk;
        maxr = ws[i]->rows > maxr ? ws[i]->rows : maxr;
    }
    size_t threads = (size_t)tl_pool_threads(m->lm.pool);
    size_t sf = (tl_matmul_scratch_floats(maxk, 1) + 15) / 16 * 16;
    float *scratch = aligned_alloc(64, threads * sf * sizeof(float));
    float *x = malloc(maxk * sizeof(float)), *y = malloc(maxr * sizeof(float));
    double t[9], res = -1;
    int ok = scratch && x && y;
    for (size_t i = 0; ok && i < nw; i++) ok = ws[i]->data != NULL;
    if (ok) {
        uint64_t seed = 3;
        for (size_t i = 0; i < maxk; i++) x[i] = tl_rand_sym(&seed);
        for (int r = 0; r < 9; r++) {
            double t0 = tl_now();
            for (size_t i = 0; i < nw; i++) tl_op_matmul(&m->lm, ws[i], x, 1, y, scratch, sf);
            t[r] = tl_now() - t0;
        }
        /* dispatches included: the cost model charges them to each matmul call
         * (matmul_call_s), so the fixed per-layer figure is what is left */
        res = tl_median(t + 1, 8);
    }
    free(ws);
    free(scratch);
    free(x);
    free(y);
    return res;
}

/* A context for n_pos positions (and a margin) fed n_batch rows at a time (0: the
 * default). */
static tl_status open_context(tl_model *m, int32_t n_pos, int32_t n_batch, int32_t kv_bits,
                              tl_context **c) {
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = n_pos + 16;
    cp.n_batch = n_batch;
    cp.kv_bits = kv_bits;
    return tl_context_open(m, &cp, c);
}

/* Per-token decode times of one KV width over n_pos positions (fewer when the run takes
 * longer than AT_RUN_S), reduced to a line over positions; with mm_s, also the matrix
 * products' share of a token (model_matmul_seconds). */
static tl_status attention_run(tl_model *m, int32_t kv_bits, int32_t n_pos, float *logits,
                               double *times, double *a, double *b, double *mm_s) {
    tl_context *c;
    tl_status st = open_context(m, n_pos, 0, kv_bits, &c);
    if (st != TL_OK) return st;
    double start = tl_now();
    for (int32_t i = 0; i < n_pos && st == TL_OK; i++) {
        int32_t tok = 1 + i % 500;
        double t0 = tl_now();
        st = tl_decode(c, &tok, 1, logits);
        times[i] = tl_now() - t0;
        if (i + 1 >= AT_MIN_POS && tl_now() - start > AT_RUN_S) n_pos = i + 1;
    }
    if (st == TL_OK && mm_s) *mm_s = model_matmul_seconds(m);
    tl_context_close(c);
    if (st != TL_OK) return st;
    double wx[(TL__PROF_AT_POS - AT_SKIP) / AT_WIN], wy[(TL__PROF_AT_POS - AT_SKIP) / AT_WIN];
    int nw = (n_pos - AT_SKIP) / AT_WIN;
    for (int w = 0; w < nw; w++) {
        int p0 = AT_SKIP + w * AT_WIN;
        wx[w] = p0 + 0.5 * (AT_WIN - 1);
        wy[w] = tl_median(times + p0, AT_WIN); /* reorders only this window */
    }
    return fit_line(wx, wy, (size_t)nw, a, b);
}

/* Decoding stored KV pages into f32 (kv_cache.c's decode_cols: f16 conversion or
 * group-wise dequantization, one kv head's columns of a row at a time): seconds per
 * element, timed directly on rows of 128 values (a 7B model's head_dim),
 * single-threaded as it runs. */
static tl_status measure_kv_decode(tl_hw_profile *p) {
    const int32_t D = 128, rows = 8192;
    float *x = malloc((size_t)D * sizeof *x), *y = malloc((size_t)D * sizeof *y);
    uint8_t *in = malloc((size_t)rows * D * 2);
    if (!x || !y || !in) {
        free(x), free(y), free(in);
        return tl_error_set(TL_ERR_NOMEM, "kv decode profile: out of memory");
    }
    uint64_t seed = 5;
    for (int32_t j = 0; j < D; j++) x[j] = tl_rand_sym(&seed);
    p->attn_decode_s[0] = 0;
    for (int k = 1; k < TL_PROF_N_KVBITS; k++) {
        const int32_t bits = tl_prof_kvbits[k];
        const size_t rb = bits == 16 ? (size_t)D * 2 : tl_kv_quant_row_bytes(D, 64, bits);
        for (int32_t r = 0; r < rows; r++) {
            if (bits == 16)
                for (int32_t j = 0; j < D; j++)
                    ((uint16_t *)(void *)(in + r * rb))[j] = tl_f32_to_f16(x[j]);
            else
                tl_kv_quant_row(x, D, 64, bits, in + r * rb);
        }
        double t[5];
        volatile float sink = 0;
        for (int rep = 0; rep < 5; rep++) {
            double t0 = tl_now();
            for (int32_t r = 0; r < rows; r++) {
                if (bits == 16) {
                    tl_f16_row_to_f32_fast((const uint16_t *)(const void *)(in + r * rb), y, D);
                } else {
                    tl_kv_dequant_row(in + r * rb, D, 64, bits, y);
                }
                sink += y[r % D];
            }
            t[rep] = tl_now() - t0;
        }
        (void)sink;
        p->attn_decode_s[k] = tl_median(t, 5) / ((double)rows * D);
    }
    free(x), free(y), free(in);
    return TL_OK;
}

/* Storing KV rows (tl_kv_append into a sequence's open f32 pages, then the commit that
 * stores each full page in the format, as a prefill chunk does at every layer): seconds
 * per stored value (a row stores 2 * kv_dim per layer), timed on a fresh in-memory cache
 * whose frames were never touched, as a run's are (a first touch of a page is part of the
 * cost), malloc_trim between repetitions returning the last one's pages. */
static tl_status measure_kv_store(tl_hw_profile *p) {
    enum { LAYERS = 4, TOKENS = 2048, CHUNK = 64, HD = 128, KVD = 1024 };
    float *k = malloc((size_t)CHUNK * KVD * sizeof *k);
    float *v = malloc((size_t)CHUNK * KVD * sizeof *v);
    tl_budget *budget = NULL;
    tl_status st = k && v ? tl_budget_open(0, &budget)
                          : tl_error_set(TL_ERR_NOMEM, "out of memory");
    uint64_t seed = 9;
    for (size_t i = 0; st == TL_OK && i < (size_t)CHUNK * KVD; i++)
        k[i] = tl_rand_sym(&seed), v[i] = tl_rand_sym(&seed);
    for (int b = 0; b < TL_PROF_N_KVBITS && st == TL_OK; b++) {
        tl_kv_params kp = {.n_layer = LAYERS, .kv_dim = KVD, .head_dim = HD, .page_tokens = 16,
                           .bits = tl_prof_kvbits[b], .kv_mem_pct = 100, .max_seqs = 1,
                           .max_tokens = TOKENS, .max_block = CHUNK};
        double t[3];
        for (int rep = 0; rep < 3 && st == TL_OK; rep++) {
            tl_kv *kv = NULL;
            int32_t seq = 0;
#ifdef __GLIBC__
            malloc_trim(0);
#endif
            st = tl_kv_open(&kp, budget, NULL, &kv);
            if (st == TL_OK) st = tl_kv_seq_open(kv, &seq);
            const double t0 = tl_now();
            for (int32_t pos = 0; st == TL_OK && pos < TOKENS; pos += CHUNK) {
                for (int32_t l = 0; st == TL_OK && l < LAYERS; l++)
                    st = tl_kv_append(kv, seq, l, k, v, CHUNK);
                if (st == TL_OK) st = tl_kv_seq_commit(kv, seq, CHUNK);
            }
            t[rep] = tl_now() - t0;
            if (kv) tl_kv_close(kv);
        }
        if (st == TL_OK)
            p->kv_store_s[b] = tl_median(t, 3) / ((double)TOKENS * LAYERS * 2 * KVD);
    }
    if (budget) tl_budget_close(budget);
    free(k), free(v);
    return st ? tl_error_wrap(st, "kv store profile") : TL_OK;
}

/* Blocked attention: the same model prefills n_pos positions in prompt chunks of
 * TL_ATTN_BLOCK_MAX_ROWS rows (one attention block each); a chunk starting at position p
 * costs a constant (its matrix products and element-wise work) plus L * n_head * head_dim
 * * s * (rows * p + rows (rows + 1) / 2), so a robust line through per-window medians of
 * the chunk times against p has slope rows * L * n_head * head_dim * s. *s_block gets s
 * (0 when noise swamped the slope). */
static tl_status attention_block_run(tl_model *m, int32_t n_pos, double *s_block) {
    enum { ROWS = TL_ATTN_BLOCK_MAX_ROWS, SKIP = 2, WIN = 4 };
    const tl_llama_hparams *hp = &m->lm.hp;
    tl_context *c;
    tl_status st = open_context(m, n_pos, ROWS, 32, &c);
    if (st != TL_OK) return st;
    int32_t n_chunks = n_pos / ROWS;
    double *times = malloc((size_t)n_chunks * 3 * sizeof *times);
    if (!times) st = tl_error_set(TL_ERR_NOMEM, "attention profile: out of memory");
    double *wx = times ? times + n_chunks : NULL, *wy = wx ? wx + n_chunks : NULL;
    const double start = tl_now();
    for (int32_t i = 0; i < n_chunks && st == TL_OK; i++) {
        int32_t toks[ROWS];
        for (int32_t r = 0; r < ROWS; r++) toks[r] = 1 + (i * ROWS + r) % 500;
        double t0 = tl_now();
        st = tl_decode(c, toks, ROWS, NULL);
        times[i] = tl_now() - t0;
        if (i + 1 >= SKIP + 4 * WIN && tl_now() - start > AT_RUN_S) n_chunks = i + 1;
    }
    tl_context_close(c);
    *s_block = 0;
    int nw = (n_chunks - SKIP) / WIN;
    for (int w = 0; st == TL_OK && w < nw; w++) {
        int k0 = SKIP + w * WIN;
        wx[w] = (k0 + 0.5 * (WIN - 1)) * ROWS;
        wy[w] = tl_median(times + k0, WIN); /* reorders only this window */
    }
    double a = 0, b = 0;
    if (st == TL_OK && nw >= 2) st = fit_line(wx, wy, (size_t)nw, &a, &b);
    if (st == TL_OK && b > 0)
        *s_block = b / ((double)ROWS * hp->n_layer * hp->n_head * hp->head_dim);
    free(times);
    return st;
}

/* The tiny model the attention stage decodes with: multi-head (a kv head per query head). */
void tl__profile_attention_model(tl_synth_params *sp) {
    memset(sp, 0, sizeof *sp);
    sp->n_vocab = 512, sp->n_embd = 512, sp->n_ff = 1024, sp->n_layer = 4;
    sp->n_head = 8, sp->n_head_kv = 8, sp->n_ctx = 2048;
    sp->weight_type = TL_TYPE_F32, sp->rope_base = 10000.0f, sp->seed = 1;
}

/* The grouped-query model: the same head size and layers, TL_PROF_GQA_GROUP query heads per
 * kv head, and twice the query heads, so a block's attention is n_head / TL_PROF_GQA_GROUP
 * kv heads' jobs, four, as grouped models have at least (two jobs on two threads would
 * time each step's slower one) */
void tl__profile_attention_gqa_model(tl_synth_params *sp) {
    tl__profile_attention_model(sp);
    sp->n_embd *= 2, sp->n_head *= 2;
    sp->n_head_kv = sp->n_head / TL_PROF_GQA_GROUP;
    sp->weight_type = TL_TYPE_F16; /* its products stay as short as the multi-head one's */
}

/* Writes the synthetic model sp to a temporary file in dir and opens it (resident, as
 * the budget is unlimited); the file is unlinked at once, so it cannot outlive the
 * process. */
static tl_status open_synth_model(const tl_synth_params *sp, int32_t threads, const char *dir,
                                  const char *kind, tl__profile_progress progress, void *user,
                                  tl_model **m) {
    char path[600];
    if (!temp_name(dir, "gguf", path, sizeof path))
        return tl_error_set(TL_ERR_INVALID, "attention profile: directory name too long");
    tl__profile_say(progress, user, "attention: writing a %d-layer %s synthetic model to %s",
                    sp->n_layer, kind, dir);
    tl_status st = tl_synth_write(sp, path);
    if (st != TL_OK) {
        unlink(path);
        return tl_error_wrap(st, "attention profile");
    }
    tl_model_params mp = tl_model_default_params();
    mp.n_threads = threads;
    st = tl_model_open(path, &mp, m);
    unlink(path); /* the model holds its file open */
    return st == TL_OK ? TL_OK : tl_error_wrap(st, "attention profile");
}

/* The attention runs on the model `sp` describes, written to dir: AT_RUNS times token by
 * token (line a + b * position per token) and in blocks (s_block per MAC), the medians
 * kept (a may be NULL); *mm_s (when given) gets the model's matrix products per token. */
static tl_status attention_model_runs(const tl_synth_params *sp, int32_t threads,
                                      const char *dir, tl__profile_progress progress,
                                      void *user, double *a, double *b, double *s_block,
                                      double *mm_s) {
    const char *kind = sp->n_head_kv == sp->n_head ? "multi-head" : "grouped";
    tl_model *m = NULL;
    tl_status st = open_synth_model(sp, threads, dir, kind, progress, user, &m);
    if (st != TL_OK) return st;
    double *times = malloc(TL__PROF_AT_POS * sizeof *times);
    float *logits = malloc((size_t)sp->n_vocab * sizeof *logits);
    if (!times || !logits) st = tl_error_set(TL_ERR_NOMEM, "attention profile: out of memory");
    /* each run AT_RUNS times, the medians kept: a shared machine's compute rate wanders
     * over seconds, and one run's slope falls wherever the wander put it; no new
     * repeat once they have taken AT_RUN_S (a slow machine, a sanitizer build) */
    double ra[AT_RUNS], rb[AT_RUNS], rs[AT_RUNS];
    const double t_runs = tl_now();
    int runs = 0;
    for (int r = 0; r < AT_RUNS && st == TL_OK && tl_now() - t_runs < AT_RUN_S; r++) {
        tl__profile_say(progress, user, "attention, %s: %d positions with 32-bit KV (%d of "
                        "%d)", kind, TL__PROF_AT_POS, r + 1, AT_RUNS);
        st = attention_run(m, 32, TL__PROF_AT_POS, logits, times, &ra[r], &rb[r],
                           r == 0 ? mm_s : NULL);
        if (st == TL_OK) {
            tl__profile_say(progress, user, "attention, %s: %d positions in blocks of %d "
                            "rows (%d of %d)", kind, TL__PROF_AT_BLOCK_POS,
                            TL_ATTN_BLOCK_MAX_ROWS, r + 1, AT_RUNS);
            st = attention_block_run(m, TL__PROF_AT_BLOCK_POS, &rs[r]);
        }
        runs += st == TL_OK;
    }
    if (st == TL_OK) {
        if (a) *a = tl_median(ra, (size_t)runs);
        *b = tl_median(rb, (size_t)runs);
        *s_block = tl_median(rs, (size_t)runs);
    }
    tl_model_close(m);
    free(times);
    free(logits);
    return st == TL_OK ? TL_OK : tl_error_wrap(st, "attention profile");
}

/* Seconds per MAC from a token-by-token slope b (per position, all layers) and a block
 * run's s_block: the FMA bound where noise swamped the slope; blocks share the reads,
 * never the arithmetic, so a block's rate lies between the single row's and the FMA
 * bound (noise outside it is clamped). */
static void attention_rates(const tl_synth_params *sp, const tl_hw_profile *p, double b,
                            double s_block, tl__profile_progress progress, void *user,
                            double *row_s, double *block_s) {
    const double fma_bound = 4.0 / p->fma_flops, hd = sp->n_embd / sp->n_head;
    if (b > 0) {
        *row_s = b / sp->n_layer / (sp->n_head * hd);
    } else {
        tl__profile_say(progress, user, "attention: no measurable slope; using the FMA bound");
        *row_s = fma_bound;
    }
    if (s_block <= 0) {
        tl__profile_say(progress, user, "attention blocks: no measurable slope; using the "
                        "single-row rate");
        s_block = *row_s;
    }
    *block_s = fmin(*row_s, fmax(s_block, fma_bound));
}

void tl__profile_attention_deep_model(tl_synth_params *sp) {
    tl__profile_attention_model(sp);
    sp->n_layer = TL__PROF_AT_DEEP_LAYERS, sp->n_ff = 128, sp->n_ctx = TL__PROF_AT_DEEP_POS;
    sp->weight_type = TL_TYPE_Q4_0;
}

/* KV beyond the caches: the deep model decoded one token at a time near position 0 and
 * again near TL__PROF_AT_DEEP_POS (prefilled in blocks between), where its attention
 * reads *bytes of f32 KV per token. A token at position p costs t0 + p * c(W): every
 * token reads all its positions, at the rate its working set W allows. With the
 * in-cache cost per position c_in (the token-by-token slope of the small model, per
 * layer), t0 = t_lo - p_lo * c_in and c(W_big) = (t_hi - t0) / p_hi; *s_per_byte gets
 * (c(W_big) - c_in) per KV byte read (0 when the difference drowns in noise). */
static tl_status attention_deep_run(int32_t threads, const char *dir, double c_in_layer,
                                    tl__profile_progress progress, void *user,
                                    double *s_per_byte, double *bytes) {
    enum { N = 48, SKIP = 16, ROWS = TL_ATTN_BLOCK_MAX_ROWS };
    tl_synth_params sp;
    tl__profile_attention_deep_model(&sp);
    const int32_t P = TL__PROF_AT_DEEP_POS - 16; /* positions in the context, a margin kept */
    const double kv_pos = 2.0 * sp.n_layer * sp.n_head_kv * (sp.n_embd / sp.n_head) * 4;
    tl_model *m = NULL;
    tl_status st = open_synth_model(&sp, threads, dir, "deep", progress, user, &m);
    if (st != TL_OK) return st;
    tl_context *c = NULL;
    st = open_context(m, P, ROWS, 32, &c);
    double lo[N], hi[N];
    int32_t pos = 0;
    tl__profile_say(progress, user, "attention beyond the caches: %d layers to position %d",
                    sp.n_layer, (int)P);
    for (int i = 0; i < N && st == TL_OK; i++, pos++) {
        int32_t tok = 1 + pos % 500;
        double t0 = tl_now();
        st = tl_decode(c, &tok, 1, NULL);
        lo[i] = tl_now() - t0;
    }
    while (st == TL_OK && pos + ROWS <= P - N) { /* the prefix, in blocks */
        int32_t toks[ROWS];
        for (int32_t r = 0; r < ROWS; r++) toks[r] = 1 + (pos + r) % 500;
        st = tl_decode(c, toks, ROWS, NULL);
        pos += ROWS;
    }
    const int32_t hi_pos0 = pos;
    for (int i = 0; i < N && st == TL_OK; i++, pos++) {
        int32_t tok = 1 + pos % 500;
        double t0 = tl_now();
        st = tl_decode(c, &tok, 1, NULL);
        hi[i] = tl_now() - t0;
    }
    tl_context_close(c);
    tl_model_close(m);
    if (st != TL_OK) return tl_error_wrap(st, "attention profile (beyond the caches)");
    /* medians past SKIP tokens (the switch from blocks to single rows), at the mean
     * position of those tokens */
    const double p_lo = SKIP + 0.5 * (N - SKIP - 1);
    const double p_hi = hi_pos0 + SKIP + 0.5 * (N - SKIP - 1);
    const double t_lo = tl_median(lo + SKIP, N - SKIP), t_hi = tl_median(hi + SKIP, N - SKIP);
    const double c_in = c_in_layer * sp.n_layer;
    const double t0 = t_lo - p_lo * c_in, c_big = (t_hi - t0) / p_hi;
    *bytes = p_hi * kv_pos;
    *s_per_byte = c_big > c_in ? (c_big - c_in) / kv_pos : 0;
    return TL_OK;
}

tl_status tl__profile_measure_attention(int32_t threads, const char *dir, tl_hw_profile *p,
                                        tl__profile_progress progress, void *user) {
    tl_synth_params sp, gq;
    tl__profile_attention_model(&sp);
    tl__profile_attention_gqa_model(&gq);
    const double hd = sp.n_embd / sp.n_head, kvd = sp.n_head_kv * hd, L = sp.n_layer;
    double a = 0, b = 0, s_block = 0, mm_s = -1; /* f32 KV; stored formats: kv_decode */
    double gb = 0, g_block = 0;
    tl_status st = attention_model_runs(&sp, threads, dir, progress, user, &a, &b, &s_block,
                                        &mm_s);
    if (st == TL_OK)
        st = attention_model_runs(&gq, threads, dir, progress, user, NULL, &gb, &g_block,
                                  NULL);
    if (st != TL_OK) return st;
    attention_rates(&sp, p, b, s_block, progress, user, &p->attn_s_per_mac,
                    &p->attn_block_s_per_mac);
    attention_rates(&gq, p, gb, g_block, progress, user, &p->attn_gqa_s_per_mac,
                    &p->attn_gqa_block_s_per_mac);
    st = measure_kv_decode(p);
    if (st == TL_OK) st = measure_kv_store(p);
    if (st != TL_OK) return st;
    /* the multi-head model's KV per token at its mean position: what the figures above
     * were measured with, in the caches (the grouped model reads half of it) */
    p->attn_cache_bytes = 0.5 * TL__PROF_AT_POS * 2.0 * L * kvd * 4;
    st = attention_deep_run(threads, dir, p->attn_s_per_mac * sp.n_head * hd, progress, user,
                            &p->attn_mem_s_per_byte, &p->attn_mem_bytes);
    if (st != TL_OK) return st;
    /* intercept: one token at position 0, less its matrix-product work (timed on the
     * model's own weights, as warm as in the loop - the streamed F32 rate would overstate
     * it for weights this small - or else estimated from that rate) and its element-wise
     * work, per layer: what is left is dispatches and bookkeeping */
    if (mm_s < 0) {
        double layer_macs = sp.n_embd * (sp.n_head * hd) + 2.0 * sp.n_embd * kvd +
                            (sp.n_head * hd) * sp.n_embd + 3.0 * sp.n_embd * sp.n_ff;
        mm_s = ((double)sp.n_vocab * sp.n_embd + L * layer_macs) / p->matmul_macs[0][0];
    }
    /* the cost model's element-wise terms: per layer 4*n_embd + 3*n_ff, per token the
     * embedding row (n_embd) and the logits' norm and output (n_embd + n_vocab) */
    double tok_elem = p->elementwise_s * (2.0 * sp.n_embd + sp.n_vocab);
    double fixed = (a - mm_s - tok_elem) / L -
                   p->elementwise_s * (4.0 * sp.n_embd + 3.0 * sp.n_ff) -
                   2.0 * kvd * p->kv_store_s[0]; /* the token's f32 K and V stored */
    p->layer_fixed_s = fixed > 0 ? fixed : 0;
    return TL_OK;
}
