/* perplexity.c - perplexity of a token sequence (tierllm.h tl_perplexity).
 *
 * The tokens are cut into windows of n_ctx; each window runs in a fresh context and every
 * token after a window's first is scored by the logits of the position before it, so a
 * window's first token is the only one not predicted (only the first window begins with
 * BOS, if the tokens do). The log-softmax is taken in double from the row's maximum.
 * llama.cpp's llama-perplexity scores only the second half of each window, each beginning
 * with BOS, so the two tools' figures are not comparable. */
#include <math.h>
#include "tierllm.h"
#include "base/budget.h"
#include "base/status.h"
#include "exec/model_handle.h"
#include "exec/perplexity.h"

size_t tl_perplexity_rows(size_t n, int32_t n_ctx) {
    return n < (size_t)n_ctx ? n : (size_t)n_ctx;
}

static tl_status check_args(size_t n, int32_t n_ctx) {
    if (n < 2 || n_ctx < 2)
        return tl_error_set(TL_ERR_INVALID, "perplexity needs at least 2 tokens and a context "
                            "of at least 2 (got %zu tokens, context %d)", n, (int)n_ctx);
    return TL_OK;
}

tl_status tl_perplexity_into(tl_model *m, const int32_t *ids, size_t n, int32_t n_ctx,
                             float *logits, double *ppl, size_t *n_scored) {
    *ppl = NAN;
    if (n_scored) *n_scored = 0;
    tl_status st = check_args(n, n_ctx);
    if (st) return st;
    const size_t win = (size_t)n_ctx, vocab = (size_t)m->lm.hp.n_vocab;
    double nll = 0;
    size_t scored = 0;
    for (size_t a = 0; a + 1 < n && !st; a += win) {
        const size_t len = n - a < win ? n - a : win;
        tl_context_params cp = tl_context_default_params();
        cp.n_ctx = (int32_t)len;
        tl_context *c = NULL;
        st = tl_context_open(m, &cp, &c);
        if (!st) st = tl_decode_all_logits(c, ids + a, len, logits);
        tl_context_close(c);
        for (size_t i = 0; !st && i + 1 < len; i++) {
            const float *row = logits + i * vocab;
            double mx = row[0], z = 0;
            for (size_t v = 1; v < vocab; v++) mx = row[v] > mx ? row[v] : mx;
            for (size_t v = 0; v < vocab; v++) z += exp((double)row[v] - mx);
            nll -= (double)row[ids[a + i + 1]] - mx - log(z);
            scored++;
        }
    }
    if (st) return st;
    *ppl = exp(nll / (double)scored);
    if (n_scored) *n_scored = scored;
    return TL_OK;
}

tl_status tl_perplexity(tl_model *m, const int32_t *ids, size_t n, int32_t n_ctx,
                        double *ppl, size_t *n_scored) {
    *ppl = NAN;
    if (n_scored) *n_scored = 0;
    tl_status st = check_args(n, n_ctx);
    if (st) return st;
    void *buf;
    if ((st = tl_budget_alloc(m->lm.budget, tl_perplexity_rows(n, n_ctx) *
                                                (size_t)m->lm.hp.n_vocab * sizeof(float),
                              0, "perplexity logits", &buf)))
        return st;
    st = tl_perplexity_into(m, ids, n, n_ctx, buf, ppl, n_scored);
    tl_budget_free(m->lm.budget, buf);
    return st;
}
