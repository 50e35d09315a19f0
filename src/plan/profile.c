/* profile.c - the hardware profile's tables, machine key, JSON file and lookups (see
 * profile.h; measuring is in profile_measure.c).
 *
 * The file is JSON through base/json.h (Jansson, strict: no duplicate keys, no NUL, no
 * overflowing numbers), read from an in-memory copy of at most PROFILE_MAX_BYTES. One
 * field table drives the writer and the reader: every known field is required, has the
 * exact array shape and passes its range rule, the grid axes must equal this build's
 * tables, and unknown keys are ignored. Doubles are written with 17 significant digits
 * (an exact round trip), through base/out_file.h (a temporary file renamed into place;
 * only a regular file is replaced).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "plan/profile.h"
#include "base/cache_dir.h"
#include "base/budget.h"
#include "base/json.h"
#include "base/out_file.h"
#include "base/status.h"
#include "format/tensor_type.h"

const uint64_t tl_prof_chunks[TL_PROF_N_CHUNK] = {64u << 10, 256u << 10, 1u << 20, 4u << 20};
const int32_t tl_prof_depths[TL_PROF_N_DEPTH] = {1, 4, 16};
const int32_t tl_prof_rows[TL_PROF_N_ROWS] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
const int32_t tl_prof_kvbits[TL_PROF_N_KVBITS] = {32, 16, 8, 4};

#define PROFILE_VERSION 16 /* 2: disk_urgent_read_s, disk_urgent_page_s; 3: matmul rates on
                            * huge-page memory, as the weights (2 read them on 4 KiB pages,
                            * which understates the rates); 4: attn_block_s_per_mac; 5: the
                            * Q8_0/Q4_0 GEMM on int8 dot products (4 timed the f32 one); 6:
                            * that GEMM from 9 rows, with vector packing; 7: Q8_0/Q4_0 rates
                            * on weights in panels, repack_bps; 8: rates of Q4_1, Q5_0, Q5_1
                            * and the K-quants; 9: attn_gqa_s_per_mac,
                            * attn_gqa_block_s_per_mac, attn_cache_bytes,
                            * attn_mem_bytes, attn_mem_s_per_byte; 10: attn_decode_s
                            * of 16-bit KV by the F16C row conversion (9 timed the
                            * scalar one the engine no longer runs); 11: the slowdowns
                            * while the disk streams on weights in panels, the
                            * compute-bound one at 128 rows (10: 32 rows on the file's
                            * row layout, which the engine does not run where it keeps
                            * panels), with the disk read as the residency reads it
                            * (10: a chunk at a time, KV-sized urgent reads between); 12:
                            * io_slowdown_attn; 13: kv_store_s; 14: the grouped-query
                            * figures on a model of four kv heads (13: two, one job per
                            * thread, which times each step's slower job); 15:
                            * element-wise work on the vector rmsnorm (14: the scalar);
                            * 16: io_stream_bps */
#define PROFILE_MAX_BYTES ((size_t)1 << 20)
/* The longest grid axis (types or rows): an axis is copied whole into a buffer this long. */
#define AXIS_MAX ((int)TL_PROF_N_TYPE > (int)TL_PROF_N_ROWS ? (int)TL_PROF_N_TYPE : (int)TL_PROF_N_ROWS)
_Static_assert(AXIS_MAX >= (int)TL_PROF_N_CHUNK && AXIS_MAX >= (int)TL_PROF_N_DEPTH &&
               AXIS_MAX >= (int)TL_PROF_N_KVBITS, "every grid axis fits AXIS_MAX");

int32_t tl__profile_threads(int32_t n_threads) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads > 0) return n_threads;
    return n > 0 ? (int32_t)n : 1;
}

/* The value of the first "key<ws>: value" line of a /proc file, trimmed, or "". */
static void proc_field(const char *file, const char *key, char *out, size_t cap) {
    out[0] = 0;
    FILE *f = fopen(file, "r");
    if (!f) return;
    char line[512];
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, kl) != 0) continue;
        char *p = line + kl;
        while (*p == ' ' || *p == '\t') p++;
        if (*p != ':') continue;
        p++;
        while (*p == ' ' || *p == '\t') p++;
        size_t n = strcspn(p, "\r\n");
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
        if (n >= cap) n = cap - 1;
        memcpy(out, p, n);
        out[n] = 0;
        break;
    }
    fclose(f);
}

