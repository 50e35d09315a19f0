/* test_gguf_hostile.c - corrupt GGUF files fail with a clear message, never a crash.
 *
 * A small valid model is written with tl_synth_write, decoded into an editable form
 * (each metadata value as its serialized bytes, the tensor directory, the data section)
 * and serialized again with one corruption per case. Every case must be refused by
 * tl_gguf_open (parse-level damage) or tl_model_open (model-level damage) with a
 * message that contains the words naming the problem; each message is printed. Under
 * TL_SANITIZE this also shows that no case reads out of bounds.
 *
 * `test_gguf_hostile --write DIR` keeps one file per case (plus valid.gguf) in DIR for
 * tests/hostile_cli.sh, which runs the command line on them.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tierllm.h"
#include "format/gguf.h"
#include "testutil.h"

/* ---- byte buffer ---------------------------------------------------------------------- */

typedef tl_test_buf buf;

static void put(buf *b, const void *d, size_t n) { tl_test_buf_put(b, d, n); }

static void put_le(buf *b, uint64_t v, size_t n) {
    uint8_t t[8];
    for (size_t i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, n);
}

static void put_u32(buf *b, uint32_t v) { put_le(b, v, 4); }
static void put_u64(buf *b, uint64_t v) { put_le(b, v, 8); }
static void put_str(buf *b, const char *s) { put_u64(b, strlen(s)); put(b, s, strlen(s)); }

static void patch_le(buf *b, size_t off, uint64_t v, size_t n) {
    if (off + n > b->len) { fprintf(stderr, "patch past end\n"); exit(1); }
    for (size_t i = 0; i < n; i++) b->p[off + i] = (uint8_t)(v >> (8 * i));
}

/* ---- an editable GGUF ------------------------------------------------------------------ */

#define MAX_KV 64
#define MAX_T 64

typedef struct hkv { char *key; uint32_t type; buf val; } hkv;
typedef struct hten {
    char *name;
    uint32_t n_dims, type;
    uint64_t ne[8];
    uint64_t offset; /* relative to the data section */
} hten;

typedef struct gfile {
    uint32_t magic, version;
    int32_t n_tensors_delta, n_kv_delta; /* added to the true counts in the header */
    hkv kv[MAX_KV];
    size_t n_kv;
    hten t[MAX_T];
    size_t n_t;
    buf data;
} gfile;

/* Offsets recorded while serializing. */
typedef struct layout { size_t kv_start[MAX_KV], t_start[MAX_T], data_start; } layout;

static size_t scalar_bytes(uint32_t t) {
    switch (t) {
    case TL_GGUF_UINT8: case TL_GGUF_INT8: case TL_GGUF_BOOL: return 1;
    case TL_GGUF_UINT16: case TL_GGUF_INT16: return 2;
    case TL_GGUF_UINT32: case TL_GGUF_INT32: case TL_GGUF_FLOAT32: return 4;
    default: return 8;
    }
}

static void encode_scalar(buf *b, const tl_gguf_kv *kv, tl_gguf_type t) {
    if (t == TL_GGUF_FLOAT32) { float f = (float)kv->v.f; uint32_t r; memcpy(&r, &f, 4);
                                put_u32(b, r); }
    else if (t == TL_GGUF_FLOAT64) { uint64_t r; memcpy(&r, &kv->v.f, 8); put_u64(b, r); }
    else if (t == TL_GGUF_INT8 || t == TL_GGUF_INT16 || t == TL_GGUF_INT32 ||
             t == TL_GGUF_INT64) put_le(b, (uint64_t)kv->v.i, scalar_bytes(t));
    else put_le(b, kv->v.u, scalar_bytes(t));
}

static void encode_value(buf *b, const tl_gguf_kv *kv) {
    if (kv->type == TL_GGUF_STRING) {
        put_u64(b, kv->v.str.len);
        put(b, kv->v.str.s, (size_t)kv->v.str.len);
    } else if (kv->type == TL_GGUF_ARRAY) {
        put_u32(b, kv->v.arr.type);
        put_u64(b, kv->v.arr.n);
        if (kv->v.arr.type == TL_GGUF_STRING) {
            const tl_gguf_str *s = kv->v.arr.data;
            for (uint64_t i = 0; i < kv->v.arr.n; i++) {
                put_u64(b, s[i].len);
                put(b, s[i].s, (size_t)s[i].len);
            }
        } else {
            put(b, kv->v.arr.data, (size_t)(kv->v.arr.n * scalar_bytes(kv->v.arr.type)));
        }
    } else {
        encode_scalar(b, kv, kv->type);
    }
}

