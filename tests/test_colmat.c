/* test_colmat.c - column products over weights in the flash layout (kernels.h):
 *  1. tl_colmat_ref against a naive float64 loop over the exact weights (each run
 *     quantized with tl_quant_row and dequantized back), summed in the order of chan: equal
 *     bits, for every type, on awkward shapes (runs of 32..2304 elements, 1..65 channels,
 *     1..260 rows), channel subsets ascending and shuffled, output sub-ranges;
 *  2. for F32/F16/BF16, tl_colmat_ref over every channel ascending equals tl_matmul_ref
 *     over the row-major transpose bit for bit;
 *  3. tl_colmat_fast (and each instruction set's path) against the reference to float
 *     rounding, plus the invariances kernels.h states: the same bits on every set, for a
 *     row alone or in a batch, for [o0, o1) split in two, and for chan cut into
 *     consecutive parts, a call each (tl_colmat_fast_add); nc = 0 gives zeros; outputs
 *     outside the range and scratch past tl_colmat_scratch_floats are never written; one
 *     channel with x = 1 gives back the dequantized run exactly (every type); the scratch
 *     size never decreases with the range or the rows.
 * The comparisons' power to fail is checked on perturbed results. Run with
 * TIERLLM_ISA=avx2 (ctest test_colmat_avx2), tl_colmat_fast's own dispatch takes AVX2.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/rng.h"
#include "kernels/kernels.h"
#include "testutil.h"

static uint64_t rng_state = 0x51ed2701a3c5f00dull;

static size_t rng_below(size_t n) { return (size_t)(tl_splitmix64(&rng_state) % n); }
static float rng_f(void) { return tl_rand_sym(&rng_state); }

static const tl_type all_types[] = {TL_TYPE_F32,  TL_TYPE_F16,  TL_TYPE_BF16, TL_TYPE_Q8_0,
                                    TL_TYPE_Q4_0, TL_TYPE_Q4_K, TL_TYPE_Q4_1, TL_TYPE_Q5_0,
                                    TL_TYPE_Q5_1, TL_TYPE_Q2_K, TL_TYPE_Q3_K, TL_TYPE_Q5_K,
                                    TL_TYPE_Q6_K};
#define N_TYPES (sizeof all_types / sizeof all_types[0])
#define SENTINEL 1e30f
#define GUARD 64 /* floats past the scratch a call may use, which must stay untouched */

/* A weight matrix in the flash layout: nchan runs of run_elems, at a 2-aligned address
 * (4 for F32) as in a file, and its exact weights wq[c*run_elems + o]. */
typedef struct flash {
    tl_type type;
    size_t run_elems, nchan;
    uint8_t *buf, *W;
    float *rows; /* the row-major original W_rows[o*nchan + c], before quantization */
    float *wq;
} flash;

static flash flash_make(tl_type type, size_t run_elems, size_t nchan) {
    flash f = {type, run_elems, nchan, NULL, NULL, NULL, NULL};
    const size_t rb = tl_type_row_bytes(type, run_elems), off = type == TL_TYPE_F32 ? 4 : 2;
    f.buf = malloc(nchan * rb + off);
    f.W = f.buf + off;
    f.rows = malloc(run_elems * nchan * sizeof(float));
    f.wq = malloc(run_elems * nchan * sizeof(float));
    float *run = malloc(run_elems * sizeof(float));
    for (size_t i = 0; i < run_elems * nchan; i++) f.rows[i] = rng_f();
    for (size_t c = 0; c < nchan; c++) {
        for (size_t o = 0; o < run_elems; o++) run[o] = f.rows[o * nchan + c]; /* transpose */
        tl_quant_row(type, run, f.W + c * rb, run_elems);
        tl_dequant_row(type, f.W + c * rb, f.wq + c * run_elems, run_elems);
    }
    free(run);
    return f;
}

static void flash_free(flash *f) { free(f->buf), free(f->rows), free(f->wq); }

