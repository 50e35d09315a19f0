/* decide.h - the decision half of bench_costmodel --heldout (decide.c says what it runs). */
#ifndef TL_BENCH_DECIDE_H
#define TL_BENCH_DECIDE_H

#include <stdint.h>
#include "plan_case.h"

typedef struct decision {
    int decided;            /* 1: the candidates ran */
    int n_cands;
    double chosen_s, best_s; /* measured medians: the chosen policy's, the fastest one's */
    double naive_s;          /* the faster naive policy's measured median (0: none ran) */
} decision;

/* Runs the planner's choice for case c (planned as `planned`, on its profile), the next
 * two best predicted, two naive policies and two random feasible ones, interleaved in
 * three rounds; prints each one's prediction and measured median. seed draws the random
 * ones. */
decision decide_case(const bench_case *c, const outcome *planned, uint64_t seed);

#endif