static int gf_load(const char *path, gfile *f) {
    memset(f, 0, sizeof *f);
    tl_gguf *g;
    if (tl_gguf_open(path, &g) != TL_OK) {
        fprintf(stderr, "cannot parse the base model: %s\n", tl_last_error());
        return -1;
    }
    if (g->n_kv > MAX_KV || g->n_tensors > MAX_T) { tl_gguf_free(g); return -1; }
    f->magic = 0x46554747u;
    f->version = g->version;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        hkv *k = &f->kv[f->n_kv++];
        k->key = strdup(g->kv[i].key);
        k->type = g->kv[i].type;
        encode_value(&k->val, &g->kv[i]);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const tl_gguf_tensor *s = &g->tensors[i];
        hten *t = &f->t[f->n_t++];
        t->name = strdup(s->name);
        t->n_dims = s->n_dims;
        t->type = s->type;
        for (int d = 0; d < 4; d++) t->ne[d] = s->ne[d];
        t->offset = s->offset - g->data_offset;
    }
    FILE *fp = fopen(path, "rb");
    size_t n = (size_t)(g->file_size - g->data_offset);
    uint8_t *d = malloc(n ? n : 1);
    int ok = fp && d && fseek(fp, (long)g->data_offset, SEEK_SET) == 0 &&
             fread(d, 1, n, fp) == n;
    if (ok) put(&f->data, d, n);
    free(d);
    if (fp) fclose(fp);
    tl_gguf_free(g);
    return ok ? 0 : -1;
}

static void gf_clone(const gfile *src, gfile *f) {
    *f = *src;
    for (size_t i = 0; i < f->n_kv; i++) {
        f->kv[i].key = strdup(src->kv[i].key);
        f->kv[i].val = (buf){0};
        put(&f->kv[i].val, src->kv[i].val.p, src->kv[i].val.len);
    }
    for (size_t i = 0; i < f->n_t; i++) f->t[i].name = strdup(src->t[i].name);
    f->data = (buf){0};
    put(&f->data, src->data.p, src->data.len);
}

static void gf_free(gfile *f) {
    for (size_t i = 0; i < f->n_kv; i++) { free(f->kv[i].key); free(f->kv[i].val.p); }
    for (size_t i = 0; i < f->n_t; i++) free(f->t[i].name);
    free(f->data.p);
}

static void serialize(const gfile *f, buf *b, layout *lay) {
    *b = (buf){0};
    put_u32(b, f->magic);
    put_u32(b, f->version);
    put_u64(b, (uint64_t)((int64_t)f->n_t + f->n_tensors_delta));
    put_u64(b, (uint64_t)((int64_t)f->n_kv + f->n_kv_delta));
    for (size_t i = 0; i < f->n_kv; i++) {
        if (lay) lay->kv_start[i] = b->len;
        put_str(b, f->kv[i].key);
        put_u32(b, f->kv[i].type);
        put(b, f->kv[i].val.p, f->kv[i].val.len);
    }
    for (size_t i = 0; i < f->n_t; i++) {
        const hten *t = &f->t[i];
        if (lay) lay->t_start[i] = b->len;
        put_str(b, t->name);
        put_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims && d < 8; d++) put_u64(b, t->ne[d]);
        put_u32(b, t->type);
        put_u64(b, t->offset);
    }
    while (b->len % 32) put(b, "", 1);
    if (lay) lay->data_start = b->len;
    put(b, f->data.p, f->data.len);
}

static int kv_index(const gfile *f, const char *key) {
    for (size_t i = 0; i < f->n_kv; i++)
        if (!strcmp(f->kv[i].key, key)) return (int)i;
    fprintf(stderr, "base model lacks key %s\n", key);
    exit(1);
}

static int t_index(const gfile *f, const char *name) {
    for (size_t i = 0; i < f->n_t; i++)
        if (!strcmp(f->t[i].name, name)) return (int)i;
    fprintf(stderr, "base model lacks tensor %s\n", name);
    exit(1);
}

/* Sets (adding if absent) a key to `type` with the given serialized value bytes. */
static void kv_set(gfile *f, const char *key, uint32_t type, const void *val, size_t n) {
    size_t i;
    for (i = 0; i < f->n_kv && strcmp(f->kv[i].key, key); i++) {}
    if (i == f->n_kv) {
        f->kv[i] = (hkv){strdup(key), 0, {0}};
        f->n_kv++;
    }
    f->kv[i].type = type;
    f->kv[i].val.len = 0;
    put(&f->kv[i].val, val, n);
}

static void kv_set_u32(gfile *f, const char *key, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    kv_set(f, key, TL_GGUF_UINT32, b, 4);
}

static void kv_set_str(gfile *f, const char *key, const char *s) {
    buf b = {0};
    put_str(&b, s);
    kv_set(f, key, TL_GGUF_STRING, b.p, b.len);
    free(b.p);
}

static void kv_remove(gfile *f, const char *key) {
    int i = kv_index(f, key);
    free(f->kv[i].key);
    free(f->kv[i].val.p);
    memmove(&f->kv[i], &f->kv[i + 1], (f->n_kv - (size_t)i - 1) * sizeof f->kv[0]);
    f->n_kv--;
}

/* Appends `extra` entries to an array-valued key (copies of its first element). */
static void kv_array_grow(gfile *f, const char *key, uint64_t extra) {
    hkv *k = &f->kv[kv_index(f, key)];
    uint32_t et = (uint32_t)k->val.p[0] | (uint32_t)k->val.p[1] << 8;
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)k->val.p[4 + i] << (8 * i);
    size_t first = et == TL_GGUF_STRING ? 8 + (size_t)k->val.p[12] : scalar_bytes(et);
    uint8_t *copy = malloc(first);
    memcpy(copy, k->val.p + 12, first);
    for (uint64_t i = 0; i < extra; i++) put(&k->val, copy, first);
    free(copy);
    patch_le(&k->val, 4, n + extra, 8);
}

