/* ref_colmat.c - tl_colmat_ref: the definition of column products over weights in the
 * flash layout (kernels.h), written to be read, not to be fast. Each output is summed in
 * double, products (double)x * w taken in the order of chan, and rounded to float once;
 * the activations are used as given. tl_matmul_ref sums the same products in the same
 * way, so over every channel in ascending order the two agree bit for bit for the float
 * weight types.
 * Invariant: allocation-free: the outputs go in tiles of REF_TILE, with the tile's double
 * accumulators and one dequantized slice of a run on the stack; chan is re-walked for
 * every tile and row.
 */
#include "kernels/kernels.h"

/* Outputs per tile; a multiple of every block size, so each tile is whole blocks. */
#define REF_TILE 256

void tl_colmat_ref(tl_type type, const void *W, size_t run_elems, const int32_t *chan,
                   size_t nc, size_t o0, size_t o1, const float *X, size_t ldx, size_t n,
                   float *Y, size_t ldy) {
    const size_t run_bytes = tl_type_row_bytes(type, run_elems);
    double acc[REF_TILE];
    float w[REF_TILE];
    for (size_t t0 = o0; t0 < o1; t0 += REF_TILE) {
        const size_t len = o1 - t0 < REF_TILE ? o1 - t0 : REF_TILE;
        const size_t off = tl_type_row_bytes(type, t0);
        for (size_t i = 0; i < n; i++) {
            for (size_t o = 0; o < len; o++) acc[o] = 0.0;
            for (size_t t = 0; t < nc; t++) {
                const uint8_t *run = (const uint8_t *)W + (size_t)chan[t] * run_bytes;
                const double x = X[i * ldx + (size_t)chan[t]];
                tl_dequant_row(type, run + off, w, len);
                for (size_t o = 0; o < len; o++) acc[o] += x * w[o];
            }
            for (size_t o = 0; o < len; o++) Y[i * ldy + t0 + o] = (float)acc[o];
        }
    }
}
