/* x86_matmul.c - AVX2+FMA+F16C matrix products over weight rows of any tl_type.
 *
 * Two paths, chosen by the number of activation rows n:
 *  - matvec (n <= TL_MATVEC_MAX_N, decode): memory-bound. Each weight row is streamed
 *    once, 32 elements at a time, and used against all n activation rows. Float types
 *    are dequantized in registers and FMA'd (scratch is not touched). Q8_0/Q4_0 use the
 *    rounded-activation contract of kernels.h: the n rows of X are first quantized into
 *    scratch as (f32 d_x, 32 x int8) blocks (tl_matmul_act_prepare: ops.c does it once
 *    per product and shares it between threads), then each block pair is an int8 dot
 *    product (maddubs on |w| and sign(x, w), then madd into int32 - exact, no saturation
 *    since |w| <= 128 and |q_x| <= 127; vpdpbusd on CPUs with AVX-VNNI, x86vnni_matmul.c)
 *    scaled by d_w*d_x in f32 (x86_matvec_q.inl). All matvecs software-prefetch the
 *    weight stream tl__prefetch_distance() bytes ahead (x86_simd.h).
 *  - grouped matvec (TL_MATVEC_MAX_N < n <= TL_GROUPED_MAX_N, batched decode and short
 *    prompts): the matvec kernel over groups of up to 4 rows. The first group streams
 *    the thread's weight rows from DRAM, the next ones find them in L2 (ops.c splits a
 *    product into chunks of a few hundred KB); packing weight panels for the GEMM costs
 *    as much at n = 8 as at n = 512, so for few rows this is 2-3x faster.
 *  - gemm (larger n, prefill): compute-bound, BLIS-style. For each KC-slice of k and each
 *    panel of NR=16 output columns, the weights are dequantized and packed transposed
 *    (panel[c][16], padded with zero columns past j1) into scratch; a 6x16 register-tile
 *    micro-kernel then sweeps all n rows of X (split into near-equal tiles of <= 6 rows).
 *    The first k-slice stores into Y, later ones add to it. The next panel's weight rows
 *    are software-prefetched: they are short runs at a large stride, which the hardware
 *    prefetcher does not follow. For Q8_0/Q4_0 each k-slice of X is rounded to x' into
 *    scratch before it is used (n x KC floats), so no full copy of X is needed.
 * Invariants: dequantization is exact (as in quant.c), activation rounding is bit-exact
 * with quant.c's, accumulation is f32, so results agree with tl_matmul_ref to float
 * rounding. Weight rows may start at any 2-aligned
 * address: all vector loads are unaligned, block scales are read with memcpy. Scratch is
 * assumed 32-byte aligned only (all accesses are loadu/storeu anyway).
 */
#include <cpuid.h>
#include <stdatomic.h>
#include "kernels/x86_simd.h"

#define MR 6    /* micro-tile rows of X (and Y) */
#define NR 16   /* micro-tile columns j (two ymm) */
#define KC 256  /* k-slice; a multiple of TL_QK */

/* ---- dequantization into registers ---- */