/* ---- running a case --------------------------------------------------------------------- */

enum { AT_PARSE, AT_MODEL };

static char g_dir[1024];
static bool g_keep;  /* --write mode: keep the case files */
static int g_cases;

static bool has_word(const char *msg, const char *w) {
    if (!w) return true;
    /* "a|b": any one of the alternatives */
    char alt[128];
    snprintf(alt, sizeof alt, "%s", w);
    for (char *save = NULL, *p = strtok_r(alt, "|", &save); p; p = strtok_r(NULL, "|", &save))
        if (strstr(msg, p)) return true;
    return false;
}

static void write_bytes(const char *path, const buf *b) {
    FILE *fp = fopen(path, "wb");
    if (!fp || (b->len && fwrite(b->p, 1, b->len, fp) != b->len) || fclose(fp) != 0) {
        perror(path);
        exit(1);
    }
}

/* Checks one corrupt file: tl_gguf_open fails (AT_PARSE) or succeeds (AT_MODEL), and
 * tl_model_open fails; the failing call's message must contain w1 and w2. */
static void check_file(const char *label, const char *path, int at, const char *w1,
                       const char *w2, bool quiet) {
    g_cases++;
    tl_gguf *g = NULL;
    tl_status st = tl_gguf_open(path, &g);
    char msg[1100];
    snprintf(msg, sizeof msg, "%s", tl_last_error());
    if (at == AT_PARSE) {
        CHECK_MSG(st != TL_OK, "%s: tl_gguf_open accepted the file", label);
        CHECK_MSG(st == TL_ERR_FORMAT || st == TL_ERR_UNSUPPORTED, "%s: status %s", label,
                  tl_status_str(st));
        CHECK_MSG(has_word(msg, w1) && has_word(msg, w2), "%s: message lacks '%s'/'%s': %s",
                  label, w1, w2 ? w2 : "", msg);
    } else {
        CHECK_MSG(st == TL_OK, "%s: tl_gguf_open failed: %s", label, msg);
    }
    tl_gguf_free(g);
    tl_model_params mp = tl_model_default_params();
    mp.n_threads = 1;
    tl_model *m = NULL;
    st = tl_model_open(path, &mp, &m);
    snprintf(msg, sizeof msg, "%s", tl_last_error());
    CHECK_MSG(st != TL_OK && m == NULL, "%s: tl_model_open accepted the file", label);
    CHECK_MSG(st < 0 && *msg, "%s: no error message", label);
    CHECK_MSG(has_word(msg, w1) && has_word(msg, w2), "%s: model message lacks '%s'/'%s': %s",
              label, w1, w2 ? w2 : "", msg);
    tl_model_close(m);
    if (!quiet) printf("  %-28s %s\n", label, msg);
}

/* The file for a case; --write mode names it parse-LABEL or model-LABEL after the stage
 * that must refuse it (hostile_cli.sh expects `tierllm info`, which reads no weights and
 * builds no tokenizer, to refuse only the parse-* files). */
static void case_path(char *path, size_t cap, const char *label, int at) {
    snprintf(path, cap, "%s/%s-%s.gguf", g_dir, at == AT_PARSE ? "parse" : "model", label);
}

static void run_bytes(const char *label, const buf *b, int at, const char *w1,
                      const char *w2) {
    char path[1200];
    case_path(path, sizeof path, label, at);
    write_bytes(path, b);
    check_file(label, path, at, w1, w2, false);
    if (!g_keep) unlink(path);
}

static void run_gf(const char *label, const gfile *f, int at, const char *w1,
                   const char *w2) {
    buf b;
    serialize(f, &b, NULL);
    run_bytes(label, &b, at, w1, w2);
    free(b.p);
}

/* ---- the cases -------------------------------------------------------------------------- */

#define TRUNC_WORDS "truncated|past the end|left in the file|bytes left|impossible|end of file"

