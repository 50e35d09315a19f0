/* x86_matvec_q.inl - the Q8_0 / Q4_0 int8 matvec, compiled twice: in x86_matvec.c as
 * tl__matvec_q_avx2 (maddubs + madd) and in x86vnni_matmul.c, with -mavxvnni, as
 * tl__matvec_q_vnni (vpdpbusd fuses the two). Include after defining TL_MATVEC_Q_NAME.
 * Integer sums are exact either way (|w| <= 128, |q_x| <= 127: no int16 saturation), so
 * both produce bit-identical results. See x86_simd.h for the activation layout.
 */
/* Lane sums of 4 adjacent u8*s8 products (int32 lanes). */
static ALWAYS_INLINE __m256i dot4_u8s8(__m256i u, __m256i s) {
#ifdef __AVXVNNI__
    return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* acc + lane sums of 4 adjacent u8*s8 products, for u, s small enough that maddubs's
 * int16 pair sums of two calls do not saturate (Q4_0: u <= 15). */
static ALWAYS_INLINE __m256i dot4x2_u8s8(__m256i u0, __m256i s0, __m256i u1, __m256i s1) {
#ifdef __AVXVNNI__
    return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u0, s0), u1, s1);
#else
    __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
    return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
#endif
}

/* Eight copies of the fp16 scale at p (vpbroadcastw from memory: one load-and-broadcast,
 * cheaper than building the pattern in a general register and moving it across). */
static ALWAYS_INLINE __m128i broadcast_f16(const uint8_t *p) {
    return _mm_broadcastw_epi16(_mm_loadu_si16(p));
}

/* Bytes of one weight block. */
static ALWAYS_INLINE size_t q_block_bytes(tl_type type) { return type == TL_TYPE_Q8_0 ? 34 : 18; }

/* One pair of weight blocks at p (or one block when `single`) against N activation
 * rows (record r of each row at xa, rows `row_step` bytes apart), into acc[i]. */
static ALWAYS_INLINE void q_pair(tl_type type, const int N, const int single, const uint8_t *p,
                                 const uint8_t *xa, size_t row_step, __m256 *acc) {
    const size_t bb = q_block_bytes(type);
    __m256 dw;
    if (type == TL_TYPE_Q8_0) {
        /* lanes A A B B A A B B */
        __m128i ha = broadcast_f16(p), hb = single ? ha : broadcast_f16(p + bb);
        dw = _mm256_cvtph_ps(_mm_blend_epi32(ha, hb, 0xa));
        __m256i wa = loadu256(p + 2), ua = _mm256_abs_epi8(wa);
        __m256i wb = single ? wa : loadu256(p + bb + 2), ub = _mm256_abs_epi8(wb);
        UNROLL
        for (int i = 0; i < N; i++) {
            const uint8_t *x = xa + i * row_step;
            __m256i sa = dot4_u8s8(ua, _mm256_sign_epi8(loadu256(x + ACT_Q), wa));
            __m256i s;
            if (single) {
                s = sa;
            } else {
                __m256i sb = dot4_u8s8(ub, _mm256_sign_epi8(loadu256(x + ACT_Q + TL_QK), wb));
                s = _mm256_add_epi32(_mm256_unpacklo_epi64(sa, sb), _mm256_unpackhi_epi64(sa, sb));
            }
            __m256 sc = _mm256_mul_ps(dw, load_act_d(x));
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sc, acc[i]);
        }
    } else {
        /* lanes A x4 | B x4 (single: A x8, nibbles in element order) */
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        __m128i ha = broadcast_f16(p), hb = single ? ha : broadcast_f16(p + bb);
        dw = _mm256_cvtph_ps(_mm_blend_epi32(ha, hb, 0xc));
        __m256i lo, hi;
        if (single) {
            __m128i t = loadu128(p + 2);
            lo = _mm256_and_si256(_mm256_insertf128_si256(_mm256_castsi128_si256(t), _mm_srli_epi16(t, 4), 1), m4);
            hi = _mm256_setzero_si256();
        } else {
            __m256i v = _mm256_insertf128_si256(_mm256_castsi128_si256(loadu128(p + 2)), loadu128(p + bb + 2), 1);
            lo = _mm256_and_si256(v, m4);
            hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
        UNROLL
        for (int i = 0; i < N; i++) {
            const uint8_t *x = xa + i * row_step;
            __m256i s = single ? dot4_u8s8(lo, loadu256(x + ACT_Q))
                               : dot4x2_u8s8(lo, loadu256(x + ACT_Q), hi, loadu256(x + ACT_Q + TL_QK));
            s = _mm256_sub_epi32(s, loadu256(x + ACT_C));
            __m256 sc = _mm256_mul_ps(dw, load_act_d(x));
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sc, acc[i]);
        }
    }
}

