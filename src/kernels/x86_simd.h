/* x86_simd.h - helpers shared by the x86 kernel files (x86_*.c, x86vnni_matmul.c), and
 * the activation layout of the Q8_0/Q4_0 int8 matvec (x86_matvec.c, x86vnni_matmul.c).
 * Internal to src/kernels; include only from files built with -mavx2 -mfma -mf16c.
 */
#ifndef TL_KERNELS_X86_SIMD_H
#define TL_KERNELS_X86_SIMD_H

#include <immintrin.h>
#include <string.h>
#include "kernels/kernels.h"

#define TL_MATVEC_MAX_N 4
/* products of up to this many rows run the matvec kernel in groups (x86_matmul.c) */
#define TL_GROUPED_MAX_N TL_MATMUL_GROUPED_MAX_N
#define ALWAYS_INLINE inline __attribute__((always_inline))
/* Small register-array loops must be fully unrolled at -O2, or the arrays live in memory. */
#define UNROLL _Pragma("GCC unroll 16")

/* Matvec weight streams are software-prefetched tl__prefetch_distance() bytes ahead, and
 * each row range starts by prefetching its first that many bytes. Decode runs two or
 * more threads each streaming its own rows, and the hardware prefetcher alone keeps too
 * few lines in flight. The best distance depends on the core, so x86_cpu.c picks it once
 * per process by CPU vendor, from sweeps of cold multi-threaded matvecs (Q8_0, F16, F32)
 * over distances of 1 KiB to 32 KiB and both cache hints: AMD cores do best with a long
 * distance, Intel cores with a moderate one (a long one loses much of the gain there). */
size_t tl__prefetch_distance(void);

static inline void prefetch_start(const uint8_t *p, size_t bytes, size_t distance) {
    if (bytes > distance) bytes = distance;
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)(p + o), _MM_HINT_T0);
}

static ALWAYS_INLINE uint16_t load_u16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return h;
}

static ALWAYS_INLINE float load_f16_scale(const uint8_t *p) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(load_u16(p))));
}

static ALWAYS_INLINE __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
static ALWAYS_INLINE __m128i loadu128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

static ALWAYS_INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- activations of the Q8_0 / Q4_0 int8 matvec ----
 *
 * Blocks go in pairs (A, B) so that one int->float conversion, one scale product and one
 * FMA serve two blocks. Each activation row is laid out as pair records, made from the
 * bit-exact blocks of tl_quant_act_row_fast (x86_act.c, tl_matmul_act_prepare):
 *   bytes [ACT_Q, +64)  q: 64 int8
 *   bytes [ACT_D, +32)  d: 8 floats
 *   bytes [ACT_C, +32)  c: 8 int32, Q4_0 only
 *  - Q8_0: q = A.q, B.q; the two blocks' int32 sums are folded into lanes A A B B A A B B,
 *    so d = dA dA dB dB dA dA dB dB. Its records are 96 bytes (no c).
 *  - Q4_0: both blocks' 16 nibble bytes fill one register: low nibbles are elements
 *    0..15 of A | of B, high nibbles 16..31 of A | of B; q is stored in that order
 *    (A 0..15, B 0..15, A 16..31, B 16..31), the sums land in lanes A x4 | B x4, so
 *    d = dA x4 | dB x4. The nibbles are used unsigned (0..15): c holds the lane sums of
 *    8*q_x, subtracted to make them nibble-8. Its records are 128 bytes.
 * An odd last block is a pair record with B absent: q = A.q in element order, d = dA x8.
 * Row i of n starts at record i * ceil(k/64).
 *
 * Why Q8_0's records are short: the matvec reads a row's whole activation once per weight
 * row, from L1, while the weight stream passes through L1 beside it. At 128-byte records
 * a Q8_0 activation would be nearly twice the weight bytes of its row, and for wide rows
 * such as ffn_down's it crowds the weight stream out of L1; leaving out the c field,
 * which Q8_0 does not use, keeps it at 96 bytes, and a cold matvec reads its weights
 * measurably faster so.
 */
#define ACT_Q 0
#define ACT_D 64
#define ACT_C 96

static ALWAYS_INLINE size_t act_record_bytes(tl_type type) {
    return type == TL_TYPE_Q8_0 ? 96 : 128;
}

static ALWAYS_INLINE __m256 load_act_d(const uint8_t *record) {
    return _mm256_loadu_ps((const float *)(const void *)(record + ACT_D));
}

/* Y[i*ldy + j] for i < n (<= TL_MATVEC_MAX_N), j in [j0, j1) from the pair-record rows xa.
 * Both give bit-identical results (all integer sums are exact, the float steps are the
 * same); the _vnni one needs AVX-VNNI (x86vnni_matmul.c, compiled only when the compiler
 * supports it: TL_HAVE_AVXVNNI). */
void tl__matvec_q_avx2(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                       const uint8_t *xa, size_t n, float *Y, size_t ldy);
void tl__matvec_q_vnni(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                       const uint8_t *xa, size_t n, float *Y, size_t ldy);

#endif