static ALWAYS_INLINE __m256 load8_f16(const uint8_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static ALWAYS_INLINE __m256 load8_bf16(const uint8_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static ALWAYS_INLINE __m256 i8x8_to_ps(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
}

/* 32 consecutive elements starting at `p`; for Q types `p` is a block. */
static ALWAYS_INLINE void dequant32(tl_type type, const uint8_t *p, __m256 w[4]) {
    switch (type) {
    case TL_TYPE_F32:
        UNROLL
        for (int q = 0; q < 4; q++) w[q] = _mm256_loadu_ps((const float *)(const void *)p + 8 * q);
        break;
    case TL_TYPE_F16:
        UNROLL
        for (int q = 0; q < 4; q++) w[q] = load8_f16(p + 16 * q);
        break;
    case TL_TYPE_BF16:
        UNROLL
        for (int q = 0; q < 4; q++) w[q] = load8_bf16(p + 16 * q);
        break;
    case TL_TYPE_Q8_0: {
        __m256 d = _mm256_set1_ps(load_f16_scale(p));
        UNROLL
        for (int q = 0; q < 4; q++)
            w[q] = _mm256_mul_ps(d, i8x8_to_ps(_mm_loadl_epi64((const __m128i *)(p + 2 + 8 * q))));
        break;
    }
    case TL_TYPE_Q4_0: {
        /* bytes 0..7 hold elements 0..7 (low nibbles) and 16..23 (high), bytes 8..15 the
         * rest. fma(nib, d, -8d) is exact: d*(nib-8) is representable in f32. */
        __m256 d = _mm256_set1_ps(load_f16_scale(p)), m8d = _mm256_mul_ps(d, _mm256_set1_ps(-8.0f));
        __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 2)));
        __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 10)));
        __m256i m = _mm256_set1_epi32(0x0f);
        w[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b0, m)), d, m8d);
        w[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(b1, m)), d, m8d);
        w[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4)), d, m8d);
        w[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4)), d, m8d);
        break;
    }
    }
}

/* Bytes of 32 elements of `type` (one block for Q types). */
static ALWAYS_INLINE size_t bytes32(tl_type type) {
    return type == TL_TYPE_F32 ? 128 : type == TL_TYPE_Q8_0 ? 34 : type == TL_TYPE_Q4_0 ? 18 : 64;
}

/* One element of a float type (used only for k tails, which Q types never have). */
static ALWAYS_INLINE float load1(tl_type type, const uint8_t *p) {
    uint16_t h;
    float f;
    switch (type) {
    case TL_TYPE_F32: memcpy(&f, p, sizeof f); return f;
    case TL_TYPE_F16: return load_f16_scale(p);
    case TL_TYPE_BF16: memcpy(&h, p, sizeof h); return tl_bf16_to_f32(h);
    default: return 0.0f;
    }
}

static ALWAYS_INLINE __m256 load8(tl_type type, const uint8_t *p) {
    switch (type) {
    case TL_TYPE_F16: return load8_f16(p);
    case TL_TYPE_BF16: return load8_bf16(p);
    default: return _mm256_loadu_ps((const float *)(const void *)p);
    }
}

/* Dequantizes elements [0, len) of a row slice starting at `p` into dst
 * (len a multiple of 32 for Q types). */
static ALWAYS_INLINE void dequant_slice(tl_type type, const uint8_t *p, size_t len, float *dst) {
    size_t c = 0;
    for (; c + 32 <= len; c += 32, p += bytes32(type)) {
        __m256 w[4];
        dequant32(type, p, w);
        UNROLL
        for (int q = 0; q < 4; q++) _mm256_storeu_ps(dst + c + 8 * q, w[q]);
    }
    size_t es = tl_type_block_bytes(type);
    for (; c + 8 <= len; c += 8, p += 8 * es) _mm256_storeu_ps(dst + c, load8(type, p));
    for (; c < len; c++, p += es) dst[c] = load1(type, p);
}

/* ---- matvec: n <= TL_MATVEC_MAX_N ---- */

/* Accumulators per activation row: 8 FMA chains in flight in total (2 FMA units x 4
 * cycles latency), which needs two 32-element groups per step when N = 1. */
