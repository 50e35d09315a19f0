/* gguf_read.c - GGUF v2/v3 parser.
 *
 * Reads through a byte source with a small window buffer. Nothing from the file is
 * trusted: every count, length and shape is checked against the bytes that remain
 * before memory is allocated for it, so a hostile file costs at most O(file size)
 * memory and always ends in a TL_ERR_FORMAT / TL_ERR_UNSUPPORTED message that names
 * the offending key or tensor.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "format/gguf.h"
#include "base/status.h"
#include "format/file_src.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define WINDOW (64 * 1024)

typedef struct cursor {
    tl_gguf_read_fn read;
    void *src;
    uint64_t size, pos;
    const char *what;
    uint8_t buf[WINDOW];
    uint64_t buf_start; /* file offset of buf[0] */
    size_t buf_len;
} cursor;

static tl_status cur_bytes(cursor *c, void *dst, uint64_t n, const char *field) {
    if (n > c->size - c->pos)
        return tl_error_set(TL_ERR_FORMAT, "%s: truncated: %s needs %llu bytes at offset %llu, "
                            "file has %llu", c->what, field, (unsigned long long)n,
                            (unsigned long long)c->pos, (unsigned long long)c->size);
    uint8_t *out = dst;
    while (n > 0) {
        if (c->pos < c->buf_start || c->pos >= c->buf_start + c->buf_len) {
            uint64_t left = c->size - c->pos;
            size_t len = left < WINDOW ? (size_t)left : WINDOW;
            tl_status st = c->read(c->src, c->pos, c->buf, len);
            if (st != TL_OK) return st;
            c->buf_start = c->pos;
            c->buf_len = len;
        }
        size_t off = (size_t)(c->pos - c->buf_start);
        size_t take = c->buf_len - off;
        if (take > n) take = (size_t)n;
        memcpy(out, c->buf + off, take);
        out += take;
        c->pos += take;
        n -= take;
    }
    return TL_OK;
}

static tl_status cur_u32(cursor *c, uint32_t *v, const char *field) {
    uint8_t b[4];
    tl_status st = cur_bytes(c, b, 4, field);
    if (st) return st;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return TL_OK;
}

static tl_status cur_u64(cursor *c, uint64_t *v, const char *field) {
    uint32_t lo, hi;
    tl_status st = cur_u32(c, &lo, field);
    if (!st) st = cur_u32(c, &hi, field);
    if (st) return st;
    *v = (uint64_t)hi << 32 | lo;
    return TL_OK;
}

static uint64_t cur_left(const cursor *c) { return c->size - c->pos; }

/* Reads a length-prefixed string into a fresh NUL-terminated allocation. */
static tl_status cur_str(cursor *c, tl_gguf_str *out, const char *field) {
    uint64_t len;
    tl_status st = cur_u64(c, &len, field);
    if (st) return st;
    if (len > cur_left(c))
        return tl_error_set(TL_ERR_FORMAT, "%s: %s: string length %llu exceeds the %llu bytes "
                            "left in the file", c->what, field, (unsigned long long)len,
                            (unsigned long long)cur_left(c));
    out->s = malloc((size_t)len + 1);
    if (!out->s) return tl_error_set(TL_ERR_NOMEM, "%s: out of memory", c->what);
    st = cur_bytes(c, out->s, len, field);
    if (st) { free(out->s); out->s = NULL; return st; }
    out->s[len] = 0;
    out->len = len;
    return TL_OK;
}