/* The float64 definition: Y[i*ldy + o] summed over chan in its order. */
static void naive(const flash *f, const int32_t *chan, size_t nc, size_t o0, size_t o1,
                  const float *X, size_t ldx, size_t n, float *Y, size_t ldy) {
    for (size_t i = 0; i < n; i++)
        for (size_t o = o0; o < o1; o++) {
            double s = 0.0;
            for (size_t t = 0; t < nc; t++)
                s += (double)X[i * ldx + chan[t]] * f->wq[(size_t)chan[t] * f->run_elems + o];
            Y[i * ldy + o] = (float)s;
        }
}

/* Outputs whose bits differ (n rows of ldy). */
static size_t bits_differ(const float *a, const float *b, size_t n, size_t ldy) {
    size_t bad = 0;
    for (size_t i = 0; i < n * ldy; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return bad;
}

/* Outputs of yf off the reference yr by more than float rounding (1e-5 of sum |x*w|), and
 * outputs outside [o0, o1) that are not the sentinel. */
static size_t outputs_wrong(const flash *f, const int32_t *chan, size_t nc, size_t o0,
                            size_t o1, const float *X, size_t ldx, size_t n, const float *yr,
                            const float *yf, size_t ldy) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t o = 0; o < ldy; o++) {
            const float r = yr[i * ldy + o], v = yf[i * ldy + o];
            if (o < o0 || o >= o1) {
                bad += v != SENTINEL || r != SENTINEL;
                continue;
            }
            double mag = 0.0;
            for (size_t t = 0; t < nc; t++)
                mag += fabs((double)X[i * ldx + chan[t]] *
                            f->wq[(size_t)chan[t] * f->run_elems + o]);
            bad += !(fabs((double)v - r) <= 1e-5 * mag);
        }
    return bad;
}

static void fill_sentinel(float *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = SENTINEL;
}

/* Scratch of `floats` plus a guard, NaN-filled (the kernel must not read stale data). */
static float *scratch_new(size_t floats) {
    const size_t bytes = ((floats + GUARD) * sizeof(float) + 63) / 64 * 64;
    float *s = aligned_alloc(64, bytes);
    for (size_t i = 0; i < floats + GUARD; i++) s[i] = NAN;
    return s;
}

static int guard_intact(const float *s, size_t floats) {
    for (size_t i = floats; i < floats + GUARD; i++)
        if (!isnan(s[i])) return 0;
    return 1;
}

/* chan: `nc` of the nchan channels; order 0 ascending, 1 shuffled. */
static void pick_channels(int32_t *chan, size_t nc, size_t nchan, int order) {
    int32_t *all = malloc(nchan * sizeof(int32_t));
    for (size_t c = 0; c < nchan; c++) all[c] = (int32_t)c;
    for (size_t c = 0; c < nc; c++) { /* a random subset: partial Fisher-Yates */
        size_t j = c + rng_below(nchan - c);
        int32_t t = all[c];
        all[c] = all[j], all[j] = t;
    }
    memcpy(chan, all, nc * sizeof(int32_t));
    if (order == 0) /* ascending */
        for (size_t a = 1; a < nc; a++)
            for (size_t b = a; b > 0 && chan[b - 1] > chan[b]; b--) {
                int32_t t = chan[b];
                chan[b] = chan[b - 1], chan[b - 1] = t;
            }
    free(all);
}

typedef struct stats { size_t cases, isa_runs[TL_ISA_AVX512VNNI + 1]; } stats;

/* One product: the reference against the naive loop (equal bits) and every fast path
 * against the reference; returns the number of failed comparisons (already reported). */