void tl_profile_machine_key(int32_t n_threads, char *out, size_t cap) {
    char model[160], mem[64];
    proc_field("/proc/cpuinfo", "model name", model, sizeof model);
    proc_field("/proc/meminfo", "MemTotal", mem, sizeof mem);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    long long kb = strtoll(mem, NULL, 10);
    if (cap == 0) return;
    snprintf(out, cap, "cpu=%s;ncpu=%ld;mem=%lld;threads=%d", model[0] ? model : "unknown",
             ncpu, kb, (int)tl__profile_threads(n_threads));
}

tl_status tl_profile_default_path(int32_t n_threads, char *out, size_t cap) {
    char dir[1024];
    tl_status st = tl_cache_dir(dir, sizeof dir);
    if (st) return st;
    int n = snprintf(out, cap, "%s/profile-t%d.json", dir, (int)tl__profile_threads(n_threads));
    if (n < 0 || (size_t)n >= cap)
        return tl_error_set(TL_ERR_INVALID, "profile path too long");
    return TL_OK;
}

void tl__profile_default_dir(int32_t n_threads, char *out, size_t cap) {
    char path[1024];
    snprintf(out, cap, ".");
    if (tl_profile_default_path(n_threads, path, sizeof path) != TL_OK) {
        tl_error_clear();
        return;
    }
    char *slash = strrchr(path, '/');
    if (!slash || slash == path) return;
    *slash = 0;
    if (tl_make_dirs(path) != TL_OK || strlen(path) >= cap) {
        tl_error_clear();
        return;
    }
    snprintf(out, cap, "%s", path);
}

