/* x86_colmat.c - tl_colmat_fast, products with weights in the flash layout (kernels.h,
 * "column products") on AVX2+FMA+F16C, and its dispatch to the 512-bit kernels of
 * x86avx512_colmat.c where the CPU has them and TIERLLM_ISA does not cap them away.
 *
 * Arithmetic: each output is one f32 FMA chain over the selected channels in the order of
 * chan, from y = +0 (tl_colmat_fast_add: from Y's value, so consecutive parts of chan in
 * as many calls make the same chain): y = fma(x, w, y) with w the weight exactly
 * (Q8_0/Q4_0: w = d*q, the f16 scale times the integer quant, a product of at most
 * 11 + 8 significant bits, exact in f32, so the weight can be decoded once into a GEMM
 * panel and every row multiplies x as given). Both paths below, on both instruction sets,
 * run that same chain, so the result does not depend on n, on the split of [o0, o1) or
 * on the set (for finite weights: n = 1 skips channels whose x is 0, which add +-0
 * elsewhere).
 *  - streaming (decode, memory-bound; n <= STREAM_MAX_N, the float and Q8_0/Q4_0 types,
 *    and every type at n = 1): passes of up to STREAM_ROWS rows (AVX2: STREAM_ROWS_AVX2,
 *    for its registers) over outputs in tiles of TILE1 / rows. Y's tile is the
 *    accumulator (in L1) while the selected runs' slices stream through it GROUP at a
 *    time: one load and store of the accumulator per GROUP runs, GROUP streams in flight,
 *    each slice read once per pass and decoded once for all the pass's rows. While one
 *    group is summed the next group's slices are prefetched at the same offsets: the runs
 *    are not contiguous when chan skips channels, so the hardware prefetcher sees only
 *    short streams; for the same reason long slices (wide tiles) read faster than short
 *    ones, hence tiles as wide as L1 allows. A channel whose x is exactly 0 in every row
 *    of the pass is not read. The types without a 32-element decoder (below) dequantize
 *    each slice into scratch and add it.
 *  - GEMM (prefill, larger batches): k is the channel list. For each block of up to
 *    ROW_BLOCK rows, tile of TILE outputs and chunk of KC channels, the chunk's slices are
 *    decoded once into a panel of NR-wide strips of w (L2) and the rows' x of the chunk
 *    gathered (xp; a run of consecutive channels copied whole); a register micro-kernel
 *    (MR rows x NR outputs) adds a strip (L1) into Y, which the first chunk overwrites
 *    (tl_colmat_fast_add: adds to).
 *    Rows are cut into blocks of near-equal size (no short last block decoding every
 *    panel for a few rows). A block's Y tile is reused across the chunks from L2 where
 *    L2 holds it beside the panel. Streaming
 *    costs about as much at STREAM_MAX_N rows (its passes' arithmetic grows with n; the
 *    GEMM decodes the weights once).
 * Scratch holds the panel, one dequantized slice and xp; there is no
 * global state, so threads with disjoint [o0, o1), each with its own scratch, may run at
 * once.
 */
#include <math.h>
#include <string.h>
#include "kernels/x86_dequant.h"
#include "kernels/x86_matmul.h"
#include "kernels/quant_ext.h"

#define STREAM_MAX_N TL_COLMAT_STREAM_MAX_N /* streaming: rows at most (more: the GEMM) */
#define STREAM_ROWS 4   /* streaming: rows per pass (AVX-512) */
#define STREAM_ROWS_AVX2 2
#define TILE1 4096      /* streaming: outputs x rows per tile (a 16 KiB accumulator) */
#define GROUP 8         /* streaming: runs summed per pass over the accumulator */
#define TILE 512        /* GEMM: outputs per tile (a multiple of 32) */
#define KC 128          /* GEMM: channels per panel */
#define ROW_BLOCK 256   /* GEMM: rows per block */
#define MR 6            /* AVX2 micro-tile: 6 rows x 16 outputs, 12 accumulators */
#define NR 16
#define NR512 32        /* the AVX-512 kernel's strips (x86avx512_colmat.c) */

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Outputs of one GEMM tile for a call over `outs` outputs (a multiple of 32). */
static size_t tile_width(size_t outs) { return min_sz((outs + 31) / 32 * 32, TILE); }

