/* test_kv.c - the paged KV cache: every format (32/16/8/4 bits) x placements (spread
 * kv_mem_pct {100, 50, 0}, with a cache; temperature windows with sinks and caches)
 * x page_tokens {1, 3, 16}, three sequences of different lengths appended in blocks of 1,
 * 5 and 17 rows over three layers, checked through prefetch/wait/view at every step
 * (uncommitted rows included) and at the end: bit-exact f32 (through disk too), f16-exact,
 * within half a quantization step for 8/4 bits, and identical views whatever kv_mem_pct.
 * Spill accounting (each disk page written once, slot-sized), the spill file's life,
 * the budget (back to the start value after close; peak under tl_kv_budget_bytes), a slow
 * disk (writes in flight when read back, a full write ring), sticky ENOSPC and EIO from the
 * fault shim, budget exhaustion, bad calls, and quant_row by hand-computed bytes. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <float.h>
#include <math.h>
#include "base/rng.h"
#include "format/tensor_type.h"
#include "kv/kv_cache.h"
#include "tier/aio.h"
#include "tier_kinds.h"

static int has(const char *needle) { return strstr(tl_last_error(), needle) != NULL; }

static tl_aio *aio;

/* ---- values ---- */

static float val(int ident, int layer, int pos, int j, int which) {
    uint64_t x = ((uint64_t)ident * 1000003u + (uint64_t)layer * 7919u + (uint64_t)pos * 131u +
                  (uint64_t)j) * 2u + (uint64_t)which;
    x = tl_mix64(x);
    float f = (float)((int)(x % 20001) - 10000) / 997.0f;
    if (j % 7 == 3) f *= 1e-3f; /* a spread of magnitudes */
    return f;
}

static void gen_rows(int ident, int layer, int pos0, int n, int D, float *k, float *v) {
    for (int r = 0; r < n; r++)
        for (int j = 0; j < D; j++) {
            k[r * D + j] = val(ident, layer, pos0 + r, j, 0);
            v[r * D + j] = val(ident, layer, pos0 + r, j, 1);
        }
}

/* Files this process holds open in tk_dir; *st (when not NULL) gets the last one's fstat. */
static int open_spill_fds(struct stat *st) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    const size_t dl = strlen(tk_dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char link[300], target[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(link, target, sizeof target - 1);
        if (k <= 0) continue;
        target[k] = 0;
        if (strncmp(target, tk_dir, dl) != 0 || target[dl] != '/') continue;
        n++;
        if (st && fstat(atoi(e->d_name), st) != 0) n = -1000;
    }
    closedir(d);
    return n;
}

/* Spill files alive: this process's open files in tk_dir. They have no name (the spill
 * file cannot outlive the process), so the directory itself must stay empty: a name in it
 * counts as a failure (-100). */
static int count_spill_files(void) {
    DIR *d = opendir(tk_dir);
    int n = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n -= 100;
    closedir(d);
    const int fds = open_spill_fds(NULL);
    return fds < 0 ? -1 : n + fds;
}

/* 1 if the scratch directory's filesystem allocates with fallocate (tl_tier_reserve). */
static int dir_fallocates(void) {
    char probe[600];
    snprintf(probe, sizeof probe, "%s/fallocate-probe", tk_dir);
    const int fd = open(probe, O_CREAT | O_RDWR, 0600);
    const int can = fd >= 0 && fallocate(fd, 0, 0, 4096) == 0;
    if (fd >= 0) close(fd);
    unlink(probe);
    return can;
}

