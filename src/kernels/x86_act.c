/* x86_act.c - activation rounding for Q8_0/Q4_0 products (the contract of kernels.h):
 * tl_quant_act_row_fast rounds rows to (d, q) blocks bit-exact with quant.c's, and
 * tl_matmul_act_prepare lays them out as the pair records the int8 matvec reads
 * (x86_simd.h describes the layout). Prepared once per product, shared read-only by all
 * threads.
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
    if (!tl_type_rounds_act(type) || n == 0 || n > TL_GROUPED_MAX_N) return 0;
    return n * ((k / TL_QK + 1) / 2) * (act_record_bytes(type) / sizeof(float));
}

size_t tl_matmul_act_floats(tl_type type, size_t k, size_t n) {
    if (n > TL_Q_GEMM_AFTER_N && tl__cpu_has_avx512vnni()) return 0; /* the int8 GEMM's */
    return tl__act_floats(type, k, n);
}

void tl_matmul_act_prepare(tl_type type, size_t k, const float *X, size_t ldx, size_t n,
                           float *act) {
    uint8_t *xa = (uint8_t *)act;
    const size_t row_step = (k / TL_QK + 1) / 2 * act_record_bytes(type);
    if (tl__act_floats(type, k, n) == 0) return;
    for (size_t i = 0; i < n; i++) act_pairs(type, X + i * ldx, k, xa + i * row_step);
}
