/* test_ops.c - the threaded matrix products (model/ops.c) and the large budget blocks
 * they stream from (and tl_mib_up, which budget messages state their minimum with).
 *
 * tl_op_matmul_multi splits rows over threads (for n <= 4 one contiguous region per
 * thread across all the run's matrices, walked in claimed steps, with halves stolen by
 * threads that finish first; equal chunks above): whatever the split, and whoever stole
 * what (7 threads on a 2-core machine steal in every run: a mutation that drops the
 * stolen half fails ~300 checks), every output row must equal the
 * one-range product tl_matmul_fast(0, rows) bit for bit, for every type, for 1-7
 * threads, for several matrices in one run (rows that do not divide evenly, matrices
 * smaller than a chunk), and with the reference kernels within float rounding of it.
 * No row may be left uncomputed: Y starts as NaN everywhere.
 * Budget blocks of 4 MiB or more (huge-page advice, as the weights get): the alignment
 * asked for, the whole block writable, the accounting back to 0 on free, the limit.
 * RoPE: tl_op_rope and its three steps (one row's angles shared by its q and k heads) bit
 * for bit as the rotation written out longhand, every pairing mode, with and without
 * frequency divisors. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "base/rng.h"
#include "testutil.h"
#include "base/budget.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "model/llama.h"
#include "model/ops.h"

static uint64_t rng = 12345;
static float frand(void) {
    return tl_rand_sym(&rng);
}

typedef struct mat { tl_weight w; uint8_t *data; } mat;

static void make(mat *m, tl_type type, size_t rows, size_t cols) {
    size_t rb = tl_type_row_bytes(type, cols);
    float *row = malloc(cols * sizeof *row);
    m->data = malloc(rb * rows);
    for (size_t j = 0; j < rows; j++) {
        for (size_t c = 0; c < cols; c++) row[c] = frand();
        tl_quant_row(type, row, m->data + j * rb, cols);
    }
    free(row);
    memset(&m->w, 0, sizeof m->w);
    m->w.type = m->w.file_type = type;
    m->w.rows = rows;
    m->w.cols = cols;
    m->w.data = m->data;
    m->w.name = "test";
}

/* Products of X (n rows) with nw matrices of the given row counts, through the pool of
 * `threads`, against tl_matmul_fast over each whole matrix. */
static void check_products(tl_type type, size_t cols, const size_t *rows, size_t nw, size_t n,
                           int threads, int reference) {
    tl_pool *pool;
    if (tl_pool_open(threads, &pool)) {
        CHECK(!"pool");
        return;
    }
    tl_llama m;
    memset(&m, 0, sizeof m);
    m.pool = pool;
    m.use_reference = reference;
    mat mats[TL_MATMUL_MULTI_MAX];
    const tl_weight *ws[TL_MATMUL_MULTI_MAX];
    float *Ys[TL_MATMUL_MULTI_MAX], *want[TL_MATMUL_MULTI_MAX];
    float *X = malloc(n * cols * sizeof *X);
    for (size_t i = 0; i < n * cols; i++) X[i] = frand();
    size_t sf = tl_matmul_scratch_floats(cols, n);
    float *scratch = aligned_alloc(64, ((size_t)threads * sf * sizeof(float) + 63) / 64 * 64);
    float *one = aligned_alloc(64, (sf * sizeof(float) + 63) / 64 * 64);
    for (size_t w = 0; w < nw; w++) {
        make(&mats[w], type, rows[w], cols);
        ws[w] = &mats[w].w;
        Ys[w] = malloc(n * rows[w] * sizeof(float));
        want[w] = malloc(n * rows[w] * sizeof(float));
        for (size_t i = 0; i < n * rows[w]; i++) Ys[w][i] = NAN;
        tl_matmul_fast(type, mats[w].data, cols, 0, rows[w], X, cols, n, want[w], rows[w], one);
    }
    tl_op_matmul_multi(&m, ws, nw, X, n, Ys, scratch, sf);
    for (size_t w = 0; w < nw; w++) {
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < n * rows[w]; i++) {
            float y = Ys[w][i], e = want[w][i];
            int ok = reference ? fabsf(y - e) <= 1e-4f * (1.0f + fabsf(e))
                               : memcmp(&y, &e, sizeof y) == 0;
            if (!ok && bad++ == 0) first = i;
        }
        CHECK_MSG(bad == 0, "%s cols %zu n %zu threads %d ref %d: matrix %zu (%zu rows): %zu "
                  "of %zu outputs differ, first at %zu (%g vs %g)", tl_type_name(type), cols, n,
                  threads, reference, w, rows[w], bad, n * rows[w], first,
                  (double)Ys[w][first], (double)want[w][first]);
        free(mats[w].data), free(Ys[w]), free(want[w]);
    }
    free(X), free(scratch), free(one);
    tl_pool_close(pool);
}

