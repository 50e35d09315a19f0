/* test_aio.c - the async IO queue over every tier kind (tier_kinds.h) x both backends
 * (thread pool; io_uring, which serves the tiers that expose an fd and hands the rest
 * to the pool) x chunk sizes 4 KiB..1 MiB and depths 1..16: many concurrent reads and
 * writes of awkward sizes verified byte for byte, interleaved submit/wait orders, poll,
 * FIFO completion order, failing chunks (EIO, ENOSPC, truncated files) delivered with
 * their message to the waiting thread while other requests complete, short transfers,
 * close with requests outstanding, statistics, several submitting threads, bad calls,
 * and urgent reads: ahead of every queued ordinary request (in their own order among
 * themselves), no ordinary chunk starting while one is in flight, and started at once
 * in the urgent slots when ordinary chunks fill the
 * queue. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include "base/rng.h"
#include "base/clock.h"
#include "tier/aio.h"
#include "tier_kinds.h"

#define TIER_SIZE ((uint64_t)3 << 20)

static int has(const char *needle) { return strstr(tl_last_error(), needle) != NULL; }

static uint64_t rng_state = 88172645463325252ull;
static uint64_t rnd(void) {
    return tl_splitmix64(&rng_state);
}

static const tl_aio_backend BACKENDS[] = {TL_AIO_POOL, TL_AIO_URING};
static int uring_available = -1;

/* Opens a queue; NULL (and a note) if io_uring was asked for and is unavailable. */
static tl_aio *open_q(tl_aio_backend b, size_t chunk, int depth, int threads) {
    tl_aio_params p = tl_aio_default_params();
    p.backend = b;
    p.chunk_bytes = chunk;
    p.queue_depth = depth;
    p.n_threads = threads;
    tl_aio *q = NULL;
    tl_status st = tl_aio_open(&p, &q);
    if (b == TL_AIO_URING && st != TL_OK) {
        if (uring_available != 0)
            fprintf(stderr, "note: io_uring unavailable (%s); its cases skip\n",
                    tl_last_error());
        uring_available = 0;
        return NULL;
    }
    CHECK_MSG(st == TL_OK, "aio open: %s", tl_last_error());
    if (b == TL_AIO_URING) {
        uring_available = 1;
        CHECK(tl_aio_uses_uring(q) == 1);
    }
    if (b == TL_AIO_POOL) CHECK(tl_aio_uses_uring(q) == 0);
    return q;
}

typedef struct rq {
    uint64_t off;
    size_t len;
    uint8_t *buf;
    int is_write;
    unsigned seed;
} rq;

/* Random request sizes: aligned to `a`, sometimes tiny, sometimes many chunks. */
static size_t rand_len(size_t a, size_t maxlen) {
    size_t len;
    switch (rnd() % 4) {
    case 0: len = 1 + rnd() % 5000; break;
    case 1: len = 4096 * (1 + rnd() % 3); break;
    default: len = 1 + rnd() % maxlen; break;
    }
    len = (len + a - 1) / a * a;
    return len > maxlen ? maxlen / a * a : len;
}

/* One round over a tier: concurrent reads of pattern 1 everywhere; writes of pattern
 * 2+i to disjoint slots in the upper half, read back; interleaved waits. */
