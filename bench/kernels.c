/* kernels.c (bench_kernels) - single-thread speed of tl_matmul_fast per weight type.
 *
 * (a) matvec, n=1 (and n=4): W is 5632 rows x k=2048, rotating over enough copies that
 *     the weights come from DRAM; reports GB/s of weight bytes streamed.
 * (b) gemm, n=64, k=2048, 5632 rows (also cold): reports GFLOP/s (2*n*k*rows per call).
 * Each figure is the median of several runs. Usage: bench_kernels [reps]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/clock.h"
#include "base/stats.h"
#include "kernels/kernels.h"

#define ROWS 5632
#define K 2048
#define COLD_BYTES ((size_t)320 << 20) /* total weight copies, beyond any L3 */

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
    return 0;
}
