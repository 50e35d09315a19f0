/* neuron_fit.c - fits the low-rank active-neuron predictor of neuron_fit.h.
 *
 * For one layer (T rows, d inputs, f neurons, rank r, k = min(r + OVERSAMPLE, T, d, f)):
 *  1. Z = X Wact^T [T][f] (no bias), and its transpose;
 *  2. Z's top right singular vectors by a randomized range finder (Halko, Martinsson and
 *     Tropp 2011, algorithm 4.4): Q0 = orth(Z^T G), then POWER_ITERS subspace iterations
 *     Q0 = orth(Z^T orth(Z Q0)), orthonormalising after every product so that directions
 *     far down the spectrum survive f32; then Rayleigh-Ritz: the eigenvectors E of
 *     (Z Q0)^T (Z Q0) (cyclic Jacobi, in double), sorted by eigenvalue, rotate Q0 onto the
 *     singular directions, U = Q0 E[:, :r];
 *  3. U rounded to F16, then V = U^T Wact, rounded to F16 (V projects onto the rounded
 *     basis the file will hold);
 *  4. tau, the largest threshold (to a few ulps) at which the calibration entries whose
 *     score u_i . t + bias_i lies above it hold the target share of the mass, by a two-level
 *     radix selection over the scores' order-preserving bit patterns, weighted by mass.
 * Every product with f or d in its contraction goes through tl_matmul_fast, the big operand
 * as W and a short one (k or r rows) as X, so the GEMM does the work.
 * The margin holds because the calibration scores come from the code of tl_neuron_predict
 * itself (proj_rows and dot_f32, one fixed summation order): the recall found here is the
 * recall tl_neuron_predict gives on these rows, checked once more after pb is rounded.
 */
#include "model/neuron_fit.h"

#include <float.h>
#include <math.h>
#include <string.h>
#include "base/budget.h"
#include "base/rng.h"
#include "base/status.h"
#include "kernels/kernels.h"

#define OVERSAMPLE 16     /* range-finder columns beyond the rank */
#define POWER_ITERS 2     /* subspace iterations */
#define ORTH_BLOCK 16     /* rows projected together in orth_rows */
#define ORTH_DROP 1e-5    /* a row keeping less of its norm than this is dependent */
#define TRANSPOSE_COLS 64 /* columns of Wact transposed per block of the V product */
#define JACOBI_SWEEPS 60
#define HIST_BINS 65536 /* radix-selection bins: 16 bits of the key per level */

/* ---- small helpers ---- */

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* Y[i*ldy + j] = X[i*ldx] . W[j] for i < n, j < m, rows of W contiguous of length k. */
static void mm(const float *W, size_t m, size_t k, const float *X, size_t ldx, size_t n,
               float *Y, size_t ldy, float *scratch) {
    tl_matmul_fast(TL_TYPE_F32, W, k, 0, m, X, ldx, n, Y, ldy, scratch);
}

/* dst[c*ldd + r] = src[r*lds + c] for r < rows, c < cols, in 32x32 tiles. */
static void transpose(const float *src, size_t lds, size_t rows, size_t cols, float *dst,
                      size_t ldd) {
    for (size_t r0 = 0; r0 < rows; r0 += 32)
        for (size_t c0 = 0; c0 < cols; c0 += 32) {
            const size_t r1 = min_sz(r0 + 32, rows), c1 = min_sz(c0 + 32, cols);
            for (size_t r = r0; r < r1; r++)
                for (size_t c = c0; c < c1; c++) dst[c * ldd + r] = src[r * lds + c];
        }
}

static double norm2(const float *a, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * a[i];
    return sqrt(s);
}

