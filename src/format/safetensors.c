/* safetensors.c - safetensors reader (see safetensors.h for the checks it makes).
 *
 * The header length is checked against the file size and TL_ST_MAX_HEADER before the
 * header is read, so a hostile file costs at most about its own size in memory (plus
 * Jansson's tree for at most 100 MB of JSON). Jansson parses strictly (base/json.h);
 * every tensor entry is then checked field by field, and only after all of them are
 * valid are they sorted by data offset and checked for overlaps. On any error the
 * partial result is freed and the message names the file and, where there is one, the
 * tensor; each tensor is checked completely before the next, so the first bad entry in
 * Jansson's order is the one reported.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "format/safetensors.h"
#include "base/json.h"
#include "base/status.h"
#include "format/file_src.h"

/* Facts about the dtypes tierllm computes with, indexed by tl_st_dtype. */
static const struct { const char *name; uint32_t size; } k_dtypes[] = {
    [TL_ST_F32] = {"F32", 4},
    [TL_ST_F16] = {"F16", 2},
    [TL_ST_BF16] = {"BF16", 2},
};
#define N_DTYPES (sizeof k_dtypes / sizeof k_dtypes[0])

/* The other dtypes of the safetensors format: valid files that tierllm cannot compute
 * with (TL_ERR_UNSUPPORTED). Any other dtype string is malformed (TL_ERR_FORMAT). */
static const char *const k_other_dtypes[] = {
    "F64", "I64", "U64", "I32", "U32", "I16", "U16", "I8", "U8", "BOOL", "C64",
    "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",
};

const char *tl_st_dtype_name(tl_st_dtype t) {
    return (unsigned)t < N_DTYPES ? k_dtypes[t].name : "unknown";
}

uint32_t tl_st_dtype_size(tl_st_dtype t) { return (unsigned)t < N_DTYPES ? k_dtypes[t].size : 0; }

typedef struct ctx {
    const char *what;
    uint64_t data_len; /* bytes of the data region: file_size - data_offset */
} ctx;

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "an unknown value";
}

/* "[2, 3, 4]" into buf. */
static void fmt_shape(char *buf, size_t cap, const uint64_t *shape, uint32_t n_dims) {
    size_t len = 0;
    buf[0] = 0;
    len += (size_t)snprintf(buf, cap, "[");
    for (uint32_t d = 0; d < n_dims && len < cap; d++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%llu", d ? ", " : "",
                                (unsigned long long)shape[d]);
    if (len < cap) snprintf(buf + len, cap - len, "]");
}

/* Element i of a shape or data_offsets array as a non-negative integer. */
static tl_status get_index(const ctx *c, const char *name, const char *field, size_t i,
                           const json_t *v, uint64_t *out) {
    if (!json_is_integer(v))
        return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s': %s[%zu] is %s, expected a "
                            "non-negative integer", c->what, name, field, i, json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < 0)
        return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s': %s[%zu] is %lld, expected a "
                            "non-negative integer", c->what, name, field, i, (long long)x);
    *out = (uint64_t)x;
    return TL_OK;
}

static tl_status parse_dtype(const ctx *c, const char *name, const json_t *v,
                             tl_st_dtype *out) {
    if (!json_is_string(v))
        return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s': dtype is %s, expected a string",
                            c->what, name, json_kind(v));
    const char *s = json_string_value(v);
    for (size_t i = 0; i < N_DTYPES; i++)
        if (strcmp(s, k_dtypes[i].name) == 0) {
            *out = (tl_st_dtype)i;
            return TL_OK;
        }
    for (size_t i = 0; i < sizeof k_other_dtypes / sizeof k_other_dtypes[0]; i++)
        if (strcmp(s, k_other_dtypes[i]) == 0)
            return tl_error_set(TL_ERR_UNSUPPORTED, "%s: dtype %s of tensor '%s' is not "
                                "supported (F32, F16, BF16)", c->what, s, name);
    return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' has unknown dtype '%.32s' (not a "
                        "safetensors dtype; tierllm reads F32, F16, BF16)", c->what, name, s);
}

