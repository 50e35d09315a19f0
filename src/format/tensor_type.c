/* tensor_type.c - the table of tensor-type facts, and lookups over it. */
#include "format/tensor_type.h"

/* The block structs hold only bytes and uint16 (alignment 2, no padding): their sizes
 * are GGML's block sizes. */
_Static_assert(sizeof(tl_block_q4_1) == 20 && sizeof(tl_block_q5_0) == 22 &&
               sizeof(tl_block_q5_1) == 24 && sizeof(tl_block_q2_k) == 84 &&
               sizeof(tl_block_q3_k) == 110 && sizeof(tl_block_q4_k) == 144 &&
               sizeof(tl_block_q5_k) == 176 && sizeof(tl_block_q6_k) == 210,
               "block sizes");

const tl_type_traits tl_type_table[TL_N_TYPES] = {
    {TL_TYPE_F32, "F32", 1, 4},
    {TL_TYPE_F16, "F16", 1, 2},
    {TL_TYPE_BF16, "BF16", 1, 2},
    {TL_TYPE_Q8_0, "Q8_0", TL_QK, sizeof(tl_block_q8_0)},
    {TL_TYPE_Q4_0, "Q4_0", TL_QK, sizeof(tl_block_q4_0)},
    {TL_TYPE_Q4_1, "Q4_1", TL_QK, sizeof(tl_block_q4_1)},
    {TL_TYPE_Q5_0, "Q5_0", TL_QK, sizeof(tl_block_q5_0)},
    {TL_TYPE_Q5_1, "Q5_1", TL_QK, sizeof(tl_block_q5_1)},
    {TL_TYPE_Q2_K, "Q2_K", TL_QK_K, sizeof(tl_block_q2_k)},
    {TL_TYPE_Q3_K, "Q3_K", TL_QK_K, sizeof(tl_block_q3_k)},
    {TL_TYPE_Q4_K, "Q4_K", TL_QK_K, sizeof(tl_block_q4_k)},
    {TL_TYPE_Q5_K, "Q5_K", TL_QK_K, sizeof(tl_block_q5_k)},
    {TL_TYPE_Q6_K, "Q6_K", TL_QK_K, sizeof(tl_block_q6_k)},
};

int tl_type_index(uint32_t type) {
    for (int i = 0; i < TL_N_TYPES; i++)
        if ((uint32_t)tl_type_table[i].type == type) return i;
    return -1;
}

const char *tl_type_name(tl_type type) {
    int i = tl_type_index((uint32_t)type);
    return i < 0 ? "?" : tl_type_table[i].name;
}

size_t tl_type_block_elems(tl_type type) {
    int i = tl_type_index((uint32_t)type);
    return i < 0 ? 0 : tl_type_table[i].block_elems;
}

size_t tl_type_block_bytes(tl_type type) {
    int i = tl_type_index((uint32_t)type);
    return i < 0 ? 0 : tl_type_table[i].block_bytes;
}

size_t tl_type_row_bytes(tl_type type, size_t n) {
    size_t be = tl_type_block_elems(type);
    return be ? n / be * tl_type_block_bytes(type) : 0;
}
