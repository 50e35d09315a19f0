/* x86avx512_matvec_ext.c - the K-quants' integer products (Q2_K..Q6_K weights) on
 * AVX-512 F/BW/VL + VNNI, giving x86_matvec_ext.c's AVX2 results bit for bit. Built with
 * the AVX-512 flags only when the compiler supports them (TL_HAVE_AVX512VNNI);
 * x86_matvec_ext.c calls it only for the instruction set TL_ISA_AVX512VNNI, which
 * x86_cpu.c grants after the run-time check.
 *
 * Two kernels: weight rows in pairs (x86avx512_ext_pairs.c: fewer instructions per
 * block and row of X) for most products, and the row-at-a-time kernel here for an odd
 * last row and for Q6_K's matrix-vector products. There the pair saves no instructions
 * (its quants take the most unpacking, and a pair's is no cheaper than two rows'), and a
 * memory stream read one row at a time is followed best by the hardware prefetcher.
 *
 * Each block is unpacked once per weight row into 4 zmm of unsigned quants u, u[i] holding
 * elements 64i..64i+63 in element order, so that each meets one 64-byte load of the
 * activations, and 4 zmm of int16 group scales av, whose 128-bit lane l holds the a_g of
 * the 16-group g = 4i+l that the lane's maddubs pair sums belong to. Then per activation
 * row: maddubs (exact in int16, as in the AVX2 kernel) and vpdpwssd into 16 int32 lanes.
 *
 * Why the bits agree: the AVX2 kernel's lane L (of 8) sums the group products of bytes
 * 4L..4L+3 of each 32-element chunk; here lane L covers those bytes of the even chunks and
 * lane 8+L those of the odd ones, so adding the two 256-bit halves gives the same 8 exact
 * int32 sums (no sum comes near 2^31), and the float steps that follow are the AVX2
 * kernel's own (k_block_step, x86_ext_unpack.h).
 */
#include "kernels/x86_ext_unpack.h"
#include "kernels/x86_matmul.h"

/* A K-quant block unpacked for 512-bit products (see the top comment). */
typedef struct {
    __m512i u[4];
    __m512i av[4];
    __m256i bv;
    __m256 dm2;
} kblock;

/* A vector of 64-bit lanes lo in its low 256 bits and hi in its high 256 bits. */
static ALWAYS_INLINE __m512i halves(uint64_t lo, uint64_t hi) {
    return _mm512_set_epi64((long long)hi, (long long)hi, (long long)hi, (long long)hi,
                            (long long)lo, (long long)lo, (long long)lo, (long long)lo);
}
#define BYTES(b) (0x0101010101010101ull * (uint8_t)(b)) /* byte b in every byte */
#define WORDS(w) (0x0001000100010001ull * (uint16_t)(w)) /* word w in every word */

/* Word w + l in every word of 128-bit lane l (vpermw's indices). */
static ALWAYS_INLINE __m512i lane_words(int w) {
    return _mm512_set_epi64((long long)WORDS(w + 3), (long long)WORDS(w + 3),
                            (long long)WORDS(w + 2), (long long)WORDS(w + 2),
                            (long long)WORDS(w + 1), (long long)WORDS(w + 1),
                            (long long)WORDS(w), (long long)WORDS(w));
}

/* 32 bytes at p in both halves of a zmm. */
static ALWAYS_INLINE __m512i load_twice(const uint8_t *p) {
    return _mm512_broadcast_i64x4(loadu256(p));
}

/* Bytes of v shifted right (16-bit lanes) by sl in the low half and sh in the high half,
 * masked to `bits`: two 32-element chunks of 2- or 4-bit quants from the same bytes. */
static ALWAYS_INLINE __m512i field(__m512i v, int sl, int sh, uint8_t bits) {
    return _mm512_and_si512(_mm512_srlv_epi16(v, halves(WORDS(sl), WORDS(sh))),
                            _mm512_set1_epi8((char)bits));
}

/* u plus `value` in each byte whose bit bl (low half) or bh (high half) is set in hb. */
static ALWAYS_INLINE __m512i add_bit(__m512i u, __m512i hb, int bl, int bh, uint8_t value) {
    const __mmask64 set = _mm512_test_epi8_mask(hb, halves(BYTES(1u << bl), BYTES(1u << bh)));
    return _mm512_mask_add_epi8(u, set, u, _mm512_set1_epi8((char)value));
}

/* Q2_K and Q3_K: chunk 4h+j is bits 2j..2j+1 of q[32h..32h+31]; Q3_K's third bit (4) of
 * chunk c is bit c of hmask. */
static ALWAYS_INLINE void unpack_q23_k(int three, const uint8_t *s, __m512i *u) {
    const uint8_t *q = s + (three ? offsetof(tl_block_q3_k, q) : offsetof(tl_block_q2_k, q));
    const __m512i hm = three ? load_twice(s) : _mm512_setzero_si512();
    UNROLL for (int i = 0; i < 4; i++) {
        const int j = 2 * (i % 2);
        u[i] = field(load_twice(q + 32 * (i / 2)), 2 * j, 2 * j + 2, 3);
        if (three) u[i] = add_bit(u[i], hm, 2 * i, 2 * i + 1, 4);
    }
}

/* Q4_K and Q5_K: chunk 2p is the low nibbles of q[32p..32p+31], chunk 2p+1 their high
 * nibbles; Q5_K's fifth bit (16) of chunk c is bit c of qh. */
