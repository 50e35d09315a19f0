/* x86_act.c - activation rounding for Q8_0/Q4_0 products (the contract of kernels.h):
 * tl_quant_act_row_fast rounds rows to (d, q) blocks bit-exact with quant.c's, and
 * tl_matmul_act_prepare lays them out as the pair records the int8 matvec reads
 * (x86_simd.h describes the layout) or as the records the int8 GEMMs read (x86_matmul.h),
 * whichever the product takes. Prepared once per product (in row ranges that may run at
 * once), shared read-only by all threads.
 */
#include "kernels/x86_dequant.h"
#include "kernels/x86_matmul.h"

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

size_t tl__act_floats(tl_type type, size_t k, size_t n) {
    if (!tl_type_int8_gemm(type) || n == 0 || n > TL_GROUPED_MAX_N) return 0;
    return n * ((k / TL_QK + 1) / 2) * (act_record_bytes(type) / sizeof(float));
}

void tl__act_records(tl_type type, size_t k, const float *X, size_t ldx, size_t i0, size_t i1,
                     tl__act_rec *act) {
    const size_t nb = k / TL_QK, slice = 16;
    const int32_t off = type == TL_TYPE_Q8_0 ? 128 : 8;
    for (size_t i = i0; i < i1; i++)
        for (size_t b0 = 0; b0 < nb; b0 += slice) {
            const size_t kb = nb - b0 < slice ? nb - b0 : slice;
            tl_block_q8_act blk[16];
            tl_quant_act_row_fast(X + i * ldx + b0 * TL_QK, blk, kb * TL_QK);
            for (size_t b = 0; b < kb; b++) {
                tl__act_rec *rec = &act[i * nb + b0 + b];
                __m256i q = loadu256(blk[b].q);
                /* sum of the 32 signed bytes: widen to 16 bits against ones, then pairs */
                __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
                __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
                __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
                h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
                h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
                rec->d = blk[b].d;
                rec->corr = -off * _mm_cvtsi128_si32(h);
                _mm256_storeu_si256((__m256i *)(void *)rec->q, q);
            }
        }
}

int tl__act_takes_records(tl_type type, tl_weights_layout layout, size_t n) {
    if (!tl_type_int8_gemm(type) || n == 0) return 0;
    return layout == TL_LAYOUT_PANELS || n > tl__q_gemm_after_n(tl__cpu_widest_isa());
}

/* Q4_1, Q5_x and the K-quants: their own records (x86_matvec_ext.c), for every n. */
static int ext_type(tl_type type) { return tl_type_rounds_act(type) && !tl_type_int8_gemm(type); }

size_t tl_matmul_act_floats(tl_type type, tl_weights_layout layout, size_t k, size_t n) {
    if (ext_type(type)) return layout == TL_LAYOUT_ROWS ? tl__ext_act_floats(type, k, n) : 0;
    if (tl__act_takes_records(type, layout, n))
        return n * (k / TL_QK) * sizeof(tl__act_rec) / sizeof(float);
    if (layout == TL_LAYOUT_PANELS) return 0;
    return tl__act_floats(type, k, n);
}

void tl_matmul_act_prepare(tl_type type, tl_weights_layout layout, size_t k, const float *X,
                           size_t ldx, size_t n, size_t i0, size_t i1, float *act) {
    if (i1 > n) i1 = n;
    if (ext_type(type)) {
        if (layout == TL_LAYOUT_ROWS) tl__ext_act_prepare(type, k, X, ldx, i0, i1, act);
        return;
    }
    if (tl__act_takes_records(type, layout, n)) {
        tl__act_records(type, k, X, ldx, i0, i1, (tl__act_rec *)(void *)act);
        return;
    }
    if (tl__act_floats(type, k, n) != 0) tl__act_pairs(type, k, X, ldx, i0, i1, act);
}

void tl__act_pairs(tl_type type, size_t k, const float *X, size_t ldx, size_t i0, size_t i1,
                   float *act) {
    uint8_t *xa = (uint8_t *)act;
    const size_t row_step = (k / TL_QK + 1) / 2 * act_record_bytes(type);
    for (size_t i = i0; i < i1; i++) act_pairs(type, X + i * ldx, k, xa + i * row_step);
}
