/* tensor_type.h - tensor element types: their GGUF numbers, block layouts and names, in
 * one table (like ggml's type traits) that the format reader, the kernels and the planner
 * all consult, so a fact about a type is written once.
 *
 * A row of a weight matrix is a sequence of blocks. F32/F16/BF16 have one element per
 * block. Q8_0: 32 elements = fp16 scale d + 32 int8 q, value = d*q.
 * Q4_0: 32 elements = fp16 scale d + 16 bytes; byte j holds element j in its low nibble
 * and element j+16 in its high nibble, value = d*(nibble-8).
 */
#ifndef TL_FORMAT_TENSOR_TYPE_H
#define TL_FORMAT_TENSOR_TYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum tl_type {
    TL_TYPE_F32 = 0,
    TL_TYPE_F16 = 1,
    TL_TYPE_Q4_0 = 2,
    TL_TYPE_Q8_0 = 8,
    TL_TYPE_BF16 = 30
} tl_type;

#define TL_QK 32 /* elements per Q8_0 / Q4_0 block */

typedef struct { uint16_t d; int8_t q[TL_QK]; } tl_block_q8_0;      /* 34 bytes */
typedef struct { uint16_t d; uint8_t q[TL_QK / 2]; } tl_block_q4_0; /* 18 bytes */

/* The facts of one type. Every type tierllm reads and computes with has one entry. */
typedef struct tl_type_traits {
    tl_type type;
    const char *name;     /* as GGUF tools print it: "Q4_0" */
    uint32_t block_elems; /* elements per block (1 for the float types) */
    uint32_t block_bytes; /* bytes per block */
} tl_type_traits;

enum { TL_N_TYPES = 5 };
/* The table, in the order the planner's profile lists kernel rates: F32, F16, BF16, Q8_0,
 * Q4_0 (a saved profile records this order and is rejected when it differs). */
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