static void axpy(float *y, float a, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

/* The one dot product of prediction and calibration: eight lanes, combined in a fixed
 * order. Without -ffast-math the compiler keeps this order whatever SIMD it maps the lanes
 * onto, so the result is a function of the inputs alone; noinline keeps one body for every
 * caller, so no call site can differ from another by how it was contracted or scheduled. */
__attribute__((noinline)) static float dot_f32(const float *a, const float *b, size_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    for (; i < n; i++) tail += a[i] * b[i];
    return (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) +
           tail;
}

/* t[row*rank + j] = V[j] . x_row for n rows of X: the predictor's first product. Four rows
 * share each pass over V, which is read from cache rather than memory. */
static void proj_rows(const float *V, size_t d, size_t rank, const float *X, size_t n,
                      float *t) {
    for (size_t r0 = 0; r0 < n; r0 += 4) {
        const size_t r1 = min_sz(r0 + 4, n);
        for (size_t j = 0; j < rank; j++)
            for (size_t r = r0; r < r1; r++) t[r * rank + j] = dot_f32(V + j * d, X + r * d, d);
    }
}

/* U t for one row's t: s[i] = U[i] . t (without pb). */
static void neuron_scores(const float *U, size_t f, size_t rank, const float *t, float *s) {
    for (size_t i = 0; i < f; i++) s[i] = dot_f32(U + i * rank, t, rank);
}

void tl_neuron_predict(const float *V, const float *U, const float *pb, size_t d, size_t f,
                       size_t rank, const float *X, size_t n, uint8_t *mask, float *scratch) {
    proj_rows(V, d, rank, X, n, scratch);
    for (size_t r = 0; r < n; r++) {
        const float *t = scratch + r * rank;
        uint8_t *m = mask + r * f;
        for (size_t i = 0; i < f; i++) m[i] = dot_f32(U + i * rank, t, rank) + pb[i] > 0.0f;
    }
}

/* ---- the range finder ---- */

/* Orthonormalises the m rows of A [m][n] in place: block classical Gram-Schmidt with every
 * projection done twice ("twice is enough", Giraud, Langou and Rozloznik 2005), so the rows
 * come out orthonormal to f32 rounding however ill-conditioned they went in. A row keeping
 * under ORTH_DROP of its norm lies, numerically, in the span of the rows before it and is
 * set to zero: the basis loses a direction rather than gaining noise. c: ORTH_BLOCK * m
 * floats. */
static void orth_rows(float *A, size_t m, size_t n, float *c, float *scratch) {
    for (size_t j0 = 0; j0 < m; j0 += ORTH_BLOCK) {
        const size_t b = min_sz(ORTH_BLOCK, m - j0);
        float *blk = A + j0 * n;
        double n0[ORTH_BLOCK];
        for (size_t q = 0; q < b; q++) n0[q] = norm2(blk + q * n, n);
        for (int pass = 0; pass < 2 && j0 > 0; pass++) { /* against the rows done */
            mm(A, j0, n, blk, n, b, c, j0, scratch);     /* c[q][l] = blk[q] . A[l] */
            for (size_t l = 0; l < j0; l++)
                for (size_t q = 0; q < b; q++) axpy(blk + q * n, -c[q * j0 + l], A + l * n, n);
        }
        for (size_t q = 0; q < b; q++) { /* within the block */
            float *a = blk + q * n;
            for (int pass = 0; pass < 2 && q > 0; pass++) {
                mm(blk, q, n, a, n, 1, c, q, scratch);
                for (size_t l = 0; l < q; l++) axpy(a, -c[l], blk + l * n, n);
            }
            const double nn = norm2(a, n);
            if (!(nn > ORTH_DROP * n0[q])) {
                memset(a, 0, n * sizeof *a);
            } else {
                const float s = (float)(1.0 / nn);
                for (size_t i = 0; i < n; i++) a[i] *= s;
            }
        }
    }
}

/* Eigen-decomposition of the symmetric k x k matrix A (destroyed: its diagonal ends as the
 * eigenvalues) by cyclic Jacobi rotations (Numerical Recipes' form); E gets the
 * eigenvectors as columns. Converges quadratically; JACOBI_SWEEPS is a bound, not a count. */
static void jacobi_eig(double *A, size_t k, double *E) {
    for (size_t i = 0; i < k * k; i++) E[i] = 0;
    for (size_t i = 0; i < k; i++) E[i * k + i] = 1;
    for (int sweep = 0; sweep < JACOBI_SWEEPS; sweep++) {
        double off = 0, diag = 0;
        for (size_t p = 0; p < k; p++) {
            diag += A[p * k + p] * A[p * k + p];
            for (size_t q = p + 1; q < k; q++) off += A[p * k + q] * A[p * k + q];
        }
        if (!(off > 1e-30 * diag)) break;
        for (size_t p = 0; p + 1 < k; p++)
            for (size_t q = p + 1; q < k; q++) {
                const double apq = A[p * k + q];
                if (fabs(apq) <= 1e-300) continue;
                const double theta = (A[q * k + q] - A[p * k + p]) / (2 * apq);
                const double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1));
                const double cs = 1 / sqrt(t * t + 1), sn = t * cs;
                for (size_t r = 0; r < k; r++) { /* columns p, q */
                    const double arp = A[r * k + p], arq = A[r * k + q];
                    A[r * k + p] = cs * arp - sn * arq;
                    A[r * k + q] = sn * arp + cs * arq;
                }
                for (size_t r = 0; r < k; r++) { /* rows p, q */
                    const double apr = A[p * k + r], aqr = A[q * k + r];
                    A[p * k + r] = cs * apr - sn * aqr;
                    A[q * k + r] = sn * apr + cs * aqr;
                }
                A[p * k + q] = A[q * k + p] = 0;
                for (size_t r = 0; r < k; r++) {
                    const double erp = E[r * k + p], erq = E[r * k + q];
                    E[r * k + p] = cs * erp - sn * erq;
                    E[r * k + q] = sn * erp + cs * erq;
                }
            }
    }
}

