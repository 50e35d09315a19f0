/* sampler.c - see sampler.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "text/sampler.h"
#include "base/rng.h"
#include "base/status.h"

typedef struct tl_cand { int32_t id; float v; } tl_cand;

tl_sampler_params tl_sampler_default_params(void) {
    tl_sampler_params p;
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.seed = 0x5eed;
    return p;
}

tl_status tl_sampler_params_check(const tl_sampler_params *p) {
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return tl_error_set(TL_ERR_INVALID, "temperature must be >= 0 (0 = greedy), got %g",
                            (double)p->temperature);
    if (p->top_k < 0)
        return tl_error_set(TL_ERR_INVALID, "top-k must be >= 0 (0 = off), got %d",
                            (int)p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return tl_error_set(TL_ERR_INVALID, "top-p must be in (0, 1] (1 = off), got %g",
                            (double)p->top_p);
    if (!(p->repeat_penalty > 0) || !isfinite(p->repeat_penalty))
        return tl_error_set(TL_ERR_INVALID, "the repetition penalty must be > 0 (1 = off), "
                            "got %g", (double)p->repeat_penalty);
    if (p->repeat_last_n < 0)
        return tl_error_set(TL_ERR_INVALID, "repeat-last-n must be >= 0, got %d",
                            (int)p->repeat_last_n);
    return TL_OK;
}

size_t tl_sampler_scratch_bytes(size_t n_vocab) { return n_vocab * sizeof(tl_cand); }

static tl_status init(tl_sampler *s, const tl_sampler_params *p, size_t n_vocab, void *scratch) {
    memset(s, 0, sizeof *s);
    s->p = *p;
    tl_status st = tl_sampler_params_check(p);
    if (st) return st;
    tl_xoshiro_seed(s->rng, p->seed);
    s->n_vocab = n_vocab;
    s->cap_history = (size_t)p->repeat_last_n;
    s->cand_shared = scratch != NULL;
    s->cand = scratch ? scratch : malloc(n_vocab * sizeof *s->cand);
    s->history = malloc((s->cap_history ? s->cap_history : 1) * sizeof *s->history);
    if (!s->cand || !s->history) {
        tl_sampler_free(s);
        return tl_error_set(TL_ERR_NOMEM, "sampler: out of memory");
    }
    return TL_OK;
}

tl_status tl_sampler_init(tl_sampler *s, const tl_sampler_params *p, size_t n_vocab) {
    return init(s, p, n_vocab, NULL);
}

tl_status tl_sampler_init_shared(tl_sampler *s, const tl_sampler_params *p, size_t n_vocab,
                                 void *scratch) {
    return init(s, p, n_vocab, scratch);
}

void tl_sampler_free(tl_sampler *s) {
    if (!s->cand_shared) free(s->cand);
    free(s->history);
    memset(s, 0, sizeof *s);
}

void tl_sampler_accept(tl_sampler *s, int32_t token) {
    if (s->cap_history == 0) return;
    s->history[s->head] = token;
    s->head = (s->head + 1) % s->cap_history;
    if (s->n_history < s->cap_history) s->n_history++;
}

static int cmp_desc(const void *a, const void *b) {
    const tl_cand *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id; /* stable tie-break by id */
}

/* cand[0..k) = the k candidates first in cmp_desc's order (a total order: value, then
 * id), sorted by it: the same as the first k of a full sort, in O(n log k). A heap keeps
 * the k best so far with the last of them at its root. */
static void top_k_select(tl_cand *cand, const float *logits, size_t n, size_t k) {
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        tl_cand c = {(int32_t)i, logits[i]};
        size_t at;
        if (len < k) { /* sift up from the end */
            at = len++;
            while (at > 0 && cmp_desc(&cand[(at - 1) / 2], &c) < 0) {
                cand[at] = cand[(at - 1) / 2];
                at = (at - 1) / 2;
            }
        } else if (cmp_desc(&c, &cand[0]) < 0) { /* better than the root: sift down */
            at = 0;
            for (;;) {
                size_t l = 2 * at + 1, r = l + 1, worst = l;
                if (l >= len) break;
                if (r < len && cmp_desc(&cand[r], &cand[l]) > 0) worst = r;
                if (cmp_desc(&cand[worst], &c) <= 0) break;
                cand[at] = cand[worst];
                at = worst;
            }
        } else {
            continue;
        }
        cand[at] = c;
    }
    qsort(cand, len, sizeof *cand, cmp_desc);
}

int32_t tl_sampler_sample(tl_sampler *s, float *logits) {
    const size_t n = s->n_vocab;
    if (s->p.repeat_penalty != 1.0f) {
        /* penalize each distinct recent token once */
        for (size_t i = 0; i < s->n_history; i++) {
            int32_t t = s->history[i];
            int seen = 0;
            for (size_t j = 0; j < i; j++) seen |= s->history[j] == t;
            if (seen || t < 0 || (size_t)t >= n) continue;
            logits[t] = logits[t] > 0 ? logits[t] / s->p.repeat_penalty
                                      : logits[t] * s->p.repeat_penalty;
        }
    }
    if (s->p.temperature <= 0) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (logits[i] > logits[best]) best = i;
        return (int32_t)best;
    }
    size_t k = n;
    if (s->p.top_k > 0 && (size_t)s->p.top_k < k) k = (size_t)s->p.top_k;
    if (k < n) {
        top_k_select(s->cand, logits, n, k); /* the k first of cmp_desc's order, sorted */
    } else {
        for (size_t i = 0; i < n; i++) s->cand[i] = (tl_cand){(int32_t)i, logits[i]};
        qsort(s->cand, n, sizeof *s->cand, cmp_desc);
    }
    double sum = 0;
    const float mx = s->cand[0].v;
    for (size_t i = 0; i < k; i++) {
        s->cand[i].v = expf((s->cand[i].v - mx) / s->p.temperature);
        sum += s->cand[i].v;
    }
    if (s->p.top_p < 1.0f) {
        double cum = 0;
        size_t keep = k;
        for (size_t i = 0; i < k; i++) {
            cum += s->cand[i].v / sum;
            if (cum >= s->p.top_p) { keep = i + 1; break; }
        }
        k = keep;
        sum = 0;
        for (size_t i = 0; i < k; i++) sum += s->cand[i].v;
    }
    double r = (double)(tl_xoshiro_next(s->rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
    double acc = 0;
    for (size_t i = 0; i < k; i++) {
        acc += s->cand[i].v;
        if (r < acc) return s->cand[i].id;
    }
    return s->cand[k - 1].id;
}
