/* gguf_write.c - GGUF v3 writer.
 *
 * Metadata and tensor declarations are collected in memory; tensor data is produced by
 * a fill callback in chunks at write time, so multi-gigabyte synthetic models never
 * need to be held in memory. The file goes through base/out_file.h: written to a
 * temporary beside `path` and renamed into place only when complete, so a failure (disk
 * full, IO error) never leaves a partial file at `path` and removes the temporary, and a
 * target that is not a regular file (a device, a directory) is refused.
 * tl_gguf_writer_parse gives what was declared as a parsed tl_gguf instead, without a
 * file: how a model described by other files (a Hugging Face folder) reaches the readers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "format/gguf.h"
#include "base/out_file.h"
#include "base/status.h"

#define ALIGNMENT 32
#define CHUNK (4u << 20)

typedef struct wbuf { uint8_t *p; size_t len, cap; } wbuf;

typedef struct wtensor {
    char *name;
    tl_type type;
    uint32_t n_dims;
    uint64_t ne[TL_GGUF_MAX_DIMS];
    uint64_t nbytes, offset;
} wtensor;

struct tl_gguf_writer {
    wbuf kv;           /* serialized key/value pairs */
    uint64_t n_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    int oom;           /* sticky: a metadata append failed */
};

static void put(tl_gguf_writer *w, const void *data, size_t n) {
    wbuf *b = &w->kv;
    if (w->oom || n == 0) return; /* data may be NULL when n is 0 (no metadata yet) */
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) { w->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void put_u32(tl_gguf_writer *w, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(w, b, 4);
}

static void put_u64(tl_gguf_writer *w, uint64_t v) {
    put_u32(w, (uint32_t)v);
    put_u32(w, (uint32_t)(v >> 32));
}

static void put_str(tl_gguf_writer *w, const char *s) {
    size_t n = strlen(s);
    put_u64(w, n);
    put(w, s, n);
}

static tl_status begin_kv(tl_gguf_writer *w, const char *key, tl_gguf_type type) {
    if (!key || !*key) return tl_error_set(TL_ERR_INVALID, "gguf writer: empty key");
    put_str(w, key);
    put_u32(w, (uint32_t)type);
    w->n_kv++;
    return TL_OK;
}

static tl_status end_kv(tl_gguf_writer *w) {
    return w->oom ? tl_error_set(TL_ERR_NOMEM, "gguf writer: out of memory") : TL_OK;
}

tl_status tl_gguf_writer_open(tl_gguf_writer **out) {
    *out = calloc(1, sizeof **out);
    return *out ? TL_OK : tl_error_set(TL_ERR_NOMEM, "gguf writer: out of memory");
}

void tl_gguf_writer_close(tl_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_tensors; i++) free(w->tensors[i].name);
    free(w->tensors);
    free(w->kv.p);
    free(w);
}

tl_status tl_gguf_writer_set_u32(tl_gguf_writer *w, const char *key, uint32_t v) {
    tl_status st = begin_kv(w, key, TL_GGUF_UINT32);
    if (st) return st;
    put_u32(w, v);
    return end_kv(w);
}

tl_status tl_gguf_writer_set_i32(tl_gguf_writer *w, const char *key, int32_t v) {
    tl_status st = begin_kv(w, key, TL_GGUF_INT32);
    if (st) return st;
    put_u32(w, (uint32_t)v);
    return end_kv(w);
}

tl_status tl_gguf_writer_set_f32(tl_gguf_writer *w, const char *key, float v) {
    tl_status st = begin_kv(w, key, TL_GGUF_FLOAT32);
    if (st) return st;
    uint32_t bits;
    memcpy(&bits, &v, 4);
    put_u32(w, bits);
    return end_kv(w);
}

tl_status tl_gguf_writer_set_bool(tl_gguf_writer *w, const char *key, bool v) {
    tl_status st = begin_kv(w, key, TL_GGUF_BOOL);
    if (st) return st;
    uint8_t b = v ? 1 : 0;
    put(w, &b, 1);
    return end_kv(w);
}

tl_status tl_gguf_writer_set_str(tl_gguf_writer *w, const char *key, const char *v) {
    tl_status st = begin_kv(w, key, TL_GGUF_STRING);
    if (st) return st;
    put_str(w, v);
    return end_kv(w);
}