void tl__profile_say(void (*progress)(void *, const char *), void *user, const char *fmt,
                     ...) {
    if (!progress) return;
    char line[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    progress(user, line);
}

/* ---- JSON ---- */

/* Field table shared by the writer and the reader. */
enum { F_STR, F_I32, F_NUM, F_VEC, F_MAT, F_AXIS_U64, F_AXIS_I32, F_AXIS_TYPES, F_VERSION };
enum { R_ANY, R_NONNEG, R_POS };
typedef struct pfield {
    const char *name;
    int kind, rule;
    size_t off;   /* offset in tl_hw_profile (not for axes and the version) */
    size_t n1, n2;  /* array shape; strings: capacity */
    const void *axis;
} pfield;

#define OFF(f) offsetof(tl_hw_profile, f)
static const pfield fields[] = {
    {"tierllm_profile_version", F_VERSION, R_ANY, 0, 0, 0, NULL},
    {"machine", F_STR, R_ANY, OFF(machine), sizeof(((tl_hw_profile *)0)->machine), 0, NULL},
    {"disk_dir", F_STR, R_ANY, OFF(disk_dir), sizeof(((tl_hw_profile *)0)->disk_dir), 0,
     NULL},
    {"n_threads", F_I32, R_POS, OFF(n_threads), 0, 0, NULL},
    {"measured_unix", F_NUM, R_NONNEG, OFF(measured_unix), 1, 0, NULL},
    {"profile_seconds", F_NUM, R_NONNEG, OFF(profile_seconds), 1, 0, NULL},
    {"mem_read_bps", F_NUM, R_POS, OFF(mem_read_bps), 1, 0, NULL},
    {"fma_flops", F_NUM, R_POS, OFF(fma_flops), 1, 0, NULL},
    {"chunks", F_AXIS_U64, R_POS, 0, TL_PROF_N_CHUNK, 0, tl_prof_chunks},
    {"depths", F_AXIS_I32, R_POS, 0, TL_PROF_N_DEPTH, 0, tl_prof_depths},
    {"disk_read_bps", F_MAT, R_POS, OFF(disk_read_bps), TL_PROF_N_CHUNK, TL_PROF_N_DEPTH,
     NULL},
    {"disk_write_bps", F_NUM, R_POS, OFF(disk_write_bps), 1, 0, NULL},
    {"disk_urgent_read_s", F_NUM, R_POS, OFF(disk_urgent_read_s), 1, 0, NULL},
    {"disk_urgent_page_s", F_NUM, R_POS, OFF(disk_urgent_page_s), 1, 0, NULL},
    {"types", F_AXIS_TYPES, R_ANY, 0, TL_PROF_N_TYPE, 0, NULL},
    {"rows", F_AXIS_I32, R_POS, 0, TL_PROF_N_ROWS, 0, tl_prof_rows},
    {"matmul_macs", F_MAT, R_POS, OFF(matmul_macs), TL_PROF_N_TYPE, TL_PROF_N_ROWS, NULL},
    {"matmul_call_s", F_MAT, R_NONNEG, OFF(matmul_call_s), TL_PROF_N_TYPE, TL_PROF_N_ROWS, NULL},
    {"repack_bps", F_VEC, R_NONNEG, OFF(repack_bps), TL_PROF_N_TYPE, 0, NULL},
    {"attn_s_per_mac", F_NUM, R_POS, OFF(attn_s_per_mac), 1, 0, NULL},
    {"kv_bits", F_AXIS_I32, R_POS, 0, TL_PROF_N_KVBITS, 0, tl_prof_kvbits},
    {"attn_decode_s", F_VEC, R_NONNEG, OFF(attn_decode_s), TL_PROF_N_KVBITS, 0, NULL},
    {"attn_block_s_per_mac", F_NUM, R_POS, OFF(attn_block_s_per_mac), 1, 0, NULL},
    {"attn_gqa_s_per_mac", F_NUM, R_POS, OFF(attn_gqa_s_per_mac), 1, 0, NULL},
    {"attn_gqa_block_s_per_mac", F_NUM, R_POS, OFF(attn_gqa_block_s_per_mac), 1, 0, NULL},
    {"attn_cache_bytes", F_NUM, R_POS, OFF(attn_cache_bytes), 1, 0, NULL},
    {"attn_mem_bytes", F_NUM, R_POS, OFF(attn_mem_bytes), 1, 0, NULL},
    {"attn_mem_s_per_byte", F_NUM, R_NONNEG, OFF(attn_mem_s_per_byte), 1, 0, NULL},
    {"elementwise_s", F_NUM, R_POS, OFF(elementwise_s), 1, 0, NULL},
    {"kv_store_s", F_VEC, R_POS, OFF(kv_store_s), TL_PROF_N_KVBITS, 0, NULL},
    {"layer_fixed_s", F_NUM, R_NONNEG, OFF(layer_fixed_s), 1, 0, NULL},
    {"io_compute_slowdown", F_NUM, R_POS, OFF(io_compute_slowdown), 1, 0, NULL},
    {"io_slowdown_matvec", F_NUM, R_POS, OFF(io_slowdown_matvec), 1, 0, NULL},
    {"io_slowdown_attn", F_NUM, R_POS, OFF(io_slowdown_attn), 1, 0, NULL},
    {"io_stream_bps", F_NUM, R_NONNEG, OFF(io_stream_bps), 1, 0, NULL},
};
#undef OFF
enum { N_FIELDS = sizeof fields / sizeof fields[0] };

static double axis_value(const pfield *f, size_t i) {
    if (f->kind == F_AXIS_TYPES) return (double)tl_type_table[i].type;
    return f->kind == F_AXIS_U64 ? (double)((const uint64_t *)f->axis)[i]
                                 : (double)((const int32_t *)f->axis)[i];
}

/* A double as JSON: integral values as integers (a count, a grid point), others as
 * reals printed with 17 significant digits (an exact round trip). */
static json_t *number(double v) {
    if (v == floor(v) && fabs(v) < 9e15) return json_integer((json_int_t)v);
    return json_real(v);
}

static json_t *numbers(const double *v, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, number(v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* The field's JSON value, or NULL when out of memory. */
static json_t *field_value(const pfield *fd, const tl_hw_profile *p) {
    const char *base = (const char *)p;
    const double *d = (const double *)(base + fd->off);
    switch (fd->kind) {
    case F_VERSION: return json_integer(PROFILE_VERSION);
    case F_STR: return json_string(base + fd->off);
    case F_I32: return json_integer(*(const int32_t *)(base + fd->off));
    case F_NUM: return number(*d);
    case F_VEC: return numbers(d, fd->n1);
    case F_MAT: {
        json_t *m = json_array();
        for (size_t i = 0; m && i < fd->n1; i++)
            if (json_array_append_new(m, numbers(d + i * fd->n2, fd->n2)) != 0) {
                json_decref(m);
                return NULL;
            }
        return m;
    }
    default: {
        double axis[AXIS_MAX];
        for (size_t i = 0; i < fd->n1; i++) axis[i] = axis_value(fd, i);
        return numbers(axis, fd->n1);
    }
    }
}

/* The profile as one JSON object, in the table's order; NULL with the error set. */
static json_t *profile_json(const tl_hw_profile *p) {
    const char *base = (const char *)p;
    json_t *o = json_object();
    if (!o) return NULL;
    for (int k = 0; k < N_FIELDS; k++) {
        const pfield *fd = &fields[k];
        const double *d = (const double *)(base + fd->off);
        size_t cnt = fd->kind == F_NUM ? 1 : fd->kind == F_VEC ? fd->n1
                   : fd->kind == F_MAT ? fd->n1 * fd->n2 : 0;
        for (size_t i = 0; i < cnt; i++)
            if (!isfinite(d[i])) {
                json_decref(o);
                tl_error_set(TL_ERR_INVALID, "profile save: field '%s' is not finite",
                             fd->name);
                return NULL;
            }
        json_t *v = field_value(fd, p);
        if (!v || json_object_set_new(o, fd->name, v) != 0) {
            json_decref(o);
            tl_error_set(fd->kind == F_STR ? TL_ERR_INVALID : TL_ERR_NOMEM,
                         "profile save: field '%s': %s", fd->name,
                         fd->kind == F_STR ? "not valid UTF-8 (or out of memory)"
                                           : "out of memory");
            return NULL;
        }
    }
    return o;
}

/* The directory of `path`, created if missing (mode 0700). */
static tl_status make_parent(const char *path) {
    char dir[1024];
    int n = snprintf(dir, sizeof dir, "%s", path);
    if (n < 0 || (size_t)n >= sizeof dir)
        return tl_error_set(TL_ERR_INVALID, "profile path too long: %s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return TL_OK;
    *slash = 0;
    return tl_make_dirs(dir);
}

tl_status tl_profile_check_path(const char *path) {
    if (!path || !*path) return tl_error_set(TL_ERR_INVALID, "profile save: no path");
    tl_status st = make_parent(path);
    if (st == TL_OK) st = tl_out_check_target(path);
    return st == TL_OK ? TL_OK : tl_error_wrap(st, "profile save");
}

tl_status tl_profile_save(const tl_hw_profile *p, const char *path) {
    tl_status st = tl_profile_check_path(path);
    if (st != TL_OK) return st;
    tl_out_file out;
    if ((st = tl_out_file_open(&out, path))) return tl_error_wrap(st, "profile save");
    json_t *o = profile_json(p);
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17))
                   : NULL;
    st = text ? tl_out_file_write(&out, text, strlen(text))
              : o ? tl_error_set(TL_ERR_NOMEM, "profile save: out of memory") : TL_ERR_INVALID;
    if (st == TL_OK) st = tl_out_file_write(&out, "\n", 1);
    free(text);
    json_decref(o);
    if (st != TL_OK) {
        tl_out_file_abort(&out);
        return st;
    }
    st = tl_out_file_commit(&out);
    return st == TL_OK ? TL_OK : tl_error_wrap(st, "profile save");
}

/* ---- JSON reader ---- */

static tl_status field_fail(const char *path, const pfield *f, const char *what) {
    return tl_error_set(TL_ERR_FORMAT, "profile %s: field '%s': %s", path, f->name, what);
}

static tl_status check_rule(const char *path, const pfield *f, double v) {
    if (f->rule == R_POS && !(v > 0)) return field_fail(path, f, "must be positive");
    if (f->rule == R_NONNEG && !(v >= 0)) return field_fail(path, f, "must not be negative");
    return TL_OK;
}

/* An array of exactly n numbers into out (each checked against the rule). */
static tl_status read_vec(const char *path, const pfield *f, const json_t *a, double *out,
                          size_t n) {
    char what[64];
    snprintf(what, sizeof what, "expected an array of %zu numbers", n);
    if (!json_is_array(a) || json_array_size(a) != n) return field_fail(path, f, what);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_number(v)) return field_fail(path, f, what);
        out[i] = json_number_value(v);
        tl_status st = check_rule(path, f, out[i]);
        if (st != TL_OK) return st;
    }
    return TL_OK;
}

