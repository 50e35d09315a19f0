/* ops.c - see ops.h. Matrix products are split over output rows; each thread writes
 * only its own rows, and a row's result does not depend on the range it was computed in,
 * so results do not depend on the number of threads or on who computed what.
 *
 * Matrix-vector products (n <= 4, decode) are memory-bound streams, and a thread's stream
 * ramps up again each time it starts reading somewhere that does not follow what it read
 * last: the software prefetch and the hardware streamer restart cold, so threads taking
 * interleaved pieces of tens of KiB read far slower than threads streaming contiguous
 * ranges, and only pieces of hundreds of KiB come close (a prefetch burst at the jump
 * does not help, and pieces walked backwards are slower still).
 * So each run's rows - all its matrices, end to end, in the order given - are cut into
 * one contiguous region per thread, walked front to back in small claimed steps (a step
 * that follows the last one does not restart the stream). A thread done with its region
 * steals the back half of the largest unclaimed remainder of another's, and that becomes
 * its region, which can be stolen from in turn: a few large steals per run instead of
 * many small ones, since threads do not run at quite the same speed.
 * Larger products use about 4 equal chunks per thread and matrix (2 for a GEMM, which
 * packs its share of the weights again per chunk), whole 32-row panels for weights in
 * panels; each chunk re-reads X, and for Q types all share one rounding of it. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include "model/ops.h"
#include "kernels/kernels.h"

#define MAX_CHUNKS 64

typedef struct matmul_job {
    const tl_weight *const *ws; /* the matrices, all multiplied by the same X */
    const float *X;
    size_t n;
    const size_t *bounds; /* task t computes rows [bounds[t], bounds[t+1]) of ws[which[t]] */
    const unsigned char *which;
    const float *act;     /* X prepared once for all tasks (tl_matmul_act_prepare), or NULL */
    float *const *Ys;
    float *scratch;
    size_t scratch_floats;
    int reference;
} matmul_job;

static tl_weights_layout layout_of(const tl_weight *w) {
    return w->panels ? TL_LAYOUT_PANELS : TL_LAYOUT_ROWS;
}

/* Rows [j0, j1) of matrix `which` of the product, on pool thread `thread`. */
static void product_rows(const matmul_job *j, size_t which, size_t j0, size_t j1, int thread) {
    const tl_weight *w = j->ws[which];
    float *Y = j->Ys[which];
    if (j->reference && w->panels)
        tl_matmul_panels_ref(w->type, w->data, w->cols, j0, j1, j->X, w->cols, j->n, Y, w->rows);
    else if (j->reference)
        tl_matmul_ref(w->type, w->data, w->cols, j0, j1, j->X, w->cols, j->n, Y, w->rows);
    else if (j->act)
        tl_matmul_fast_act(w->type, layout_of(w), w->data, w->cols, j0, j1, j->act, j->n, Y,
                           w->rows);
    else
        tl_matmul_fast(w->type, w->data, w->cols, j0, j1, j->X, w->cols, j->n, Y, w->rows,
                       j->scratch + (size_t)thread * j->scratch_floats);
}

static void matmul_task(void *arg, int task, int thread) {
    matmul_job *j = arg;
    product_rows(j, j->which[task], j->bounds[2 * task], j->bounds[2 * task + 1], thread);
}

/* The chunked path (products of more than 4 rows, and matrix-vector products that the
 * regions below cannot hold): splits the rows of the matrices ws[0..nw) into about 4
 * equal chunks of whole 16-row blocks (32-row panels for weights in panels) per thread
 * and matrix (2 for a GEMM), appended as pairs (bounds[2t], bounds[2t+1]) with which[t]
 * the matrix; returns their number. */
static size_t split_rows(const tl_weight *const *ws, size_t nw, size_t threads, size_t n,
                         size_t *bounds, unsigned char *which) {
    size_t t = 0;
    for (size_t w = 0; w < nw; w++) {
        const size_t rows = ws[w]->rows, row_bytes = tl_type_row_bytes(ws[w]->type, ws[w]->cols);
        /* a GEMM call packs its share of the weights again per chunk (unless in panels):
         * fewer, larger chunks for it (2 per thread still balance a late thread) */
        const int gemm = tl_matmul_takes_gemm(ws[w]->type, n);
        const size_t per = gemm ? 2 : 4;
        size_t j = 0, chunk = (rows + per * threads - 1) / (per * threads);
        /* grouped products read their chunk once per group of 4 rows: chunks of at most
         * ~256 KiB stay in L2 between the groups */
        if (!gemm && n <= TL_MATMUL_GROUPED_MAX_N && chunk * row_bytes > ((size_t)256 << 10))
            chunk = ((size_t)256 << 10) / (row_bytes ? row_bytes : 1);
        const size_t unit = ws[w]->panels ? TL_PANEL_ROWS : 16; /* panels are never split */
        if (chunk == 0) chunk = 1; /* rows of more than 256 KiB */
        if ((rows + chunk - 1) / chunk > MAX_CHUNKS) chunk = (rows + MAX_CHUNKS - 1) / MAX_CHUNKS;
        chunk = (chunk + unit - 1) / unit * unit;
        while (j < rows) {
            size_t c = chunk < rows - j ? chunk : rows - j;
            bounds[2 * t] = j;
            bounds[2 * t + 1] = j + c;
            which[t++] = (unsigned char)w;
            j += c;
        }
    }
    return t;
}

