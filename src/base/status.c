/* status.c - status names and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "base/status.h"

static _Thread_local char tl_err_msg[1024];

const char *tl_status_str(tl_status st) {
    switch (st) {
    case TL_OK: return "TL_OK";
    case TL_ERR_INVALID: return "TL_ERR_INVALID";
    case TL_ERR_IO: return "TL_ERR_IO";
    case TL_ERR_FORMAT: return "TL_ERR_FORMAT";
    case TL_ERR_UNSUPPORTED: return "TL_ERR_UNSUPPORTED";
    case TL_ERR_NOMEM: return "TL_ERR_NOMEM";
    case TL_ERR_CONTEXT: return "TL_ERR_CONTEXT";
    case TL_ERR_NOSPACE: return "TL_ERR_NOSPACE";
    case TL_ERR_CANCELLED: return "TL_ERR_CANCELLED";
    case TL_ERR_BUSY: return "TL_ERR_BUSY";
    }
    return "TL_ERR_UNKNOWN";
}

const char *tl_last_error(void) { return tl_err_msg; }

void tl_error_clear(void) { tl_err_msg[0] = 0; }

tl_status tl_error_set(tl_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_err_msg, sizeof tl_err_msg, fmt, ap);
    va_end(ap);
    return st;
}

tl_status tl_error_wrap(tl_status st, const char *fmt, ...) {
    char prefix[512], old[sizeof tl_err_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tl_err_msg, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof tl_err_msg - 3) n = sizeof tl_err_msg - 3;
    memcpy(tl_err_msg, prefix, n);
    memcpy(tl_err_msg + n, ": ", 2);
    size_t room = sizeof tl_err_msg - n - 3;
    size_t m = strnlen(old, room);
    memcpy(tl_err_msg + n + 2, old, m);
    tl_err_msg[n + 2 + m] = 0;
    return st;
}