static void round_trip(const tk_kind *k, tl_aio_backend b, size_t chunk, int depth,
                       int threads) {
    tl_aio *q = open_q(b, chunk, depth, threads);
    if (!q) return;
    tl_tier *t = tk_open(k, TIER_SIZE, 1);
    size_t a = t->align;
    char what[160];
    snprintf(what, sizeof what, "%s %s chunk %zu depth %d threads %d", k->label,
             b == TL_AIO_URING ? "uring" : "pool", chunk, depth, threads);
    enum { NR = 24, NW = 8 };
    rq r[NR + NW];
    uint64_t bytes_r = 0, bytes_w = 0;
    size_t half = (size_t)TIER_SIZE / 2, slot = half / NW;
    /* reads in the lower half (never written), unaligned where allowed */
    for (int i = 0; i < NR; i++) {
        r[i].len = rand_len(a, 300000);
        r[i].off = rnd() % (half - r[i].len);
        r[i].off -= r[i].off % a;
        r[i].buf = tk_alloc(r[i].len);
        memset(r[i].buf, 0xEE, r[i].len);
        r[i].is_write = 0;
        r[i].seed = 1;
        bytes_r += r[i].len;
    }
    for (int i = 0; i < NW; i++) {
        rq *w = &r[NR + i];
        w->len = rand_len(a, slot - 4096);
        w->off = half + (uint64_t)i * slot + (a == 1 ? rnd() % 4096 : 4096 * (rnd() % 2));
        w->buf = tk_alloc(w->len);
        w->is_write = 1;
        w->seed = 2 + (unsigned)i;
        tk_fill(w->buf, w->off, w->len, w->seed);
        bytes_w += w->len;
    }
    /* submit in a mixed order: reads and writes interleaved */
    int order[NR + NW];
    for (int i = 0; i < NR + NW; i++) order[i] = i;
    for (int i = NR + NW - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint64_t)(i + 1)), x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    int waited[NR + NW] = {0};
    for (int n = 0; n < NR + NW; n++) {
        int i = order[n];
        tl_status st = r[i].is_write
                           ? tl_aio_write(q, t, r[i].off, r[i].buf, r[i].len, 1000 + i)
                           : tl_aio_read(q, t, r[i].off, r[i].buf, r[i].len, 1000 + i);
        CHECK_MSG(st == TL_OK, "%s: submit: %s", what, tl_last_error());
        /* every third submission, wait for a random earlier request */
        if (n % 3 == 2) {
            int j = order[rnd() % (uint64_t)(n + 1)];
            if (!waited[j]) {
                CHECK_MSG(tl_aio_wait(q, 1000 + j) == TL_OK, "%s: %s", what, tl_last_error());
                CHECK(tl_aio_poll(q, 1000 + j) == 0); /* forgotten after the wait */
                waited[j] = 1;
            }
        }
    }
    /* the rest: in reverse order, polling first */
    for (int i = NR + NW - 1; i >= 0; i--) {
        if (waited[i]) continue;
        (void)tl_aio_poll(q, 1000 + i);
        CHECK_MSG(tl_aio_wait(q, 1000 + i) == TL_OK, "%s: %s", what, tl_last_error());
    }
    for (int i = 0; i < NR; i++) {
        long bad = tk_mismatch(r[i].buf, r[i].off, r[i].len, 1);
        CHECK_MSG(bad < 0, "%s: read %d (%zu at %llu) differs at %ld", what, i, r[i].len,
                  (unsigned long long)r[i].off, bad);
    }
    /* read the writes back through the queue, and directly */
    for (int i = NR; i < NR + NW; i++) {
        memset(r[i].buf, 0, r[i].len);
        CHECK(tl_aio_read(q, t, r[i].off, r[i].buf, r[i].len, 5000 + i) == TL_OK);
    }
    for (int i = NR; i < NR + NW; i++) {
        CHECK_MSG(tl_aio_wait(q, 5000 + i) == TL_OK, "%s: %s", what, tl_last_error());
        long bad = tk_mismatch(r[i].buf, r[i].off, r[i].len, r[i].seed);
        CHECK_MSG(bad < 0, "%s: write %d differs at %ld", what, i - NR, bad);
        bytes_r += r[i].len;
    }
    tl_aio_stats s;
    tl_aio_get_stats(q, &s);
    CHECK_MSG(s.bytes_read == bytes_r && s.bytes_written == bytes_w &&
                  s.requests == NR + 2 * NW,
              "%s: stats %llu/%llu read, %llu/%llu written, %llu requests", what,
              (unsigned long long)s.bytes_read, (unsigned long long)bytes_r,
              (unsigned long long)s.bytes_written, (unsigned long long)bytes_w,
              (unsigned long long)s.requests);
    CHECK(s.read_busy_s > 0 && s.write_busy_s > 0);
    tl_aio_close(q);
    uint8_t *chk = tk_alloc(slot);
    for (int i = NR; i < NR + NW; i++) {
        CHECK(tl_tier_read_full(t, r[i].off, chk, r[i].len) == TL_OK);
        CHECK(tk_mismatch(chk, r[i].off, r[i].len, r[i].seed) < 0);
    }
    free(chk);
    for (int i = 0; i < NR + NW; i++) free(r[i].buf);
    tl_tier_close(t);
}

static tl_tier *fault_mem(const tl_fault_spec *spec, uint64_t size) {
    tl_tier *m, *f = NULL;
    CHECK(tl_tier_mem_open(size, &m) == TL_OK);
    tk_fill(tl_tier_mem_data(m), 0, (size_t)size, 1);
    CHECK(tl_tier_fault_open(m, spec, &f) == TL_OK);
    return f;
}

