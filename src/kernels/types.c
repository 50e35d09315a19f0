/* types.c - block sizes and names of the tensor element types. */
#include "kernels/types.h"

int tl_type_known(uint32_t type) {
    return type == TL_TYPE_F32 || type == TL_TYPE_F16 || type == TL_TYPE_Q4_0 ||
           type == TL_TYPE_Q8_0 || type == TL_TYPE_BF16;
}

const char *tl_type_name(tl_type type) {
    switch (type) {
    case TL_TYPE_F32: return "F32";
    case TL_TYPE_F16: return "F16";
    case TL_TYPE_Q4_0: return "Q4_0";
    case TL_TYPE_Q8_0: return "Q8_0";
    case TL_TYPE_BF16: return "BF16";
    }
    return "?";
}

size_t tl_type_block_elems(tl_type type) {
    return (type == TL_TYPE_Q4_0 || type == TL_TYPE_Q8_0) ? TL_QK : 1;
}

size_t tl_type_block_bytes(tl_type type) {
    switch (type) {
    case TL_TYPE_F32: return 4;
    case TL_TYPE_F16: return 2;
    case TL_TYPE_BF16: return 2;
    case TL_TYPE_Q8_0: return sizeof(tl_block_q8_0);
    case TL_TYPE_Q4_0: return sizeof(tl_block_q4_0);
    }
    return 0;
}

size_t tl_type_row_bytes(tl_type type, size_t n) {
    return n / tl_type_block_elems(type) * tl_type_block_bytes(type);
}