static uint64_t fnv(uint64_t h, const void *p, size_t len) {
    const uint8_t *b = p;
    for (size_t i = 0; i < len; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

/* ---- checking views ---- */

typedef struct kv_case {
    tl_kv_params p;
    tl_kv *kv;
    uint64_t hash;
    int bad;        /* mismatches reported (capped) */
    char label[96];
} kv_case;

/* Checks one decoded row against the generator. stored: the page is in its stored
 * format (else it is open and exact f32). */
static void check_row(kv_case *c, const float *got, int ident, int layer, int pos, int which,
                      int stored) {
    const int D = c->p.kv_dim, bits = c->p.bits;
    const int group = c->p.head_dim % 64 == 0 ? 64 : c->p.head_dim;
    for (int g0 = 0; g0 < D; g0 += group) {
        float mn = INFINITY, mx = -INFINITY;
        for (int j = g0; j < g0 + group; j++) {
            float x = val(ident, layer, pos, j, which);
            mn = fminf(mn, x);
            mx = fmaxf(mx, x);
        }
        float qmax = (float)((1 << (bits < 16 ? bits : 1)) - 1);
        float scale = (mx - mn) / qmax;
        float tol = scale / 2 + 4 * FLT_EPSILON * (fabsf(mn) + fabsf(mx) + scale * qmax);
        for (int j = g0; j < g0 + group; j++) {
            float x = val(ident, layer, pos, j, which), y = got[j];
            int ok;
            if (!stored || bits == 32)
                ok = memcmp(&x, &y, sizeof x) == 0;
            else if (bits == 16)
                ok = tl_f16_to_f32(tl_f32_to_f16(x)) == y;
            else
                ok = fabsf(x - y) <= tol;
            if (!ok && c->bad++ < 5)
                fprintf(stderr, "%s: layer %d pos %d %s[%d]: got %.9g want %.9g\n", c->label,
                        layer, pos, which ? "V" : "K", j, (double)y, (double)x);
            if (!ok) tl_test_failures++;
        }
    }
}

/* Prefetch, wait, view every visible page of the sequences at `layer`, release. */
static void verify(kv_case *c, const int32_t *seqs, const int *idents, int n, int layer) {
    tl_kv *kv = c->kv;
    const int P = c->p.page_tokens, D = c->p.kv_dim;
    CHECK_MSG(tl_kv_prefetch(kv, seqs, n, layer) == TL_OK, "%s: %s", c->label, tl_last_error());
    CHECK_MSG(tl_kv_wait(kv, seqs, n, layer) == TL_OK, "%s: %s", c->label, tl_last_error());
    float *scratch = malloc(sizeof(float) * 2 * (size_t)P * (size_t)D);
    for (int j = 0; j < n; j++) {
        int vis = tl_kv_visible(kv, seqs[j], layer), len = tl_kv_seq_len(kv, seqs[j]);
        for (int pg = 0; pg * P < vis; pg++) {
            const float *k = NULL, *v = NULL;
            int32_t rows = -1;
            tl_status st = tl_kv_view(kv, seqs[j], layer, pg, scratch, &k, &v, &rows);
            CHECK_MSG(st == TL_OK, "%s: view page %d: %s", c->label, pg, tl_last_error());
            if (st != TL_OK) continue;
            int want = vis - pg * P < P ? vis - pg * P : P;
            CHECK(rows == want);
            int stored = (pg + 1) * P <= len; /* full at the last commit */
            /* each kv head's own views: the same values as its columns of the page's, rows
             * kv_dim apart in an f32 page, head_dim apart when decoded */
            const int H = c->p.head_dim;
            const size_t want_ld = c->p.bits == 32 || !stored ? (size_t)D : (size_t)H;
            float *hs = malloc(sizeof(float) * (size_t)P * (size_t)H);
            for (int h = 0; hs && h * H < D && rows == want; h++)
                for (int half = 0; half < 2; half++) {
                    const float *hx = NULL, *full = half ? v : k;
                    size_t ld = 0;
                    int32_t hrows = -1;
                    tl_kv_touch_head(kv, seqs[j], layer, pg + 1, h, half); /* a hint only */
                    st = tl_kv_view_head(kv, seqs[j], layer, pg, h, half, hs, &hx, &ld, &hrows);
                    CHECK_MSG(st == TL_OK && hrows == rows && ld == want_ld,
                              "%s: head %d %s view of page %d: %s (ld %zu)", c->label, h,
                              half ? "V" : "K", pg, st ? tl_last_error() : "rows or ld", ld);
                    int same = st == TL_OK && ld == want_ld;
                    for (int r = 0; same && r < rows; r++)
                        same = !memcmp(hx + r * ld, full + (size_t)r * D + h * H,
                                       sizeof(float) * H);
                    CHECK_MSG(same, "%s: head %d %s of page %d differs from the page's view",
                              c->label, h, half ? "V" : "K", pg);
                }
            free(hs);
            for (int r = 0; r < rows && r < want; r++) {
                check_row(c, k + (size_t)r * D, idents[j], layer, pg * P + r, 0, stored);
                check_row(c, v + (size_t)r * D, idents[j], layer, pg * P + r, 1, stored);
                c->hash = fnv(c->hash, k + (size_t)r * D, sizeof(float) * (size_t)D);
                c->hash = fnv(c->hash, v + (size_t)r * D, sizeof(float) * (size_t)D);
            }
        }
        /* past the end */
        const float *k, *v;
        int32_t rows;
        CHECK(tl_kv_view(kv, seqs[j], layer, (vis + P - 1) / P, scratch, &k, &v, &rows) ==
              TL_ERR_INVALID);
    }
    free(scratch);
    tl_kv_release(kv, seqs, n, layer);
}

/* Where full pages live: spread (kv_mem_pct) or temperature (sinks + window in memory). */
typedef struct place { int temperature, pct, sinks, window, cache; } place;

/* Disk pages among `full` full pages, counted page by page from the rules' definitions. */
static uint64_t disk_pages(place pl, int full) {
    uint64_t n = 0, d = (uint64_t)(100 - pl.pct);
    for (uint64_t i = 0; i < (uint64_t)full; i++)
        n += pl.temperature ? (i >= (uint64_t)pl.sinks && i + (uint64_t)pl.window < (uint64_t)full)
                            : (i + 1) * d / 100 > i * d / 100;
    return n;
}

static tl_kv_params base_params(int bits, int pct, int P, int head_dim) {
    tl_kv_params p;
    memset(&p, 0, sizeof p);
    p.n_layer = 3;
    p.head_dim = head_dim;
    p.kv_dim = 2 * head_dim;
    p.page_tokens = P;
    p.bits = bits;
    p.kv_mem_pct = pct;
    p.max_seqs = 4;
    p.max_tokens = 48;
    p.spill_dir = tk_dir;
    p.max_block = 17;
    return p;
}

static int n_tight; /* cases where the 1.05x spill bound was checked */

/* One configuration of the matrix; returns the hash of every view it saw. */
static uint64_t run_case(int bits, place pl, int P) {
    enum { NS = 3 };
    static const int LENS[NS] = {23, 40, 7}, BLOCKS[3] = {1, 5, 17};
    kv_case c;
    memset(&c, 0, sizeof c);
    const int pct = pl.temperature ? 0 : pl.pct;
    /* groups of 64 (one, then two per head); of head_dim */
    c.p = base_params(bits, pct, P, P == 16 ? 64 : P == 3 ? 128 : 10);
    c.p.placement = pl.temperature ? TL_KV_TEMPERATURE : TL_KV_SPREAD;
    c.p.sink_pages = pl.sinks;
    c.p.window_pages = pl.window;
    c.p.cache_pages = pl.cache;
    c.hash = 0xCBF29CE484222325ull;
    if (pl.temperature)
        snprintf(c.label, sizeof c.label, "bits %d sinks %d window %d cache %d page %d", bits,
                 pl.sinks, pl.window, pl.cache, P);
    else
        snprintf(c.label, sizeof c.label, "bits %d pct %d cache %d page %d", bits, pct,
                 pl.cache, P);
    /* a spill file exists when a sequence at max_tokens would have a disk page */
    const int spill = disk_pages(pl, (c.p.max_tokens + P - 1) / P) > 0;
    tl_budget *b;
    CHECK(tl_budget_open(0, &b) == TL_OK);
    tl_status st = tl_kv_open(&c.p, b, aio, &c.kv);
    CHECK_MSG(st == TL_OK, "%s: open: %s", c.label, tl_last_error());
    if (st != TL_OK) {
        tl_budget_close(b);
        return 0;
    }
    CHECK(count_spill_files() == spill);
    const int D = c.p.kv_dim, L = c.p.n_layer;
    int32_t seqs[NS];
    int idents[NS], done[NS];
    for (int s = 0; s < NS; s++) {
        CHECK(tl_kv_seq_open(c.kv, &seqs[s]) == TL_OK);
        idents[s] = 100 + s;
        done[s] = 0;
    }
    float *k = malloc(sizeof(float) * 17 * (size_t)D), *v = malloc(sizeof(float) * 17 * (size_t)D);
    for (int step = 0;; step++) {
        int any = 0;
        for (int s = 0; s < NS; s++) {
            if (done[s] == LENS[s]) continue;
            any = 1;
            int n = BLOCKS[(step + s) % 3];
            if (n > LENS[s] - done[s]) n = LENS[s] - done[s];
            for (int l = 0; l < L; l++) {
                gen_rows(idents[s], l, done[s], n, D, k, v);
                st = tl_kv_append(c.kv, seqs[s], l, k, v, n);
                CHECK_MSG(st == TL_OK, "%s: append: %s", c.label, tl_last_error());
                CHECK(tl_kv_visible(c.kv, seqs[s], l) == done[s] + n);
                if (l == step % L) verify(&c, &seqs[s], &idents[s], 1, l);
            }
            CHECK(tl_kv_seq_len(c.kv, seqs[s]) == done[s]);
            st = tl_kv_seq_commit(c.kv, seqs[s], n);
            CHECK_MSG(st == TL_OK, "%s: commit: %s", c.label, tl_last_error());
            done[s] += n;
            CHECK(tl_kv_seq_len(c.kv, seqs[s]) == done[s]);
            verify(&c, &seqs[s], &idents[s], 1, (step + 1) % L);
        }
        if (!any) break;
    }
    /* once every write is done, the final views read every disk page from the file */
    uint64_t want_pages = 0;
    for (int s = 0; s < NS; s++) want_pages += (uint64_t)L * disk_pages(pl, LENS[s] / P);
    tl_kv_stats ks;
    for (int i = 0; i < 2000; i++) {
        CHECK(tl_kv_prefetch(c.kv, NULL, 0, 0) == TL_OK); /* reaps finished writes */
        tl_kv_get_stats(c.kv, &ks);
        if (ks.pages_written == want_pages) break;
        usleep(1000);
    }
    /* every write has completed, so each disk page passed the cache's door once: the cache
     * holds min(cache, disk pages) of them, and the rest are read from the file */
    const uint64_t cached = want_pages < (uint64_t)pl.cache ? want_pages : (uint64_t)pl.cache;
    CHECK_MSG(ks.cache_pages == cached, "%s: %llu pages cached, want %llu", c.label,
              (unsigned long long)ks.cache_pages, (unsigned long long)cached);
    uint64_t read0 = ks.pages_read, hit0 = ks.cache_hits;
    for (int l = 0; l < L; l++) verify(&c, seqs, idents, NS, l);
    tl_kv_get_stats(c.kv, &ks);
    CHECK_MSG(ks.pages_read - read0 == want_pages - cached && ks.cache_hits - hit0 == cached,
              "%s: %llu pages read and %llu cache hits, %llu on disk of which %llu cached",
              c.label, (unsigned long long)(ks.pages_read - read0),
              (unsigned long long)(ks.cache_hits - hit0), (unsigned long long)want_pages,
              (unsigned long long)cached);
    /* a disk page that is not staged cannot be viewed */
    int first_disk = 0;
    while (!pl.temperature && pct < 100 && disk_pages(pl, first_disk + 1) == 0) first_disk++;
    if (!pl.temperature && pl.cache == 0 && pct < 100 && LENS[1] / P > first_disk) {
        float *scratch = malloc(sizeof(float) * 2 * (size_t)P * (size_t)D);
        const float *kk, *vv;
        int32_t rows;
        st = tl_kv_view(c.kv, seqs[1], 0, first_disk, scratch, &kk, &vv, &rows);
        CHECK_MSG(st == TL_ERR_INVALID && has("not staged"), "%s: %d %s", c.label, st,
                  tl_last_error());
        free(scratch);
    }
    for (int s = 0; s < NS; s++) tl_kv_seq_close(c.kv, seqs[s]);
    tl_kv_get_stats(c.kv, &ks);
    size_t page = tl_kv_page_bytes(&c.p), slot = (page + 4095) / 4096 * 4096;
    CHECK_MSG(ks.pages_written == want_pages, "%s: %llu pages written, %llu disk pages",
              c.label, (unsigned long long)ks.pages_written, (unsigned long long)want_pages);
    CHECK(ks.bytes_written == ks.pages_written * slot);
    CHECK(ks.bytes_read == ks.pages_read * slot);
    CHECK(spill || ks.pages_read == 0);
    if (page % 4096 == 0) { /* f32 and f16 with 16 tokens x 128: no slot padding */
        CHECK((double)ks.bytes_written <= 1.05 * (double)(ks.pages_written * page));
        n_tight += !pl.temperature && pct < 100 && pl.cache == 0;
    }
    CHECK(ks.mem_pages_peak > 0);
    uint64_t bound = tl_kv_budget_bytes(&c.p, NS);
    CHECK_MSG(tl_budget_peak(b) <= bound, "%s: budget peak %llu over the bound %llu", c.label,
              (unsigned long long)tl_budget_peak(b), (unsigned long long)bound);
    CHECK(count_spill_files() == spill);
    if (ks.pages_written > 0) { /* allocated ahead of its writes (tl_tier_reserve) */
        struct stat st;
        const long long want = dir_fallocates() ? (64ll << 20) : (long long)slot;
        CHECK(open_spill_fds(&st) == 1);
        CHECK_MSG(st.st_size >= want && st.st_blocks * 512 >= want, "%s: spill file %lld "
                  "bytes, %lld allocated", c.label, (long long)st.st_size,
                  (long long)st.st_blocks * 512);
    }
    tl_kv_close(c.kv);
    CHECK_MSG(count_spill_files() == 0, "%s: spill file left behind", c.label);
    CHECK_MSG(tl_budget_used(b) == 0, "%s: %llu budget bytes left", c.label,
              (unsigned long long)tl_budget_used(b));
    tl_budget_close(b);
    free(k);
    free(v);
    return c.hash;
}

/* Every placement must give the same views (placement changes speed, not results). */
static void test_matrix(void) {
    static const int BITS[] = {32, 16, 8, 4}, PAGES[] = {1, 3, 16};
    static const place PLACES[] = {
        {0, 100, 0, 0, 0}, {0, 50, 0, 0, 0}, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 3},
        {1, 0, 0, 1, 0},   {1, 0, 1, 1, 2},  {1, 0, 2, 3, 1000}};
    enum { NP = sizeof PLACES / sizeof PLACES[0] };
    for (int bi = 0; bi < 4; bi++)
        for (int pi = 0; pi < 3; pi++) {
            uint64_t h[NP];
            for (int m = 0; m < NP; m++) {
                h[m] = run_case(BITS[bi], PLACES[m], PAGES[pi]);
                CHECK_MSG(h[m] == h[0], "bits %d page %d: placement %d's views differ from "
                          "all-in-memory", BITS[bi], PAGES[pi], m);
            }
        }
    CHECK(n_tight == 4);
    n_tight = 0;
}

/* ---- quant_row ---- */

static void test_quant_by_hand(void) {
    /* 4 bits, groups of 4: {0, 1, 7.5, 15}: min 0, scale 1, q 0 1 8 15; {-3 x4}: scale 0 */
    float x[8] = {0, 1, 7.5f, 15, -3, -3, -3, -3}, y[8];
    CHECK(tl_kv_quant_row_bytes(8, 4, 4) == 2 * 8 + 4);
    uint8_t out[20], want[20] = {0};
    float f;
    f = 0;
    memcpy(want + 0, &f, 4);
    f = 1;
    memcpy(want + 4, &f, 4);
    want[8] = 0x10;
    want[9] = 0xF8;
    f = -3;
    memcpy(want + 10, &f, 4);
    f = 0;
    memcpy(want + 14, &f, 4);
    memset(out, 0xAA, sizeof out);
    tl_kv_quant_row(x, 8, 4, 4, out);
    CHECK(memcmp(out, want, sizeof want) == 0);
    tl_kv_dequant_row(out, 8, 4, 4, y);
    float wy[8] = {0, 1, 8, 15, -3, -3, -3, -3};
    CHECK(memcmp(y, wy, sizeof y) == 0);
    /* 8 bits, groups of 2: {1, 2}: min 1, scale 1/255, q 0 255; {5, -5}: q 255 0 */
    float a[4] = {1, 2, 5, -5}, b[4];
    uint8_t o8[20];
    CHECK(tl_kv_quant_row_bytes(4, 2, 8) == 2 * 8 + 4);
    tl_kv_quant_row(a, 4, 2, 8, o8);
    float mn, sc;
    memcpy(&mn, o8, 4);
    memcpy(&sc, o8 + 4, 4);
    CHECK(mn == 1 && sc == 1.0f / 255.0f && o8[8] == 0 && o8[9] == 255);
    memcpy(&mn, o8 + 10, 4);
    memcpy(&sc, o8 + 14, 4);
    CHECK(mn == -5 && sc == 10.0f / 255.0f && o8[18] == 255 && o8[19] == 0);
    tl_kv_dequant_row(o8, 4, 2, 8, b);
    CHECK(b[0] == 1 && fabsf(b[1] - 2) < 1e-6f && fabsf(b[2] - 5) < 1e-5f && b[3] == -5);
    /* random rows: error within half a step */
    static const int GROUPS[] = {64, 32, 10};
    for (int gi = 0; gi < 3; gi++)
        for (int bits = 4; bits <= 8; bits += 4) {
            int g = GROUPS[gi], n = g * 3;
            float in[192], dq[192];
            uint8_t q[192 + 64];
            for (int i = 0; i < n; i++) in[i] = val(7, gi, bits, i, 0) * (i < g ? 100.0f : 1.0f);
            in[g] = in[g + 1] = in[g + 2] = 0.25f; /* repeated values are fine */
            size_t nb = tl_kv_quant_row_bytes(n, g, bits);
            CHECK(nb == (size_t)(n / g) * 8 + (size_t)n * (size_t)bits / 8);
            tl_kv_quant_row(in, n, g, bits, q);
            tl_kv_dequant_row(q, n, g, bits, dq);
            for (int g0 = 0; g0 < n; g0 += g) {
                float lo = in[g0], hi = in[g0];
                for (int i = g0; i < g0 + g; i++) lo = fminf(lo, in[i]), hi = fmaxf(hi, in[i]);
                float step = (hi - lo) / (float)((1 << bits) - 1);
                float tol = step / 2 + 8 * FLT_EPSILON * (fabsf(lo) + fabsf(hi));
                for (int i = g0; i < g0 + g; i++)
                    CHECK_MSG(fabsf(in[i] - dq[i]) <= tol, "group %d bits %d: %g vs %g", g, bits,
                              (double)in[i], (double)dq[i]);
                CHECK(dq[g0] >= lo - tol && dq[g0] <= hi + tol);
            }
        }
    /* a constant group decodes exactly; a NaN does not crash */
    float cst[4] = {2.5f, 2.5f, NAN, 2.5f}, dc[4];
    uint8_t oc[12];
    tl_kv_quant_row(cst, 4, 4, 8, oc);
    tl_kv_dequant_row(oc, 4, 4, 8, dc);
    CHECK(dc[0] == 2.5f && dc[1] == 2.5f && dc[3] == 2.5f);
}

/* ---- slow disk: writes in flight when read back, the write ring full ---- */

static void test_slow_disk(void) {
    tl_kv_params p = base_params(8, 0, 1, 10);
    p.max_seqs = 1;
    p.n_layer = 2; /* ring of 4 writes */
    tl_budget *b;
    CHECK(tl_budget_open(0, &b) == TL_OK);
    tl_kv *kv;
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_OK);
    tl_fault_spec spec = {0};
    spec.latency_s = 0.002;
    tl_kv_set_spill_fault(kv, &spec);
    kv_case c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.kv = kv;
    snprintf(c.label, sizeof c.label, "slow disk");
    int32_t s;
    int ident = 5;
    CHECK(tl_kv_seq_open(kv, &s) == TL_OK);
    float k[17 * 20], v[17 * 20];
    for (int l = 0; l < 2; l++) {
        gen_rows(ident, l, 0, 17, 20, k, v);
        CHECK(tl_kv_append(kv, s, l, k, v, 17) == TL_OK);
    }
    tl_kv_stats ks;
    tl_kv_get_stats(kv, &ks);
    CHECK(ks.write_wait_s == 0);
    CHECK_MSG(tl_kv_seq_commit(kv, s, 17) == TL_OK, "%s", tl_last_error()); /* 34 writes */
    /* 30 of them waited for the ring, each write taking 2 ms: the commit's wait counted */
    tl_kv_get_stats(kv, &ks);
    CHECK_MSG(ks.write_wait_s >= 0.002, "write ring wait %g s", ks.write_wait_s);
    for (int l = 0; l < 2; l++) verify(&c, &s, &ident, 1, l); /* the last 4 are pinned */
    /* close the sequence with writes in flight, reuse its id with other data */
    for (int l = 0; l < 2; l++) {
        gen_rows(ident, l, 17, 2, 20, k, v);
        CHECK(tl_kv_append(kv, s, l, k, v, 2) == TL_OK);
    }
    CHECK(tl_kv_seq_commit(kv, s, 2) == TL_OK);
    tl_kv_seq_close(kv, s);
    CHECK(tl_kv_seq_open(kv, &s) == TL_OK && s == 0);
    ident = 6;
    for (int l = 0; l < 2; l++) {
        gen_rows(ident, l, 0, 3, 20, k, v);
        CHECK(tl_kv_append(kv, s, l, k, v, 3) == TL_OK);
    }
    CHECK(tl_kv_seq_commit(kv, s, 3) == TL_OK);
    for (int l = 0; l < 2; l++) verify(&c, &s, &ident, 1, l);
    tl_kv_seq_close(kv, s);
    tl_kv_get_stats(kv, &ks);
    CHECK_MSG(ks.pages_written == 2 * (17 + 2 + 3), "%llu", (unsigned long long)ks.pages_written);
    CHECK(tl_budget_peak(b) <= tl_kv_budget_bytes(&p, 1));
    tl_kv_close(kv);
    CHECK(count_spill_files() == 0 && tl_budget_used(b) == 0);
    tl_budget_close(b);
}