/* The GEMM's scratch: panel (KC x t), one dequantized slice (t), xp (rows x KC); more
 * than streaming's one slice. */
static size_t rows_scratch(size_t t, size_t rows) { return KC * t + t + rows * KC; }

size_t tl_colmat_scratch_floats(size_t outs, size_t n) {
    size_t f = min_sz((outs + 31) / 32 * 32, TILE1); /* streaming: one dequantized slice */
    if (n > 1) f = rows_scratch(tile_width(outs), min_sz(n, ROW_BLOCK));
    return (f + 15) / 16 * 16; /* whole cache lines: per-thread slices stay aligned */
}

/* 1 for the types decoded in registers. */
static int simd_type(tl_type type) {
    return type == TL_TYPE_F32 || type == TL_TYPE_F16 || type == TL_TYPE_BF16 ||
           type == TL_TYPE_Q8_0 || type == TL_TYPE_Q4_0;
}

/* ---- the K-quants' slices ----
 * Q4_K and Q6_K (Q4_K_M's types) are decoded 8 elements at a time with tl_dequant_row's
 * expressions and rounding order ((d*scale)*q - dmin*min, (d*scale)*q), so to the same
 * bits; the other types take tl_dequant_row itself. */

/* The low 8 bytes of v, unsigned, as floats. */
static ALWAYS_INLINE __m256 u8x8_to_ps(__m128i v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
}

static void dequant_q4_k(const uint8_t *s, float *y, size_t n) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (size_t b = 0; b < n / TL_QK_K; b++, s += sizeof(tl_block_q4_k), y += TL_QK_K) {
        const float d = load_f16_scale(s), dmin = load_f16_scale(s + 2);
        for (int j = 0; j < 4; j++) { /* groups 2j (low nibbles) and 2j + 1 (high ones) */
            const __m256i raw = loadu256(s + 16 + 32 * j);
            const __m256i nib[2] = {_mm256_and_si256(raw, m4),
                                    _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4)};
            for (int h = 0; h < 2; h++) {
                int sc, mn;
                tl__k4_scale_min(s + 4, 2 * j + h, &sc, &mn);
                const __m256 d1 = _mm256_set1_ps(d * (float)sc);
                const __m256 m1 = _mm256_set1_ps(dmin * (float)mn);
                const __m128i q[2] = {_mm256_castsi256_si128(nib[h]),
                                      _mm256_extracti128_si256(nib[h], 1)};
                float *yg = y + 32 * (2 * j + h);
                for (int k = 0; k < 4; k++) {
                    const __m256 v = u8x8_to_ps(k & 1 ? _mm_srli_si128(q[k / 2], 8) : q[k / 2]);
                    _mm256_storeu_ps(yg + 8 * k, _mm256_sub_ps(_mm256_mul_ps(d1, v), m1));
                }
            }
        }
    }
}

static void dequant_q6_k(const uint8_t *s, float *y, size_t n) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    const __m256i o32 = _mm256_set1_epi8(32);
    for (size_t b = 0; b < n / TL_QK_K; b++, s += sizeof(tl_block_q6_k), y += TL_QK_K) {
        const tl_block_q6_k *x = (const void *)s;
        const float d = load_f16_scale(s + offsetof(tl_block_q6_k, d));
        for (int h = 0; h < 2; h++) { /* element 128h + 32p + l, l < 32 */
            const __m256i qh = loadu256(x->qh + 32 * h);
            for (int p = 0; p < 4; p++) {
                const __m256i ql = loadu256(x->ql + 64 * h + 32 * (p & 1));
                const __m256i lo = p < 2 ? _mm256_and_si256(ql, m4)
                                         : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), m2);
                const __m256i q =
                    _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), o32);
                const __m128i qq[2] = {_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1)};
                float *yp = y + 128 * h + 32 * p;
                for (int k = 0; k < 4; k++) {
                    const int e = 128 * h + 32 * p + 8 * k;
                    const __m256 ds = _mm256_set1_ps(d * (float)x->scales[e / 16]);
                    const __m256 v = i8x8_to_ps(k & 1 ? _mm_srli_si128(qq[k / 2], 8) : qq[k / 2]);
                    _mm256_storeu_ps(yp + 8 * k, _mm256_mul_ps(ds, v));
                }
            }
        }
    }
}

