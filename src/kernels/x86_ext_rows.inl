/* x86_ext_rows.inl - the row loop of the K-quant integer kernels, compiled twice: in
 * x86_matvec_ext.c (AVX2) and in x86avx512_matvec_ext.c (AVX-512), each defining first
 *   kblock                 one weight block unpacked for its vector width
 *   unpack_k(type, s, kb)  block s unpacked into *kb
 *   dot_k(kb, a, acc)      acc after the block's product with activation block a
 * Defines rows_k_any: weight rows [j0, j1) of W against n <= TL_EXT_ROWS_PER_PASS rows
 * of prepared activations (row i's blocks at act + i * k/256) into Y[i*ldy + j]. Each
 * block is unpacked once per weight row and dotted with all n rows; each output is the
 * f32 sum of its blocks' steps in block order, then hsum, whatever n is.
 */

/* Inlined per type (rows_k_any) so that unpack_k's switch folds away. */
static ALWAYS_INLINE void rows_k(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                                 const tl_block_k_act *act, size_t n, float *Y, size_t ldy) {
    const size_t bb = k_block_bytes(type), nb = k / TL_QK_K, distance = tl__prefetch_distance();
    __m256 acc[TL_EXT_ROWS_PER_PASS];
    for (size_t j = j0; j < j1; j++) {
        const uint8_t *w = W + j * nb * bb;
        for (size_t i = 0; i < n; i++) acc[i] = _mm256_setzero_ps();
        for (size_t b = 0; b < nb; b++) {
            kblock kb;
            UNROLL for (size_t o = 0; o < bb; o += 64) /* 64 bytes apart: no line is skipped */
                _mm_prefetch((const char *)(w + b * bb + distance + o), _MM_HINT_T0);
            unpack_k(type, w + b * bb, &kb);
            for (size_t i = 0; i < n; i++) acc[i] = dot_k(&kb, act + i * nb + b, acc[i]);
        }
        for (size_t i = 0; i < n; i++) Y[i * ldy + j] = hsum(acc[i]);
    }
}

/* Specialized for one row of X (decode), where the unpacked block stays in registers. */
#define ROWS_K_CASE(T)                                                                       \
    case T:                                                                                  \
        if (n == 1) rows_k(T, W, k, j0, j1, act, 1, Y, ldy);                                 \
        else rows_k(T, W, k, j0, j1, act, n, Y, ldy);                                        \
        return;

static void rows_k_any(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                       const tl_block_k_act *act, size_t n, float *Y, size_t ldy) {
    switch (type) {
    ROWS_K_CASE(TL_TYPE_Q2_K)
    ROWS_K_CASE(TL_TYPE_Q3_K)
    ROWS_K_CASE(TL_TYPE_Q4_K)
    ROWS_K_CASE(TL_TYPE_Q5_K)
    default: ROWS_K_CASE(TL_TYPE_Q6_K)
    }
}
#undef ROWS_K_CASE