/* Every tensor must be refused wherever the file is cut. */
static void truncation_cases(const gfile *base) {
    layout lay;
    buf b;
    serialize(base, &b, &lay);
    size_t offs[512], n = 0;
    for (size_t o = 0; o <= 24; o++) offs[n++] = o;                       /* header */
    for (size_t i = 0; i < base->n_kv; i++) {                              /* metadata */
        size_t s = lay.kv_start[i];
        size_t e = i + 1 < base->n_kv ? lay.kv_start[i + 1] : lay.t_start[0];
        size_t pts[] = {s + 1, s + 7, s + 8, s + 9, s + 8 + strlen(base->kv[i].key) + 2,
                        (s + e) / 2, e - 1};
        for (size_t k = 0; k < sizeof pts / sizeof pts[0]; k++)
            if (pts[k] < e) offs[n++] = pts[k];
    }
    for (size_t i = 0; i < base->n_t; i++) {                               /* tensor infos */
        size_t s = lay.t_start[i];
        size_t e = i + 1 < base->n_t ? lay.t_start[i + 1] : lay.data_start;
        size_t pts[] = {s, s + 3, s + 9, (s + e) / 2, e - 9, e - 1};
        for (size_t k = 0; k < sizeof pts / sizeof pts[0]; k++)
            if (pts[k] < e) offs[n++] = pts[k];
    }
    for (size_t k = 0; k < 40; k++)                                        /* data */
        offs[n++] = lay.data_start + (b.len - lay.data_start) * k / 40;
    offs[n++] = b.len - 1;
    char path[1200];
    case_path(path, sizeof path, "truncated", AT_PARSE);
    int shown = 0;
    for (size_t k = 0; k < n; k++) {
        char label[64];
        snprintf(label, sizeof label, "truncated_at_%zu", offs[k]);
        buf t = {b.p, offs[k], b.cap};
        write_bytes(path, &t);
        /* print a sample of the messages; every one is checked */
        bool quiet = !(k == 0 || k == 10 || k % 25 == 0 || k + 1 == n);
        check_file(label, path, AT_PARSE, TRUNC_WORDS, NULL, quiet);
        shown += !quiet;
    }
    printf("  (%zu truncation offsets checked, %d shown)\n", n, shown);
    /* in --write mode keep one truncated in the metadata */
    buf t = {b.p, lay.kv_start[base->n_kv / 2] + 5, b.cap};
    write_bytes(path, &t);
    if (!g_keep) unlink(path);
    free(b.p);
}

static void header_cases(const gfile *base) {
    gfile f;
    gf_clone(base, &f);
    f.magic = 0x46554746u;
    run_gf("bad_magic", &f, AT_PARSE, "magic", NULL);
    f.magic = 0x4655474cu ^ 0x0a000000u;
    run_gf("bad_magic_llamafile", &f, AT_PARSE, "magic", NULL);
    f.magic = 0x46554747u;
    f.version = 1;
    run_gf("version_1", &f, AT_PARSE, "version 1", NULL);
    f.version = 99;
    run_gf("version_99", &f, AT_PARSE, "version 99", NULL);
    f.version = 0;
    run_gf("version_0", &f, AT_PARSE, "version 0", NULL);
    f.version = 3;

    buf b;
    layout lay;
    serialize(&f, &b, &lay);
    struct { const char *label; size_t off; uint64_t v; const char *w; } patches[] = {
        {"n_tensors_2e63", 8, UINT64_C(1) << 63, "tensor count"},
        {"n_tensors_2e40", 8, UINT64_C(1) << 40, "tensor count"},
        {"n_tensors_max", 8, UINT64_MAX, "tensor count"},
        {"n_kv_2e63", 16, UINT64_C(1) << 63, "metadata count"},
        {"n_kv_2e40", 16, UINT64_C(1) << 40, "metadata count"},
        {"n_kv_max", 16, UINT64_MAX, "metadata count"},
    };
    for (size_t i = 0; i < sizeof patches / sizeof patches[0]; i++) {
        buf c = {0};
        put(&c, b.p, b.len);
        patch_le(&c, patches[i].off, patches[i].v, 8);
        run_bytes(patches[i].label, &c, AT_PARSE, patches[i].w, NULL);
        free(c.p);
    }
    free(b.p);
    /* counts a little too large: the reader runs into the next section */
    f.n_kv_delta = 1;
    run_gf("n_kv_plus_1", &f, AT_PARSE, NULL, NULL);
    f.n_kv_delta = 0;
    f.n_tensors_delta = 1;
    run_gf("n_tensors_plus_1", &f, AT_PARSE, NULL, NULL);
    f.n_tensors_delta = 0;
    gf_free(&f);
}

