/* test_safetensors.c - the safetensors reader: valid files parse into exactly the fields
 * they were written with; hostile files are refused with the expected status and a
 * message naming the problem, never a crash.
 *
 * Valid: a file written here with tensors of each dtype (0-d to 4-d, an empty one, a
 * 512-byte name, gaps between tensors, __metadata__), read through tl_st_open and
 * through an in-memory source; small edge files; the shared Hugging Face model
 * hf/fake-gpt2-random/model.safetensors. Hostile: a table of headers (the JSON is
 * written with ' for " to stay readable), raw header lengths, read failures, every
 * truncation of the valid file and a few thousand seeded byte mutations, each of which
 * must parse into a directory that keeps the reader's promises or fail cleanly. Each
 * table case also goes through a real file, and both paths must agree. Under
 * TL_SANITIZE this shows that no case reads out of bounds or leaks.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tierllm.h"
#include "base/rng.h"
#include "base/status.h"
#include "format/safetensors.h"
#include "testutil.h"

/* ---- byte buffers and sources ---------------------------------------------------------- */

typedef tl_test_buf buf;

static void put(buf *b, const void *d, size_t n) { tl_test_buf_put(b, d, n); }

static void put_u64(buf *b, uint64_t v) {
    uint8_t t[8];
    for (int i = 0; i < 8; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, 8);
}

/* A file: header length, the header (JSON with ' turned into "), data_len bytes. */
static void make_file(buf *b, const char *json, uint64_t data_len) {
    *b = (buf){0};
    size_t n = strlen(json);
    put_u64(b, n);
    size_t at = b->len;
    put(b, json, n);
    for (size_t i = 0; i < n; i++)
        if (b->p[at + i] == '\'') b->p[at + i] = '"';
    for (uint64_t i = 0; i < data_len; i++) put(b, &(uint8_t){(uint8_t)(i * 7 + 1)}, 1);
}

/* An in-memory source of `size` bytes: p[0..n), then zeros (a large file whose tail
 * the reader must never need). fail_reads makes every read fail. */
typedef struct mem_src { const uint8_t *p; size_t n; uint64_t size; bool fail_reads; } mem_src;

static tl_status mem_read(void *src, uint64_t offset, void *dst, size_t len) {
    mem_src *m = src;
    if (m->fail_reads)
        return tl_error_set(TL_ERR_IO, "mem: injected read failure at offset %llu",
                            (unsigned long long)offset);
    if (offset > m->size || len > m->size - offset) {
        fprintf(stderr, "the reader read past the end: %llu + %zu > %llu\n",
                (unsigned long long)offset, len, (unsigned long long)m->size);
        tl_test_failures++;
        return tl_error_set(TL_ERR_IO, "mem: read past the end");
    }
    size_t real = offset < m->n ? (size_t)(m->n - offset < len ? m->n - offset : len) : 0;
    if (real) memcpy(dst, m->p + offset, real);
    memset((uint8_t *)dst + real, 0, len - real);
    return TL_OK;
}

static tl_status parse_buf(const buf *b, const char *what, tl_st_file **out) {
    mem_src m = {b->p, b->len, b->len, false};
    return tl_st_parse(mem_read, &m, b->len, what, out);
}

static char g_dir[1024];

static void write_bytes(const char *path, const buf *b) {
    FILE *fp = fopen(path, "wb");
    if (!fp || (b->len && fwrite(b->p, 1, b->len, fp) != b->len) || fclose(fp) != 0) {
        perror(path);
        exit(1);
    }
}

static bool has_word(const char *msg, const char *w) {
    if (!w) return true;
    char alt[256]; /* "a|b": any one of the alternatives */
    snprintf(alt, sizeof alt, "%s", w);
    for (char *save = NULL, *p = strtok_r(alt, "|", &save); p; p = strtok_r(NULL, "|", &save))
        if (strstr(msg, p)) return true;
    return false;
}

/* ---- the promises of a parsed file ------------------------------------------------------- */

/* Checks everything safetensors.h promises about a parsed directory. */
static void check_invariants(const char *label, const tl_st_file *f) {
    int bad = 0;
#define INV(c)                                                                           \
    do {                                                                                 \
        if (!(c) && !bad++) {                                                            \
            fprintf(stderr, "%s: broken promise: %s\n", label, #c);                      \
            tl_test_failures++;                                                          \
        }                                                                                \
    } while (0)
    INV(f->data_offset > 8 && f->data_offset <= f->file_size);
    INV(f->data_offset - 8 <= TL_ST_MAX_HEADER);
    INV(f->n_tensors <= TL_ST_MAX_TENSORS);
    uint64_t reach = 0; /* end of the furthest non-empty tensor so far */
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const tl_st_tensor *t = &f->tensors[i];
        size_t len = strlen(t->name);
        INV(len >= 1 && len <= TL_ST_MAX_NAME);
        INV(t->dtype == TL_ST_F32 || t->dtype == TL_ST_F16 || t->dtype == TL_ST_BF16);
        INV(t->n_dims <= TL_ST_MAX_DIMS);
        uint64_t n = 1;
        for (uint32_t d = 0; d < TL_ST_MAX_DIMS; d++) {
            if (d < t->n_dims) n *= t->shape[d];
            else INV(t->shape[d] == 0);
        }
        INV(n == t->n_elems);
        INV(t->nbytes == t->n_elems * tl_st_dtype_size(t->dtype));
        INV(t->offset >= f->data_offset && t->offset <= f->file_size);
        INV(t->nbytes <= f->file_size - t->offset);
        if (i > 0) INV(t->offset >= f->tensors[i - 1].offset);
        if (t->nbytes) {
            INV(t->offset >= reach);
            reach = t->offset + t->nbytes;
        }
        if (i < 64) INV(tl_st_find(f, t->name) == t);
    }
    INV(tl_st_find(f, "no.such.tensor") == NULL);
#undef INV
}

/* ---- valid files ------------------------------------------------------------------------- */