static int check_product(const flash *f, const int32_t *chan, size_t nc, size_t o0, size_t o1,
                         size_t n, int xpat, stats *st) {
    const size_t ldx = f->nchan + 3, ldy = f->run_elems + 5;
    float *X = malloc(n * ldx * sizeof(float));
    for (size_t i = 0; i < n * ldx; i++) X[i] = 2.0f * rng_f();
    if (xpat) /* exact zeros: the n = 1 path skips those channels */
        for (size_t i = 0; i < n * ldx; i++)
            if (i % 3 == 1) X[i] = 0.0f;
    float *yn = malloc(n * ldy * sizeof(float)), *yr = malloc(n * ldy * sizeof(float));
    float *yf = malloc(n * ldy * sizeof(float)), *yi = malloc(n * ldy * sizeof(float));
    fill_sentinel(yn, n * ldy), fill_sentinel(yr, n * ldy), fill_sentinel(yf, n * ldy);
    const size_t sf = tl_colmat_scratch_floats(o1 - o0, n);
    float *scratch = scratch_new(sf);
    int fails = 0;
    char what[160];
    snprintf(what, sizeof what, "%s run_elems=%zu nchan=%zu nc=%zu [%zu,%zu) n=%zu xpat=%d",
             tl_type_name(f->type), f->run_elems, f->nchan, nc, o0, o1, n, xpat);

    naive(f, chan, nc, o0, o1, X, ldx, n, yn, ldy);
    tl_colmat_ref(f->type, f->W, f->run_elems, chan, nc, o0, o1, X, ldx, n, yr, ldy);
    size_t bad = bits_differ(yn, yr, n, ldy);
    CHECK_MSG(bad == 0, "%s: ref differs from the naive sum in %zu outputs", what, bad);
    fails += bad != 0;

    tl_colmat_fast(f->type, f->W, f->run_elems, chan, nc, o0, o1, X, ldx, n, yf, ldy, scratch);
    bad = outputs_wrong(f, chan, nc, o0, o1, X, ldx, n, yr, yf, ldy);
    CHECK_MSG(bad == 0, "%s: fast off the reference in %zu outputs", what, bad);
    CHECK_MSG(guard_intact(scratch, sf), "%s: fast wrote past its scratch", what);
    fails += bad != 0;
    if (nc == 0) {
        size_t nz = 0;
        for (size_t i = 0; i < n; i++)
            for (size_t o = o0; o < o1; o++)
                nz += yf[i * ldy + o] != 0.0f || yr[i * ldy + o] != 0.0f;
        CHECK_MSG(nz == 0, "%s: %zu outputs not zero", what, nz);
        fails += nz != 0;
    }

    /* each instruction set: the same bits as tl_colmat_fast's (its own is the widest) */
    for (int isa = TL_ISA_AVX2; isa <= TL_ISA_AVX512VNNI; isa++) {
        fill_sentinel(yi, n * ldy);
        if (!tl__colmat_fast_isa((tl__isa)isa, f->type, f->W, f->run_elems, chan, nc, o0, o1, X,
                                 ldx, n, yi, ldy, scratch))
            continue;
        st->isa_runs[isa]++;
        bad = bits_differ(yi, yf, n, ldy);
        CHECK_MSG(bad == 0, "%s: instruction set %d differs from tl_colmat_fast in %zu outputs",
                  what, isa, bad);
        fails += bad != 0;
    }

    /* every row alone (n = 1's own path) gives the batch's bits */
    if (n > 1)
        for (size_t i = 0; i < n; i++) {
            fill_sentinel(yi, ldy);
            tl_colmat_fast(f->type, f->W, f->run_elems, chan, nc, o0, o1, X + i * ldx, ldx, 1, yi,
                           ldy, scratch);
            bad = bits_differ(yi, yf + i * ldy, 1, ldy);
            CHECK_MSG(bad == 0, "%s: row %zu alone differs in %zu outputs", what, i, bad);
            fails += bad != 0;
        }

    /* [o0, o1) split in two at a block boundary, as two threads would: the same bits */
    const size_t bs = tl_type_block_elems(f->type);
    if (o1 - o0 > bs) {
        const size_t mid = o0 + (1 + rng_below((o1 - o0 - 1) / bs)) * bs;
        if (mid < o1) {
            fill_sentinel(yi, n * ldy);
            tl_colmat_fast(f->type, f->W, f->run_elems, chan, nc, mid, o1, X, ldx, n, yi, ldy,
                           scratch);
            float *s2 = scratch_new(tl_colmat_scratch_floats(mid - o0, n));
            tl_colmat_fast(f->type, f->W, f->run_elems, chan, nc, o0, mid, X, ldx, n, yi, ldy, s2);
            CHECK(guard_intact(s2, tl_colmat_scratch_floats(mid - o0, n)));
            free(s2);
            bad = bits_differ(yi, yf, n, ldy);
            CHECK_MSG(bad == 0, "%s: split at %zu differs in %zu outputs", what, mid, bad);
            fails += bad != 0;
        }
    }
    /* chan cut into up to four consecutive parts, a call each (tl_colmat_fast_add after
     * the first, as a product that starts on the runs already read): the same bits */
    if (nc > 1) {
        fill_sentinel(yi, n * ldy);
        size_t c0 = 0, parts = 0;
        while (c0 < nc) {
            size_t len = 1 + rng_below(nc - c0);
            if (++parts == 4) len = nc - c0;
            if (c0 == 0)
                tl_colmat_fast(f->type, f->W, f->run_elems, chan, len, o0, o1, X, ldx, n, yi,
                               ldy, scratch);
            else
                tl_colmat_fast_add(f->type, f->W, f->run_elems, chan + c0, len, o0, o1, X, ldx,
                                   n, yi, ldy, scratch);
            c0 += len;
        }
        bad = bits_differ(yi, yf, n, ldy);
        CHECK_MSG(bad == 0, "%s: chan in %zu parts differs in %zu outputs", what, parts, bad);
        fails += bad != 0;
    }
    st->cases++;
    free(X), free(yn), free(yr), free(yf), free(yi), free(scratch);
    return fails;
}

