/* heldout.h - bench_costmodel --heldout (heldout.c says what it draws and reports). */
#ifndef TL_BENCH_HELDOUT_H
#define TL_BENCH_HELDOUT_H

#include <stdint.h>
#include "plan/profile.h"

/* Draws n configurations from seed, plans and runs each; models go in dir (removed after
 * each unless keep). Returns an exit code. */
int heldout_run(int n, uint64_t seed, const char *dir, const tl_hw_profile *prof, int keep);

#endif
