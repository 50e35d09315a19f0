/* ops.c - see ops.h. Matrix products are split over output rows in chunks that are
 * multiples of 16 (the fast GEMM's panel width). Each thread writes only its own rows,
 * so results do not depend on the number of threads. */
#include <math.h>
#include <string.h>
#include "ops.h"
#include "../kernels/kernels.h"

typedef struct matmul_job {
    const tl_weight *w;
    const float *X;
    size_t n, chunk;
    float *Y;
    float *scratch;
    size_t scratch_floats;
    int reference;
} matmul_job;

static void matmul_task(void *arg, int task, int thread) {
    matmul_job *j = arg;
    size_t j0 = (size_t)task * j->chunk;
    size_t j1 = j0 + j->chunk < j->w->rows ? j0 + j->chunk : j->w->rows;
    if (j->reference)
        tl_matmul_ref(j->w->type, j->w->data, j->w->cols, j0, j1, j->X, j->w->cols, j->n,
                      j->Y, j->w->rows);
    else
        tl_matmul_fast(j->w->type, j->w->data, j->w->cols, j0, j1, j->X, j->w->cols, j->n,
                       j->Y, j->w->rows, j->scratch + (size_t)thread * j->scratch_floats);
}

void tl_op_matmul(tl_model *m, const tl_weight *w, const float *X, size_t n, float *Y,
                  float *scratch, size_t scratch_floats) {
    size_t threads = (size_t)tl_pool_threads(m->pool);
    /* about 4 chunks per thread for balance, each a multiple of 16 rows */
    size_t chunk = (w->rows + 4 * threads - 1) / (4 * threads);
    chunk = (chunk + 15) / 16 * 16;
    if (chunk < 16) chunk = 16;
    matmul_job j = {w, X, n, chunk, Y, scratch, scratch_floats, m->use_reference};
    tl_pool_run(m->pool, (int)((w->rows + chunk - 1) / chunk), matmul_task, &j);
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