/* ---- matrix-vector products over contiguous regions (see the top of the file) ---- */

#define MATVEC_MAX_THREADS 32        /* regions live on the caller's stack; more threads */
                                     /* take the chunked path */
#define MATVEC_STEP_BYTES (128 << 10) /* an owner's claim: many cache lines per CAS, */
                                     /* yet a small share of a region */
#define MATVEC_MIN_STEAL 16          /* rows; smaller remainders are left to their owner */

/* The unclaimed rows [next, end) of one region, as indices into the run's concatenated
 * rows, packed end << 32 | next so that owner and thieves claim with one CAS. */
typedef struct region { _Alignas(64) _Atomic uint64_t span; } region;

typedef struct matvec_job {
    matmul_job *mm;  /* the product (bounds/which unused) */
    size_t nw, threads;
    /* matrix w holds the concatenated rows [first[w], first[w + 1]) */
    size_t first[TL_MATMUL_MULTI_MAX + 1];
    size_t step_rows[TL_MATMUL_MULTI_MAX];
    size_t unit;     /* every boundary is a multiple of this many rows (32: panels) */
    region *regions; /* [threads] */
} matvec_job;

static uint64_t span_of(size_t next, size_t end) { return (uint64_t)end << 32 | next; }

/* Claims the owner's next step of r (never crossing into the next matrix): [*g0, *g1) in
 * concatenated rows, in matrix *w. 0 when r is empty. */
static int claim_step(const matvec_job *j, region *r, size_t *w, size_t *g0, size_t *g1) {
    uint64_t s = atomic_load_explicit(&r->span, memory_order_relaxed);
    for (;;) {
        size_t next = (size_t)(s & 0xffffffffu), end = (size_t)(s >> 32);
        if (next >= end) return 0;
        size_t m = 0;
        while (j->first[m + 1] <= next) m++;
        /* guided: a claim takes at most a quarter of what is left of the region (but at
         * least MATVEC_MIN_STEAL rows), so the last claims are small and the threads
         * finish together; early claims are whole steps, few CASes */
        size_t take = j->step_rows[m], quarter = (end - next) / 4 / j->unit * j->unit;
        const size_t least = MATVEC_MIN_STEAL > j->unit ? MATVEC_MIN_STEAL : j->unit;
        if (take > quarter) take = quarter > least ? quarter : least;
        size_t stop = next + take;
        if (stop > j->first[m + 1]) stop = j->first[m + 1];
        if (stop > end) stop = end;
        if (atomic_compare_exchange_weak_explicit(&r->span, &s, span_of(stop, end),
                                                  memory_order_relaxed, memory_order_relaxed)) {
            *w = m, *g0 = next, *g1 = stop;
            return 1;
        }
    }
}

/* Moves the back half of the largest unclaimed remainder (of at least 2 MATVEC_MIN_STEAL
 * rows) of another region into `mine`, which is empty. 0 when there is none. */
static int steal_half(matvec_job *j, size_t mine) {
    for (;;) {
        const size_t least = MATVEC_MIN_STEAL > j->unit ? MATVEC_MIN_STEAL : j->unit;
        size_t best = j->threads, best_left = 2 * least - 1;
        uint64_t best_span = 0;
        for (size_t v = 0; v < j->threads; v++) {
            if (v == mine) continue;
            uint64_t s = atomic_load_explicit(&j->regions[v].span, memory_order_relaxed);
            size_t next = (size_t)(s & 0xffffffffu), end = (size_t)(s >> 32);
            if (end > next && end - next > best_left)
                best = v, best_left = end - next, best_span = s;
        }
        if (best == j->threads) return 0;
        size_t next = (size_t)(best_span & 0xffffffffu), end = (size_t)(best_span >> 32);
        size_t mid = next + (end - next) / 2 / j->unit * j->unit;
        if (atomic_compare_exchange_strong_explicit(&j->regions[best].span, &best_span,
                                                    span_of(next, mid), memory_order_relaxed,
                                                    memory_order_relaxed)) {
            atomic_store_explicit(&j->regions[mine].span, span_of(mid, end), memory_order_relaxed);
            return 1;
        }
    }
}

