/* tensor_type.c - the table of tensor-type facts, and lookups over it. */
#include "format/tensor_type.h"

const tl_type_traits tl_type_table[TL_N_TYPES] = {
    {TL_TYPE_F32, "F32", 1, 4},
    {TL_TYPE_F16, "F16", 1, 2},
    {TL_TYPE_BF16, "BF16", 1, 2},
    {TL_TYPE_Q8_0, "Q8_0", TL_QK, sizeof(tl_block_q8_0)},
    {TL_TYPE_Q4_0, "Q4_0", TL_QK, sizeof(tl_block_q4_0)},
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
