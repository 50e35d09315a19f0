/* fuzz_gguf.c - libFuzzer target for the GGUF reader.
 *
 * Feeds the input bytes to tl_gguf_parse through an in-memory byte source, then walks
 * whatever parsed: every metadata value (each string of a string array is touched),
 * the typed getters, the tensor directory, and the model-level readers that run on
 * untrusted metadata before any weight is read (hyperparameters, tokenizer). Any
 * crash, sanitizer report, leak or hang is a bug in the reader. Built by
 * -DTL_FUZZ=ON with clang; fuzz/run_fuzz.sh configures, seeds and runs it.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "format/gguf.h"
#include "model/llama.h"
#include "text/tokenizer.h"

typedef struct mem_src { const uint8_t *p; size_t n; } mem_src;

static tl_status mem_read(void *src, uint64_t offset, void *dst, size_t len) {
    const mem_src *m = src;
    if (offset > m->n || len > m->n - offset) return TL_ERR_IO; /* the parser must not ask */
    memcpy(dst, m->p + offset, len);
    return TL_OK;
}

static volatile uint64_t g_sink; /* keeps the reads below from being optimized away */

static void touch(const void *p, uint64_t n) {
    const uint8_t *b = p;
    uint64_t h = 0;
    for (uint64_t i = 0; i < n; i++) h = h * 31 + b[i];
    g_sink += h;
}

static void walk(const tl_gguf *g) {
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const tl_gguf_kv *kv = &g->kv[i];
        touch(kv->key, strlen(kv->key) + 1);
        g_sink += (uint64_t)strlen(tl_gguf_type_name(kv->type));
        if (kv->type == TL_GGUF_STRING) {
            touch(kv->v.str.s, kv->v.str.len + 1);
        } else if (kv->type == TL_GGUF_ARRAY) {
            uint64_t n;
            const void *data;
            if (tl_gguf_get_arr(g, kv->key, kv->v.arr.type, &n, &data) != TL_OK) __builtin_trap();
            if (kv->v.arr.type == TL_GGUF_STRING) {
                const tl_gguf_str *s = data;
                for (uint64_t j = 0; j < n; j++) touch(s[j].s, s[j].len + 1);
            } else {
                static const uint8_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
                touch(data, n * sizes[kv->v.arr.type]);
            }
        }
        if (i >= 64) continue; /* look-ups are linear: keep the walk itself O(n) */
        /* every getter on the first keys: each either succeeds or sets an error */
        uint32_t u;
        int32_t i32;
        float f;
        bool b;
        const tl_gguf_str *s;
        if (tl_gguf_get_u32(g, kv->key, &u) == TL_OK) g_sink += u;
        if (tl_gguf_get_i32(g, kv->key, &i32) == TL_OK) g_sink += (uint64_t)i32;
        if (tl_gguf_get_f32(g, kv->key, &f) == TL_OK) g_sink += f == f;
        if (tl_gguf_get_bool(g, kv->key, &b) == TL_OK) g_sink += b;
        if (tl_gguf_get_str(g, kv->key, &s) == TL_OK) touch(s->s, s->len + 1);
        if (tl_gguf_find(g, kv->key) == NULL) __builtin_trap();
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const tl_gguf_tensor *t = &g->tensors[i];
        touch(t->name, strlen(t->name) + 1);
        /* the directory's promises: data inside the file, sizes consistent */
        if (t->offset < g->data_offset || t->offset % g->alignment != 0 ||
            t->offset > g->file_size || t->nbytes > g->file_size - t->offset ||
            t->n_dims < 1 || t->n_dims > TL_GGUF_MAX_DIMS || !tl_type_known(t->type) ||
            (i < 64 && tl_gguf_find_tensor(g, t->name) != t))
            __builtin_trap();
        uint64_t n = 1;
        for (int d = 0; d < TL_GGUF_MAX_DIMS; d++) n *= t->ne[d];
        if (n != t->n_elems) __builtin_trap();
        g_sink += strlen(tl_type_name(t->type));
    }
    g_sink += tl_gguf_find(g, "no.such.key") != NULL;
    g_sink += tl_gguf_find_tensor(g, "no.such.tensor") != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mem_src src = {data, size};
    tl_gguf *g = NULL;
    tl_status st = tl_gguf_parse(mem_read, &src, size, "fuzz", &g);
    if (st != TL_OK) {
        if (g != NULL || st >= 0) __builtin_trap();
        return 0;
    }
    walk(g);
    tl_llama_hparams hp;
    if (tl_llama_read_hparams(g, &hp) == TL_OK) g_sink += (uint64_t)hp.n_embd;
    tl_tokenizer *tok = NULL;
    if (tl_tokenizer_from_gguf(g, &tok) == TL_OK) {
        g_sink += (uint64_t)tl_tokenizer_n_vocab(tok);
        tl_tokenizer_free(tok);
    }
    tl_gguf_free(g);
    return 0;
}