static void metadata_cases(const gfile *base) {
    buf b;
    layout lay;
    serialize(base, &b, &lay);
    int arch = kv_index(base, "general.architecture");
    int toks = kv_index(base, "tokenizer.ggml.tokens");
    int scores = kv_index(base, "tokenizer.ggml.scores");
    size_t arch_val = lay.kv_start[arch] + 8 + strlen(base->kv[arch].key) + 4;
    size_t toks_val = lay.kv_start[toks] + 8 + strlen(base->kv[toks].key) + 4;
    size_t scores_val = lay.kv_start[scores] + 8 + strlen(base->kv[scores].key) + 4;
    size_t last_key = lay.kv_start[base->n_kv - 1];
    struct { const char *label; size_t off, n; uint64_t v; const char *w1, *w2; } p[] = {
        {"key_len_2e63", lay.kv_start[0], 8, UINT64_C(1) << 63, "string length", NULL},
        {"key_len_max", lay.kv_start[0], 8, UINT64_MAX, "string length", NULL},
        {"key_len_past_eof", last_key, 8, b.len - last_key - 8 + 1, "string length",
         "exceeds"},
        {"str_len_2e63", arch_val, 8, UINT64_C(1) << 63, "general.architecture",
         "string length"},
        {"str_len_past_eof", arch_val, 8, b.len - arch_val - 8 + 1, "general.architecture",
         "string length"},
        {"value_type_13", arch_val - 4, 4, 13, "unknown value type 13",
         "general.architecture"},
        {"value_type_max", arch_val - 4, 4, UINT32_MAX, "unknown value type",
         "general.architecture"},
        {"array_elem_type_99", toks_val, 4, 99, "unknown array element type 99",
         "tokenizer.ggml.tokens"},
        {"array_nested", toks_val, 4, TL_GGUF_ARRAY, "nested", "tokenizer.ggml.tokens"},
        {"array_count_2e62", toks_val + 4, 8, UINT64_C(1) << 62, "tokenizer.ggml.tokens",
         "cannot fit"},
        {"array_count_2e40", toks_val + 4, 8, UINT64_C(1) << 40, "tokenizer.ggml.tokens",
         "cannot fit"},
        {"array_count_max_f32", scores_val + 4, 8, UINT64_MAX, "tokenizer.ggml.scores",
         "cannot fit"},
        {"array_count_2e61_f32", scores_val + 4, 8, UINT64_C(1) << 61,
         "tokenizer.ggml.scores", "cannot fit"},
        {"array_string_len_absurd", toks_val + 12, 8, UINT64_C(1) << 62,
         "tokenizer.ggml.tokens", "string length"},
    };
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        buf c = {0};
        put(&c, b.p, b.len);
        patch_le(&c, p[i].off, p[i].v, p[i].n);
        run_bytes(p[i].label, &c, AT_PARSE, p[i].w1, p[i].w2);
        free(c.p);
    }
    free(b.p);

    gfile f;
    gf_clone(base, &f);
    uint8_t nested[] = {TL_GGUF_ARRAY, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
                        TL_GGUF_UINT8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 7};
    kv_set(&f, "general.nested", TL_GGUF_ARRAY, nested, sizeof nested);
    run_gf("nested_array", &f, AT_PARSE, "nested", "general.nested");
    kv_remove(&f, "general.nested");
    uint8_t two = 2;
    kv_set(&f, "general.flag", TL_GGUF_BOOL, &two, 1);
    run_gf("bool_value_2", &f, AT_PARSE, "bool", "general.flag");
    kv_remove(&f, "general.flag");
    kv_set(&f, "general.zz_dup", TL_GGUF_UINT32, "\1\0\0\0", 4);
    free(f.kv[f.n_kv - 1].key);
    f.kv[f.n_kv - 1].key = strdup("llama.block_count");
    run_gf("duplicate_key", &f, AT_PARSE, "duplicate metadata key", "llama.block_count");
    f.n_kv--;
    free(f.kv[f.n_kv].key);
    free(f.kv[f.n_kv].val.p);
    /* a key with an embedded NUL ("general.a\0b") */
    kv_set(&f, "general.axb", TL_GGUF_UINT32, "\1\0\0\0", 4);
    serialize(&f, &b, &lay);
    b.p[lay.kv_start[f.n_kv - 1] + 8 + 9] = 0;
    run_bytes("key_with_nul", &b, AT_PARSE, "NUL", NULL);
    free(b.p);
    kv_remove(&f, "general.axb");

    /* general.alignment */
    struct { const char *label; uint32_t v; } al[] = {{"alignment_0", 0}, {"alignment_3", 3},
                                                      {"alignment_2e31", 1u << 31}};
    for (size_t i = 0; i < 3; i++) {
        kv_set_u32(&f, "general.alignment", al[i].v);
        run_gf(al[i].label, &f, AT_PARSE, "general.alignment", NULL);
    }
    kv_set_str(&f, "general.alignment", "32");
    run_gf("alignment_string", &f, AT_PARSE, "general.alignment", NULL);
    kv_set_u32(&f, "general.alignment", 1024); /* valid, but the data is laid out for 32 */
    run_gf("alignment_1024_misplaced", &f, AT_PARSE, "alignment|past the end", NULL);
    kv_remove(&f, "general.alignment");
    gf_free(&f);
}

