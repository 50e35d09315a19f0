/* test_kernels.c - every fast kernel against its scalar reference, on random inputs of
 * awkward sizes (odd k, n around the micro-tile sizes, j-ranges not starting at 0,
 * strides larger than the rows, weight rows at 2-aligned addresses), plus the
 * quantization formats: exact layouts on hand-made blocks, error bounds, round trips;
 * and the activation rounding of Q8_0/Q4_0 products (kernels.h): hand-computed blocks,
 * fast == reference bit for bit, and results that do not depend on the batch size.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/rng.h"
#include "kernels/kernels.h"
#include "testutil.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rng_u32(void) {
    return (uint32_t)(tl_splitmix64(&rng_state) >> 32);
}

/* Uniform in [-1, 1). */
static float rng_f(void) { return (float)rng_u32() / 2147483648.0f - 1.0f; }

static void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) x[i] = scale * rng_f();
}

static const tl_type all_types[] = {TL_TYPE_F32,  TL_TYPE_F16,  TL_TYPE_BF16, TL_TYPE_Q8_0,
                                    TL_TYPE_Q4_0, TL_TYPE_Q4_1, TL_TYPE_Q5_0, TL_TYPE_Q5_1,
                                    TL_TYPE_Q2_K, TL_TYPE_Q3_K, TL_TYPE_Q4_K, TL_TYPE_Q5_K,
                                    TL_TYPE_Q6_K};
#define N_ALL_TYPES (sizeof all_types / sizeof all_types[0])

/* ---- quantization formats ---- */

static uint16_t u16_at(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void test_layouts(void) {
    float x[TL_QK], y[TL_QK];
    for (int i = 0; i < TL_QK; i++) x[i] = (float)(i - 16); /* max |x| at i=0: -16 */

    uint8_t q4[sizeof(tl_block_q4_0)];
    tl_quant_row(TL_TYPE_Q4_0, x, q4, TL_QK);
    CHECK(u16_at(q4) == 0x4000); /* d = -16 / -8 = 2.0 */
    /* q = min(15, trunc(x/2 + 8.5)): elem 0 -> 0, elem 16 (x=0) -> 8, elem 31 (x=15) -> 15 */
    CHECK(q4[2 + 0] == 0x80);
    CHECK(q4[2 + 15] == ((15 << 4) | 8)); /* elem 15: x=-1 -> 8; elem 31 -> 15 (clamped) */
    tl_dequant_row(TL_TYPE_Q4_0, q4, y, TL_QK);
    CHECK(y[0] == -16.0f && y[16] == 0.0f && y[31] == 14.0f && y[15] == 0.0f);

    uint8_t q8[sizeof(tl_block_q8_0)];
    for (int i = 0; i < TL_QK; i++) x[i] = (float)(i - 16) * 0.5f; /* amax = 8 */
    tl_quant_row(TL_TYPE_Q8_0, x, q8, TL_QK);
    CHECK(u16_at(q8) == tl_f32_to_f16(8.0f / 127.0f));
    CHECK((int8_t)q8[2 + 0] == -127);
    CHECK((int8_t)q8[2 + 16] == 0);
    CHECK((int8_t)q8[2 + 31] == (int8_t)roundf(7.5f * 127.0f / 8.0f));
    tl_dequant_row(TL_TYPE_Q8_0, q8, y, TL_QK);
    CHECK(y[0] == -127.0f * tl_f16_to_f32(u16_at(q8)));

    /* an all-zero block has d = 0 and decodes to zeros */
    memset(x, 0, sizeof x);
    tl_quant_row(TL_TYPE_Q8_0, x, q8, TL_QK);
    tl_dequant_row(TL_TYPE_Q8_0, q8, y, TL_QK);
    CHECK(u16_at(q8) == 0 && y[5] == 0.0f);
    tl_quant_row(TL_TYPE_Q4_0, x, q4, TL_QK);
    tl_dequant_row(TL_TYPE_Q4_0, q4, y, TL_QK);
    CHECK((u16_at(q4) & 0x7fff) == 0 && y[5] == 0.0f); /* d = -0.0, as in GGML */
}

static void test_half_formats(void) {
    /* every finite f16 and bf16 survives f16 -> f32 -> f16 (and likewise bf16) */
    int bad16 = 0, badbf = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        if ((h & 0x7c00u) != 0x7c00u && tl_f32_to_f16(tl_f16_to_f32((uint16_t)h)) != h) bad16++;
        if ((h & 0x7f80u) != 0x7f80u && tl_f32_to_bf16(tl_bf16_to_f32((uint16_t)h)) != h) badbf++;
    }
    CHECK_MSG(bad16 == 0, "%d f16 values", bad16);
    CHECK_MSG(badbf == 0, "%d bf16 values", badbf);

    /* rows: conversion error within half an ulp, dequant(quant(dequant(q))) stable */
    enum { N = 1000 };
    float x[N], y[N];
    uint8_t buf[2 * N + 2], buf2[2 * N + 2];
    fill(x, N, 3.0f);
    for (int t = 0; t < 2; t++) {
        tl_type type = t ? TL_TYPE_BF16 : TL_TYPE_F16;
        float rel = t ? 1.0f / 256 : 1.0f / 2048; /* half an ulp at 8 / 11 bit mantissa */
        tl_quant_row(type, x, buf + 2, N); /* 2-aligned, not 4-aligned */
        tl_dequant_row(type, buf + 2, y, N);
        int bad = 0;
        for (int i = 0; i < N; i++)
            if (fabsf(x[i] - y[i]) > rel * fabsf(x[i]) + 1e-7f) bad++;
        CHECK_MSG(bad == 0, "%s: %d elements off", tl_type_name(type), bad);
        tl_quant_row(type, y, buf2 + 2, N);
        CHECK(memcmp(buf + 2, buf2 + 2, 2 * N) == 0);
    }
}

static void test_block_formats(void) {
    enum { N = 32 * 40 };
    static float x[N], y[N];
    static uint8_t b1[N * 2], b2[N * 2];
    for (int t = 0; t < 2; t++) {
        tl_type type = t ? TL_TYPE_Q4_0 : TL_TYPE_Q8_0;
        size_t bb = tl_type_block_bytes(type);
        for (int rep = 0; rep < 4; rep++) {
            fill(x, N, rep == 0 ? 1.0f : rep == 1 ? 1e-3f : 50.0f);
            if (rep == 3)
                for (int i = 0; i < N; i += 7) x[i] = 0.0f;
            tl_quant_row(type, x, b1 + 2, N);
            tl_dequant_row(type, b1 + 2, y, N);
            int bad = 0;
            for (int b = 0; b < N / TL_QK; b++) {
                const float *xb = x + b * TL_QK;
                float amax = 0.0f, max = 0.0f;
                for (int i = 0; i < TL_QK; i++)
                    if (fabsf(xb[i]) > amax) amax = fabsf(xb[i]), max = xb[i];
                float dt = t ? max / -8.0f : amax / 127.0f; /* scale before fp16 rounding */
                float d16 = tl_f16_to_f32(u16_at(b1 + 2 + b * bb)), dd = fabsf(dt - d16);
                /* Q8_0: rounding error d/2, plus 127 * the fp16 rounding of d.
                 * Q4_0: up to d where x/d = 8 clamps to 7, plus 8 * fp16 rounding of d. */
                float bound = t ? fabsf(dt) + 8.0f * dd : 0.5f * dt + 127.0f * dd;
                for (int i = 0; i < TL_QK; i++)
                    if (fabsf(xb[i] - y[b * TL_QK + i]) > bound * 1.0001f + 1e-30f) bad++;
            }
            CHECK_MSG(bad == 0, "%s rep %d: %d elements off", tl_type_name(type), rep, bad);
            /* quantizing the dequantized row reproduces the same bytes */
            tl_quant_row(type, y, b2 + 2, N);
            CHECK_MSG(memcmp(b1 + 2, b2 + 2, tl_type_row_bytes(type, N)) == 0, "%s rep %d",
                      tl_type_name(type), rep);
        }
    }
    /* Q8_0 error <= d/2 exactly when d is representable in fp16 (amax = 127 * 2^-e) */
    for (int i = 0; i < TL_QK; i++) x[i] = rng_f() * 127.0f / 64.0f;
    x[3] = 127.0f / 64.0f;
    tl_quant_row(TL_TYPE_Q8_0, x, b1, TL_QK);
    tl_dequant_row(TL_TYPE_Q8_0, b1, y, TL_QK);
    for (int i = 0; i < TL_QK; i++) CHECK(fabsf(x[i] - y[i]) <= 0.5f / 64.0f);
}

