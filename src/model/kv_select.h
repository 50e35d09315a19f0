/* kv_select.h - page-selective attention: which KV pages one query row attends to.
 *
 * Each full page keeps the per-channel minimum and maximum of its keys (kv/kv_cache.h).
 * For a query head q, every key k of the page satisfies q.k <= sum_j max(q_j kmin_j,
 * q_j kmax_j), so that sum (times the softmax scale) bounds the page's attention logits,
 * as in Quest (Tang et al., 2024). A page's score is its best head's bound minus that
 * head's largest bound: the log of an upper estimate of the page's share of that head's
 * attention. Attention then reads the sinks, the window, the open page, and the best
 * scoring other pages up to a page budget; everything else is left out. Exact mode (no
 * selection) remains the default; selection changes results and is opt-in.
 */
#ifndef TL_MODEL_KV_SELECT_H
#define TL_MODEL_KV_SELECT_H

#include <stdint.h>

typedef struct tl_kv_select {
    float page_share;    /* 0: exact attention; else the share of a sequence's pages read */
    int32_t sink_pages;  /* first pages, always read */
    int32_t window_pages;/* last full pages, always read */
    int32_t measure;     /* 1: also score the left-out pages exactly (they must be in
                            memory) and count the attention mass the selection kept */
} tl_kv_select;

/* Scores of full pages 0..n_full-1 for one row's queries q [n_head][head_dim]:
 * bounds[p] points to the page's [2][n_kv * head_dim] key minimum and maximum.
 * ub is scratch of n_head * n_full floats; score gets n_full floats. */
void tl_kv_select_scores(const float *q, int n_head, int n_kv, int head_dim,
                         const float *const *bounds, int32_t n_full, float *ub, float *score);

/* sel[p] (p < n_pages, the last being the open page when n_pages > n_full) = 1 for the
 * pages attention reads under `sp`; tmp is scratch of n_full floats. Returns the count. */
int32_t tl_kv_select_pages(const tl_kv_select *sp, const float *score, int32_t n_full,
                           int32_t n_pages, float *tmp, uint8_t *sel);

#endif
