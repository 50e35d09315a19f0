/* neuron_calib.c - fitting each layer's neuron predictor and measuring the window it
 * allows (neuron_calib.h). */
#include "exec/neuron_calib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/budget.h"
#include "base/status.h"
#include "format/file_src.h"
#include "kernels/kernels.h"
#include "model/llama.h"
#include "model/neuron_fit.h"

#define UNION_QUANTILE 0.95

/* Input tensor `name` of layer l as f32 [rows][cols] (budget), checked to be that shape;
 * *out NULL and TL_OK when optional and absent. */
static tl_status read_f32(const tl_gguf *g, tl_file_src *src, const char *path, int32_t l,
                          const char *name, uint64_t cols, uint64_t rows, int optional,
                          struct tl_budget *budget, float **out) {
    char full[96];
    snprintf(full, sizeof full, "blk.%d.%s", (int)l, name);
    *out = NULL;
    const tl_gguf_tensor *t = tl_gguf_find_tensor(g, full);
    if (!t) return optional ? TL_OK : tl_error_set(TL_ERR_FORMAT, "%s: missing tensor '%s'",
                                                   path, full);
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
        return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' is not [%llu, %llu]", path, full,
                            (unsigned long long)cols, (unsigned long long)rows);
    void *raw = NULL;
    tl_status st = tl_budget_alloc(budget, (size_t)t->nbytes, 64, "neuron calibration", &raw);
    if (!st) st = tl_budget_alloc(budget, (size_t)(rows * cols) * sizeof(float), 64,
                                  "neuron calibration", (void **)out);
    if (!st && (st = tl_file_src_read(src, t->offset, raw, (size_t)t->nbytes)))
        st = tl_error_wrap(st, "reading tensor '%s'", full);
    if (!st) tl_dequant_row(t->type, raw, *out, (size_t)(rows * cols));
    tl_budget_free(budget, raw);
    if (st) {
        tl_budget_free(budget, *out);
        *out = NULL;
    }
    return st;
}

/* Y[T][f] = X W^T (+ bias) by the F32 GEMM. */
static void product(const float *X, size_t T, size_t d, const float *W, size_t f,
                    const float *bias, float *Y, float *scratch) {
    tl_matmul_fast(TL_TYPE_F32, W, d, 0, f, X, d, T, Y, f, scratch);
    if (bias)
        for (size_t t = 0; t < T; t++)
            for (size_t i = 0; i < f; i++) Y[t * f + i] += bias[i];
}