/* A request whose 5th chunk fails; requests on other tiers (one through io_uring when
 * the backend has it) and a later one on the faulty tier complete. */
static void test_failures(tl_aio_backend b) {
    tl_aio *q = open_q(b, 4096, 4, 3);
    if (!q) return;
    tl_fault_spec spec = {0};
    spec.fail_call = 5;
    spec.fail_errno = EIO;
    tl_tier *bad = fault_mem(&spec, 1 << 20);
    tk_kind fk = {"file", 1, 0, 0};
    tl_tier *good = tk_open(&fk, 1 << 20, 1);
    size_t len = 65536;
    uint8_t *b1 = tk_alloc(len), *b2 = tk_alloc(len), *b3 = tk_alloc(len), *b4 = tk_alloc(len);
    CHECK(tl_aio_read(q, good, 0, b1, len, 1) == TL_OK);
    CHECK(tl_aio_read(q, bad, 0, b2, len, 2) == TL_OK); /* 16 chunks; call 5 fails */
    CHECK(tl_aio_read(q, good, 65536, b3, len, 3) == TL_OK);
    CHECK(tl_aio_read(q, bad, 131072, b4, len, 4) == TL_OK);
    tl_error_clear();
    CHECK(tl_aio_wait(q, 2) == TL_ERR_IO);
    CHECK_MSG(has("injected") && has("tag 2") && has("fault(memory)"), "got: %s",
              tl_last_error());
    CHECK(tl_aio_wait(q, 4) == TL_OK && tk_mismatch(b4, 131072, len, 1) < 0);
    CHECK(tl_aio_wait(q, 1) == TL_OK && tk_mismatch(b1, 0, len, 1) < 0);
    CHECK(tl_aio_wait(q, 3) == TL_OK && tk_mismatch(b3, 65536, len, 1) < 0);
    CHECK(tl_tier_fault_calls(bad) <= 16 + 16); /* the failed request's rest is dropped */
    tl_tier_close(bad);

    /* sticky: every later request on the tier fails too, and says so */
    spec.sticky = 1;
    spec.fail_call = 3;
    bad = fault_mem(&spec, 1 << 20);
    for (int i = 0; i < 4; i++) CHECK(tl_aio_read(q, bad, 0, b2, len, 10 + i) == TL_OK);
    CHECK(tl_aio_read(q, good, 0, b1, len, 20) == TL_OK);
    for (int i = 0; i < 4; i++) {
        tl_status st = tl_aio_wait(q, 10 + i);
        CHECK(i == 0 ? st == TL_ERR_IO : st == TL_ERR_IO && has("injected"));
    }
    CHECK(tl_aio_wait(q, 20) == TL_OK);
    tl_tier_close(bad);

    /* ENOSPC on writes: TL_ERR_NOSPACE */
    spec = (tl_fault_spec){0};
    spec.fail_call = 2;
    spec.fail_errno = ENOSPC;
    spec.fail_writes_only = 1;
    bad = fault_mem(&spec, 1 << 20);
    CHECK(tl_aio_write(q, bad, 0, b1, len, 30) == TL_OK);
    tl_error_clear();
    CHECK(tl_aio_wait(q, 30) == TL_ERR_NOSPACE);
    CHECK_MSG(has("injected") && has("ENOSPC"), "got: %s", tl_last_error());
    tl_tier_close(bad);

    /* a read past the end of the file (an O_DIRECT read widened to the alignment) is
     * zero-filled beyond the end; a file that shrank under us is a "truncated" error */
    const char *path = tk_new_path("short");
    tk_write_file(path, 10000, 1);
    tl_tier *ro = NULL;
    CHECK(tl_tier_file_open(path, 0, &ro) == TL_OK);
    memset(b1, 0xff, len);
    CHECK(tl_aio_read(q, ro, 0, b1, 12288, 40) == TL_OK);
    CHECK(tl_aio_read(q, ro, 0, b2, 8192, 41) == TL_OK);
    CHECK(tl_aio_wait(q, 40) == TL_OK);
    CHECK(tk_mismatch(b1, 0, 10000, 1) < 0);
    int zeros = 1;
    for (size_t i = 10000; i < 12288; i++) zeros &= b1[i] == 0;
    CHECK(zeros);
    CHECK(tl_aio_wait(q, 41) == TL_OK && tk_mismatch(b2, 0, 8192, 1) < 0);
    CHECK(truncate(path, 5000) == 0);
    CHECK(tl_aio_read(q, ro, 0, b1, 8192, 44) == TL_OK);
    tl_error_clear();
    CHECK(tl_aio_wait(q, 44) == TL_ERR_IO);
    CHECK_MSG(has("truncated") && has(path), "got: %s", tl_last_error());
    tk_write_file(path, 10000, 1);
    /* the whole file, unaligned length: fine */
    CHECK(tl_aio_read(q, ro, 0, b1, 10000, 42) == TL_OK);
    CHECK(tl_aio_wait(q, 42) == TL_OK && tk_mismatch(b1, 0, 10000, 1) < 0);
    /* a read-only tier refuses writes at submission */
    CHECK(tl_aio_write(q, ro, 0, b1, 4096, 43) == TL_ERR_INVALID && has("read-only"));
    CHECK(tl_aio_poll(q, 43) == 0);
    tl_tier_close(ro);

    tl_aio_close(q);
    tl_tier_close(good);
    free(b1);
    free(b2);
    free(b3);
    free(b4);
}