/* Task `owner`: region `owner` front to back, then stolen halves of the others'. */
static void matvec_task(void *arg, int owner, int thread) {
    matvec_job *j = arg;
    size_t w, g0, g1;
    do {
        while (claim_step(j, &j->regions[owner], &w, &g0, &g1))
            product_rows(j->mm, w, g0 - j->first[w], g1 - j->first[w], thread);
    } while (steal_half(j, (size_t)owner));
}

static void matvec_run(tl_llama *m, matmul_job *mm, size_t nw, size_t threads) {
    region regions[MATVEC_MAX_THREADS];
    /* the run's matrices agree on panels (tl_op_matmul_multi), all rows multiples of 32;
     * K-quant rows go in pairs (the AVX-512 kernel's unit: an odd row takes the one-row
     * kernel, same bits, slower) */
    const size_t unit = mm->ws[0]->panels ? TL_PANEL_ROWS
                        : tl_type_act_block(mm->ws[0]->type) == TL_QK_K ? 2 : 1;
    matvec_job j = {mm, nw, threads, {0}, {0}, unit, regions};
    for (size_t w = 0; w < nw; w++) {
        const tl_weight *W = mm->ws[w];
        size_t row_bytes = tl_type_row_bytes(W->type, W->cols);
        size_t step = MATVEC_STEP_BYTES / (row_bytes ? row_bytes : 1);
        j.step_rows[w] = step < unit ? unit : step / unit * unit;
        j.first[w + 1] = j.first[w] + W->rows;
    }
    const size_t total = j.first[nw];
    for (size_t t = 0; t < threads; t++)
        atomic_init(&regions[t].span, span_of(total * t / threads / unit * unit,
                                              t + 1 == threads ? total
                                                               : total * (t + 1) / threads / unit * unit));
    tl_pool_run(m->pool, (int)threads, matvec_task, &j);
}

/* Rounding X for a product, in `parts` row ranges. */
typedef struct act_job {
    tl_type type;
    tl_weights_layout layout;
    size_t k;
    const float *X;
    size_t n, parts;
    float *act;
} act_job;

static void act_task(void *arg, int task, int thread) {
    (void)thread;
    const act_job *a = arg;
    const size_t i0 = a->n * (size_t)task / a->parts, i1 = a->n * (size_t)(task + 1) / a->parts;
    tl_matmul_act_prepare(a->type, a->layout, a->k, a->X, a->k, a->n, i0, i1, a->act);
}

void tl_op_matmul_multi(tl_llama *m, const tl_weight *const *ws, size_t nw, const float *X,
                        size_t n, float *const *Ys, float *scratch, size_t scratch_floats) {
    size_t threads = (size_t)tl_pool_threads(m->pool);
    size_t bounds[2 * MAX_CHUNKS * TL_MATMUL_MULTI_MAX];
    unsigned char which[MAX_CHUNKS * TL_MATMUL_MULTI_MAX];
    /* one shared rounding of X serves all the matrices only when they agree on type and
     * width (and the task arrays hold them); otherwise each gets its own run */
    const tl_type type = ws[0]->type;
    const size_t k = ws[0]->cols;
    const tl_weights_layout layout = layout_of(ws[0]);
    const int act = !m->use_reference && tl_matmul_act_floats(type, layout, k, n) != 0;
    int together = nw <= TL_MATMUL_MULTI_MAX;
    for (size_t i = 1; i < nw && together; i++)
        together = ws[i]->type == type && ws[i]->cols == k && ws[i]->panels == ws[0]->panels;
    if (!together) {
        for (size_t w = 0; w < nw; w++)
            tl_op_matmul_multi(m, ws + w, 1, X, n, Ys + w, scratch, scratch_floats);
        return;
    }
    matmul_job j = {ws, X, n, bounds, which, NULL, Ys, scratch, scratch_floats, m->use_reference};
    if (act) {
        /* round X once, into thread 0's scratch, rather than once per range; split over
         * the threads when there are rows enough to share */
        act_job a = {type, layout, k, X, n, (size_t)(n >= 2 * threads ? threads : 1), scratch};
        if (a.parts > 1) tl_pool_run(m->pool, (int)a.parts, act_task, &a);
        else tl_matmul_act_prepare(type, layout, k, X, k, n, 0, n, scratch);
        j.act = scratch;
    }
    size_t total_rows = 0;
    for (size_t w = 0; w < nw; w++) total_rows += ws[w]->rows;
    if (n <= 4 && threads <= MATVEC_MAX_THREADS && total_rows <= UINT32_MAX) {
        matvec_run(m, &j, nw, threads);
        return;
    }
    size_t tasks = split_rows(ws, nw, threads, n, bounds, which);
    tl_pool_run(m->pool, (int)tasks, matmul_task, &j);
}

