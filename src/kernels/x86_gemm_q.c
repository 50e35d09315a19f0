/* x86_gemm_q.c - the Q8_0 / Q4_0 GEMM on AVX2 for CPUs without VNNI: x86_gemm_q256.inl's
 * body with vpmaddubsw (u8 x s8 pairs to saturating int16) and vpmaddwd (pairs to int32).
 * Q4_0 nibbles (0..15) times activations (|q| <= 127) cannot saturate a pair; Q8_0 weights
 * are taken signed (w = stored ^ 0x80) and multiplied as |w| x sign(q, w), at most
 * 128 * 127 * 2 = 32512 a pair, so every sum is exact and equals the VNNI kernels'.
 */
#define TL_GEMM_Q256_NAME tl__gemm_q_avx2_act
#define MR 2
#define U8_DOT(s, u, x) _mm256_add_epi32((s), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (x)), _mm256_set1_epi16(1)))
#define Q8_WEIGHTS(v) _mm256_xor_si256((v), _mm256_set1_epi8((char)0x80))
#define Q8_DOT(s, w, x) U8_DOT((s), _mm256_abs_epi8(w), _mm256_sign_epi8((x), (w)))
#define Q8_STARTS_AT_CORR 0
#include "kernels/x86_gemm_q256.inl"
