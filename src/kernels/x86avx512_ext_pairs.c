/* x86avx512_ext_pairs.c - the K-quants' integer products (Q2_K..Q6_K) on AVX-512
 * F/BW/VL + VNNI with weight rows in pairs, giving the AVX2 kernel's results bit for bit
 * (x86_matvec_ext.c). x86avx512_matvec_ext.c dispatches here (and runs an odd last row,
 * and Q6_K's matrix-vector products, row by row). Built only with TL_HAVE_AVX512VNNI,
 * called only on TL_ISA_AVX512VNNI.
 *
 * Weight rows go two at a time, side by side: each zmm holds the same 32 elements of both
 * rows, row 0 in its low 256 bits and row 1 in its high, so every instruction does in
 * one register what the AVX2 kernel does for each row in a ymm. A block pair unpacks into
 * 8 zmm of unsigned quants u (u[c]: chunk c = elements 32c..32c+31 of both rows), 8 zmm
 * of int16 group scales av (av[c]: the a_g of the 16-groups 2c, 2c+1 of each row, on the
 * maddubs pair sums they scale), both rows' b_g and their float scales D, M in lanes.
 * Then per activation row, whose 32-byte chunks are broadcast to both halves: maddubs
 * (exact in int16, as in the AVX2 kernel) and vpdpwssd into 16 int32 lanes, 8 per row.
 *
 * Why the bits agree: a half's lane L sums the group products of bytes 4L..4L+3 of each
 * chunk, scaled by the chunk's a_g, as the AVX2 kernel's lane L does; the sums are exact
 * int32 (no sum comes near 2^31), so their order does not matter. The float steps that
 * follow are the AVX2 kernel's (k_block_step, x86_ext_unpack.h), lane for lane: the same
 * products D*d_x and M*d_x, the same fused multiply-adds, in block order, then hsum on
 * each half.
 *
 * Why pairs: these products are bound by the number of vector instructions, not by
 * their width, and a pair does one set of float steps per activation row for two weight
 * rows, with no halves to fold; its unpacked blocks (19 zmm) stay in registers while the
 * activation rows pass. Reading two rows at once would look like a jumping stream to the
 * hardware prefetcher, so each pair's first row is touched in order before the pair runs,
 * and the software prefetch walks the pair's bytes as one stream.
 */
#include "kernels/x86_ext_unpack.h"
#include "kernels/x86_matmul.h"

/* The blocks of two weight rows unpacked (see the top comment). */
typedef struct {
    __m512i u[8];
    __m512i av[8];
    __m512i bv;    /* row 0's 16 b_g | row 1's */
    __m512 dv, mv; /* row 0's D (M) in 8 lanes | row 1's */
} kpair;

/* 32 bytes at p0 in the low half, 32 at p1 in the high half. */
static ALWAYS_INLINE __m512i load_pair(const uint8_t *p0, const uint8_t *p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(loadu256(p0)), loadu256(p1), 1);
}

static ALWAYS_INLINE __m512i bytes(uint8_t b) { return _mm512_set1_epi8((char)b); }

/* Bit `from` of every byte of v moved to bit `to` of the byte, the other bits 0 (shifting
 * 16-bit lanes is safe: after the mask each byte holds one bit, and it stays in it). */
static ALWAYS_INLINE __m512i bit_to(__m512i v, int from, int to) {
    const __m512i b = _mm512_and_si512(v, bytes((uint8_t)(1u << from)));
    if (from == to) return b;
    return from < to ? _mm512_slli_epi16(b, (unsigned)(to - from))
                     : _mm512_srli_epi16(b, (unsigned)(from - to));
}

/* (v >> shift) & mask | high, per byte (16-bit shifts: the mask drops what crosses into a
 * byte); high must have no bit inside mask. (a & c) | b is ternary logic 0xec. */
static ALWAYS_INLINE __m512i field_or(__m512i v, int shift, uint8_t mask, __m512i high) {
    const __m512i s = shift ? _mm512_srli_epi16(v, (unsigned)shift) : v;
    return _mm512_ternarylogic_epi32(s, high, bytes(mask), 0xec);
}

/* Q2_K and Q3_K: chunk 4h+j is bits 2j..2j+1 of q[32h..32h+31]; Q3_K's third bit (4) of
 * chunk c is bit c of hmask. */