static size_t scalar_size(tl_gguf_type t) {
    switch (t) {
    case TL_GGUF_UINT8: case TL_GGUF_INT8: case TL_GGUF_BOOL: return 1;
    case TL_GGUF_UINT16: case TL_GGUF_INT16: return 2;
    case TL_GGUF_UINT32: case TL_GGUF_INT32: case TL_GGUF_FLOAT32: return 4;
    case TL_GGUF_UINT64: case TL_GGUF_INT64: case TL_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

const char *tl_gguf_type_name(tl_gguf_type t) {
    static const char *names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32",
                                  "float32", "bool", "string", "array", "uint64", "int64",
                                  "float64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

static uint64_t load_le(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static tl_status read_scalar(cursor *c, tl_gguf_kv *kv, const char *key) {
    size_t n = scalar_size(kv->type);
    uint8_t b[8];
    tl_status st = cur_bytes(c, b, n, key);
    if (st) return st;
    uint64_t raw = load_le(b, n);
    switch (kv->type) {
    case TL_GGUF_UINT8: case TL_GGUF_UINT16: case TL_GGUF_UINT32: case TL_GGUF_UINT64:
        kv->v.u = raw; break;
    case TL_GGUF_BOOL:
        if (raw > 1)
            return tl_error_set(TL_ERR_FORMAT, "%s: key '%s': bool value %llu is not 0 or 1",
                                c->what, key, (unsigned long long)raw);
        kv->v.u = raw; break;
    case TL_GGUF_INT8: kv->v.i = (int8_t)raw; break;
    case TL_GGUF_INT16: kv->v.i = (int16_t)raw; break;
    case TL_GGUF_INT32: kv->v.i = (int32_t)raw; break;
    case TL_GGUF_INT64: { int64_t i; memcpy(&i, &raw, 8); kv->v.i = i; break; }
    case TL_GGUF_FLOAT32: { uint32_t r = (uint32_t)raw; float f; memcpy(&f, &r, 4);
                            kv->v.f = f; break; }
    case TL_GGUF_FLOAT64: { double d; memcpy(&d, &raw, 8); kv->v.f = d; break; }
    default: break;
    }
    return TL_OK;
}

static tl_status read_array(cursor *c, tl_gguf_kv *kv, const char *key) {
    uint32_t et;
    uint64_t n;
    tl_status st = cur_u32(c, &et, key);
    if (!st) st = cur_u64(c, &n, key);
    if (st) return st;
    if (et == TL_GGUF_ARRAY)
        return tl_error_set(TL_ERR_UNSUPPORTED, "%s: key '%s': nested arrays are not supported",
                            c->what, key);
    if (et > TL_GGUF_FLOAT64)
        return tl_error_set(TL_ERR_FORMAT, "%s: key '%s': unknown array element type %u",
                            c->what, key, et);
    kv->v.arr.type = (tl_gguf_type)et;
    size_t es = et == TL_GGUF_STRING ? 8 : scalar_size((tl_gguf_type)et);
    if (n > cur_left(c) / es)
        return tl_error_set(TL_ERR_FORMAT, "%s: key '%s': array of %llu %s elements cannot fit "
                            "in the %llu bytes left", c->what, key, (unsigned long long)n,
                            tl_gguf_type_name((tl_gguf_type)et), (unsigned long long)cur_left(c));
    if (et == TL_GGUF_STRING) {
        tl_gguf_str *strs = calloc(n ? (size_t)n : 1, sizeof *strs);
        if (!strs) return tl_error_set(TL_ERR_NOMEM, "%s: out of memory", c->what);
        kv->v.arr.data = strs;
        kv->v.arr.n = n;
        for (uint64_t i = 0; i < n; i++) {
            st = cur_str(c, &strs[i], key);
            if (st) { kv->v.arr.n = i; return st; }
        }
        return TL_OK;
    }
    void *data = malloc(n ? (size_t)(n * es) : 1);
    if (!data) return tl_error_set(TL_ERR_NOMEM, "%s: out of memory", c->what);
    kv->v.arr.data = data;
    kv->v.arr.n = n;
    st = cur_bytes(c, data, n * es, key);
    if (st) return st;
    if (et == TL_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((uint8_t *)data)[i] > 1)
                return tl_error_set(TL_ERR_FORMAT, "%s: key '%s': bool element %llu is not 0/1",
                                    c->what, key, (unsigned long long)i);
    return TL_OK;
}

static void free_kv(tl_gguf_kv *kv) {
    free(kv->key);
    if (kv->type == TL_GGUF_STRING) free(kv->v.str.s);
    if (kv->type == TL_GGUF_ARRAY) {
        if (kv->v.arr.type == TL_GGUF_STRING && kv->v.arr.data) {
            tl_gguf_str *s = kv->v.arr.data;
            for (uint64_t i = 0; i < kv->v.arr.n; i++) free(s[i].s);
        }
        free(kv->v.arr.data);
    }
}

void tl_gguf_free(tl_gguf *g) {
    if (!g) return;
    for (uint64_t i = 0; i < g->n_kv; i++) free_kv(&g->kv[i]);
    for (uint64_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g);
}

static tl_status read_kvs(cursor *c, tl_gguf *g, uint64_t n_kv) {
    /* a key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes */
    if (n_kv > cur_left(c) / 13)
        return tl_error_set(TL_ERR_FORMAT, "%s: metadata count %llu is impossible for a file "
                            "of %llu bytes", c->what, (unsigned long long)n_kv,
                            (unsigned long long)c->size);
    g->kv = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kv);
    if (!g->kv) return tl_error_set(TL_ERR_NOMEM, "%s: out of memory", c->what);
    for (uint64_t i = 0; i < n_kv; i++) {
        tl_gguf_kv *kv = &g->kv[i];
        tl_gguf_str key;
        tl_status st = cur_str(c, &key, "metadata key");
        if (st) return st;
        kv->key = key.s;
        g->n_kv = i + 1;
        if (strlen(key.s) != key.len)
            return tl_error_set(TL_ERR_FORMAT, "%s: metadata key %llu contains a NUL byte",
                                c->what, (unsigned long long)i);
        uint32_t type;
        st = cur_u32(c, &type, kv->key);
        if (st) return st;
        if (type > TL_GGUF_FLOAT64)
            return tl_error_set(TL_ERR_FORMAT, "%s: key '%s' has unknown value type %u",
                                c->what, kv->key, type);
        kv->type = (tl_gguf_type)type;
        if (type == TL_GGUF_STRING) {
            kv->type = TL_GGUF_UINT8; /* keep free_kv safe until the string is read */
            st = cur_str(c, &kv->v.str, kv->key);
            if (st) return st;
            kv->type = TL_GGUF_STRING;
        } else if (type == TL_GGUF_ARRAY) {
            kv->v.arr.data = NULL;
            kv->v.arr.n = 0;
            st = read_array(c, kv, kv->key);
        } else {
            st = read_scalar(c, kv, kv->key);
        }
        if (st) return st;
    }
    return TL_OK;
}

static tl_status read_tensors(cursor *c, tl_gguf *g, uint64_t n_tensors) {
    /* a tensor info takes at least 8 (name) + 4 (n_dims) + 8 (ne0) + 4 (type) + 8 (offset) */
    if (n_tensors > cur_left(c) / 32)
        return tl_error_set(TL_ERR_FORMAT, "%s: tensor count %llu is impossible for a file of "
                            "%llu bytes", c->what, (unsigned long long)n_tensors,
                            (unsigned long long)c->size);
    g->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    if (!g->tensors) return tl_error_set(TL_ERR_NOMEM, "%s: out of memory", c->what);
    for (uint64_t i = 0; i < n_tensors; i++) {
        tl_gguf_tensor *t = &g->tensors[i];
        tl_gguf_str name;
        tl_status st = cur_str(c, &name, "tensor name");
        if (st) return st;
        t->name = name.s;
        g->n_tensors = i + 1;
        if (strlen(name.s) != name.len || name.len == 0)
            return tl_error_set(TL_ERR_FORMAT, "%s: tensor %llu has an empty name or a NUL in "
                                "it", c->what, (unsigned long long)i);
        uint32_t n_dims, type;
        st = cur_u32(c, &n_dims, t->name);
        if (st) return st;
        if (n_dims < 1 || n_dims > TL_GGUF_MAX_DIMS)
            return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (1 to %d "
                                "allowed)", c->what, t->name, n_dims, TL_GGUF_MAX_DIMS);
        t->n_dims = n_dims;
        uint64_t n_elems = 1;
        for (uint32_t d = 0; d < TL_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            st = cur_u64(c, &t->ne[d], t->name);
            if (st) return st;
            if (t->ne[d] == 0 || t->ne[d] > (UINT64_C(1) << 62) / n_elems)
                return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' has an invalid or "
                                    "overflowing shape (dimension %u = %llu)", c->what,
                                    t->name, d, (unsigned long long)t->ne[d]);
            n_elems *= t->ne[d];
        }
        t->n_elems = n_elems;
        st = cur_u32(c, &type, t->name);
        if (st) return st;
        if (!tl_type_known(type))
            return tl_error_set(TL_ERR_UNSUPPORTED, "%s: tensor '%s' has tensor type %u, which "
                                "tierllm does not support (F32, F16, BF16, Q8_0, Q4_0, Q4_1, "
                                "Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)",
                                c->what, t->name, type);
        t->type = (tl_type)type;
        size_t be = tl_type_block_elems(t->type);
        if (n_elems % be != 0)
            return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' has %llu elements, not a "
                                "multiple of the %s block size %zu", c->what, t->name,
                                (unsigned long long)n_elems, tl_type_name(t->type), be);
        if (n_elems / be > UINT64_MAX / tl_type_block_bytes(t->type))
            return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' has an overflowing shape (%llu "
                                "%s elements do not fit in 2^64 bytes)", c->what, t->name,
                                (unsigned long long)n_elems, tl_type_name(t->type));
        t->nbytes = n_elems / be * tl_type_block_bytes(t->type);
        st = cur_u64(c, &t->offset, t->name);
        if (st) return st;
    }
    return TL_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Rejects a repeated name among n names in O(n log n) (hostile files may hold millions). */
static tl_status check_unique(cursor *c, char **names, uint64_t n, const char *kind) {
    if (n < 2) return TL_OK;
    qsort(names, (size_t)n, sizeof *names, cmp_name);
    for (uint64_t i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            return tl_error_set(TL_ERR_FORMAT, "%s: duplicate %s '%s'", c->what, kind, names[i]);
    return TL_OK;
}

static tl_status check_names(cursor *c, tl_gguf *g) {
    uint64_t n = g->n_kv > g->n_tensors ? g->n_kv : g->n_tensors;
    char **names = malloc((n ? (size_t)n : 1) * sizeof *names);
    if (!names) return tl_error_set(TL_ERR_NOMEM, "%s: out of memory", c->what);
    for (uint64_t i = 0; i < g->n_kv; i++) names[i] = g->kv[i].key;
    tl_status st = check_unique(c, names, g->n_kv, "metadata key");
    for (uint64_t i = 0; !st && i < g->n_tensors; i++) names[i] = g->tensors[i].name;
    if (!st) st = check_unique(c, names, g->n_tensors, "tensor name");
    free(names);
    return st;
}

static tl_status find_alignment(cursor *c, tl_gguf *g) {
    g->alignment = 32;
    const tl_gguf_kv *kv = tl_gguf_find(g, "general.alignment");
    if (!kv) return TL_OK;
    uint32_t a;
    if (tl_gguf_get_u32(g, "general.alignment", &a) != TL_OK || a == 0 || (a & (a - 1)) ||
        a > (1u << 20))
        return tl_error_set(TL_ERR_FORMAT, "%s: general.alignment must be a power of two "
                            "up to 1 MiB", c->what);
    g->alignment = a;
    return TL_OK;
}

static tl_status place_tensors(cursor *c, tl_gguf *g) {
    uint64_t a = g->alignment;
    uint64_t start = (c->pos + a - 1) / a * a;
    if (start > c->size && g->n_tensors > 0)
        return tl_error_set(TL_ERR_FORMAT, "%s: truncated: tensor data would start at %llu, "
                            "past the end of the file (%llu bytes)", c->what,
                            (unsigned long long)start, (unsigned long long)c->size);
    g->data_offset = start;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        tl_gguf_tensor *t = &g->tensors[i];
        if (t->offset % a != 0)
            return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' data offset %llu is not a "
                                "multiple of the alignment %llu", c->what, t->name,
                                (unsigned long long)t->offset, (unsigned long long)a);
        uint64_t avail = c->size - start;
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' (%llu bytes at data offset "
                                "%llu) runs past the end of the file (%llu bytes of data): "
                                "truncated file?", c->what, t->name,
                                (unsigned long long)t->nbytes, (unsigned long long)t->offset,
                                (unsigned long long)avail);
        t->offset += start;
    }
    return TL_OK;
}

