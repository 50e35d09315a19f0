/* fuzz_safetensors.c - libFuzzer target for the safetensors reader.
 *
 * Feeds the input bytes to tl_st_parse through an in-memory byte source. A refusal must
 * be a negative status with a message and no result; a parsed directory must keep every
 * promise of safetensors.h (data inside the file, sorted and not overlapping, sizes that
 * match the shapes, names unique and bounded), which is checked here by trapping. Any
 * crash, sanitizer report, leak or hang is a bug in the reader. Built by -DTL_FUZZ=ON
 * with clang; fuzz/run_fuzz.sh configures, seeds and runs it.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "format/safetensors.h"

typedef struct mem_src { const uint8_t *p; size_t n; } mem_src;

static tl_status mem_read(void *src, uint64_t offset, void *dst, size_t len) {
    const mem_src *m = src;
    if (offset > m->n || len > m->n - offset) __builtin_trap(); /* the parser must not ask */
    memcpy(dst, m->p + offset, len);
    return TL_OK;
}

static volatile uint64_t g_sink; /* keeps the reads below from being optimized away */

static void walk(const tl_st_file *f, size_t size) {
    if (f->file_size != size || f->data_offset <= 8 || f->data_offset > size ||
        f->n_tensors > TL_ST_MAX_TENSORS)
        __builtin_trap();
    uint64_t reach = 0; /* end of the furthest non-empty tensor so far */
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const tl_st_tensor *t = &f->tensors[i];
        size_t len = strlen(t->name);
        if (len == 0 || len > TL_ST_MAX_NAME || t->n_dims > TL_ST_MAX_DIMS ||
            tl_st_dtype_size(t->dtype) == 0)
            __builtin_trap();
        uint64_t n = 1;
        for (uint32_t d = 0; d < TL_ST_MAX_DIMS; d++) {
            if (d < t->n_dims) n *= t->shape[d];
            else if (t->shape[d] != 0) __builtin_trap();
        }
        if (n != t->n_elems || t->nbytes != n * tl_st_dtype_size(t->dtype) ||
            t->offset < f->data_offset || t->offset > size || t->nbytes > size - t->offset ||
            (i > 0 && t->offset < f->tensors[i - 1].offset))
            __builtin_trap();
        if (t->nbytes) {
            if (t->offset < reach) __builtin_trap();
            reach = t->offset + t->nbytes;
        }
        /* look-ups are linear: keep the walk itself O(n) */
        if (i < 64 && tl_st_find(f, t->name) != t) __builtin_trap();
        g_sink += len + strlen(tl_st_dtype_name(t->dtype));
    }
    g_sink += tl_st_find(f, "no.such.tensor") != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mem_src src = {data, size};
    tl_st_file *f = NULL;
    tl_status st = tl_st_parse(mem_read, &src, size, "fuzz", &f);
    if (st != TL_OK) {
        if (f != NULL || st >= 0 || strncmp(tl_last_error(), "fuzz: ", 6) != 0)
            __builtin_trap();
        return 0;
    }
    walk(f, size);
    tl_st_free(f);
    return 0;
}