/* The other types' quantizers (quant_ext.c) fit each group well enough to serve synthetic
 * models: on uniform random rows the RMS error stays within 1.5x that of an ideal uniform
 * quantizer with the type's levels (1/levels of the RMS value), and all-zero rows stay
 * zero. Their decoding is checked bit for bit against NumPy (tests/ref/check_dequant.py). */
static void test_ext_formats(void) {
    enum { N = 256 * 8 };
    static float x[N], y[N];
    static uint8_t b[N * 2];
    static const struct { tl_type type; int levels; } ts[] = {
        {TL_TYPE_Q4_1, 15}, {TL_TYPE_Q5_0, 31}, {TL_TYPE_Q5_1, 31}, {TL_TYPE_Q2_K, 3},
        {TL_TYPE_Q3_K, 7},  {TL_TYPE_Q4_K, 15}, {TL_TYPE_Q5_K, 31}, {TL_TYPE_Q6_K, 63}};
    for (size_t t = 0; t < sizeof ts / sizeof ts[0]; t++)
        for (int rep = 0; rep < 3; rep++) {
            const float scale = rep == 0 ? 1.0f : rep == 1 ? 1e-3f : 50.0f;
            fill(x, N, scale);
            tl_quant_row(ts[t].type, x, b + 2, N);
            tl_dequant_row(ts[t].type, b + 2, y, N);
            double err = 0.0, ref = 0.0;
            for (int i = 0; i < N; i++) {
                err += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
                ref += (double)x[i] * x[i];
            }
            double rel = sqrt(err / ref);
            CHECK_MSG(rel <= 1.5 / ts[t].levels, "%s rep %d: relative RMS error %.4f > %.4f",
                      tl_type_name(ts[t].type), rep, rel, 1.5 / ts[t].levels);
            memset(x, 0, sizeof x);
            tl_quant_row(ts[t].type, x, b + 2, N);
            tl_dequant_row(ts[t].type, b + 2, y, N);
            int nz = 0;
            for (int i = 0; i < N; i++) nz += y[i] != 0.0f;
            CHECK_MSG(nz == 0, "%s: %d zeros decode non-zero", tl_type_name(ts[t].type), nz);
        }
}

/* ---- activation rounding ---- */

static void fill_x(float *X, size_t ldx, size_t n, size_t k, int pattern);

/* The K-quants' 256-block rounding: hand-checked values (the sign comes from the first
 * element of largest magnitude; halves go to even), and the products' vector rounding
 * (tl_matmul_act_prepare) bit-exact with the scalar one on random rows, exact ties and
 * zero blocks. */
static void test_act_rounding_k(void) {
    enum { K = 4 * TL_QK_K, N = 3 };
    static float X[N * K];
    static tl_block_k_act ref[N * K / TL_QK_K];
    memset(X, 0, sizeof X);
    X[5] = -127.0f, X[9] = 127.0f;  /* first of largest magnitude is negative: iscale = 1 */
    X[10] = 2.5f, X[11] = 3.5f, X[12] = -2.5f, X[13] = 1.0f;
    tl_quant_act_row_k(X, ref, TL_QK_K);
    CHECK(ref[0].d == 1.0f && ref[0].q[5] == -127 && ref[0].q[9] == 127);
    CHECK(ref[0].q[10] == 2 && ref[0].q[11] == 4 && ref[0].q[12] == -2 && ref[0].q[13] == 1);
    CHECK(ref[0].bsums[0] == -127 + 127 + 2 + 4 - 2 + 1 && ref[0].bsums[1] == 0);
    fill_x(X, K, N, K, 0);
    fill_x(X + K, K, 1, K, 1); /* halves of 1/4: exact ties after scaling by 127/31.75 */
    for (int c = 2 * TL_QK_K; c < 3 * TL_QK_K; c++) X[2 * K + c] = 0.0f; /* a zero block */
    /* non-finite inputs (a model whose weights hold NaN): defined q, no crash; the last
     * element of row 2's first block NaN (it must not become the maximum), its second
     * block with an infinity */
    X[2 * K + TL_QK_K - 1] = NAN;
    X[2 * K + TL_QK_K + 7] = INFINITY;
    for (size_t i = 0; i < N; i++) tl_quant_act_row_k(X + i * K, ref + i * (K / TL_QK_K), K);
    const tl_type types[] = {TL_TYPE_Q2_K, TL_TYPE_Q6_K};
    for (int t = 0; t < 2; t++) {
        size_t af = tl_matmul_act_floats(types[t], TL_LAYOUT_ROWS, K, N);
        CHECK(af * sizeof(float) >= sizeof ref && af <= tl_matmul_scratch_floats(K, N));
        float *act = malloc(af * sizeof(float));
        memset(act, 0x5a, af * sizeof(float));
        tl_matmul_act_prepare(types[t], TL_LAYOUT_ROWS, K, X, K, N, 1, N, act);
        tl_matmul_act_prepare(types[t], TL_LAYOUT_ROWS, K, X, K, N, 0, 1, act);
        CHECK_MSG(memcmp(act, ref, sizeof ref) == 0, "%s: the prepared K blocks differ from "
                  "tl_quant_act_row_k's", tl_type_name(types[t]));
        free(act);
    }
}

