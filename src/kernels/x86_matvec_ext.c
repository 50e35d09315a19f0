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
 */
#include <string.h>
#include "kernels/quant_ext.h"
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

static void round_rows(tl_type type, size_t k, const float *X, size_t ldx, size_t n, void *act) {
    if (tl_type_act_block(type) == TL_QK_K) {
        tl_block_k_act *a = act;
        for (size_t i = 0; i < n; i++) tl_quant_act_row_k(X + i * ldx, a + i * (k / TL_QK_K), k);
        return;
    }
    act32 *a = act;
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (size_t i = 0; i < n; i++)
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
 * 16 b's. */
typedef struct {
    __m256i u[8];
    __m256i av[8];
    __m256i bv;
    float D, M;
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

static ALWAYS_INLINE __m256i pair16(int a0, int a1) {
    return _mm256_setr_m128i(_mm_set1_epi16((short)a0), _mm_set1_epi16((short)a1));
}

static ALWAYS_INLINE void set_scales16(kblock *kb, const int *a, const int *b) {
    int16_t bb[16];
    for (int p = 0; p < 8; p++) kb->av[p] = pair16(a[2 * p], a[2 * p + 1]);
    for (int g = 0; g < 16; g++) bb[g] = (int16_t)b[g];
    kb->bv = loadu256(bb);
}

static ALWAYS_INLINE void unpack_q2_k(const uint8_t *s, kblock *kb) {
    const tl_block_q2_k *x = (const void *)s;
    const __m256i m3 = _mm256_set1_epi8(3);
    int a[16], b[16];
    for (int h = 0; h < 2; h++) {
        const __m256i q = loadu256(x->q + 32 * h); /* bytes 0-15: even groups, 16-31: odd */
        for (int j = 0; j < 4; j++) /* groups 8h+2j, 8h+2j+1 = elements 128h + 32j .. +31 */
            kb->u[4 * h + j] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
    }
    for (int g = 0; g < 16; g++) {
        a[g] = x->scales[g] & 0x0f;
        b[g] = x->scales[g] >> 4;
    }
    set_scales16(kb, a, b);
    kb->D = load_f16_scale(s + offsetof(tl_block_q2_k, d));
    kb->M = load_f16_scale(s + offsetof(tl_block_q2_k, dmin));
}

static ALWAYS_INLINE void unpack_q3_k(const uint8_t *s, kblock *kb) {
    const tl_block_q3_k *x = (const void *)s;
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    const __m256i hm = loadu256(x->hmask); /* bytes 0-15: even groups, 16-31: odd */
    int a[16], b[16];
    for (int h = 0; h < 2; h++) {
        const __m256i q = loadu256(x->q + 32 * h);
        for (int j = 0; j < 4; j++) {
            const int bit = 4 * h + j;
            __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, bit), _mm256_set1_epi8(1));
            hb = _mm256_and_si256(_mm256_cmpeq_epi8(hb, _mm256_set1_epi8(1)), four);
            kb->u[4 * h + j] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3), hb);
        }
    }
    for (int g = 0; g < 16; g++) {
        a[g] = tl__q3k_scale(x->scales, g);
        b[g] = 4 * a[g];
    }
    set_scales16(kb, a, b);
    kb->D = kb->M = load_f16_scale(s + offsetof(tl_block_q3_k, d));
}

static ALWAYS_INLINE void unpack_q45_k(int five, const uint8_t *s, kblock *kb) {
    const uint8_t *scales = s + 4, *qs = s + (five ? 48 : 16);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i qh = five ? loadu256(s + 16) : _mm256_setzero_si256();
    for (int p = 0; p < 4; p++) {
        const __m256i q = loadu256(qs + 32 * p);
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (five) {
            const __m256i one = _mm256_set1_epi8(1), sixteen = _mm256_set1_epi8(16);
            __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), one);
            __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p + 1), one);
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(b0, one), sixteen));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(b1, one), sixteen));
        }
        kb->u[2 * p] = lo;
        kb->u[2 * p + 1] = hi;
    }
    int16_t bb[16];
    for (int g = 0; g < 8; g++) {
        int sc, mn;
        tl__k4_scale_min(scales, g, &sc, &mn);
        kb->av[g] = _mm256_set1_epi16((short)sc);
        bb[2 * g] = bb[2 * g + 1] = (int16_t)mn;
    }
    kb->bv = loadu256(bb);
    kb->D = load_f16_scale(s);
    kb->M = load_f16_scale(s + 2);
}