static ALWAYS_INLINE void unpack_q45_k(int five, const uint8_t *s, __m512i *u) {
    const uint8_t *q = s + (five ? 48 : 16);
    const __m512i qh = five ? load_twice(s + 16) : _mm512_setzero_si512();
    UNROLL for (int p = 0; p < 4; p++) {
        u[p] = field(load_twice(q + 32 * p), 0, 4, 0x0f);
        if (five) u[p] = add_bit(u[p], qh, 2 * p, 2 * p + 1, 16);
    }
}

/* Q6_K: elements 128h + 32p + e; the low 4 bits in ql[64h + 32(p%2) + e] (low nibble for
 * p < 2, high for p >= 2), the high 2 bits at bits 2p..2p+1 of qh[32h + e]. */
static ALWAYS_INLINE void unpack_q6_k(const uint8_t *s, __m512i *u) {
    const tl_block_q6_k *x = (const void *)s;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    UNROLL for (int h = 0; h < 2; h++) {
        const __m512i l = _mm512_loadu_si512(x->ql + 64 * h); /* chunks p = 0 | 1 */
        const __m512i qh = load_twice(x->qh + 32 * h);
        /* each byte's two high bits of p = 0 | 1 (and 2 | 3) masked, then moved to bits
         * 4-5 within the byte */
        const __m512i h01 = _mm512_sllv_epi16(
            _mm512_and_si512(qh, halves(BYTES(0x03), BYTES(0x0c))), halves(WORDS(4), WORDS(2)));
        const __m512i h23 = _mm512_srlv_epi16(
            _mm512_and_si512(qh, halves(BYTES(0x30), BYTES(0xc0))), halves(WORDS(0), WORDS(2)));
        /* (a & m4) | b: ternary logic 0xec over (a, b, m4) */
        u[2 * h] = _mm512_ternarylogic_epi32(l, h01, m4, 0xec);
        u[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), h23, m4, 0xec);
    }
}

/* Q4_K/Q5_K's scales straight from their bytes: lane l of av[i] is group 4i+l's, the
 * scale 2i + l/2 (zero-extended by pshufb), and bv the mins as kscales_q45_k gives them. */
static ALWAYS_INLINE void scales_q45_k(const uint8_t *s, kblock *kb) {
    const __m512i z = _mm512_broadcast_i32x4(q45_scale_bytes(s));
    UNROLL for (int i = 0; i < 4; i++)
        kb->av[i] = _mm512_shuffle_epi8(z, halves(WORDS(0x8000 | (2 * i)), WORDS(0x8000 | (2 * i + 1))));
    kb->bv = _mm256_shuffle_epi8(_mm512_castsi512_si256(z), q45_min_words());
    kb->dm2 = k_dm2(f16_pair(load_u32(s))); /* d, dmin */
}

static ALWAYS_INLINE void unpack_k(tl_type type, const uint8_t *s, kblock *kb) {
    switch (type) {
    case TL_TYPE_Q2_K: unpack_q23_k(0, s, kb->u); break;
    case TL_TYPE_Q3_K: unpack_q23_k(1, s, kb->u); break;
    case TL_TYPE_Q4_K: unpack_q45_k(0, s, kb->u); break;
    case TL_TYPE_Q5_K: unpack_q45_k(1, s, kb->u); break;
    default: unpack_q6_k(s, kb->u); break;
    }
    if (type == TL_TYPE_Q4_K || type == TL_TYPE_Q5_K) {
        scales_q45_k(s, kb);
        return;
    }
    const kscales ks = kscales_k(type, s);
    const __m512i a = _mm512_castsi256_si512(ks.a);
    UNROLL for (int i = 0; i < 4; i++) /* lane l: word 4i + l */
        kb->av[i] = _mm512_permutexvar_epi16(lane_words(4 * i), a);
    kb->bv = ks.b;
    kb->dm2 = k_dm2(ks.dm);
}

/* acc += d_x * (D * sum a.(u . q) - M * sum b.bsums) over one K block. */
static ALWAYS_INLINE __m256 dot_k(const kblock *kb, const tl_block_k_act *a, __m256 acc) {
    __m512i s = _mm512_madd_epi16(_mm512_maddubs_epi16(kb->u[0], _mm512_loadu_si512(a->q)),
                                  kb->av[0]);
    UNROLL for (int i = 1; i < 4; i++) {
        const __m512i prod = _mm512_maddubs_epi16(kb->u[i], _mm512_loadu_si512(a->q + 64 * i));
        s = _mm512_dpwssd_epi32(s, prod, kb->av[i]);
    }
    const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    return k_block_step(s8, kb->bv, kb->dm2, a, acc);
}

#include "kernels/x86_ext_rows.inl"

void tl__matmul_k_avx512_act(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                             const tl_block_k_act *act, size_t n, float *Y, size_t ldy) {
    if (n == 1 && type == TL_TYPE_Q6_K) { /* see the top comment */
        rows_k_any(type, W, k, j0, j1, act, n, Y, ldy);
        return;
    }
    tl__matmul_k_avx512_pairs(type, W, k, j0, j1, act, n, Y, ldy);
    if ((j1 - j0) % 2) rows_k_any(type, W, k, j1 - 1, j1, act, n, Y, ldy);
}