/* Poll, FIFO completion order, close with requests outstanding, busy time. */
static void test_order_poll_close(tl_aio_backend b) {
    tl_fault_spec spec = {0};
    spec.latency_s = 0.01;
    tl_tier *slow = fault_mem(&spec, 1 << 20);
    uint8_t *buf = tk_alloc(1 << 20);

    /* poll: not done while the (slow) chunk runs, done before the wait */
    tl_aio *q = open_q(b, 4096, 1, 1);
    if (!q) {
        free(buf);
        tl_tier_close(slow);
        return;
    }
    CHECK(tl_aio_poll(q, 7) == 0); /* unknown */
    CHECK(tl_aio_read(q, slow, 0, buf, 4 * 4096, 1) == TL_OK);
    CHECK(tl_aio_read(q, slow, 65536, buf + 65536, 4096, 2) == TL_OK);
    CHECK(tl_aio_poll(q, 1) == 0);
    CHECK(tl_aio_wait(q, 2) == TL_OK); /* FIFO: 1 finished before 2 started */
    CHECK(tl_aio_poll(q, 1) == 1);
    CHECK(tl_aio_wait(q, 1) == TL_OK && tk_mismatch(buf, 0, 4 * 4096, 1) < 0);
    tl_aio_stats s;
    tl_aio_get_stats(q, &s);
    CHECK_MSG(s.read_busy_s >= 0.045 && s.write_busy_s == 0, "busy %g", s.read_busy_s);
    CHECK(s.bytes_read == 5 * 4096 && s.requests == 2);

    /* FIFO through io_uring too: depth 1 on a file */
    tk_kind fk = {"file", 1, 0, 0};
    tl_tier *f = tk_open(&fk, 1 << 20, 1);
    for (int i = 0; i < 8; i++)
        CHECK(tl_aio_read(q, f, (uint64_t)i * 131072, buf + i * 131072, 131072, 100 + i) ==
              TL_OK);
    CHECK(tl_aio_wait(q, 107) == TL_OK);
    for (int i = 0; i < 7; i++) CHECK(tl_aio_poll(q, 100 + i) == 1);
    for (int i = 0; i < 7; i++) CHECK(tl_aio_wait(q, 100 + i) == TL_OK);
    CHECK(tk_mismatch(buf, 0, 1 << 20, 1) < 0);

    /* close with requests outstanding: returns after they drain, frees them */
    for (int i = 0; i < 6; i++)
        CHECK(tl_aio_read(q, slow, (uint64_t)i * 8192, buf + i * 8192, 8192, 200 + i) ==
              TL_OK);
    CHECK(tl_aio_read(q, f, 0, buf + 65536, 65536, 300) == TL_OK);
    CHECK(tl_aio_wait(q, 200) == TL_OK);
    double t0 = tl_now();
    tl_aio_close(q);
    CHECK(tl_now() - t0 < 5);

    /* the same with a deep queue and a file through io_uring; each read has a buffer of
     * its own, since reads in flight together into one buffer would race */
    uint8_t *deep = tk_alloc(64 * 65536);
    q = open_q(b, 8192, 16, 4);
    for (int i = 0; q && i < 64; i++)
        CHECK(tl_aio_read(q, f, (uint64_t)(i % 16) * 65536, deep + i * 65536, 65536,
                          400 + i) == TL_OK);
    uint8_t *wbuf = tk_alloc(65536); /* not a buffer the reads are filling */
    memset(wbuf, 0x5A, 65536);
    if (q) CHECK(tl_aio_write(q, slow, 0, wbuf, 65536, 999) == TL_OK);
    tl_aio_close(q);
    tl_aio_close(NULL);
    free(wbuf);
    free(deep);
    tl_tier_close(f);
    tl_tier_close(slow);
    free(buf);
}

