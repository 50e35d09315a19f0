/* budget.h - the accounting allocator: every large buffer of the engine comes from here.
 *
 * A budget has a byte limit (0 = unlimited); allocations that would take the total over
 * the limit fail with TL_ERR_NOMEM and a message naming what was being allocated, so
 * "out of memory" is testable and the peak never exceeds what the user allowed.
 * Buffers are 64-byte aligned (4096 when asked, for O_DIRECT). Thread-safe.
 */
#ifndef TL_BASE_BUDGET_H
#define TL_BASE_BUDGET_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"

typedef struct tl_budget tl_budget;

tl_status tl_budget_open(uint64_t limit_bytes, tl_budget **out);
void tl_budget_close(tl_budget *b);

/* Allocates `size` bytes aligned to `align` (a power of two >= 64; 0 means 64). The
 * memory is uninitialised. `what` names the buffer in the error message. */
tl_status tl_budget_alloc(tl_budget *b, size_t size, size_t align, const char *what,
                          void **out);
/* As tl_budget_alloc, zero-filled. */
tl_status tl_budget_calloc(tl_budget *b, size_t size, const char *what, void **out);
void tl_budget_free(tl_budget *b, void *ptr);

/* Asks for transparent huge pages over the 2 MiB-aligned interior of [p, p + bytes) when
 * bytes >= 4 MiB (a hint, ignored where THP is off). Budget blocks get it; so does any
 * buffer that must stream like the weights do (the bandwidth probe). */
void tl_advise_huge_pages(void *p, size_t bytes);

/* `bytes` in MiB rounded up to the next 0.1 MiB, for messages that state a minimum with
 * "%.1f MiB": passing the printed figure back as a size ("136.1M") gives at least `bytes`. */
double tl_mib_up(uint64_t bytes);

uint64_t tl_budget_limit(const tl_budget *b);
uint64_t tl_budget_used(const tl_budget *b);
uint64_t tl_budget_peak(const tl_budget *b);

#endif