static tl_status parse_shape(const ctx *c, const char *name, const json_t *v,
                             tl_st_tensor *t) {
    if (!json_is_array(v))
        return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s': shape is %s, expected an array "
                            "of integers", c->what, name, json_kind(v));
    size_t n = json_array_size(v);
    if (n > TL_ST_MAX_DIMS)
        return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' has %zu dimensions (0 to %d "
                            "allowed)", c->what, name, n, TL_ST_MAX_DIMS);
    t->n_dims = (uint32_t)n;
    bool has_zero = false;
    for (size_t d = 0; d < n; d++) {
        tl_status st = get_index(c, name, "shape", d, json_array_get(v, d), &t->shape[d]);
        if (st) return st;
        has_zero |= t->shape[d] == 0;
    }
    /* the byte size, not only the element count, must fit in 64 bits; a zero dimension
     * makes any shape empty, so its other dimensions are not multiplied */
    uint64_t limit = UINT64_MAX / k_dtypes[t->dtype].size, n_elems = has_zero ? 0 : 1;
    for (size_t d = 0; d < n && !has_zero; d++) {
        if (n_elems > limit / t->shape[d]) {
            char sh[128];
            fmt_shape(sh, sizeof sh, t->shape, t->n_dims);
            return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s': shape %s overflows (%s data "
                                "would exceed 2^64 bytes)", c->what, name, sh,
                                k_dtypes[t->dtype].name);
        }
        n_elems *= t->shape[d];
    }
    t->n_elems = n_elems;
    t->nbytes = n_elems * k_dtypes[t->dtype].size;
    return TL_OK;
}

static tl_status parse_offsets(const ctx *c, const char *name, const json_t *v,
                               tl_st_tensor *t) {
    if (!json_is_array(v))
        return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s': data_offsets is %s, expected "
                            "[begin, end]", c->what, name, json_kind(v));
    if (json_array_size(v) != 2)
        return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s': data_offsets has %zu elements, "
                            "expected [begin, end]", c->what, name, json_array_size(v));
    uint64_t b, e;
    tl_status st = get_index(c, name, "data_offsets", 0, json_array_get(v, 0), &b);
    if (!st) st = get_index(c, name, "data_offsets", 1, json_array_get(v, 1), &e);
    if (st) return st;
    if (b > e)
        return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] are "
                            "reversed (begin > end)", c->what, name, (unsigned long long)b,
                            (unsigned long long)e);
    if (e > c->data_len)
        return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] run "
                            "past the end of the file (the data region holds %llu bytes): "
                            "truncated file?", c->what, name, (unsigned long long)b,
                            (unsigned long long)e, (unsigned long long)c->data_len);
    if (e - b != t->nbytes) {
        char sh[128];
        fmt_shape(sh, sizeof sh, t->shape, t->n_dims);
        return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s': shape/byte mismatch: shape %s "
                            "of %s needs %llu bytes, data_offsets [%llu, %llu] hold %llu",
                            c->what, name, sh, k_dtypes[t->dtype].name,
                            (unsigned long long)t->nbytes, (unsigned long long)b,
                            (unsigned long long)e, (unsigned long long)(e - b));
    }
    t->offset = b; /* made absolute by the caller */
    return TL_OK;
}

static const char *const k_keys[] = {"dtype", "shape", "data_offsets"};