/* A long-lived cache (a server): sequences open, spill and close round after round, with
 * writes still in flight at each close (a slow disk). The spill file holds only the pages
 * alive at once, and every round reads back its own values from reused slots. */
static void test_slot_reuse(void) {
    tl_kv_params p = base_params(32, 0, 1, 10);
    p.max_seqs = 2;
    p.n_layer = 2;
    p.max_block = 20; /* a round appends 20 rows per commit */
    tl_budget *b;
    CHECK(tl_budget_open(0, &b) == TL_OK);
    tl_kv *kv;
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_OK);
    tl_fault_spec spec = {0};
    spec.latency_s = 0.0005;
    tl_kv_set_spill_fault(kv, &spec);
    kv_case c;
    memset(&c, 0, sizeof c);
    c.p = p;
    c.kv = kv;
    float k[20 * 20], v[20 * 20];
    enum { ROUNDS = 6, ROWS = 20 };
    for (int round = 0; round < ROUNDS; round++) {
        snprintf(c.label, sizeof c.label, "slot reuse, round %d", round);
        int32_t s[2];
        int ident[2];
        for (int j = 0; j < 2; j++) {
            CHECK(tl_kv_seq_open(kv, &s[j]) == TL_OK);
            ident[j] = 100 + 2 * round + j;
            for (int l = 0; l < 2; l++) {
                gen_rows(ident[j], l, 0, ROWS, 20, k, v);
                CHECK(tl_kv_append(kv, s[j], l, k, v, ROWS) == TL_OK);
            }
            CHECK(tl_kv_seq_commit(kv, s[j], ROWS) == TL_OK);
        }
        for (int l = 0; l < 2; l++) verify(&c, s, ident, 2, l);
        /* one more page each, its write in flight at the close */
        for (int j = 0; j < 2; j++) {
            for (int l = 0; l < 2; l++) {
                gen_rows(ident[j], l, ROWS, 1, 20, k, v);
                CHECK(tl_kv_append(kv, s[j], l, k, v, 1) == TL_OK);
            }
            CHECK(tl_kv_seq_commit(kv, s[j], 1) == TL_OK);
            tl_kv_seq_close(kv, s[j]);
        }
    }
    tl_kv_stats ks;
    tl_kv_get_stats(kv, &ks);
    const uint64_t per_round = 2 * 2 * (ROWS + 1); /* disk pages: page_tokens 1, all on disk */
    CHECK_MSG(ks.pages_written == ROUNDS * per_round, "%llu pages written",
              (unsigned long long)ks.pages_written);
    /* a round's pages at most (the second sequence's last pages may take the first's slots:
     * it closed before they were written), and more than one sequence's */
    CHECK_MSG(ks.spill_slots <= per_round && ks.spill_slots > per_round / 2,
              "the spill file holds %llu slots; a round writes %llu pages",
              (unsigned long long)ks.spill_slots, (unsigned long long)per_round);
    CHECK(c.bad == 0);
    CHECK(tl_budget_peak(b) <= tl_kv_budget_bytes(&p, 2));
    tl_kv_close(kv);
    CHECK(count_spill_files() == 0 && tl_budget_used(b) == 0);
    tl_budget_close(b);
}

