/* stats.c - see stats.h. */
#include <stdlib.h>
#include "base/stats.h"

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double tl_median(double *v, size_t n) {
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double tl_quantile(double *v, size_t n, double q) {
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    const double at = (q < 0 ? 0 : q > 1 ? 1 : q) * (double)(n - 1);
    const size_t i = (size_t)at;
    return i + 1 < n ? v[i] + (at - (double)i) * (v[i + 1] - v[i]) : v[n - 1];
}
