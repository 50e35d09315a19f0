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
    const tl_weight *w;
    const float *X;
    size_t n;
    const size_t *bounds; /* task t computes rows [bounds[t], bounds[t+1]) */
    const float *act;     /* X prepared once for all tasks (tl_matmul_act_prepare), or NULL */
    float *Y;
    float *scratch;
    size_t scratch_floats;
    int reference;
} matmul_job;

static void matmul_task(void *arg, int task, int thread) {
    matmul_job *j = arg;
    size_t j0 = j->bounds[task], j1 = j->bounds[task + 1];
    const tl_weight *w = j->w;
    if (j->reference)
        tl_matmul_ref(w->type, w->data, w->cols, j0, j1, j->X, w->cols, j->n, j->Y, w->rows);
    else if (j->act)
        tl_matmul_fast_act(w->type, w->data, w->cols, j0, j1, j->act, j->n, j->Y, w->rows);
    else
        tl_matmul_fast(w->type, w->data, w->cols, j0, j1, j->X, w->cols, j->n, j->Y, w->rows,
                       j->scratch + (size_t)thread * j->scratch_floats);
}

/* Splits `rows` into chunks of whole 16-row panels; returns their number, chunk t being
 * [bounds[t], bounds[t+1]). Matrix-vector products (n <= 4) are short and memory-bound:
 * chunks shrink (each about 1/(2*threads) of the rows left, down to 16 rows), so threads
 * that claim them dynamically finish within a small chunk of each other. Larger products
 * use about 4 equal chunks per thread: each chunk re-reads (and for Q types re-rounds) X. */
static size_t split_rows(size_t rows, size_t row_bytes, size_t threads, size_t n,
                         size_t *bounds) {
    size_t t = 0, j = 0;
    bounds[0] = 0;
    if (n > 4) {
        size_t chunk = (rows + 4 * threads - 1) / (4 * threads);
        /* grouped products read their chunk once per group of 4 rows: chunks of at most
         * ~256 KiB stay in L2 between the groups */
        if (n <= TL_MATMUL_GROUPED_MAX_N && chunk * row_bytes > ((size_t)256 << 10))
            chunk = ((size_t)256 << 10) / (row_bytes ? row_bytes : 1);
        chunk = (chunk + 15) / 16 * 16;
        if (chunk < 16) chunk = 16;
        if ((rows + chunk - 1) / chunk > MAX_CHUNKS) chunk = (rows + MAX_CHUNKS - 1) / MAX_CHUNKS;
        for (; j < rows; j += chunk) bounds[++t] = j + chunk < rows ? j + chunk : rows;
        return t;
    }
    while (j < rows) {
        size_t left = rows - j, c = (left / (2 * threads) + 8) / 16 * 16;
        if (c < 16) c = 16;
        if (t == MAX_CHUNKS - 1 || c > left) c = left;
        j += c;
        bounds[++t] = j;
    }
    return t;
}

void tl_op_matmul(tl_model *m, const tl_weight *w, const float *X, size_t n, float *Y,
                  float *scratch, size_t scratch_floats) {
    size_t threads = (size_t)tl_pool_threads(m->pool), bounds[MAX_CHUNKS + 1];
    size_t tasks = split_rows(w->rows, tl_type_row_bytes(w->type, w->cols), threads, n, bounds);
    matmul_job j = {w, X, n, bounds, NULL, Y, scratch, scratch_floats, m->use_reference};
    if (!m->use_reference && tl_matmul_act_floats(w->type, w->cols, n)) {
        /* round X once, into thread 0's scratch, rather than once per chunk */
        tl_matmul_act_prepare(w->type, w->cols, X, w->cols, n, scratch);
        j.act = scratch;
    }
    tl_pool_run(m->pool, (int)tasks, matmul_task, &j);
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

void tl_op_swiglu(float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        gate[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