/* One sequence of 40 positions (ten 4-position pages per layer, rows of `ident`) written
 * to a single-sequence cache; the returned case verifies it. */
static kv_case one_sequence(tl_kv *kv, const tl_kv_params *p, int ident, const char *label,
                            int32_t *s) {
    kv_case c;
    memset(&c, 0, sizeof c);
    c.p = *p;
    c.kv = kv;
    snprintf(c.label, sizeof c.label, "%s", label);
    CHECK(tl_kv_seq_open(kv, s) == TL_OK);
    float k[40 * 20], v[40 * 20];
    for (int l = 0; l < p->n_layer; l++) {
        gen_rows(ident, l, 0, 40, 20, k, v);
        CHECK(tl_kv_append(kv, *s, l, k, v, 40) == TL_OK);
    }
    CHECK(tl_kv_seq_commit(kv, *s, 40) == TL_OK);
    return c;
}

/* The hit-rate model's read forecast, by hand: 10 full pages per layer, all on disk (pct
 * 0), heat 1 when written. After one selection using pages 0..3 every page still has heat
 * >= 1/2 (used 1, unused 1/2): all 10 are staged for 4 used, 2.5. After a second one the
 * unused six have 1/4: 4 staged + 6 x 1/4 expected on demand, for 4 used, 1.375. */