static void test_act_rounding(void) {
    /* amax = 31.75 = 127/4, so d = 0.25 exactly and x/d is exact: ties are real ties */
    float x[2 * TL_QK], xr[2 * TL_QK];
    tl_block_q8_act a[2];
    static const float in[] = {31.75f, -31.75f, 0.625f, -0.625f, 0.375f, -0.375f,
                               0.1f, 0.2f, -0.2f, 0.125f, -0.125f, 30.0f, 0.0f};
    static const int want[] = {127, -127, 3, -3, 2, -2, 0, 1, -1, 1, -1, 120, 0};
    enum { NIN = sizeof in / sizeof in[0] };
    memset(x, 0, sizeof x);
    memcpy(x, in, sizeof in);                  /* block 0 */
    for (int i = 0; i < TL_QK; i++) x[TL_QK + i] = 0.0f; /* block 1: all zero, d = 0 */
    x[TL_QK + 3] = -0.0f;
    tl_quant_act_row(x, a, 2 * TL_QK);
    tl_round_act_row(x, xr, 2 * TL_QK);
    CHECK(a[0].d == 0.25f && a[1].d == 0.0f);
    for (int i = 0; i < NIN; i++) {
        CHECK_MSG(a[0].q[i] == want[i], "x=%g: q %d, want %d", in[i], a[0].q[i], want[i]);
        CHECK_MSG(xr[i] == 0.25f * (float)want[i], "x=%g: x' %g", in[i], xr[i]);
    }
    for (int i = NIN; i < TL_QK; i++) CHECK(a[0].q[i] == 0 && xr[i] == 0.0f);
    for (int i = 0; i < TL_QK; i++) CHECK(a[1].q[i] == 0 && xr[TL_QK + i] == 0.0f);

    /* the scale stays f32: amax = 1 gives d = 1/127 rounded to f32, not to fp16 */
    for (int i = 0; i < TL_QK; i++) x[i] = (float)(i - 16) / 16.0f; /* amax = 1 at i = 0 */
    tl_quant_act_row(x, a, TL_QK);
    CHECK(a[0].d == 1.0f / 127.0f && a[0].d != tl_f16_to_f32(tl_f32_to_f16(1.0f / 127.0f)));
    CHECK(a[0].q[0] == -127 && a[0].q[16] == 0 && a[0].q[24] == 64); /* 0.5*127 = 63.5 -> 64 */
    /* just below a tie: 0.49999997 rounds to 0 (floor(v + 0.5) in f32 would give 1) */
    for (int i = 0; i < TL_QK; i++) x[i] = 0.0f;
    x[0] = 127.0f, x[1] = 0.49999997f, x[2] = -0.49999997f, x[3] = 2.5f, x[4] = -126.5f;
    tl_quant_act_row(x, a, TL_QK);
    CHECK(a[0].d == 1.0f && a[0].q[1] == 0 && a[0].q[2] == 0 && a[0].q[3] == 3 &&
          a[0].q[4] == -127);

    /* the fast quantizer agrees bit for bit on random rows, ties and tiny values */
    enum { N = 32 * 64 };
    static float r[N];
    static tl_block_q8_act qa[N / TL_QK], qb[N / TL_QK];
    for (int rep = 0; rep < 6; rep++) {
        fill(r, N, rep == 1 ? 1e-30f : rep == 2 ? 1e4f : 1.0f);
        if (rep == 3) /* ties: amax = 127 * 2^-3, x = (m + 1/2) * 2^-3 */
            for (int i = 0; i < N; i++)
                r[i] = i % TL_QK == 5 ? 127.0f / 8 : ((float)(int)(rng_f() * 120.0f) + 0.5f) / 8;
        if (rep == 4) /* all-zero and near-denormal blocks */
            for (int i = 0; i < N; i++) r[i] = (i / TL_QK) % 2 ? 0.0f : r[i] * 1e-38f;
        if (rep == 5) /* values next to the ties */
            for (int i = 0; i < N; i++)
                r[i] = i % TL_QK == 0 ? 127.0f
                                      : nextafterf((float)(int)(rng_f() * 120.0f) + 0.5f,
                                                   (i & 1) ? 1e9f : -1e9f);
        tl_quant_act_row(r, qa, N);
        tl_quant_act_row_fast(r, qb, N);
        int bad = 0;
        for (int b = 0; b < N / TL_QK; b++)
            bad += memcmp(&qa[b].d, &qb[b].d, sizeof(float)) != 0 ||
                   memcmp(qa[b].q, qb[b].q, TL_QK) != 0;
        CHECK_MSG(bad == 0, "rep %d: %d blocks differ", rep, bad);
        /* x' is d*q, and within d/2 of x */
        tl_round_act_row(r, r, N); /* in place */
        bad = 0;
        for (int i = 0; i < N; i++)
            if (r[i] != qa[i / TL_QK].d * (float)qa[i / TL_QK].q[i % TL_QK]) bad++;
        CHECK_MSG(bad == 0, "rep %d: %d x' values differ from d*q", rep, bad);
    }
}

/* ---- matmul ---- */

/* X patterns: 0 uniform random, 1 ties (every block has amax 127/4 and elements at
 * (m + 1/2)/4, so roundf and round-half-even differ), 2 blocks of zeros among randoms. */
static void fill_x(float *X, size_t ldx, size_t n, size_t k, int pattern) {
    fill(X, n * ldx, 2.0f);
    for (size_t i = 0; i < n && pattern; i++)
        for (size_t c = 0; c < k; c++) {
            float *x = X + i * ldx + c;
            if (pattern == 1)
                *x = c % 32 == 7 ? -127.0f / 4 : ((float)(int)(rng_f() * 100.0f) + 0.5f) / 4;
            else if ((c / 32) % 3 == 1)
                *x = 0.0f;
        }
}

static int isa_noted;

/* Where X is prepared once (tl_matmul_act_prepare, here in two row ranges as two threads
 * would) and row ranges are computed from it, on every instruction set this CPU has that
 * reads that preparation (AVX2 and AVX-VNNI the matvec's pair records, AVX-512 VNNI the
 * GEMM's records, every set the other rounding types' own records), every output must
 * equal tl_matmul_fast's bit for bit: the ranges [j0, mid) and [mid, j1) stand for two
 * threads sharing one prepared X. Returns the number of outputs that differ. */
static int act_paths_differ(tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                            const float *X, size_t ldx, size_t n, const float *yfast,
                            size_t ldy) {
    size_t af = tl_matmul_act_floats(type, TL_LAYOUT_ROWS, k, n);
    if (af == 0) {
        /* Q8_0/Q4_0's matvec has a shared part; the other types' products share none */
        CHECK(!tl_type_int8_gemm(type) || n > 4);
        return 0;
    }
    CHECK(af <= tl_matmul_scratch_floats(k, n));
    float *act = malloc(af * sizeof(float)), *y = malloc(n * ldy * sizeof(float));
    tl_matmul_act_prepare(type, TL_LAYOUT_ROWS, k, X, ldx, n, n / 2, n, act);
    tl_matmul_act_prepare(type, TL_LAYOUT_ROWS, k, X, ldx, n, 0, n / 2, act);
    int bad = 0, ran = 0;
    for (int isa = TL_ISA_AVX2; isa <= TL_ISA_AVX512VNNI; isa++) {
        size_t mid = j0 + (j1 - j0) / 3;
        for (size_t i = 0; i < n * ldy; i++) y[i] = 1e30f;
        if (!tl__matmul_fast_act_isa(isa, type, TL_LAYOUT_ROWS, W, k, j0, mid, act, n, y, ldy)) {
            if (isa == TL_ISA_AVXVNNI && ran && !isa_noted++) /* pair records, no AVX-VNNI */
                fprintf(stderr, "  (no AVX-VNNI here: that path is not tested)\n");
            continue;
        }
        ran++;
        tl__matmul_fast_act_isa(isa, type, TL_LAYOUT_ROWS, W, k, mid, j1, act, n, y, ldy);
        for (size_t i = 0; i < n * ldy; i++)
            if (memcmp(&y[i], &yfast[i], sizeof(float)) != 0) {
                if (bad < 3)
                    fprintf(stderr, "  %s isa %d k=%zu n=%zu: output %zu is %g, tl_matmul_fast %g\n",
                            tl_type_name(type), isa, k, n, i, y[i], yfast[i]);
                bad++;
            }
    }
    CHECK_MSG(ran > 0, "%s n=%zu: no instruction set reads the prepared X", tl_type_name(type), n);
    free(act), free(y);
    return bad;
}

static int matmul_outputs_wrong(tl_type type, size_t k, size_t n, size_t j0, size_t j1,
                                size_t ldy, const float *yref, const float *yf,
                                const float *xr, const float *wf, int isa);

