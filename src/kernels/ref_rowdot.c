/* ref_rowdot.c - one Q8_0 row against rounded activations, scalar (kernels.h, "single
 * Q8_0 rows"): the definition tl_dot_q8_0_act_fast reproduces bit for bit. */
#include <string.h>
#include "kernels/kernels.h"

void tl_dot_q8_0_act_ref(const void *W, size_t k, const tl_block_q8_act *x, size_t n,
                         float *y) {
    const size_t nb = k / TL_QK;
    const tl_block_q8_0 *w = W;
    for (size_t i = 0; i < n; i++) {
        const tl_block_q8_act *xi = x + i * nb;
        float acc = 0.0f;
        for (size_t b = 0; b < nb; b++) {
            uint16_t dh;
            memcpy(&dh, &w[b].d, sizeof dh);
            int32_t isum = 0;
            for (int j = 0; j < TL_QK; j++) isum += (int32_t)w[b].q[j] * xi[b].q[j];
            /* separate statements: no contraction into an FMA, in either file */
            const float scale = tl_f16_to_f32(dh) * xi[b].d;
            const float term = scale * (float)isum;
            acc += term;
        }
        y[i] = acc;
    }
}
