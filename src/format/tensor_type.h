/* tensor_type.h - tensor element types: their GGUF numbers, block layouts and names, in
 * one table (like ggml's type traits) that the format reader, the kernels and the planner
 * all consult, so a fact about a type is written once.
 *
 * A row of a weight matrix is a sequence of blocks. F32/F16/BF16 have one element per
 * block. Q8_0: 32 elements = fp16 scale d + 32 int8 q, value = d*q.
 * Q4_0: 32 elements = fp16 scale d + 16 bytes; byte j holds element j in its low nibble
 * and element j+16 in its high nibble, value = d*(nibble-8).
 * The other 32-element types (Q4_1, Q5_0, Q5_1) and the 256-element K-quants (Q2_K..Q6_K)
 * are described beside their block structs below and defined, to be read, by their
 * dequantization in kernels/quant_ext.c.
 */
#ifndef TL_FORMAT_TENSOR_TYPE_H
#define TL_FORMAT_TENSOR_TYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum tl_type {
    TL_TYPE_F32 = 0,
    TL_TYPE_F16 = 1,
    TL_TYPE_Q4_0 = 2,
    TL_TYPE_Q4_1 = 3,
    TL_TYPE_Q5_0 = 6,
    TL_TYPE_Q5_1 = 7,
    TL_TYPE_Q8_0 = 8,
    TL_TYPE_Q2_K = 10,
    TL_TYPE_Q3_K = 11,
    TL_TYPE_Q4_K = 12,
    TL_TYPE_Q5_K = 13,
    TL_TYPE_Q6_K = 14,
    TL_TYPE_BF16 = 30
} tl_type;

#define TL_QK 32  /* elements per Q8_0 / Q4_0 / Q4_1 / Q5_0 / Q5_1 block */
#define TL_QK_K 256 /* elements per K-quant super-block */

typedef struct { uint16_t d; int8_t q[TL_QK]; } tl_block_q8_0;      /* 34 bytes */
typedef struct { uint16_t d; uint8_t q[TL_QK / 2]; } tl_block_q4_0; /* 18 bytes */
/* Q4_1: value = d*nibble + m (nibbles as Q4_0). */
typedef struct { uint16_t d, m; uint8_t q[TL_QK / 2]; } tl_block_q4_1; /* 20 bytes */
/* Q5_0: the 5th bit of element e is bit e of qh (little-endian), value = d*(q5-16). */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t q[TL_QK / 2]; } tl_block_q5_0; /* 22 */
/* Q5_1: bits as Q5_0, value = d*q5 + m. */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t q[TL_QK / 2]; } tl_block_q5_1; /* 24 */
/* Q2_K: 16 groups of 16; scales[g] = scale (low nibble) | min (high nibble);
 * value = d*scale*q2 - dmin*min. */
typedef struct { uint8_t scales[16]; uint8_t q[64]; uint16_t d, dmin; } tl_block_q2_k; /* 84 */
/* Q3_K: 16 groups of 16 with 6-bit scales (stored +32) packed in 12 bytes; the third bit
 * of each quant in hmask, value = d*(scale-32)*(q3-4). */
typedef struct { uint8_t hmask[32]; uint8_t q[64]; uint8_t scales[12]; uint16_t d; } tl_block_q3_k; /* 110 */
/* Q4_K: 8 groups of 32 with 6-bit scales and mins packed in 12 bytes;
 * value = d*scale*q4 - dmin*min. */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t q[128]; } tl_block_q4_k; /* 144 */
/* Q5_K: Q4_K with a 5th bit per quant in qh (bit g of byte l for group g). */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t q[128]; } tl_block_q5_k; /* 176 */
/* Q6_K: 16 groups of 16 with int8 scales; value = d*scale*(q6-32). */
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } tl_block_q6_k; /* 210 */

/* The facts of one type. Every type tierllm reads and computes with has one entry. */
typedef struct tl_type_traits {
    tl_type type;
    const char *name;     /* as GGUF tools print it: "Q4_0" */
    uint32_t block_elems; /* elements per block (1 for the float types) */
    uint32_t block_bytes; /* bytes per block */
} tl_type_traits;

enum { TL_N_TYPES = 13 };
/* The table, in the order the planner's profile lists kernel rates: F32, F16, BF16, Q8_0,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (a saved profile records this
 * order and is rejected when it differs). */
extern const tl_type_traits tl_type_table[TL_N_TYPES];

/* Position of `type` in tl_type_table, or -1 when tierllm does not know it. */
int tl_type_index(uint32_t type);
/* 1 if `type` is in the table. */
static inline int tl_type_known(uint32_t type) { return tl_type_index(type) >= 0; }
/* "?" for an unknown type; the block sizes of an unknown type are 0. */
const char *tl_type_name(tl_type type);
size_t tl_type_block_elems(tl_type type);
size_t tl_type_block_bytes(tl_type type);
/* Bytes of n elements; n must be a multiple of the block size. */
size_t tl_type_row_bytes(tl_type type, size_t n);

/* IEEE half and bfloat16 conversions (round to nearest even). */
static inline float tl_f16_to_f32(uint16_t h);
static inline uint16_t tl_f32_to_f16(float f);
static inline float tl_bf16_to_f32(uint16_t h);
static inline uint16_t tl_f32_to_bf16(float f);

#include "format/f16.inl"

#endif