static void tensor_cases(const gfile *base) {
    gfile f;
    gf_clone(base, &f);
    hten *q = &f.t[t_index(&f, "blk.0.attn_q.weight")];
    const hten q0 = *q;
    struct { const char *label; uint32_t n_dims; uint64_t ne[5]; const char *w; } shapes[] = {
        {"n_dims_0", 0, {0}, "0 dimensions"},
        {"n_dims_5", 5, {q0.ne[0], q0.ne[1], 1, 1, 1}, "5 dimensions"},
        {"n_dims_max", UINT32_MAX, {1, 1, 1, 1, 1}, "dimensions"},
        {"ne_zero", 2, {q0.ne[0], 0}, "shape"},
        {"ne_overflow_2e40x2e40", 2, {UINT64_C(1) << 40, UINT64_C(1) << 40}, "overflowing"},
        {"ne_overflow_2e32x2e32", 2, {UINT64_C(1) << 32, UINT64_C(1) << 32}, "overflowing"},
        {"ne_overflow_4d", 4, {1u << 16, 1u << 16, 1u << 16, 1u << 16}, "overflowing"},
        {"ne_max", 1, {UINT64_MAX}, "overflowing"},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        q->n_dims = shapes[i].n_dims;
        memcpy(q->ne, shapes[i].ne, sizeof shapes[i].ne);
        run_gf(shapes[i].label, &f, AT_PARSE, shapes[i].w, "blk.0.attn_q.weight");
    }
    *q = q0;
    /* huge but representable element counts: the byte size must not wrap */
    uint64_t huge[] = {UINT64_C(1) << 62, UINT64_C(1) << 61, (UINT64_C(1) << 62) - 1};
    for (size_t i = 0; i < 3; i++) {
        q->n_dims = 1;
        q->ne[0] = huge[i];
        q->ne[1] = 1;
        char label[64];
        snprintf(label, sizeof label, "ne_huge_%zu", i);
        run_gf(label, &f, AT_PARSE, "blk.0.attn_q.weight", NULL);
    }
    *q = q0;
    struct { const char *label; uint32_t type; const char *w; } types[] = {
        {"tensor_type_99", 99, "tensor type 99"},
        {"tensor_type_q8_k", 15, "tensor type 15"},    /* activations only, never in files */
        {"tensor_type_iq2_xxs", 16, "tensor type 16"}, /* the IQ types: not supported */
        {"tensor_type_max", UINT32_MAX, "tensor type"},
    };
    for (size_t i = 0; i < 4; i++) {
        q->type = types[i].type;
        run_gf(types[i].label, &f, AT_PARSE, types[i].w, "blk.0.attn_q.weight");
    }
    q->type = TL_TYPE_Q8_0; /* the row (48) is not a whole number of 32-blocks */
    q->ne[0] = 47;
    run_gf("q8_0_partial_block", &f, AT_PARSE, "block size", "blk.0.attn_q.weight");
    *q = q0;

    uint64_t data_len = f.data.len;
    struct { const char *label; uint64_t off; const char *w; } offs[] = {
        {"offset_past_eof", (data_len + 64) / 32 * 32, "past the end"},
        {"offset_2e63", UINT64_C(1) << 63, "past the end"},
        {"offset_max_aligned", UINT64_MAX / 32 * 32, "past the end"},
        {"offset_unaligned", q0.offset + 4, "alignment"},
        {"offset_max", UINT64_MAX, "alignment"},
    };
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        q->offset = offs[i].off;
        run_gf(offs[i].label, &f, AT_PARSE, offs[i].w, "blk.0.attn_q.weight");
    }
    *q = q0;
    /* size past the end: the last tensor grows by one row */
    hten *last = &f.t[f.n_t - 1];
    last->ne[1] += 1;
    run_gf("size_past_eof", &f, AT_PARSE, "past the end", last->name);
    last->ne[1] -= 1;

    free(q->name);
    q->name = strdup("blk.0.attn_k.weight");
    run_gf("duplicate_tensor", &f, AT_PARSE, "duplicate tensor name", "blk.0.attn_k.weight");
    free(q->name);
    q->name = strdup("");
    run_gf("tensor_name_empty", &f, AT_PARSE, "empty name", NULL);
    free(q->name);
    q->name = strdup("blk.0.attn_qq.weight");
    run_gf("missing_tensor", &f, AT_MODEL, "missing tensor", "blk.0.attn_q.weight");
    free(q->name);
    q->name = strdup("blk.0.attn_q.weight");

    /* tensor-name length */
    buf b;
    layout lay;
    serialize(&f, &b, &lay);
    patch_le(&b, lay.t_start[0], UINT64_C(1) << 63, 8);
    run_bytes("tensor_name_len_2e63", &b, AT_PARSE, "tensor name", "string length");
    free(b.p);
    serialize(&f, &b, &lay);
    patch_le(&b, lay.t_start[f.n_t - 1], b.len - lay.t_start[f.n_t - 1] - 8 + 1, 8);
    run_bytes("tensor_name_len_past_eof", &b, AT_PARSE, "string length", NULL);
    free(b.p);

    /* shapes that parse but do not fit the model */
    hten *up = &f.t[t_index(&f, "blk.1.ffn_up.weight")];
    uint64_t t0 = up->ne[0];
    up->ne[0] = up->ne[1];
    up->ne[1] = t0;
    run_gf("wrong_shape_transposed", &f, AT_MODEL, "blk.1.ffn_up.weight", "shape");
    up->ne[1] = up->ne[0];
    up->ne[0] = t0;
    up->n_dims = 3;
    up->ne[2] = 1;
    run_gf("wrong_shape_3d", &f, AT_MODEL, "blk.1.ffn_up.weight", "3-d shape");
    up->n_dims = 2;
    hten *norm = &f.t[t_index(&f, "output_norm.weight")];
    norm->ne[0] /= 2;
    run_gf("wrong_shape_norm", &f, AT_MODEL, "output_norm.weight", "shape");
    norm->ne[0] *= 2;
    hten *emb = &f.t[t_index(&f, "token_embd.weight")];
    emb->ne[1] -= 10;
    run_gf("vocab_mismatch_embd", &f, AT_MODEL, "output.weight|tokenizer", NULL);
    emb->ne[1] += 10;
    gf_free(&f);
}