static int matmul_case_x(tl_type type, size_t k, size_t n, size_t j0, size_t j1, int xpat) {
    size_t rows = j1, ldx = k + 3, ldy = j1 + 5;
    size_t rb = tl_type_row_bytes(type, k);
    /* weight rows 2-aligned only (4 for F32), as tensor data in a file may be */
    size_t woff = type == TL_TYPE_F32 ? 4 : 2;
    uint8_t *wbuf = malloc(rows * rb + woff);
    float *row = malloc(k * sizeof(float));
    float *wf = malloc(rows * k * sizeof(float)); /* dequantized weights */
    float *xbuf = malloc((n * ldx + 1) * sizeof(float)), *X = xbuf + 1;
    float *yref = malloc(n * ldy * sizeof(float)), *yfast = malloc(n * ldy * sizeof(float));
    size_t sf = tl_matmul_scratch_floats(k, n);
    float *scratch = aligned_alloc(64, (sf * sizeof(float) + 63) / 64 * 64 + 64);
    uint8_t *W = wbuf + woff;
    for (size_t j = 0; j < rows; j++) {
        fill(row, k, 1.0f);
        tl_quant_row(type, row, W + j * rb, k);
        tl_dequant_row(type, W + j * rb, wf + j * k, k);
    }
    fill_x(X, ldx, n, k, xpat);
    float *xr = malloc(n * k * sizeof(float)); /* the activations the product uses */
    for (size_t i = 0; i < n; i++) {
        if (tl_type_rounds_act(type)) tl_round_act_row_type(type, X + i * ldx, xr + i * k, k);
        else memcpy(xr + i * k, X + i * ldx, k * sizeof(float));
    }
    for (size_t i = 0; i < n * ldy; i++) yref[i] = yfast[i] = 1e30f; /* sentinel */
    for (size_t i = 0; i < sf; i++) scratch[i] = NAN; /* fast path must not read stale */
    tl_matmul_ref(type, W, k, j0, j1, X, ldx, n, yref, ldy);
    /* every instruction set this machine has, each against the reference below; the
     * widest last, as tl_matmul_fast picks it */
    float *yisa[TL_ISA_AVX512VNNI + 1] = {0};
    for (int isa = TL_ISA_AVX2; isa <= TL_ISA_AVX512VNNI; isa++) {
        yisa[isa] = malloc(n * ldy * sizeof(float));
        for (size_t i = 0; i < n * ldy; i++) yisa[isa][i] = 1e30f;
        if (!tl__matmul_fast_isa(isa, type, W, k, j0, j1, X, ldx, n, yisa[isa], ldy, scratch)) {
            static int noted[TL_ISA_AVX512VNNI + 1];
            if (!noted[isa]++)
                fprintf(stderr, "  (instruction set %d is not on this CPU or build: its "
                        "products are not tested here)\n", isa);
            free(yisa[isa]);
            yisa[isa] = NULL;
        }
    }
    tl_matmul_fast(type, W, k, j0, j1, X, ldx, n, yfast, ldy, scratch);
    int bad = act_paths_differ(type, W, k, j0, j1, X, ldx, n, yfast, ldy);
    /* the int8 GEMMs (AVX2 from 33 rows, AVX-VNNI from 13, AVX-512 VNNI) are one
     * arithmetic: equal bits; so are the integer kernels of the other rounding types
     * (Q4_1, Q5_x, K-quants: AVX2, and AVX-512 for the K-quants), for every n */
    const int ext = tl_type_rounds_act(type) && !tl_type_int8_gemm(type);
    for (int isa = TL_ISA_AVX2; isa <= TL_ISA_AVXVNNI && (tl_type_int8_gemm(type) || ext); isa++)
        if ((ext || n > (isa == TL_ISA_AVX2 ? 32u : 12u)) && yisa[isa] &&
            yisa[TL_ISA_AVX512VNNI] &&
            memcmp(yisa[isa], yisa[TL_ISA_AVX512VNNI], n * ldy * sizeof(float)) != 0) {
            fprintf(stderr, "  %s k=%zu n=%zu: the products of sets %d and AVX-512 VNNI differ\n",
                    tl_type_name(type), k, n, isa);
            bad++;
        }
    for (int isa = TL_ISA_AVX512VNNI; isa >= TL_ISA_AVX2; isa--)
        if (yisa[isa]) { /* the widest present is tl_matmul_fast's own path */
            bad += memcmp(yisa[isa], yfast, n * ldy * sizeof(float)) != 0;
            break;
        }
    for (int isa = TL_ISA_AVX2 - 1; isa <= TL_ISA_AVX512VNNI; isa++) {
        /* isa -1: tl_matmul_fast; then each instruction set's path */
        const float *yf = isa < TL_ISA_AVX2 ? yfast : yisa[isa];
        if (!yf) continue;
        bad += matmul_outputs_wrong(type, k, n, j0, j1, ldy, yref, yf, xr, wf, isa);
    }
    for (int isa = TL_ISA_AVX2; isa <= TL_ISA_AVX512VNNI; isa++) free(yisa[isa]);
    free(wbuf), free(row), free(wf), free(xbuf), free(yref), free(yfast), free(scratch);
    free(xr);
    return bad;
}

/* Outputs of one fast path (yf) against the reference (yref) and the float64 product of
 * the activations the product uses (xr) with the dequantized weights (wf); columns
 * outside [j0, j1) must keep their sentinel. Returns the number that differ. */
static int matmul_outputs_wrong(tl_type type, size_t k, size_t n, size_t j0, size_t j1,
                                size_t ldy, const float *yref, const float *yf,
                                const float *xr, const float *wf, int isa) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < ldy; j++) {
            float r = yref[i * ldy + j], f = yf[i * ldy + j];
            if (j < j0 || j >= j1) {
                if (f != 1e30f || r != 1e30f) bad++;
                continue;
            }
            double mag = 0.0, exact = 0.0;
            for (size_t c = 0; c < k; c++) {
                mag += fabs((double)xr[i * k + c] * wf[j * k + c]);
                exact += (double)xr[i * k + c] * wf[j * k + c];
            }
            double tol = 1e-5 * mag + 1e-6;
            if (!(fabs((double)f - r) <= tol) || !(fabs(r - exact) <= 1e-6 * mag + 1e-6)) {
                if (bad < 3)
                    fprintf(stderr, "  %s isa %d k=%zu n=%zu j=[%zu,%zu) at i=%zu j=%zu: fast %g "
                            "ref %g\n", tl_type_name(type), isa, k, n, j0, j1, i, j, f, r);
                bad++;
            }
        }
    }
    return bad;
}

static int matmul_case(tl_type type, size_t k, size_t n, size_t j0, size_t j1) {
    return matmul_case_x(type, k, n, j0, j1, 0);
}

/* The same activation row gives the same products whether it runs alone (matvec) or in
 * a batch of 8 (GEMM), up to f32 rounding: the contract rounds x' identically for all n. */