/* ---- the threshold ---- */

/* A key whose unsigned order is the float order (-0 sorts just below +0). */
static uint32_t order_key(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

static float key_value(uint32_t k) {
    const uint32_t u = k & 0x80000000u ? k & 0x7fffffffu : ~k;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The largest score s such that the entries of positive mass with score (S + bias, f32)
 * >= s hold at least `target` of the mass (the smallest such score when rounding leaves
 * the target just out of reach). Two passes: the top 16 bits of the keys, then the low 16
 * within the bin where the cumulative mass, from the top, crosses the target. */
static float select_score(const float *S, const float *bias, const float *mass, size_t T,
                          size_t f, double target, double *hist) {
    uint32_t hi = 0, lo = 0;
    double above = 0; /* the mass in the bins above the chosen one */
    for (int level = 0; level < 2; level++) {
        memset(hist, 0, HIST_BINS * sizeof *hist);
        for (size_t t = 0; t < T; t++)
            for (size_t i = 0; i < f; i++) {
                const double m = mass[t * f + i];
                if (!(m > 0)) continue;
                const uint32_t key = order_key(S[t * f + i] + (bias ? bias[i] : 0.0f));
                if (level == 0) hist[key >> 16] += m;
                else if (key >> 16 == hi) hist[key & 0xffff] += m;
            }
        /* From the top bin down, stop at the first whose mass takes the sum to the target,
         * or at the lowest bin with mass when the sum falls short by rounding. */
        double cum = above, before = above;
        uint32_t pick = 0;
        for (uint32_t b = HIST_BINS; b-- > 0;) {
            if (hist[b] == 0) continue;
            pick = b, before = cum;
            cum += hist[b];
            if (cum >= target) break;
        }
        if (level == 0) hi = pick, above = before;
        else lo = pick;
    }
    return key_value(hi << 16 | lo);
}

/* Mass captured by, and count of, the entries tl_neuron_predict predicts (S + pb > 0),
 * with the total mass summed in the same order: when every entry is predicted the two sums
 * are equal bit for bit. */
static void evaluate(const float *S, const float *pb, const float *mass, size_t T, size_t f,
                     double *captured, double *total, size_t *predicted) {
    double cap = 0, tot = 0;
    size_t np = 0;
    for (size_t t = 0; t < T; t++)
        for (size_t i = 0; i < f; i++) {
            const int p = S[t * f + i] + pb[i] > 0.0f;
            const double m = mass[t * f + i];
            np += (size_t)p;
            tot += m;
            if (p) cap += m;
        }
    *captured = cap, *total = tot, *predicted = np;
}

/* Rounds n floats to F16 precision in place (tmp: n halves). */
static void round_f16(float *x, size_t n, uint16_t *tmp) {
    tl_quant_row(TL_TYPE_F16, x, tmp, n);
    tl_dequant_row(TL_TYPE_F16, tmp, x, n);
}

/* ---- the fit ---- */

typedef struct fit_bufs {
    float *Z, *ZT, *YT, *PT, *Q0, *UT, *WTb, *c, *ET, *tcal, *mm_scratch;
    double *G, *E, *hist;
    uint16_t *half;
} fit_bufs;

static tl_status fit(const tl_neuron_fit_in *in, size_t k, fit_bufs *B, float *V, float *U,
                     float *pb, tl_neuron_fit_report *rep) {
    const size_t T = in->T, d = in->d, f = in->f, r = in->rank;
    float *scr = B->mm_scratch;

    /* 1. Z [T][f], the pre-activations without bias, and ZT [f][T] */
    mm(in->Wact, f, d, in->X, d, T, B->Z, f, scr);
    size_t active = 0;
    for (size_t t = 0; t < T; t++)
        for (size_t i = 0; i < f; i++)
            active += B->Z[t * f + i] + (in->bias ? in->bias[i] : 0.0f) > 0.0f;
    transpose(B->Z, f, T, f, B->ZT, T);

    /* 2. the range finder: YT [k][f] = orth(G^T Z), PT [k][T] = orth(Y^T Z^T), ... */
    uint64_t rs = in->seed ^ 0x6e6575726f6e6669ull;
    for (size_t i = 0; i < k * T; i++) B->PT[i] = tl_rand_sym(&rs);
    mm(B->ZT, f, T, B->PT, T, k, B->YT, f, scr);
    orth_rows(B->YT, k, f, B->c, scr);
    for (int it = 0; it < POWER_ITERS; it++) {
        mm(B->Z, T, f, B->YT, f, k, B->PT, T, scr);
        orth_rows(B->PT, k, T, B->c, scr);
        mm(B->ZT, f, T, B->PT, T, k, B->YT, f, scr);
        orth_rows(B->YT, k, f, B->c, scr);
    }
    /* Rayleigh-Ritz: BT = (Z Q0)^T [k][T] in PT, G = BT BT^T */
    mm(B->Z, T, f, B->YT, f, k, B->PT, T, scr);
    for (size_t a = 0; a < k; a++)
        for (size_t b = a; b < k; b++) {
            const float *pa = B->PT + a * T, *pbt = B->PT + b * T;
            double s = 0;
            for (size_t t = 0; t < T; t++) s += (double)pa[t] * pbt[t];
            B->G[a * k + b] = B->G[b * k + a] = s;
        }
    jacobi_eig(B->G, k, B->E);
    /* ET [r][k]: the eigenvectors of the r largest eigenvalues, as rows (selection sort:
     * k is small) */
    for (size_t j = 0; j < r; j++) {
        size_t best = j;
        for (size_t l = j + 1; l < k; l++)
            if (B->G[l * k + l] > B->G[best * k + best]) best = l;
        if (best != j) { /* swap eigenpairs j and best */
            const double g = B->G[j * k + j];
            B->G[j * k + j] = B->G[best * k + best], B->G[best * k + best] = g;
            for (size_t l = 0; l < k; l++) {
                const double e = B->E[l * k + j];
                B->E[l * k + j] = B->E[l * k + best], B->E[l * k + best] = e;
            }
        }
        for (size_t l = 0; l < k; l++) B->ET[j * k + l] = (float)B->E[l * k + j];
    }

    /* 3. U [f][r] = Q0 E[:, :r], rounded; V [r][d] = U^T Wact, rounded */
    transpose(B->YT, f, k, f, B->Q0, k);
    mm(B->ET, r, k, B->Q0, k, f, U, r, scr);
    for (size_t i = 0; i < f; i++) round_f16(U + i * r, r, B->half);
    transpose(U, r, f, r, B->UT, f);
    for (size_t c0 = 0; c0 < d; c0 += TRANSPOSE_COLS) {
        const size_t nc = min_sz(TRANSPOSE_COLS, d - c0);
        transpose(in->Wact + c0, d, f, nc, B->WTb, f);
        mm(B->WTb, nc, f, B->UT, f, r, V + c0, d, scr);
    }
    for (size_t j = 0; j < r; j++) round_f16(V + j * d, d, B->half);

    /* 4. the calibration scores S = U V x in Z's place, as tl_neuron_predict computes them */
    float *S = B->Z;
    proj_rows(V, d, r, in->X, T, B->tcal);
    float bmax = 0;
    for (size_t i = 0; in->bias && i < f; i++)
        if (fabsf(in->bias[i]) > bmax) bmax = fabsf(in->bias[i]);
    for (size_t t = 0; t < T; t++) {
        neuron_scores(U, f, r, B->tcal + t * r, S + t * f);
        for (size_t i = 0; i < f; i++)
            if (!isfinite(S[t * f + i] + (in->bias ? in->bias[i] : 0.0f)))
                return tl_error_set(TL_ERR_INVALID, "neuron predictor fit: the predictor's "
                                    "score of neuron %zu at row %zu is not finite (inputs "
                                    "with inf/NaN, or weights beyond F16 range?)", i, t);
    }
    double total = 0;
    for (size_t i = 0; i < T * f; i++) total += in->mass[i];
    float tau = 0;
    double captured = 0, tot = 0;
    size_t predicted = 0;
    if (total > 0) {
        /* The set {score >= s_m} holds the target; tau sits below s_m by more than the
         * rounding of score + bias and of bias - tau (a few ulps of the magnitudes), so
         * every such entry stays predicted with pb = bias - tau. The check after it widens
         * the gap should a rounding case escape that bound. */
        const double target = fmin(in->recall * total * (1 + 1e-9), total);
        const float sm = select_score(S, in->bias, in->mass, T, f, target, B->hist);
        double gap = ldexp(2.0 * fabs(sm) + bmax, -20) + FLT_MIN;
        for (int tries = 0;; tries++) {
            tau = (float)((double)sm - gap);
            for (size_t i = 0; i < f; i++) pb[i] = (in->bias ? in->bias[i] : 0.0f) - tau;
            evaluate(S, pb, in->mass, T, f, &captured, &tot, &predicted);
            if (captured >= in->recall * tot) break;
            if (tries == 64)
                return tl_error_set(TL_ERR_INVALID, "neuron predictor fit: no threshold "
                                    "reaches recall %g (%g at tau %g)", in->recall,
                                    captured / tot, (double)tau);
            gap *= 4;
        }
    } else {
        for (size_t i = 0; i < f; i++) pb[i] = in->bias ? in->bias[i] : 0.0f;
        evaluate(S, pb, in->mass, T, f, &captured, &tot, &predicted);
    }
    if (rep) {
        rep->recall = tot > 0 ? captured / tot : 1.0;
        rep->predicted_share = (double)predicted / ((double)T * (double)f);
        rep->active_share = (double)active / ((double)T * (double)f);
        rep->margin = tau;
    }
    return TL_OK;
}

tl_status tl_neuron_fit_predictor(const tl_neuron_fit_in *in, struct tl_budget *budget,
                                  float *V, float *U, float *pb, tl_neuron_fit_report *rep) {
    if (!in || !budget || !V || !U || !pb || !in->X || !in->Wact || !in->mass)
        return tl_error_set(TL_ERR_INVALID, "neuron predictor fit: a required pointer is NULL");
    const size_t T = in->T, d = in->d, f = in->f, r = in->rank;
    if (!T || !d || !f)
        return tl_error_set(TL_ERR_INVALID, "neuron predictor fit: empty shape (T %zu, d %zu, "
                            "f %zu)", T, d, f);
    if (r == 0 || r > T || r > d || r > f)
        return tl_error_set(TL_ERR_INVALID, "neuron predictor fit: rank %zu must lie in [1, "
                            "min(T %zu, d %zu, f %zu)]", r, T, d, f);
    if (!(in->recall > 0 && in->recall <= 1))
        return tl_error_set(TL_ERR_INVALID, "neuron predictor fit: recall %g is not in (0, 1]",
                            in->recall);
    const size_t most = SIZE_MAX / sizeof(double) / 4;
    if (T > most / f || f > most / d || T > most / d)
        return tl_error_set(TL_ERR_INVALID, "neuron predictor fit: shape T %zu, d %zu, f %zu "
                            "overflows size_t", T, d, f);
    for (size_t i = 0; i < T * f; i++)
        if (!(in->mass[i] >= 0 && in->mass[i] < INFINITY))
            return tl_error_set(TL_ERR_INVALID, "neuron predictor fit: mass %g of neuron %zu at "
                                "row %zu is negative or not finite", (double)in->mass[i],
                                i % f, i / f);
    const size_t k = min_sz(min_sz(r + OVERSAMPLE, T), min_sz(d, f));

    /* The fast GEMM's scratch grows with k and n; these are the shapes this file asks of
     * it (n = 1 and n = ORTH_BLOCK in orth_rows are below the others). */
    size_t nscr = tl_matmul_scratch_floats(d, T);
    const size_t shapes[][2] = {{T, k}, {f, k}, {k, f}, {f, r}, {f, ORTH_BLOCK}, {T, ORTH_BLOCK}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const size_t n = tl_matmul_scratch_floats(shapes[s][0], shapes[s][1]);
        if (n > nscr) nscr = n;
    }
    fit_bufs B = {0};
    struct {
        void **p;
        size_t bytes;
        const char *what;
    } want[] = {
        {(void **)&B.Z, T * f * sizeof(float), "the pre-activations Z [T][f]"},
        {(void **)&B.ZT, f * T * sizeof(float), "Z transposed [f][T]"},
        {(void **)&B.YT, k * f * sizeof(float), "the range basis [k][f]"},
        {(void **)&B.Q0, f * k * sizeof(float), "the range basis [f][k]"},
        {(void **)&B.PT, k * T * sizeof(float), "the row-side basis [k][T]"},
        {(void **)&B.UT, r * f * sizeof(float), "U transposed [rank][f]"},
        {(void **)&B.WTb, TRANSPOSE_COLS * f * sizeof(float), "a block of Wact transposed"},
        {(void **)&B.c, ORTH_BLOCK * k * sizeof(float), "the projection coefficients"},
        {(void **)&B.ET, r * k * sizeof(float), "the Ritz rotation [rank][k]"},
        {(void **)&B.tcal, T * r * sizeof(float), "the projected rows [T][rank]"},
        {(void **)&B.mm_scratch, nscr * sizeof(float), "the GEMM scratch"},
        {(void **)&B.G, k * k * sizeof(double), "the Gram matrix [k][k]"},
        {(void **)&B.E, k * k * sizeof(double), "its eigenvectors [k][k]"},
        {(void **)&B.hist, HIST_BINS * sizeof(double), "the threshold histogram"},
        {(void **)&B.half, (d > r ? d : r) * sizeof(uint16_t), "an F16 row"},
    };
    const size_t nwant = sizeof want / sizeof want[0];
    tl_status st = TL_OK;
    for (size_t w = 0; w < nwant && !st; w++)
        if ((st = tl_budget_alloc(budget, want[w].bytes, 64, want[w].what, want[w].p)))
            tl_error_wrap(st, "neuron predictor fit (T %zu, d %zu, f %zu, rank %zu)", T, d, f, r);
    if (!st) st = fit(in, k, &B, V, U, pb, rep);
    for (size_t w = 0; w < nwant; w++)
        if (*want[w].p) tl_budget_free(budget, *want[w].p);
    return st;
}
