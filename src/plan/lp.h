/* lp.h - a small linear program (minimize c.x subject to row bounds and column bounds),
 * built row by row and solved by COIN-OR CLP through its C interface (lp_clp.c).
 *
 * Why CLP: it is the LP engine of CBC, which FlexGen used; Debian packages it
 * (coinor-libclp-dev); and its license (EPL) lets any program link it without changing
 * that program's license, unlike GLPK (GPL). lp_solve (LGPL) would also do.
 * Everything the planner needs from a solver is behind this header.
 */
#ifndef TL_PLAN_LP_H
#define TL_PLAN_LP_H

#include "tierllm.h"

#define TL_LP_INF 1e30

typedef struct tl_lp tl_lp;

/* An LP over n_cols variables, each with bounds [lo, hi] and objective coefficient. */
tl_status tl_lp_new(int n_cols, tl_lp **out);
void tl_lp_free(tl_lp *lp);
void tl_lp_set_col(tl_lp *lp, int col, double lo, double hi, double obj);
/* Adds lo <= sum val[i] * x[idx[i]] <= hi. */
tl_status tl_lp_add_row(tl_lp *lp, int n, const int *idx, const double *val, double lo,
                        double hi);
/* Solves; x receives n_cols values, *objective the optimum. TL_ERR_INVALID with a
 * message if the LP is infeasible or unbounded or the solver fails. */
tl_status tl_lp_solve(tl_lp *lp, double *x, double *objective);

#endif