static void test_batch_invariance(void) {
    enum { ROWS = 37, NB = 8 };
    for (size_t t = 0; t < N_ALL_TYPES; t++) {
        tl_type type = all_types[t];
        const size_t K = tl_type_block_elems(type) == TL_QK_K ? 4096 + 256 : 4096 + 96;
        size_t rb = tl_type_row_bytes(type, K);
        uint8_t *W = malloc(ROWS * rb);
        float *row = malloc(K * sizeof(float)), *X = malloc(NB * K * sizeof(float));
        float *y1 = malloc(ROWS * sizeof(float)), *y8 = malloc(NB * ROWS * sizeof(float));
        float *r1 = malloc(ROWS * sizeof(float)), *r8 = malloc(NB * ROWS * sizeof(float));
        size_t sf = tl_matmul_scratch_floats(K, NB);
        float *scratch = aligned_alloc(64, (sf * sizeof(float) + 63) / 64 * 64);
        for (size_t j = 0; j < ROWS; j++) {
            fill(row, K, 1.0f);
            tl_quant_row(type, row, W + j * rb, K);
        }
        fill_x(X, K, NB, K, t % 3);
        int bad = 0;
        for (size_t i = 0; i < NB; i++) {
            tl_matmul_fast(type, W, K, 0, ROWS, X + i * K, K, 1, y1, ROWS, scratch);
            tl_matmul_ref(type, W, K, 0, ROWS, X + i * K, K, 1, r1, ROWS);
            if (i == 0) {
                tl_matmul_fast(type, W, K, 0, ROWS, X, K, NB, y8, ROWS, scratch);
                tl_matmul_ref(type, W, K, 0, ROWS, X, K, NB, r8, ROWS);
            }
            for (size_t j = 0; j < ROWS; j++) {
                double mag = 0.0;
                tl_dequant_row(type, W + j * rb, row, K);
                for (size_t c = 0; c < K; c++) mag += fabs((double)X[i * K + c] * row[c]);
                /* reference: identical; fast: f32 rounding (|x'| <= |x| * 128/127), and
                 * for the types of x86_matvec_ext.c identical (one arithmetic for all n) */
                const int exact = tl_type_rounds_act(type) && !tl_type_int8_gemm(type);
                if (r1[j] != r8[i * ROWS + j] || (exact && y1[j] != y8[i * ROWS + j]) ||
                    !(fabs((double)y1[j] - y8[i * ROWS + j]) <= 1e-5 * mag + 1e-6)) {
                    if (bad < 3)
                        fprintf(stderr, "  %s row %zu j %zu: n=1 %g n=8 %g (ref %g %g)\n",
                                tl_type_name(type), i, j, y1[j], y8[i * ROWS + j], r1[j],
                                r8[i * ROWS + j]);
                    bad++;
                }
            }
        }
        CHECK_MSG(bad == 0, "%s: %d outputs depend on the batch size", tl_type_name(type), bad);
        free(W), free(row), free(X), free(y1), free(y8), free(r1), free(r8), free(scratch);
    }
}

/* The K-quants' AVX-512 kernels run weight rows in pairs (x86avx512_ext_pairs.c) and an
 * odd last row, and Q6_K's matrix-vector products, row by row (x86avx512_matvec_ext.c):
 * whichever runs a row, with whichever partner and pass of X rows, its outputs must equal
 * the AVX2 kernel's bit for bit, and a row of X gives the same bits in a batch as alone.
 * Ranges start at even and odd rows with even and odd lengths; the weights include rows at
 * the quants' extremes and X rows whose every element rounds to +-127. */
static void test_k_pairs(void) {
    enum { ROWS = 23, NX = 19 };
    static const tl_type types[] = {TL_TYPE_Q2_K, TL_TYPE_Q3_K, TL_TYPE_Q4_K, TL_TYPE_Q5_K,
                                    TL_TYPE_Q6_K};
    static const size_t ks[] = {256, 2304}, ns[] = {1, 2, 3, 16, 17, 19};
    static const size_t ranges[][2] = {{0, 1}, {0, 2}, {1, 4}, {3, 10}, {0, ROWS}, {2, ROWS}};
    int ran = 0;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (size_t ki = 0; ki < 2; ki++) {
            const tl_type type = types[t];
            const size_t k = ks[ki], rb = tl_type_row_bytes(type, k);
            uint8_t *wbuf = malloc(ROWS * rb + 2), *W = wbuf + 2; /* rows 2-aligned */
            float *row = malloc(k * sizeof(float)), *X = malloc(NX * k * sizeof(float));
            float *y512 = malloc(NX * ROWS * sizeof(float)), *y2 = malloc(NX * ROWS * sizeof(float));
            float *y1 = malloc(ROWS * sizeof(float));
            for (size_t j = 0; j < ROWS; j++) {
                fill(row, k, 1.0f);
                for (size_t c = 0; c < k && j < 3; c++) /* extremes: constant, +-max, spikes */
                    row[c] = j == 0 ? 3.0f : j == 1 ? (c % 2 ? 5.0f : -5.0f) : (c % 17 ? 0.01f : 9.0f);
                tl_quant_row(type, row, W + j * rb, k);
            }
            fill(X, NX * k, 2.0f);
            for (size_t c = 0; c < k; c++) X[c] = c % 3 ? 1.5f : -1.5f; /* q = +-127 */
            const size_t af = tl_matmul_act_floats(type, TL_LAYOUT_ROWS, k, NX);
            float *act = malloc(af * sizeof(float)), *act1 = malloc(af * sizeof(float));
            int bad = 0;
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                const size_t n = ns[ni];
                tl_matmul_act_prepare(type, TL_LAYOUT_ROWS, k, X, k, n, 0, n, act);
                for (size_t r = 0; r < sizeof ranges / sizeof ranges[0]; r++) {
                    const size_t j0 = ranges[r][0], j1 = ranges[r][1];
                    for (size_t i = 0; i < NX * ROWS; i++) y512[i] = y2[i] = 1e30f;
                    if (!tl__matmul_fast_act_isa(TL_ISA_AVX512VNNI, type, TL_LAYOUT_ROWS, W, k, j0,
                                                 j1, act, n, y512, ROWS))
                        continue;
                    ran++;
                    CHECK(tl__matmul_fast_act_isa(TL_ISA_AVX2, type, TL_LAYOUT_ROWS, W, k, j0, j1,
                                                  act, n, y2, ROWS));
                    bad += memcmp(y512, y2, NX * ROWS * sizeof(float)) != 0;
                    for (size_t i = 0; i < n; i++) { /* row i of X alone */
                        for (size_t j = 0; j < ROWS; j++) y1[j] = 1e30f;
                        tl_matmul_act_prepare(type, TL_LAYOUT_ROWS, k, X + i * k, k, 1, 0, 1, act1);
                        tl__matmul_fast_act_isa(TL_ISA_AVX512VNNI, type, TL_LAYOUT_ROWS, W, k, j0,
                                                j1, act1, 1, y1, ROWS);
                        bad += memcmp(y1, y512 + i * ROWS, ROWS * sizeof(float)) != 0;
                    }
                }
            }
            CHECK_MSG(bad == 0, "%s k=%zu: %d products of the AVX-512 K kernels differ from the "
                      "AVX2 kernel's or from one row of X alone", tl_type_name(type), k, bad);
            free(wbuf), free(row), free(X), free(y512), free(y2), free(y1), free(act), free(act1);
        }
    if (!ran) fprintf(stderr, "  (no AVX-512 VNNI here: the K-quants' pair kernel is not tested)\n");
}

