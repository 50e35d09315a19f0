/* x86_matvec_ext.c - AVX2 integer products for the types beyond Q8_0/Q4_0: the 32-element
 * affine types Q4_1/Q5_0/Q5_1 and the K-quants Q2_K..Q6_K, for any number of activation
 * rows n (kernels.h's contract: x rounded to int8 blocks, integer dot products per group,
 * one float step per block).
 *
 * Shape: for each weight row, each block is unpacked once into unsigned quants (one byte
 * per element, in element order) and its integer group scales, then dotted with the same
 * block of every activation row (maddubs: unsigned quant x signed activation, pair sums
 * exact in int16 since quants are < 64 and |q_x| <= 127). The products of one weight row
 * with all n rows run back to back, so the row is read from memory once and the rounded
 * activations (about 1.14 bytes per element) stay in cache. The arithmetic does not
 * depend on n: results are the same whether a row of X is multiplied alone or in a batch.
 *
 * K-quants as one form: every block is 16 groups of 16 quants u (unsigned), a block value
 * being D*a_g*u - M*b_g, so with the activation block (d_x, q, bsums) the block adds
 *   d_x * (D * sum_g a_g * (u . q)_g  -  M * sum_g b_g * bsums_g).
 *   Q2_K: a = scale, b = min, (D, M) = (d, dmin).  Q4_K/Q5_K: the 32-groups' scale and min
 *   on both of their 16-halves.  Q3_K: u = q3 + 4, a = scale, b = 4*scale, M = D = d.
 *   Q6_K: u = q6 + 32, a = scale, b = 32*scale, M = D = d.
 * The 32-element types: per block d_x * (d * (u . q) + m' * sum q) with m' = m (Q4_1,
 * Q5_1) or -16*d (Q5_0).
 *
 * The K-quants have second kernels on AVX-512 (x86avx512_matvec_ext.c for one row of X,
 * x86avx512_ext_pairs.c, weight rows in pairs, for more), taken when the instruction set
 * passed in is TL_ISA_AVX512VNNI: the same integer lanes and the same float steps per
 * block (k_block_step), so the same bits. What they decode alike from a block, its
 * scales, is in x86_ext_unpack.h.
 */
#include <string.h>
#include "kernels/quant_ext.h"
#include "kernels/x86_ext_unpack.h"
#include "kernels/x86_matmul.h"
#include "kernels/x86_simd.h"

/* One 32-element activation block with its quant sum. */
typedef struct { float d; int32_t sum; int8_t q[TL_QK]; } act32; /* 40 bytes */

static size_t act_rec_bytes(tl_type type) {
    return tl_type_act_block(type) == TL_QK_K ? sizeof(tl_block_k_act) : sizeof(act32);
}

size_t tl__ext_act_floats(tl_type type, size_t k, size_t n) {
    const size_t ab = tl_type_act_block(type);
    return ab ? (n * (k / ab) * act_rec_bytes(type) + sizeof(float) - 1) / sizeof(float) : 0;
}

/* ---- activation rounding ---- */

/* The index of the first of x[0..255] whose magnitude is amax (a NaN's never is), or
 * 255 when none is. */
static int first_of_magnitude(const float *x, float amax) {
    const __m256 sign = _mm256_set1_ps(-0.0f), m = _mm256_set1_ps(amax);
    for (int e = 0; e < TL_QK_K; e += 8) {
        const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + e));
        const int hit = _mm256_movemask_ps(_mm256_cmp_ps(a, m, _CMP_EQ_OQ));
        if (hit) return e + __builtin_ctz((unsigned)hit);
    }
    return TL_QK_K - 1;
}

/* One row's 256-blocks, bit-exact with tl_quant_act_row_k: the f32 product iscale*x
 * converted with the default rounding mode (to nearest, halves to even) is rint's. As
 * there, a NaN never becomes the block's largest magnitude (max_ps returns its second
 * operand when one is NaN: the running maximum), and a product that is NaN gives q = 0. */