/* tl_dequant_row's values for the types without a register decoder above. */
static void dequant_slice_other(tl_type type, const uint8_t *p, float *dst, size_t n) {
    if (type == TL_TYPE_Q4_K) dequant_q4_k(p, dst, n);
    else if (type == TL_TYPE_Q6_K) dequant_q6_k(p, dst, n);
    else tl_dequant_row(type, p, dst, n);
}

/* ---- streaming ---- */

/* y[r*ldy + o] = fma(x[r*ldxg + g] (times the block's d), values, ...) for g < G in order,
 * r < N, o < len; meanwhile the slices pf[] are prefetched at the same offsets. */
static ALWAYS_INLINE void runs(tl_type type, const int G, const int N, const uint8_t *const *run,
                               const float *x, size_t ldxg, size_t len, float *y, size_t ldy,
                               const uint8_t *const *pf, size_t npf) {
    const size_t bb = bytes32(type), es = tl_type_block_bytes(type);
    size_t o = 0, b = 0;
    for (; o + 32 <= len; o += 32, b += bb) {
        for (size_t h = 0; h < npf; h++) {
            _mm_prefetch((const char *)(pf[h] + b), _MM_HINT_T1);
            if (type == TL_TYPE_F32) _mm_prefetch((const char *)(pf[h] + b + 64), _MM_HINT_T1);
        }
        __m256 acc[STREAM_ROWS_AVX2][4];
        UNROLL
        for (int r = 0; r < N; r++)
            UNROLL
            for (int q = 0; q < 4; q++) acc[r][q] = _mm256_loadu_ps(y + r * ldy + o + 8 * q);
        UNROLL
        for (int g = 0; g < G; g++) {
            __m256 w[4];
            dequant32(type, run[g] + b, w);
            UNROLL
            for (int r = 0; r < N; r++) {
                const __m256 xv = _mm256_broadcast_ss(x + r * ldxg + g);
                UNROLL
                for (int q = 0; q < 4; q++) acc[r][q] = _mm256_fmadd_ps(xv, w[q], acc[r][q]);
            }
        }
        UNROLL
        for (int r = 0; r < N; r++)
            UNROLL
            for (int q = 0; q < 4; q++) _mm256_storeu_ps(y + r * ldy + o + 8 * q, acc[r][q]);
    }
    for (int r = 0; r < N && o < len; r++) { /* float types' tails */
        float *yr = y + r * ldy;
        size_t e = o;
        for (; e + 8 <= len; e += 8) {
            __m256 a = _mm256_loadu_ps(yr + e);
            for (int g = 0; g < G; g++)
                a = _mm256_fmadd_ps(_mm256_broadcast_ss(x + r * ldxg + g),
                                    load8(type, run[g] + e * es), a);
            _mm256_storeu_ps(yr + e, a);
        }
        for (; e < len; e++) {
            float a = yr[e];
            for (int g = 0; g < G; g++) a = fmaf(x[r * ldxg + g], load1(type, run[g] + e * es), a);
            yr[e] = a;
        }
    }
}

#define RUNS_N(T, G)                                                                     \
    switch (N) {                                                                         \
    case 1: runs(T, G, 1, run, x, ldxg, len, y, ldy, pf, npf); return;                   \
    default: runs(T, G, 2, run, x, ldxg, len, y, ldy, pf, npf); return;                  \
    }
#define RUNS_CASES(T)                                                                    \
    if (G == GROUP) { RUNS_N(T, GROUP) }                                                 \
    else { RUNS_N(T, 1) }

/* runs() for G == GROUP or 1, N <= STREAM_ROWS_AVX2. */
static void runs_avx2(tl_type type, const uint8_t *const *run, const float *x, size_t ldxg,
                      size_t G, size_t N, size_t len, float *y, size_t ldy,
                      const uint8_t *const *pf, size_t npf) {
    switch (type) {
    case TL_TYPE_F32: RUNS_CASES(TL_TYPE_F32)
    case TL_TYPE_F16: RUNS_CASES(TL_TYPE_F16)
    case TL_TYPE_BF16: RUNS_CASES(TL_TYPE_BF16)
    case TL_TYPE_Q8_0: RUNS_CASES(TL_TYPE_Q8_0)
    case TL_TYPE_Q4_0: RUNS_CASES(TL_TYPE_Q4_0)
    default: return;
    }
}

