/* test_profile.c - the hardware profile (plan/profile.h) without measuring: an exact
 * JSON round trip (into a directory that does not exist yet), the grid lookups (exact at
 * grid points, between neighbours, clamped outside, unknown types as F32), and hostile
 * files - every truncation, a missing field, a short array, negative/NaN/huge rates, a
 * changed grid, duplicates, deep nesting, oversize input, garbage and mutated bytes - all
 * TL_ERR_FORMAT and never a crash. Also the machine key, the default path, and
 * re-anchoring the disk grid to a rate measured now. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/rng.h"
#include "base/clock.h"
#include "base/stats.h"
#include "plan/profile.h"
#include "testutil.h"

static char dir[256], path[512], tmp[512];

static int has(const char *needle) { return strstr(tl_last_error(), needle) != NULL; }

static void fill(tl_hw_profile *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->machine, sizeof p->machine,
             "cpu=Weird \"CPU\" \\ model\t\xc3\xa9\x01;ncpu=3;mem=12345;threads=3");
    snprintf(p->disk_dir, sizeof p->disk_dir, "/some/dir with spaces/\xe2\x82\xac");
    p->n_threads = 3;
    p->measured_unix = 1700000000.123456789;
    p->profile_seconds = 57.25;
    p->mem_read_bps = 1.0 / 3.0 * 1e10;
    p->fma_flops = 2.2e11 + 0.1;
    for (int c = 0; c < TL_PROF_N_CHUNK; c++)
        for (int d = 0; d < TL_PROF_N_DEPTH; d++)
            p->disk_read_bps[c][d] = 1e8 * (1 + c) * (1 + 2 * d) + 1.0 / 7.0;
    p->disk_write_bps = 6.6e8 / 7.0;
    p->disk_urgent_read_s = 2.5e-3;
    p->disk_urgent_page_s = 3.3e-4;
    for (int t = 0; t < TL_PROF_N_TYPE; t++)
        for (int r = 0; r < TL_PROF_N_ROWS; r++)
            p->matmul_macs[t][r] = 1e9 * (t + 1) * (r + 1) + 1.0 / 3.0;
    for (int t = 0; t < TL_PROF_N_TYPE; t++)
        for (int r = 0; r < TL_PROF_N_ROWS; r++) p->matmul_call_s[t][r] = 1e-6 * (t + r) / 3.0;
    for (int t = 0; t < TL_PROF_N_TYPE; t++) p->repack_bps[t] = t >= 3 ? 3e10 / (t + 1) : 0;
    p->attn_s_per_mac = 4.38e-10 / 3.0;
    p->attn_block_s_per_mac = 1.21e-10 / 7.0;
    p->attn_gqa_s_per_mac = 3.3e-10 / 7.0;
    p->attn_gqa_block_s_per_mac = 1.1e-10 / 3.0;
    p->attn_cache_bytes = 16777216;
    p->attn_mem_bytes = 2.6e8 / 3.0;
    p->attn_mem_s_per_byte = 0; /* may be 0 */
    p->attn_decode_s[0] = 0;
    p->attn_decode_s[1] = 2.1e-9 / 3.0;
    p->attn_decode_s[2] = 1.5e-9;
    p->attn_decode_s[3] = 1.7e-9 + 1e-25;
    p->elementwise_s = 1.5e-9 / 7.0;
    for (int k = 0; k < TL_PROF_N_KVBITS; k++) p->kv_store_s[k] = (k + 1.5) * 1e-9 / 3.0;
    p->io_compute_slowdown = 1.25 + 1e-12;
    p->io_slowdown_matvec = 1.5 / 7.0 + 1;
    p->io_slowdown_attn = 1.0 / 3.0 + 1;
    p->io_stream_bps = 2.5e9 / 3.0;
    p->layer_fixed_s = 0; /* may be 0 */
}