tl_status tl_gguf_writer_set_arr(tl_gguf_writer *w, const char *key, tl_gguf_type elem_type,
                                 const void *data, uint64_t n) {
    size_t es;
    switch (elem_type) {
    case TL_GGUF_UINT8: case TL_GGUF_INT8: case TL_GGUF_BOOL: es = 1; break;
    case TL_GGUF_UINT16: case TL_GGUF_INT16: es = 2; break;
    case TL_GGUF_UINT32: case TL_GGUF_INT32: case TL_GGUF_FLOAT32: es = 4; break;
    case TL_GGUF_UINT64: case TL_GGUF_INT64: case TL_GGUF_FLOAT64: es = 8; break;
    default: return tl_error_set(TL_ERR_INVALID, "gguf writer: bad array element type");
    }
    tl_status st = begin_kv(w, key, TL_GGUF_ARRAY);
    if (st) return st;
    put_u32(w, (uint32_t)elem_type);
    put_u64(w, n);
    put(w, data, (size_t)(n * es)); /* little-endian host assumed (x86-64) */
    return end_kv(w);
}

tl_status tl_gguf_writer_set_arr_str(tl_gguf_writer *w, const char *key,
                                     const char *const *strs, uint64_t n) {
    tl_status st = begin_kv(w, key, TL_GGUF_ARRAY);
    if (st) return st;
    put_u32(w, TL_GGUF_STRING);
    put_u64(w, n);
    for (uint64_t i = 0; i < n; i++) put_str(w, strs[i]);
    return end_kv(w);
}

static void put_str_len(tl_gguf_writer *w, const tl_gguf_str *s) {
    put_u64(w, s->len);
    put(w, s->s, (size_t)s->len);
}

tl_status tl_gguf_writer_copy_kv(tl_gguf_writer *w, const tl_gguf_kv *kv) {
    if (kv->type == TL_GGUF_ARRAY) {
        if (kv->v.arr.type != TL_GGUF_STRING)
            return tl_gguf_writer_set_arr(w, kv->key, kv->v.arr.type, kv->v.arr.data,
                                          kv->v.arr.n);
        tl_status st = begin_kv(w, kv->key, TL_GGUF_ARRAY);
        if (st) return st;
        put_u32(w, TL_GGUF_STRING);
        put_u64(w, kv->v.arr.n);
        const tl_gguf_str *strs = kv->v.arr.data;
        for (uint64_t i = 0; i < kv->v.arr.n; i++) put_str_len(w, &strs[i]);
        return end_kv(w);
    }
    if (kv->type > TL_GGUF_FLOAT64)
        return tl_error_set(TL_ERR_INVALID, "gguf writer: key '%s' has an unknown type",
                            kv->key);
    tl_status st = begin_kv(w, kv->key, kv->type);
    if (st) return st;
    switch (kv->type) {
    case TL_GGUF_STRING: put_str_len(w, &kv->v.str); break;
    case TL_GGUF_UINT8: case TL_GGUF_INT8: case TL_GGUF_BOOL: {
        uint8_t b = (uint8_t)kv->v.u;
        put(w, &b, 1);
        break;
    }
    case TL_GGUF_UINT16: case TL_GGUF_INT16: {
        uint8_t b[2] = {(uint8_t)kv->v.u, (uint8_t)(kv->v.u >> 8)};
        put(w, b, 2);
        break;
    }
    case TL_GGUF_UINT32: case TL_GGUF_INT32: put_u32(w, (uint32_t)kv->v.u); break;
    case TL_GGUF_UINT64: case TL_GGUF_INT64: put_u64(w, kv->v.u); break;
    case TL_GGUF_FLOAT32: {
        const float f = (float)kv->v.f;
        uint32_t bits;
        memcpy(&bits, &f, 4);
        put_u32(w, bits);
        break;
    }
    case TL_GGUF_FLOAT64: {
        uint64_t bits;
        memcpy(&bits, &kv->v.f, 8);
        put_u64(w, bits);
        break;
    }
    default: break; /* ARRAY was taken above; every other type is a case */
    }
    return end_kv(w);
}

tl_status tl_gguf_writer_add_tensor(tl_gguf_writer *w, const char *name, tl_type type,
                                    uint32_t n_dims, const uint64_t *ne) {
    if (n_dims < 1 || n_dims > TL_GGUF_MAX_DIMS)
        return tl_error_set(TL_ERR_INVALID, "gguf writer: tensor '%s': bad n_dims", name);
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; d++) n *= ne[d];
    if (n % tl_type_block_elems(type) != 0)
        return tl_error_set(TL_ERR_INVALID, "gguf writer: tensor '%s': %llu elements is not a "
                            "multiple of the %s block", name, (unsigned long long)n,
                            tl_type_name(type));
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        wtensor *t = realloc(w->tensors, cap * sizeof *t);
        if (!t) return tl_error_set(TL_ERR_NOMEM, "gguf writer: out of memory");
        w->tensors = t;
        w->cap_tensors = cap;
    }
    wtensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return tl_error_set(TL_ERR_NOMEM, "gguf writer: out of memory");
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < n_dims; d++) t->ne[d] = ne[d];
    t->nbytes = n / tl_type_block_elems(type) * tl_type_block_bytes(type);
    w->n_tensors++;
    return TL_OK;
}

