/* status.h - status codes and the per-thread error message.
 *
 * Every fallible function returns tl_status: 0 is success, negative values are errors.
 * The function that detects an error records a human-readable message with
 * tl_error_set(); callers read it with tl_last_error(). The message lives in thread-local
 * storage (like errno/dlerror), so concurrent threads never see each other's errors and
 * no context object has to be threaded through leaf helpers such as the GGUF parser.
 */
#ifndef TL_BASE_STATUS_H
#define TL_BASE_STATUS_H

#include "tierllm.h"

/* Records `st` and a printf-style message; returns `st` so callers can write
 * `return tl_error_set(TL_ERR_FORMAT, "...")`. */
tl_status tl_error_set(tl_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prepends context ("while loading x: ") to the current message; returns `st`. */
tl_status tl_error_wrap(tl_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void tl_error_clear(void);

#endif