static int cmp_u32(const void *a, const void *b) {
    const uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The window's figures on one layer's predicted sets mask[T][f]: hits[k-1] (neurons of a
 * token some of the k tokens before predicted) and, over the tokens, their count; the
 * UNION_QUANTILE of the union of k consecutive sets into *uni[k-1] (the larger kept). */
static void window_stats(const uint8_t *mask, size_t T, size_t f, int32_t *last,
                         uint32_t *sizes, double *hits, double *count, double *uni,
                         double *mean_sum, double *mean_n) {
    const int K = TL_NEURON_WINDOW_MAX;
    uint32_t age_hist[TL_NEURON_WINDOW_MAX + 2];
    for (size_t i = 0; i < f; i++) last[i] = -1;
    for (size_t t = 0; t < T; t++) {
        memset(age_hist, 0, sizeof age_hist);
        for (size_t i = 0; i < f; i++) {
            if (!mask[t * f + i]) continue;
            *count += 1;
            if (last[i] >= 0) {
                const size_t age = t - (size_t)last[i]; /* >= 1 */
                age_hist[age <= (size_t)K ? age : (size_t)K + 1]++;
            }
            last[i] = (int32_t)t;
        }
        double run = 0;
        for (int k = 1; k <= K; k++) hits[k - 1] += (run += age_hist[k]);
        /* the union of tokens t-k+1 .. t: neurons last predicted within k-1 before t */
        memset(age_hist, 0, sizeof age_hist);
        for (size_t i = 0; i < f; i++)
            if (last[i] >= 0) {
                const size_t age = t - (size_t)last[i];
                if (age < (size_t)K) age_hist[age]++;
            }
        uint32_t u = 0;
        for (int k = 1; k <= K; k++) {
            u += age_hist[k - 1];
            sizes[(size_t)(k - 1) * T + t] = u;
        }
    }
    for (int k = 1; k <= K && (size_t)k <= T; k++) {
        uint32_t *s = sizes + (size_t)(k - 1) * T + (size_t)(k - 1); /* full windows only */
        const size_t n = T - (size_t)(k - 1);
        for (size_t t = 0; t < n; t++) mean_sum[k - 1] += (double)s[t] / (double)f;
        mean_n[k - 1] += (double)n;
        qsort(s, n, sizeof *s, cmp_u32);
        size_t q = (size_t)ceil(UNION_QUANTILE * (double)n) - 1;
        if (q >= n) q = n - 1;
        const double share = (double)s[q] / (double)f;
        if (share > uni[k - 1]) uni[k - 1] = share;
    }
}

void tl_neuron_predictors_free(tl_neuron_predictors *p) {
    free(p->V);
    free(p->U);
    free(p->pb);
    memset(p, 0, sizeof *p);
}

tl_status tl_neuron_calibrate(const tl_gguf *in, const char *in_path,
                              const tl_llama_hparams *hp, const float *X, size_t T,
                              size_t rank, double recall, struct tl_budget *budget,
                              tl_neuron_predictors *out) {
    memset(out, 0, sizeof *out);
    const size_t d = (size_t)hp->n_embd, f = (size_t)hp->n_ff, L = (size_t)hp->n_layer;
    const int gated = !hp->ffn_relu;
    if (rank > T) rank = T;
    if (rank > d) rank = d;
    if (rank > f) rank = f;
    if (rank == 0 || T < 2)
        return tl_error_set(TL_ERR_INVALID, "the neuron predictor needs a rank and at least "
                            "2 calibration rows (rank %zu, %zu rows)", rank, T);
    out->n_layer = (int32_t)L, out->d = d, out->f = f, out->rank = rank;
    out->V = malloc(L * rank * d * sizeof(float));
    out->U = malloc(L * f * rank * sizeof(float));
    out->pb = malloc(L * f * sizeof(float));
    tl_file_src src = {.fd = -1};
    uint64_t size;
    tl_status st = TL_OK;
    if (!out->V || !out->U || !out->pb) st = tl_error_set(TL_ERR_NOMEM, "out of memory for the "
                                                          "neuron predictors");
    else st = tl_file_src_open(in_path, TL_ERR_FORMAT, &src, &size);
    float *Z = NULL, *H = NULL, *mass = NULL, *scratch = NULL, *norm = NULL, *pscratch = NULL;
    uint8_t *mask = NULL;
    int32_t *last = NULL;
    uint32_t *sizes = NULL;
    const size_t Tf = T * f;
    if (!st) st = tl_budget_alloc(budget, Tf * sizeof(float), 64, "neuron calibration", (void **)&Z);
    if (!st) st = tl_budget_alloc(budget, Tf * sizeof(float), 64, "neuron calibration", (void **)&H);
    if (!st) st = tl_budget_alloc(budget, Tf * sizeof(float), 64, "neuron calibration", (void **)&mass);
    if (!st) st = tl_budget_alloc(budget, Tf, 64, "neuron calibration", (void **)&mask);
    if (!st) st = tl_budget_alloc(budget, tl_matmul_scratch_floats(d, T) * sizeof(float), 64,
                                  "neuron calibration", (void **)&scratch);
    if (!st) st = tl_budget_alloc(budget, f * sizeof(float), 64, "neuron calibration", (void **)&norm);
    if (!st) st = tl_budget_alloc(budget, T * rank * sizeof(float), 64, "neuron calibration",
                                  (void **)&pscratch);
    if (!st) st = tl_budget_alloc(budget, f * sizeof(int32_t), 64, "neuron calibration",
                                  (void **)&last);
    if (!st) st = tl_budget_alloc(budget, TL_NEURON_WINDOW_MAX * T * sizeof(uint32_t), 64,
                                  "neuron calibration", (void **)&sizes);
    double mass_all = 0, mass_kept = 0, active = 0, predicted = 0;
    double hits[TL_NEURON_WINDOW_MAX] = {0}, count = 0, uni[TL_NEURON_WINDOW_MAX] = {0};
    double mean_sum[TL_NEURON_WINDOW_MAX] = {0}, mean_n[TL_NEURON_WINDOW_MAX] = {0};
    for (size_t l = 0; l < L && !st; l++) {
        const float *Xl = X + l * T * d;
        float *down = NULL, *up = NULL, *act = NULL, *bias = NULL;
        /* each neuron's down column norm */
        st = read_f32(in, &src, in_path, (int32_t)l, "ffn_down.weight", f, d, 0, budget, &down);
        if (!st) {
            for (size_t i = 0; i < f; i++) norm[i] = 0;
            for (size_t r = 0; r < d; r++)
                for (size_t i = 0; i < f; i++) norm[i] += down[r * f + i] * down[r * f + i];
            for (size_t i = 0; i < f; i++) norm[i] = sqrtf(norm[i]);
        }
        tl_budget_free(budget, down);
        /* H = up's products (gated), then the activation's pre-activations Z */
        if (!st && gated) { /* with up's bias, where the file has one */
            float *up_b = NULL;
            st = read_f32(in, &src, in_path, (int32_t)l, "ffn_up.bias", f, 1, 1, budget, &up_b);
            if (!st) st = read_f32(in, &src, in_path, (int32_t)l, "ffn_up.weight", d, f, 0, budget,
                                   &up);
            if (!st) product(Xl, T, d, up, f, up_b, H, scratch);
            tl_budget_free(budget, up);
            tl_budget_free(budget, up_b);
        }
        const char *act_name = gated ? "ffn_gate.weight" : "ffn_up.weight";
        const char *bias_name = gated ? "ffn_gate.bias" : "ffn_up.bias";
        if (!st) st = read_f32(in, &src, in_path, (int32_t)l, bias_name, f, 1, 1, budget, &bias);
        if (!st) st = read_f32(in, &src, in_path, (int32_t)l, act_name, d, f, 0, budget, &act);
        if (!st) {
            product(Xl, T, d, act, f, bias, Z, scratch);
            double layer_mass = 0;
            for (size_t k = 0; k < Tf; k++) {
                const float z = Z[k] > 0 ? Z[k] : 0.0f;
                mass[k] = z > 0 ? (gated ? z * fabsf(H[k]) : z) * norm[k % f] : 0.0f;
                layer_mass += mass[k];
                active += Z[k] > 0;
            }
            tl_neuron_fit_in fi = {T, d, f, rank, Xl, act, bias, mass, recall,
                                   0x5eed0000u + (uint64_t)l};
            tl_neuron_fit_report rep;
            float *V = out->V + l * rank * d, *U = out->U + l * f * rank, *pb = out->pb + l * f;
            st = tl_neuron_fit_predictor(&fi, budget, V, U, pb, &rep);
            if (st) st = tl_error_wrap(st, "the neuron predictor of layer %zu", l);
            if (!st) {
                mass_all += layer_mass;
                mass_kept += rep.recall * layer_mass;
                tl_neuron_predict(V, U, pb, d, f, rank, Xl, T, mask, pscratch);
                for (size_t k = 0; k < Tf; k++) predicted += mask[k];
                window_stats(mask, T, f, last, sizes, hits, &count, uni, mean_sum, mean_n);
            }
        }
        tl_budget_free(budget, act);
        tl_budget_free(budget, bias);
    }
    if (!st) {
        tl_neuron_info *ni = &out->info;
        ni->rank = (int32_t)rank;
        ni->recall = (float)(mass_all > 0 ? mass_kept / mass_all : 1.0);
        ni->active = (float)(active / (double)(L * Tf));
        ni->predicted = (float)(predicted / (double)(L * Tf));
        ni->window_k = T > TL_NEURON_WINDOW_MAX ? TL_NEURON_WINDOW_MAX : (int32_t)T;
        for (int32_t k = 0; k < ni->window_k; k++) {
            ni->window_hit[k] = (float)(count > 0 ? hits[k] / count : 0);
            ni->window_union[k] = (float)uni[k];
            ni->window_mean[k] = (float)(mean_n[k] > 0 ? mean_sum[k] / mean_n[k] : 0);
        }
    }
    tl_budget_free(budget, Z);
    tl_budget_free(budget, H);
    tl_budget_free(budget, mass);
    tl_budget_free(budget, mask);
    tl_budget_free(budget, scratch);
    tl_budget_free(budget, norm);
    tl_budget_free(budget, pscratch);
    tl_budget_free(budget, last);
    tl_budget_free(budget, sizes);
    tl_file_src_close(&src);
    if (st) tl_neuron_predictors_free(out);
    return st;
}