typedef struct spec {
    const char *name;
    tl_st_dtype dtype;
    uint32_t n_dims;
    uint64_t shape[4];
    uint64_t gap; /* bytes left unused before this tensor's data */
} spec;

static char g_long_name[TL_ST_MAX_NAME + 1];

/* Writes the specs' tensors in `order` (data order) into a file; the JSON lists them in
 * spec order, after a __metadata__ object, padded with spaces to a multiple of 8 as
 * the reference writer does. begin[i] receives spec i's data offset. Each tensor's
 * bytes are (spec index + 1). */
static void build_valid(buf *b, const spec *s, size_t n, const size_t *order, uint64_t *begin) {
    uint64_t at = 0, nbytes[16];
    for (size_t k = 0; k < n; k++) {
        const spec *t = &s[order[k]];
        uint64_t e = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) e *= t->shape[d];
        nbytes[order[k]] = e * tl_st_dtype_size(t->dtype);
        at += t->gap;
        begin[order[k]] = at;
        at += nbytes[order[k]];
    }
    buf j = {0};
    const char *meta = "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"unicod\xc3\xa9\"}";
    put(&j, meta, strlen(meta));
    for (size_t i = 0; i < n; i++) {
        char ent[1024], sh[128] = "";
        for (uint32_t d = 0; d < s[i].n_dims; d++)
            snprintf(sh + strlen(sh), sizeof sh - strlen(sh), "%s%llu", d ? "," : "",
                     (unsigned long long)s[i].shape[d]);
        int len = snprintf(ent, sizeof ent, ",\n  \"%s\": {\"dtype\": \"%s\", \"shape\": [%s], "
                           "\"data_offsets\": [%llu, %llu]}", s[i].name,
                           tl_st_dtype_name(s[i].dtype), sh, (unsigned long long)begin[i],
                           (unsigned long long)(begin[i] + nbytes[i]));
        put(&j, ent, (size_t)len);
    }
    put(&j, "}", 1);
    while (j.len % 8) put(&j, " ", 1);
    *b = (buf){0};
    put_u64(b, j.len);
    put(b, j.p, j.len);
    size_t data0 = b->len;
    for (uint64_t i = 0; i < at; i++) put(b, "\xee", 1); /* gaps */
    for (size_t i = 0; i < n; i++)
        memset(b->p + data0 + begin[i], (int)(i + 1), (size_t)nbytes[i]);
    free(j.p);
}

static const spec k_specs[] = {
    {"w.f32.2d", TL_ST_F32, 2, {2, 3}, 0},
    {"s.f32.0d", TL_ST_F32, 0, {0}, 4},
    {"z.f32.empty", TL_ST_F32, 2, {0, 5}, 0},
    {"unicod\xc3\xa9.\xcf\x80", TL_ST_F32, 1, {1}, 0},
    {"h.f16.1d", TL_ST_F16, 1, {5}, 2},
    {"h.f16.4d", TL_ST_F16, 4, {2, 1, 3, 2}, 0},
    {"h.f16.0d", TL_ST_F16, 0, {0}, 0},
    {"b.bf16.4d", TL_ST_BF16, 4, {1, 2, 1, 3}, 6},
    {"b.bf16.3d", TL_ST_BF16, 3, {3, 1, 2}, 0},
    {g_long_name, TL_ST_BF16, 1, {1}, 0},
};
#define N_SPECS (sizeof k_specs / sizeof k_specs[0])
/* the data order: not the JSON order; the empty tensor sits between two others, and the
 * last tensor ends at the end of the file */
static const size_t k_order[N_SPECS] = {4, 0, 2, 9, 7, 1, 6, 3, 8, 5};

static void check_valid_file(const char *how, const tl_st_file *f, const buf *b,
                             const uint64_t *begin) {
    uint64_t hdr = 0;
    for (int i = 0; i < 8; i++) hdr |= (uint64_t)b->p[i] << (8 * i);
    CHECK_MSG(f->n_tensors == N_SPECS, "%s: %llu tensors", how,
              (unsigned long long)f->n_tensors);
    CHECK(f->data_offset == 8 + hdr);
    CHECK(f->file_size == b->len);
    check_invariants(how, f);
    for (size_t i = 0; i < N_SPECS && f->n_tensors == N_SPECS; i++) {
        const spec *s = &k_specs[i];
        const tl_st_tensor *t = tl_st_find(f, s->name);
        CHECK_MSG(t != NULL, "%s: tensor %s not found", how, s->name);
        if (!t) continue;
        CHECK(strcmp(t->name, s->name) == 0);
        CHECK_MSG(t->dtype == s->dtype, "%s: %s dtype %d", how, s->name, (int)t->dtype);
        CHECK_MSG(t->n_dims == s->n_dims, "%s: %s n_dims %u", how, s->name, t->n_dims);
        uint64_t n = 1;
        for (uint32_t d = 0; d < 4; d++) {
            uint64_t want = d < s->n_dims ? s->shape[d] : 0;
            CHECK_MSG(t->shape[d] == want, "%s: %s shape[%u] %llu", how, s->name, d,
                      (unsigned long long)t->shape[d]);
            if (d < s->n_dims) n *= s->shape[d];
        }
        CHECK(t->n_elems == n);
        CHECK(t->nbytes == n * tl_st_dtype_size(s->dtype));
        CHECK_MSG(t->offset == f->data_offset + begin[i], "%s: %s offset %llu", how, s->name,
                  (unsigned long long)t->offset);
        /* the data at offset is this tensor's */
        for (uint64_t k = 0; k < t->nbytes && t->offset + k < b->len; k++)
            if (b->p[t->offset + k] != (uint8_t)(i + 1)) {
                CHECK_MSG(0, "%s: %s data byte %llu", how, s->name, (unsigned long long)k);
                break;
            }
    }
    /* file order: the data order, the empty tensor ordered by its offset */
    for (size_t k = 0; k < N_SPECS && f->n_tensors == N_SPECS; k++)
        CHECK_MSG(strcmp(f->tensors[k].name, k_specs[k_order[k]].name) == 0,
                  "%s: tensors[%zu] is %s, expected %s", how, k, f->tensors[k].name,
                  k_specs[k_order[k]].name);
    CHECK(tl_st_find(f, "w.f32") == NULL && tl_st_find(f, "") == NULL);
    CHECK(tl_st_find(f, "__metadata__") == NULL);
}

