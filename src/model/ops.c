/* ops.c - see ops.h. Matrix products are split over output rows; each thread writes
 * only its own rows, and a row's result does not depend on the range it was computed in,
 * so results do not depend on the number of threads or on who computed what.
 *
 * Matrix-vector products (n <= 4, decode) are memory-bound streams, and every time a
 * thread starts reading somewhere new its stream ramps up again (software prefetch and
 * the hardware prefetcher start cold). So each thread owns one contiguous region of every
 * matrix and walks it front to back in steps: the kernel's prefetch runs past the end of
 * a step into the next one, so the stream never restarts inside a region. A thread done
 * with its regions takes small steps from the back of the others' (no thread idles while
 * another still has rows). Measured on TinyLlama Q8_0 decode, 2 threads, Xeon VM: the
 * matmuls streamed at 30.9 GB/s with dynamically claimed shrinking chunks (~20 per
 * matrix; fewer, larger ones were faster when balanced, more were slower) and at
 * 31.3-31.6 GB/s with owned regions; one static range per thread was slower (28.9:
 * threads do not run at the same speed). Larger products use about 4 equal chunks per
 * thread and matrix: each chunk re-reads (and for Q types re-rounds) X. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include "ops.h"
#include "../kernels/kernels.h"

#define MAX_CHUNKS 64

/* One run's products: Ys[w] = X ws[w]^T, all with the same X. */
typedef struct product {
    const tl_weight *const *ws;
    const float *X;
    size_t n;
    const float *act; /* X prepared once for all ranges (tl_matmul_act_prepare), or NULL */
    float *const *Ys;
    float *scratch;   /* per thread, scratch_floats each */
    size_t scratch_floats;
    int reference;
} product;

/* Rows [j0, j1) of product w, on pool thread `thread`. */
static void product_rows(const product *p, size_t w, size_t j0, size_t j1, int thread) {
    const tl_weight *W = p->ws[w];
    float *Y = p->Ys[w];
    if (p->reference)
        tl_matmul_ref(W->type, W->data, W->cols, j0, j1, p->X, W->cols, p->n, Y, W->rows);
    else if (p->act)
        tl_matmul_fast_act(W->type, W->data, W->cols, j0, j1, p->act, p->n, Y, W->rows);
    else
        tl_matmul_fast(W->type, W->data, W->cols, j0, j1, p->X, W->cols, p->n, Y, W->rows,
                       p->scratch + (size_t)thread * p->scratch_floats);
}

typedef struct matmul_job {
    product p;
    const size_t *bounds; /* task t computes rows [bounds[t], bounds[t+1]) of ws[which[t]] */
    const unsigned char *which;
} matmul_job;

static void matmul_task(void *arg, int task, int thread) {
    matmul_job *j = arg;
    product_rows(&j->p, j->which[task], j->bounds[2 * task], j->bounds[2 * task + 1], thread);
}

/* Splits the rows of the matrices ws[0..nw) (products of n > 4 rows) into about 4 equal
 * chunks of whole 16-row panels per thread and matrix, appended as pairs (bounds[2t],
 * bounds[2t+1]) with which[t] the matrix; returns their number. */