static ALWAYS_INLINE void unpack_q23_k(int three, const uint8_t *s0, const uint8_t *s1,
                                       __m512i *u) {
    const size_t q = three ? offsetof(tl_block_q3_k, q) : offsetof(tl_block_q2_k, q);
    const __m512i hm = three ? load_pair(s0, s1) : _mm512_setzero_si512();
    UNROLL for (int h = 0; h < 2; h++) {
        const __m512i x = load_pair(s0 + q + 32 * h, s1 + q + 32 * h);
        UNROLL for (int j = 0; j < 4; j++) {
            const int c = 4 * h + j;
            u[c] = field_or(x, 2 * j, 3, three ? bit_to(hm, c, 2) : _mm512_setzero_si512());
        }
    }
}

/* Q4_K and Q5_K: chunk 2p is the low nibbles of q[32p..32p+31], chunk 2p+1 their high
 * nibbles; Q5_K's fifth bit (16) of chunk c is bit c of qh. */
static ALWAYS_INLINE void unpack_q45_k(int five, const uint8_t *s0, const uint8_t *s1,
                                       __m512i *u) {
    const size_t q = five ? offsetof(tl_block_q5_k, q) : offsetof(tl_block_q4_k, q);
    const __m512i qh = five ? load_pair(s0 + offsetof(tl_block_q5_k, qh), s1 + offsetof(tl_block_q5_k, qh))
                            : _mm512_setzero_si512();
    UNROLL for (int p = 0; p < 4; p++) {
        const __m512i x = load_pair(s0 + q + 32 * p, s1 + q + 32 * p);
        u[2 * p] = field_or(x, 0, 0x0f, five ? bit_to(qh, 2 * p, 4) : _mm512_setzero_si512());
        u[2 * p + 1] = field_or(x, 4, 0x0f, five ? bit_to(qh, 2 * p + 1, 4) : _mm512_setzero_si512());
    }
}

/* Q6_K: chunk 4h+p's low 4 bits in ql[64h + 32(p%2) ..] (low nibbles for p < 2, high for
 * p >= 2), its high 2 bits at bits 2p..2p+1 of qh[32h ..]. */
static ALWAYS_INLINE void unpack_q6_k(const uint8_t *s0, const uint8_t *s1, __m512i *u) {
    const size_t ql = offsetof(tl_block_q6_k, ql), qhs = offsetof(tl_block_q6_k, qh);
    UNROLL for (int h = 0; h < 2; h++) {
        const __m512i l[2] = {load_pair(s0 + ql + 64 * h, s1 + ql + 64 * h),
                              load_pair(s0 + ql + 64 * h + 32, s1 + ql + 64 * h + 32)};
        const __m512i qh = load_pair(s0 + qhs + 32 * h, s1 + qhs + 32 * h);
        UNROLL for (int p = 0; p < 4; p++) { /* bits 2p..2p+1 to bits 4..5 */
            const int move = 4 - 2 * p;
            const __m512i m = move > 0 ? _mm512_slli_epi16(qh, (unsigned)move)
                            : move < 0 ? _mm512_srli_epi16(qh, (unsigned)-move) : qh;
            u[4 * h + p] = field_or(l[p % 2], p < 2 ? 0 : 4, 0x0f, _mm512_and_si512(m, bytes(0x30)));
        }
    }
}

/* Word w of row 0's 16 in lanes 0-7, w + 1 in 8-15, and row 1's (words 16 on) the same. */
static ALWAYS_INLINE __m512i pair_words(int w) {
    const uint64_t a = 0x0001000100010001ull;
    return _mm512_set_epi64((long long)(a * (uint64_t)(17 + w)), (long long)(a * (uint64_t)(17 + w)),
                            (long long)(a * (uint64_t)(16 + w)), (long long)(a * (uint64_t)(16 + w)),
                            (long long)(a * (uint64_t)(1 + w)), (long long)(a * (uint64_t)(1 + w)),
                            (long long)(a * (uint64_t)w), (long long)(a * (uint64_t)w));
}

static ALWAYS_INLINE __m512i join(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* The float scales D0 M0 D1 M1 (lanes 0-3 of dm4) spread for the float steps. */
static ALWAYS_INLINE void pair_dm(__m128 dm4, kpair *kp) {
    const __m512 dm = _mm512_castps128_ps512(dm4);
    kp->dv = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2), dm);
    kp->mv = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3), dm);
}

/* Both rows' 16 a_g as words (row 0's in the low half, row 1's in the high) spread over
 * av, as maddubs' pair sums meet them. */
static ALWAYS_INLINE void pair_av(__m512i a, kpair *kp) {
    UNROLL for (int c = 0; c < 8; c++) kp->av[c] = _mm512_permutexvar_epi16(pair_words(2 * c), a);
}