static int g_cases;

static void valid_cases(buf *valid) {
    memset(g_long_name, 'n', TL_ST_MAX_NAME);
    g_long_name[TL_ST_MAX_NAME] = 0;
    uint64_t begin[N_SPECS];
    build_valid(valid, k_specs, N_SPECS, k_order, begin);
    char path[1200];
    snprintf(path, sizeof path, "%s/valid.safetensors", g_dir);
    write_bytes(path, valid);
    tl_st_file *f = NULL;
    tl_status st = tl_st_open(path, &f);
    CHECK_MSG(st == TL_OK, "valid file: %s", tl_last_error());
    if (f) check_valid_file("tl_st_open", f, valid, begin);
    tl_st_free(f);
    st = parse_buf(valid, "mem", &f);
    CHECK_MSG(st == TL_OK, "valid file in memory: %s", tl_last_error());
    if (f) check_valid_file("tl_st_parse", f, valid, begin);
    tl_st_free(f);
    unlink(path);
    g_cases += 2;

    /* small edge files that must parse */
    struct { const char *label, *json; uint64_t data_len, n_tensors; } ok[] = {
        {"empty_object", "{}", 0, 0},
        {"only_metadata", "{'__metadata__':{}}", 0, 0},
        {"metadata_last", "{'a':{'dtype':'F16','shape':[2],'data_offsets':[0,4]},"
                          "'__metadata__':{'k':'v','':''}}", 4, 1},
        {"whitespace", " \n\t{ 'a' : { 'data_offsets' : [ 0 , 4 ] , 'shape' : [ ] , "
                       "'dtype' : 'F32' } }\n   ", 4, 1},
        {"data_after_last", "{'a':{'dtype':'F32','shape':[1],'data_offsets':[0,4]}}", 100, 1},
        {"hole_first", "{'a':{'dtype':'BF16','shape':[1],'data_offsets':[10,12]}}", 12, 1},
        {"empty_at_end", "{'a':{'dtype':'F32','shape':[0],'data_offsets':[4,4]},"
                         "'b':{'dtype':'F32','shape':[1],'data_offsets':[0,4]}}", 4, 2},
        {"empty_inside_other", "{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]},"
                               "'b':{'dtype':'F16','shape':[3,0],'data_offsets':[4,4]},"
                               "'c':{'dtype':'F16','shape':[0],'data_offsets':[4,4]}}", 8, 3},
        {"zero_dim_huge_other", "{'a':{'dtype':'F32','shape':[9223372036854775807,0],"
                                "'data_offsets':[0,0]}}", 0, 1},
        {"escaped_name", "{'a\\\\b\\u00e9\\n':{'dtype':'F32','shape':[1],'data_offsets':[0,4]}}",
         4, 1},
        {"metadata_named_like_tensor", "{'__metadata__':{'dtype':'F32'}}", 0, 0},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        buf b;
        make_file(&b, ok[i].json, ok[i].data_len);
        st = parse_buf(&b, ok[i].label, &f);
        CHECK_MSG(st == TL_OK, "%s: %s", ok[i].label, tl_last_error());
        if (f) {
            CHECK_MSG(f->n_tensors == ok[i].n_tensors, "%s: %llu tensors", ok[i].label,
                      (unsigned long long)f->n_tensors);
            check_invariants(ok[i].label, f);
        }
        tl_st_free(f);
        free(b.p);
        g_cases++;
    }
    /* "a\\b\u00e9\n" decodes to a, backslash, b, U+00E9, newline */
    buf b;
    make_file(&b, ok[9].json, 4);
    if (parse_buf(&b, "escaped", &f) == TL_OK) {
        CHECK(f->n_tensors == 1 && strcmp(f->tensors[0].name, "a\\b\xc3\xa9\n") == 0);
        tl_st_free(f);
    }
    free(b.p);
    /* the empty tensor inside another's bytes keeps its place in the offset order */
    make_file(&b, ok[7].json, 8);
    if (parse_buf(&b, "order", &f) == TL_OK) {
        CHECK(!strcmp(f->tensors[0].name, "a") && !strcmp(f->tensors[1].name, "b") &&
              !strcmp(f->tensors[2].name, "c"));
        CHECK(f->tensors[1].n_dims == 2 && f->tensors[1].shape[0] == 3 &&
              f->tensors[1].shape[1] == 0 && f->tensors[1].n_elems == 0 &&
              f->tensors[1].offset == f->data_offset + 4);
        tl_st_free(f);
    }
    free(b.p);

    /* a file written by the Hugging Face library */
    const char *hf = tl_test_model("hf/fake-gpt2-random/model.safetensors");
    st = tl_st_open(hf, &f);
    CHECK_MSG(st == TL_OK, "%s: %s", hf, tl_last_error());
    if (f) {
        check_invariants("hf", f);
        CHECK(f->n_tensors == 16 && f->data_offset == 8 + 1392 && f->file_size == 411960);
        uint64_t at = f->data_offset;
        for (uint64_t i = 0; i < f->n_tensors; i++) { /* contiguous, as the library writes */
            CHECK(f->tensors[i].dtype == TL_ST_F32 && f->tensors[i].offset == at);
            at += f->tensors[i].nbytes;
        }
        CHECK(at == f->file_size);
        const tl_st_tensor *t = tl_st_find(f, "transformer.h.0.attn.c_attn.weight");
        CHECK(t && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 6 &&
              t->n_elems == 12 && t->nbytes == 48 && t->offset == f->data_offset + 24);
        t = f->tensors[f->n_tensors - 1].nbytes > 100000 ? &f->tensors[f->n_tensors - 1] : NULL;
        CHECK(t && t->n_dims == 2 && t->shape[0] == 50257 && t->shape[1] == 2);
        printf("  hf model: %llu tensors, last '%s'\n", (unsigned long long)f->n_tensors,
               t ? t->name : "?");
    }
    tl_st_free(f);
    g_cases++;
}