static size_t split_rows(const tl_weight *const *ws, size_t nw, size_t threads, size_t n,
                         size_t *bounds, unsigned char *which) {
    size_t t = 0;
    for (size_t w = 0; w < nw; w++) {
        const size_t rows = ws[w]->rows, row_bytes = tl_type_row_bytes(ws[w]->type, ws[w]->cols);
        size_t j = 0, chunk = (rows + 4 * threads - 1) / (4 * threads);
        /* grouped products read their chunk once per group of 4 rows: chunks of at most
         * ~256 KiB stay in L2 between the groups */
        if (n <= TL_MATMUL_GROUPED_MAX_N && chunk * row_bytes > ((size_t)256 << 10))
            chunk = ((size_t)256 << 10) / (row_bytes ? row_bytes : 1);
        chunk = (chunk + 15) / 16 * 16;
        if (chunk < 16) chunk = 16;
        if ((rows + chunk - 1) / chunk > MAX_CHUNKS) chunk = (rows + MAX_CHUNKS - 1) / MAX_CHUNKS;
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

/* ---- matrix-vector products over owned regions (see the top of the file) ---- */

#define MATVEC_MAX_THREADS 32        /* more threads take the chunked path */
#define MATVEC_STEP_BYTES (64 << 10) /* an owner's step: one claim per ~4 us of streaming */
#define MATVEC_STEAL_ROWS 16         /* a thief's step: the finishing imbalance */

/* Rows [front, back) of one thread's region of one matrix not yet claimed, packed as
 * back << 32 | front so owner and thieves claim with one compare-and-swap. */
typedef struct region { _Alignas(64) _Atomic uint64_t span; } region;

typedef struct matvec_job {
    product p;
    size_t nw, threads;
    size_t step_rows[TL_MATMUL_MULTI_MAX];
    region *regions; /* [w * threads + owner] */
} matvec_job;

/* Claims up to `rows` rows of r, from the front (owner) or the back (thief). */
static int claim(region *r, size_t rows, int from_back, size_t *j0, size_t *j1) {
    uint64_t s = atomic_load_explicit(&r->span, memory_order_relaxed);
    for (;;) {
        size_t front = (size_t)(s & 0xffffffffu), back = (size_t)(s >> 32);
        if (front >= back) return 0;
        size_t take = back - front < rows ? back - front : rows;
        if (from_back) *j0 = back - take, *j1 = back;
        else *j0 = front, *j1 = front + take;
        uint64_t next = from_back ? (uint64_t)(back - take) << 32 | front
                                  : (uint64_t)back << 32 | (front + take);
        if (atomic_compare_exchange_weak_explicit(&r->span, &s, next, memory_order_relaxed,
                                                  memory_order_relaxed))
            return 1;
    }
}

/* Task `owner`: its own regions front to back, then steps from the back of the others'
 * (last matrix first, where the other threads will arrive last). */
static void matvec_task(void *arg, int owner, int thread) {
    matvec_job *j = arg;
    size_t j0, j1;
    for (size_t w = 0; w < j->nw; w++)
        while (claim(&j->regions[w * j->threads + (size_t)owner], j->step_rows[w], 0, &j0, &j1))
            product_rows(&j->p, w, j0, j1, thread);
    for (size_t w = j->nw; w-- > 0;)
        for (size_t o = 1; o < j->threads; o++) {
            region *r = &j->regions[w * j->threads + ((size_t)owner + o) % j->threads];
            while (claim(r, MATVEC_STEAL_ROWS, 1, &j0, &j1)) product_rows(&j->p, w, j0, j1, thread);
        }
}

static void matvec_run(tl_model *m, const product *p, size_t nw, size_t threads) {
    region regions[TL_MATMUL_MULTI_MAX * MATVEC_MAX_THREADS];
    const tl_weight *const *ws = p->ws;
    matvec_job j = {*p, nw, threads, {0}, regions};
    for (size_t w = 0; w < nw; w++) {
        size_t rows = ws[w]->rows, row_bytes = tl_type_row_bytes(ws[w]->type, ws[w]->cols);
        size_t step = MATVEC_STEP_BYTES / (row_bytes ? row_bytes : 1);
        j.step_rows[w] = step < MATVEC_STEAL_ROWS ? MATVEC_STEAL_ROWS : step;
        for (size_t t = 0; t < threads; t++) {
            uint64_t front = rows * t / threads, back = rows * (t + 1) / threads;
            atomic_init(&regions[w * threads + t].span, back << 32 | front);
        }
    }
    tl_pool_run(m->pool, (int)threads, matvec_task, &j);
}

void tl_op_matmul_multi(tl_model *m, const tl_weight *const *ws, size_t nw, const float *X,
                        size_t n, float *const *Ys, float *scratch, size_t scratch_floats) {
    size_t threads = (size_t)tl_pool_threads(m->pool);
    size_t bounds[2 * MAX_CHUNKS * TL_MATMUL_MULTI_MAX];
    unsigned char which[MAX_CHUNKS * TL_MATMUL_MULTI_MAX];
    /* one shared rounding of X serves all the matrices only when they agree on type and
     * width (and the task arrays hold them); otherwise each gets its own run */
    const tl_type type = ws[0]->type;
    const size_t k = ws[0]->cols;
    const int act = !m->use_reference && tl_matmul_act_floats(type, k, n) != 0;
    int together = nw <= TL_MATMUL_MULTI_MAX;
    for (size_t i = 1; i < nw && together; i++) together = ws[i]->type == type && ws[i]->cols == k;
    if (!together) {
        for (size_t w = 0; w < nw; w++)
            tl_op_matmul_multi(m, ws + w, 1, X, n, Ys + w, scratch, scratch_floats);
        return;
    }
    product p = {ws, X, n, NULL, Ys, scratch, scratch_floats, m->use_reference};
    if (act) {
        /* round X once, into thread 0's scratch, rather than once per range */
        tl_matmul_act_prepare(type, k, X, k, n, scratch);
        p.act = scratch;
    }
    int regions_fit = n <= 4 && threads <= MATVEC_MAX_THREADS; /* and rows fit 32 bits */
    for (size_t w = 0; w < nw; w++) regions_fit = regions_fit && ws[w]->rows <= UINT32_MAX;
    if (regions_fit) {
        matvec_run(m, &p, nw, threads);
        return;
    }
    size_t tasks = split_rows(ws, nw, threads, n, bounds, which);
    matmul_job j = {p, bounds, which};
    tl_pool_run(m->pool, (int)tasks, matmul_task, &j);
}

void tl_op_matmul(tl_model *m, const tl_weight *w, const float *X, size_t n, float *Y,
                  float *scratch, size_t scratch_floats) {
    tl_op_matmul_multi(m, &w, 1, X, n, &Y, scratch, scratch_floats);
}

void tl_op_rmsnorm(const float *x, const float *g, size_t n, size_t d, float eps, float *out) {
    for (size_t r = 0; r < n; r++) {
        const float *xr = x + r * d;
        float *o = out + r * d;
        double ss = 0;
        for (size_t i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
        float scale = (float)(1.0 / sqrt(ss / (double)d + eps));
        for (size_t i = 0; i < d; i++) o[i] = xr[i] * scale * g[i];
    }
}

void tl_op_rope(float *x, int n_heads, int head_dim, int rope_dim, int32_t pos, float base) {
    for (int i = 0; i < rope_dim / 2; i++) {
        double theta = (double)pos * pow((double)base, -2.0 * i / rope_dim);
        float c = (float)cos(theta), s = (float)sin(theta);
        for (int h = 0; h < n_heads; h++) {
            float *p = x + (size_t)h * head_dim + 2 * i;
            float a = p[0], b = p[1];
            p[0] = a * c - b * s;
            p[1] = a * s + b * c;
        }
    }
}

void tl_op_swiglu(const tl_model *m, float *gate, const float *up, size_t n) {
    if (m->use_reference) tl_swiglu_ref(gate, up, n);
    else tl_swiglu_fast(gate, up, n);
}