/* A random output range: o0 a block multiple, o1 one too or run_elems. */
static void pick_range(size_t run_elems, size_t bs, size_t *o0, size_t *o1) {
    const size_t blocks = run_elems / bs;
    const size_t b0 = rng_below(blocks), b1 = b0 + 1 + rng_below(blocks - b0);
    *o0 = b0 * bs;
    *o1 = b1 * bs;
}

/* 1 and 3: awkward shapes, every type, subsets and orders, sub-ranges. */
static void test_products(void) {
    static const size_t runs32[] = {32, 96, 288}, runsk[] = {256, 512};
    static const size_t chans[] = {1, 7, 65}, ns[] = {1, 2, 3, 4, 17};
    stats st = {0, {0}};
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const tl_type type = all_types[ti];
        const size_t bs = tl_type_block_elems(type);
        const int k_type = tl_type_block_elems(type) == TL_QK_K;
        const size_t *runs = k_type ? runsk : runs32, nruns = k_type ? 2 : 3;
        int fails = 0;
        for (size_t ri = 0; ri < nruns; ri++)
            for (size_t ci = 0; ci < 3; ci++) {
                const size_t re = runs[ri], nchan = chans[ci];
                flash f = flash_make(type, re, nchan);
                int32_t *chan = malloc(nchan * sizeof(int32_t));
                for (size_t ni = 0; ni < 5 && fails < 5; ni++) {
                    const size_t n = ns[ni];
                    /* every channel ascending over the whole run, then subsets */
                    pick_channels(chan, nchan, nchan, 0);
                    fails += check_product(&f, chan, nchan, 0, re, n, 0, &st);
                    for (int rep = 0; rep < 4; rep++) {
                        const size_t nc = 1 + rng_below(nchan);
                        size_t o0 = 0, o1 = re;
                        if (rep >= 2) pick_range(re, bs == 1 ? 1 + rng_below(5) : bs, &o0, &o1);
                        if (bs == 1 && rep == 3) o0 = rng_below(o1); /* float types: any o0 */
                        pick_channels(chan, nc, nchan, rep & 1);
                        fails += check_product(&f, chan, nc, o0, o1, n, rep & 1, &st);
                    }
                    fails += check_product(&f, chan, 0, 0, re, n, 0, &st); /* nc = 0 */
                }
                free(chan);
                flash_free(&f);
            }
        /* beyond the fast kernel's tiles: wider runs than its n = 1 tile, more rows than
         * its row block, more channels than one panel, more outputs than one GEMM tile */
        static const struct { size_t re32, rek, nchan, n; } big[] = {
            {2144, 2304, 7, 1}, {2144, 2304, 7, 2}, {96, 256, 130, 260}, {1056, 1024, 7, 17}};
        for (size_t bi = 0; bi < sizeof big / sizeof big[0] && fails < 5; bi++) {
            const size_t re = k_type ? big[bi].rek : big[bi].re32, nchan = big[bi].nchan;
            flash f = flash_make(type, re, nchan);
            int32_t *chan = malloc(nchan * sizeof(int32_t));
            pick_channels(chan, nchan - 1, nchan, 1);
            fails += check_product(&f, chan, nchan - 1, 0, re, big[bi].n, 1, &st);
            size_t o0, o1;
            pick_range(re, bs == 1 ? 3 : bs, &o0, &o1); /* float types: partial strips */
            fails += check_product(&f, chan, nchan - 1, o0, o1, big[bi].n, 0, &st);
            free(chan);
            flash_free(&f);
        }
    }
    printf("  %zu products; fast paths run: AVX2 %zu, AVX-VNNI %zu, AVX-512 %zu\n", st.cases,
           st.isa_runs[TL_ISA_AVX2], st.isa_runs[TL_ISA_AVXVNNI], st.isa_runs[TL_ISA_AVX512VNNI]);
    CHECK(st.isa_runs[TL_ISA_AVX2] == st.cases);
    const char *cap = getenv("TIERLLM_ISA");
    if (cap && !strcmp(cap, "avx2")) /* the cap must keep every wider set away */
        CHECK(st.isa_runs[TL_ISA_AVXVNNI] == 0 && st.isa_runs[TL_ISA_AVX512VNNI] == 0);
}

