/* panels.c - the 32-row panel layout of Q8_0/Q4_0 weights (kernels.h), written to be
 * read: where each byte of a file row goes, the in-place repack that dispatches to the
 * vector packer when the CPU has it, and the scalar reference product over panels.
 * Invariants: a panel holds exactly the bytes of its 32 file rows (same size, same byte
 * range), so a tensor's size, offsets and budget do not change when it is repacked; the
 * scales are copied bit for bit and Q8_0 quants are offset by 128, a bijection, so the
 * unpack recovers the file's bytes exactly.
 */
#include <string.h>
#include "kernels/kernels.h"
#include "kernels/x86_matmul.h"

/* Offset, inside a panel, of block b's scale of row r (2 bytes) and of quant byte i
 * of row r's block b (Q8_0: i < 32, the quant of element i; Q4_0: i < 16, the file's
 * byte i of the block, two nibbles). */
static size_t scale_at(tl_type type, size_t b, size_t r) {
    return b * TL_PANEL_ROWS * tl_type_block_bytes(type) + 2 * r;
}
static size_t quant_at(tl_type type, size_t b, size_t r, size_t i) {
    return b * TL_PANEL_ROWS * tl_type_block_bytes(type) + 2 * TL_PANEL_ROWS +
           (i / 4) * (4 * TL_PANEL_ROWS) + 4 * r + i % 4;
}
static size_t quant_bytes(tl_type type) { return tl_type_block_bytes(type) - 2; }
/* Q8_0's quants are stored as unsigned w + 128 (the kernel's operand); Q4_0's as in the file. */
static uint8_t stored(tl_type type, uint8_t file_byte) {
    return type == TL_TYPE_Q8_0 ? (uint8_t)(file_byte ^ 0x80) : file_byte;
}

int tl_panels_wanted(tl_type type, size_t rows) {
    return tl_type_int8_gemm(type) && rows > 0 && rows % TL_PANEL_ROWS == 0 &&
           tl__cpu_has_avx512vnni();
}

size_t tl_panels_tmp_bytes(tl_type type, size_t k) {
    return TL_PANEL_ROWS * tl_type_row_bytes(type, k);
}

void tl_panels_pack_ref(tl_type type, const void *rows_src, size_t rows, size_t k, void *dst) {
    const size_t row_bytes = tl_type_row_bytes(type, k), bb = tl_type_block_bytes(type);
    const uint8_t *src = rows_src;
    uint8_t *out = dst;
    for (size_t j = 0; j < rows; j++) {
        const uint8_t *row = src + j * row_bytes;
        uint8_t *panel = out + (j / TL_PANEL_ROWS) * TL_PANEL_ROWS * row_bytes;
        const size_t r = j % TL_PANEL_ROWS;
        for (size_t b = 0; b < k / TL_QK; b++) {
            memcpy(panel + scale_at(type, b, r), row + b * bb, 2);
            for (size_t i = 0; i < quant_bytes(type); i++)
                panel[quant_at(type, b, r, i)] = stored(type, row[b * bb + 2 + i]);
        }
    }
}

void tl_panels_unpack_ref(tl_type type, const void *panels, size_t rows, size_t k, void *dst) {
    const size_t row_bytes = tl_type_row_bytes(type, k), bb = tl_type_block_bytes(type);
    const uint8_t *in = panels;
    uint8_t *out = dst;
    for (size_t j = 0; j < rows; j++) {
        uint8_t *row = out + j * row_bytes;
        const uint8_t *panel = in + (j / TL_PANEL_ROWS) * TL_PANEL_ROWS * row_bytes;
        const size_t r = j % TL_PANEL_ROWS;
        for (size_t b = 0; b < k / TL_QK; b++) {
            memcpy(row + b * bb, panel + scale_at(type, b, r), 2);
            for (size_t i = 0; i < quant_bytes(type); i++) /* stored() is its own inverse */
                row[b * bb + 2 + i] = stored(type, panel[quant_at(type, b, r, i)]);
        }
    }
}