/* Q4_K/Q5_K: kscales_q45_k's decoding of the 12 packed bytes, for both rows at once (one
 * in each 128-bit lane): the 8 scales in bytes 0-7 of the lane, the 8 mins in 8-15. Each
 * 32-group's scale and min serve both of its 16-groups. */
static ALWAYS_INLINE void scales_pair_q45(const uint8_t *s0, const uint8_t *s1, kpair *kp) {
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(s0 + 4)), loadu128(s1 + 4), 1);
    const __m256i w = _mm256_srlv_epi32(_mm256_shuffle_epi32(v, 0x98), _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4));
    const __m256i top = _mm256_srli_epi32(_mm256_shuffle_epi32(v, 0x50), 2);
    const __m256i low = _mm256_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f,
                                          0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f);
    const __m256i high = _mm256_setr_epi32(0, 0x30303030, 0, 0x30303030, 0, 0x30303030, 0, 0x30303030);
    const __m256i sm = _mm256_or_si256(_mm256_and_si256(w, low), _mm256_and_si256(top, high));
    /* row 0's bytes in 128-bit lanes 0 and 1, row 1's in 2 and 3 */
    const __m512i z = _mm512_shuffle_i64x2(_mm512_castsi256_si512(sm), _mm512_castsi256_si512(sm), 0x50);
    UNROLL for (int c = 0; c < 8; c++) /* scale c, zero-extended, in every word */
        kp->av[c] = _mm512_shuffle_epi8(z, _mm512_set1_epi16((short)(0x8000 | c)));
    /* word g of a row: min g/2 (byte 8 + g/2); lanes 0, 2 hold g < 8, lanes 1, 3 the rest */
    const __m128i lo = _mm_setr_epi8(8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128, 11, -128, 11, -128);
    const __m128i hi = _mm_add_epi8(lo, _mm_setr_epi8(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0));
    const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    kp->bv = _mm512_shuffle_epi8(z, _mm512_broadcast_i64x4(both));
    pair_dm(_mm_cvtph_ps(_mm_setr_epi32((int)load_u32(s0), (int)load_u32(s1), 0, 0)), kp); /* d, dmin */
}

/* Q6_K: the 16 int8 scales of each row; b = 32 * a, M = D = d. */
static ALWAYS_INLINE void scales_pair_q6(const uint8_t *s0, const uint8_t *s1, kpair *kp) {
    const size_t sc = offsetof(tl_block_q6_k, scales), d = offsetof(tl_block_q6_k, d);
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(s0 + sc)), loadu128(s1 + sc), 1);
    const __m512i a = _mm512_cvtepi8_epi16(v);
    pair_av(a, kp);
    kp->bv = _mm512_slli_epi16(a, 5);
    const uint32_t d0 = load_u16(s0 + d) * 0x10001u, d1 = load_u16(s1 + d) * 0x10001u; /* d, d */
    pair_dm(_mm_cvtph_ps(_mm_setr_epi32((int)d0, (int)d1, 0, 0)), kp);
}

/* Blocks s0 and s1 (of two weight rows) unpacked into *kp. */
static ALWAYS_INLINE void unpack_pair(tl_type type, const uint8_t *s0, const uint8_t *s1,
                                      kpair *kp) {
    switch (type) {
    case TL_TYPE_Q2_K: unpack_q23_k(0, s0, s1, kp->u); break;
    case TL_TYPE_Q3_K: unpack_q23_k(1, s0, s1, kp->u); break;
    case TL_TYPE_Q4_K: unpack_q45_k(0, s0, s1, kp->u); break;
    case TL_TYPE_Q5_K: unpack_q45_k(1, s0, s1, kp->u); break;
    default: unpack_q6_k(s0, s1, kp->u); break;
    }
    if (type == TL_TYPE_Q4_K || type == TL_TYPE_Q5_K) {
        scales_pair_q45(s0, s1, kp);
    } else if (type == TL_TYPE_Q6_K) {
        scales_pair_q6(s0, s1, kp);
    } else { /* Q2_K, Q3_K: each row's scales as the AVX2 kernel decodes them */
        const kscales k0 = kscales_k(type, s0), k1 = kscales_k(type, s1);
        pair_av(join(k0.a, k1.a), kp);
        kp->bv = join(k0.b, k1.b);
        pair_dm(_mm_movelh_ps(k0.dm, k1.dm), kp);
    }
}

/* acc (row 0's 8 lanes | row 1's) after both blocks' products with activation block a
 * (k_block_step's float steps, lane for lane). Two chains of integer sums, even and odd
 * chunks, so that the eight products do not wait on each other. */