static int same(const tl_hw_profile *a, const tl_hw_profile *b) {
    return !strcmp(a->machine, b->machine) && !strcmp(a->disk_dir, b->disk_dir) &&
           a->n_threads == b->n_threads && a->measured_unix == b->measured_unix &&
           a->profile_seconds == b->profile_seconds && a->mem_read_bps == b->mem_read_bps &&
           a->fma_flops == b->fma_flops &&
           !memcmp(a->disk_read_bps, b->disk_read_bps, sizeof a->disk_read_bps) &&
           a->disk_write_bps == b->disk_write_bps &&
           !memcmp(a->matmul_macs, b->matmul_macs, sizeof a->matmul_macs) &&
           !memcmp(a->matmul_call_s, b->matmul_call_s, sizeof a->matmul_call_s) &&
           !memcmp(a->repack_bps, b->repack_bps, sizeof a->repack_bps) &&
           a->attn_s_per_mac == b->attn_s_per_mac &&
           a->attn_block_s_per_mac == b->attn_block_s_per_mac &&
           a->attn_gqa_s_per_mac == b->attn_gqa_s_per_mac &&
           a->attn_gqa_block_s_per_mac == b->attn_gqa_block_s_per_mac &&
           a->attn_cache_bytes == b->attn_cache_bytes && a->attn_mem_bytes == b->attn_mem_bytes &&
           a->attn_mem_s_per_byte == b->attn_mem_s_per_byte &&
           !memcmp(a->attn_decode_s, b->attn_decode_s, sizeof a->attn_decode_s) &&
           a->elementwise_s == b->elementwise_s && a->layer_fixed_s == b->layer_fixed_s &&
           !memcmp(a->kv_store_s, b->kv_store_s, sizeof a->kv_store_s) &&
           a->io_compute_slowdown == b->io_compute_slowdown &&
           a->io_slowdown_matvec == b->io_slowdown_matvec &&
           a->io_slowdown_attn == b->io_slowdown_attn && a->io_stream_bps == b->io_stream_bps;
}

static char *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 16);
    *n = fread(buf, 1, (1 << 16) - 1, f);
    buf[*n] = 0;
    fclose(f);
    return buf;
}

static void put(const char *p, const char *data, size_t n) {
    FILE *f = fopen(p, "wb");
    if (!f) return;
    fwrite(data, 1, n, f);
    fclose(f);
}

/* Loads `text` from a file: the status. */
static tl_status load_text(const char *text, size_t n) {
    tl_hw_profile p;
    put(tmp, text, n);
    return tl_profile_load(tmp, &p);
}

/* text with [from, to) replaced by `with` */
static char *splice(const char *text, const char *from, const char *to, const char *with) {
    size_t a = (size_t)(from - text), wl = strlen(with), rest = strlen(to);
    char *out = malloc(a + wl + rest + 1);
    memcpy(out, text, a);
    memcpy(out + a, with, wl);
    memcpy(out + a + wl, to, rest + 1);
    return out;
}

/* Replaces the value of `key` (up to the next ',' or newline at depth 0) by `value`
 * (NULL: removes the whole "key": value, line) and expects TL_ERR_FORMAT naming `key`. */
static void expect_bad_value(const char *text, const char *key, const char *value,
                             const char *what) {
    char q[64];
    snprintf(q, sizeof q, "\"%s\":", key);
    const char *k = strstr(text, q);
    CHECK(k != NULL);
    if (!k) return;
    const char *v = k + strlen(q), *e = v;
    int depth = 0;
    while (*e && !(depth == 0 && (*e == ',' || *e == '\n'))) {
        if (*e == '[') depth++;
        if (*e == ']') depth--;
        e++;
    }
    char *bad;
    if (value) {
        char with[256];
        snprintf(with, sizeof with, " %s", value);
        bad = splice(text, v, e, with);
    } else {
        bad = splice(text, k, e + 1, "");
    }
    tl_status st = load_text(bad, strlen(bad));
    CHECK_MSG(st == TL_ERR_FORMAT && has(key), "%s: %s -> %d '%s'", key, what, (int)st,
              tl_last_error());
    free(bad);
}