static void test_select_forecast(void) {
    tl_kv_params p = base_params(32, 0, 4, 10);
    p.max_seqs = 1;
    p.key_bounds = 1;
    tl_budget *b;
    CHECK(tl_budget_open(0, &b) == TL_OK);
    tl_kv *kv;
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_OK);
    double r = -1;
    CHECK(tl_kv_select_read_forecast(kv, &r) == TL_ERR_INVALID && has("no selection"));
    int32_t s;
    const int ident = 5;
    kv_case c = one_sequence(kv, &p, ident, "read forecast", &s);
    /* until every write has finished and left its frame (a page still writing is served
     * from it, and not counted) */
    int ready = 1;
    for (int tries = 0; tries < 5000 && ready; tries++) {
        for (int l = 0; l < p.n_layer; l++) verify(&c, &s, &ident, 1, l); /* reaps writes */
        ready = 0;
        for (int l = 0; l < p.n_layer; l++)
            for (int i = 0; i < 10; i++) ready += tl_kv_page_ready(kv, s, l, i);
        if (ready) usleep(1000);
    }
    CHECK(c.bad == 0 && ready == 0);
    CHECK(tl_kv_select_read_forecast(kv, &r) == TL_ERR_INVALID);
    uint8_t sel[10] = {1, 1, 1, 1, 0, 0, 0, 0, 0, 0};
    const double want[2] = {10.0 / 4, (4 + 6 * 0.25) / 4};
    for (int round = 0; round < 2; round++) {
        for (int l = 0; l < p.n_layer; l++) tl_kv_note_selection(kv, s, l, sel, 10);
        CHECK(tl_kv_select_read_forecast(kv, &r) == TL_OK);
        CHECK_MSG(fabs(r - want[round]) < 1e-9, "round %d: forecast %g, want %g", round, r,
                  want[round]);
    }
    tl_kv_close(kv);
    CHECK(tl_budget_used(b) == 0);
    tl_budget_close(b);
}