static void model_cases(const gfile *base) {
    gfile f;
    gf_clone(base, &f);
    const char *required[] = {"llama.embedding_length", "llama.feed_forward_length",
                              "llama.block_count", "llama.attention.head_count",
                              "general.architecture", "tokenizer.ggml.tokens",
                              "tokenizer.ggml.model"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        gfile g;
        gf_clone(base, &g);
        kv_remove(&g, required[i]);
        char label[96];
        snprintf(label, sizeof label, "missing_key_%s", required[i]);
        run_gf(label, &g, AT_MODEL, "missing", required[i]);
        gf_free(&g);
    }
    kv_set_str(&f, "llama.embedding_length", "48");
    run_gf("embedding_length_string", &f, AT_MODEL, "llama.embedding_length", "string");
    kv_set(&f, "llama.embedding_length", TL_GGUF_FLOAT32, "\0\0\x40\x42", 4);
    run_gf("embedding_length_float", &f, AT_MODEL, "llama.embedding_length", "float32");
    kv_set(&f, "llama.embedding_length", TL_GGUF_UINT64, "\0\0\0\0\0\1\0\0", 8);
    run_gf("embedding_length_2e40", &f, AT_MODEL, "llama.embedding_length", "out of range");
    kv_set(&f, "llama.embedding_length", TL_GGUF_INT32, "\xff\xff\xff\xff", 4);
    run_gf("embedding_length_negative", &f, AT_MODEL, "llama.embedding_length",
           "out of range");
    kv_set_u32(&f, "llama.embedding_length", 0);
    run_gf("embedding_length_0", &f, AT_MODEL, "embedding 0", "inconsistent");
    kv_set_u32(&f, "llama.embedding_length", 48);
    kv_set(&f, "llama.attention.layer_norm_rms_epsilon", TL_GGUF_STRING,
           "\1\0\0\0\0\0\0\0x", 9);
    run_gf("rms_eps_string", &f, AT_MODEL, "layer_norm_rms_epsilon", "expected a float");
    kv_set(&f, "llama.attention.layer_norm_rms_epsilon", TL_GGUF_FLOAT32, "\0\0\xc0\x7f", 4);
    run_gf("rms_eps_nan", &f, AT_MODEL, "rms epsilon", NULL);
    kv_set(&f, "llama.attention.layer_norm_rms_epsilon", TL_GGUF_FLOAT32, "\xac\xc5\x27\x37",
           4);
    { /* computed RoPE divisors in metadata (a Hugging Face folder's rope_scaling): one
       * per frequency (head dim 12: 6), each positive and finite */
        uint8_t arr[4 + 8 + 6 * 4];
        const uint32_t et = TL_GGUF_FLOAT32;
        uint64_t n = 2;
        const float div[6] = {1, 1, 2, 0, 4, 8};
        memcpy(arr, &et, 4), memcpy(arr + 4, &n, 8), memcpy(arr + 12, div, sizeof div);
        kv_set(&f, "tierllm.rope_freqs", TL_GGUF_ARRAY, arr, 12 + 2 * 4);
        run_gf("rope_freqs_count", &f, AT_MODEL, "tierllm.rope_freqs", "2 entries");
        n = 6;
        memcpy(arr + 4, &n, 8);
        kv_set(&f, "tierllm.rope_freqs", TL_GGUF_ARRAY, arr, sizeof arr);
        run_gf("rope_freqs_zero", &f, AT_MODEL, "rope_freqs[3]", "positive divisor");
        kv_remove(&f, "tierllm.rope_freqs");
    }
    kv_set_str(&f, "general.architecture", "gpt2");
    run_gf("architecture_gpt2", &f, AT_MODEL, "architecture 'gpt2'", "not supported");
    kv_set(&f, "general.architecture", TL_GGUF_UINT32, "\1\0\0\0", 4);
    run_gf("architecture_u32", &f, AT_MODEL, "general.architecture", "expected a string");
    kv_set_str(&f, "general.architecture", "llama");

    kv_set_u32(&f, "llama.attention.head_count_kv", 3);
    run_gf("kv_heads_not_dividing", &f, AT_MODEL, "kv heads 3", NULL);
    kv_set_u32(&f, "llama.attention.head_count_kv", 0);
    run_gf("kv_heads_0", &f, AT_MODEL, "kv heads 0", NULL);
    kv_set_u32(&f, "llama.attention.head_count_kv", 2);
    kv_set_u32(&f, "llama.attention.head_count", 5);
    run_gf("head_count_changed", &f, AT_MODEL, "blk.0.attn_q.weight|head dimension|kv heads",
           NULL);
    kv_set_u32(&f, "llama.attention.head_count", 4);
    kv_set_u32(&f, "llama.attention.key_length", 13);
    run_gf("head_dim_odd", &f, AT_MODEL, "head dimension 13", NULL);
    kv_set_u32(&f, "llama.attention.key_length", 12);
    kv_set_u32(&f, "llama.rope.dimension_count", 14);
    run_gf("rope_dim_too_big", &f, AT_MODEL, "rope.dimension_count", NULL);
    kv_remove(&f, "llama.rope.dimension_count");
    kv_remove(&f, "llama.attention.key_length");
    kv_set_u32(&f, "llama.block_count", 3);
    run_gf("block_count_3", &f, AT_MODEL, "missing tensor", "blk.2.");
    kv_set_u32(&f, "llama.block_count", 1u << 30);
    run_gf("block_count_2e30", &f, AT_MODEL, "layers 1073741824", "inconsistent");
    kv_set_u32(&f, "llama.block_count", 2);

    /* the tokenizer disagrees with token_embd */
    gfile g;
    gf_clone(&f, &g);
    kv_array_grow(&g, "tokenizer.ggml.tokens", 1);
    run_gf("vocab_mismatch_scores", &g, AT_MODEL, "tokenizer.ggml.scores|token_type",
           "entries");
    kv_array_grow(&g, "tokenizer.ggml.scores", 1);
    kv_array_grow(&g, "tokenizer.ggml.token_type", 1);
    run_gf("vocab_mismatch_embd_rows", &g, AT_MODEL, "tokenizer has 261 tokens",
           "token_embd");
    gf_free(&g);
    kv_set_u32(&f, "tokenizer.ggml.bos_token_id", 1000);
    run_gf("bos_id_out_of_range", &f, AT_MODEL, "bos_token_id", "out of range");
    kv_set_u32(&f, "tokenizer.ggml.bos_token_id", 1);
    kv_set_str(&f, "tokenizer.ggml.model", "t5");
    run_gf("tokenizer_model_t5", &f, AT_MODEL, "tokenizer.ggml.model", "not supported");
    gf_free(&f);
}

