/* x86vnni_matmul.c - the Q8_0 / Q4_0 int8 matvec with AVX-VNNI (vpdpbusd), built with
 * -mavxvnni only when the compiler supports it (TL_HAVE_AVXVNNI). x86_matmul.c calls it
 * only after a run-time cpuid check (x86_cpu.c); the AVX2 build of the same code
 * (x86_matvec.c) is the fallback.
 * Results are bit-identical to the AVX2 path (see x86_matvec_q.inl).
 */
#include "kernels/x86_simd.h"

#define TL_MATVEC_Q_NAME tl__matvec_q_vnni
#include "kernels/x86_matvec_q.inl"