/* ---- hostile files ----------------------------------------------------------------------- */

#define E1(d, s, o) "{'a':{'dtype':'" d "','shape':" s ",'data_offsets':" o "}}"
#define ENT(d, s, o) "{'dtype':'" d "','shape':" s ",'data_offsets':" o "}"
#define OK_A "'a':" ENT("F32", "[2]", "[0,8]")
#define OK_B "'b':" ENT("F32", "[2]", "[8,16]")

typedef struct hcase {
    const char *label, *json;
    uint64_t data_len;
    tl_status st;
    const char *w1, *w2;
} hcase;

static const hcase k_cases[] = {
    /* the header as a whole */
    {"not_json", "hello", 16, TL_ERR_FORMAT, "not valid JSON", NULL},
    {"json_cut", "{'a':{'dtype':'F32'", 16, TL_ERR_FORMAT, "not valid JSON", NULL},
    {"trailing_text", "{} x", 16, TL_ERR_FORMAT, "not valid JSON", NULL},
    {"two_objects", "{}{}", 16, TL_ERR_FORMAT, "not valid JSON", NULL},
    {"json_array", "[1,2]", 16, TL_ERR_FORMAT, "an array, expected a JSON object", NULL},
    {"json_string", "'x'", 16, TL_ERR_FORMAT, "a string, expected a JSON object", NULL},
    {"json_number", "5", 16, TL_ERR_FORMAT, "an integer, expected a JSON object", NULL},
    {"json_null", "null", 16, TL_ERR_FORMAT, "null, expected a JSON object", NULL},
    {"spaces_only", "        ", 16, TL_ERR_FORMAT, "not valid JSON", NULL},
    {"nul_padding", "{}\0\0", 16, TL_ERR_FORMAT, "not valid JSON", NULL},
    /* entries */
    {"entry_number", "{'a':5}", 16, TL_ERR_FORMAT, "tensor 'a': entry is an integer", NULL},
    {"entry_array", "{'a':[0,8]}", 16, TL_ERR_FORMAT, "entry is an array", "'a'"},
    {"entry_string", "{'a':'F32'}", 16, TL_ERR_FORMAT, "entry is a string", "'a'"},
    {"entry_null", "{'a':null}", 16, TL_ERR_FORMAT, "entry is null", "'a'"},
    {"entry_empty", "{'a':{}}", 16, TL_ERR_FORMAT, "missing key 'dtype'", "'a'"},
    {"second_entry_bad", "{" OK_A ",'b':true}", 16, TL_ERR_FORMAT, "entry is a boolean", "'b'"},
    {"missing_dtype", "{'a':{'shape':[2],'data_offsets':[0,8]}}", 16, TL_ERR_FORMAT,
     "missing key 'dtype'", "'a'"},
    {"missing_shape", "{'a':{'dtype':'F32','data_offsets':[0,8]}}", 16, TL_ERR_FORMAT,
     "missing key 'shape'", "'a'"},
    {"missing_offsets", "{'a':{'dtype':'F32','shape':[2]}}", 16, TL_ERR_FORMAT,
     "missing key 'data_offsets'", "'a'"},
    {"extra_key", "{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8],'extra':1}}", 16,
     TL_ERR_FORMAT, "unexpected key 'extra'", "'a'"},
    {"extra_key_case", "{'a':{'dtype':'F32','Shape':[2],'data_offsets':[0,8]}}", 16,
     TL_ERR_FORMAT, "unexpected key 'Shape'", "'a'"},
    {"nested_metadata_in_entry", "{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8],"
     "'__metadata__':{}}}", 16, TL_ERR_FORMAT, "unexpected key '__metadata__'", "'a'"},
    /* field types */
    {"dtype_number", "{'a':{'dtype':4,'shape':[2],'data_offsets':[0,8]}}", 16, TL_ERR_FORMAT,
     "dtype is an integer, expected a string", "'a'"},
    {"dtype_null", "{'a':{'dtype':null,'shape':[2],'data_offsets':[0,8]}}", 16, TL_ERR_FORMAT,
     "dtype is null, expected a string", "'a'"},
    {"dtype_array", "{'a':{'dtype':['F32'],'shape':[2],'data_offsets':[0,8]}}", 16,
     TL_ERR_FORMAT, "dtype is an array", "'a'"},
    {"shape_string", "{'a':{'dtype':'F32','shape':'2','data_offsets':[0,8]}}", 16,
     TL_ERR_FORMAT, "shape is a string", "'a'"},
    {"shape_object", "{'a':{'dtype':'F32','shape':{},'data_offsets':[0,8]}}", 16,
     TL_ERR_FORMAT, "shape is an object", "'a'"},
    {"shape_number", "{'a':{'dtype':'F32','shape':2,'data_offsets':[0,8]}}", 16,
     TL_ERR_FORMAT, "shape is an integer", "'a'"},
    {"offsets_string", E1("F32", "[2]", "'0,8'"), 16, TL_ERR_FORMAT,
     "data_offsets is a string", "'a'"},
    {"offsets_object", E1("F32", "[2]", "{'0':8}"), 16, TL_ERR_FORMAT,
     "data_offsets is an object", "'a'"},
    {"offsets_1", E1("F32", "[2]", "[8]"), 16, TL_ERR_FORMAT, "has 1 elements", "'a'"},
    {"offsets_3", E1("F32", "[2]", "[0,4,8]"), 16, TL_ERR_FORMAT, "has 3 elements", "'a'"},
    {"offsets_empty", E1("F32", "[2]", "[]"), 16, TL_ERR_FORMAT, "has 0 elements", "'a'"},
    {"offsets_real", E1("F32", "[2]", "[0,8.0]"), 16, TL_ERR_FORMAT,
     "data_offsets[1] is a real number", "'a'"},
    {"offsets_string_elem", E1("F32", "[2]", "['0',8]"), 16, TL_ERR_FORMAT,
     "data_offsets[0] is a string", "'a'"},
    {"offsets_bool", E1("F32", "[2]", "[false,8]"), 16, TL_ERR_FORMAT,
     "data_offsets[0] is a boolean", "'a'"},
    {"offsets_negative", E1("F32", "[2]", "[-8,0]"), 16, TL_ERR_FORMAT,
     "data_offsets[0] is -8", "'a'"},
    {"offsets_too_big", E1("F32", "[2]", "[0,18446744073709551616]"), 16, TL_ERR_FORMAT,
     "not valid JSON", "too big"},
    /* dtypes */
    {"dtype_unknown", E1("Q4", "[2]", "[0,8]"), 16, TL_ERR_FORMAT, "unknown dtype 'Q4'", "'a'"},
    {"dtype_lowercase", E1("f32", "[2]", "[0,8]"), 16, TL_ERR_FORMAT, "unknown dtype 'f32'",
     "'a'"},
    {"dtype_empty", E1("", "[2]", "[0,8]"), 16, TL_ERR_FORMAT, "unknown dtype ''", "'a'"},
    {"dtype_I8", E1("I8", "[8]", "[0,8]"), 16, TL_ERR_UNSUPPORTED,
     "dtype I8 of tensor 'a' is not supported (F32, F16, BF16)", NULL},
    {"dtype_U8", E1("U8", "[8]", "[0,8]"), 16, TL_ERR_UNSUPPORTED,
     "dtype U8 of tensor 'a' is not supported", NULL},
    {"dtype_F64", E1("F64", "[1]", "[0,8]"), 16, TL_ERR_UNSUPPORTED,
     "dtype F64 of tensor 'a' is not supported", NULL},
    {"dtype_BOOL", E1("BOOL", "[8]", "[0,8]"), 16, TL_ERR_UNSUPPORTED,
     "dtype BOOL of tensor 'a' is not supported", NULL},
    {"dtype_F8_E4M3", E1("F8_E4M3", "[8]", "[0,8]"), 16, TL_ERR_UNSUPPORTED,
     "dtype F8_E4M3 of tensor 'a' is not supported", NULL},
    {"dtype_I64_second", "{" OK_A ",'b':" ENT("I64", "[1]", "[8,16]") "}", 16,
     TL_ERR_UNSUPPORTED, "dtype I64 of tensor 'b' is not supported", NULL},
    /* shapes */
    {"shape_negative", E1("F32", "[-2]", "[0,8]"), 16, TL_ERR_FORMAT, "shape[0] is -2", "'a'"},
    {"shape_negative_zero_other", E1("F32", "[0,-1]", "[0,0]"), 16, TL_ERR_FORMAT,
     "shape[1] is -1", "'a'"},
    {"shape_real", E1("F32", "[2.5]", "[0,8]"), 16, TL_ERR_FORMAT,
     "shape[0] is a real number", "'a'"},
    {"shape_real_whole", E1("F32", "[1,2.0]", "[0,8]"), 16, TL_ERR_FORMAT,
     "shape[1] is a real number", "'a'"},
    {"shape_exponent", E1("F32", "[2e0]", "[0,8]"), 16, TL_ERR_FORMAT,
     "shape[0] is a real number", "'a'"},
    {"shape_string_elem", E1("F32", "['2']", "[0,8]"), 16, TL_ERR_FORMAT,
     "shape[0] is a string", "'a'"},
    {"shape_null_elem", E1("F32", "[null]", "[0,8]"), 16, TL_ERR_FORMAT, "shape[0] is null",
     "'a'"},
    {"shape_nested", E1("F32", "[[2]]", "[0,8]"), 16, TL_ERR_FORMAT, "shape[0] is an array",
     "'a'"},
    {"shape_5d", E1("F32", "[1,1,1,1,2]", "[0,8]"), 16, TL_ERR_FORMAT, "5 dimensions",
     "'a'"},
    {"shape_9d", E1("F32", "[1,1,1,1,1,1,1,1,2]", "[0,8]"), 16, TL_ERR_FORMAT,
     "9 dimensions", "'a'"},
    {"shape_overflow_2e32sq", E1("F32", "[4294967296,4294967296]", "[0,8]"), 16,
     TL_ERR_FORMAT, "overflows", "'a'"},
    {"shape_overflow_4d", E1("F16", "[65536,65536,65536,65536]", "[0,8]"), 16, TL_ERR_FORMAT,
     "overflows", "'a'"},
    {"shape_overflow_bytes", E1("F32", "[4611686018427387904]", "[0,8]"), 16, TL_ERR_FORMAT,
     "overflows", "'a'"},
    {"shape_overflow_max", E1("BF16", "[9223372036854775807,2]", "[0,8]"), 16, TL_ERR_FORMAT,
     "overflows", "'a'"},
    {"shape_huge_fits", E1("F16", "[4611686018427387904]", "[0,8]"), 16, TL_ERR_FORMAT,
     "shape/byte mismatch", "'a'"},
    {"shape_too_big", E1("F32", "[18446744073709551616]", "[0,8]"), 16, TL_ERR_FORMAT,
     "not valid JSON", "too big"},
    /* byte ranges */
    {"offsets_reversed", E1("F32", "[2]", "[8,0]"), 16, TL_ERR_FORMAT, "reversed", "'a'"},
    {"offsets_out_of_file", E1("F32", "[4]", "[0,16]"), 12, TL_ERR_FORMAT, "past the end",
     "'a'"},
    {"offsets_one_past", E1("F32", "[1]", "[12,16]"), 15, TL_ERR_FORMAT, "past the end", "'a'"},
    {"offsets_begin_past_end", E1("F32", "[0]", "[20,20]"), 16, TL_ERR_FORMAT, "past the end",
     "'a'"},
    {"offsets_huge", E1("F32", "[1]", "[9223372036854775803,9223372036854775807]"), 16,
     TL_ERR_FORMAT, "past the end", "'a'"},
    {"no_data_region", E1("F32", "[1]", "[0,4]"), 0, TL_ERR_FORMAT, "past the end", "'a'"},
    {"byte_mismatch", E1("F32", "[3]", "[0,8]"), 16, TL_ERR_FORMAT, "shape/byte mismatch",
     "'a'"},
    {"byte_mismatch_dtype", E1("F16", "[2]", "[0,8]"), 16, TL_ERR_FORMAT,
     "shape/byte mismatch", "needs 4 bytes"},
    {"byte_mismatch_0d", E1("F32", "[]", "[0,0]"), 16, TL_ERR_FORMAT, "shape/byte mismatch",
     "'a'"},
    {"byte_mismatch_empty", E1("F32", "[0]", "[0,4]"), 16, TL_ERR_FORMAT,
     "shape/byte mismatch", "'a'"},
    {"overlap", "{" OK_A ",'b':" ENT("F32", "[2]", "[4,12]") "}", 16, TL_ERR_FORMAT,
     "overlap", "'a' (data bytes 0 to 8) and 'b' (data bytes 4 to 12)"},
    {"overlap_identical", "{" OK_A ",'b':" ENT("F32", "[2]", "[0,8]") "}", 16, TL_ERR_FORMAT,
     "overlap", "'b'"},
    {"overlap_contained", "{'a':" ENT("F32", "[4]", "[0,16]") ",'b':"
     ENT("F32", "[1]", "[4,8]") "}", 16, TL_ERR_FORMAT, "overlap", "'a'"},
    {"overlap_far", "{'a':" ENT("F32", "[3]", "[0,12]") ",'b':" ENT("F16", "[2]", "[12,16]")
     ",'c':" ENT("BF16", "[1]", "[10,12]") "}", 16, TL_ERR_FORMAT, "overlap", "'c'"},
    {"overlap_after_empty", "{" OK_A ",'e':" ENT("F32", "[0]", "[8,8]") ",'b':"
     ENT("F32", "[1]", "[6,10]") "}", 16, TL_ERR_FORMAT, "overlap", "'b'"},
    /* names */
    {"duplicate_name", "{" OK_A "," OK_A "}", 16, TL_ERR_FORMAT, "duplicate", "'a'|a"},
    {"duplicate_name_apart", "{" OK_A "," OK_B ",'a':" ENT("F32", "[0]", "[0,0]") "}", 16,
     TL_ERR_FORMAT, "duplicate", NULL},
    {"duplicate_metadata", "{'__metadata__':{},'__metadata__':{}}", 16, TL_ERR_FORMAT,
     "duplicate", NULL},
    {"duplicate_metadata_key", "{'__metadata__':{'k':'1','k':'2'}}", 16, TL_ERR_FORMAT,
     "duplicate", NULL},
    {"empty_name", "{'':" ENT("F32", "[2]", "[0,8]") "}", 16, TL_ERR_FORMAT, "empty name",
     NULL},
    {"long_name", NULL, 16, TL_ERR_FORMAT, "513 bytes long", "at most 512"}, /* built below */
    {"nul_in_name", "{'a\\u0000b':" ENT("F32", "[2]", "[0,8]") "}", 16, TL_ERR_FORMAT,
     "not valid JSON", "NUL|u0000"},
    {"bad_escape", "{'a\\x':" ENT("F32", "[2]", "[0,8]") "}", 16, TL_ERR_FORMAT,
     "not valid JSON", NULL},
    {"lone_surrogate_escape", "{'a\\ud800':" ENT("F32", "[2]", "[0,8]") "}", 16,
     TL_ERR_FORMAT, "not valid JSON", NULL},
    /* invalid UTF-8 */
    {"utf8_ff_in_name", "{'a\xff':" ENT("F32", "[2]", "[0,8]") "}", 16, TL_ERR_FORMAT,
     "invalid UTF-8", NULL},
    {"utf8_overlong", "{'a\xc0\xaf':" ENT("F32", "[2]", "[0,8]") "}", 16, TL_ERR_FORMAT,
     "invalid UTF-8", NULL},
    {"utf8_surrogate", "{'a\xed\xa0\x80':" ENT("F32", "[2]", "[0,8]") "}", 16, TL_ERR_FORMAT,
     "invalid UTF-8", NULL},
    {"utf8_cut_sequence", "{'a\xe2\x82':" ENT("F32", "[2]", "[0,8]") "}", 16, TL_ERR_FORMAT,
     "invalid UTF-8", NULL},
    {"utf8_above_10ffff", "{'a\xf4\x90\x80\x80':" ENT("F32", "[2]", "[0,8]") "}", 16,
     TL_ERR_FORMAT, "invalid UTF-8", NULL},
    {"utf8_in_metadata", "{'__metadata__':{'k':'v\x80'}}", 16, TL_ERR_FORMAT, "invalid UTF-8",
     NULL},
    {"utf8_in_dtype", E1("F3\xa2", "[2]", "[0,8]"), 16, TL_ERR_FORMAT, "invalid UTF-8", NULL},
    {"utf8_outside_strings", "{\xff}", 16, TL_ERR_FORMAT, "not valid JSON", NULL},
    /* __metadata__ */
    {"metadata_string", "{'__metadata__':'pt'}", 16, TL_ERR_FORMAT,
     "__metadata__ is a string, expected an object of strings", NULL},
    {"metadata_array", "{'__metadata__':['pt']}", 16, TL_ERR_FORMAT, "__metadata__ is an array",
     NULL},
    {"metadata_null", "{" OK_A ",'__metadata__':null}", 16, TL_ERR_FORMAT,
     "__metadata__ is null", NULL},
    {"metadata_number_value", "{'__metadata__':{'format':'pt','n':1}}", 16, TL_ERR_FORMAT,
     "__metadata__ value 'n' is an integer, expected a string", NULL},
    {"metadata_nested", "{'__metadata__':{'o':{'k':'v'}}}", 16, TL_ERR_FORMAT,
     "__metadata__ value 'o' is an object", NULL},
    {"metadata_as_tensor", "{'__metadata__':" ENT("F32", "[2]", "[0,8]") "," OK_B "}", 16,
     TL_ERR_FORMAT, "__metadata__ value 'shape' is an array", NULL},
};
#define N_CASES (sizeof k_cases / sizeof k_cases[0])