/* ---- main ------------------------------------------------------------------------------ */

static void simple_files(void) {
    char path[1200];
    case_path(path, sizeof path, "empty", AT_PARSE);
    buf b = {0};
    write_bytes(path, &b);
    check_file("empty", path, AT_PARSE, "truncated", "magic", false);
    if (!g_keep) unlink(path);
    put(&b, "GGUF", 4);
    run_bytes("magic_only", &b, AT_PARSE, "truncated", "version");
    free(b.p);
    snprintf(path, sizeof path, "%s/does-not-exist.gguf", g_dir);
    tl_gguf *g = NULL;
    tl_status st = tl_gguf_open(path, &g);
    CHECK(st == TL_ERR_IO && strstr(tl_last_error(), "cannot open"));
    printf("  %-28s %s\n", "nonexistent", tl_last_error());
    st = tl_gguf_open(g_dir, &g);
    CHECK(st == TL_ERR_IO && strstr(tl_last_error(), "not a regular file"));
    printf("  %-28s %s\n", "directory", tl_last_error());
    tl_model *m = NULL;
    st = tl_model_open(g_dir, NULL, &m);
    CHECK(st != TL_OK && m == NULL);
    g_cases += 3;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write")) {
        g_keep = true;
        snprintf(g_dir, sizeof g_dir, "%s", argv[2]);
    } else if (argc != 1) {
        fprintf(stderr, "usage: test_gguf_hostile [--write DIR]\n");
        return 2;
    } else {
        char tmpl[] = "/tmp/tl_hostile_XXXXXX";
        if (!mkdtemp(tmpl)) { perror("mkdtemp"); return 1; }
        snprintf(g_dir, sizeof g_dir, "%s", tmpl);
    }
    /* small enough that 200+ opens stay fast under ASan; 48 columns so that a
     * quantized row splits blocks */
    tl_synth_params sp;
    tl_synth_preset("stories260k", &sp);
    sp.n_vocab = 260;
    sp.n_embd = 48;
    sp.n_ff = 96;
    sp.n_layer = 2;
    sp.n_head = 4;
    sp.n_head_kv = 2;
    sp.n_ctx = 64;
    char valid[1200];
    snprintf(valid, sizeof valid, "%s/valid.gguf", g_dir);
    if (tl_synth_write(&sp, valid) != TL_OK) {
        fprintf(stderr, "synth: %s\n", tl_last_error());
        return 1;
    }
    gfile base;
    if (gf_load(valid, &base) != 0) return 1;

    /* the re-serialized base is byte-identical and loads */
    buf b;
    serialize(&base, &b, NULL);
    char rt[1200];
    snprintf(rt, sizeof rt, "%s/roundtrip.gguf", g_dir);
    write_bytes(rt, &b);
    free(b.p);
    tl_model *m = NULL;
    tl_status st = tl_model_open(rt, NULL, &m);
    CHECK_MSG(st == TL_OK, "the re-serialized base model does not load: %s", tl_last_error());
    tl_model_close(m);
    unlink(rt);

    simple_files();
    header_cases(&base);
    metadata_cases(&base);
    tensor_cases(&base);
    model_cases(&base);
    truncation_cases(&base);
    gf_free(&base);
    printf("%d hostile cases\n", g_cases);
    if (!g_keep) {
        unlink(valid);
        if (rmdir(g_dir) != 0) perror(g_dir);
    }
    return tl_test_finish("test_gguf_hostile");
}