void tl_panels_pack(tl_type type, void *W, size_t rows, size_t k, void *tmp) {
    const size_t panel_bytes = tl_panels_tmp_bytes(type, k);
#ifdef TL_HAVE_AVX512VNNI
    if (tl__cpu_has_avx512vnni()) {
        tl__panels_pack_avx512(type, W, rows, k, tmp);
        return;
    }
#endif
    for (size_t p = 0; p < rows; p += TL_PANEL_ROWS) {
        uint8_t *panel = (uint8_t *)W + p / TL_PANEL_ROWS * panel_bytes;
        memcpy(tmp, panel, panel_bytes);
        tl_panels_pack_ref(type, tmp, TL_PANEL_ROWS, k, panel);
    }
}

void tl_panels_pack_share(tl_type type, void *W, size_t rows, size_t k, size_t part,
                          size_t parts, void *tmp) {
    const size_t panels = rows / TL_PANEL_ROWS, p0 = panels * part / parts;
    const size_t p1 = panels * (part + 1) / parts;
    tl_panels_pack(type, (uint8_t *)W + p0 * tl_panels_tmp_bytes(type, k),
                   (p1 - p0) * TL_PANEL_ROWS, k, tmp);
}

/* The file's bytes of blocks [b0, b0 + kb) of row j (kb <= REF_BLOCKS) into out. A row's
 * quants lie in runs of 4 bytes (quant_at), so each run is moved whole: a tied token
 * embedding (kept in panels for the output product) is looked up a row at a time here. */
static void row_blocks(tl_type type, const uint8_t *W, size_t k, size_t j, size_t b0,
                       size_t kb, uint8_t *out) {
    const size_t row_bytes = tl_type_row_bytes(type, k), bb = tl_type_block_bytes(type);
    const uint8_t *panel = W + (j / TL_PANEL_ROWS) * TL_PANEL_ROWS * row_bytes;
    const size_t r = j % TL_PANEL_ROWS;
    for (size_t b = 0; b < kb; b++) {
        memcpy(out + b * bb, panel + scale_at(type, b0 + b, r), 2);
        for (size_t q = 0; q < quant_bytes(type); q += 4) { /* both types: 4 | quant bytes */
            uint8_t run[4];
            memcpy(run, panel + quant_at(type, b0 + b, r, q), 4);
            for (int i = 0; i < 4; i++) out[b * bb + 2 + q + i] = stored(type, run[i]);
        }
    }
}

/* Blocks of a row rebuilt at a time. */
#define REF_BLOCKS 8

void tl_matmul_panels_ref(tl_type type, const void *W, size_t k, size_t j0, size_t j1,
                          const float *X, size_t ldx, size_t n, float *Y, size_t ldy) {
    const size_t nb = k / TL_QK;
    uint8_t row[REF_BLOCKS * sizeof(tl_block_q8_0)];
    float w[REF_BLOCKS * TL_QK], xr[REF_BLOCKS * TL_QK];
    for (size_t j = j0; j < j1; j++) {
        for (size_t i = 0; i < n; i++) {
            double sum = 0.0;
            for (size_t b0 = 0; b0 < nb; b0 += REF_BLOCKS) {
                const size_t kb = nb - b0 < REF_BLOCKS ? nb - b0 : REF_BLOCKS;
                row_blocks(type, W, k, j, b0, kb, row);
                tl_dequant_row(type, row, w, kb * TL_QK);
                tl_round_act_row(X + i * ldx + b0 * TL_QK, xr, kb * TL_QK);
                for (size_t c = 0; c < kb * TL_QK; c++) sum += (double)xr[c] * w[c];
            }
            Y[i * ldy + j] = (float)sum;
        }
    }
}

void tl_panels_dequant_row(tl_type type, const void *W, size_t k, size_t j, float *dst) {
    uint8_t row[REF_BLOCKS * sizeof(tl_block_q8_0)];
    for (size_t b0 = 0; b0 < k / TL_QK; b0 += REF_BLOCKS) {
        const size_t kb = k / TL_QK - b0 < REF_BLOCKS ? k / TL_QK - b0 : REF_BLOCKS;
        row_blocks(type, W, k, j, b0, kb, row);
        tl_dequant_row(type, row, dst + b0 * TL_QK, kb * TL_QK);
    }
}