static void round_row_k(const float *x, size_t k, tl_block_k_act *a) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (size_t b = 0; b < k / TL_QK_K; b++, x += TL_QK_K, a++) {
        __m256 m = _mm256_setzero_ps();
        for (int e = 0; e < TL_QK_K; e += 8)
            m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + e)), m);
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h);
        if (amax == 0.0f) {
            memset(a, 0, sizeof *a);
            continue;
        }
        const int first = first_of_magnitude(x, amax); /* its sign gives the scale's */
        const float iscale = -127.0f / x[first];
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256i top = _mm256_set1_epi32(127), perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (int e = 0; e < TL_QK_K; e += 32) {
            __m256i q[4];
            for (int v = 0; v < 4; v++) {
                const __m256 y = _mm256_mul_ps(vs, _mm256_loadu_ps(x + e + 8 * v));
                const __m256i ordered = _mm256_castps_si256(_mm256_cmp_ps(y, y, _CMP_ORD_Q));
                q[v] = _mm256_min_epi32(_mm256_and_si256(_mm256_cvtps_epi32(y), ordered), top);
            }
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
            _mm256_storeu_si256((__m256i *)(void *)(a->q + e), _mm256_permutevar8x32_epi32(p, perm));
        }
        const __m256i ones8 = _mm256_set1_epi8(1);
        for (int g = 0; g < TL_QK_K / 16; g += 2) { /* pair sums, then the 16-sums of two groups */
            __m256i s = _mm256_maddubs_epi16(ones8, loadu256(a->q + 16 * g));
            __m128i t = _mm_hadd_epi16(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            t = _mm_hadd_epi16(t, t);
            t = _mm_hadd_epi16(t, t);
            a->bsums[g] = (int16_t)_mm_extract_epi16(t, 0);
            a->bsums[g + 1] = (int16_t)_mm_extract_epi16(t, 1);
        }
        a->d = 1.0f / iscale;
    }
}

/* Rows [i0, i1) of X rounded into act (row i at record i * k/block). */
void tl__ext_act_prepare(tl_type type, size_t k, const float *X, size_t ldx, size_t i0,
                         size_t i1, float *act) {
    if (tl_type_act_block(type) == TL_QK_K) {
        tl_block_k_act *a = (tl_block_k_act *)(void *)act;
        for (size_t i = i0; i < i1; i++) round_row_k(X + i * ldx, k, a + i * (k / TL_QK_K));
        return;
    }
    act32 *a = (act32 *)(void *)act;
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (size_t i = i0; i < i1; i++)
        for (size_t b = 0; b < k / TL_QK; b++) {
            tl_block_q8_act blk;
            tl_quant_act_row_fast(X + i * ldx + b * TL_QK, &blk, TL_QK);
            act32 *r = &a[i * (k / TL_QK) + b];
            r->d = blk.d;
            memcpy(r->q, blk.q, TL_QK);
            __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, loadu256(blk.q)), ones16);
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
            r->sum = _mm_cvtsi128_si32(h);
        }
}

/* ---- unpacking one weight block ---- */

/* A K-quant block unpacked: u[p] holds elements 32p..32p+31; av[p] the int16 group scales
 * a of groups 2p (lanes 0-7) and 2p+1 (lanes 8-15), matching maddubs' pair sums; bv the
 * 16 b's; dm2 D and M (k_dm2). */
typedef struct {
    __m256i u[8];
    __m256i av[8];
    __m256i bv;
    __m256 dm2;
} kblock;

/* 0x10 in byte e where bit e of the 32-bit word h is set. */
static ALWAYS_INLINE __m256i bits_to_bytes(uint32_t h, uint8_t value) {
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8((char)value));
}

/* Bit `from` of every byte of v, moved to bit `to` of the byte (other bits 0). Shifting
 * 16-bit lanes is safe: after the mask each byte holds one bit, and it moves within it. */