static void test_matmul(void) {
    static const size_t kf[] = {1, 7, 33, 257, 1000};       /* float types */
    static const size_t kq[] = {32, 64, 96, 288, 4096 + 32}; /* block types */
    static const size_t kk[] = {256, 512, 768, 2304, 4096 + 256}; /* K-quants */
    static const size_t ns[] = {1, 2, 3, 4, 5, 7, 8, 13, 17, 64, 65};
    static const size_t jr[][2] = {{0, 1}, {5, 8}, {3, 20}, {16, 48}, {1, 101}};
    for (size_t t = 0; t < N_ALL_TYPES; t++) {
        tl_type type = all_types[t];
        const size_t be = tl_type_block_elems(type);
        const size_t *ks = be == 1 ? kf : be == TL_QK ? kq : kk;
        for (size_t a = 0; a < 5; a++)
            for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
                for (size_t c = 0; c < sizeof jr / sizeof jr[0]; c++) {
                    size_t k = ks[a], n = ns[b];
                    if (k > 1000 && n > 8 && c != 4 && c != 2) continue; /* keep it quick */
                    int bad = matmul_case(type, k, n, jr[c][0], jr[c][1]);
                    CHECK_MSG(bad == 0, "%s k=%zu n=%zu j=[%zu,%zu): %d outputs wrong",
                              tl_type_name(type), k, n, jr[c][0], jr[c][1], bad);
                }
    }
    /* activations full of exact ties and of all-zero blocks, matvec and GEMM */
    for (size_t t = 0; t < N_ALL_TYPES; t++)
        for (int pat = 1; pat <= 2; pat++)
            for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++) {
                const size_t be = tl_type_block_elems(all_types[t]);
                size_t k = be == 1 ? 257 : be == TL_QK ? 288 : 512;
                int bad = matmul_case_x(all_types[t], k, ns[b], 3, 20, pat);
                CHECK_MSG(bad == 0, "%s pattern %d k=%zu n=%zu: %d outputs wrong",
                          tl_type_name(all_types[t]), pat, k, ns[b], bad);
            }
}

/* ---- vector kernels ---- */

/* Weights in 32-row panels (kernels.h): the reference pack and unpack are inverse bit for
 * bit, the in-place pack writes the reference's bytes, the reference product over panels
 * equals tl_matmul_ref's over the file's rows bit for bit, and (where this CPU computes
 * from panels) the fast product agrees with the reference to float rounding, does not
 * depend on how its panels or the rows of X are split, and equals the rows layout's GEMM
 * bit for bit where both walk k in slices (n > 12). */
static void test_panels(void) {
    static const size_t ks[] = {32, 96, 288, 4096 + 32};
    static const size_t ns[] = {1, 2, 5, 8, 9, 12, 13, 64, 65};
    static const tl_type types[] = {TL_TYPE_Q8_0, TL_TYPE_Q4_0};
    const size_t rows = 96;
    int wanted = tl_panels_wanted(TL_TYPE_Q8_0, rows);
    CHECK(!tl_panels_wanted(TL_TYPE_Q8_0, rows + 16) && !tl_panels_wanted(TL_TYPE_F16, rows));
    if (!wanted) fprintf(stderr, "  (this CPU does not compute from panels: fast path not tested)\n");
    for (size_t t = 0; t < 2; t++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            const tl_type type = types[t];
            const size_t k = ks[ki], rb = tl_type_row_bytes(type, k), bytes = rows * rb;
            uint8_t *W = malloc(bytes), *P = malloc(bytes), *Q = malloc(bytes);
            uint8_t *tmp = malloc(tl_panels_tmp_bytes(type, k));
            float *row = malloc(k * sizeof(float));
            for (size_t j = 0; j < rows; j++) {
                fill(row, k, j % 7 == 3 ? 0.0f : 1.0f); /* an all-zero row: scale 0 */
                tl_quant_row(type, row, W + j * rb, k);
            }
            tl_panels_pack_ref(type, W, rows, k, P);
            tl_panels_unpack_ref(type, P, rows, k, Q);
            CHECK_MSG(memcmp(Q, W, bytes) == 0, "%s k=%zu: unpack(pack) differs", tl_type_name(type), k);
            memcpy(Q, W, bytes);
            tl_panels_pack(type, Q, rows, k, tmp);
            CHECK_MSG(memcmp(Q, P, bytes) == 0, "%s k=%zu: in-place pack differs from the reference",
                      tl_type_name(type), k);
            memcpy(Q, W, bytes); /* in shares, as a pool splits it (3 panels in 2 shares) */
            for (size_t part = 2; part-- > 0;) tl_panels_pack_share(type, Q, rows, k, part, 2, tmp);
            CHECK_MSG(memcmp(Q, P, bytes) == 0, "%s k=%zu: packing in shares differs",
                      tl_type_name(type), k);
            float *looked = malloc(k * sizeof(float)); /* one row from panels: an embedding */
            int rows_off = 0;
            for (size_t j = 0; j < rows; j++) {
                tl_dequant_row(type, W + j * rb, row, k);
                tl_panels_dequant_row(type, P, k, j, looked);
                rows_off += memcmp(row, looked, k * sizeof(float)) != 0;
            }
            CHECK_MSG(rows_off == 0, "%s k=%zu: %d rows looked up in panels differ from the file's",
                      tl_type_name(type), k, rows_off);
            free(looked);
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                const size_t n = ns[ni], ldx = k + 3, ldy = rows + 5;
                float *X = malloc(n * ldx * sizeof(float)), *yr = malloc(n * ldy * sizeof(float));
                float *yp = malloc(n * ldy * sizeof(float)), *yf = malloc(n * ldy * sizeof(float));
                float *ys = malloc(n * ldy * sizeof(float));
                fill_x(X, ldx, n, k, (int)(ni % 3));
                for (size_t i = 0; i < n * ldy; i++) yr[i] = yp[i] = yf[i] = ys[i] = 1e30f;
                tl_matmul_ref(type, W, k, 0, rows, X, ldx, n, yr, ldy);
                tl_matmul_panels_ref(type, P, k, 0, rows, X, ldx, n, yp, ldy);
                CHECK_MSG(memcmp(yr, yp, n * ldy * sizeof(float)) == 0,
                          "%s k=%zu n=%zu: reference over panels differs", tl_type_name(type), k, n);
                if (!wanted) {
                    free(X), free(yr), free(yp), free(yf), free(ys);
                    continue;
                }
                const size_t af = tl_matmul_act_floats(type, TL_LAYOUT_PANELS, k, n);
                CHECK(af > 0 && af <= tl_matmul_scratch_floats(k, n));
                float *act = malloc(af * sizeof(float));
                tl_matmul_act_prepare(type, TL_LAYOUT_PANELS, k, X, ldx, n, 0, n, act);
                tl_matmul_fast_act(type, TL_LAYOUT_PANELS, P, k, 0, rows, act, n, yf, ldy);
                tl_matmul_act_prepare(type, TL_LAYOUT_PANELS, k, X, ldx, n, n / 3, n, act);
                tl_matmul_act_prepare(type, TL_LAYOUT_PANELS, k, X, ldx, n, 0, n / 3, act);
                tl_matmul_fast_act(type, TL_LAYOUT_PANELS, P, k, 32, rows, act, n, ys, ldy);
                tl_matmul_fast_act(type, TL_LAYOUT_PANELS, P, k, 0, 32, act, n, ys, ldy);
                CHECK_MSG(memcmp(yf, ys, n * ldy * sizeof(float)) == 0,
                          "%s k=%zu n=%zu: result depends on the split", tl_type_name(type), k, n);
                /* below AVX-512 VNNI panels take the scalar fallback: the same bits */
                for (size_t i = 0; i < n * ldy; i++) ys[i] = 1e30f;
                CHECK(tl__matmul_fast_act_isa(TL_ISA_AVX2, type, TL_LAYOUT_PANELS, P, k, 0, rows,
                                              act, n, ys, ldy));
                CHECK_MSG(memcmp(yf, ys, n * ldy * sizeof(float)) == 0,
                          "%s k=%zu n=%zu: the scalar panel fallback differs", tl_type_name(type), k, n);
                int bad = 0;
                for (size_t i = 0; i < n; i++)
                    for (size_t j = 0; j < ldy; j++) {
                        const float f = yf[i * ldy + j], r = yr[i * ldy + j];
                        if (j >= rows) {
                            bad += f != 1e30f;
                            continue;
                        }
                        double mag = 0.0;
                        tl_dequant_row(type, W + j * rb, row, k);
                        for (size_t c = 0; c < k; c++) mag += fabs((double)X[i * ldx + c] * row[c]);
                        bad += !(fabs((double)f - r) <= 1e-5 * mag + 1e-6);
                    }
                CHECK_MSG(bad == 0, "%s k=%zu n=%zu: %d outputs off the reference",
                          tl_type_name(type), k, n, bad);
                if (n > 12) {
                    float *scratch = aligned_alloc(64, (tl_matmul_scratch_floats(k, n) * 4 + 63) / 64 * 64);
                    tl_matmul_fast(type, W, k, 0, rows, X, ldx, n, ys, ldy, scratch);
                    CHECK_MSG(memcmp(yf, ys, n * ldy * sizeof(float)) == 0,
                              "%s k=%zu n=%zu: panels differ from the rows' GEMM", tl_type_name(type), k, n);
                    free(scratch);
                }
                free(act), free(X), free(yr), free(yp), free(yf), free(ys);
            }
            free(W), free(P), free(Q), free(tmp), free(row);
        }
}