static tl_status read_field(const char *path, const pfield *f, const json_t *v,
                            tl_hw_profile *out) {
    char *base = (char *)out;
    /* an axis read whole before it is compared: room for the longest one */
    double tmp[AXIS_MAX];
    tl_status st;
    switch (f->kind) {
    case F_STR:
        if (!json_is_string(v)) return field_fail(path, f, "expected a string");
        if (json_string_length(v) >= f->n1) return field_fail(path, f, "string too long");
        memcpy(base + f->off, json_string_value(v), json_string_length(v) + 1);
        return TL_OK;
    case F_VERSION:
        if (!json_is_number(v)) return field_fail(path, f, "expected a number");
        return json_number_value(v) == PROFILE_VERSION
                   ? TL_OK : field_fail(path, f, "unsupported version");
    case F_I32: {
        double n = json_is_number(v) ? json_number_value(v) : 0;
        if (n != floor(n) || n < 1 || n > 1e6) return field_fail(path, f, "bad thread count");
        *(int32_t *)(base + f->off) = (int32_t)n;
        return TL_OK;
    }
    case F_NUM:
        if (!json_is_number(v)) return field_fail(path, f, "expected a number");
        *(double *)(base + f->off) = json_number_value(v);
        return check_rule(path, f, *(double *)(base + f->off));
    case F_VEC: return read_vec(path, f, v, (double *)(base + f->off), f->n1);
    case F_MAT: {
        char what[64];
        snprintf(what, sizeof what, "expected %zu arrays of %zu numbers", f->n1, f->n2);
        if (!json_is_array(v) || json_array_size(v) != f->n1) return field_fail(path, f, what);
        for (size_t i = 0; i < f->n1; i++)
            if ((st = read_vec(path, f, json_array_get(v, i),
                               (double *)(base + f->off) + i * f->n2, f->n2)))
                return st;
        return TL_OK;
    }
    default: /* an axis: must equal this build's grid */
        if ((st = read_vec(path, f, v, tmp, f->n1))) return st;
        for (size_t i = 0; i < f->n1; i++)
            if (tmp[i] != axis_value(f, i))
                return field_fail(path, f, "grid differs from this build's");
        return TL_OK;
    }
}