/* Up to GROUP selected channels with an x that is not 0 (in some row), over outputs
 * [t0, t0 + len): their slices (run + the offset of t0) and x[r][g]; g = 0 past the end. */
typedef struct group {
    size_t g, t0, len;
    const uint8_t *run[GROUP];
    float x[STREAM_ROWS][GROUP];
} group;

/* The walk over the groups in the order they are summed: tile by tile (of `tile`
 * outputs), chan in its order within each; t is the position in chan, [t0, o1) what is
 * left of the outputs. */
typedef struct walker {
    const float *X;
    size_t ldx, n, tile, t, t0, o1;
    int done;
} walker;

static void walk_next(tl_type type, const uint8_t *W, size_t run_bytes, const int32_t *chan,
                      size_t nc, walker *wk, group *gr) {
    gr->g = gr->t0 = gr->len = 0;
    while (!wk->done) {
        const size_t len = min_sz(wk->o1 - wk->t0, wk->tile);
        const size_t off = tl_type_row_bytes(type, wk->t0);
        while (wk->t < nc && gr->g < GROUP) {
            const size_t c = (size_t)chan[wk->t++];
            int nz = 0;
            for (size_t r = 0; r < wk->n; r++) {
                gr->x[r][gr->g] = wk->X[r * wk->ldx + c];
                nz |= gr->x[r][gr->g] != 0.0f;
            }
            if (nz) gr->run[gr->g++] = W + c * run_bytes + off;
        }
        gr->t0 = wk->t0, gr->len = len;
        if (wk->t == nc) { /* the tile is done: the next one re-walks chan */
            wk->t = 0;
            wk->t0 += len;
            wk->done = wk->t0 >= wk->o1;
        }
        if (gr->g) return;
    }
}

/* y[o] = fma(x, w[o], y[o]), o < len. */
static void axpy_fma(float *y, float x, const float *w, size_t len) {
    const __m256 xv = _mm256_set1_ps(x);
    size_t o = 0;
    for (; o + 8 <= len; o += 8)
        _mm256_storeu_ps(y + o,
                         _mm256_fmadd_ps(xv, _mm256_loadu_ps(w + o), _mm256_loadu_ps(y + o)));
    for (; o < len; o++) y[o] = fmaf(x, w[o], y[o]);
}

/* Rows of X the streaming path takes at once on instruction set isa. */
static size_t stream_rows(tl__isa isa) {
    return isa == TL_ISA_AVX512VNNI ? STREAM_ROWS : STREAM_ROWS_AVX2;
}

/* One pass: n <= stream_rows(isa) rows, Y's tiles of n x tile outputs (<= TILE1 floats). */
static void colmat_stream(tl__isa isa, tl_type type, const uint8_t *W, size_t run_elems,
                          const int32_t *chan, size_t nc, size_t o0, size_t o1, const float *X,
                          size_t ldx, size_t n, float *Y, size_t ldy, float *scratch, int add) {
    const size_t run_bytes = tl_type_row_bytes(type, run_elems);
    const size_t tile = TILE1 / n / TL_QK_K * TL_QK_K; /* whole blocks of every type */
    for (size_t r = 0; r < n && !add; r++)
        memset(Y + r * ldy + o0, 0, (o1 - o0) * sizeof(float));
    walker wk = {X, ldx, n, tile, 0, o0, o1, 0};
    group cur, nxt;
    walk_next(type, W, run_bytes, chan, nc, &wk, &cur);
    if (!simd_type(type)) { /* each slice dequantized into scratch, then added */
        for (; cur.g; cur = nxt) {
            walk_next(type, W, run_bytes, chan, nc, &wk, &nxt);
            const size_t slice = tl_type_row_bytes(type, cur.len);
            for (size_t g = 0; g < cur.g; g++) {
                if (g + 1 < cur.g || nxt.g)
                    prefetch_start(g + 1 < cur.g ? cur.run[g + 1] : nxt.run[0], slice, slice);
                dequant_slice_other(type, cur.run[g], scratch, cur.len);
                for (size_t r = 0; r < n; r++)
                    axpy_fma(Y + r * ldy + cur.t0, cur.x[r][g], scratch, cur.len);
            }
        }
        return;
    }
    /* cur is summed while nxt's slices are prefetched (into L2: a group's slices are
     * already as many bytes ahead as L1 holds beside the accumulator in wide tiles) */
    walk_next(type, W, run_bytes, chan, nc, &wk, &nxt);
    const size_t pfd = tl__prefetch_distance();
    for (size_t g = 0; g < cur.g; g++)
        prefetch_start(cur.run[g], tl_type_row_bytes(type, cur.len), pfd / GROUP);
    for (; cur.g; cur = nxt, walk_next(type, W, run_bytes, chan, nc, &wk, &nxt)) {
        /* a whole group at once, the last ones of a tile one by one (the same chain) */
        const size_t step = cur.g == GROUP ? GROUP : 1;
        for (size_t g = 0; g < cur.g; g += step) {
            const size_t npf = g == 0 ? nxt.g : 0;
            float *y = Y + cur.t0;
#ifdef TL_HAVE_AVX512VNNI
            if (isa == TL_ISA_AVX512VNNI) {
                tl__colmat_runs_avx512(type, cur.run + g, &cur.x[0][g], GROUP, step, n, cur.len,
                                       y, ldy, nxt.run, npf);
                continue;
            }
#endif
            runs_avx2(type, cur.run + g, &cur.x[0][g], GROUP, step, n, cur.len, y, ldy, nxt.run,
                      npf);
        }
    }
    (void)isa;
}