/* 2: over every channel ascending, the reference is tl_matmul_ref over the row-major
 * transpose, bit for bit (the float types: their quantization is per element, so the
 * transpose holds the same weights). */
static void test_matches_matmul(void) {
    static const tl_type types[] = {TL_TYPE_F32, TL_TYPE_F16, TL_TYPE_BF16};
    static const size_t shapes[][2] = {{32, 1}, {96, 7}, {288, 65}, {37, 300}, {513, 9}};
    for (size_t ti = 0; ti < 3; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const tl_type type = types[ti];
            const size_t re = shapes[si][0], nchan = shapes[si][1], n = 3;
            flash f = flash_make(type, re, nchan);
            const size_t rb = tl_type_row_bytes(type, nchan);
            uint8_t *rm = malloc(re * rb); /* row-major: row o is output o's weights */
            for (size_t o = 0; o < re; o++)
                tl_quant_row(type, f.rows + o * nchan, rm + o * rb, nchan);
            int32_t *chan = malloc(nchan * sizeof(int32_t));
            for (size_t c = 0; c < nchan; c++) chan[c] = (int32_t)c;
            const size_t ldx = nchan + 1, ldy = re + 2;
            float *X = malloc(n * ldx * sizeof(float));
            float *y1 = malloc(n * ldy * sizeof(float)), *y2 = malloc(n * ldy * sizeof(float));
            for (size_t i = 0; i < n * ldx; i++) X[i] = 3.0f * rng_f();
            fill_sentinel(y1, n * ldy), fill_sentinel(y2, n * ldy);
            const size_t o0 = re / 3, o1 = re - re / 5;
            tl_colmat_ref(type, f.W, re, chan, nchan, o0, o1, X, ldx, n, y1, ldy);
            tl_matmul_ref(type, rm, nchan, o0, o1, X, ldx, n, y2, ldy);
            const size_t bad = bits_differ(y1, y2, n, ldy);
            CHECK_MSG(bad == 0, "%s run_elems=%zu nchan=%zu: colmat_ref and matmul_ref differ in "
                      "%zu outputs", tl_type_name(type), re, nchan, bad);
            free(rm), free(chan), free(X), free(y1), free(y2);
            flash_free(&f);
        }
}

/* The fast paths use the exact weights: one channel with x = 1 gives back its run,
 * dequantized, exactly (y = fma(1, w, +0) = w; Q8_0/Q4_0: w = d*q, exact), for
 * one row and for a batch; random blocks, so every quant value and scale layout occurs. */
