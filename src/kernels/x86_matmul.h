/* x86_matmul.h - the entry points between the x86 matmul files: the kernels x86_matmul.c
 * dispatches to (x86_matvec.c, x86_gemm.c) and the run-time CPU checks (x86_cpu.c).
 * Internal to src/kernels; the arguments are those of tl_matmul_fast (kernels.h).
 */
#ifndef TL_KERNELS_X86_MATMUL_H
#define TL_KERNELS_X86_MATMUL_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/kernels.h"

/* F32/F16/BF16 weights, n <= TL_MATVEC_MAX_N rows (x86_simd.h); other types: nothing. */
void tl__matvec_float(tl_type type, const uint8_t *w, size_t k, size_t j0, size_t j1,
                      const float *X, size_t ldx, size_t n, float *Y, size_t ldy);
/* Any type and n; scratch of at least tl__gemm_scratch_floats(n) floats. */
void tl__gemm(tl_type type, const uint8_t *w, size_t k, size_t j0, size_t j1, const float *X,
              size_t ldx, size_t n, float *Y, size_t ldy, float *scratch);
size_t tl__gemm_scratch_floats(size_t n);

/* 1 when the AVX-VNNI kernels are built in (TL_HAVE_AVXVNNI) and this CPU has them. */
int tl__cpu_has_avxvnni(void);

#endif