/* One tensor entry; `name` is already checked. Fills everything but t->name. */
static tl_status parse_entry(const ctx *c, const char *name, const json_t *v,
                             tl_st_tensor *t) {
    if (!json_is_object(v))
        return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s': entry is %s, expected an object "
                            "with dtype, shape and data_offsets", c->what, name, json_kind(v));
    const char *key;
    json_t *x;
    json_object_foreach((json_t *)v, key, x) {
        size_t k = 0;
        while (k < 3 && strcmp(key, k_keys[k]) != 0) k++;
        if (k == 3)
            return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' has unexpected key '%.64s' "
                                "(only dtype, shape and data_offsets are allowed)", c->what,
                                name, key);
    }
    const json_t *f[3];
    for (size_t k = 0; k < 3; k++) {
        f[k] = json_object_get(v, k_keys[k]);
        if (!f[k])
            return tl_error_set(TL_ERR_FORMAT, "%s: tensor '%s' is missing key '%s'", c->what,
                                name, k_keys[k]);
    }
    tl_status st = parse_dtype(c, name, f[0], &t->dtype);
    if (!st) st = parse_shape(c, name, f[1], t);
    if (!st) st = parse_offsets(c, name, f[2], t);
    return st;
}

static tl_status check_metadata(const ctx *c, const json_t *v) {
    if (!json_is_object(v))
        return tl_error_set(TL_ERR_FORMAT, "%s: __metadata__ is %s, expected an object of "
                            "strings", c->what, json_kind(v));
    const char *key;
    json_t *x;
    json_object_foreach((json_t *)v, key, x)
        if (!json_is_string(x))
            return tl_error_set(TL_ERR_FORMAT, "%s: __metadata__ value '%.64s' is %s, expected "
                                "a string", c->what, key, json_kind(x));
    return TL_OK;
}

static int cmp_offset(const void *pa, const void *pb) {
    const tl_st_tensor *a = pa, *b = pb;
    if (a->offset != b->offset) return a->offset < b->offset ? -1 : 1;
    if (a->nbytes != b->nbytes) return a->nbytes < b->nbytes ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* Sorts by data offset and refuses overlapping byte ranges (empty ranges overlap
 * nothing). Offsets are still relative to the data region. */
static tl_status check_overlaps(const ctx *c, tl_st_file *f) {
    if (f->n_tensors > 1) qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_offset);
    const tl_st_tensor *last = NULL; /* the non-empty tensor reaching furthest so far */
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const tl_st_tensor *t = &f->tensors[i];
        if (t->nbytes == 0) continue;
        if (last && t->offset < last->offset + last->nbytes)
            return tl_error_set(TL_ERR_FORMAT, "%s: tensors '%s' (data bytes %llu to %llu) and "
                                "'%s' (data bytes %llu to %llu) overlap", c->what, last->name,
                                (unsigned long long)last->offset,
                                (unsigned long long)(last->offset + last->nbytes), t->name,
                                (unsigned long long)t->offset,
                                (unsigned long long)(t->offset + t->nbytes));
        if (!last || t->offset + t->nbytes > last->offset + last->nbytes) last = t;
    }
    return TL_OK;
}

static tl_status parse_tensors(const ctx *c, const json_t *root, tl_st_file *f) {
    json_t *meta = json_object_get(root, "__metadata__");
    if (meta) {
        tl_status st = check_metadata(c, meta);
        if (st) return st;
    }
    size_t n = json_object_size(root) - (meta ? 1 : 0);
    if (n > TL_ST_MAX_TENSORS)
        return tl_error_set(TL_ERR_FORMAT, "%s: %zu tensors (at most %u allowed)", c->what, n,
                            TL_ST_MAX_TENSORS);
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    if (!f->tensors) return tl_error_set(TL_ERR_NOMEM, "%s: out of memory", c->what);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)root, key, v) {
        if (v == meta) continue;
        size_t len = strlen(key); /* Jansson refuses NUL in strings: this is the key */
        if (len == 0)
            return tl_error_set(TL_ERR_FORMAT, "%s: a tensor has an empty name", c->what);
        if (len > TL_ST_MAX_NAME)
            return tl_error_set(TL_ERR_FORMAT, "%s: tensor name '%.48s...' is %zu bytes long "
                                "(at most %u)", c->what, key, len, TL_ST_MAX_NAME);
        if (f->n_tensors == n) break; /* cannot happen: n counts the keys */
        tl_st_tensor *t = &f->tensors[f->n_tensors];
        t->name = malloc(len + 1);
        if (!t->name) return tl_error_set(TL_ERR_NOMEM, "%s: out of memory", c->what);
        memcpy(t->name, key, len + 1);
        f->n_tensors++;
        tl_status st = parse_entry(c, t->name, v, t);
        if (st) return st;
    }
    /* names are unique: Jansson refused duplicate keys (JSON_REJECT_DUPLICATES) */
    tl_status st = check_overlaps(c, f);
    if (st) return st;
    for (uint64_t i = 0; i < f->n_tensors; i++) f->tensors[i].offset += f->data_offset;
    return TL_OK;
}