static void test_products(void) {
    static const tl_type types[] = {TL_TYPE_F32, TL_TYPE_F16, TL_TYPE_BF16, TL_TYPE_Q8_0,
                                    TL_TYPE_Q4_0};
    /* q/k/v-like (unequal), matrices smaller than a chunk, odd counts, one row, and a
     * long one split into many chunks */
    static const size_t sets[][3] = {{96, 32, 32}, {7, 1, 13}, {1000, 333, 17}, {3000, 5, 2}};
    static const int thread_counts[] = {1, 2, 3, 7};
    static const size_t ns[] = {1, 2, 4, 5, 33};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++)
            for (size_t t = 0; t < sizeof thread_counts / sizeof thread_counts[0]; t++)
                for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                    size_t cols = s % 2 ? 64 : 160; /* Q types: 2 and 5 blocks */
                    if (s == 3 && ns[ni] > 4) continue; /* the long set is for matvec */
                    check_products(types[ti], cols, sets[s], 3, ns[ni], thread_counts[t], 0);
                    if (s == 0) check_products(types[ti], cols, sets[s], 1, ns[ni], thread_counts[t], 0);
                }
    /* the reference kernels take the same split */
    check_products(TL_TYPE_Q8_0, 96, (const size_t[]){200, 40}, 2, 1, 3, 1);
    check_products(TL_TYPE_F16, 96, (const size_t[]){200, 40}, 2, 3, 2, 1);
}

static void test_large_blocks(void) {
    tl_budget *b;
    CHECK(tl_budget_open(64u << 20, &b) == TL_OK);
    static const size_t sizes[] = {(4u << 20) - 4096, 4u << 20, (5u << 20) + 123, 9u << 20};
    static const size_t aligns[] = {64, 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t a = 0; a < 2; a++) {
            uint8_t *p = NULL;
            CHECK(tl_budget_alloc(b, sizes[i], aligns[a], "block", (void **)&p) == TL_OK);
            if (!p) continue;
            CHECK(((uintptr_t)p & (aligns[a] - 1)) == 0);
            memset(p, 0xa5, sizes[i]); /* every byte is ours */
            CHECK(p[0] == 0xa5 && p[sizes[i] - 1] == 0xa5);
            CHECK(tl_budget_used(b) >= sizes[i] && tl_budget_used(b) <= sizes[i] + aligns[a]);
            tl_budget_free(b, p);
            CHECK(tl_budget_used(b) == 0);
        }
    /* several at once, freed out of order */
    void *q[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) CHECK(tl_budget_alloc(b, 6u << 20, 4096, "block", &q[i]) == TL_OK);
    tl_budget_free(b, q[1]);
    tl_budget_free(b, q[0]);
    tl_budget_free(b, q[2]);
    CHECK(tl_budget_used(b) == 0);
    /* the limit still holds for large blocks */
    void *big = NULL;
    CHECK(tl_budget_alloc(b, 65u << 20, 64, "too big", &big) == TL_ERR_NOMEM && big == NULL);
    tl_budget_close(b);
}

/* A minimum printed with tl_mib_up and "%.1f", read back as a size the way --mem-budget
 * reads "136.1M" (strtod times 2^20, truncated), is at least the bytes and at most
 * 0.1 MiB more. */
