/* ops.c - see ops.h. Matrix products are split over output rows in chunks that are
 * multiples of 16 (the fast GEMM's panel width); Q8_0/Q4_0 matrix-vector products round
 * X once for all chunks. Each thread writes only its own rows, and a row's result does
 * not depend on the chunk it is in, so results do not depend on the number of threads. */
#include <math.h>
#include <string.h>
#include "ops.h"
#include "../kernels/kernels.h"

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

static void matmul_task(void *arg, int task, int thread) {
    matmul_job *j = arg;
    size_t j0 = j->bounds[2 * task], j1 = j->bounds[2 * task + 1];
    const tl_weight *w = j->ws[j->which[task]];
    float *Y = j->Ys[j->which[task]];
    if (j->reference)
        tl_matmul_ref(w->type, w->data, w->cols, j0, j1, j->X, w->cols, j->n, Y, w->rows);
    else if (j->act)
        tl_matmul_fast_act(w->type, w->data, w->cols, j0, j1, j->act, j->n, Y, w->rows);
    else
        tl_matmul_fast(w->type, w->data, w->cols, j0, j1, j->X, w->cols, j->n, Y, w->rows,
                       j->scratch + (size_t)thread * j->scratch_floats);
}

/* Splits the rows of the matrices ws[0..nw) into chunks of whole 16-row panels, appended
 * as pairs (bounds[2t], bounds[2t+1]) with which[t] the matrix; returns their number.
 * Matrix-vector products (n <= 4) are short and memory-bound: one run covers all the
 * matrices (one wait instead of nw, and no thread idles while the next matrix starts),
 * in chunks that shrink (each about 1/(2*threads) of the rows left in all of them, down
 * to 16 rows) so that threads claiming them dynamically finish within a small chunk of
 * each other. Larger products use about 4 equal chunks per thread and matrix: each chunk
 * re-reads (and for Q types re-rounds) X. */
static size_t split_rows(const tl_weight *const *ws, size_t nw, size_t threads, size_t n,
                         size_t *bounds, unsigned char *which) {
    size_t t = 0, left = 0;
    for (size_t w = 0; w < nw; w++) left += ws[w]->rows;
    for (size_t w = 0; w < nw; w++) {
        const size_t rows = ws[w]->rows, row_bytes = tl_type_row_bytes(ws[w]->type, ws[w]->cols);
        const size_t cap = t + MAX_CHUNKS; /* this matrix's share of the arrays */
        size_t j = 0, chunk = 0;
        if (n > 4) {
            chunk = (rows + 4 * threads - 1) / (4 * threads);
            /* grouped products read their chunk once per group of 4 rows: chunks of at
             * most ~256 KiB stay in L2 between the groups */
            if (n <= TL_MATMUL_GROUPED_MAX_N && chunk * row_bytes > ((size_t)256 << 10))
                chunk = ((size_t)256 << 10) / (row_bytes ? row_bytes : 1);
            chunk = (chunk + 15) / 16 * 16;
            if (chunk < 16) chunk = 16;
            if ((rows + chunk - 1) / chunk > MAX_CHUNKS) chunk = (rows + MAX_CHUNKS - 1) / MAX_CHUNKS;
        }
        while (j < rows) {
            size_t c = chunk;
            if (!c) {
                c = (left / (2 * threads) + 8) / 16 * 16;
                if (c < 16) c = 16;
            }
            if (t == cap - 1 || c > rows - j) c = rows - j;
            bounds[2 * t] = j;
            bounds[2 * t + 1] = j + c;
            which[t++] = (unsigned char)w;
            j += c;
            left -= c;
        }
    }
    return t;
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
    size_t tasks = split_rows(ws, nw, threads, n, bounds, which);
    matmul_job j = {ws, X, n, bounds, which, NULL, Ys, scratch, scratch_floats, m->use_reference};
    if (act) {
        /* round X once, into thread 0's scratch, rather than once per chunk */
        tl_matmul_act_prepare(type, k, X, k, n, scratch);
        j.act = scratch;
    }
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
