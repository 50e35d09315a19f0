/* kernels.c (bench_kernels) - single-thread speed of tl_matmul_fast per weight type.
 *
 * (a) matvec, n=1 (and n=4): W is 5632 rows x k=2048, rotating over enough copies that
 *     the weights come from DRAM; reports GB/s of weight bytes streamed.
 * (b) gemm, n=64, k=2048, 5632 rows (also cold): reports GFLOP/s (2*n*k*rows per call).
 * (c) column products (tl_colmat_fast, the flash layout), n=1: runs of 4096 outputs, 2048
 *     of 4096 channels chosen at random, Q8_0 and F16, cold (COLMAT_COLD_BYTES of copies);
 *     GB/s of the selected runs' bytes, over all 4096 outputs and as eight 512-output
 *     ranges one after another (what each of eight threads reads), beside a plain read
 *     of a cold copy (tl_dot_f32_fast of it with itself) as the memory's single-thread rate.
 * Each figure is the median of several runs. Usage: bench_kernels [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/clock.h"
#include "base/rng.h"
#include "base/stats.h"
#include "kernels/kernels.h"

#define ROWS 5632
#define K 2048
#define COLD_BYTES ((size_t)320 << 20) /* total weight copies, beyond any L3 */
#define COLMAT_OUTS 4096
#define COLMAT_CHANNELS 4096
#define COLMAT_SELECTED 2048
#define COLMAT_COLD_BYTES ((size_t)1 << 30) /* beyond the 480 MiB L3 of some servers */