static ALWAYS_INLINE void matvec(tl_type type, const int N, const uint8_t *W, size_t k,
                                 size_t j0, size_t j1, const float *X, size_t ldx, float *Y,
                                 size_t ldy) {
    const int na = N == 1 ? 8 : N == 2 ? 4 : 2;
    const int G = N == 1 ? 2 : 1; /* 32-element groups per step */
    size_t row_bytes = tl_type_row_bytes(type, k), k32 = k / 32 * 32, kg = k / (32 * G) * (32 * G);
    size_t es = tl_type_block_bytes(type);
    const size_t pf = tl__prefetch_distance();
    prefetch_start(W + j0 * row_bytes, (j1 - j0) * row_bytes, pf);
    for (size_t j = j0; j < j1; j++) {
        const uint8_t *p = W + j * row_bytes;
        __m256 acc[TL_MATVEC_MAX_N][8];
        UNROLL
        for (int i = 0; i < N; i++)
            UNROLL
            for (int a = 0; a < na; a++) acc[i][a] = _mm256_setzero_ps();
        size_t c = 0;
        for (; c < kg; c += 32 * G) {
            UNROLL
            for (int g = 0; g < G; g++, p += bytes32(type)) {
                __m256 w[4];
                /* the hardware prefetcher alone falls behind (prefetch_ahead) */
                _mm_prefetch((const char *)(p + pf), _MM_HINT_T0);
                if (type == TL_TYPE_F32)
                    _mm_prefetch((const char *)(p + pf + 64), _MM_HINT_T0);
                dequant32(type, p, w);
                UNROLL
                for (int i = 0; i < N; i++) {
                    const float *x = X + i * ldx + c + 32 * g;
                    UNROLL
                    for (int q = 0; q < 4; q++) {
                        int a = (4 * g + q) % na;
                        acc[i][a] = _mm256_fmadd_ps(w[q], _mm256_loadu_ps(x + 8 * q), acc[i][a]);
                    }
                }
            }
        }
        for (; c < k32; c += 32, p += bytes32(type)) {
            __m256 w[4];
            dequant32(type, p, w);
            UNROLL
            for (int i = 0; i < N; i++)
                UNROLL
                for (int q = 0; q < 4; q++)
                    acc[i][q % na] =
                        _mm256_fmadd_ps(w[q], _mm256_loadu_ps(X + i * ldx + c + 8 * q), acc[i][q % na]);
        }
        for (; c + 8 <= k; c += 8, p += 8 * es) { /* float types only */
            __m256 w = load8(type, p);
            UNROLL
            for (int i = 0; i < N; i++)
                acc[i][0] = _mm256_fmadd_ps(w, _mm256_loadu_ps(X + i * ldx + c), acc[i][0]);
        }
        UNROLL
        for (int i = 0; i < N; i++) {
            __m256 s = acc[i][0];
            UNROLL
            for (int a = 1; a < na; a++) s = _mm256_add_ps(s, acc[i][a]);
            float sum = hsum(s);
            const uint8_t *pt = p;
            for (size_t ct = c; ct < k; ct++, pt += es) sum += load1(type, pt) * X[i * ldx + ct];
            Y[i * ldy + j] = sum;
        }
    }
}

/* ---- activation rounding (bit-exact with quant.c) ---- */

/* Rounds one 32-block: d = amax/127, r[q] = roundf(x/d) as floats (0 when d == 0). */
static ALWAYS_INLINE float act_block(const float *x, __m256 r[4]) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], m = _mm256_setzero_ps();
    UNROLL
    for (int q = 0; q < 4; q++) {
        v[q] = _mm256_loadu_ps(x + 8 * q);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[q]));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float d = _mm_cvtss_f32(h) / 127.0f;
    if (d == 0.0f) {
        UNROLL
        for (int q = 0; q < 4; q++) r[q] = _mm256_setzero_ps();
        return d;
    }
    const __m256 vd = _mm256_set1_ps(d), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    UNROLL
    for (int q = 0; q < 4; q++) {
        /* roundf: truncate, then step away from zero when the (exact) remainder is >= 1/2 */
        __m256 y = _mm256_div_ps(v[q], vd);
        __m256 t = _mm256_round_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(y, t)), half, _CMP_GE_OQ);
        __m256 step = _mm256_or_ps(_mm256_and_ps(y, sign), one); /* copysign(1, y) */
        r[q] = _mm256_add_ps(t, _mm256_and_ps(up, step));
    }
    return d;
}