static void test_mib_up(void) {
    uint64_t state = 1;
    for (int i = 0; i < 200000; i++) {
        const uint64_t seed = tl_splitmix64(&state);
        static const uint64_t edges[4] = {0, 1, 104857, 1048576};
        uint64_t bytes = i < 4 ? edges[i] : (seed >> 20) % (3ull << 30);
        char text[64];
        snprintf(text, sizeof text, "%.1f", tl_mib_up(bytes));
        uint64_t back = (uint64_t)(strtod(text, NULL) * 1048576.0);
        CHECK_MSG(back >= bytes && back <= bytes + 104858, "%llu bytes printed as %s MiB",
                  (unsigned long long)bytes, text);
    }
    CHECK(tl_mib_up(UINT64_MAX) > 1.7e13);
}

/* The rotation longhand: pair i of every head turned by pos * base^(-2i/rope_dim) / div[i]. */
static void rope_longhand(float *x, int n_heads, int head_dim, int rope_dim, int32_t pos,
                          float base, int mode, const float *div) {
    const int half = rope_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *p = x + (size_t)h * head_dim, t[256];
        for (int i = 0; i < half; i++) {
            double theta = (double)pos * pow((double)base, -2.0 * i / rope_dim);
            if (div) theta /= div[i];
            const float c = (float)cos(theta), s = (float)sin(theta);
            const int i0 = mode != TL_ROPE_PAIRS ? i : 2 * i;
            const int i1 = mode != TL_ROPE_PAIRS ? i + half : 2 * i + 1;
            const float a = p[i0], b = p[i1];
            p[i0] = a * c - b * s;
            p[i1] = a * s + b * c;
        }
        if (mode != TL_ROPE_HALF_AS_PAIRS) continue;
        memcpy(t, p, (size_t)rope_dim * sizeof *p);
        for (int i = 0; i < half; i++) p[2 * i] = t[i], p[2 * i + 1] = t[i + half];
    }
}

static void test_rope(void) {
    enum { HD = 64, RD = 48, NQ = 4, NK = 2 };
    float q0[NQ * HD], k0[NK * HD], q1[NQ * HD], k1[NK * HD], q2[NQ * HD], k2[NK * HD];
    float div[RD / 2], cs[RD];
    double freq[RD / 2];
    uint64_t seed = 3;
    for (int i = 0; i < RD / 2; i++) div[i] = 2.5f + 1.5f * tl_rand_sym(&seed);
    const int32_t positions[] = {0, 1, 17, 4095, 131071};
    int bad = 0;
    for (int mode = 0; mode < 3; mode++)
        for (int d = 0; d < 2; d++)
            for (size_t pi = 0; pi < sizeof positions / sizeof *positions; pi++) {
                const int32_t pos = positions[pi];
                const float *dv = d ? div : NULL;
                for (int i = 0; i < NQ * HD; i++) q0[i] = q1[i] = q2[i] = tl_rand_sym(&seed);
                for (int i = 0; i < NK * HD; i++) k0[i] = k1[i] = k2[i] = tl_rand_sym(&seed);
                rope_longhand(q0, NQ, HD, RD, pos, 10000.0f, mode, dv);
                rope_longhand(k0, NK, HD, RD, pos, 10000.0f, mode, dv);
                tl_op_rope(q1, NQ, HD, RD, pos, 10000.0f, mode, dv);
                tl_op_rope(k1, NK, HD, RD, pos, 10000.0f, mode, dv);
                tl_op_rope_freqs(RD, 10000.0f, freq);
                tl_op_rope_angles(RD, pos, freq, dv, cs);
                tl_op_rope_rotate(q2, NQ, HD, RD, mode, cs);
                tl_op_rope_rotate(k2, NK, HD, RD, mode, cs);
                bad += memcmp(q0, q1, sizeof q0) != 0 || memcmp(k0, k1, sizeof k0) != 0 ||
                       memcmp(q0, q2, sizeof q0) != 0 || memcmp(k0, k2, sizeof k0) != 0;
            }
    CHECK_MSG(bad == 0, "rope: %d of 30 cases differ from the longhand rotation", bad);
}

int main(void) {
    test_rope();
    test_products();
    test_large_blocks();
    test_mib_up();
    return tl_test_finish("test_ops");
}