/* Runs one hostile file through memory and through a file; both must refuse it with
 * `want` and a message holding w1 and w2 (and the same message, the name aside). */
static void run_hostile(const char *label, const buf *b, tl_status want, const char *w1,
                        const char *w2, bool quiet) {
    g_cases++;
    char path[1200], msg[1100], fmsg[1100];
    snprintf(path, sizeof path, "%s/%s.safetensors", g_dir, label);
    tl_st_file *f = (tl_st_file *)1;
    tl_status st = parse_buf(b, path, &f);
    snprintf(msg, sizeof msg, "%s", tl_last_error());
    CHECK_MSG(st == want, "%s: status %s, expected %s (%s)", label, tl_status_str(st),
              tl_status_str(want), msg);
    CHECK_MSG(f == NULL, "%s: *out not NULL", label);
    CHECK_MSG(strncmp(msg, path, strlen(path)) == 0, "%s: message does not name the file: %s",
              label, msg);
    CHECK_MSG(has_word(msg, w1) && has_word(msg, w2), "%s: message lacks '%s'/'%s': %s", label,
              w1 ? w1 : "", w2 ? w2 : "", msg);
    if (st == TL_OK) tl_st_free(f);
    write_bytes(path, b);
    f = (tl_st_file *)1;
    tl_status fst = tl_st_open(path, &f);
    snprintf(fmsg, sizeof fmsg, "%s", tl_last_error());
    CHECK_MSG(fst == st && strcmp(fmsg, msg) == 0, "%s: tl_st_open differs: %s / %s", label,
              tl_status_str(fst), fmsg);
    CHECK(f == NULL);
    if (fst == TL_OK) tl_st_free(f);
    unlink(path);
    if (!quiet) printf("  %-28s %s\n", label, strncmp(msg, g_dir, strlen(g_dir)) ? msg :
                       msg + strlen(g_dir) + 1);
}