void tl_quant_act_row_fast(const float *src, tl_block_q8_act *dst, size_t n) {
    for (size_t b = 0; b < n / TL_QK; b++) {
        __m256 r[4];
        dst[b].d = act_block(src + b * TL_QK, r);
        __m256i i01 = _mm256_packs_epi32(_mm256_cvtps_epi32(r[0]), _mm256_cvtps_epi32(r[1]));
        __m256i i23 = _mm256_packs_epi32(_mm256_cvtps_epi32(r[2]), _mm256_cvtps_epi32(r[3]));
        __m256i i8 = _mm256_packs_epi16(i01, i23); /* lanes interleaved by the packs */
        i8 = _mm256_permutevar8x32_epi32(i8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(void *)dst[b].q, i8);
    }
}

/* x' for len elements (a multiple of 32) of each of n rows: dst[i*ldd + c]. */
static void round_act_rows(const float *X, size_t ldx, size_t n, size_t len, float *dst,
                           size_t ldd) {
    for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < len; c += TL_QK) {
            __m256 r[4];
            __m256 d = _mm256_set1_ps(act_block(X + i * ldx + c, r));
            UNROLL
            for (int q = 0; q < 4; q++) _mm256_storeu_ps(dst + i * ldd + c + 8 * q, _mm256_mul_ps(d, r[q]));
        }
}

/* ---- matvec over Q8_0 / Q4_0 with int8 dot products (x86_matvec_q.inl) ---- */

#define TL_MATVEC_Q_NAME tl__matvec_q_avx2
#include "kernels/x86_matvec_q.inl"

/* Sum of 8*q over lo/hi byte lanes, in the lane layout of the Q4_0 dot below. */
static ALWAYS_INLINE __m256i q4_corr(__m256i lo, __m256i hi) {
    const __m256i eight = _mm256_set1_epi8(8), ones = _mm256_set1_epi16(1);
    __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(eight, lo), _mm256_maddubs_epi16(eight, hi));
    return _mm256_madd_epi16(s, ones);
}

/* Lays out one activation row (k/32 blocks) as pair records for weights of `type`
 * (x86_simd.h), each act_record_bytes(type) long. */
static void act_pairs(tl_type type, const float *x, size_t k, uint8_t *out) {
    const size_t nb = k / TL_QK, rec = act_record_bytes(type);
    for (size_t b = 0; b < nb; b += 2, out += rec) {
        tl_block_q8_act blk[2];
        int two = b + 1 < nb;
        int8_t *q = (int8_t *)(out + ACT_Q);
        float d[8];
        tl_quant_act_row_fast(x + b * TL_QK, blk, (size_t)(1 + two) * TL_QK);
        float da = blk[0].d, db = two ? blk[1].d : da;
        if (!two) memset(blk[1].q, 0, TL_QK);
        if (type == TL_TYPE_Q4_0 && two) {
            memcpy(q, blk[0].q, 16), memcpy(q + 16, blk[1].q, 16);
            memcpy(q + 32, blk[0].q + 16, 16), memcpy(q + 48, blk[1].q + 16, 16);
            for (int l = 0; l < 8; l++) d[l] = l < 4 ? da : db;
        } else {
            memcpy(q, blk[0].q, TL_QK), memcpy(q + TL_QK, blk[1].q, TL_QK);
            for (int l = 0; l < 8; l++) d[l] = (l & 2) ? db : da;
        }
        memcpy(out + ACT_D, d, sizeof d);
        if (type == TL_TYPE_Q4_0) { /* the odd tail has its nibbles in element order */
            __m256i c = q4_corr(loadu256(q), two ? loadu256(q + 32) : _mm256_setzero_si256());
            _mm256_storeu_si256((__m256i *)(void *)(out + ACT_C), c);
        }
    }
}

/* ---- gemm ---- */