void tl_op_matmul_serial(const tl_llama *m, const tl_weight *w, size_t j0, size_t j1,
                         const float *X, size_t n, float *Y, size_t ldy, float *scratch) {
    if (m->use_reference && w->panels)
        tl_matmul_panels_ref(w->type, w->data, w->cols, j0, j1, X, w->cols, n, Y, ldy);
    else if (m->use_reference)
        tl_matmul_ref(w->type, w->data, w->cols, j0, j1, X, w->cols, n, Y, ldy);
    else if (w->panels) {
        tl_matmul_act_prepare(w->type, TL_LAYOUT_PANELS, w->cols, X, w->cols, n, 0, n, scratch);
        tl_matmul_fast_act(w->type, TL_LAYOUT_PANELS, w->data, w->cols, j0, j1, scratch, n, Y, ldy);
    } else
        tl_matmul_fast(w->type, w->data, w->cols, j0, j1, X, w->cols, n, Y, ldy, scratch);
}

void tl_op_matmul(tl_llama *m, const tl_weight *w, const float *X, size_t n, float *Y,
                  float *scratch, size_t scratch_floats) {
    tl_op_matmul_multi(m, &w, 1, X, n, &Y, scratch, scratch_floats);
}

void tl_op_rmsnorm(const tl_llama *m, const float *x, const float *g, size_t n, size_t d,
                   float eps, float *out) {
    if (m->use_reference) tl_rmsnorm_ref(x, g, n, d, eps, out);
    else tl_rmsnorm_fast(x, g, n, d, eps, out);
}

void tl_op_layernorm(const float *x, const float *g, const float *b, size_t n, size_t d,
                     float eps, float *out) {
    for (size_t r = 0; r < n; r++) {
        const float *xr = x + r * d;
        float *o = out + r * d;
        double sum = 0, ss = 0;
        for (size_t i = 0; i < d; i++) sum += xr[i];
        const double mean = sum / (double)d;
        for (size_t i = 0; i < d; i++) ss += ((double)xr[i] - mean) * ((double)xr[i] - mean);
        const float scale = (float)(1.0 / sqrt(ss / (double)d + eps)), mf = (float)mean;
        for (size_t i = 0; i < d; i++) o[i] = (xr[i] - mf) * scale * g[i] + (b ? b[i] : 0.0f);
    }
}

void tl_op_rope_freqs(int rope_dim, float base, double *freq) {
    for (int i = 0; i < rope_dim / 2; i++) freq[i] = pow((double)base, -2.0 * i / rope_dim);
}

void tl_op_rope_angles(int rope_dim, int32_t pos, const double *freq,
                       const float *freq_divisors, float *cs) {
    for (int i = 0; i < rope_dim / 2; i++) {
        double theta = (double)pos * freq[i];
        if (freq_divisors) theta /= freq_divisors[i];
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
}

void tl_op_rope_rotate(float *x, int n_heads, int head_dim, int rope_dim, int mode,
                       const float *cs) {
    const int half = rope_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *p = x + (size_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            const int i0 = mode != TL_ROPE_PAIRS ? i : 2 * i;
            const int i1 = mode != TL_ROPE_PAIRS ? i + half : 2 * i + 1;
            const float c = cs[2 * i], s = cs[2 * i + 1], a = p[i0], b = p[i1];
            p[i0] = a * c - b * s;
            p[i1] = a * s + b * c;
        }
    }
    if (mode != TL_ROPE_HALF_AS_PAIRS) return;
    /* (x[i], x[i + half]) -> (x[2i], x[2i+1]); the loader bounds head_dim by 4096 */
    float tmp[4096];
    for (int h = 0; h < n_heads; h++) {
        float *p = x + (size_t)h * head_dim;
        memcpy(tmp, p, (size_t)rope_dim * sizeof *p);
        for (int i = 0; i < half; i++) {
            p[2 * i] = tmp[i];
            p[2 * i + 1] = tmp[i + half];
        }
    }
}

void tl_op_rope(float *x, int n_heads, int head_dim, int rope_dim, int32_t pos, float base,
                int mode, const float *freq_divisors) {
    double freq[2048]; /* rope_dim <= head_dim <= 4096 (the loader's bound) */
    float cs[4096];
    tl_op_rope_freqs(rope_dim, base, freq);
    tl_op_rope_angles(rope_dim, pos, freq, freq_divisors, cs);
    tl_op_rope_rotate(x, n_heads, head_dim, rope_dim, mode, cs);
}

void tl_op_swiglu(const tl_llama *m, float *gate, const float *up, size_t n) {
    if (m->use_reference) tl_swiglu_ref(gate, up, n);
    else tl_swiglu_fast(gate, up, n);
}

void tl_op_reglu(float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) gate[i] = gate[i] > 0.0f ? gate[i] * up[i] : 0.0f;
}

void tl_op_relu(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