/* Timed reads of the spill file: refused before anything is on disk and for more frames
 * than are spare; afterwards a rate, with the pages, their bytes and the cache's
 * counters unchanged (the reads go through a private queue into spare frames). */
static void test_time_reads(void) {
    tl_kv_params p = base_params(32, 0, 4, 10);
    p.max_seqs = 1;
    tl_budget *b;
    CHECK(tl_budget_open(0, &b) == TL_OK);
    tl_kv *kv;
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_OK);
    double bps = -1;
    CHECK(tl_kv_time_disk_reads(kv, 1, 0.01, &bps) == TL_ERR_INVALID &&
          has("0 disk pages to read"));
    int32_t s;
    const int ident = 77;
    kv_case c = one_sequence(kv, &p, ident, "timed reads", &s);
    for (int l = 0; l < p.n_layer; l++) verify(&c, &s, &ident, 1, l); /* frames go spare */
    tl_kv_stats before, after;
    tl_kv_get_stats(kv, &before);
    CHECK(tl_kv_time_disk_reads(kv, 1000, 0.01, &bps) == TL_ERR_INVALID &&
          has("spare frames for depth 1000"));
    CHECK(tl_kv_time_disk_reads(kv, 1, 0, &bps) == TL_ERR_INVALID && has("0 seconds"));
    CHECK_MSG(tl_kv_time_disk_reads(kv, 2, 0.02, &bps) == TL_OK, "%s", tl_last_error());
    CHECK_MSG(bps > 1e5 && bps < 1e12, "%g B/s", bps);
    tl_kv_get_stats(kv, &after);
    CHECK(memcmp(&before, &after, sizeof before) == 0);
    for (int l = 0; l < p.n_layer; l++) verify(&c, &s, &ident, 1, l);
    CHECK(c.bad == 0);
    tl_kv_close(kv);
    CHECK(tl_budget_used(b) == 0);
    tl_budget_close(b);
}

