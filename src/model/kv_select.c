/* kv_select.c - see kv_select.h. */
#include <math.h>
#include <stdlib.h>
#include "model/kv_select.h"

void tl_kv_select_scores(const float *q, int n_head, int n_kv, int head_dim,
                         const float *const *bounds, int32_t n_full, float *ub, float *score) {
    const int group = n_head / n_kv;
    const size_t kvd = (size_t)n_kv * (size_t)head_dim;
    const float scale = 1.0f / sqrtf((float)head_dim);
    for (int h = 0; h < n_head; h++) {
        const float *qh = q + (size_t)h * head_dim;
        const size_t off = (size_t)(h / group) * (size_t)head_dim;
        float *u = ub + (size_t)h * (size_t)n_full, best = -INFINITY;
        for (int32_t p = 0; p < n_full; p++) {
            const float *mn = bounds[p] + off, *mx = bounds[p] + kvd + off;
            float s = 0;
            for (int j = 0; j < head_dim; j++) {
                const float a = qh[j] * mn[j], b = qh[j] * mx[j];
                s += a > b ? a : b;
            }
            u[p] = s * scale;
            best = u[p] > best ? u[p] : best;
        }
        double z = 0; /* the head's estimated attention share of each page */
        for (int32_t p = 0; p < n_full; p++) z += (u[p] = expf(u[p] - best));
        for (int32_t p = 0; p < n_full; p++) u[p] = (float)(u[p] / z);
    }
    for (int32_t p = 0; p < n_full; p++) { /* summed over the heads that share the page */
        float s = 0;
        for (int h = 0; h < n_head; h++) s += ub[(size_t)h * (size_t)n_full + (size_t)p];
        score[p] = s;
    }
}

static int float_desc(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

int32_t tl_kv_select_pages(const tl_kv_select *sp, const float *score, int32_t n_full,
                           int32_t n_pages, float *tmp, uint8_t *sel) {
    int32_t budget = (int32_t)ceil((double)sp->page_share * n_pages), count = 0, n = 0;
    for (int32_t p = 0; p < n_pages; p++) {
        const int always = p >= n_full || p < sp->sink_pages || p >= n_full - sp->window_pages;
        sel[p] = (uint8_t)always;
        count += always;
        if (!always) tmp[n++] = score[p];
    }
    int32_t take = budget - count;
    if (take <= 0 || n == 0) return count;
    if (take > n) take = n;
    qsort(tmp, (size_t)n, sizeof *tmp, float_desc);
    const float cut = tmp[take - 1]; /* the take-th best score */
    for (int32_t p = 0; p < n_full && take > 0; p++) /* above the cut first */
        if (!sel[p] && score[p] > cut) sel[p] = 1, take--, count++;
    for (int32_t p = 0; p < n_full && take > 0; p++) /* then ties, earliest pages first */
        if (!sel[p] && score[p] == cut) sel[p] = 1, take--, count++;
    return count;
}
