/* tier_kinds.h - the table of tier implementations that test_tier.c and test_aio.c run
 * every storage test over: memory, file (buffered), file (O_DIRECT), and each wrapped in
 * the fault shim with no faults and with short transfers. Static helpers, test-only.
 * Files live in a temporary directory: /tmp if it accepts O_DIRECT, else the current
 * working directory (the build dir), so that the O_DIRECT path is really exercised. */
#ifndef TL_TESTS_TIER_KINDS_H
#define TL_TESTS_TIER_KINDS_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/rng.h"
#include "base/status.h"
#include "testutil.h"
#include "tier/tier.h"

typedef struct tk_kind {
    const char *label;
    int file;         /* 0 memory, 1 buffered file, 2 O_DIRECT file */
    int fault;        /* wrapped in the fault shim */
    size_t short_max; /* fault shim's short transfers */
} tk_kind;

static const tk_kind TK_KINDS[] = {
    {"memory", 0, 0, 0},
    {"file", 1, 0, 0},
    {"file-direct", 2, 0, 0},
    {"fault(memory)", 0, 1, 0},
    {"fault(file)", 1, 1, 0},
    {"fault(file-direct)", 2, 1, 0},
    {"fault(memory) short 1000", 0, 1, 1000},
    {"fault(file) short 777", 1, 1, 777},
    {"fault(file-direct) short 5000", 2, 1, 5000},
};
enum { TK_N_KINDS = sizeof TK_KINDS / sizeof TK_KINDS[0] };

static char tk_dir[512];        /* scratch dir for every file */
static int tk_direct_ok;        /* the scratch dir accepts O_DIRECT */
static char tk_paths[256][600]; /* files to remove at the end */
static int tk_n_paths;

/* The byte the pattern `seed` holds at offset o. */
static inline uint8_t tk_byte(uint64_t o, unsigned seed) {
    return (uint8_t)tl_mix64(o ^ ((uint64_t)seed << 48));
}

static inline void tk_fill(uint8_t *p, uint64_t off, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; i++) p[i] = tk_byte(off + i, seed);
}

/* Index of the first byte that differs from the pattern, or -1. */
static inline long tk_mismatch(const uint8_t *p, uint64_t off, size_t len, unsigned seed) {
    for (size_t i = 0; i < len; i++)
        if (p[i] != tk_byte(off + i, seed)) return (long)i;
    return -1;
}

static inline void *tk_alloc(size_t len) {
    size_t n = (len + 4095) / 4096 * 4096;
    void *p = aligned_alloc(4096, n ? n : 4096);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static int tk_dir_accepts_direct(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/probe", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_DIRECT, 0600);
    if (fd >= 0) close(fd);
    unlink(p);
    return fd >= 0;
}

/* Creates the scratch directory. */
static inline void tk_setup(const char *prefix) {
    const char *bases[] = {"/tmp", "."};
    for (int i = 0; i < 2; i++) {
        snprintf(tk_dir, sizeof tk_dir, "%s/%s_XXXXXX", bases[i], prefix);
        if (!mkdtemp(tk_dir)) continue;
        if (tk_dir_accepts_direct(tk_dir)) {
            tk_direct_ok = 1;
            return;
        }
        rmdir(tk_dir);
    }
    snprintf(tk_dir, sizeof tk_dir, "/tmp/%s_XXXXXX", prefix);
    if (!mkdtemp(tk_dir)) {
        fprintf(stderr, "cannot create a scratch directory: %s\n", strerror(errno));
        exit(1);
    }
    fprintf(stderr, "note: no scratch directory accepts O_DIRECT; direct tiers run buffered\n");
}

static inline const char *tk_new_path(const char *name) {
    if (tk_n_paths >= 256) {
        fprintf(stderr, "too many scratch files\n");
        exit(1);
    }
    char *p = tk_paths[tk_n_paths++];
    snprintf(p, sizeof tk_paths[0], "%s/%s_%d", tk_dir, name, tk_n_paths);
    return p;
}

static inline void tk_teardown(void) {
    for (int i = 0; i < tk_n_paths; i++) unlink(tk_paths[i]);
    rmdir(tk_dir);
}

/* Writes a file of `size` bytes holding pattern `seed` with plain stdio. */
static inline void tk_write_file(const char *path, uint64_t size, unsigned seed) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "create %s: %s\n", path, strerror(errno));
        exit(1);
    }
    uint8_t buf[8192];
    for (uint64_t off = 0; off < size; off += sizeof buf) {
        size_t n = size - off < sizeof buf ? (size_t)(size - off) : sizeof buf;
        tk_fill(buf, off, n, seed);
        fwrite(buf, 1, n, f);
    }
    fclose(f);
}

/* Opens a writable tier of kind k, `size` bytes holding pattern `seed`. */
static inline tl_tier *tk_open(const tk_kind *k, uint64_t size, unsigned seed) {
    tl_tier *t = NULL;
    tl_status st;
    if (k->file) {
        const char *path = tk_new_path("tier");
        tk_write_file(path, size, seed);
        int flags = TL_TIER_FILE_WRITE | (k->file == 2 ? TL_TIER_FILE_DIRECT : 0);
        st = tl_tier_file_open(path, flags, &t);
        if (st == TL_OK && k->file == 2 && tk_direct_ok) {
            CHECK_MSG(tl_tier_file_is_direct(t) && t->align == 4096, "%s: not O_DIRECT",
                      k->label);
        }
        if (st == TL_OK) CHECK(t->fd >= 0 && t->size == size);
    } else {
        st = tl_tier_mem_open(size, &t);
        if (st == TL_OK) tk_fill(tl_tier_mem_data(t), 0, (size_t)size, seed);
    }
    if (st != TL_OK) {
        fprintf(stderr, "%s: open: %s\n", k->label, tl_last_error());
        exit(1);
    }
    if (k->fault) {
        tl_fault_spec spec = {0};
        spec.short_max = k->short_max;
        tl_tier *f;
        st = tl_tier_fault_open(t, &spec, &f);
        if (st != TL_OK) {
            fprintf(stderr, "%s: fault open: %s\n", k->label, tl_last_error());
            exit(1);
        }
        CHECK(f->fd == -1 && f->align == t->align && f->size == size);
        t = f;
    }
    return t;
}

#endif