/* ---- GEMM ---- */

/* Decodes elements [t0, t0 + tw) of the runs of chan[0..kc) (off: the bytes before t0)
 * into panel: element o of channel c at panel[(o / nr) * kc * nr + c * nr + o % nr], zeros
 * up to a whole strip. tmp: tw floats. */
static ALWAYS_INLINE void pack_runs(tl_type type, const size_t nr, const uint8_t *W,
                                    size_t run_bytes, const int32_t *chan, size_t kc, size_t off,
                                    size_t tw, float *panel, float *tmp) {
    const size_t es = tl_type_block_bytes(type), wpad = (tw + nr - 1) / nr * nr;
    const size_t sstep = kc * nr;
    for (size_t c = 0; c < kc; c++) {
        const uint8_t *p = W + (size_t)chan[c] * run_bytes + off;
        float *dst = panel + c * nr;
        size_t o = 0;
        if (simd_type(type)) {
            for (; o + 32 <= tw; o += 32, p += bytes32(type)) {
                __m256 w[4];
                dequant32(type, p, w);
                UNROLL
                for (size_t q = 0; q < 4; q++) {
                    const size_t e = o + 8 * q;
                    _mm256_storeu_ps(dst + e / nr * sstep + e % nr, w[q]);
                }
            }
            for (; o + 8 <= tw; o += 8, p += 8 * es)
                _mm256_storeu_ps(dst + o / nr * sstep + o % nr, load8(type, p));
            for (; o < tw; o++, p += es) dst[o / nr * sstep + o % nr] = load1(type, p);
        } else {
            dequant_slice_other(type, p, tmp, tw);
            for (; o < tw; o += 8) /* tw: whole blocks, a multiple of 32 */
                _mm256_storeu_ps(dst + o / nr * sstep + o % nr, _mm256_loadu_ps(tmp + o));
        }
        for (; o < wpad; o++) dst[o / nr * sstep + o % nr] = 0.0f;
    }
}

#define PACK(T)                                                                          \
    if (nr == NR) pack_runs(T, NR, W, run_bytes, chan, kc, off, tw, panel, tmp);         \
    else pack_runs(T, NR512, W, run_bytes, chan, kc, off, tw, panel, tmp);               \
    return;

static void pack_panel(tl_type type, const uint8_t *W, size_t run_bytes, const int32_t *chan,
                       size_t kc, size_t t0, size_t tw, size_t nr, float *panel, float *tmp) {
    const size_t off = tl_type_row_bytes(type, t0);
    switch (type) {
    case TL_TYPE_F32: PACK(TL_TYPE_F32)
    case TL_TYPE_F16: PACK(TL_TYPE_F16)
    case TL_TYPE_BF16: PACK(TL_TYPE_BF16)
    case TL_TYPE_Q8_0: PACK(TL_TYPE_Q8_0)
    case TL_TYPE_Q4_0: PACK(TL_TYPE_Q4_0)
    default: PACK(type)
    }
}