/* xa holds N rows of ceil(k/64) pair records (act_record_bytes(type) each). G pairs per
 * step give each row G independent FMA chains. */
static ALWAYS_INLINE void matvec_q(tl_type type, const int N, const uint8_t *W, size_t k,
                                   size_t j0, size_t j1, const uint8_t *xa, float *Y,
                                   size_t ldy) {
    const int G = N == 1 ? 2 : 1;
    const size_t nb = k / TL_QK, np = (nb + 1) / 2, bb = q_block_bytes(type), row_bytes = nb * bb;
    const size_t rec = act_record_bytes(type), row_step = np * rec;
    const size_t full = nb / 2; /* pairs with two blocks */
    const size_t pf = tl__prefetch_distance();
    prefetch_start(W + j0 * row_bytes, (j1 - j0) * row_bytes, pf);
    for (size_t j = j0; j < j1; j++) {
        const uint8_t *p = W + j * row_bytes;
        __m256 acc[2][TL_MATVEC_MAX_N];
        UNROLL
        for (int g = 0; g < G; g++)
            UNROLL
            for (int i = 0; i < N; i++) acc[g][i] = _mm256_setzero_ps();
        size_t r = 0;
        for (; r + G <= full; r += G, p += 2 * G * bb) {
            UNROLL
            for (size_t o = 0; o < 2 * G * bb; o += 64)
                _mm_prefetch((const char *)(p + pf + o), _MM_HINT_T0);
            UNROLL
            for (int g = 0; g < G; g++) q_pair(type, N, 0, p + 2 * g * bb, xa + (r + g) * rec, row_step, acc[g]);
        }
        for (; r < full; r++, p += 2 * bb) q_pair(type, N, 0, p, xa + r * rec, row_step, acc[0]);
        if (nb & 1) q_pair(type, N, 1, p, xa + r * rec, row_step, acc[0]);
        UNROLL
        for (int i = 0; i < N; i++) {
            __m256 s = acc[0][i];
            UNROLL
            for (int g = 1; g < G; g++) s = _mm256_add_ps(s, acc[g][i]);
            Y[i * ldy + j] = hsum(s);
        }
    }
}

#define TL_MATVEC_Q_CASES(T)                                                             \
    switch (n) {                                                                         \
    case 1: matvec_q(T, 1, W, k, j0, j1, xa, Y, ldy); return;                            \
    case 2: matvec_q(T, 2, W, k, j0, j1, xa, Y, ldy); return;                            \
    case 3: matvec_q(T, 3, W, k, j0, j1, xa, Y, ldy); return;                            \
    default: matvec_q(T, 4, W, k, j0, j1, xa, Y, ldy); return;                           \
    }

void TL_MATVEC_Q_NAME(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                      const uint8_t *xa, size_t n, float *Y, size_t ldy) {
    if (type == TL_TYPE_Q8_0) TL_MATVEC_Q_CASES(TL_TYPE_Q8_0)
    else TL_MATVEC_Q_CASES(TL_TYPE_Q4_0)
}