/* tl_quantile (the urgent reads' statistic): linear between the sorted values. */
static void test_quantile(void) {
    double v[4] = {4, 1, 3, 2};
    CHECK(tl_quantile(v, 4, 0.25) == 1.75);
    CHECK(tl_quantile(v, 4, 0) == 1 && tl_quantile(v, 4, 1) == 4);
    double w[4] = {4, 1, 3, 2};
    CHECK(tl_quantile(v, 4, 0.5) == tl_median(w, 4));
    double one = 7;
    CHECK(tl_quantile(&one, 1, 0.25) == 7);
}

static void test_round_trip(void) {
    tl_hw_profile p, q;
    fill(&p);
    CHECK(tl_profile_save(&p, path) == TL_OK); /* creates dir/sub/ */
    memset(&q, 0xAB, sizeof q);
    CHECK_MSG(tl_profile_load(path, &q) == TL_OK, "%s", tl_last_error());
    CHECK(same(&p, &q));
    /* a calibration's embedding figure is this run's, never saved */
    p.embd_row_s = 1e-4;
    CHECK(tl_profile_save(&p, path) == TL_OK);
    memset(&q, 0xAB, sizeof q);
    CHECK(tl_profile_load(path, &q) == TL_OK && same(&p, &q) && q.embd_row_s == 0);
    p.embd_row_s = 0;
    /* saving again replaces the file in place; no temporary files are left */
    p.fma_flops *= 2;
    CHECK(tl_profile_save(&p, path) == TL_OK);
    CHECK(tl_profile_load(path, &q) == TL_OK && same(&p, &q));
    char t[600];
    snprintf(t, sizeof t, "%s/sub/deeper", dir);
    DIR *d = opendir(t);
    int entries = 0;
    for (struct dirent *e; d && (e = readdir(d));) /* profile.json, and no temporary */
        entries += e->d_name[0] != '.' || strstr(e->d_name, ".tmp") != NULL;
    if (d) closedir(d);
    CHECK(entries == 1);
    /* obtain with an explicit path loads it and does not measure */
    int measured = -1;
    CHECK(tl_profile_obtain(path, 3, dir, 0, NULL, NULL, &q, &measured) == TL_OK);
    CHECK(measured == 0 && same(&p, &q));
    /* a non-finite value is refused, not written */
    tl_hw_profile bad = p;
    bad.matmul_macs[2][3] = NAN;
    CHECK(tl_profile_save(&bad, tmp) == TL_ERR_INVALID && has("matmul_macs"));
    CHECK(tl_profile_load("/nonexistent/profile.json", &q) == TL_ERR_IO);
}