/* The header, metadata and tensor infos, padded to the alignment, into hdr->kv; each
 * tensor's offset in the data section is set, and *data_bytes is that section's size. */
static void build_header(tl_gguf_writer *w, tl_gguf_writer *hdr, uint64_t *data_bytes) {
    put_u32(hdr, 0x46554747u);
    put_u32(hdr, 3);
    put_u64(hdr, w->n_tensors);
    put_u64(hdr, w->n_kv);
    put(hdr, w->kv.p, w->kv.len);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        wtensor *t = &w->tensors[i];
        put_str(hdr, t->name);
        put_u32(hdr, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(hdr, t->ne[d]);
        put_u32(hdr, (uint32_t)t->type);
        t->offset = off;
        put_u64(hdr, off);
        off += (t->nbytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    }
    static const uint8_t zeros[ALIGNMENT];
    put(hdr, zeros, (ALIGNMENT - hdr->kv.len % ALIGNMENT) % ALIGNMENT);
    *data_bytes = off;
}

typedef struct mem_src { const uint8_t *p; size_t n; } mem_src;

/* The header bytes, and zeros for the data section that is not there (the parser reads
 * ahead in windows; it never interprets tensor data). */
static tl_status mem_read(void *src, uint64_t offset, void *dst, size_t len) {
    const mem_src *m = src;
    size_t have = offset < m->n ? (size_t)(m->n - offset) : 0;
    if (have > len) have = len;
    if (have) memcpy(dst, m->p + offset, have);
    memset((uint8_t *)dst + have, 0, len - have);
    return TL_OK;
}

tl_status tl_gguf_writer_parse(tl_gguf_writer *w, const char *what, tl_gguf **out) {
    *out = NULL;
    if (w->oom) return tl_error_set(TL_ERR_NOMEM, "gguf writer: out of memory");
    tl_gguf_writer hdr = {0};
    uint64_t data_bytes;
    build_header(w, &hdr, &data_bytes);
    tl_status st = hdr.oom ? tl_error_set(TL_ERR_NOMEM, "gguf writer: out of memory") : TL_OK;
    mem_src src = {hdr.kv.p, hdr.kv.len};
    if (!st) st = tl_gguf_parse(mem_read, &src, (uint64_t)hdr.kv.len + data_bytes, what, out);
    free(hdr.kv.p);
    return st;
}

static tl_status write_body(tl_gguf_writer *w, tl_out_file *out, tl_gguf_fill_fn fill,
                            void *user) {
    /* header + metadata + tensor infos, built in one buffer */
    tl_gguf_writer hdr = {0};
    uint64_t data_bytes;
    build_header(w, &hdr, &data_bytes);
    static const uint8_t zeros[ALIGNMENT];
    tl_status st = hdr.oom ? tl_error_set(TL_ERR_NOMEM, "gguf writer: out of memory")
                           : tl_out_file_write(out, hdr.kv.p, hdr.kv.len);
    free(hdr.kv.p);
    if (st) return st;

    uint8_t *chunk = malloc(CHUNK);
    if (!chunk) return tl_error_set(TL_ERR_NOMEM, "gguf writer: out of memory");
    for (size_t i = 0; i < w->n_tensors && !st; i++) {
        wtensor *t = &w->tensors[i];
        for (uint64_t pos = 0; pos < t->nbytes && !st; pos += CHUNK) {
            size_t len = t->nbytes - pos < CHUNK ? (size_t)(t->nbytes - pos) : CHUNK;
            st = fill(user, i, pos, chunk, len);
            if (!st) st = tl_out_file_write(out, chunk, len);
        }
        size_t pad = (size_t)((ALIGNMENT - t->nbytes % ALIGNMENT) % ALIGNMENT);
        if (!st && pad) st = tl_out_file_write(out, zeros, pad);
    }
    free(chunk);
    return st;
}

tl_status tl_gguf_writer_write(tl_gguf_writer *w, const char *path, tl_gguf_fill_fn fill,
                               void *user) {
    if (w->oom) return tl_error_set(TL_ERR_NOMEM, "gguf writer: out of memory");
    tl_out_file out;
    tl_status st = tl_out_file_open(&out, path);
    if (st) return st;
    st = write_body(w, &out, fill, user);
    if (st) {
        tl_out_file_abort(&out);
        return st;
    }
    return tl_out_file_commit(&out);
}
