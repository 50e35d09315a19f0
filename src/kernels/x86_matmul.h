/* x86_matmul.h - the entry points between the x86 matmul files: the kernels x86_matmul.c
 * dispatches to (x86_matvec.c, x86_gemm.c) and the run-time CPU checks (x86_cpu.c).
 * Internal to src/kernels; the arguments are those of tl_matmul_fast (kernels.h).
 */
#ifndef TL_KERNELS_X86_MATMUL_H
#define TL_KERNELS_X86_MATMUL_H

#include <stddef.h>
#include <stdint.h>
#include "kernels/kernels.h"

/* F32/F16/BF16 weights, n <= TL_MATVEC_MAX_N rows (x86_simd.h); other types: nothing. */
void tl__matvec_float(tl_type type, const uint8_t *w, size_t k, size_t j0, size_t j1,
                      const float *X, size_t ldx, size_t n, float *Y, size_t ldy);
/* F32/F16/BF16, any n; scratch of at least tl__gemm_scratch_floats() floats. */
void tl__gemm(tl_type type, const uint8_t *w, size_t k, size_t j0, size_t j1, const float *X,
              size_t ldx, size_t n, float *Y, size_t ldy, float *scratch);
size_t tl__gemm_scratch_floats(void);
/* Floats of the matvec's prepared activations (pair records) for n <= TL_GROUPED_MAX_N
 * rows of Q8_0/Q4_0 (0 otherwise), whichever path this CPU takes (tl_matmul_act_floats
 * gives the int8 GEMM's records instead where the GEMM takes those rows). */
size_t tl__act_floats(tl_type type, size_t k, size_t n);
/* Rows [i0, i1) of X as the matvec's pair records (x86_simd.h), whatever the CPU. */
void tl__act_pairs(tl_type type, size_t k, const float *X, size_t ldx, size_t i0, size_t i1,
                   float *act);

/* Rows of X in micro-tile t when n rows are split into ceil(n/mr) tiles as evenly as
 * possible (with mr = 6, n = 8 runs as 4+4, not 6+2: a 2-row tile cannot keep the
 * multiply units busy). Shared by the GEMMs. */
static inline size_t tl__tile_rows(size_t n, size_t t, size_t mr) {
    size_t tiles = (n + mr - 1) / mr;
    return n / tiles + (t < n % tiles);
}

/* A partial panel's write-back: the first nj of the nr columns of an m-row tile (row
 * stride nr) stored into Y (or added, when add). */
static inline void tl__tile_store(float *Y, size_t ldy, const float *tile, size_t nr,
                                  size_t m, size_t nj, int add) {
    for (size_t r = 0; r < m; r++)
        for (size_t jj = 0; jj < nj; jj++)
            Y[r * ldy + jj] = (add ? Y[r * ldy + jj] : 0.0f) + tile[r * nr + jj];
}

/* The types beyond Q8_0/Q4_0 (Q4_1, Q5_0, Q5_1, Q2_K..Q6_K), any n, integer products
 * (x86_matvec_ext.c): AVX2, or for the K-quants AVX-512 where isa is TL_ISA_AVX512VNNI
 * (available: checked by the caller), bit for bit the same results; scratch of at least
 * tl__ext_act_floats(type, k, n) floats. */
void tl__matmul_ext(tl__isa isa, tl_type type, const uint8_t *W, size_t k, size_t j0,
                    size_t j1, const float *X, size_t ldx, size_t n, float *Y, size_t ldy,
                    float *scratch);
size_t tl__ext_act_floats(tl_type type, size_t k, size_t n);
/* Their parts for a product split over threads (tl_matmul_act_prepare/_fast_act): rows
 * [i0, i1) of X rounded into act, and the product from act. */
void tl__ext_act_prepare(tl_type type, size_t k, const float *X, size_t ldx, size_t i0,
                         size_t i1, float *act);
void tl__matmul_ext_act(tl__isa isa, tl_type type, const uint8_t *W, size_t k, size_t j0,
                        size_t j1, const float *act, size_t n, float *Y, size_t ldy);
/* The K-quants' product on AVX-512 F/BW/VL + VNNI (x86avx512_matvec_ext.c; only when
 * tl__cpu_has_avx512vnni): weight rows [j0, j1) of W against n <= TL_EXT_ROWS_PER_PASS
 * (x86_ext_unpack.h) prepared rows act (row i at act + i * k/256), Y[i*ldy + j]; the same
 * bits as the AVX2 kernel's. */
void tl__matmul_k_avx512_act(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                             const tl_block_k_act *act, size_t n, float *Y, size_t ldy);
/* Its part that runs weight rows two at a time (x86avx512_ext_pairs.c): the same, for the
 * pairs of rows [j0, j1) (an odd last row is left out). */
