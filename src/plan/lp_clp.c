/* lp_clp.c - see lp.h. Rows are collected in compressed row form and handed to CLP in
 * one Clp_addRows call; the primal simplex solves from scratch each time (the planner's
 * LPs have a few hundred rows at most). */
#include <stdlib.h>
#include <string.h>
#include <coin/Clp_C_Interface.h>
#include "plan/lp.h"
#include "base/status.h"

struct tl_lp {
    int n_cols, n_rows, nnz;
    int cap_lo, cap_hi, cap_starts, cap_cols, cap_vals;
    double *lo, *hi, *obj;
    CoinBigIndex *starts; /* [n_rows + 1] */
    int *cols;
    double *vals, *row_lo, *row_hi;
};

tl_status tl_lp_new(int n_cols, tl_lp **out) {
    *out = NULL;
    if (n_cols < 1 || n_cols > (1 << 20))
        return tl_error_set(TL_ERR_INVALID, "lp: %d columns", n_cols);
    tl_lp *lp = calloc(1, sizeof *lp);
    if (!lp) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    lp->n_cols = n_cols;
    lp->lo = calloc((size_t)n_cols, sizeof *lp->lo);
    lp->hi = malloc((size_t)n_cols * sizeof *lp->hi);
    lp->obj = calloc((size_t)n_cols, sizeof *lp->obj);
    lp->starts = calloc(1, sizeof *lp->starts);
    lp->cap_starts = 1;
    if (!lp->lo || !lp->hi || !lp->obj || !lp->starts) {
        tl_lp_free(lp);
        return tl_error_set(TL_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_cols; i++) lp->hi[i] = TL_LP_INF;
    *out = lp;
    return TL_OK;
}

void tl_lp_free(tl_lp *lp) {
    if (!lp) return;
    free(lp->lo);
    free(lp->hi);
    free(lp->obj);
    free(lp->starts);
    free(lp->cols);
    free(lp->vals);
    free(lp->row_lo);
    free(lp->row_hi);
    free(lp);
}

void tl_lp_set_col(tl_lp *lp, int col, double lo, double hi, double obj) {
    if (col < 0 || col >= lp->n_cols) return;
    lp->lo[col] = lo;
    lp->hi[col] = hi;
    lp->obj[col] = obj;
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 1;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *n = realloc(*p, (size_t)c * elem);
    if (!n) return 0;
    *p = n;
    *cap = c;
    return 1;
}

tl_status tl_lp_add_row(tl_lp *lp, int n, const int *idx, const double *val, double lo,
                        double hi) {
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= lp->n_cols)
            return tl_error_set(TL_ERR_INVALID, "lp: column %d out of range", idx[i]);
    if (!grow((void **)&lp->row_lo, &lp->cap_lo, lp->n_rows + 1, sizeof *lp->row_lo) ||
        !grow((void **)&lp->row_hi, &lp->cap_hi, lp->n_rows + 1, sizeof *lp->row_hi) ||
        !grow((void **)&lp->starts, &lp->cap_starts, lp->n_rows + 2, sizeof *lp->starts) ||
        !grow((void **)&lp->cols, &lp->cap_cols, lp->nnz + n, sizeof *lp->cols) ||
        !grow((void **)&lp->vals, &lp->cap_vals, lp->nnz + n, sizeof *lp->vals))
        return tl_error_set(TL_ERR_NOMEM, "out of memory");
    memcpy(lp->cols + lp->nnz, idx, (size_t)n * sizeof *idx);
    memcpy(lp->vals + lp->nnz, val, (size_t)n * sizeof *val);
    lp->nnz += n;
    lp->row_lo[lp->n_rows] = lo;
    lp->row_hi[lp->n_rows] = hi;
    lp->n_rows++;
    lp->starts[lp->n_rows] = lp->nnz;
    return TL_OK;
}

tl_status tl_lp_solve(tl_lp *lp, double *x, double *objective) {
    Clp_Simplex *s = Clp_newModel();
    if (!s) return tl_error_set(TL_ERR_NOMEM, "lp: cannot create a CLP model");
    Clp_setLogLevel(s, 0);
    CoinBigIndex *col_starts = calloc((size_t)lp->n_cols + 1, sizeof *col_starts);
    if (!col_starts) {
        Clp_deleteModel(s);
        return tl_error_set(TL_ERR_NOMEM, "out of memory");
    }
    /* columns first (no rows yet), then the rows in one call */
    Clp_loadProblem(s, lp->n_cols, 0, col_starts, NULL, NULL, lp->lo, lp->hi, lp->obj, NULL, NULL);
    free(col_starts);
    if (lp->n_rows)
        Clp_addRows(s, lp->n_rows, lp->row_lo, lp->row_hi, lp->starts, lp->cols, lp->vals);
    Clp_initialSolve(s);
    tl_status st = TL_OK;
    if (!Clp_isProvenOptimal(s)) {
        int status = Clp_status(s);
        st = tl_error_set(TL_ERR_INVALID, "lp: no optimum (CLP status %d: %s)", status,
                          status == 1 ? "infeasible" : status == 2 ? "unbounded" : "stopped");
    } else {
        const double *sol = Clp_primalColumnSolution(s);
        memcpy(x, sol, (size_t)lp->n_cols * sizeof *x);
        *objective = Clp_objectiveValue(s);
    }
    Clp_deleteModel(s);
    return st;
}