/* 8x8 transpose: rows src[r*lds + 0..7] -> dst[c*ldd + 0..7] holds column c. */
static ALWAYS_INLINE void transpose8(const float *src, size_t lds, float *dst, size_t ldd) {
    __m256 r0 = _mm256_loadu_ps(src + 0 * lds), r1 = _mm256_loadu_ps(src + 1 * lds);
    __m256 r2 = _mm256_loadu_ps(src + 2 * lds), r3 = _mm256_loadu_ps(src + 3 * lds);
    __m256 r4 = _mm256_loadu_ps(src + 4 * lds), r5 = _mm256_loadu_ps(src + 5 * lds);
    __m256 r6 = _mm256_loadu_ps(src + 6 * lds), r7 = _mm256_loadu_ps(src + 7 * lds);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    _mm256_storeu_ps(dst + 0 * ldd, _mm256_permute2f128_ps(s0, s4, 0x20));
    _mm256_storeu_ps(dst + 1 * ldd, _mm256_permute2f128_ps(s1, s5, 0x20));
    _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(s2, s6, 0x20));
    _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(s3, s7, 0x20));
    _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(s0, s4, 0x31));
    _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(s1, s5, 0x31));
    _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(s2, s6, 0x31));
    _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(s3, s7, 0x31));
}

/* Packs columns [c0, c0+kc) of weight rows [jb, jb+nj) (nj <= NR) as panel[c*NR + jj],
 * zero for jj >= nj. tmp holds NR*KC floats. */
static ALWAYS_INLINE void pack_panel(tl_type type, const uint8_t *W, size_t row_bytes,
                                     size_t c0, size_t kc, size_t jb, size_t nj, float *tmp,
                                     float *panel) {
    size_t off = tl_type_row_bytes(type, c0); /* c0 is a multiple of KC */
    for (size_t jj = 0; jj < NR; jj++) {
        if (jj < nj)
            dequant_slice(type, W + (jb + jj) * row_bytes + off, kc, tmp + jj * KC);
        else
            memset(tmp + jj * KC, 0, kc * sizeof(float));
    }
    size_t c = 0;
    for (; c + 8 <= kc; c += 8) {
        transpose8(tmp + c, KC, panel + c * NR, NR);
        transpose8(tmp + 8 * KC + c, KC, panel + c * NR + 8, NR);
    }
    for (; c < kc; c++)
        for (size_t jj = 0; jj < NR; jj++) panel[c * NR + jj] = tmp[jj * KC + c];
}