static void test_vector(void) {
    static const size_t ns[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 1000, 4099};
    enum { MAXN = 4099 + 1 };
    static float a[MAXN], b[MAXN], y1[MAXN], y2[MAXN];
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        size_t n = ns[t];
        float *pa = a + 1, *pb = b + (t & 1); /* unaligned starts */
        fill(pa, n, 1.0f);
        fill(pb, n, 3.0f);
        double mag = 0.0;
        for (size_t i = 0; i < n; i++) mag += fabs((double)pa[i] * pb[i]);
        float r = tl_dot_f32_ref(pa, pb, n), f = tl_dot_f32_fast(pa, pb, n);
        CHECK_MSG(fabs((double)r - f) <= 1e-5 * mag + 1e-6, "dot n=%zu: %g vs %g", n, f, r);

        float s = rng_f() * 4.0f;
        fill(y1, n, 2.0f);
        memcpy(y2, y1, n * sizeof(float));
        y1[n] = y2[n] = 7.0f;
        tl_axpy_f32_ref(y1, s, pa, n);
        tl_axpy_f32_fast(y2, s, pa, n);
        int bad = 0;
        for (size_t i = 0; i < n; i++)
            if (fabsf(y1[i] - y2[i]) > 1e-6f * (fabsf(s * pa[i]) + fabsf(y1[i])) + 1e-7f) bad++;
        CHECK_MSG(bad == 0 && y2[n] == 7.0f, "axpy n=%zu: %d wrong", n, bad);
    }
}

/* ---- attention and element-wise kernels ---- */

static void test_attention(void) {
    /* head sizes with and without a whole 64-float block, one not a multiple of 8 (the
     * reference fallback); position counts around the 8-wide step; strided K/V rows */
    static const size_t hds[] = {8, 64, 80, 128, 12};
    static const size_t ns[] = {1, 7, 8, 9, 16, 23, 64};
    enum { GROUP = 3, MAXN = 64, MAXHD = 128, LD = 3 * MAXHD + 5 };
    static float q[GROUP * MAXHD], K[MAXN * LD], V[MAXN * LD];
    static float s1[GROUP * (MAXN + 3)], s2[GROUP * (MAXN + 3)];
    static float o1[GROUP * MAXHD + 1], o2[GROUP * MAXHD + 1];
    for (size_t a = 0; a < sizeof hds / sizeof hds[0]; a++)
        for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++) {
            const size_t hd = hds[a], n = ns[b], lds = MAXN + 3, ld = LD - (a & 1);
            fill(q, GROUP * hd, 1.0f);
            fill(K, n * ld, 1.0f);
            fill(V, n * ld, 2.0f);
            const float scale = 0.125f;
            tl_attn_scores_ref(q, GROUP, hd, K + 1, ld, n, scale, s1, lds);
            tl_attn_scores_fast(q, GROUP, hd, K + 1, ld, n, scale, s2, lds);
            int bad = 0;
            for (size_t h = 0; h < GROUP; h++)
                for (size_t t = 0; t < n; t++) {
                    double mag = 0;
                    for (size_t c = 0; c < hd; c++)
                        mag += fabs((double)q[h * hd + c] * K[1 + t * ld + c]) * scale;
                    if (fabs((double)s1[h * lds + t] - s2[h * lds + t]) > 1e-5 * mag + 1e-7) bad++;
                }
            CHECK_MSG(bad == 0, "attention scores hd=%zu n=%zu: %d wrong", hd, n, bad);

            for (size_t i = 0; i < GROUP * lds; i++) s1[i] = rng_f(); /* weights, any sign */
            fill(o1, GROUP * hd, 1.0f);
            memcpy(o2, o1, GROUP * hd * sizeof(float));
            o1[GROUP * hd] = o2[GROUP * hd] = 5.0f; /* guard */
            tl_attn_values_ref(o1, GROUP, hd, s1, lds, V + 2, ld, n);
            tl_attn_values_fast(o2, GROUP, hd, s1, lds, V + 2, ld, n);
            bad = 0;
            for (size_t h = 0; h < GROUP; h++)
                for (size_t c = 0; c < hd; c++) {
                    double mag = fabs((double)o1[h * hd + c]);
                    for (size_t t = 0; t < n; t++) mag += fabs((double)s1[h * lds + t] * V[2 + t * ld + c]);
                    if (fabs((double)o1[h * hd + c] - o2[h * hd + c]) > 1e-5 * mag + 1e-7) bad++;
                }
            CHECK_MSG(bad == 0 && o2[GROUP * hd] == 5.0f, "attention values hd=%zu n=%zu: %d wrong",
                      hd, n, bad);
        }
}

/* 16-bit KV rows: every f16 bit pattern (in a row whose length leaves a scalar tail),
 * the fast conversion bit for bit as the reference's, a NaN as a NaN; nothing beyond n
 * written. */