tl_status tl_gguf_parse(tl_gguf_read_fn read, void *src, uint64_t file_size,
                        const char *what, tl_gguf **out) {
    *out = NULL;
    cursor *c = malloc(sizeof *c);
    tl_gguf *g = calloc(1, sizeof *g);
    if (!c || !g) {
        free(c);
        free(g);
        return tl_error_set(TL_ERR_NOMEM, "%s: out of memory", what);
    }
    c->read = read;
    c->src = src;
    c->size = file_size;
    c->pos = 0;
    c->what = what;
    c->buf_start = 0;
    c->buf_len = 0;
    g->file_size = file_size;

    uint32_t magic = 0, version = 0;
    uint64_t n_tensors = 0, n_kv = 0;
    tl_status st = cur_u32(c, &magic, "magic");
    if (!st && magic != GGUF_MAGIC)
        st = tl_error_set(TL_ERR_FORMAT, "%s: not a GGUF file (bad magic 0x%08x)", what, magic);
    if (!st) st = cur_u32(c, &version, "version");
    if (!st && version == 1)
        st = tl_error_set(TL_ERR_UNSUPPORTED, "%s: GGUF version 1 is a legacy format that "
                          "tierllm does not read; convert it with a current llama.cpp", what);
    else if (!st && version != 2 && version != 3)
        st = tl_error_set(TL_ERR_FORMAT, "%s: unknown GGUF version %u (2 and 3 are supported)",
                          what, version);
    g->version = version;
    if (!st) st = cur_u64(c, &n_tensors, "tensor count");
    if (!st) st = cur_u64(c, &n_kv, "metadata count");
    if (!st) st = read_kvs(c, g, n_kv);
    if (!st) st = read_tensors(c, g, n_tensors);
    if (!st) st = check_names(c, g);
    if (!st) st = find_alignment(c, g);
    if (!st) st = place_tensors(c, g);
    free(c);
    if (st) {
        tl_gguf_free(g);
        return st;
    }
    *out = g;
    return TL_OK;
}