static void table_cases(void) {
    for (size_t i = 0; i < N_CASES; i++) {
        hcase c = k_cases[i];
        char *json = NULL;
        if (!strcmp(c.label, "long_name")) {
            json = malloc(1024);
            char name[TL_ST_MAX_NAME + 2];
            memset(name, 'x', TL_ST_MAX_NAME + 1);
            name[TL_ST_MAX_NAME + 1] = 0;
            snprintf(json, 1024, "{'%s':" ENT("F32", "[2]", "[0,8]") "}", name);
            c.json = json;
        }
        buf b;
        if (!strcmp(c.label, "nul_padding")) { /* strlen stops at the NUL */
            b = (buf){0};
            put_u64(&b, 4);
            put(&b, "{}\0\0", 4);
            for (int k = 0; k < 16; k++) put(&b, "", 1);
        } else {
            make_file(&b, c.json, c.data_len);
        }
        run_hostile(c.label, &b, c.st, c.w1, c.w2, false);
        free(b.p);
        free(json);
    }
}

static void put_raw(buf *b, uint64_t hdr_len, const char *json, uint64_t data_len) {
    *b = (buf){0};
    put_u64(b, hdr_len);
    put(b, json, strlen(json));
    for (uint64_t i = 0; i < data_len; i++) put(b, "", 1);
}