static ALWAYS_INLINE __m256i bit_to(__m256i v, int from, int to) {
    const __m256i b = _mm256_and_si256(v, _mm256_set1_epi8((char)(1 << from)));
    return from < to ? _mm256_slli_epi16(b, to - from) : _mm256_srli_epi16(b, from - to);
}

/* av from the 16 int16 group scales s16 (lanes: groups 0-7 | 8-15): av[p] = group 2p's
 * scale in the low 128 bits, 2p+1's in the high, each in all 8 int16 lanes. */
static ALWAYS_INLINE void scales_from16(kblock *kb, __m256i s16) {
    const __m256i lo = _mm256_permute4x64_epi64(s16, 0x44), hi = _mm256_permute4x64_epi64(s16, 0xee);
    UNROLL for (int p = 0; p < 8; p++) {
        const int g0 = (2 * p) % 8, g1 = (2 * p + 1) % 8; /* word index within the half */
        const __m256i mask = _mm256_setr_epi8(
            (char)(2 * g0), (char)(2 * g0 + 1), (char)(2 * g0), (char)(2 * g0 + 1), (char)(2 * g0),
            (char)(2 * g0 + 1), (char)(2 * g0), (char)(2 * g0 + 1), (char)(2 * g0), (char)(2 * g0 + 1),
            (char)(2 * g0), (char)(2 * g0 + 1), (char)(2 * g0), (char)(2 * g0 + 1), (char)(2 * g0),
            (char)(2 * g0 + 1), (char)(2 * g1), (char)(2 * g1 + 1), (char)(2 * g1), (char)(2 * g1 + 1),
            (char)(2 * g1), (char)(2 * g1 + 1), (char)(2 * g1), (char)(2 * g1 + 1), (char)(2 * g1),
            (char)(2 * g1 + 1), (char)(2 * g1), (char)(2 * g1 + 1), (char)(2 * g1), (char)(2 * g1 + 1),
            (char)(2 * g1), (char)(2 * g1 + 1));
        kb->av[p] = _mm256_shuffle_epi8(p < 4 ? lo : hi, mask);
    }
}

static ALWAYS_INLINE void unpack_q2_k(const uint8_t *s, __m256i *u) {
    const tl_block_q2_k *x = (const void *)s;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i q = loadu256(x->q + 32 * h); /* bytes 0-15: even groups, 16-31: odd */
        UNROLL for (int j = 0; j < 4; j++) /* groups 8h+2j, 8h+2j+1 = elements 128h + 32j .. +31 */
            u[4 * h + j] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
    }
}

static ALWAYS_INLINE void unpack_q3_k(const uint8_t *s, __m256i *u) {
    const tl_block_q3_k *x = (const void *)s;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i hm = loadu256(x->hmask); /* bytes 0-15: even groups, 16-31: odd */
    for (int h = 0; h < 2; h++) {
        const __m256i q = loadu256(x->q + 32 * h);
        UNROLL for (int j = 0; j < 4; j++) {
            const __m256i hb = bit_to(hm, 4 * h + j, 2); /* the third bit: 4 */
            u[4 * h + j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3), hb);
        }
    }
}

static ALWAYS_INLINE void unpack_q45_k(int five, const uint8_t *s, __m256i *u) {
    const uint8_t *qs = s + (five ? 48 : 16);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i qh = five ? loadu256(s + 16) : _mm256_setzero_si256();
    UNROLL for (int p = 0; p < 4; p++) {
        const __m256i q = loadu256(qs + 32 * p);
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (five) { /* bit g of each qh byte moved to bit 4 (alone in its byte: no carry) */
            lo = _mm256_or_si256(lo, bit_to(qh, 2 * p, 4));
            hi = _mm256_or_si256(hi, bit_to(qh, 2 * p + 1, 4));
        }
        u[2 * p] = lo;
        u[2 * p + 1] = hi;
    }
}