static ALWAYS_INLINE void unpack_q6_k(const uint8_t *s, kblock *kb) {
    const tl_block_q6_k *x = (const void *)s;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = loadu256(x->ql + 64 * h), l1 = loadu256(x->ql + 64 * h + 32);
        const __m256i qh = loadu256(x->qh + 32 * h);
        const __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                               _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                               _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
        for (int p = 0; p < 4; p++) {
            __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), m2);
            kb->u[4 * h + p] = _mm256_or_si256(lo[p], _mm256_slli_epi16(hb, 4));
        }
    }
    int a[16], b[16];
    for (int g = 0; g < 16; g++) {
        a[g] = x->scales[g];
        b[g] = 32 * a[g];
    }
    set_scales16(kb, a, b);
    kb->D = kb->M = load_f16_scale(s + offsetof(tl_block_q6_k, d));
}

static ALWAYS_INLINE void unpack_k(tl_type type, const uint8_t *s, kblock *kb) {
    switch (type) {
    case TL_TYPE_Q2_K: unpack_q2_k(s, kb); return;
    case TL_TYPE_Q3_K: unpack_q3_k(s, kb); return;
    case TL_TYPE_Q4_K: unpack_q45_k(0, s, kb); return;
    case TL_TYPE_Q5_K: unpack_q45_k(1, s, kb); return;
    default: unpack_q6_k(s, kb); return;
    }
}

/* acc += d_x * (D * sum a.(u . q) - M * sum b.bsums) over one K block. */
static ALWAYS_INLINE __m256 dot_k(const kblock *kb, const tl_block_k_act *a, __m256 acc) {
    __m256i s = _mm256_setzero_si256();
    UNROLL for (int p = 0; p < 8; p++) {
        __m256i prod = _mm256_maddubs_epi16(kb->u[p], loadu256(a->q + 32 * p));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(prod, kb->av[p]));
    }
    const __m256i m = _mm256_madd_epi16(kb->bv, loadu256(a->bsums));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(kb->D * a->d), acc);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(kb->M * a->d), acc);
}

/* One weight row against n activation rows; acc has n slots. Inlined per type (row_k_any)
 * so that unpack_k's switch folds away. */
static ALWAYS_INLINE void row_k(tl_type type, const uint8_t *w, size_t nb, const tl_block_k_act *act,
                  size_t n, __m256 *acc, size_t distance) {
    const size_t bb = tl_type_block_bytes(type);
    for (size_t i = 0; i < n; i++) acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        kblock kb;
        _mm_prefetch((const char *)(w + b * bb + distance), _MM_HINT_T0);
        _mm_prefetch((const char *)(w + b * bb + distance + 64), _MM_HINT_T0);
        _mm_prefetch((const char *)(w + b * bb + distance + 128), _MM_HINT_T0);
        _mm_prefetch((const char *)(w + b * bb + distance + 192), _MM_HINT_T0);
        unpack_k(type, w + b * bb, &kb);
        for (size_t i = 0; i < n; i++) acc[i] = dot_k(&kb, act + i * nb + b, acc[i]);
    }
}