static void header_length_cases(const buf *valid) {
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)valid->p[i] << (8 * i);
    buf b = {0};
    /* files shorter than the length field */
    for (size_t len = 0; len < 8; len++) {
        b.len = 0;
        put(&b, valid->p, len);
        char label[32];
        snprintf(label, sizeof label, "file_of_%zu_bytes", len);
        run_hostile(label, &b, TL_ERR_FORMAT, "truncated", "8-byte", len != 0 && len != 7);
    }
    free(b.p);
    struct { const char *label; uint64_t len; const char *w; } lens[] = {
        {"header_len_0", 0, "header length is 0"},
        {"header_len_2e63", UINT64_C(1) << 63, "past the end"},
        {"header_len_max", UINT64_MAX, "past the end"},
        {"header_len_2e32", UINT64_C(1) << 32, "past the end"},
        {"header_len_past_eof", valid->len - 8 + 1, "past the end"},
        {"header_len_short", n - 3, "not valid JSON"},
        {"header_len_into_data", n + 8, "not valid JSON|past the end"},
    };
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        buf c = {0};
        put(&c, valid->p, valid->len);
        for (int k = 0; k < 8; k++) c.p[k] = (uint8_t)(lens[i].len >> (8 * k));
        run_hostile(lens[i].label, &c, TL_ERR_FORMAT, lens[i].w, "header length|JSON", false);
        free(c.p);
    }
    /* a header longer than the limit in a file big enough to hold it: refused before
     * anything past the length field is read (the source is mostly virtual) */
    buf c;
    put_raw(&c, TL_ST_MAX_HEADER + 1, "{}", 0);
    mem_src m = {c.p, c.len, (uint64_t)TL_ST_MAX_HEADER * 2, false};
    tl_st_file *f = NULL;
    tl_status st = tl_st_parse(mem_read, &m, m.size, "big", &f);
    CHECK_MSG(st == TL_ERR_FORMAT && strstr(tl_last_error(), "exceeds the limit"), "%s",
              tl_last_error());
    CHECK(f == NULL);
    printf("  %-28s %s\n", "header_len_over_limit", tl_last_error());
    /* the limit itself is allowed: {} and 100 MB less 2 of spaces */
    buf big = {0};
    put_u64(&big, TL_ST_MAX_HEADER);
    put(&big, "{}", 2);
    size_t pad = TL_ST_MAX_HEADER - 2;
    char *spaces = malloc(pad);
    memset(spaces, ' ', pad);
    put(&big, spaces, pad);
    free(spaces);
    st = parse_buf(&big, "limit", &f);
    CHECK_MSG(st == TL_OK && f && f->n_tensors == 0, "header at the limit: %s", tl_last_error());
    tl_st_free(f);
    free(big.p);
    free(c.p);
    g_cases += 2;

    /* a failing source: its status and message come through */
    m = (mem_src){valid->p, valid->len, valid->len, true};
    st = tl_st_parse(mem_read, &m, valid->len, "io", &f);
    CHECK(st == TL_ERR_IO && f == NULL && strstr(tl_last_error(), "injected read failure"));
    printf("  %-28s %s\n", "read_failure", tl_last_error());
    char path[1200];
    snprintf(path, sizeof path, "%s/does-not-exist.safetensors", g_dir);
    st = tl_st_open(path, &f);
    CHECK(st == TL_ERR_IO && f == NULL && strstr(tl_last_error(), "cannot open"));
    st = tl_st_open(g_dir, &f);
    CHECK(st == TL_ERR_IO && f == NULL && strstr(tl_last_error(), "not a regular file"));
    printf("  %-28s %s\n", "directory", tl_last_error());
    g_cases += 3;
}