/* ---- faults ---- */

static void fill(tl_kv *kv, int32_t s, int L, int D, int pos0, int n) {
    float *k = malloc(sizeof(float) * (size_t)(n * D)), *v = malloc(sizeof(float) * (size_t)(n * D));
    for (int l = 0; l < L; l++) {
        gen_rows(9, l, pos0, n, D, k, v);
        CHECK_MSG(tl_kv_append(kv, s, l, k, v, n) == TL_OK, "%s", tl_last_error());
    }
    CHECK_MSG(tl_kv_seq_commit(kv, s, n) == TL_OK, "%s", tl_last_error());
    free(k);
    free(v);
}

/* Every call after a sticky error returns it with the same message. */
static void check_sticky(tl_kv *kv, int32_t s, tl_status want, const char *msg) {
    float k[20] = {0}, v[20] = {0}, scratch[40];
    const float *kk, *vv;
    int32_t rows, s2;
    tl_status sts[6] = {
        tl_kv_append(kv, s, 0, k, v, 1), tl_kv_seq_commit(kv, s, 0),
        tl_kv_prefetch(kv, &s, 1, 0),    tl_kv_wait(kv, &s, 1, 0),
        tl_kv_view(kv, s, 0, 0, scratch, &kk, &vv, &rows), tl_kv_seq_open(kv, &s2)};
    for (int i = 0; i < 6; i++) {
        CHECK_MSG(sts[i] == want, "call %d: %s", i, tl_status_str(sts[i]));
    }
    CHECK_MSG(strcmp(tl_last_error(), msg) == 0, "'%s' vs '%s'", tl_last_error(), msg);
}

static void test_enospc(void) {
    tl_kv_params p = base_params(32, 0, 1, 10);
    tl_budget *b;
    CHECK(tl_budget_open(0, &b) == TL_OK);
    tl_kv *kv;
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_OK);
    tl_fault_spec spec = {0};
    spec.fail_call = 3;
    spec.fail_errno = ENOSPC;
    spec.fail_writes_only = 1;
    tl_kv_set_spill_fault(kv, &spec);
    int32_t s;
    CHECK(tl_kv_seq_open(kv, &s) == TL_OK);
    fill(kv, s, 3, 20, 0, 1); /* 3 pages, the third write fails */
    tl_status st = TL_OK;
    for (int i = 0; i < 400 && st == TL_OK; i++) {
        st = tl_kv_prefetch(kv, NULL, 0, 0);
        if (st == TL_OK) usleep(5000);
    }
    CHECK_MSG(st == TL_ERR_NOSPACE && has("ENOSPC") && has("KV spill write"), "%s: %s",
              tl_status_str(st), tl_last_error());
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", tl_last_error());
    check_sticky(kv, s, TL_ERR_NOSPACE, msg);
    tl_kv_seq_close(kv, s);
    tl_kv_close(kv);
    CHECK(count_spill_files() == 0 && tl_budget_used(b) == 0);
    tl_budget_close(b);
}

static void test_eio_read(void) {
    tl_kv_params p = base_params(4, 0, 3, 10);
    tl_budget *b;
    CHECK(tl_budget_open(0, &b) == TL_OK);
    tl_kv *kv;
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_OK);
    int32_t s;
    CHECK(tl_kv_seq_open(kv, &s) == TL_OK);
    fill(kv, s, 3, 20, 0, 10);
    tl_fault_spec spec = {0};
    spec.fail_call = 1; /* the first read; not sticky in the shim, sticky in the cache */
    spec.fail_errno = EIO;
    tl_kv_set_spill_fault(kv, &spec);
    CHECK(tl_kv_prefetch(kv, &s, 1, 1) == TL_OK);
    tl_status st = tl_kv_wait(kv, &s, 1, 1);
    CHECK_MSG(st == TL_ERR_IO && has("EIO") && has("KV spill read"), "%s: %s",
              tl_status_str(st), tl_last_error());
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", tl_last_error());
    check_sticky(kv, s, TL_ERR_IO, msg);
    tl_kv_release(kv, &s, 1, 1);
    tl_kv_close(kv); /* with the sequence still open */
    CHECK(count_spill_files() == 0 && tl_budget_used(b) == 0);
    tl_budget_close(b);
}

