/* kernels.h - compute kernels over weight rows in any tl_type.
 *
 * Every kernel has a scalar reference (`_ref`, kernels/ref_*.c), written to be read,
 * and a fast version (`_fast`, AVX2+FMA+F16C in kernels/x86_*.c) that must agree with
 * the reference to float rounding (tests/test_kernels.c checks this on awkward sizes).
 * Kernels never allocate and never do IO; threading is the caller's job (split the
 * output rows [j0, j1) across threads, each thread with its own scratch).
 *
 * Numerics: weights are dequantized exactly to f32 and multiplied with f32 activations,
 * accumulating in f32. No activation quantization, so every weight type agrees with a
 * float64 reference to ~1e-6 relative per dot product.
 */
#ifndef TL_KERNELS_KERNELS_H
#define TL_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "types.h"

/* ---- quantization formats ---- */

/* Dequantizes n elements (n a multiple of the block size) from src to dst. */
void tl_dequant_row(tl_type type, const void *src, float *dst, size_t n);
/* Quantizes n floats into `type` (F32/F16/BF16: conversion; Q8_0/Q4_0: GGML's
 * reference rounding: Q8_0 d = amax/127, q = round(x/d); Q4_0 d = max/-8 where max is
 * the signed value of largest magnitude, q = min(15, trunc(x/d + 8.5))). */
void tl_quant_row(tl_type type, const float *src, void *dst, size_t n);

/* ---- matrix products ----
 * Y[i*ldy + j] = sum_{c<k} X[i*ldx + c] * W(j, c)   for i in [0, n), j in [j0, j1)
 * where row j of W starts at (const uint8_t *)W + j * tl_type_row_bytes(type, k).
 * k must be a multiple of tl_type_block_elems(type). n >= 1 (n = 1 is matrix-vector).
 */
void tl_matmul_ref(tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                   const float *X, size_t ldx, size_t n, float *Y, size_t ldy);

/* Floats of scratch the fast path needs for a given k and n (per calling thread). */
size_t tl_matmul_scratch_floats(size_t k, size_t n);
void tl_matmul_fast(tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                    const float *X, size_t ldx, size_t n, float *Y, size_t ldy,
                    float *scratch);

/* ---- small vector kernels used by attention ---- */
float tl_dot_f32_ref(const float *a, const float *b, size_t n);
float tl_dot_f32_fast(const float *a, const float *b, size_t n);
/* y += a * x */
void tl_axpy_f32_ref(float *y, float a, const float *x, size_t n);
void tl_axpy_f32_fast(float *y, float a, const float *x, size_t n);

#endif