tl_status tl_gguf_open(const char *path, tl_gguf **out) {
    *out = NULL;
    tl_file_src src;
    uint64_t size;
    tl_status st = tl_file_src_open(path, TL_ERR_FORMAT, &src, &size);
    if (st) return st;
    st = tl_gguf_parse(tl_file_src_read, &src, size, path, out);
    tl_file_src_close(&src);
    return st;
}

/* ---- look-ups ---- */

const tl_gguf_kv *tl_gguf_find(const tl_gguf *g, const char *key) {
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0) return &g->kv[i];
    return NULL;
}

static tl_status get_int(const tl_gguf *g, const char *key, int64_t lo, int64_t hi,
                         int64_t *out) {
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    if (!kv) return tl_error_set(TL_ERR_FORMAT, "missing metadata key '%s'", key);
    switch (kv->type) {
    case TL_GGUF_UINT8: case TL_GGUF_UINT16: case TL_GGUF_UINT32: case TL_GGUF_UINT64:
        if (kv->v.u > (uint64_t)hi) break;
        *out = (int64_t)kv->v.u;
        return TL_OK;
    case TL_GGUF_INT8: case TL_GGUF_INT16: case TL_GGUF_INT32: case TL_GGUF_INT64:
        if (kv->v.i < lo || kv->v.i > hi) break;
        *out = kv->v.i;
        return TL_OK;
    default:
        return tl_error_set(TL_ERR_FORMAT, "metadata key '%s' is a %s, expected an integer",
                            key, tl_gguf_type_name(kv->type));
    }
    return tl_error_set(TL_ERR_FORMAT, "metadata key '%s' is out of range", key);
}