static void row_k_any(tl_type type, const uint8_t *w, size_t nb, const tl_block_k_act *act,
                      size_t n, __m256 *acc, size_t distance) {
    switch (type) {
    case TL_TYPE_Q2_K: row_k(TL_TYPE_Q2_K, w, nb, act, n, acc, distance); return;
    case TL_TYPE_Q3_K: row_k(TL_TYPE_Q3_K, w, nb, act, n, acc, distance); return;
    case TL_TYPE_Q4_K: row_k(TL_TYPE_Q4_K, w, nb, act, n, acc, distance); return;
    case TL_TYPE_Q5_K: row_k(TL_TYPE_Q5_K, w, nb, act, n, acc, distance); return;
    default: row_k(TL_TYPE_Q6_K, w, nb, act, n, acc, distance); return;
    }
}

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

static ALWAYS_INLINE void row_q32(tl_type type, const uint8_t *w, size_t nb, const act32 *act, size_t n,
                    __m256 *acc, float *macc, size_t distance) {
    const size_t bb = tl_type_block_bytes(type);
    const __m256i ones = _mm256_set1_epi16(1);
    for (size_t i = 0; i < n; i++) {
        acc[i] = _mm256_setzero_ps();
        macc[i] = 0.0f;
    }
    for (size_t b = 0; b < nb; b++) {
        float d, mterm;
        _mm_prefetch((const char *)(w + b * bb + distance), _MM_HINT_T0);
        const __m256i u = unpack_q32(type, w + b * bb, &d, &mterm);
        for (size_t i = 0; i < n; i++) {
            const act32 *a = act + i * nb + b;
            __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(u, loadu256(a->q)), ones);
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * a->d), acc[i]);
            macc[i] += mterm * a->d * (float)a->sum;
        }
    }
}

static void row_q32_any(tl_type type, const uint8_t *w, size_t nb, const act32 *act, size_t n,
                        __m256 *acc, float *macc, size_t distance) {
    switch (type) {
    case TL_TYPE_Q4_1: row_q32(TL_TYPE_Q4_1, w, nb, act, n, acc, macc, distance); return;
    case TL_TYPE_Q5_0: row_q32(TL_TYPE_Q5_0, w, nb, act, n, acc, macc, distance); return;
    default: row_q32(TL_TYPE_Q5_1, w, nb, act, n, acc, macc, distance); return;
    }
}

/* ---- the product ---- */

/* Activation rows per pass over a weight row: their accumulators live on the stack. */
#define EXT_ROWS_PER_PASS 64

void tl__matmul_ext(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                    const float *X, size_t ldx, size_t n, float *Y, size_t ldy, float *scratch) {
    const size_t ab = tl_type_act_block(type), nb = k / ab;
    const size_t row_bytes = tl_type_row_bytes(type, k), distance = tl__prefetch_distance();
    round_rows(type, k, X, ldx, n, scratch);
    __m256 acc[EXT_ROWS_PER_PASS];
    float macc[EXT_ROWS_PER_PASS];
    const uint8_t *act = (const uint8_t *)scratch;
    prefetch_start(W + j0 * row_bytes, (j1 - j0) * row_bytes, distance);
    for (size_t i0 = 0; i0 < n; i0 += EXT_ROWS_PER_PASS) {
        const size_t m = n - i0 < EXT_ROWS_PER_PASS ? n - i0 : EXT_ROWS_PER_PASS;
        const uint8_t *ai = act + i0 * nb * act_rec_bytes(type);
        for (size_t j = j0; j < j1; j++) {
            const uint8_t *w = W + j * row_bytes;
            if (ab == TL_QK_K) {
                row_k_any(type, w, nb, (const tl_block_k_act *)(const void *)ai, m, acc, distance);
                for (size_t i = 0; i < m; i++) Y[(i0 + i) * ldy + j] = hsum(acc[i]);
            } else {
                row_q32_any(type, w, nb, (const act32 *)(const void *)ai, m, acc, macc, distance);
                for (size_t i = 0; i < m; i++) Y[(i0 + i) * ldy + j] = hsum(acc[i]) + macc[i];
            }
        }
    }
}