static ALWAYS_INLINE void unpack_q6_k(const uint8_t *s, __m256i *u) {
    const tl_block_q6_k *x = (const void *)s;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = loadu256(x->ql + 64 * h), l1 = loadu256(x->ql + 64 * h + 32);
        const __m256i qh = loadu256(x->qh + 32 * h);
        const __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                               _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
        UNROLL for (int p = 0; p < 4; p++) {
            __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), m2);
            u[4 * h + p] = _mm256_or_si256(lo[p], _mm256_slli_epi16(hb, 4));
        }
    }
}

static ALWAYS_INLINE void unpack_k(tl_type type, const uint8_t *s, kblock *kb) {
    switch (type) {
    case TL_TYPE_Q2_K: unpack_q2_k(s, kb->u); break;
    case TL_TYPE_Q3_K: unpack_q3_k(s, kb->u); break;
    case TL_TYPE_Q4_K: unpack_q45_k(0, s, kb->u); break;
    case TL_TYPE_Q5_K: unpack_q45_k(1, s, kb->u); break;
    default: unpack_q6_k(s, kb->u); break;
    }
    const kscales ks = kscales_k(type, s);
    scales_from16(kb, ks.a);
    kb->bv = ks.b;
    kb->dm2 = k_dm2(ks.dm);
}

/* acc += d_x * (D * sum a.(u . q) - M * sum b.bsums) over one K block. */
static ALWAYS_INLINE __m256 dot_k(const kblock *kb, const tl_block_k_act *a, __m256 acc) {
    __m256i s = _mm256_setzero_si256();
    UNROLL for (int p = 0; p < 8; p++) {
        __m256i prod = _mm256_maddubs_epi16(kb->u[p], loadu256(a->q + 32 * p));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(prod, kb->av[p]));
    }
    return k_block_step(s, kb->bv, kb->dm2, a, acc);
}

#include "kernels/x86_ext_rows.inl"

/* ---- the 32-element types ---- */

static ALWAYS_INLINE __m256i unpack_q32(tl_type type, const uint8_t *s, float *d, float *mterm) {
    const int has_min = type != TL_TYPE_Q5_0;
    *d = load_f16_scale(s);
    *mterm = has_min ? load_f16_scale(s + 2) : -16.0f * *d;
    const uint8_t *p = s + (has_min ? 4 : 2);
    uint32_t qh = 0;
    if (type != TL_TYPE_Q4_1) {
        memcpy(&qh, p, 4);
        p += 4;
    }
    const __m128i q = loadu128(p);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i u = _mm256_and_si256(_mm256_setr_m128i(q, _mm_srli_epi16(q, 4)), m4);
    if (type != TL_TYPE_Q4_1) u = _mm256_or_si256(u, bits_to_bytes(qh, 0x10));
    return u;
}

/* One weight row against n activation rows. Each row sums its blocks in four chains
 * (block b into chain b % 4, so that consecutive additions do not wait on each other),
 * added up in a fixed order at the end: the same arithmetic for every n and pass. */
static ALWAYS_INLINE void row_q32(tl_type type, const uint8_t *w, size_t nb, const act32 *act,
                                  size_t n, __m256 *acc, float *macc, size_t distance) {
    const size_t bb = tl_type_block_bytes(type);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 a4[4 * TL_EXT_ROWS_PER_PASS];
    float m4[4 * TL_EXT_ROWS_PER_PASS];
    for (size_t i = 0; i < 4 * n; i++) {
        a4[i] = _mm256_setzero_ps();
        m4[i] = 0.0f;
    }
    for (size_t b = 0; b < nb; b++) {
        float d, mterm;
        _mm_prefetch((const char *)(w + b * bb + distance), _MM_HINT_T0);
        const __m256i u = unpack_q32(type, w + b * bb, &d, &mterm);
        for (size_t i = 0; i < n; i++) {
            const act32 *a = act + i * nb + b;
            __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(u, loadu256(a->q)), ones);
            __m256 *c = &a4[4 * i + b % 4];
            *c = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(d * a->d), *c);
            m4[4 * i + b % 4] += mterm * a->d * (float)a->sum;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const __m256 *c = &a4[4 * i];
        acc[i] = _mm256_add_ps(_mm256_add_ps(c[0], c[1]), _mm256_add_ps(c[2], c[3]));
        macc[i] = (m4[4 * i] + m4[4 * i + 1]) + (m4[4 * i + 2] + m4[4 * i + 3]);
    }
}