/* A tier whose reads wait until the test opens its gate, then read the memory tier it
 * wraps: a read that must still be in flight (or not yet started) when the test looks
 * stays so however slowly a sanitizer build beside other tests runs. */
typedef struct gated {
    tl_tier base;
    tl_tier *inner;
    atomic_int open;
    atomic_int entered; /* reads begun */
} gated;

static tl_status gated_read(tl_tier *t, uint64_t offset, void *dst, size_t len, size_t *done) {
    gated *g = (gated *)t;
    const struct timespec ms = {0, 1000 * 1000};
    atomic_fetch_add(&g->entered, 1);
    while (!atomic_load(&g->open)) nanosleep(&ms, NULL);
    return g->inner->ops->read_at(g->inner, offset, dst, len, done);
}
static tl_status gated_write(tl_tier *t, uint64_t offset, const void *src, size_t len,
                             size_t *done) {
    (void)t, (void)offset, (void)src, (void)len, (void)done;
    return TL_ERR_IO;
}
static void gated_close(tl_tier *t) {
    tl_tier_close(((gated *)t)->inner);
    free(t);
}
static const tl_tier_ops gated_ops = {gated_read, gated_write, gated_close, NULL};

/* A gated copy of the test pattern (tk_fill, seed 1) of `size` bytes, its gate shut. */
static tl_tier *gated_mem(uint64_t size) {
    gated *g = calloc(1, sizeof *g);
    CHECK(g != NULL);
    if (!g) return NULL;
    CHECK(tl_tier_mem_open(size, &g->inner) == TL_OK);
    tk_fill(tl_tier_mem_data(g->inner), 0, (size_t)size, 1);
    g->base = (tl_tier){&gated_ops, "gated", size, 1, -1, 0};
    atomic_init(&g->open, 0);
    atomic_init(&g->entered, 0);
    return &g->base;
}
static void gate_open(tl_tier *t) { atomic_store(&((gated *)t)->open, 1); }
/* Returns once a read has begun on t: the queue's thread is then busy on it, and reads
 * queued after it cannot overtake it (one queued before the thread took it would). */
static void gate_wait_entered(tl_tier *t) {
    const struct timespec ms = {0, 1000 * 1000};
    while (!atomic_load(&((gated *)t)->entered)) nanosleep(&ms, NULL);
}

/* Urgent reads (tl_aio_read_urgent) and the read classes (tl_aio_read_class) on a slow
 * tier (10 ms per call, 4 KiB chunks). */