/* The field a syntax error is in: the top-level key ("  \"name\":" as the writer indents
 * it) on the error's line or the nearest line above it. */
static const pfield *field_at_line(const char *buf, size_t n, int line) {
    size_t start = 0;
    int l = 1;
    const pfield *found = NULL;
    for (size_t i = 0; i <= n && l <= line; i++) {
        if (i < n && buf[i] != '\n') continue;
        if (i - start > 3 && buf[start] == ' ' && buf[start + 1] == ' ' && buf[start + 2] == '"')
            for (int k = 0; k < N_FIELDS; k++) {
                size_t len = strlen(fields[k].name);
                if (i - start > len + 3 && !memcmp(buf + start + 3, fields[k].name, len) &&
                    buf[start + 3 + len] == '"')
                    found = &fields[k];
            }
        start = i + 1;
        l++;
    }
    return found;
}

static tl_status parse_profile(const char *path, const char *buf, size_t n, tl_hw_profile *out) {
    json_t *root;
    char err[200];
    int line;
    if (tl_json_parse_at(buf, n, 0, &root, err, sizeof err, &line)) {
        const pfield *f = field_at_line(buf, n, line); /* the field the error is in */
        if (f) return tl_error_set(TL_ERR_FORMAT, "profile %s: field '%s': %s", path, f->name, err);
        return tl_error_set(TL_ERR_FORMAT, "profile %s: %s", path, err);
    }
    tl_status st = TL_OK;
    for (int k = 0; k < N_FIELDS && !st; k++) {
        const json_t *v = json_object_get(root, fields[k].name);
        st = v ? read_field(path, &fields[k], v, out)
               : tl_error_set(TL_ERR_FORMAT, "profile %s: field '%s' is missing", path,
                              fields[k].name);
    }
    json_decref(root);
    return st;
}