static void test_lookup(void) {
    tl_hw_profile p;
    fill(&p);
    for (int c = 0; c < TL_PROF_N_CHUNK; c++)
        for (int d = 0; d < TL_PROF_N_DEPTH; d++)
            CHECK(tl_profile_read_bps(&p, tl_prof_chunks[c], tl_prof_depths[d]) ==
                  p.disk_read_bps[c][d]);
    for (int c = 0; c + 1 < TL_PROF_N_CHUNK; c++) {
        /* geometric midpoints: halfway in log space */
        uint64_t mid = tl_prof_chunks[c] * 2; /* chunks are 4x apart */
        double v = tl_profile_read_bps(&p, mid, 4);
        double lo = p.disk_read_bps[c][1], hi = p.disk_read_bps[c + 1][1];
        CHECK(v > lo && v < hi);
        CHECK(fabs(v - 0.5 * (lo + hi)) < 1e-6 * hi);
        double w = tl_profile_read_bps(&p, mid, 2); /* between depths 1 and 4 too */
        CHECK(w > p.disk_read_bps[c][0] && w < p.disk_read_bps[c + 1][1]);
    }
    CHECK(tl_profile_read_bps(&p, 1, 1) == p.disk_read_bps[0][0]);
    CHECK(tl_profile_read_bps(&p, 0, 0) == p.disk_read_bps[0][0]);
    CHECK(tl_profile_read_bps(&p, (uint64_t)1 << 40, 1000) ==
          p.disk_read_bps[TL_PROF_N_CHUNK - 1][TL_PROF_N_DEPTH - 1]);
    CHECK(tl_profile_read_bps(&p, 4096, -5) == p.disk_read_bps[0][0]);

    for (int t = 0; t < TL_PROF_N_TYPE; t++) {
        CHECK(tl_type_index(tl_type_table[t].type) == t);
        for (int r = 0; r < TL_PROF_N_ROWS; r++)
            CHECK(tl_profile_matmul_macs(&p, tl_type_table[t].type, tl_prof_rows[r]) ==
                  p.matmul_macs[t][r]);
        for (int r = 0; r + 1 < TL_PROF_N_ROWS; r++) {
            double v = tl_profile_matmul_macs(&p, tl_type_table[t].type, tl_prof_rows[r] * 1.5);
            CHECK(v > p.matmul_macs[t][r] && v < p.matmul_macs[t][r + 1]);
        }
        CHECK(tl_profile_matmul_macs(&p, tl_type_table[t].type, 0.25) == p.matmul_macs[t][0]);
        CHECK(tl_profile_matmul_macs(&p, tl_type_table[t].type, 0) == p.matmul_macs[t][0]);
        CHECK(tl_profile_matmul_macs(&p, tl_type_table[t].type, NAN) == p.matmul_macs[t][0]);
        CHECK(tl_profile_matmul_macs(&p, tl_type_table[t].type, 1e9) ==
              p.matmul_macs[t][TL_PROF_N_ROWS - 1]);
    }
    CHECK(tl_type_index(99) == -1);
    CHECK(tl_profile_matmul_macs(&p, 99, 16) == p.matmul_macs[0][4]);
}

