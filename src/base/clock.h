/* clock.h - monotonic wall-clock seconds. */
#ifndef TL_BASE_CLOCK_H
#define TL_BASE_CLOCK_H
#include <time.h>
static inline double tl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
#endif