static void test_f16_rows(void) {
    enum { N = 65536 + 5 };
    static uint16_t h[N];
    static float a[N + 1], b[N + 1];
    for (size_t i = 0; i < N; i++) h[i] = (uint16_t)(i * 40503u);
    for (size_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    a[N] = b[N] = 7.0f;
    tl_f16_row_to_f32_ref(h, a, N);
    tl_f16_row_to_f32_fast(h, b, N);
    int bad = 0;
    for (size_t i = 0; i < N; i++) {
        uint32_t ua, ub;
        memcpy(&ua, &a[i], 4);
        memcpy(&ub, &b[i], 4);
        if (isnan(a[i]) ? !isnan(b[i]) : ua != ub) bad++;
    }
    CHECK_MSG(bad == 0 && a[N] == 7.0f && b[N] == 7.0f, "f16 rows: %d differ", bad);
    CHECK(a[0x3c00] == 1.0f && a[0xc000] == -2.0f && a[0x0001] == 0x1p-24f && isinf(a[0x7c00]));
}

/* 16-bit KV rows stored: f32 values over the whole range (subnormal halves, ties at both
 * parities, overflow, infinities, NaN), the fast rounding bit for bit as the reference's,
 * a NaN as a NaN; nothing beyond n written. */
static void test_f16_store_rows(void) {
    enum { N = 200000 + 3 };
    static float x[N];
    static uint16_t a[N + 1], b[N + 1];
    uint32_t s = 12345;
    for (size_t i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        uint32_t u = s;
        if (i % 4 == 1) u = (u & 0x80000000u) | (0x33000000u + (u & 0x0fffffffu) % 0x0c800000u);
        if (i % 4 == 2) u = (u & 0x80001fffu) | 0x3f800000u | ((u >> 13) & 0x7fe000u);
        if (i % 8 == 3) u = (u & 0xffffe000u) | 0x1000u; /* a tie */
        memcpy(&x[i], &u, 4);
    }
    const float special[] = {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, 1e9f, INFINITY,
                             -INFINITY, NAN, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-14f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) x[i * 7] = special[i];
    a[N] = b[N] = 7;
    tl_f32_row_to_f16_ref(x, a, N);
    tl_f32_row_to_f16_fast(x, b, N);
    int bad = 0;
    for (size_t i = 0; i < N; i++)
        if (isnan(x[i]) ? !isnan(tl_f16_to_f32(b[i])) : a[i] != b[i]) bad++;
    CHECK_MSG(bad == 0 && a[N] == 7 && b[N] == 7, "f16 stores: %d differ", bad);
    CHECK(a[0] == 0 && a[14] == 0x7bff && a[28] == 0x7c00 && a[42] == 0x7c00 && a[49] == 0xfc00 &&
          a[63] == 1);
}

static void test_elementwise(void) {
    static const size_t ns[] = {1, 7, 8, 9, 31, 100, 5632};
    enum { MAXN = 5632 + 1 };
    static float g1[MAXN], g2[MAXN], u[MAXN];
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        const size_t n = ns[t];
        /* gate values from -100 to 100: exp's clamps at both ends */
        for (size_t i = 0; i < n; i++) g1[i] = g2[i] = (rng_f() * 2.0f - 1.0f) * (i % 3 ? 12.0f : 100.0f);
        fill(u, n, 1.0f);
        g1[n] = g2[n] = 3.0f;
        tl_swiglu_ref(g1, u, n);
        tl_swiglu_fast(g2, u, n);
        int bad = 0;
        for (size_t i = 0; i < n; i++)
            if (fabsf(g1[i] - g2[i]) > 4e-7f * fabsf(g1[i]) + 1e-30f) bad++;
        CHECK_MSG(bad == 0 && g2[n] == 3.0f, "swiglu n=%zu: %d wrong", n, bad);

        for (size_t i = 0; i < n; i++) g1[i] = g2[i] = (rng_f() * 2.0f - 1.0f) * (i % 2 ? 30.0f : 3.0f);
        tl_softmax_ref(g1, n);
        tl_softmax_fast(g2, n);
        bad = 0;
        double total = 0;
        for (size_t i = 0; i < n; i++) {
            total += g2[i];
            if (fabsf(g1[i] - g2[i]) > 1e-6f * fabsf(g1[i]) + 1e-12f) bad++;
        }
        CHECK_MSG(bad == 0 && fabs(total - 1.0) < 1e-5 && g2[n] == 3.0f,
                  "softmax n=%zu: %d wrong, sum %g", n, bad, total);
    }
}

/* One Q8_0 row against rounded activations: the AVX2 kernel gives the reference's bits,
 * which agree with the Q8_0 product's row to f32 rounding, for every row of x; the
 * extremes of the quants (-128 included) and zero blocks too. */
/* rmsnorm: fast against reference over widths with and without a tail of < 8, rows of
 * very different magnitudes, in place too; the two sum the squares in a different order,
 * so their scales may differ by a float's last place, never more. */
static void test_rmsnorm(void) {
    static const size_t ds[] = {1, 7, 8, 9, 64, 1000, 1024, 4099};
    enum { ROWS = 5, MAXD = 4099 };
    static float x[ROWS * MAXD], g[MAXD], o1[ROWS * MAXD + 1], o2[ROWS * MAXD + 1];
    for (size_t t = 0; t < sizeof ds / sizeof ds[0]; t++) {
        const size_t d = ds[t];
        for (size_t r = 0; r < ROWS; r++)
            fill(x + r * d, d, r == 0 ? 1e-3f : r == 1 ? 50.0f : 1.0f);
        fill(g, d, 2.0f);
        o1[ROWS * d] = o2[ROWS * d] = 7.0f;
        tl_rmsnorm_ref(x, g, ROWS, d, 1e-5f, o1);
        tl_rmsnorm_fast(x, g, ROWS, d, 1e-5f, o2);
        int bad = 0;
        for (size_t i = 0; i < ROWS * d; i++)
            if (fabsf(o1[i] - o2[i]) > 3e-7f * fabsf(o1[i]) + 1e-30f) bad++;
        CHECK_MSG(bad == 0 && o2[ROWS * d] == 7.0f, "rmsnorm d=%zu: %d wrong", d, bad);
        /* against the formula in double, row 1 (large values) */
        double ss = 0;
        for (size_t i = 0; i < d; i++) ss += (double)x[d + i] * x[d + i];
        const double sc = 1.0 / sqrt(ss / (double)d + 1e-5);
        bad = 0;
        for (size_t i = 0; i < d; i++) {
            const double want = x[d + i] * sc * g[i];
            if (fabs(o2[d + i] - want) > 1e-6 * fabs(want) + 1e-30) bad++;
        }
        CHECK_MSG(bad == 0, "rmsnorm d=%zu: %d off the formula", d, bad);
        /* in place: out = x */
        memcpy(o1, x, ROWS * d * sizeof(float));
        tl_rmsnorm_fast(o1, g, ROWS, d, 1e-5f, o1);
        CHECK_MSG(memcmp(o1, o2, ROWS * d * sizeof(float)) == 0, "rmsnorm d=%zu in place", d);
    }
}

static void test_row_dot(void) {
    const size_t k = 512, nb = k / TL_QK, n = 3;
    float w[512], X[3 * 512], y_ref[3], y_fast[3], y_mm[3];
    uint8_t row[544];
    tl_block_q8_act x[3 * 16];
    for (int trial = 0; trial < 20; trial++) {
        fill(w, k, trial & 1 ? 3.0f : 0.01f);
        if (trial == 2) memset(w + 64, 0, 32 * sizeof(float)); /* a zero block */
        fill(X, n * k, 1.0f);
        tl_quant_row(TL_TYPE_Q8_0, w, row, k);
        if (trial == 3) row[2] = (uint8_t)(int8_t)-128; /* the one quant outside +-127 */
        for (size_t i = 0; i < n; i++) tl_quant_act_row(X + i * k, x + i * nb, k);
        tl_dot_q8_0_act_ref(row, k, x, n, y_ref);
        tl_dot_q8_0_act_fast(row, k, x, n, y_fast);
        tl_matmul_ref(TL_TYPE_Q8_0, row, k, 0, 1, X, k, n, y_mm, 1);
        for (size_t i = 0; i < n; i++) {
            CHECK_MSG(!memcmp(&y_ref[i], &y_fast[i], sizeof(float)),
                      "row dot trial %d row %zu: fast %.9g, reference %.9g", trial, i,
                      (double)y_fast[i], (double)y_ref[i]);
            CHECK_MSG(fabsf(y_ref[i] - y_mm[i]) <= 1e-5f * (1.0f + fabsf(y_mm[i])),
                      "row dot trial %d row %zu: %.9g against the product's %.9g", trial, i,
                      (double)y_ref[i], (double)y_mm[i]);
        }
    }
}

int main(void) {
    test_row_dot();
    test_layouts();
    test_half_formats();
    test_block_formats();
    test_ext_formats();
    test_act_rounding();
    test_act_rounding_k();
    test_vector();
    test_attention();
    test_elementwise();
    test_rmsnorm();
    test_f16_rows();
    test_f16_store_rows();
    test_matmul();
    test_panels();
    test_batch_invariance();
    test_k_pairs();
    return tl_test_finish("test_kernels");
}