void tl__matmul_k_avx512_pairs(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                               const tl_block_k_act *act, size_t n, float *Y, size_t ldy);

/* Q8_0/Q4_0 products of more rows than this take the int8 GEMM of instruction set isa
 * (below it, the matvec's 4-row groups re-reading weights from cache cost less than
 * packing panels): every n on AVX-512 VNNI (one arithmetic whether the weights are in
 * panels or not, x86avx512_gemm.c), more than 12 on AVX-VNNI (the 256-bit tiles are
 * smaller; at 12 rows the groups still win), more than 32 on AVX2 (as
 * the float types). */
static inline size_t tl__q_gemm_after_n(tl__isa isa) {
    return isa == TL_ISA_AVX512VNNI ? 0 : isa == TL_ISA_AVXVNNI ? 12 : TL_MATMUL_GROUPED_MAX_N;
}

/* The int8 GEMM's rounded activations: per X row, one record per 32-element block (row
 * i's start at i * k/32); corr = -off * sum q, off being the weights' unsigned offset
 * (Q8_0 128, Q4_0 8). tl__act_records rounds rows [i0, i1) (x86_act.c). */
typedef struct tl__act_rec {
    float d;
    int32_t corr;
    int8_t q[TL_QK];
} tl__act_rec;
void tl__act_records(tl_type type, size_t k, const float *X, size_t ldx, size_t i0, size_t i1,
                     tl__act_rec *act);
/* 1 when tl_matmul_act_prepare writes records (above) for this product: weights in
 * panels, or more rows than tl__q_gemm_after_n(this CPU's widest set) (the int8 GEMMs
 * read them; the matvec reads pair records). */
int tl__act_takes_records(tl_type type, tl_weights_layout layout, size_t n);

/* Q8_0/Q4_0 from records, any n, on AVX-512 VNNI (x86avx512_gemm.c; only when
 * tl__cpu_has_avx512vnni); `panels`: W is in panels (kernels.h), else in the file's rows. */
void tl__gemm_q_avx512_act(tl_type type, const uint8_t *W, int panels, size_t k, size_t j0,
                           size_t j1, const tl__act_rec *act, size_t n, float *Y, size_t ldy);
/* Q8_0/Q4_0 from records, weights in the file's rows, on AVX-VNNI (x86vnni_gemm.c; only
 * when tl__cpu_has_avxvnni): the same results as tl__gemm_q_avx512_act's bit for bit. */
void tl__gemm_q_vnni_act(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                         const tl__act_rec *act, size_t n, float *Y, size_t ldy);
/* The same on AVX2 alone (x86_gemm_q.c; any x86 CPU the fast kernels run on). */
void tl__gemm_q_avx2_act(tl_type type, const uint8_t *W, size_t k, size_t j0, size_t j1,
                         const tl__act_rec *act, size_t n, float *Y, size_t ldy);
/* tl_panels_pack's vector packer (same bytes as tl_panels_pack_ref; tmp: one panel). */
void tl__panels_pack_avx512(tl_type type, uint8_t *W, size_t rows, size_t k, uint8_t *tmp);
/* F32/F16/BF16, any n, on AVX-512 F (x86avx512_gemm_f.c; only when
 * tl__cpu_has_avx512vnni): scratch of tl__gemm_f_avx512_scratch_floats() floats. */
void tl__gemm_f_avx512(tl_type type, const uint8_t *w, size_t k, size_t j0, size_t j1,
                       const float *X, size_t ldx, size_t n, float *Y, size_t ldy,
                       float *scratch);
size_t tl__gemm_f_avx512_scratch_floats(void);

/* 1 when the AVX-VNNI kernels are built in (TL_HAVE_AVXVNNI) and this CPU has them. */
int tl__cpu_has_avxvnni(void);
/* 1 when the AVX-512 VNNI kernels are built in (TL_HAVE_AVX512VNNI), this CPU has
 * AVX-512 F/BW and VNNI, and the OS saves the 512-bit state. */
int tl__cpu_has_avx512vnni(void);
/* 1 when, beyond tl__cpu_has_avx512vnni, this CPU has AVX512_BF16 (the probes use it). */
int tl__cpu_has_avx512bf16(void);
/* The widest set the kernels use on this CPU (within the cap below). */
tl__isa tl__cpu_widest_isa(void);
/* The widest instruction set the kernels may use: the CPU's, or less when the
 * environment variable TIERLLM_ISA caps it ("avx2" or "avxvnni"; unset or any other
 * value: no cap; read once) - so the tests can run every path this machine has. */
tl__isa tl__cpu_isa_cap(void);

#endif
