/* dequant_dump.c - writes a GGUF file for tests/ref/check_dequant.py: for each type beyond
 * Q8_0/Q4_0, a tensor "<TYPE>.q" of blocks with random bytes (every quant bit pattern;
 * fp16 scales random but finite, of either sign, subnormals included) and "<TYPE>.f32",
 * the engine's tl_dequant_row of it. The NumPy reader must decode "<TYPE>.q" to the same
 * bits: the engine's dequantization against one written independently from the format.
 * Usage: dequant_dump OUT.gguf */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "format/gguf.h"
#include "kernels/kernels.h"

enum { ROWS = 48, COLS = 768 }; /* 3 K blocks, 24 32-blocks per row */

static const tl_type types[] = {TL_TYPE_Q4_1, TL_TYPE_Q5_0, TL_TYPE_Q5_1, TL_TYPE_Q2_K,
                                TL_TYPE_Q3_K, TL_TYPE_Q4_K, TL_TYPE_Q5_K, TL_TYPE_Q6_K};
#define N_TYPES (sizeof types / sizeof types[0])

/* Byte offsets of a block's fp16 scales (the rest is quant bits and packed scales). */
static int scale_offsets(tl_type t, int *off) {
    switch (t) {
    case TL_TYPE_Q4_1: case TL_TYPE_Q5_1: off[0] = 0, off[1] = 2; return 2;
    case TL_TYPE_Q5_0: off[0] = 0; return 1;
    case TL_TYPE_Q2_K: off[0] = 80, off[1] = 82; return 2;
    case TL_TYPE_Q3_K: off[0] = 108; return 1;
    case TL_TYPE_Q4_K: case TL_TYPE_Q5_K: off[0] = 0, off[1] = 2; return 2;
    default: off[0] = 208; return 1; /* Q6_K */
    }
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static uint8_t *qdata[N_TYPES];
static float *fdata[N_TYPES];

static tl_status fill(void *user, size_t index, uint64_t offset, void *dst, size_t len) {
    (void)user;
    const size_t t = index / 2;
    const uint8_t *src = index % 2 ? (const uint8_t *)fdata[t] : qdata[t];
    memcpy(dst, src + offset, len);
    return TL_OK;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: dequant_dump OUT.gguf\n");
        return 2;
    }
    tl_gguf_writer *w = NULL;
    if (tl_gguf_writer_open(&w)) return 1;
    for (size_t t = 0; t < N_TYPES; t++) {
        const size_t rb = tl_type_row_bytes(types[t], COLS), bb = tl_type_block_bytes(types[t]);
        qdata[t] = malloc(ROWS * rb);
        fdata[t] = malloc(ROWS * COLS * sizeof(float));
        if (!qdata[t] || !fdata[t]) return 1;
        for (size_t i = 0; i < ROWS * rb; i++) qdata[t][i] = (uint8_t)next();
        int off[2];
        const int ns = scale_offsets(types[t], off);
        for (size_t b = 0; b < ROWS * rb / bb; b++)
            for (int s = 0; s < ns; s++) {
                uint16_t h;
                do h = (uint16_t)next();
                while ((h & 0x7c00) == 0x7c00); /* no inf/NaN */
                memcpy(qdata[t] + b * bb + off[s], &h, 2);
            }
        for (size_t r = 0; r < ROWS; r++)
            tl_dequant_row(types[t], qdata[t] + r * rb, fdata[t] + r * COLS, COLS);
        char name[32];
        const uint64_t ne[2] = {COLS, ROWS};
        snprintf(name, sizeof name, "%s.q", tl_type_name(types[t]));
        if (tl_gguf_writer_add_tensor(w, name, types[t], 2, ne)) return 1;
        snprintf(name, sizeof name, "%s.f32", tl_type_name(types[t]));
        if (tl_gguf_writer_add_tensor(w, name, TL_TYPE_F32, 2, ne)) return 1;
    }
    tl_status st = tl_gguf_writer_write(w, argv[1], fill, NULL);
    tl_gguf_writer_close(w);
    for (size_t t = 0; t < N_TYPES; t++) free(qdata[t]), free(fdata[t]);
    if (st) {
        fprintf(stderr, "dequant_dump: %s\n", tl_last_error());
        return 1;
    }
    return 0;
}