tl_status tl_profile_load(const char *path, tl_hw_profile *out) {
    if (!path || !out) return tl_error_set(TL_ERR_INVALID, "profile load: no path");
    FILE *f = fopen(path, "rb");
    if (!f) return tl_error_set(TL_ERR_IO, "profile %s: %s", path, strerror(errno));
    char *buf = malloc(PROFILE_MAX_BYTES + 1);
    if (!buf) {
        fclose(f);
        return tl_error_set(TL_ERR_NOMEM, "profile %s: out of memory", path);
    }
    size_t n = fread(buf, 1, PROFILE_MAX_BYTES + 1, f);
    int err = ferror(f);
    fclose(f);
    tl_status st;
    if (err) {
        st = tl_error_set(TL_ERR_IO, "profile %s: read error", path);
    } else if (n > PROFILE_MAX_BYTES) {
        st = tl_error_set(TL_ERR_FORMAT, "profile %s: larger than %zu bytes", path,
                          PROFILE_MAX_BYTES);
    } else {
        tl_hw_profile tmp;
        memset(&tmp, 0, sizeof tmp);
        st = parse_profile(path, buf, n, &tmp);
        if (st == TL_OK) *out = tmp;
    }
    free(buf);
    return st;
}

/* ---- obtaining and lookups ---- */

tl_status tl_profile_obtain(const char *path, int32_t n_threads, const char *disk_dir,
                            uint64_t mem_limit,
                            void (*progress)(void *user, const char *line), void *user,
                            tl_hw_profile *out, int *measured) {
    int dummy;
    if (!measured) measured = &dummy;
    *measured = 0;
    if (path) return tl_profile_load(path, out);
    char def[1024], key[sizeof out->machine], why[600];
    int have_def = tl_profile_default_path(n_threads, def, sizeof def) == TL_OK;
    tl_profile_machine_key(n_threads, key, sizeof key);
    if (have_def) {
        tl_hw_profile p;
        tl_status st = tl_profile_load(def, &p);
        if (st == TL_OK && !strcmp(p.machine, key)) {
            *out = p;
            return TL_OK;
        }
        snprintf(why, sizeof why, "%s", st == TL_OK ? "the saved profile is for another machine"
                                                    : tl_last_error());
    } else {
        snprintf(why, sizeof why, "no profile location (%s)", tl_last_error());
    }
    const uint64_t need = tl_profile_measure_bytes(n_threads);
    if (mem_limit && mem_limit < need)
        return tl_error_set(TL_ERR_NOMEM, "no hardware profile for this machine (%s), and "
                            "measuring one needs %.1f MiB of memory, more than the memory "
                            "budget of %.1f MiB: run `tierllm profile` once (it takes no "
                            "budget) to measure and save it, or pass --profile FILE", why,
                            tl_mib_up(need), mem_limit / 1048576.0);
    tl__profile_say(progress, user, "%s; measuring this machine (about a minute)", why);
    tl_status st = tl_profile_measure(n_threads, disk_dir, mem_limit, progress, user, out);
    if (st != TL_OK) return st;
    *measured = 1;
    if (have_def) {
        if (tl_profile_save(out, def) == TL_OK)
            tl__profile_say(progress, user, "profile saved to %s", def);
        else
            tl__profile_say(progress, user, "could not save the profile: %s", tl_last_error());
    }
    tl_error_clear();
    return TL_OK;
}

/* Position of v on an increasing axis: cell i and fraction f in [0, 1], clamped. */
/* Where v falls on an increasing axis of n > 1 positive points, on a log scale: segment
 * *i and the fraction *f along it (clamped to the ends; NaN or v <= 0 at the start). Two
 * logarithms whatever n (the cost model looks up rates millions of times). */