static void bench_colmat(int reps) {
    static const tl_type types[] = {TL_TYPE_Q8_0, TL_TYPE_F16};
    static int32_t chan[COLMAT_CHANNELS];
    uint64_t rs = 11;
    float *x = malloc(COLMAT_CHANNELS * sizeof(float)), *y = malloc(COLMAT_OUTS * sizeof(float));
    float *run = malloc(COLMAT_OUTS * sizeof(float));
    const size_t sf = tl_colmat_scratch_floats(COLMAT_OUTS, 1);
    float *scratch = aligned_alloc(64, (sf * sizeof(float) + 63) / 64 * 64);
    for (size_t c = 0; c < COLMAT_CHANNELS; c++) x[c] = tl_rand_sym(&rs), chan[c] = (int32_t)c;
    for (size_t c = 0; c < COLMAT_SELECTED; c++) { /* a random subset, then ascending */
        size_t j = c + tl_splitmix64(&rs) % (COLMAT_CHANNELS - c);
        int32_t t = chan[c];
        chan[c] = chan[j], chan[j] = t;
    }
    for (size_t a = 1; a < COLMAT_SELECTED; a++)
        for (size_t b = a; b > 0 && chan[b - 1] > chan[b]; b--) {
            int32_t t = chan[b];
            chan[b] = chan[b - 1], chan[b - 1] = t;
        }
    const int runs = reps * 3;
    double *tt = malloc((size_t)runs * 3 * sizeof(double)), *t8 = tt + runs, *tr = t8 + runs;
    printf("\ncolumn products, n=1: %d of %d runs of %d outputs, cold, median of %d runs\n",
           COLMAT_SELECTED, COLMAT_CHANNELS, COLMAT_OUTS, runs);
    printf("%-5s %10s %14s %12s\n", "type", "all GB/s", "8x512 GB/s", "read GB/s");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const tl_type type = types[ti];
        const size_t rb = tl_type_row_bytes(type, COLMAT_OUTS), wbytes = rb * COLMAT_CHANNELS;
        const size_t copies = COLMAT_COLD_BYTES / wbytes + 1;
        uint8_t *W = aligned_alloc(64, copies * wbytes);
        for (size_t c = 0; c < COLMAT_CHANNELS; c++) {
            for (size_t o = 0; o < COLMAT_OUTS; o++) run[o] = tl_rand_sym(&rs);
            tl_quant_row(type, run, W + c * rb, COLMAT_OUTS);
        }
        for (size_t c = 1; c < copies; c++) memcpy(W + c * wbytes, W, wbytes);
        volatile float sink = 0.0f; /* keeps the plain read */
        for (int r = 0; r < 3 * runs; r++) {
            const uint8_t *w = W + (size_t)r % copies * wbytes;
            double t0 = tl_now();
            if (r % 3 == 0) {
                tl_colmat_fast(type, w, COLMAT_OUTS, chan, COLMAT_SELECTED, 0, COLMAT_OUTS, x,
                               COLMAT_CHANNELS, 1, y, COLMAT_OUTS, scratch);
            } else if (r % 3 == 1) {
                for (size_t o0 = 0; o0 < COLMAT_OUTS; o0 += 512)
                    tl_colmat_fast(type, w, COLMAT_OUTS, chan, COLMAT_SELECTED, o0, o0 + 512, x,
                                   COLMAT_CHANNELS, 1, y, COLMAT_OUTS, scratch);
            } else {
                const float *f = (const float *)(const void *)w;
                sink += tl_dot_f32_fast(f, f, wbytes / sizeof(float));
            }
            (r % 3 == 0 ? tt : r % 3 == 1 ? t8 : tr)[r / 3] = tl_now() - t0;
        }
        const double sel = (double)rb * COLMAT_SELECTED;
        printf("%-5s %10.2f %14.2f %12.2f\n", tl_type_name(type), sel / tl_median(tt, runs) / 1e9,
               sel / tl_median(t8, runs) / 1e9, (double)wbytes / tl_median(tr, runs) / 1e9);
        fflush(stdout);
        free(W);
    }
    free(x), free(y), free(run), free(scratch), free(tt);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1 || reps > 1000) reps = 7;
    static const tl_type types[] = {TL_TYPE_F32, TL_TYPE_F16, TL_TYPE_BF16, TL_TYPE_Q8_0,
                                    TL_TYPE_Q4_0, TL_TYPE_Q4_K, TL_TYPE_Q5_K, TL_TYPE_Q6_K};
    const size_t nmax = 64;
    float *X = malloc(nmax * K * sizeof(float));
    float *Y = malloc(nmax * ROWS * sizeof(float));
    float *scratch = aligned_alloc(64, (tl_matmul_scratch_floats(K, nmax) * 4 + 63) / 64 * 64);
    float *row = malloc(K * sizeof(float));
    for (size_t i = 0; i < nmax * K; i++) X[i] = (float)(i % 97) * 0.01f - 0.5f;
    double *t = malloc((size_t)reps * sizeof(double));

    printf("single thread, W = %d rows x k=%d, median of %d runs\n", ROWS, K, reps);
    printf("%-5s %8s %10s %10s %10s %12s\n", "type", "W MiB", "n=1 GB/s", "n=1 GF/s",
           "n=4 GB/s", "n=64 GFLOP/s");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        tl_type type = types[ti];
        size_t rb = tl_type_row_bytes(type, K), wbytes = rb * ROWS;
        size_t copies = COLD_BYTES / wbytes + 1;
        uint8_t *W = malloc(copies * wbytes);
        for (size_t j = 0; j < ROWS; j++) {
            for (size_t c = 0; c < K; c++) row[c] = (float)((j * 31 + c * 7) % 61) * 0.03f - 0.9f;
            tl_quant_row(type, row, W + j * rb, K);
        }
        for (size_t c = 1; c < copies; c++) memcpy(W + c * wbytes, W, wbytes);

        double gbs[2];
        for (int v = 0; v < 2; v++) {
            size_t n = v ? 4 : 1;
            int runs = reps * 3;
            double *tt = malloc((size_t)runs * sizeof(double));
            for (int r = 0; r < runs; r++) {
                const uint8_t *w = W + (size_t)r % copies * wbytes;
                double t0 = tl_now();
                tl_matmul_fast(type, w, K, 0, ROWS, X, K, n, Y, ROWS, scratch);
                tt[r] = tl_now() - t0;
            }
            gbs[v] = (double)wbytes / tl_median(tt, (size_t)runs) / 1e9;
            free(tt);
        }
        for (int r = 0; r < reps; r++) {
            double t0 = tl_now();
            const uint8_t *w = W + (size_t)r % copies * wbytes;
            tl_matmul_fast(type, w, K, 0, ROWS, X, K, nmax, Y, ROWS, scratch);
            t[r] = tl_now() - t0;
        }
        double gf = 2.0 * nmax * K * ROWS / tl_median(t, (size_t)reps) / 1e9;
        printf("%-5s %8.1f %10.2f %10.2f %10.2f %12.1f\n", tl_type_name(type),
               (double)wbytes / (1 << 20), gbs[0], gbs[0] / (double)rb * 2.0 * K, gbs[1], gf);
        fflush(stdout);
        free(W);
    }
    free(X), free(Y), free(scratch), free(row), free(t);
    bench_colmat(reps);
    return 0;
}
