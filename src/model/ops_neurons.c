/* ops_neurons.c - a ReLU FFN computed over its predicted neurons only (LLM in a Flash
 * 3.1-3.3; the layout in model/flash_layout.h, the window in model/neurons.h).
 *
 * For the n rows of a product:
 *   1. the predictor: s = U (V x) + b per row; the neurons used are those with s > 0 in
 *      some row (the union: every row computes all of them), ascending;
 *   2. their runs: in memory when the tensor is resident; else the window's slots, the
 *      missed ones read (m->fetch_runs) and put in slots; else (no window, or more
 *      neurons than it has slots) all read to the site buffer;
 *   3. h_i per row from the run's gate and up rows (the row-major product's kernels on
 *      one row each - Q8_0: a row dot kernel, the int8 GEMM's repacking not repaid by
 *      one row - so for the same inputs h_i equals the dense FFN's, bit for bit under the
 *      reference kernels), threaded over the neurons; a neuron whose gate is off in
 *      every row skips its up row;
 *   4. y = sum_i h_i down_i by the column product over the runs' down parts, each output
 *      one sum over the neurons in ascending order whatever slot holds them, so neither
 *      the window nor the threads change a result.
 * With m->params.neuron_measure every neuron is read and computed, the output mass of the
 * active ones summed, and the neurons outside the prediction zeroed before step 4, so
 * the result is the predicted neurons' and the recall is measured on the same pass.
 */
#include "model/ops.h"

#include <math.h>
#include <stdint.h>
#include "base/status.h"
#include "kernels/kernels.h"
#include "model/flash_layout.h"

#define NEURONS_PER_TASK 64

typedef struct neuron_job {
    const tl_llama *m;
    tl_llama_scratch *s;
    const tl_weight *w, *bias;      /* the runs; the activation's bias (or name NULL) */
    const tl_weight *up_bias;       /* gated: up's bias (or name NULL) */
    const uint8_t *base;
    size_t run_bytes, d, n, nparts;
    const int32_t *chan, *idx;      /* the neurons, and where each run lies */
    size_t nc;
    const float *xn, *act;          /* act: xn rounded once for every dot (or NULL) */
    const tl_block_q8_act *q8;      /* Q8_0 runs: xn's rounded blocks for the row dots */
    float *H;                       /* [n][ldh] by idx */
    size_t ldh, tmp_floats;
    int measure;
} neuron_job;

/* y[r] = the run part at p . xn[r] for the n rows, by the row-major product's kernels. */
static void part_dots(const neuron_job *j, const uint8_t *p, float *y, float *scratch) {
    const tl_type type = j->w->type;
    if (j->m->use_reference) tl_matmul_ref(type, p, j->d, 0, 1, j->xn, j->d, j->n, y, 1);
    else if (j->q8) tl_dot_q8_0_act_fast(p, j->d, j->q8, j->n, y);
    else if (j->act) tl_matmul_fast_act(type, TL_LAYOUT_ROWS, p, j->d, 0, 1, j->act, j->n, y, 1);
    else tl_matmul_fast(type, p, j->d, 0, 1, j->xn, j->d, j->n, y, 1, scratch);
}

static void neuron_task(void *arg, int task, int thread) {
    const neuron_job *j = arg;
    const size_t t0 = (size_t)task * NEURONS_PER_TASK;
    const size_t t1 = t0 + NEURONS_PER_TASK < j->nc ? t0 + NEURONS_PER_TASK : j->nc;
    float *g = j->s->neuron_tmp + (size_t)thread * j->tmp_floats, *u = g + j->n;
    float *scratch = j->s->mm_scratch + (size_t)thread * j->s->mm_scratch_floats;
    const size_t part_bytes = tl_type_row_bytes(j->w->type, j->d);
    const int gated = j->nparts == 3;
    const float *b = j->bias->name ? j->bias->data : NULL;
    const float *b_up = gated && j->up_bias->name ? j->up_bias->data : NULL;
    for (size_t t = t0; t < t1; t++) {
        const uint8_t *run = j->base + (size_t)j->idx[t] * j->run_bytes;
        const int32_t i = j->chan[t];
        part_dots(j, run, g, scratch);
        int on = 0;
        for (size_t r = 0; r < j->n; r++) {
            if (b) g[r] += b[i];
            on |= g[r] > 0;
        }
        if (gated && on) {
            part_dots(j, run + part_bytes, u, scratch);
            if (b_up)
                for (size_t r = 0; r < j->n; r++) u[r] += b_up[i];
        }
        for (size_t r = 0; r < j->n; r++)
            j->H[r * j->ldh + (size_t)j->idx[t]] = !(g[r] > 0) ? 0.0f : gated ? g[r] * u[r] : g[r];
        if (j->measure) { /* the down column's norm, for the output mass */
            float *col = u + j->n;
            const uint8_t *down = run + (j->nparts - 1) * part_bytes;
            tl_dequant_row(j->w->type, down, col, j->d);
            double ss = 0;
            for (size_t c = 0; c < j->d; c++) ss += (double)col[c] * col[c];
            j->s->neuron_norm[i] = (float)sqrt(ss);
        }
    }
}