static void test_urgent(void) {
    tl_fault_spec spec = {0};
    spec.latency_s = 0.01;
    tl_tier *slow = fault_mem(&spec, 1 << 20);
    /* held: the one thread is busy on it until every other read is queued; lag: a read
     * the one thread starts just as the awaited one completes, not finished when polled */
    tl_tier *held = gated_mem(1 << 20), *lag = gated_mem(1 << 20);
    uint8_t *buf = tk_alloc(1 << 20);

    /* one thread, depth 1: the urgent ones run next, in their order, then the rest */
    tl_aio *q = open_q(TL_AIO_POOL, 4096, 1, 1);
    CHECK(tl_aio_read(q, held, 0, buf, 4096, 1) == TL_OK);
    gate_wait_entered(held); /* in flight */
    for (int i = 0; i < 3; i++)
        CHECK(tl_aio_read(q, lag, (uint64_t)(1 + i) * 4096, buf + (1 + i) * 4096, 4096, 2 + i) ==
              TL_OK);
    CHECK(tl_aio_read_urgent(q, slow, 8 * 4096, buf + 8 * 4096, 4096, 10) == TL_OK);
    CHECK(tl_aio_read(q, lag, 9 * 4096, buf + 9 * 4096, 4096, 11) == TL_OK);
    CHECK(tl_aio_read_urgent(q, slow, 10 * 4096, buf + 10 * 4096, 4096, 12) == TL_OK);
    gate_open(held);
    CHECK(tl_aio_wait(q, 12) == TL_OK);
    CHECK(tl_aio_poll(q, 10) == 1); /* urgent, submitted first */
    for (uint64_t t = 2; t <= 4; t++) CHECK_MSG(tl_aio_poll(q, t) == 0, "tag %d done", (int)t);
    CHECK(tl_aio_poll(q, 11) == 0);
    gate_open(lag);
    for (uint64_t t = 1; t <= 11; t++) /* 12 was waited for */
        if (t <= 4 || t >= 10) CHECK(tl_aio_wait(q, t) == TL_OK);
    CHECK(tk_mismatch(buf, 0, 4 * 4096, 1) < 0 && tk_mismatch(buf + 8 * 4096, 8 * 4096, 3 * 4096, 1) < 0);
    tl_aio_close(q);
    tl_tier_close(held);
    tl_tier_close(lag);

    /* classes: a read needed now goes ahead of queued urgent ones (each class in its own
     * order), urgent ones ahead of ordinary ones; a bad class is refused. last: the
     * ordinary read, still queued or in flight once the urgent ones are done */
    tl_tier *last = gated_mem(1 << 20);
    held = gated_mem(1 << 20), lag = gated_mem(1 << 20);
    q = open_q(TL_AIO_POOL, 4096, 1, 1);
    CHECK(tl_aio_read(q, held, 0, buf, 4096, 1) == TL_OK);
    gate_wait_entered(held); /* in flight */
    CHECK(tl_aio_read(q, last, 4096, buf + 4096, 4096, 2) == TL_OK);
    CHECK(tl_aio_read_class(q, lag, 2 * 4096, buf + 2 * 4096, 4096, 3, TL_AIO_SOON) == TL_OK);
    CHECK(tl_aio_read_class(q, lag, 3 * 4096, buf + 3 * 4096, 4096, 4, TL_AIO_SOON) == TL_OK);
    CHECK(tl_aio_read_class(q, slow, 4 * 4096, buf + 4 * 4096, 4096, 5, TL_AIO_NOW) == TL_OK);
    CHECK(tl_aio_read_class(q, slow, 5 * 4096, buf + 5 * 4096, 4096, 6, TL_AIO_NOW) == TL_OK);
    CHECK(tl_aio_read_class(q, slow, 6 * 4096, buf + 6 * 4096, 4096, 7, TL_AIO_SOON) == TL_OK);
    CHECK(tl_aio_read_class(q, slow, 0, buf, 4096, 8, (tl_aio_class)3) == TL_ERR_INVALID);
    CHECK(tl_aio_read_class(q, slow, 0, buf, 4096, 8, (tl_aio_class)-1) == TL_ERR_INVALID);
    gate_open(held);
    CHECK(tl_aio_wait(q, 6) == TL_OK); /* the second read needed now */
    CHECK(tl_aio_poll(q, 5) == 1);
    for (uint64_t t = 2; t <= 4; t++) CHECK_MSG(tl_aio_poll(q, t) == 0, "tag %d done", (int)t);
    CHECK(tl_aio_poll(q, 7) == 0);
    gate_open(lag);
    CHECK(tl_aio_wait(q, 7) == TL_OK); /* the last urgent one: the others urgent are done */
    CHECK(tl_aio_poll(q, 3) == 1 && tl_aio_poll(q, 4) == 1 && tl_aio_poll(q, 2) == 0);
    gate_open(last);
    for (uint64_t t = 1; t <= 5; t++) CHECK(tl_aio_wait(q, t) == TL_OK);
    CHECK(tk_mismatch(buf, 0, 7 * 4096, 1) < 0);
    tl_aio_close(q);
    tl_tier_close(held);
    tl_tier_close(lag);
    tl_tier_close(last);

    /* depth 1 with threads for the urgent slots: an urgent read does not wait for the
     * ordinary chunk in flight (0.5 s) */
    tl_fault_spec very = {0};
    very.latency_s = 0.5;
    tl_tier *very_slow = fault_mem(&very, 1 << 20), *fast = fault_mem(&(tl_fault_spec){0}, 1 << 20);
    q = open_q(TL_AIO_POOL, 1 << 20, 1, 3);
    CHECK(tl_aio_read(q, very_slow, 0, buf, 4096, 20) == TL_OK);
    CHECK(tl_aio_read(q, very_slow, 4096, buf + 4096, 4096, 21) == TL_OK);
    double t0 = tl_now();
    CHECK(tl_aio_read_urgent(q, fast, 16 * 4096, buf + 16 * 4096, 4096, 22) == TL_OK);
    CHECK(tl_aio_wait(q, 22) == TL_OK);
    double waited = tl_now() - t0;
    CHECK_MSG(waited < 0.25, "the urgent read waited %.3f s", waited);
    CHECK(tl_aio_wait(q, 20) == TL_OK && tl_aio_wait(q, 21) == TL_OK);
    CHECK(tk_mismatch(buf, 0, 2 * 4096, 1) < 0 && tk_mismatch(buf + 16 * 4096, 16 * 4096, 4096, 1) < 0);
    tl_aio_close(q);

    /* while an urgent read is in flight no ordinary chunk starts, though the depth has
     * room: a virtual disk served a 32 KiB read behind a stream of 1 MiB chunks kept
     * refilled in 33-55 ms, and in 2 ms when the stream held back */
    tl_fault_spec mid = {0};
    mid.latency_s = 0.3;
    tl_tier *mid_slow = fault_mem(&mid, 1 << 20);
    q = open_q(TL_AIO_POOL, 1 << 20, 2, 3);
    CHECK(tl_aio_read_urgent(q, mid_slow, 0, buf, 4096, 30) == TL_OK);
    CHECK(tl_aio_read(q, fast, 4096, buf + 4096, 4096, 31) == TL_OK);
    struct timespec nap = {0, 100 * 1000 * 1000};
    nanosleep(&nap, NULL);
    CHECK_MSG(tl_aio_poll(q, 31) == 0, "an ordinary read ran beside an urgent one");
    CHECK(tl_aio_wait(q, 31) == TL_OK);
    CHECK(tl_aio_poll(q, 30) == 1); /* it started only after the urgent one finished */
    CHECK(tl_aio_wait(q, 30) == TL_OK);
    /* and the ordinary stream resumes at its full depth afterwards */
    CHECK(tl_aio_read(q, mid_slow, 8192, buf + 8192, 4096, 32) == TL_OK);
    CHECK(tl_aio_read(q, mid_slow, 12288, buf + 12288, 4096, 33) == TL_OK);
    t0 = tl_now();
    CHECK(tl_aio_wait(q, 32) == TL_OK && tl_aio_wait(q, 33) == TL_OK);
    CHECK_MSG(tl_now() - t0 < 0.5, "two ordinary reads at depth 2 took %.3f s", tl_now() - t0);
    CHECK(tk_mismatch(buf, 0, 4 * 4096, 1) < 0);
    tl_aio_close(q);
    tl_tier_close(mid_slow);
    tl_tier_close(very_slow);
    tl_tier_close(fast);
    tl_tier_close(slow);
    free(buf);
}