tl_status tl_gguf_get_u32(const tl_gguf *g, const char *key, uint32_t *out) {
    int64_t v;
    tl_status st = get_int(g, key, 0, UINT32_MAX, &v);
    if (!st) *out = (uint32_t)v;
    return st;
}

tl_status tl_gguf_get_i32(const tl_gguf *g, const char *key, int32_t *out) {
    int64_t v;
    tl_status st = get_int(g, key, INT32_MIN, INT32_MAX, &v);
    if (!st) *out = (int32_t)v;
    return st;
}

tl_status tl_gguf_get_f32(const tl_gguf *g, const char *key, float *out) {
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    if (!kv) return tl_error_set(TL_ERR_FORMAT, "missing metadata key '%s'", key);
    if (kv->type != TL_GGUF_FLOAT32 && kv->type != TL_GGUF_FLOAT64)
        return tl_error_set(TL_ERR_FORMAT, "metadata key '%s' is a %s, expected a float", key,
                            tl_gguf_type_name(kv->type));
    *out = (float)kv->v.f;
    return TL_OK;
}

tl_status tl_gguf_get_bool(const tl_gguf *g, const char *key, bool *out) {
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    if (!kv) return tl_error_set(TL_ERR_FORMAT, "missing metadata key '%s'", key);
    if (kv->type != TL_GGUF_BOOL)
        return tl_error_set(TL_ERR_FORMAT, "metadata key '%s' is a %s, expected a bool", key,
                            tl_gguf_type_name(kv->type));
    *out = kv->v.u != 0;
    return TL_OK;
}

tl_status tl_gguf_get_str(const tl_gguf *g, const char *key, const tl_gguf_str **out) {
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    if (!kv) return tl_error_set(TL_ERR_FORMAT, "missing metadata key '%s'", key);
    if (kv->type != TL_GGUF_STRING)
        return tl_error_set(TL_ERR_FORMAT, "metadata key '%s' is a %s, expected a string", key,
                            tl_gguf_type_name(kv->type));
    *out = &kv->v.str;
    return TL_OK;
}

tl_status tl_gguf_get_arr(const tl_gguf *g, const char *key, tl_gguf_type elem_type,
                          uint64_t *n, const void **data) {
    const tl_gguf_kv *kv = tl_gguf_find(g, key);
    if (!kv) return tl_error_set(TL_ERR_FORMAT, "missing metadata key '%s'", key);
    if (kv->type != TL_GGUF_ARRAY || kv->v.arr.type != elem_type)
        return tl_error_set(TL_ERR_FORMAT, "metadata key '%s' is not an array of %s", key,
                            tl_gguf_type_name(elem_type));
    *n = kv->v.arr.n;
    *data = kv->v.arr.data;
    return TL_OK;
}

const tl_gguf_tensor *tl_gguf_find_tensor(const tl_gguf *g, const char *name) {
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0) return &g->tensors[i];
    return NULL;
}
