/* x86vnni_gemm.c - the Q8_0 / Q4_0 GEMM on AVX-VNNI (vpdpbusd on 256-bit registers), for
 * CPUs that have AVX-VNNI but not AVX-512 VNNI. Built with -mavxvnni only when the
 * compiler supports it (TL_HAVE_AVXVNNI); x86_matmul.c calls it after the run-time check.
 * The body is x86_gemm_q256.inl's: one vpdpbusd per 32 multiply-adds, the Q8_0 weights
 * offset by 128 (the activation record's corr cancels it).
 */
#define TL_GEMM_Q256_NAME tl__gemm_q_vnni_act
#define MR 3
#define U8_DOT(s, u, x) _mm256_dpbusd_avx_epi32((s), (u), (x))
#define Q8_WEIGHTS(v) (v)
#define Q8_DOT(s, w, x) _mm256_dpbusd_avx_epi32((s), (w), (x))
#define Q8_STARTS_AT_CORR 1
#include "kernels/x86_gemm_q256.inl"
