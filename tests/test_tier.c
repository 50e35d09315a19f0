/* test_tier.c - the tier implementations against the tier.h contract. Storage tests run
 * over every kind in tier_kinds.h (memory, buffered file, O_DIRECT file, fault-wrapped
 * with and without short transfers): full reads, aligned round trips, partial reads,
 * end-of-file, misalignment, concurrent callers. Then the file tier's read-only and
 * creation rules, reserving (tl_tier_reserve), real ENOSPC (/dev/full), and the fault
 * shim's EIO/ENOSPC/sticky/writes-only/latency/short-transfer behaviour. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include "base/clock.h"
#include "tier_kinds.h"

#define SIZE ((uint64_t)1 << 20)

static int has(const char *needle) { return strstr(tl_last_error(), needle) != NULL; }

typedef struct reader_arg {
    tl_tier *t;
    int id;
    int bad;
} reader_arg;

static void *reader(void *arg) {
    reader_arg *a = arg;
    size_t len = 64 * 1024;
    uint8_t *buf = tk_alloc(len);
    for (int i = 0; i < 16; i++) {
        uint64_t off = (uint64_t)((a->id * 16 + i) % 16) * len;
        if (tl_tier_read_full(a->t, off, buf, len) != TL_OK || tk_mismatch(buf, off, len, 1) >= 0)
            a->bad++;
    }
    free(buf);
    return NULL;
}

static void test_storage(const tk_kind *k) {
    tl_tier *t = tk_open(k, SIZE, 1);
    size_t a = t->align;
    uint8_t *buf = tk_alloc(SIZE + 8192);
    long bad;

    /* whole content */
    CHECK(tl_tier_read_full(t, 0, buf, SIZE) == TL_OK);
    bad = tk_mismatch(buf, 0, SIZE, 1);
    CHECK_MSG(bad < 0, "%s: full read differs at %ld", k->label, bad);

    /* round trips at aligned offsets, of aligned lengths */
    static const uint64_t offs[] = {0, 4096, 65536, 12288, SIZE - 8192};
    static const size_t lens[] = {4096, 8192, 65536 + 4096, 40960, 8192};
    for (int i = 0; i < 5; i++) {
        tk_fill(buf, offs[i], lens[i], 2);
        CHECK(tl_tier_write_full(t, offs[i], buf, lens[i]) == TL_OK);
        memset(buf, 0, lens[i]);
        CHECK(tl_tier_read_full(t, offs[i], buf, lens[i]) == TL_OK);
        bad = tk_mismatch(buf, offs[i], lens[i], 2);
        CHECK_MSG(bad < 0, "%s: round trip %d differs at %ld", k->label, i, bad);
    }
    /* bytes next to the writes are untouched */
    CHECK(tl_tier_read_full(t, 262144, buf, 4096) == TL_OK);
    CHECK(tk_mismatch(buf, 262144, 4096, 1) < 0);

    /* unaligned round trips where the tier allows them */
    if (a == 1) {
        tk_fill(buf, 300001, 12345, 3);
        CHECK(tl_tier_write_full(t, 300001, buf, 12345) == TL_OK);
        memset(buf, 0, 12345 + 2);
        CHECK(tl_tier_read_full(t, 300000, buf, 12345 + 2) == TL_OK);
        CHECK(buf[0] == tk_byte(300000, 1) && buf[12346] == tk_byte(312346, 1));
        CHECK(tk_mismatch(buf + 1, 300001, 12345, 3) < 0);
    } else {
        /* misaligned offset, length or buffer: refused, never reaches the kernel */
        CHECK(tl_tier_read_full(t, 100, buf, 4096) == TL_ERR_INVALID);
        CHECK(has("align"));
        CHECK(tl_tier_read_full(t, 0, buf, 1000) == TL_ERR_INVALID);
        CHECK(tl_tier_read_full(t, 0, buf + 1, 4096) == TL_ERR_INVALID);
        CHECK(tl_tier_write_full(t, 0, buf + 512, 4096) == TL_ERR_INVALID);
    }

    /* read_at: a short answer at the end, 0 bytes at the end, nothing is an error */
    size_t done = 7;
    CHECK(t->ops->read_at(t, SIZE, buf, a, &done) == TL_OK && done == 0);
    done = 0;
    CHECK(t->ops->read_at(t, SIZE - a, buf, 2 * a, &done) == TL_OK && done > 0 && done <= a);

    /* read past EOF through read_full: a clear error */
    tl_error_clear();
    CHECK(tl_tier_read_full(t, SIZE - a, buf, 2 * a) == TL_ERR_IO);
    CHECK_MSG(has("truncated"), "%s: %s", k->label, tl_last_error());
    CHECK(tl_tier_read_full(t, SIZE + 4096, buf, 4096) == TL_ERR_IO);
    CHECK(has("truncated"));
    CHECK(tl_tier_read_full(t, 0, buf, 0) == TL_OK);

    /* concurrent readers at different offsets (restore pattern 1 first) */
    tk_fill(buf, 0, SIZE, 1);
    CHECK(tl_tier_write_full(t, 0, buf, SIZE) == TL_OK);
    pthread_t th[4];
    reader_arg ra[4];
    for (int i = 0; i < 4; i++) {
        ra[i] = (reader_arg){t, i, 0};
        pthread_create(&th[i], NULL, reader, &ra[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(ra[i].bad == 0, "%s: concurrent reader %d saw %d bad reads", k->label, i,
                  ra[i].bad);
    }
    free(buf);
    tl_tier_close(t);
}

static void read_whole(const char *path, uint8_t *dst, size_t len) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fread(dst, 1, len, f) == len);
    fclose(f);
}

