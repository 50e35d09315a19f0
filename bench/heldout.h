/* heldout.h - bench_costmodel --heldout (heldout.c says what it draws and reports). */
#ifndef TL_BENCH_HELDOUT_H
#define TL_BENCH_HELDOUT_H

#include <stdint.h>
#include "plan/profile.h"

/* Draws n configurations from seed, plans and runs each; models go in dir (removed after
 * each unless keep). decide_cap_s > 0: the decision half (decide.h) for every
 * configuration whose planned run measured at most that many seconds. only >= 0: that
 * configuration of the draw alone. list_only: print the draw's configurations, nothing
 * synthesized or run (prof may be NULL). Returns an exit code. */
int heldout_run(int n, uint64_t seed, const char *dir, const tl_hw_profile *prof, int keep,
                double decide_cap_s, int only, int list_only);

#endif