/* The neurons used: predicted in some row (all of them without prediction or when
 * measuring). s->up holds the scores [n][f]. */
static size_t choose(tl_llama *m, tl_llama_scratch *s, int32_t l, const float *xn, size_t n,
                     int all, int32_t *chan) {
    const tl_llama_layer *L = &m->layers[l];
    const size_t f = (size_t)m->hp.n_ff;
    size_t nc = 0;
    if (all) {
        for (size_t i = 0; i < f; i++) chan[nc++] = (int32_t)i;
        return nc;
    }
    tl_op_matmul(m, &L->pred_v, xn, n, s->pred_t, s->mm_scratch, s->mm_scratch_floats);
    tl_op_matmul(m, &L->pred_u, s->pred_t, n, s->up, s->mm_scratch, s->mm_scratch_floats);
    const float *pb = L->pred_b.data;
    for (size_t i = 0; i < f; i++) {
        int on = 0;
        for (size_t r = 0; r < n && !on; r++) on = s->up[r * f + i] + pb[i] > 0;
        if (on) chan[nc++] = (int32_t)i;
    }
    return nc;
}

/* Measuring: the output mass of each row's active neurons, and of those predicted; the
 * neurons outside the prediction are zeroed in H. */
static void measure_recall(tl_llama *m, tl_llama_scratch *s, int32_t l, size_t n, float *H,
                           size_t ldh) {
    const size_t f = (size_t)m->hp.n_ff;
    const float *pb = m->layers[l].pred_b.data;
    double kept = 0, all = 0;
    for (size_t i = 0; i < f; i++) {
        int predicted = 0;
        for (size_t r = 0; r < n && !predicted; r++) predicted = s->up[r * f + i] + pb[i] > 0;
        for (size_t r = 0; r < n; r++) {
            float *h = &H[r * ldh + i];
            const double mass = fabs((double)*h) * s->neuron_norm[i];
            all += mass;
            if (predicted) kept += mass;
            else if (m->params.neuron_predict) *h = 0.0f; /* else: the dense FFN, as asked */
        }
    }
    s->recall_kept += kept;
    s->recall_all += all;
}

/* A product of one sequence's rows (a prompt) with more neurons than the window holds
 * read them all to the site buffer: the window takes the last row's predicted neurons
 * from there, the ones the next token most likely needs, so decoding does not start from
 * an empty window. (Rows of many sequences would replace the window each step.) */
static void prime_window(tl_llama *m, tl_llama_scratch *s, int32_t l, size_t n,
                         const uint8_t *base, size_t run_bytes) {
    tl_neuron_window *win = m->window;
    const size_t f = (size_t)m->hp.n_ff;
    const float *score = s->up + (n - 1) * f, *pb = m->layers[l].pred_b.data;
    int32_t *chan = s->neuron_idx + f, *slot = s->neuron_idx + 2 * f;
    int32_t *miss = (int32_t *)(void *)s->neuron_norm; /* free until a measuring pass */
    size_t nc = 0, n_miss = 0;
    for (size_t i = 0; i < f && nc < win->capacity; i++)
        if (score[i] + pb[i] > 0) chan[nc++] = (int32_t)i;
    tl_neuron_window_lookup(win, l, chan, nc, slot, miss, &n_miss, 0);
    tl_neuron_window_fill(win, l, chan, slot, miss, n_miss, base, run_bytes);
}

