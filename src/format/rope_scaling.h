/* rope_scaling.h - Llama 3.1's RoPE frequency scaling ("rope_type": "llama3" in a
 * Hugging Face config), as the divisors GGUF stores in rope_freqs.weight: one per
 * rotation frequency, applied by dividing the angle. Written once for the two places
 * that produce them: a Hugging Face folder's description (hf_folder.c) and synthetic
 * Llama 3 models (model/synth.c).
 *
 * For frequency i of n = rope_dim/2, f = base^(-2i/rope_dim) and wavelength 2*pi/f:
 * shorter than old_ctx/high: divisor 1 (kept); longer than old_ctx/low: `factor`;
 * between: 1 / ((1 - s)/factor + s) with s = (old_ctx/wavelength - low)/(high - low).
 */
#ifndef TL_FORMAT_ROPE_SCALING_H
#define TL_FORMAT_ROPE_SCALING_H

#include <math.h>
#include <stdint.h>

static inline void tl_rope_llama3_divisors(double base, int32_t rope_dim, double factor,
                                           double low, double high, double old_ctx,
                                           float *out) {
    const double pi = 3.14159265358979323846;
    for (int32_t i = 0; i < rope_dim / 2; i++) {
        const double f = pow(base, -2.0 * i / rope_dim), wavelen = 2 * pi / f;
        double d;
        if (wavelen < old_ctx / high) d = 1;
        else if (wavelen > old_ctx / low) d = factor;
        else {
            const double s = (old_ctx / wavelen - low) / (high - low);
            d = 1 / ((1 - s) / factor + s);
        }
        out[i] = (float)d;
    }
}

#endif