static tl_status read_header(tl_gguf_read_fn read, void *src, uint64_t file_size,
                             const char *what, uint64_t *n_out) {
    if (file_size < 8)
        return tl_error_set(TL_ERR_FORMAT, "%s: truncated: %llu bytes, too short for the "
                            "8-byte safetensors header length", what,
                            (unsigned long long)file_size);
    uint8_t b[8];
    tl_status st = read(src, 0, b, 8);
    if (st) return st;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)b[i] << (8 * i);
    if (n == 0)
        return tl_error_set(TL_ERR_FORMAT, "%s: safetensors header length is 0", what);
    if (n > file_size - 8)
        return tl_error_set(TL_ERR_FORMAT, "%s: safetensors header length %llu runs past the "
                            "end of the file (%llu bytes): truncated, or not a safetensors "
                            "file?", what, (unsigned long long)n, (unsigned long long)file_size);
    if (n > TL_ST_MAX_HEADER)
        return tl_error_set(TL_ERR_FORMAT, "%s: safetensors header length %llu exceeds the "
                            "limit of %u bytes", what, (unsigned long long)n, TL_ST_MAX_HEADER);
    *n_out = n;
    return TL_OK;
}

tl_status tl_st_parse(tl_gguf_read_fn read, void *src, uint64_t file_size, const char *what,
                      tl_st_file **out) {
    *out = NULL;
    if (!what) what = "safetensors";
    uint64_t n = 0;
    tl_status st = read_header(read, src, file_size, what, &n);
    if (st) return st;
    char *hdr = malloc((size_t)n);
    tl_st_file *f = calloc(1, sizeof *f);
    if (!hdr || !f) {
        free(hdr);
        free(f);
        return tl_error_set(TL_ERR_NOMEM, "%s: out of memory for a %llu-byte header", what,
                            (unsigned long long)n);
    }
    f->data_offset = 8 + n;
    f->file_size = file_size;
    st = read(src, 8, hdr, (size_t)n);
    json_t *root = NULL;
    if (!st) {
        char err[256];
        st = tl_json_parse(hdr, (size_t)n, TL_JSON_ANY, &root, err, sizeof err);
        if (st)
            st = tl_error_set(TL_ERR_FORMAT, "%s: the safetensors header is not valid JSON%s: "
                              "%s", what, strstr(err, "decode byte") ? " (invalid UTF-8)" : "",
                              err);
    }
    free(hdr);
    if (!st && !json_is_object(root))
        st = tl_error_set(TL_ERR_FORMAT, "%s: the safetensors header is %s, expected a JSON "
                          "object of tensors", what, json_kind(root));
    if (!st) {
        ctx c = {what, file_size - f->data_offset};
        st = parse_tensors(&c, root, f);
    }
    json_decref(root);
    if (st) {
        tl_st_free(f);
        return st;
    }
    *out = f;
    return TL_OK;
}

void tl_st_free(tl_st_file *f) {
    if (!f) return;
    for (uint64_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f);
}

const tl_st_tensor *tl_st_find(const tl_st_file *f, const char *name) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

tl_status tl_st_open(const char *path, tl_st_file **out) {
    *out = NULL;
    tl_file_src src;
    uint64_t size;
    tl_status st = tl_file_src_open(path, TL_ERR_IO, &src, &size);
    if (st) return st;
    st = tl_st_parse(tl_file_src_read, &src, size, path, out);
    tl_file_src_close(&src);
    return st;
}