/* 1,000,001 entries: refused by count before any entry is looked at. */
static void too_many_tensors(void) {
    buf j = {0};
    put(&j, "{", 1);
    char ent[32];
    for (uint32_t i = 0; i <= TL_ST_MAX_TENSORS; i++) {
        int len = snprintf(ent, sizeof ent, "%s'%x':0", i ? "," : "", i);
        put(&j, ent, (size_t)len);
    }
    put(&j, "}", 2);
    buf b;
    make_file(&b, (const char *)j.p, 0);
    tl_st_file *f = NULL;
    tl_status st = parse_buf(&b, "many", &f);
    CHECK_MSG(st == TL_ERR_FORMAT && strstr(tl_last_error(), "1000001 tensors (at most 1000000"),
              "%s", tl_last_error());
    printf("  %-28s %s\n", "too_many_tensors", tl_last_error());
    free(j.p);
    free(b.p);
    g_cases++;
}

/* Every cut of the valid file fails: its last tensor ends at the end of the file. */
static void truncations(const buf *valid) {
    int shown = 0;
    for (size_t len = 0; len < valid->len; len++) {
        buf t = {valid->p, len, valid->cap};
        tl_st_file *f = NULL;
        tl_status st = parse_buf(&t, "cut", &f);
        const char *msg = tl_last_error();
        CHECK_MSG(st == TL_ERR_FORMAT && f == NULL &&
                  has_word(msg, "truncated|past the end"), "cut at %zu: %s %s", len,
                  tl_status_str(st), msg);
        if (f) tl_st_free(f);
        if (len == 5 || len == 20 || len == valid->len - 1) {
            printf("  truncated_at_%-15zu %s\n", len, msg);
            shown++;
        }
    }
    printf("  (%zu truncations checked, %d shown)\n", valid->len, shown);
    g_cases += (int)valid->len;
}

/* Seeded random byte mutations: each result parses into a directory that keeps every
 * promise, or is refused with FORMAT/UNSUPPORTED and a message naming the source. */
static void mutations(const buf *valid, int n_iter) {
    static const uint8_t interesting[] = {'"', '{', '}', '[', ']', ',', ':', '0', '1', '9',
                                          '-', '.', 'e', ' ', '\\', 0, 0x80, 0xff, 0xc3};
    uint64_t hdr = 0;
    for (int i = 0; i < 8; i++) hdr |= (uint64_t)valid->p[i] << (8 * i);
    uint64_t rng = 20240917;
    int ok = 0, refused[2] = {0, 0};
    buf m = {0};
    for (int it = 0; it < n_iter; it++) {
        m.len = 0;
        put(&m, valid->p, valid->len);
        int n_mut = 1 + (int)(tl_splitmix64(&rng) % 3);
        for (int k = 0; k < n_mut; k++) {
            uint64_t r = tl_splitmix64(&rng);
            size_t pos;
            if (r % 10 < 8) pos = 8 + (size_t)((r >> 8) % hdr); /* the header, mostly */
            else if (r % 10 < 9) pos = (size_t)((r >> 8) % 8);   /* the length field */
            else pos = (size_t)((r >> 8) % m.len);
            uint64_t v = tl_splitmix64(&rng);
            m.p[pos] = v % 2 ? interesting[(v >> 1) % sizeof interesting] : (uint8_t)(v >> 8);
        }
        /* now and then also cut the file */
        if (tl_splitmix64(&rng) % 8 == 0) m.len = (size_t)(tl_splitmix64(&rng) % m.len);
        tl_st_file *f = NULL;
        tl_status st = parse_buf(&m, "mut", &f);
        if (st == TL_OK) {
            char label[48];
            snprintf(label, sizeof label, "mutation %d", it);
            CHECK_MSG(f != NULL, "%s: no file", label);
            if (f) check_invariants(label, f);
            ok++;
        } else {
            CHECK_MSG((st == TL_ERR_FORMAT || st == TL_ERR_UNSUPPORTED) && f == NULL &&
                      strncmp(tl_last_error(), "mut: ", 5) == 0,
                      "mutation %d: %s %s", it, tl_status_str(st), tl_last_error());
            refused[st == TL_ERR_UNSUPPORTED]++;
        }
        tl_st_free(f);
    }
    free(m.p);
    printf("  (%d mutations: %d parsed, %d malformed, %d unsupported)\n", n_iter, ok,
           refused[0], refused[1]);
    g_cases += n_iter;
}

int main(void) {
    char tmpl[] = "/tmp/tl_st_XXXXXX";
    if (!mkdtemp(tmpl)) { perror("mkdtemp"); return 1; }
    snprintf(g_dir, sizeof g_dir, "%s", tmpl);
    buf valid;
    printf("valid files:\n");
    valid_cases(&valid);
    printf("hostile headers:\n");
    table_cases();
    header_length_cases(&valid);
    too_many_tensors();
    printf("truncations and mutations:\n");
    truncations(&valid);
    mutations(&valid, 4000);
    free(valid.p);
    rmdir(g_dir);
    printf("%d cases\n", g_cases);
    return tl_test_finish("test_safetensors");
}