static void test_nomem(void) {
    tl_kv_params p = base_params(8, 50, 3, 10);
    tl_budget *b;
    CHECK(tl_budget_open(48 * 1024, &b) == TL_OK);
    tl_kv *kv;
    CHECK_MSG(tl_kv_open(&p, b, aio, &kv) == TL_OK, "%s", tl_last_error());
    int32_t s[4];
    for (int i = 0; i < 4; i++) CHECK(tl_kv_seq_open(kv, &s[i]) == TL_OK);
    float k[5 * 20], v[5 * 20];
    tl_status st = TL_OK;
    int committed = 0;
    for (int step = 0; step < 9 && st == TL_OK; step++)
        for (int i = 0; i < 4 && st == TL_OK; i++) {
            for (int l = 0; l < 3 && st == TL_OK; l++) {
                gen_rows(i, l, step * 5, 5, 20, k, v);
                st = tl_kv_append(kv, s[i], l, k, v, 5);
            }
            if (st == TL_OK) st = tl_kv_seq_commit(kv, s[i], 5);
            if (st == TL_OK) committed++;
        }
    CHECK_MSG(st == TL_ERR_NOMEM && has("KV") && has("budget"), "%s: %s", tl_status_str(st),
              tl_last_error());
    CHECK(committed > 0);
    CHECK(tl_budget_peak(b) <= 48 * 1024);
    tl_kv_close(kv);
    CHECK(count_spill_files() == 0 && tl_budget_used(b) == 0);
    tl_budget_close(b);
}

/* ---- bad calls ---- */

static void test_bad_calls(void) {
    tl_budget *b;
    CHECK(tl_budget_open(0, &b) == TL_OK);
    tl_kv *kv = (tl_kv *)1;
    tl_kv_params p = base_params(32, 50, 4, 10);
    p.spill_dir = NULL;
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_ERR_INVALID && kv == NULL && has("spill"));
    p = base_params(7, 100, 4, 10);
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_ERR_INVALID && has("bits"));
    p = base_params(4, 100, 4, 7);
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_ERR_INVALID);
    CHECK(tl_kv_budget_bytes(&p, 1) == UINT64_MAX);
    p = base_params(32, 0, 4, 10);
    p.placement = TL_KV_TEMPERATURE; /* without a window */
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_ERR_INVALID && has("window of at least one page"));
    p.window_pages = 1;
    p.cache_pages = -1;
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_ERR_INVALID && has("-1 cache pages"));
    p.cache_pages = 0;
    p.placement = 7;
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_ERR_INVALID && has("placement 7"));
    p = base_params(32, 0, 4, 10);
    p.spill_dir = "/nonexistent-dir-for-tierllm";
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_ERR_IO && has("nonexistent"));
    p = base_params(32, 100, 4, 10);
    p.max_seqs = 1;
    CHECK(tl_kv_open(&p, b, aio, &kv) == TL_OK);
    int32_t s, s2;
    CHECK(tl_kv_seq_open(kv, &s) == TL_OK);
    CHECK(tl_kv_seq_open(kv, &s2) == TL_ERR_INVALID && has("in use"));
    float k[49 * 20] = {0}, v[49 * 20] = {0};
    CHECK(tl_kv_append(kv, s, 3, k, v, 1) == TL_ERR_INVALID);
    CHECK(tl_kv_append(kv, 5, 0, k, v, 1) == TL_ERR_INVALID);
    CHECK(tl_kv_append(kv, s, 0, k, v, 49) == TL_ERR_CONTEXT);
    CHECK(tl_kv_append(kv, s, 0, k, v, 2) == TL_OK);
    CHECK(tl_kv_seq_commit(kv, s, 2) == TL_ERR_INVALID && has("layer 1"));
    CHECK(tl_kv_visible(kv, s, 0) == 2 && tl_kv_visible(kv, s, 1) == 0);
    const float *kk, *vv;
    int32_t rows;
    CHECK(tl_kv_view(kv, s, 1, 0, NULL, &kk, &vv, &rows) == TL_ERR_INVALID);
    CHECK(tl_kv_view(kv, s, 0, 0, NULL, &kk, &vv, &rows) == TL_OK && rows == 2);
    size_t ld;
    CHECK(tl_kv_view_head(kv, s, 0, 0, 2, 0, NULL, &kk, &ld, &rows) == TL_ERR_INVALID &&
          has("kv head 2"));
    CHECK(tl_kv_view_head(kv, s, 0, 0, -1, 1, NULL, &kk, &ld, &rows) == TL_ERR_INVALID);
    CHECK(tl_kv_view_head(kv, s, 0, 0, 1, 1, NULL, &kk, &ld, &rows) == TL_OK && rows == 2 &&
          ld == 20);
    CHECK(tl_kv_view_head(kv, s, 1, 0, 0, 0, NULL, &kk, &ld, &rows) == TL_ERR_INVALID);
    tl_kv_touch_head(kv, s, 0, 9, 0, 0); /* past the end, bad head, bad sequence: no-ops */
    tl_kv_touch_head(kv, s, 0, 0, 5, 1);
    tl_kv_touch_head(kv, 7, 0, 0, 0, 0);
    tl_kv_touch_head(NULL, s, 0, 0, 0, 0);
    CHECK(tl_kv_prefetch(kv, &s2, 1, 0) == TL_ERR_INVALID);
    tl_kv_set_spill_fault(kv, NULL); /* no spill file: no-op */
    tl_kv_close(kv);
    tl_kv_close(NULL);
    CHECK(tl_budget_used(b) == 0);
    tl_budget_close(b);
}

int main(void) {
    tk_setup("test_kv");
    (void)TK_KINDS;
    test_quant_by_hand();
    /* the pread pool, then io_uring where it works (the file tier exposes its fd) */
    for (int bi = 0; bi < 2; bi++) {
        tl_aio_params ap = tl_aio_default_params();
        ap.backend = bi ? TL_AIO_URING : TL_AIO_POOL;
        if (tl_aio_open(&ap, &aio) != TL_OK) {
            fprintf(stderr, "note: io_uring unavailable (%s); its pass skips\n", tl_last_error());
            continue;
        }
        test_bad_calls();
        test_matrix();
        test_slow_disk();
        test_slot_reuse();
        test_time_reads();
        test_select_forecast();
        test_enospc();
        test_eio_read();
        test_nomem();
        tl_aio_close(aio);
    }
    tk_teardown();
    return tl_test_finish("test_kv");
}