/* Specialized for one row of X (decode), where the chains stay in registers. */
#define ROW_Q32_CASE(T)                                                                      \
    case T:                                                                                  \
        if (n == 1) row_q32(T, w, nb, act, 1, acc, macc, distance);                          \
        else row_q32(T, w, nb, act, n, acc, macc, distance);                                 \
        return;

static void row_q32_any(tl_type type, const uint8_t *w, size_t nb, const act32 *act, size_t n,
                        __m256 *acc, float *macc, size_t distance) {
    switch (type) {
    ROW_Q32_CASE(TL_TYPE_Q4_1)
    ROW_Q32_CASE(TL_TYPE_Q5_0)
    default: ROW_Q32_CASE(TL_TYPE_Q5_1)
    }
}
#undef ROW_Q32_CASE

/* ---- the product ---- */

void tl__matmul_ext_act(tl__isa isa, tl_type type, const uint8_t *W, size_t k, size_t j0,
                        size_t j1, const float *act_f, size_t n, float *Y, size_t ldy) {
    const size_t ab = tl_type_act_block(type), nb = k / ab;
    const size_t row_bytes = tl_type_row_bytes(type, k), distance = tl__prefetch_distance();
    __m256 acc[TL_EXT_ROWS_PER_PASS];
    float macc[TL_EXT_ROWS_PER_PASS];
    const uint8_t *act = (const uint8_t *)act_f;
    (void)isa; /* without the AVX-512 kernels every set runs the AVX2 one */
    if (j0 >= j1 || n == 0) return;
    prefetch_start(W + j0 * row_bytes, (j1 - j0) * row_bytes, distance);
    for (size_t i0 = 0; i0 < n; i0 += TL_EXT_ROWS_PER_PASS) {
        const size_t m = n - i0 < TL_EXT_ROWS_PER_PASS ? n - i0 : TL_EXT_ROWS_PER_PASS;
        const uint8_t *ai = act + i0 * nb * act_rec_bytes(type);
        if (ab == TL_QK_K) {
            const tl_block_k_act *ak = (const tl_block_k_act *)(const void *)ai;
#ifdef TL_HAVE_AVX512VNNI
            if (isa == TL_ISA_AVX512VNNI) {
                tl__matmul_k_avx512_act(type, W, k, j0, j1, ak, m, Y + i0 * ldy, ldy);
                continue;
            }
#endif
            rows_k_any(type, W, k, j0, j1, ak, m, Y + i0 * ldy, ldy);
            continue;
        }
        for (size_t j = j0; j < j1; j++) {
            row_q32_any(type, W + j * row_bytes, nb, (const act32 *)(const void *)ai, m, acc,
                        macc, distance);
            for (size_t i = 0; i < m; i++) Y[(i0 + i) * ldy + j] = hsum(acc[i]) + macc[i];
        }
    }
}

void tl__matmul_ext(tl__isa isa, tl_type type, const uint8_t *W, size_t k, size_t j0,
                    size_t j1, const float *X, size_t ldx, size_t n, float *Y, size_t ldy,
                    float *scratch) {
    tl__ext_act_prepare(type, k, X, ldx, 0, n, scratch);
    tl__matmul_ext_act(isa, type, W, k, j0, j1, scratch, n, Y, ldy);
}