static void axis_locate(const double *ax, int n, double v, int *i, double *f) {
    if (!(v > ax[0])) {
        *i = 0, *f = 0;
        return;
    }
    if (v >= ax[n - 1]) {
        *i = n - 2, *f = 1;
        return;
    }
    int k = 0;
    while (k + 2 < n && v >= ax[k + 1]) k++;
    *i = k;
    *f = log(v / ax[k]) / log(ax[k + 1] / ax[k]);
}

double tl_profile_read_bps(const tl_hw_profile *p, uint64_t chunk, int32_t depth) {
    double ac[TL_PROF_N_CHUNK], ad[TL_PROF_N_DEPTH], fc, fd;
    int ic, id;
    for (int i = 0; i < TL_PROF_N_CHUNK; i++) ac[i] = (double)tl_prof_chunks[i];
    for (int i = 0; i < TL_PROF_N_DEPTH; i++) ad[i] = (double)tl_prof_depths[i];
    axis_locate(ac, TL_PROF_N_CHUNK, (double)chunk, &ic, &fc);
    axis_locate(ad, TL_PROF_N_DEPTH, (double)depth, &id, &fd);
    const double(*g)[TL_PROF_N_DEPTH] = p->disk_read_bps;
    double lo = g[ic][id] + fd * (g[ic][id + 1] - g[ic][id]);
    double hi = g[ic + 1][id] + fd * (g[ic + 1][id + 1] - g[ic + 1][id]);
    return lo + fc * (hi - lo);
}

/* Log-linear interpolation over the rows axis of one type's row, clamped. */
static double rows_lookup(const double (*table)[TL_PROF_N_ROWS], int32_t type, double rows) {
    int t = tl_type_index(type), i;
    double ar[TL_PROF_N_ROWS], f;
    if (t < 0) t = 0;
    for (int k = 0; k < TL_PROF_N_ROWS; k++) ar[k] = (double)tl_prof_rows[k];
    axis_locate(ar, TL_PROF_N_ROWS, rows, &i, &f);
    const double *v = table[t];
    return v[i] + f * (v[i + 1] - v[i]);
}

double tl_profile_matmul_macs(const tl_hw_profile *p, int32_t type, double rows) {
    return rows_lookup(p->matmul_macs, type, rows);
}

double tl_profile_matmul_call_s(const tl_hw_profile *p, int32_t type, double rows) {
    return rows_lookup(p->matmul_call_s, type, rows);
}

void tl_profile_scale_disk(tl_hw_profile *p, double time_ratio) {
    if (!(time_ratio > 0)) return;
    for (int c = 0; c < TL_PROF_N_CHUNK; c++)
        for (int d = 0; d < TL_PROF_N_DEPTH; d++) p->disk_read_bps[c][d] /= time_ratio;
    p->embd_row_s *= time_ratio; /* calibrated reads like the others */
    p->embd_group_s *= time_ratio;
}

void tl_profile_scale_compute(tl_hw_profile *p, double time_ratio) {
    if (!(time_ratio > 0)) return;
    for (int t = 0; t < TL_PROF_N_TYPE; t++)
        for (int n = 0; n < TL_PROF_N_ROWS; n++) {
            p->matmul_macs[t][n] /= time_ratio;
            p->matmul_call_s[t][n] *= time_ratio;
        }
    p->attn_s_per_mac *= time_ratio;
    p->attn_block_s_per_mac *= time_ratio;
    p->attn_gqa_s_per_mac *= time_ratio;
    p->attn_gqa_block_s_per_mac *= time_ratio;
    p->attn_mem_s_per_byte *= time_ratio; /* memory stalls: the compute calibration times
                                              * products over resident weights, bound by
                                              * the same memory */
    for (int k = 0; k < TL_PROF_N_KVBITS; k++) p->attn_decode_s[k] *= time_ratio;
    for (int k = 0; k < TL_PROF_N_KVBITS; k++) p->kv_store_s[k] *= time_ratio;
    p->elementwise_s *= time_ratio;
    p->layer_fixed_s *= time_ratio;
}