tl_status tl_op_neuron_ffn(tl_llama *m, tl_llama_scratch *s, int32_t l, const float *xn,
                           size_t n, int one_sequence, float *y) {
    const tl_llama_layer *L = &m->layers[l];
    const tl_weight *w = &L->neurons;
    const size_t f = (size_t)m->hp.n_ff, d = (size_t)m->hp.n_embd;
    const int measure = m->params.neuron_measure && L->pred_v.name;
    int32_t *chan = s->run_chan, *idx = s->neuron_idx, *miss = idx + f, *missed = idx + 2 * f;
    /* measuring: the scores and the predicted count first, then every neuron */
    const size_t predicted = measure ? choose(m, s, l, xn, n, 0, chan) : 0;
    const size_t nc = choose(m, s, l, xn, n, measure || !m->params.neuron_predict, chan);
    s->neurons_used += measure ? predicted : nc;
    s->neurons_total += f;
    const size_t run_bytes = tl_type_row_bytes(w->type, w->cols);
    const uint8_t *base = w->data;
    size_t ldh = f;
    tl_neuron_window *win = m->window;
    tl_status st = TL_OK;
    if (base) {
        for (size_t t = 0; t < nc; t++) idx[t] = chan[t];
    } else if (!m->fetch_runs) {
        return tl_error_set(TL_ERR_INVALID, "%s is neither in memory nor readable by runs",
                            w->name);
    } else if (win && nc <= win->capacity && !measure) {
        size_t n_miss = 0;
        tl_neuron_window_lookup(win, l, chan, nc, idx, miss, &n_miss, 1);
        for (size_t k = 0; k < n_miss; k++) missed[k] = chan[miss[k]];
        const uint8_t *read = NULL; /* (none missed: a fetch of nothing, counted) */
        st = m->fetch_runs(m->fetch_user, w, missed, n_miss, &read);
        if (!st) st = m->fetch_wait(m->fetch_user, SIZE_MAX);
        if (st) return st;
        tl_neuron_window_fill(win, l, chan, idx, miss, n_miss, read, run_bytes);
        base = tl_neuron_window_slots(win, l);
        ldh = win->capacity;
    } else {
        st = m->fetch_runs(m->fetch_user, w, chan, nc, &base);
        if (!st) st = m->fetch_wait(m->fetch_user, SIZE_MAX);
        if (st) return st;
        for (size_t t = 0; t < nc; t++) idx[t] = chan[t];
        if (win && !measure && m->params.neuron_predict && one_sequence)
            prime_window(m, s, l, n, base, run_bytes);
    }
    tl_flash_part parts[TL_FLASH_MAX_PARTS];
    const size_t nparts = (size_t)tl_flash_neuron_parts(&m->hp, parts);
    neuron_job j = {m, s, w, nparts == 3 ? &L->b_gate : &L->b_up, &L->b_up, base,
                    run_bytes, d, n, nparts, chan, idx, nc, xn, NULL, NULL, s->gate, ldh,
                    2 * (size_t)s->max_rows + d, measure};
    if (!m->use_reference && w->type == TL_TYPE_Q8_0) {
        /* one Q8_0 row at a time: the row dot kernel, on xn rounded once (thread 0's
         * scratch: n * d / 32 blocks of 36 bytes, within a product's scratch) */
        tl_block_q8_act *q8 = (tl_block_q8_act *)(void *)s->mm_scratch;
        for (size_t r = 0; r < n; r++)
            tl_quant_act_row_fast(xn + r * d, q8 + r * (d / TL_QK), d);
        j.q8 = q8;
    } else if (!m->use_reference && tl_matmul_act_floats(w->type, TL_LAYOUT_ROWS, d, n)) {
        /* round xn once for every neuron's dots, in thread 0's scratch (the dots then
         * need no scratch of their own) */
        tl_matmul_act_prepare(w->type, TL_LAYOUT_ROWS, d, xn, d, n, 0, n, s->mm_scratch);
        j.act = s->mm_scratch;
    }
    const size_t tasks = (nc + NEURONS_PER_TASK - 1) / NEURONS_PER_TASK;
    if (tasks) tl_pool_run(m->pool, (int)tasks, neuron_task, &j);
    if (measure) measure_recall(m, s, l, n, s->gate, ldh);
    const size_t len = d;
    float *const Ys[1] = {y};
    tl_op_runs_multiply(m, w, base, (nparts - 1) * d, idx, nc, s->gate, ldh, n, Ys, &len, 1,
                        s->mm_scratch, s->mm_scratch_floats, 0);
    return TL_OK;
}