static void test_hostile(void) {
    tl_hw_profile p;
    fill(&p);
    CHECK(tl_profile_save(&p, path) == TL_OK);
    size_t n;
    char *text = slurp(path, &n);
    CHECK(text && n > 100);
    if (!text) return;
    /* every truncation; the text without its final newline is still whole */
    for (size_t len = 0; len + 1 < n; len++) {
        tl_status st = load_text(text, len);
        CHECK_MSG(st == TL_ERR_FORMAT, "prefix of %zu bytes -> %d", len, (int)st);
    }
    CHECK(load_text(text, n - 1) == TL_OK);

    expect_bad_value(text, "fma_flops", NULL, "missing");
    expect_bad_value(text, "machine", NULL, "missing");
    expect_bad_value(text, "attn_s_per_mac", NULL, "missing");
    expect_bad_value(text, "attn_block_s_per_mac", NULL, "missing");
    expect_bad_value(text, "attn_block_s_per_mac", "0", "zero");
    expect_bad_value(text, "attn_gqa_s_per_mac", NULL, "missing");
    expect_bad_value(text, "attn_gqa_block_s_per_mac", "0", "zero");
    expect_bad_value(text, "attn_mem_bytes", "0", "zero");
    expect_bad_value(text, "attn_mem_s_per_byte", "-1e-12", "negative");
    expect_bad_value(text, "attn_cache_bytes", NULL, "missing");
    expect_bad_value(text, "mem_read_bps", "-1", "negative");
    expect_bad_value(text, "mem_read_bps", "0", "zero rate");
    expect_bad_value(text, "mem_read_bps", "NaN", "NaN");
    expect_bad_value(text, "fma_flops", "1e999", "overflow");
    expect_bad_value(text, "elementwise_s", "\"fast\"", "a string");
    expect_bad_value(text, "layer_fixed_s", "-1e-9", "negative");
    expect_bad_value(text, "attn_decode_s", "[0, 1, 2]", "short array");
    expect_bad_value(text, "attn_decode_s", "[0, 1, 2, 3, 4]", "long array");
    expect_bad_value(text, "attn_decode_s", "[0, -1, 2, 3]", "negative element");
    expect_bad_value(text, "disk_read_bps", "[[1, 2, 3], [1, 2, 3], [1, 2, 3]]",
                     "short matrix");
    expect_bad_value(text, "disk_read_bps", "[[1, 2, 3], [1, 2, 3], [1, 2], [1, 2, 3]]",
                     "short row");
    expect_bad_value(text, "matmul_macs", "[]", "empty");
    expect_bad_value(text, "chunks", "[65536, 262144, 1048576, 8388608]", "other grid");
    expect_bad_value(text, "types", "[0, 1, 30, 8]", "short grid");
    expect_bad_value(text, "n_threads", "2.5", "fractional");
    expect_bad_value(text, "n_threads", "0", "zero threads");
    expect_bad_value(text, "tierllm_profile_version", "17", "future version");
    expect_bad_value(text, "tierllm_profile_version", "15",
                     "old version (no rate of the slowdowns' stream)");
    expect_bad_value(text, "tierllm_profile_version", "14",
                     "old version (element-wise on the scalar rmsnorm)");
    expect_bad_value(text, "tierllm_profile_version", "13",
                     "old version (grouped figures on two kv heads)");
    expect_bad_value(text, "tierllm_profile_version", "12", "old version (no kv_store_s)");
    expect_bad_value(text, "kv_store_s", "[1, 1, 1, 0]", "zero element");
    expect_bad_value(text, "tierllm_profile_version", "11",
                     "old version (no slowdown of attention)");
    expect_bad_value(text, "tierllm_profile_version", "10",
                     "old version (slowdowns on row-layout weights)");
    expect_bad_value(text, "tierllm_profile_version", "9", "old version (scalar f16 KV decoding)");
    expect_bad_value(text, "tierllm_profile_version", "8", "old version (no grouped attention)");
    expect_bad_value(text, "tierllm_profile_version", "7", "old version (5 kernel types)");
    expect_bad_value(text, "tierllm_profile_version", "6", "old version (rates on rows, no repack_bps)");
    expect_bad_value(text, "tierllm_profile_version", "5", "old version (int8 GEMM from 33 rows)");
    expect_bad_value(text, "tierllm_profile_version", "4", "old version (f32 GEMM rates)");
    expect_bad_value(text, "tierllm_profile_version", "3", "old version (no blocked attention)");
    expect_bad_value(text, "tierllm_profile_version", "2", "old version (matmul rates low)");
    expect_bad_value(text, "tierllm_profile_version", "1", "old version (no urgent-read time)");
    expect_bad_value(text, "machine", "\"a\\u0000b\"", "NUL");
    expect_bad_value(text, "machine", "\"\\ud800\"", "lone surrogate");
    expect_bad_value(text, "machine", "\"\\x\"", "bad escape");
    expect_bad_value(text, "machine", "01", "not a string");

    /* unknown keys are skipped, whatever their shape; duplicates are not accepted */
    char *open_brace = strchr(text, '{');
    char *x = splice(text, open_brace + 1, open_brace + 1,
                     "\"extra\": {\"a\": [1, -2.5e3, {\"b\": null}, true, false, \"\\u00e9\"]},"
                     " \"zz\\u20acz\": [],");
    CHECK_MSG(load_text(x, strlen(x)) == TL_OK, "%s", tl_last_error());
    free(x);
    x = splice(text, open_brace + 1, open_brace + 1, "\"n_threads\": 3,");
    CHECK(load_text(x, strlen(x)) == TL_ERR_FORMAT && has("n_threads"));
    free(x);
    char deep[4096] = "{\"x\": ";
    for (int i = 0; i < 1000; i++) strcat(deep, "[");
    CHECK(load_text(deep, strlen(deep)) == TL_ERR_FORMAT);
    x = splice(text, text + n - 1, text + n - 1, " x");
    CHECK(load_text(x, strlen(x)) == TL_ERR_FORMAT); /* trailing data */
    free(x);
    CHECK(load_text("[]", 2) == TL_ERR_FORMAT);
    CHECK(load_text("{}", 2) == TL_ERR_FORMAT && has("missing"));

    /* oversize: valid JSON padded past the cap */
    size_t big = ((size_t)1 << 20) + 16;
    char *huge = malloc(big + n);
    memset(huge, ' ', big);
    memcpy(huge + big, text, n);
    CHECK(load_text(huge, big + n) == TL_ERR_FORMAT);
    free(huge);

    /* garbage, and random byte mutations of a valid file (may stay valid) */
    uint64_t state = 12345, s;
    char *buf = malloc(n + 1);
    for (int it = 0; it < 3000; it++) {
        s = tl_splitmix64(&state);
        size_t len = (size_t)(s >> 33) % (n + 1);
        if (it < 500) {
            for (size_t i = 0; i < len; i++) {
                s = tl_splitmix64(&state);
                buf[i] = (char)(s >> 56);
            }
            CHECK(load_text(buf, len) == TL_ERR_FORMAT);
        } else {
            memcpy(buf, text, n);
            for (int k = 0; k < 1 + it % 4; k++) {
                s = tl_splitmix64(&state);
                buf[(s >> 20) % n] = (char)(s >> 56);
            }
            tl_status st = load_text(buf, n);
            CHECK(st == TL_OK || st == TL_ERR_FORMAT);
        }
    }
    free(buf);
    free(text);
}