static ALWAYS_INLINE __m512 dot_pair(const kpair *kp, const tl_block_k_act *a, __m512 acc) {
    __m512i s[2];
    UNROLL for (int c = 0; c < 8; c++) {
        const __m512i q = _mm512_broadcast_i64x4(loadu256(a->q + 32 * c));
        const __m512i prod = _mm512_maddubs_epi16(kp->u[c], q);
        s[c % 2] = c < 2 ? _mm512_madd_epi16(prod, kp->av[c])
                         : _mm512_dpwssd_epi32(s[c % 2], prod, kp->av[c]);
    }
    const __m512i A = _mm512_add_epi32(s[0], s[1]);
    const __m512i B = _mm512_madd_epi16(kp->bv, _mm512_broadcast_i64x4(loadu256(a->bsums)));
    const __m512 dx = _mm512_set1_ps(a->d);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(A), _mm512_mul_ps(kp->dv, dx), acc);
    return _mm512_fnmadd_ps(_mm512_cvtepi32_ps(B), _mm512_mul_ps(kp->mv, dx), acc);
}

static ALWAYS_INLINE __m256 high_half(__m512 v) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

/* Weight rows w and w + row_bytes against n prepared rows into y[i*ldy], y[i*ldy + 1]. */
static ALWAYS_INLINE void pair_rows(tl_type type, const uint8_t *w, size_t row_bytes, size_t nb,
                                    const tl_block_k_act *act, size_t n, float *y, size_t ldy,
                                    size_t distance) {
    const size_t bb = k_block_bytes(type);
    if (n == 1) { /* decode: the sum stays in a register, not in acc[] on the stack */
        __m512 sum = _mm512_setzero_ps();
        for (size_t b = 0; b < nb; b++) {
            UNROLL for (size_t o = 0; o < 2 * bb; o += 64)
                _mm_prefetch((const char *)(w + 2 * b * bb + distance + o), _MM_HINT_T0);
            kpair kp;
            unpack_pair(type, w + b * bb, w + row_bytes + b * bb, &kp);
            sum = dot_pair(&kp, act + b, sum);
        }
        y[0] = hsum(_mm512_castps512_ps256(sum));
        y[1] = hsum(high_half(sum));
        return;
    }
    __m512 acc[TL_EXT_ROWS_PER_PASS];
    for (size_t i = 0; i < n; i++) acc[i] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        UNROLL for (size_t o = 0; o < 2 * bb; o += 64) /* the pair's bytes as one stream */
            _mm_prefetch((const char *)(w + 2 * b * bb + distance + o), _MM_HINT_T0);
        kpair kp;
        unpack_pair(type, w + b * bb, w + row_bytes + b * bb, &kp);
        for (size_t i = 0; i < n; i++) acc[i] = dot_pair(&kp, act + i * nb + b, acc[i]);
    }
    for (size_t i = 0; i < n; i++) {
        y[i * ldy] = hsum(_mm512_castps512_ps256(acc[i]));
        y[i * ldy + 1] = hsum(high_half(acc[i]));
    }
}

/* Inlined per type so that the unpacking's switches fold away. */
static ALWAYS_INLINE void pairs_k(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                                  const tl_block_k_act *act, size_t n, float *Y, size_t ldy) {
    const size_t nb = k / TL_QK_K, rb = nb * k_block_bytes(type), distance = tl__prefetch_distance();
    for (size_t j = j0; j + 1 < j1; j += 2) {
        const uint8_t *w = W + j * rb;
        for (size_t o = 0; o < rb; o += 64) { /* row j's lines read in order before row j+1's */
            const __m128i t = _mm_loadu_si128((const __m128i *)(const void *)(w + o));
            __asm__ volatile("" : : "x"(t));
        }
        pair_rows(type, w, rb, nb, act, n, Y + j, ldy, distance);
    }
}

#define PAIRS_K_CASE(T)                                                                      \
    case T: pairs_k(T, W, k, j0, j1, act, n, Y, ldy); return;

void tl__matmul_k_avx512_pairs(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                               const tl_block_k_act *act, size_t n, float *Y, size_t ldy) {
    switch (type) {
    PAIRS_K_CASE(TL_TYPE_Q2_K)
    PAIRS_K_CASE(TL_TYPE_Q3_K)
    PAIRS_K_CASE(TL_TYPE_Q4_K)
    PAIRS_K_CASE(TL_TYPE_Q5_K)
    default: PAIRS_K_CASE(TL_TYPE_Q6_K)
    }
}
#undef PAIRS_K_CASE
