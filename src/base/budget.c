/* budget.c - see budget.h. Each block carries a 64-byte header before the returned
 * pointer holding its size and the start of the raw allocation, so free needs no table.
 *
 * Large blocks (weights, layer buffers, KV) ask the kernel for transparent huge pages
 * over their 2 MiB-aligned interior. Decode streams every weight once per token, and
 * with 4 KiB pages each page is a TLB miss and a page walk, a cost a 2 MiB page pays
 * once for 512 of them; memory-bound matmuls read their weights faster so. The advice
 * changes no sizes (the block is still exactly `total` bytes of the budget) and is
 * ignored where THP is off. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "base/budget.h"
#include "base/status.h"

struct tl_budget {
    pthread_mutex_t lock;
    uint64_t limit, used, peak;
};

typedef struct header { void *raw; size_t size; } header;

tl_status tl_budget_open(uint64_t limit_bytes, tl_budget **out) {
    tl_budget *b = calloc(1, sizeof *b);
    if (!b) return tl_error_set(TL_ERR_NOMEM, "budget: out of memory");
    pthread_mutex_init(&b->lock, NULL);
    b->limit = limit_bytes;
    *out = b;
    return TL_OK;
}

void tl_budget_close(tl_budget *b) {
    if (!b) return;
    pthread_mutex_destroy(&b->lock);
    free(b);
}

#define HUGE_PAGE ((uintptr_t)2 << 20)
#define HUGE_MIN ((size_t)4 << 20)

void tl_advise_huge_pages(void *raw, size_t total) {
#ifdef MADV_HUGEPAGE
    if (total < HUGE_MIN) return;
    uintptr_t start = ((uintptr_t)raw + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uintptr_t end = ((uintptr_t)raw + total) & ~(HUGE_PAGE - 1);
    if (end > start) (void)madvise((void *)start, end - start, MADV_HUGEPAGE); /* a hint */
#else
    (void)raw, (void)total;
#endif
}

static int reserve(tl_budget *b, uint64_t n) {
    int ok;
    pthread_mutex_lock(&b->lock);
    ok = b->limit == 0 || (b->used <= b->limit && n <= b->limit - b->used);
    if (ok) {
        b->used += n;
        if (b->used > b->peak) b->peak = b->used;
    }
    pthread_mutex_unlock(&b->lock);
    return ok;
}

static void release(tl_budget *b, uint64_t n) {
    pthread_mutex_lock(&b->lock);
    b->used -= n;
    pthread_mutex_unlock(&b->lock);
}

tl_status tl_budget_alloc(tl_budget *b, size_t size, size_t align, const char *what,
                          void **out) {
    *out = NULL;
    if (align < 64) align = 64;
    if ((align & (align - 1)) != 0)
        return tl_error_set(TL_ERR_INVALID, "budget: alignment %zu is not a power of two", align);
    if (size > SIZE_MAX - 2 * align)
        return tl_error_set(TL_ERR_NOMEM, "cannot allocate %zu bytes for %s", size, what);
    size_t total = size + align; /* room for the header and the alignment shift */
    if (!reserve(b, total))
        return tl_error_set(TL_ERR_NOMEM, "memory budget exceeded: %s needs %.1f MiB, %.1f MiB "
                            "of the %.1f MiB budget are in use", what, tl_mib_up(total),
                            tl_budget_used(b) / 1048576.0, b->limit / 1048576.0);
    void *raw = malloc(total);
    if (!raw) {
        release(b, total);
        return tl_error_set(TL_ERR_NOMEM, "out of memory allocating %.1f MiB for %s",
                            size / 1048576.0, what);
    }
    tl_advise_huge_pages(raw, total);
    uintptr_t p = ((uintptr_t)raw + sizeof(header) + align - 1) & ~(uintptr_t)(align - 1);
    header h = {raw, total};
    memcpy((char *)p - sizeof h, &h, sizeof h);
    *out = (void *)p;
    return TL_OK;
}

tl_status tl_budget_calloc(tl_budget *b, size_t size, const char *what, void **out) {
    tl_status st = tl_budget_alloc(b, size, 64, what, out);
    if (!st) memset(*out, 0, size);
    return st;
}

void tl_budget_free(tl_budget *b, void *ptr) {
    if (!ptr) return;
    header h;
    memcpy(&h, (char *)ptr - sizeof h, sizeof h);
    release(b, h.size);
    free(h.raw);
}

uint64_t tl_budget_limit(const tl_budget *b) { return b->limit; }

uint64_t tl_budget_used(const tl_budget *b) {
    tl_budget *m = (tl_budget *)b;
    pthread_mutex_lock(&m->lock);
    uint64_t u = m->used;
    pthread_mutex_unlock(&m->lock);
    return u;
}

uint64_t tl_budget_peak(const tl_budget *b) {
    tl_budget *m = (tl_budget *)b;
    pthread_mutex_lock(&m->lock);
    uint64_t u = m->peak;
    pthread_mutex_unlock(&m->lock);
    return u;
}

double tl_mib_up(uint64_t bytes) {
    const uint64_t mib = (uint64_t)1 << 20;
    /* in tenths of a MiB, exactly: the remainder's tenths cannot overflow */
    const uint64_t tenths = bytes / mib * 10 + (bytes % mib * 10 + mib - 1) / mib;
    return (double)tenths / 10.0;
}