typedef struct worker_arg {
    tl_aio *q;
    tl_tier *t;
    int id, bad;
} worker_arg;

/* Several threads submit and wait on one queue; errors reach the right thread. */
static void *worker(void *arg) {
    worker_arg *w = arg;
    size_t len = 20000;
    uint8_t *buf = malloc(len * 4);
    for (int round = 0; round < 25; round++) {
        for (int j = 0; j < 4; j++) {
            uint64_t off = (uint64_t)((w->id * 7 + round * 3 + j) % 40) * 20000;
            uint64_t tag = ((uint64_t)w->id << 32) | (uint64_t)(round * 4 + j);
            if (tl_aio_read(w->q, w->t, off, buf + j * len, len, tag) != TL_OK) w->bad++;
        }
        for (int j = 0; j < 4; j++) {
            uint64_t off = (uint64_t)((w->id * 7 + round * 3 + j) % 40) * 20000;
            uint64_t tag = ((uint64_t)w->id << 32) | (uint64_t)(round * 4 + j);
            if (tl_aio_wait(w->q, tag) != TL_OK || tk_mismatch(buf + j * len, off, len, 1) >= 0)
                w->bad++;
        }
    }
    free(buf);
    return NULL;
}

static void test_threads(tl_aio_backend b) {
    tl_aio *q = open_q(b, 4096, 6, 3);
    if (!q) return;
    tk_kind fk = {"file", 1, 0, 0};
    tl_tier *t = tk_open(&fk, 1 << 20, 1);
    pthread_t th[4];
    worker_arg wa[4];
    for (int i = 0; i < 4; i++) {
        wa[i] = (worker_arg){q, t, i, 0};
        pthread_create(&th[i], NULL, worker, &wa[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(wa[i].bad == 0, "worker %d: %d bad", i, wa[i].bad);
    }
    tl_aio_close(q);
    tl_tier_close(t);
}

static void test_bad_calls(void) {
    tl_aio_params p = tl_aio_default_params();
    CHECK(p.queue_depth == 8 && p.chunk_bytes == (1u << 20) && p.backend == TL_AIO_AUTO);
    tl_aio *q = NULL;
    p.chunk_bytes = 1000;
    CHECK(tl_aio_open(&p, &q) == TL_ERR_INVALID && q == NULL);
    p = tl_aio_default_params();
    p.queue_depth = -1;
    CHECK(tl_aio_open(&p, &q) == TL_ERR_INVALID);
    CHECK(tl_aio_open(NULL, &q) == TL_OK); /* defaults, AUTO */
    CHECK(tl_aio_uses_uring(q) == (uring_available == 1));
    tl_tier *m;
    CHECK(tl_tier_mem_open(65536, &m) == TL_OK);
    uint8_t *buf = tk_alloc(65536);
    CHECK(tl_aio_wait(q, 12345) == TL_ERR_INVALID && has("unknown"));
    CHECK(tl_aio_read(q, m, 0, buf, 4096, 1) == TL_OK);
    CHECK(tl_aio_read(q, m, 0, buf, 4096, 1) == TL_ERR_INVALID && has("in use"));
    CHECK(tl_aio_wait(q, 1) == TL_OK);
    CHECK(tl_aio_wait(q, 1) == TL_ERR_INVALID);
    CHECK(tl_aio_read(q, m, 0, buf, 0, 2) == TL_OK); /* empty: done at once */
    CHECK(tl_aio_poll(q, 2) == 1 && tl_aio_wait(q, 2) == TL_OK);
    CHECK(tl_aio_read(q, NULL, 0, buf, 4096, 3) == TL_ERR_INVALID);
    CHECK(tl_aio_read(q, m, UINT64_MAX - 10, buf, 4096, 3) == TL_ERR_INVALID);
    tk_kind dk = {"file-direct", 2, 0, 0};
    tl_tier *d = tk_open(&dk, 65536, 1);
    if (d->align > 1) {
        CHECK(tl_aio_read(q, d, 100, buf, 4096, 4) == TL_ERR_INVALID && has("align"));
        CHECK(tl_aio_read(q, d, 0, buf + 8, 4096, 4) == TL_ERR_INVALID);
        CHECK(tl_aio_read(q, d, 0, buf, 4000, 4) == TL_ERR_INVALID);
    }
    CHECK(tl_aio_read(q, d, 0, buf, 65536, 5) == TL_OK);
    CHECK(tl_aio_wait(q, 5) == TL_OK && tk_mismatch(buf, 0, 65536, 1) < 0);
    tl_aio_close(q);
    tl_tier_close(d);
    tl_tier_close(m);
    free(buf);
}

int main(void) {
    test_urgent();
    tk_setup("tl_test_aio");
    static const struct { size_t chunk; int depth, threads; } cfg[] = {
        {4096, 1, 1}, {8192, 3, 2}, {12288, 16, 0}, {65536, 5, 8}, {1 << 20, 2, 3},
    };
    double t0 = tl_now();
    for (int b = 0; b < 2; b++)
        for (int k = 0; k < TK_N_KINDS; k++)
            for (int c = 0; c < 5; c++)
                round_trip(&TK_KINDS[k], BACKENDS[b], cfg[c].chunk, cfg[c].depth,
                           cfg[c].threads);
    printf("round trips: %.2f s (io_uring %s)\n", tl_now() - t0,
           uring_available == 1 ? "used" : "unavailable");
    for (int b = 0; b < 2; b++) {
        test_failures(BACKENDS[b]);
        test_order_poll_close(BACKENDS[b]);
        test_threads(BACKENDS[b]);
    }
    test_bad_calls();
    tk_teardown();
    return tl_test_finish("test_aio");
}