static void test_key_and_path(void) {
    char a[256], b[256];
    tl_profile_machine_key(3, a, sizeof a);
    tl_profile_machine_key(3, b, sizeof b);
    CHECK(a[0] && !strcmp(a, b));
    CHECK(!strncmp(a, "cpu=", 4) && strstr(a, ";ncpu=") && strstr(a, ";mem=") &&
          strstr(a, ";threads=3"));
    tl_profile_machine_key(0, b, sizeof b);
    CHECK(strstr(b, ";threads=") && !strstr(b, ";threads=0"));
    char small[8];
    tl_profile_machine_key(3, small, sizeof small); /* truncates, terminates */
    CHECK(strlen(small) == 7);

    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char *sx = xdg ? strdup(xdg) : NULL, *sh = home ? strdup(home) : NULL;
    char out[512];
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    CHECK(tl_profile_default_path(4, out, sizeof out) == TL_OK &&
          !strcmp(out, "/x/cache/tierllm/profile-t4.json"));
    CHECK(tl_profile_default_path(4, out, 10) == TL_ERR_INVALID);
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/h", 1);
    CHECK(tl_profile_default_path(2, out, sizeof out) == TL_OK &&
          !strcmp(out, "/h/.cache/tierllm/profile-t2.json"));
    unsetenv("HOME");
    CHECK(tl_profile_default_path(2, out, sizeof out) == TL_ERR_INVALID);
    if (sx) setenv("XDG_CACHE_HOME", sx, 1);
    if (sh) setenv("HOME", sh, 1);
    free(sx);
    free(sh);
}

/* A memory limit below what measuring needs is refused at once, before anything is
 * measured or written (obtain included: no saved profile, nothing measured); the figure
 * it states is rounded up, so it is enough. */