/* C[r*ldc + 0..15] = fma chain over c < kc of xp[r*ldxp + c] * strip[c*16 + 0..15], r < M,
 * from C's values (add) or +0. */
static ALWAYS_INLINE void ukernel(const int M, size_t kc, const float *strip, const float *xp,
                                  size_t ldxp, float *C, size_t ldc, int add) {
    __m256 acc[MR][2];
    UNROLL
    for (int r = 0; r < M; r++) {
        acc[r][0] = add ? _mm256_loadu_ps(C + r * ldc) : _mm256_setzero_ps();
        acc[r][1] = add ? _mm256_loadu_ps(C + r * ldc + 8) : _mm256_setzero_ps();
    }
#pragma GCC unroll 4
    for (size_t c = 0; c < kc; c++) {
        const __m256 b0 = _mm256_loadu_ps(strip + c * NR);
        const __m256 b1 = _mm256_loadu_ps(strip + c * NR + 8);
        UNROLL
        for (int r = 0; r < M; r++) {
            const __m256 a = _mm256_broadcast_ss(xp + r * ldxp + c);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    UNROLL
    for (int r = 0; r < M; r++) {
        _mm256_storeu_ps(C + r * ldc, acc[r][0]);
        _mm256_storeu_ps(C + r * ldc + 8, acc[r][1]);
    }
}

static void ukernel_any(size_t m, size_t kc, const float *strip, const float *xp, size_t ldxp,
                        float *C, size_t ldc, int add) {
    switch (m) {
    case 6: ukernel(6, kc, strip, xp, ldxp, C, ldc, add); break;
    case 5: ukernel(5, kc, strip, xp, ldxp, C, ldc, add); break;
    case 4: ukernel(4, kc, strip, xp, ldxp, C, ldc, add); break;
    case 3: ukernel(3, kc, strip, xp, ldxp, C, ldc, add); break;
    case 2: ukernel(2, kc, strip, xp, ldxp, C, ldc, add); break;
    default: ukernel(1, kc, strip, xp, ldxp, C, ldc, add); break;
    }
}

/* One strip for m rows: Y[r*ldy + j], j < nj (<= NR); a partial strip goes through a
 * tile holding Y's values, so its chain is the same. */
static void strip_avx2(const float *strip, size_t kc, const float *xp, size_t ldxp, size_t m,
                       float *Y, size_t ldy, size_t nj, int add) {
    for (size_t i0 = 0, t = 0; i0 < m; i0 += tl__tile_rows(m, t++, MR)) {
        const size_t mt = tl__tile_rows(m, t, MR);
        if (nj == NR) {
            ukernel_any(mt, kc, strip, xp + i0 * ldxp, ldxp, Y + i0 * ldy, ldy, add);
            continue;
        }
        float tile[MR * NR] = {0};
        for (size_t r = 0; r < mt && add; r++)
            memcpy(tile + r * NR, Y + (i0 + r) * ldy, nj * sizeof(float));
        ukernel_any(mt, kc, strip, xp + i0 * ldxp, ldxp, tile, NR, add);
        for (size_t r = 0; r < mt; r++)
            memcpy(Y + (i0 + r) * ldy, tile + r * NR, nj * sizeof(float));
    }
}

/* xp[r*KC + c] = X[r*ldx + chan[c]], r < rows, c < kc: a run of consecutive channels is
 * copied whole. */
static void gather_x(const float *X, size_t ldx, size_t rows, const int32_t *chan, size_t kc,
                     float *xp) {
    size_t run = 1;
    while (run < kc && chan[run] == chan[run - 1] + 1) run++;
    const int contiguous = run == kc;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = X + r * ldx;
        if (contiguous) memcpy(xp + r * KC, xr + chan[0], kc * sizeof(float));
        else
            for (size_t c = 0; c < kc; c++) xp[r * KC + c] = xr[chan[c]];
    }
}

static void colmat_rows(tl__isa isa, tl_type type, const uint8_t *W, size_t run_elems,
                        const int32_t *chan, size_t nc, size_t o0, size_t o1, const float *X,
                        size_t ldx, size_t n, float *Y, size_t ldy, float *scratch, int add) {
    const size_t run_bytes = tl_type_row_bytes(type, run_elems), tmax = tile_width(o1 - o0);
#ifdef TL_HAVE_AVX512VNNI
    const size_t nr = isa == TL_ISA_AVX512VNNI ? NR512 : NR;
#else
    const size_t nr = NR;
#endif
    float *panel = scratch, *tmp = panel + KC * tmax, *xp = tmp + tmax;
    /* blocks of equal rows (each block decodes every panel once: no short last block) */
    const size_t blocks = (n + ROW_BLOCK - 1) / ROW_BLOCK, per = (n + blocks - 1) / blocks;
    for (size_t i0 = 0; i0 < n; i0 += per) {
        const size_t rows = min_sz(n - i0, per);
        for (size_t t0 = o0; t0 < o1; t0 += TILE) {
            const size_t tw = min_sz(o1 - t0, TILE);
            for (size_t r = 0; r < rows && nc == 0 && !add; r++)
                memset(Y + (i0 + r) * ldy + t0, 0, tw * sizeof(float));
            for (size_t c0 = 0; c0 < nc; c0 += KC) {
                const size_t kc = min_sz(nc - c0, KC);
                gather_x(X + i0 * ldx, ldx, rows, chan + c0, kc, xp);
                pack_panel(type, W, run_bytes, chan + c0, kc, t0, tw, nr, panel, tmp);
                for (size_t s = 0; s * nr < tw; s++) {
                    const float *strip = panel + s * kc * nr;
                    float *ys = Y + i0 * ldy + t0 + s * nr;
                    const size_t nj = min_sz(nr, tw - s * nr);
#ifdef TL_HAVE_AVX512VNNI
                    if (isa == TL_ISA_AVX512VNNI) {
                        tl__colmat_strip_avx512(strip, kc, xp, KC, rows, ys, ldy, nj,
                                                c0 > 0 || add);
                        continue;
                    }
#endif
                    strip_avx2(strip, kc, xp, KC, rows, ys, ldy, nj, c0 > 0 || add);
                }
            }
        }
    }
}

/* ---- dispatch ---- */

static void colmat(tl__isa isa, tl_type type, const void *W, size_t run_elems,
                   const int32_t *chan, size_t nc, size_t o0, size_t o1, const float *X,
                   size_t ldx, size_t n, float *Y, size_t ldy, float *scratch, int add) {
    if (o0 >= o1 || n == 0) return;
    if (n > (simd_type(type) ? STREAM_MAX_N : 1)) {
        colmat_rows(isa, type, W, run_elems, chan, nc, o0, o1, X, ldx, n, Y, ldy, scratch,
                    add);
        return;
    }
    const size_t mr = stream_rows(isa);
    for (size_t i0 = 0, t = 0; i0 < n; i0 += tl__tile_rows(n, t++, mr))
        colmat_stream(isa, type, W, run_elems, chan, nc, o0, o1, X + i0 * ldx, ldx,
                      tl__tile_rows(n, t, mr), Y + i0 * ldy, ldy, scratch, add);
}

void tl_colmat_fast(tl_type type, const void *W, size_t run_elems, const int32_t *chan,
                    size_t nc, size_t o0, size_t o1, const float *X, size_t ldx, size_t n,
                    float *Y, size_t ldy, float *scratch) {
    colmat(tl__cpu_widest_isa(), type, W, run_elems, chan, nc, o0, o1, X, ldx, n, Y, ldy,
           scratch, 0);
}

void tl_colmat_fast_add(tl_type type, const void *W, size_t run_elems, const int32_t *chan,
                        size_t nc, size_t o0, size_t o1, const float *X, size_t ldx, size_t n,
                        float *Y, size_t ldy, float *scratch) {
    colmat(tl__cpu_widest_isa(), type, W, run_elems, chan, nc, o0, o1, X, ldx, n, Y, ldy,
           scratch, 1);
}

int tl__colmat_fast_isa(tl__isa isa, tl_type type, const void *W, size_t run_elems,
                        const int32_t *chan, size_t nc, size_t o0, size_t o1, const float *X,
                        size_t ldx, size_t n, float *Y, size_t ldy, float *scratch) {
    if ((isa == TL_ISA_AVXVNNI && !tl__cpu_has_avxvnni()) ||
        (isa == TL_ISA_AVX512VNNI && !tl__cpu_has_avx512vnni()))
        return 0;
    colmat(isa, type, W, run_elems, chan, nc, o0, o1, X, ldx, n, Y, ldy, scratch, 0);
    return 1;
}
