/* test_sampler.c - sampling: greedy, top-k, top-p, temperature, repetition penalty and
 * seed reproducibility, on hand-made logits where the right answer is known. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "text/sampler.h"
#include "testutil.h"

#define V 8

static int draw(tl_sampler_params p, const float *src, int n, int *counts) {
    tl_sampler s;
    if (tl_sampler_init(&s, &p, V) != TL_OK) return 0;
    memset(counts, 0, V * sizeof *counts);
    for (int i = 0; i < n; i++) {
        float l[V];
        memcpy(l, src, sizeof l);
        counts[tl_sampler_sample(&s, l)]++;
    }
    tl_sampler_free(&s);
    return 1;
}

/* Descending value, then ascending id: the order top-k keeps the first k of. */
typedef struct { float v; int id; } ranked;
static int by_rank(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

/* top_k = k over a large vocabulary full of ties draws exactly what sampling without
 * top-k draws once every logit outside the first k (in that order) is -inf: the partial
 * selection keeps the same k, in the same order, as a full sort. */
static void top_k_matches_full_sort(void) {
    enum { N = 3000 };
    static float logits[N], masked[N], a[N], b[N];
    static ranked r[N];
    static const int ks[] = {1, 2, 40, 41, 777, N - 1};
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        logits[i] = (float)((x >> 24) % 23) * 0.25f - 2.0f; /* 23 values: many ties */
    }
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        const int k = ks[t];
        for (int i = 0; i < N; i++) r[i] = (ranked){logits[i], i};
        qsort(r, N, sizeof r[0], by_rank);
        for (int i = 0; i < N; i++) masked[i] = -INFINITY;
        for (int i = 0; i < k; i++) masked[r[i].id] = logits[r[i].id];
        tl_sampler_params pk = tl_sampler_default_params(), pf = pk;
        pk.top_k = k, pf.top_k = 0;
        pk.top_p = pf.top_p = 0.9f;
        pk.seed = pf.seed = 99;
        tl_sampler sk, sf;
        CHECK(tl_sampler_init(&sk, &pk, N) == TL_OK && tl_sampler_init(&sf, &pf, N) == TL_OK);
        int same = 1;
        for (int d = 0; d < 200; d++) {
            memcpy(a, logits, sizeof a), memcpy(b, masked, sizeof b);
            same &= tl_sampler_sample(&sk, a) == tl_sampler_sample(&sf, b);
        }
        CHECK_MSG(same, "top_k %d draws differ from a full sort's first %d", k, k);
        tl_sampler_free(&sk), tl_sampler_free(&sf);
    }
}

int main(void) {
    top_k_matches_full_sort();
    const float logits[V] = {1.0f, 3.0f, 2.0f, 0.5f, 2.9f, -1.0f, 0.0f, 2.95f};
    int c[V];
    tl_sampler_params p = tl_sampler_default_params();

    p.temperature = 0; /* greedy */
    CHECK(draw(p, logits, 10, c) && c[1] == 10);

    p = tl_sampler_default_params();
    p.top_k = 1; /* top-k 1 is greedy whatever the temperature */
    p.temperature = 5;
    CHECK(draw(p, logits, 200, c) && c[1] == 200);

    p.top_k = 3; /* only the 3 best (1, 7, 4) can appear */
    p.top_p = 1.0f;
    CHECK(draw(p, logits, 3000, c));
    CHECK(c[1] + c[7] + c[4] == 3000 && c[1] > 0 && c[7] > 0 && c[4] > 0);

    /* temperature 1, no truncation: frequencies follow softmax within 3 sigma */
    p.top_k = 0;
    p.top_p = 1.0f;
    p.temperature = 1.0f;
    int n = 20000;
    CHECK(draw(p, logits, n, c));
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(logits[i]);
    for (int i = 0; i < V; i++) {
        double pi = exp(logits[i]) / z, sd = sqrt(n * pi * (1 - pi));
        CHECK_MSG(fabs(c[i] - n * pi) < 3 * sd + 3, "token %d: %d vs %.0f", i, c[i], n * pi);
    }

    /* top-p 0.5: token 1 has ~31%, 7 ~25%: the nucleus is {1, 7} */
    p.top_p = 0.5f;
    CHECK(draw(p, logits, 2000, c) && c[1] + c[7] == 2000 && c[1] > c[7]);

    /* same seed, same sequence; another seed, another sequence */
    p = tl_sampler_default_params();
    p.temperature = 1.5f;
    p.top_k = 0;
    p.top_p = 1.0f;
    tl_sampler a, b, d;
    p.seed = 42;
    CHECK(tl_sampler_init(&a, &p, V) == TL_OK && tl_sampler_init(&b, &p, V) == TL_OK);
    p.seed = 43;
    CHECK(tl_sampler_init(&d, &p, V) == TL_OK);
    int same = 1, diff = 0;
    for (int i = 0; i < 100; i++) {
        float l1[V], l2[V], l3[V];
        memcpy(l1, logits, sizeof l1);
        memcpy(l2, logits, sizeof l2);
        memcpy(l3, logits, sizeof l3);
        int x = tl_sampler_sample(&a, l1), y = tl_sampler_sample(&b, l2);
        same &= x == y;
        diff += x != tl_sampler_sample(&d, l3);
    }
    CHECK(same && diff > 10);
    tl_sampler_free(&a);
    tl_sampler_free(&b);
    tl_sampler_free(&d);

    /* repetition penalty 2 on recent token 1 (logit 3 -> 1.5): greedy picks 7 */
    p = tl_sampler_default_params();
    p.temperature = 0;
    p.repeat_penalty = 2.0f;
    tl_sampler r;
    CHECK(tl_sampler_init(&r, &p, V) == TL_OK);
    tl_sampler_accept(&r, 1);
    tl_sampler_accept(&r, 1);
    float l[V];
    memcpy(l, logits, sizeof l);
    CHECK(tl_sampler_sample(&r, l) == 7 && fabsf(l[1] - 1.5f) < 1e-6f);
    tl_sampler_free(&r);

    /* bad parameters are refused */
    p = tl_sampler_default_params();
    p.temperature = -1;
    CHECK(tl_sampler_init(&r, &p, V) == TL_ERR_INVALID);
    p = tl_sampler_default_params();
    p.top_p = 0;
    CHECK(tl_sampler_init(&r, &p, V) == TL_ERR_INVALID);
    return tl_test_finish("test_sampler");
}