static void test_mem_limit(void) {
    const uint64_t need = tl_profile_measure_bytes(2);
    CHECK(need >= ((uint64_t)128 << 20) && need <= ((uint64_t)1 << 30));
    tl_hw_profile p;
    double t0 = tl_now();
    CHECK(tl_profile_measure(2, dir, need - 1, NULL, NULL, &p) == TL_ERR_NOMEM &&
          has("measuring the hardware profile needs"));
    char *sx = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    setenv("XDG_CACHE_HOME", dir, 1); /* no saved profile there */
    int measured = -1;
    CHECK(tl_profile_obtain(NULL, 2, dir, (uint64_t)50 << 20, NULL, NULL, &p, &measured) ==
              TL_ERR_NOMEM && measured == 0);
    CHECK_MSG(has("budget of 50.0 MiB") && has("tierllm profile"), "%s", tl_last_error());
    double stated = -1;
    const char *n = strstr(tl_last_error(), "needs ");
    CHECK(n && sscanf(n, "needs %lf MiB", &stated) == 1 && stated * 1048576.0 >= (double)need);
    CHECK(tl_now() - t0 < 1.0);
    if (sx) setenv("XDG_CACHE_HOME", sx, 1);
    else unsetenv("XDG_CACHE_HOME");
    free(sx);
    char def[600];
    snprintf(def, sizeof def, "%s/tierllm", dir);
    CHECK(access(def, F_OK) != 0); /* nothing was written */
}

static int count_entries(const char *d) {
    DIR *dh = opendir(d);
    int n = 0;
    for (struct dirent *e; dh && (e = readdir(dh));) n += e->d_name[0] != '.';
    if (dh) closedir(dh);
    return n;
}

/* Re-anchoring the disk: the grid scales by one factor, so that the rate at the chunk and
 * depth measured is the rate measured; nothing is left in the directory; bad requests are
 * refused. */
static void test_reanchor(void) {
    tl_hw_profile p, q;
    fill(&p);
    q = p;
    double bps = 0;
    const int before = count_entries(dir);
    CHECK_MSG(tl_profile_reanchor_disk(&q, dir, 131072 + 4096, 16, &bps) == TL_OK, "%s",
              tl_last_error());
    CHECK(bps > 1e6 && bps < 1e12);
    CHECK(fabs(tl_profile_read_bps(&q, 131072 + 4096, 16) / bps - 1) < 1e-9);
    const double f = q.disk_read_bps[0][0] / p.disk_read_bps[0][0];
    for (int c = 0; c < TL_PROF_N_CHUNK; c++)
        for (int d = 0; d < TL_PROF_N_DEPTH; d++)
            CHECK(fabs(q.disk_read_bps[c][d] / p.disk_read_bps[c][d] / f - 1) < 1e-9);
    CHECK_MSG(count_entries(dir) == before, "%d entries in %s, %d before",
              count_entries(dir), dir, before);
    q = p;
    CHECK(tl_profile_reanchor_disk(&q, dir, 1000, 16, NULL) == TL_ERR_INVALID &&
          has("multiple of"));
    CHECK(tl_profile_reanchor_disk(&q, dir, 65536, 0, NULL) == TL_ERR_INVALID);
    CHECK(memcmp(&q, &p, sizeof p) == 0);
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no/such/dir", dir);
    CHECK(tl_profile_reanchor_disk(&q, missing, 65536, 4, NULL) != TL_OK &&
          has("disk re-measure"));
}

int main(void) {
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tl_profile_XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(path, sizeof path, "%s/sub/deeper/profile.json", dir);
    snprintf(tmp, sizeof tmp, "%s/t.json", dir);
    test_quantile();
    test_round_trip();
    test_lookup();
    test_hostile();
    test_key_and_path();
    test_mem_limit();
    test_reanchor();
    unlink(path);
    unlink(tmp);
    char d[600];
    snprintf(d, sizeof d, "%s/sub/deeper", dir);
    rmdir(d);
    snprintf(d, sizeof d, "%s/sub", dir);
    rmdir(d);
    rmdir(dir);
    return tl_test_finish("test_profile");
}