static void test_exact_weights(void) {
    for (size_t ti = 0; ti < N_TYPES; ti++) {
        const tl_type type = all_types[ti];
        const size_t re = 2 * TL_QK_K + (tl_type_block_elems(type) == TL_QK_K ? 0 : 96);
        flash f = flash_make(type, re, 3);
        const int32_t chan[1] = {1};
        const size_t n = 3, ldx = 3, ldy = re;
        float X[3 * 3], *Y = malloc(n * ldy * sizeof(float));
        for (size_t i = 0; i < n * ldx; i++) X[i] = i % ldx == 1 ? 1.0f : 5.0f;
        float *scratch = scratch_new(tl_colmat_scratch_floats(re, n));
        for (size_t rows = 1; rows <= n; rows += n - 1) {
            tl_colmat_fast(type, f.W, re, chan, 1, 0, re, X, ldx, rows, Y, ldy, scratch);
            size_t bad = 0; /* equal values: a weight -0 gives +0 (+0 + -0) */
            for (size_t i = 0; i < rows; i++)
                for (size_t o = 0; o < re; o++) bad += !(Y[i * ldy + o] == f.wq[re + o]);
            CHECK_MSG(bad == 0, "%s n=%zu: %zu outputs are not the dequantized weights",
                      tl_type_name(type), rows, bad);
        }
        free(Y), free(scratch);
        flash_free(&f);
    }
}

/* tl_colmat_scratch_floats is non-decreasing in both arguments, so a buffer sized for the
 * widest range and the largest batch serves every call. */
static void test_scratch_sizes(void) {
    static const size_t outs[] = {1, 31, 32, 33, 255, 256, 257, 1000, 4096, 5000, 70000};
    static const size_t ns[] = {1, 2, 4, 8, 9, 17, 255, 256, 257, 1000};
    size_t bad = 0;
    for (size_t a = 0; a < sizeof outs / sizeof outs[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++) {
            const size_t f = tl_colmat_scratch_floats(outs[a], ns[b]);
            bad += a > 0 && tl_colmat_scratch_floats(outs[a - 1], ns[b]) > f;
            bad += b > 0 && tl_colmat_scratch_floats(outs[a], ns[b - 1]) > f;
        }
    CHECK_MSG(bad == 0, "%zu decreasing steps", bad);
}

/* The comparisons above can fail: a one-ulp change breaks equal bits, a change of 1e-4
 * of sum |x*w| breaks the float-rounding bound, a write outside the range is caught. */
static void test_power_to_fail(void) {
    flash f = flash_make(TL_TYPE_Q8_0, 64, 5);
    int32_t chan[5] = {4, 0, 3, 1, 2};
    const size_t n = 2, ldx = 8, ldy = 70;
    float X[2 * 8], yr[2 * 70], yf[2 * 70];
    for (size_t i = 0; i < n * ldx; i++) X[i] = rng_f();
    fill_sentinel(yr, n * ldy);
    tl_colmat_ref(f.type, f.W, 64, chan, 5, 32, 64, X, ldx, n, yr, ldy);
    memcpy(yf, yr, sizeof yf);
    CHECK(bits_differ(yr, yf, n, ldy) == 0);
    CHECK(outputs_wrong(&f, chan, 5, 32, 64, X, ldx, n, yr, yf, ldy) == 0);
    yf[ldy + 40] = nextafterf(yf[ldy + 40], INFINITY);
    CHECK(bits_differ(yr, yf, n, ldy) == 1);
    double mag = 0.0;
    for (size_t t = 0; t < 5; t++) mag += fabs((double)X[ldx + chan[t]] * f.wq[chan[t] * 64 + 40]);
    yf[ldy + 40] = (float)(yr[ldy + 40] + 1e-4 * mag);
    CHECK(outputs_wrong(&f, chan, 5, 32, 64, X, ldx, n, yr, yf, ldy) == 1);
    memcpy(yf, yr, sizeof yf);
    yf[31] = 0.0f; /* just below o0 */
    CHECK(outputs_wrong(&f, chan, 5, 32, 64, X, ldx, n, yr, yf, ldy) == 1);
    flash_free(&f);
}

int main(void) {
    test_power_to_fail();
    test_matches_matmul();
    test_exact_weights();
    test_scratch_sizes();
    test_products();
    return tl_test_finish("test_colmat");
}