/* C[r*ldc + 0..15] (+)= sum_c X[r*ldx + c] * panel[c*16 + 0..15] for r < M. */
static ALWAYS_INLINE void ukernel(const int M, size_t kc, const float *panel, const float *X,
                                  size_t ldx, float *C, size_t ldc, int add) {
    __m256 acc[MR][2];
    UNROLL
    for (int r = 0; r < M; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const float *x[MR];
    UNROLL
    for (int r = 0; r < M; r++) x[r] = X + r * ldx;
#pragma GCC unroll 4
    for (size_t c = 0; c < kc; c++) {
        __m256 b0 = _mm256_loadu_ps(panel + c * NR), b1 = _mm256_loadu_ps(panel + c * NR + 8);
        UNROLL
        for (int r = 0; r < M; r++) {
            __m256 a = _mm256_broadcast_ss(x[r] + c);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    UNROLL
    for (int r = 0; r < M; r++) {
        float *cr = C + r * ldc;
        if (add) {
            acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(cr));
            acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(cr + 8));
        }
        _mm256_storeu_ps(cr, acc[r][0]);
        _mm256_storeu_ps(cr + 8, acc[r][1]);
    }
}

static void ukernel_any(size_t m, size_t kc, const float *panel, const float *X, size_t ldx,
                        float *C, size_t ldc, int add) {
    switch (m) {
    case 6: ukernel(6, kc, panel, X, ldx, C, ldc, add); break;
    case 5: ukernel(5, kc, panel, X, ldx, C, ldc, add); break;
    case 4: ukernel(4, kc, panel, X, ldx, C, ldc, add); break;
    case 3: ukernel(3, kc, panel, X, ldx, C, ldc, add); break;
    case 2: ukernel(2, kc, panel, X, ldx, C, ldc, add); break;
    default: ukernel(1, kc, panel, X, ldx, C, ldc, add); break;
    }
}

/* Rows of X in micro-tile t when n rows are split into ceil(n/MR) tiles as evenly as
 * possible (n = 8 runs as 4+4, not 6+2: a 2-row tile cannot keep the FMA units busy). */
static inline size_t m_of(size_t n, size_t t) {
    size_t tiles = (n + MR - 1) / MR;
    return n / tiles + (t < n % tiles);
}

static void prefetch_rows(const uint8_t *p, size_t stride, size_t rows, size_t bytes) {
    for (size_t r = 0; r < rows; r++, p += stride)
        for (size_t b = 0; b < bytes; b += 64) _mm_prefetch((const char *)(p + b), _MM_HINT_T0);
}

static ALWAYS_INLINE void gemm(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                               const float *X, size_t ldx, size_t n, float *Y, size_t ldy,
                               float *scratch) {
    size_t row_bytes = tl_type_row_bytes(type, k);
    float *panel = scratch, *tmp = scratch + NR * KC, *xr = scratch + 2 * NR * KC;
    for (size_t c0 = 0; c0 < k; c0 += KC) {
        size_t kc = k - c0 < KC ? k - c0 : KC;
        int add = c0 > 0;
        const float *xs = X + c0; /* this k-slice of X (or of x') */
        size_t lds = ldx;
        if (tl_type_rounds_act(type)) {
            round_act_rows(X + c0, ldx, n, kc, xr, KC);
            xs = xr, lds = KC;
        }
        for (size_t jb = j0; jb < j1; jb += NR) {
            size_t nj = j1 - jb < NR ? j1 - jb : NR;
            pack_panel(type, W, row_bytes, c0, kc, jb, nj, tmp, panel);
            /* the next panel's rows are short runs at a large stride: fetch them while
             * this one is being multiplied */
            if (jb + NR < j1)
                prefetch_rows(W + (jb + NR) * row_bytes + tl_type_row_bytes(type, c0), row_bytes,
                              j1 - jb - NR < NR ? j1 - jb - NR : NR, tl_type_row_bytes(type, kc));
            else if (c0 + KC < k)
                prefetch_rows(W + j0 * row_bytes + tl_type_row_bytes(type, c0 + KC), row_bytes,
                              j1 - j0 < NR ? j1 - j0 : NR,
                              tl_type_row_bytes(type, k - c0 - KC < KC ? k - c0 - KC : KC));
            for (size_t i0 = 0, t = 0; i0 < n; i0 += m_of(n, t++)) {
                size_t m = m_of(n, t);
                const float *xb = xs + i0 * lds;
                float *yb = Y + i0 * ldy + jb;
                if (nj == NR) {
                    ukernel_any(m, kc, panel, xb, lds, yb, ldy, add);
                } else { /* partial panel: compute a full tile, write back valid columns */
                    float tile[MR * NR];
                    ukernel_any(m, kc, panel, xb, lds, tile, NR, 0);
                    for (size_t r = 0; r < m; r++)
                        for (size_t jj = 0; jj < nj; jj++)
                            yb[r * ldy + jj] = (add ? yb[r * ldy + jj] : 0.0f) + tile[r * NR + jj];
                }
            }
        }
    }
}

/* ---- dispatch ---- */

size_t tl_matmul_scratch_floats(size_t k, size_t n) {
    size_t nv = n < TL_GROUPED_MAX_N ? n : TL_GROUPED_MAX_N;
    size_t act = tl_matmul_act_floats(TL_TYPE_Q4_0, k, nv); /* matvec: the larger records */
    size_t gemm = 2 * NR * KC + (n > TL_GROUPED_MAX_N ? n * KC : 0); /* panels, x' slice */
    size_t f = act > gemm ? act : gemm;
    return (f + 15) / 16 * 16; /* whole cache lines: per-thread slices stay aligned */
}

#define MATVEC_CASES(T)                                                                  \
    switch (n) {                                                                         \
    case 1: matvec(T, 1, w, k, j0, j1, X, ldx, Y, ldy); return;                          \
    case 2: matvec(T, 2, w, k, j0, j1, X, ldx, Y, ldy); return;                          \
    case 3: matvec(T, 3, w, k, j0, j1, X, ldx, Y, ldy); return;                          \
    default: matvec(T, 4, w, k, j0, j1, X, ldx, Y, ldy); return;                         \
    }

static void matvec_f32(const uint8_t *w, size_t k, size_t j0, size_t j1, const float *X,
                       size_t ldx, size_t n, float *Y, size_t ldy) { MATVEC_CASES(TL_TYPE_F32) }
static void matvec_f16(const uint8_t *w, size_t k, size_t j0, size_t j1, const float *X,
                       size_t ldx, size_t n, float *Y, size_t ldy) { MATVEC_CASES(TL_TYPE_F16) }
static void matvec_bf16(const uint8_t *w, size_t k, size_t j0, size_t j1, const float *X,
                        size_t ldx, size_t n, float *Y, size_t ldy) { MATVEC_CASES(TL_TYPE_BF16) }

#define GEMM_FN(name, T)                                                                 \
    static void name(const uint8_t *w, size_t k, size_t j0, size_t j1, const float *X,   \
                     size_t ldx, size_t n, float *Y, size_t ldy, float *scratch) {       \
        gemm(T, w, k, j0, j1, X, ldx, n, Y, ldy, scratch);                               \
    }
GEMM_FN(gemm_f32, TL_TYPE_F32)
GEMM_FN(gemm_f16, TL_TYPE_F16)
GEMM_FN(gemm_bf16, TL_TYPE_BF16)
GEMM_FN(gemm_q8_0, TL_TYPE_Q8_0)
GEMM_FN(gemm_q4_0, TL_TYPE_Q4_0)

size_t tl_matmul_act_floats(tl_type type, size_t k, size_t n) {
    if (!tl_type_rounds_act(type) || n == 0 || n > TL_GROUPED_MAX_N) return 0;
    return n * ((k / TL_QK + 1) / 2) * (act_record_bytes(type) / sizeof(float));
}

void tl_matmul_act_prepare(tl_type type, size_t k, const float *X, size_t ldx, size_t n,
                           float *act) {
    uint8_t *xa = (uint8_t *)act;
    const size_t row_step = (k / TL_QK + 1) / 2 * act_record_bytes(type);
    if (tl_matmul_act_floats(type, k, n) == 0) return;
    for (size_t i = 0; i < n; i++) act_pairs(type, X + i * ldx, k, xa + i * row_step);
}

/* The matvec prefetch distance (x86_simd.h): 3072 bytes on Intel cores, 8192 elsewhere
 * (measured on one VM of each; see there). CPUID leaf 0's vendor string, cached. */
size_t tl__prefetch_distance(void) {
    static _Atomic size_t cached = 0; /* a CPU property: racing first calls agree */
    size_t v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v == 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        int intel = __get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547u /* "Genu" */ &&
                    d == 0x49656e69u /* "ineI" */ && c == 0x6c65746eu /* "ntel" */;
        v = intel ? 3072 : 8192;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

/* AVX-VNNI is used when the compiler could build it and this CPU has it: CPUID leaf 7
 * sub-leaf 1, EAX bit 4 (read with cpuid.h: clang 14's __builtin_cpu_supports does not
 * know "avxvnni"). Cached: cpuid traps to the hypervisor in a VM. */
static int use_vnni(void) {
#ifdef TL_HAVE_AVXVNNI
    static _Atomic int cached = -1; /* a CPU property: racing first calls agree */
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        unsigned a = 0, b = 0, c = 0, d = 0;
        v = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1u);
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
#else
    return 0;
#endif
}

/* The rounded-activation matvec on one instruction set, over groups of up to
 * TL_MATVEC_MAX_N rows (row i's pair records start i * row_step bytes into xa). */
static void act_groups(int vnni, tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                       const uint8_t *xa, size_t n, float *Y, size_t ldy) {
    const size_t row_step = (k / TL_QK + 1) / 2 * act_record_bytes(type);
    for (size_t i = 0; i < n; i += TL_MATVEC_MAX_N) {
        size_t g = n - i < TL_MATVEC_MAX_N ? n - i : TL_MATVEC_MAX_N;
#ifdef TL_HAVE_AVXVNNI
        if (vnni) {
            tl__matvec_q_vnni(type, W, k, j0, j1, xa + i * row_step, g, Y + i * ldy, ldy);
            continue;
        }
#else
        (void)vnni;
#endif
        tl__matvec_q_avx2(type, W, k, j0, j1, xa + i * row_step, g, Y + i * ldy, ldy);
    }
}

void tl_matmul_fast_act(tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                        const float *act, size_t n, float *Y, size_t ldy) {
    if (j0 >= j1 || n == 0) return;
    act_groups(use_vnni(), type, W, k, j0, j1, (const uint8_t *)act, n, Y, ldy);
}

int tl__matmul_fast_act_isa(int isa, tl_type type, const void *W, size_t k, size_t j0,
                            size_t j1, const float *act, size_t n, float *Y, size_t ldy) {
    if (isa == 1 && !use_vnni()) return 0;
    if (j0 >= j1 || n == 0) return 1;
    act_groups(isa == 1, type, W, k, j0, j1, (const uint8_t *)act, n, Y, ldy);
    return 1;
}

void tl_matmul_fast(tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                    const float *X, size_t ldx, size_t n, float *Y, size_t ldy,
                    float *scratch) {
    const uint8_t *w = W;
    if (j0 >= j1 || n == 0) return;
    if (tl_matmul_act_floats(type, k, n)) { /* Q8_0/Q4_0 matvec */
        tl_matmul_act_prepare(type, k, X, ldx, n, scratch);
        tl_matmul_fast_act(type, W, k, j0, j1, scratch, n, Y, ldy);
        return;
    }
    if (n <= TL_GROUPED_MAX_N) { /* float types: groups of up to 4 rows */
        for (size_t i = 0; i < n; i += TL_MATVEC_MAX_N) {
            size_t g = n - i < TL_MATVEC_MAX_N ? n - i : TL_MATVEC_MAX_N;
            const float *Xi = X + i * ldx;
            float *Yi = Y + i * ldy;
            switch (type) {
            case TL_TYPE_F32: matvec_f32(w, k, j0, j1, Xi, ldx, g, Yi, ldy); break;
            case TL_TYPE_F16: matvec_f16(w, k, j0, j1, Xi, ldx, g, Yi, ldy); break;
            case TL_TYPE_BF16: matvec_bf16(w, k, j0, j1, Xi, ldx, g, Yi, ldy); break;
            default: return;
            }
        }
        return;
    }
    switch (type) {
    case TL_TYPE_F32: gemm_f32(w, k, j0, j1, X, ldx, n, Y, ldy, scratch); return;
    case TL_TYPE_F16: gemm_f16(w, k, j0, j1, X, ldx, n, Y, ldy, scratch); return;
    case TL_TYPE_BF16: gemm_bf16(w, k, j0, j1, X, ldx, n, Y, ldy, scratch); return;
    case TL_TYPE_Q8_0: gemm_q8_0(w, k, j0, j1, X, ldx, n, Y, ldy, scratch); return;
    case TL_TYPE_Q4_0: gemm_q4_0(w, k, j0, j1, X, ldx, n, Y, ldy, scratch); return;
    }
}

/* ---- small vector kernels ---- */

float tl_dot_f32_fast(const float *a, const float *b, size_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

void tl_axpy_f32_fast(float *y, float a, const float *x, size_t n) {
    __m256 va = _mm256_set1_ps(a);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
        _mm256_storeu_ps(y + i + 8,
                         _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8)));
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}