static void test_file_rules(void) {
    /* read-only: refuses writes, never modifies the file */
    const char *path = tk_new_path("ro");
    tk_write_file(path, 16384, 5);
    struct stat before, after;
    CHECK(stat(path, &before) == 0);
    uint8_t *buf = tk_alloc(16384);
    for (int direct = 0; direct <= 1; direct++) {
        tl_tier *t = NULL;
        CHECK(tl_tier_file_open(path, direct ? TL_TIER_FILE_DIRECT : 0, &t) == TL_OK);
        if (!t) continue;
        CHECK(!t->writable && t->fd >= 0 && t->size == 16384);
        CHECK(tl_tier_file_is_direct(t) == (direct && tk_direct_ok));
        CHECK(tl_tier_read_full(t, 0, buf, 16384) == TL_OK);
        CHECK(tk_mismatch(buf, 0, 16384, 5) < 0);
        tk_fill(buf, 0, 4096, 6);
        tl_error_clear();
        tl_status st = tl_tier_write_full(t, 0, buf, 4096);
        CHECK(st == TL_ERR_INVALID || st == TL_ERR_IO);
        CHECK_MSG(has("read-only") && has(path), "%s", tl_last_error());
        size_t done = 1;
        CHECK(t->ops->write_at(t, 4096, buf, 4096, &done) != TL_OK && done == 0);
        tl_tier_close(t);
    }
    CHECK(stat(path, &after) == 0);
    CHECK(after.st_size == 16384);
    CHECK(after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
          after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
    read_whole(path, buf, 16384);
    CHECK(tk_mismatch(buf, 0, 16384, 5) < 0);

    /* missing file: TL_ERR_IO naming the path */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/does_not_exist", tk_dir);
    tl_tier *t = (tl_tier *)1;
    CHECK(tl_tier_file_open(missing, 0, &t) == TL_ERR_IO && t == NULL);
    CHECK(has(missing) && has("No such file"));
    CHECK(tl_tier_file_open(tk_dir, 0, &t) == TL_ERR_IO);

    /* a writable file is created when missing, empty, mode 0600 */
    const char *spill = tk_new_path("spill");
    CHECK(tl_tier_file_open(spill, TL_TIER_FILE_WRITE | TL_TIER_FILE_DIRECT, &t) == TL_OK);
    if (t) {
        CHECK(t->writable && t->size == 0 && t->fd >= 0);
        tk_fill(buf, 8192, 8192, 7);
        CHECK(tl_tier_write_full(t, 8192, buf, 8192) == TL_OK);
        tl_tier_close(t);
        struct stat sb;
        CHECK(stat(spill, &sb) == 0 && sb.st_size == 16384 && (sb.st_mode & 0777) == 0600);
        read_whole(spill, buf, 16384);
        CHECK(tk_mismatch(buf + 8192, 8192, 8192, 7) < 0);
    }
    /* reserving: the file grows to the size asked (its blocks allocated where the
     * filesystem can), keeps what was written and reads zeros beyond it; a smaller size
     * changes nothing; a read-only file refuses, a memory tier has nothing to do */
    CHECK(tl_tier_file_open(spill, TL_TIER_FILE_WRITE | TL_TIER_FILE_DIRECT, &t) == TL_OK);
    if (t && fallocate(t->fd, FALLOC_FL_KEEP_SIZE, 0, 4096) != 0 && errno == EOPNOTSUPP) {
        /* a filesystem without fallocate: reserving does nothing */
        fprintf(stderr, "note: %s has no fallocate, reserving tested as nothing to do\n", tk_dir);
        CHECK(tl_tier_reserve(t, 65536) == TL_OK && t->size == 16384);
        tl_tier_close(t);
        t = NULL;
    }
    if (t) {
        CHECK(t->size == 16384);
        CHECK(tl_tier_reserve(t, 65536) == TL_OK && t->size == 65536);
        struct stat rs;
        CHECK(fstat(t->fd, &rs) == 0 && rs.st_size == 65536 && rs.st_blocks * 512 >= 65536);
        CHECK(tl_tier_reserve(t, 4096) == TL_OK && t->size == 65536);
        tl_error_clear();
        CHECK(tl_tier_reserve(t, UINT64_MAX) == TL_ERR_INVALID && has("out of range"));
        CHECK(t->size == 65536);
        tk_fill(buf, 0, 4096, 9);
        CHECK(tl_tier_write_full(t, 61440, buf, 4096) == TL_OK);
        tl_tier_close(t);
        struct stat sb;
        CHECK(stat(spill, &sb) == 0 && sb.st_size == 65536);
        uint8_t *whole = tk_alloc(65536);
        read_whole(spill, whole, 65536);
        CHECK(tk_mismatch(whole + 8192, 8192, 8192, 7) < 0);
        CHECK(tk_mismatch(whole + 61440, 0, 4096, 9) < 0);
        int zeros = 1;
        for (size_t i = 16384; i < 61440; i++) zeros &= whole[i] == 0;
        CHECK(zeros);
        free(whole);
    }
    CHECK(tl_tier_file_open(path, 0, &t) == TL_OK);
    if (t) {
        tl_error_clear();
        CHECK(tl_tier_reserve(t, 65536) == TL_ERR_INVALID && has("read-only"));
        tl_tier_close(t);
    }
    CHECK(stat(path, &after) == 0 && after.st_size == 16384);

    /* a real full disk: /dev/full answers ENOSPC */
    if (tl_tier_file_open("/dev/full", TL_TIER_FILE_WRITE, &t) == TL_OK) {
        tl_error_clear();
        CHECK(tl_tier_write_full(t, 0, buf, 4096) == TL_ERR_NOSPACE);
        CHECK_MSG(has("disk full") && has("/dev/full"), "%s", tl_last_error());
        tl_tier_close(t);
    } else {
        fprintf(stderr, "note: /dev/full not writable, real ENOSPC not tested\n");
    }

    /* memory tier: fixed size */
    CHECK(tl_tier_mem_open(8192, &t) == TL_OK);
    CHECK(tl_tier_mem_data(t) != NULL && t->align == 1 && t->fd == -1 && t->writable);
    CHECK(tl_tier_reserve(t, 65536) == TL_OK && t->size == 8192);
    CHECK(tl_tier_file_is_direct(t) == 0);
    CHECK(tl_tier_write_full(t, 4096, buf, 8192) == TL_ERR_NOSPACE);
    CHECK(tl_tier_write_full(t, 8192, buf, 1) == TL_ERR_NOSPACE);
    tl_tier_close(t);
    tl_tier_close(NULL);
    free(buf);
}

static tl_tier *fault_over(int file, const tl_fault_spec *spec) {
    tk_kind k = {"inner", file, 0, 0};
    tl_tier *inner = tk_open(&k, 65536, 1), *f = NULL;
    CHECK(tl_tier_fault_open(inner, spec, &f) == TL_OK);
    return f;
}

static void test_fault(void) {
    uint8_t *buf = tk_alloc(65536);
    for (int file = 0; file <= 2; file++) {
        /* EIO at call 3, not sticky */
        tl_fault_spec spec = {0};
        spec.fail_call = 3;
        spec.fail_errno = EIO;
        tl_tier *t = fault_over(file, &spec);
        CHECK(t->fd == -1);
        CHECK(tl_tier_read_full(t, 0, buf, 4096) == TL_OK);
        CHECK(tl_tier_write_full(t, 0, buf, 4096) == TL_OK);
        tl_error_clear();
        CHECK(tl_tier_read_full(t, 4096, buf, 4096) == TL_ERR_IO);
        CHECK_MSG(has("injected") && has("EIO"), "%s", tl_last_error());
        CHECK(tl_tier_read_full(t, 4096, buf, 4096) == TL_OK);
        CHECK(tl_tier_fault_calls(t) == 4);
        tl_tier_close(t);

        /* sticky */
        spec.sticky = 1;
        t = fault_over(file, &spec);
        CHECK(tl_tier_read_full(t, 0, buf, 4096) == TL_OK);
        CHECK(tl_tier_read_full(t, 0, buf, 4096) == TL_OK);
        for (int i = 0; i < 3; i++) CHECK(tl_tier_read_full(t, 0, buf, 4096) == TL_ERR_IO);
        CHECK(tl_tier_write_full(t, 0, buf, 4096) == TL_ERR_IO);
        tl_tier_close(t);

        /* ENOSPC on the 2nd write only: reads never fail, count toward calls */
        spec = (tl_fault_spec){0};
        spec.fail_call = 2;
        spec.fail_errno = ENOSPC;
        spec.fail_writes_only = 1;
        t = fault_over(file, &spec);
        for (int i = 0; i < 5; i++) CHECK(tl_tier_read_full(t, 0, buf, 4096) == TL_OK);
        CHECK(tl_tier_write_full(t, 0, buf, 4096) == TL_OK);
        tl_error_clear();
        CHECK(tl_tier_write_full(t, 0, buf, 4096) == TL_ERR_NOSPACE);
        CHECK_MSG(has("injected") && has("ENOSPC"), "%s", tl_last_error());
        CHECK(tl_tier_write_full(t, 0, buf, 4096) == TL_OK);
        CHECK(tl_tier_fault_calls(t) == 8);
        tl_tier_close(t);

        /* short transfers: clipped to short_max rounded down to align, at least one unit */
        size_t a = file == 2 && tk_direct_ok ? 4096 : 1;
        size_t shorts[] = {1000, 5000, 100};
        for (int i = 0; i < 3; i++) {
            spec = (tl_fault_spec){0};
            spec.short_max = shorts[i];
            t = fault_over(file, &spec);
            size_t want = shorts[i] / a * a;
            if (want == 0) want = a;
            size_t done = 0;
            CHECK(t->ops->read_at(t, 0, buf, 32768, &done) == TL_OK);
            CHECK_MSG(done == want, "short_max %zu align %zu: got %zu", shorts[i], a, done);
            CHECK(t->ops->write_at(t, 0, buf, 32768, &done) == TL_OK && done == want);
            CHECK(tl_tier_read_full(t, 0, buf, 32768) == TL_OK);
            CHECK(tk_mismatch(buf, 0, 32768, 1) < 0);
            CHECK(tl_tier_fault_calls(t) == 2 + (32768 + want - 1) / want);
            tl_tier_close(t);
        }

        /* latency is observed on every call */
        spec = (tl_fault_spec){0};
        spec.latency_s = 0.02;
        t = fault_over(file, &spec);
        double t0 = tl_now();
        CHECK(tl_tier_read_full(t, 0, buf, 4096) == TL_OK);
        CHECK(tl_tier_write_full(t, 0, buf, 4096) == TL_OK);
        double el = tl_now() - t0;
        CHECK_MSG(el >= 0.04, "latency: %g s for two calls", el);
        tl_tier_close(t);
    }
    /* invalid specs leave the inner tier to the caller */
    tl_tier *inner, *f = (tl_tier *)1;
    CHECK(tl_tier_mem_open(4096, &inner) == TL_OK);
    tl_fault_spec bad = {0};
    bad.fail_errno = EPERM;
    CHECK(tl_tier_fault_open(inner, &bad, &f) == TL_ERR_INVALID && f == NULL);
    bad = (tl_fault_spec){0};
    bad.latency_s = -1;
    CHECK(tl_tier_fault_open(inner, &bad, &f) == TL_ERR_INVALID);
    CHECK(tl_tier_fault_calls(inner) == 0);
    tl_tier_close(inner);
    free(buf);
}

/* Several read-only tiers as one (a folder's shards): reads inside a part see its bytes,
 * reads in a gap see zeros, a read never crosses into the next part, the end is
 * end-of-file, writes are refused, misplaced parts are refused (and closed). */
static void test_concat(void) {
    tl_tier *parts[2];
    CHECK(tl_tier_mem_open(5000, &parts[0]) == TL_OK && tl_tier_mem_open(3000, &parts[1]) == TL_OK);
    for (int p = 0; p < 2; p++)
        for (uint64_t i = 0; i < parts[p]->size; i++)
            tl_tier_mem_data(parts[p])[i] = (uint8_t)(p * 100 + i % 97 + 1);
    const uint64_t at[2] = {0, 8192};
    tl_tier *c = NULL;
    CHECK(tl_tier_concat_open(parts, at, 2, "concat", &c) == TL_OK);
    if (!c) return;
    CHECK(c->size == 8192 + 3000 && !c->writable);
    static uint8_t buf[12000];
    size_t done;
    CHECK(c->ops->read_at(c, 4990, buf, 100, &done) == TL_OK && done == 10); /* part end */
    CHECK(buf[0] == (uint8_t)(4990 % 97 + 1) && buf[9] == (uint8_t)(4999 % 97 + 1));
    memset(buf, 0xee, sizeof buf);
    CHECK(c->ops->read_at(c, 5000, buf, 5000, &done) == TL_OK && done == 3192); /* the gap */
    int zeros = 1;
    for (size_t i = 0; i < done; i++) zeros &= buf[i] == 0;
    CHECK(zeros && buf[3192] == 0xee);
    CHECK(tl_tier_read_full(c, 8192 + 7, buf, 100) == TL_OK && buf[0] == (uint8_t)(100 + 7 % 97 + 1));
    CHECK(tl_tier_read_full(c, 4000, buf, 6000) == TL_OK); /* part, gap, part */
    CHECK(buf[999] == (uint8_t)(4999 % 97 + 1) && buf[1000] == 0 && buf[4191] == 0 &&
          buf[4192] == (uint8_t)(100 + 1));
    CHECK(c->ops->read_at(c, 8192 + 3000, buf, 10, &done) == TL_OK && done == 0);
    CHECK(tl_tier_write_full(c, 0, buf, 10) == TL_ERR_IO);
    tl_tier_close(c);
    CHECK(tl_tier_mem_open(5000, &parts[0]) == TL_OK && tl_tier_mem_open(10, &parts[1]) == TL_OK);
    const uint64_t bad[2] = {0, 4096}; /* part 0 runs into part 1 */
    CHECK(tl_tier_concat_open(parts, bad, 2, "concat", &c) == TL_ERR_INVALID && c == NULL);
}

int main(void) {
    tk_setup("tl_test_tier");
    if (tk_direct_ok) printf("O_DIRECT scratch directory: %s\n", tk_dir);
    for (int i = 0; i < TK_N_KINDS; i++) test_storage(&TK_KINDS[i]);
    test_file_rules();
    test_fault();
    test_concat();
    tk_teardown();
    return tl_test_finish("test_tier");
}
