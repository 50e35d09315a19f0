/* stats.h - the one median (and quantile) of the tree, for timings and measured rates. */
#ifndef TL_BASE_STATS_H
#define TL_BASE_STATS_H

#include <stddef.h>

/* The median of v[0..n), n >= 1: the middle value, or for even n the mean of the middle
 * two. Sorts v in place (so a caller that needs the order keeps a copy). */
double tl_median(double *v, size_t n);
/* The q-quantile of v[0..n), n >= 1, 0 <= q <= 1: linear between the sorted values around
 * position q * (n - 1) (q = 0.5 is the median). Sorts v in place. */
double tl_quantile(double *v, size_t n, double q);

#endif
