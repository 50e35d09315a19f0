/* types.h - tensor element types and their block layouts (numbering follows GGML/GGUF).
 *
 * A row of a weight matrix is a sequence of blocks. F32/F16/BF16 have one element per
 * block. Q8_0: 32 elements = fp16 scale d + 32 int8 q, value = d*q.
 * Q4_0: 32 elements = fp16 scale d + 16 bytes; byte j holds element j in its low nibble
 * and element j+16 in its high nibble, value = d*(nibble-8).
 */
#ifndef TL_KERNELS_TYPES_H
#define TL_KERNELS_TYPES_H

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

/* 1 if `type` is one of the values above. */
int tl_type_known(uint32_t type);
const char *tl_type_name(tl_type type);
/* Elements per block, bytes per block. */
size_t tl_type_block_elems(tl_type type);
size_t tl_type_block_bytes(tl_type type);
/* Bytes of n elements; n must be a multiple of the block size. */
size_t tl_type_row_bytes(tl_type type, size_t n);

/* IEEE half and bfloat16 conversions (round to nearest even). */
static inline float tl_f16_to_f32(uint16_t h);
static inline uint16_t tl_f32_to_f16(float f);
static inline float tl_bf16_to_f32(uint16_t h);
static inline uint16_t tl_f32_to_bf16(float f);

#include "kernels/f16.inl"

#endif
