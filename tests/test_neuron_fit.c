/* test_neuron_fit.c - the low-rank active-neuron predictor (model/neuron_fit.h):
 *  1. a layer whose activation matrix is rank 8 plus noise (d 64, f 256, ~10% of neurons
 *     active, mass = relu(z)), fitted at rank 16 for recall 0.99: the report's recall meets
 *     the target and equals the recall tl_neuron_predict gives on the fitting rows; on 400
 *     held-out rows the recall stays >= 0.97 while well under half the neurons are
 *     predicted; U and V are F16 values and U's columns orthonormal to F16 rounding; the
 *     mask agrees with a float64 evaluation of U, V, pb wherever the score is not within
 *     1e-4 of 0; a second fit is the same bits (the seed decides everything);
 *  2. a full-rank random activation matrix: the margin still meets the recall target;
 *  3. bad sizes and arguments give TL_ERR_INVALID, a small budget TL_ERR_NOMEM, and the
 *     budget is back to zero after every call.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/budget.h"
#include "base/rng.h"
#include "kernels/kernels.h"
#include "model/neuron_fit.h"
#include "testutil.h"

enum { D = 64, F = 256, T = 400, R = 8, RANK = 16 };

static uint64_t rng = 0x9e11f17c0ffee123ull;
static float rnd(void) { return tl_rand_sym(&rng); }

typedef struct layer {
    float W[F * D], bias[F];
    float X[T * D], mass[T * F];    /* fitting rows */
    float Xh[T * D], massh[T * F];  /* held-out rows */
} layer;

static void rows_and_mass(const layer *L, float *X, float *mass) {
    for (size_t i = 0; i < (size_t)T * D; i++) X[i] = rnd();
    for (size_t t = 0; t < T; t++)
        for (size_t i = 0; i < F; i++) {
            double z = L->bias[i];
            for (size_t c = 0; c < D; c++) z += (double)X[t * D + c] * L->W[i * D + c];
            mass[t * F + i] = z > 0 ? (float)z : 0.0f;
        }
}

/* W = A B + noise * N (N scaled to A B's per-entry RMS), or plain random when low_rank is
 * 0; bias at the 90% quantile of each neuron's z (x uniform: z about normal, sd |W_i|/sqrt 3). */
static void make_layer(layer *L, int low_rank, double noise) {
    if (low_rank) {
        static float A[F * R], Bm[R * D];
        for (size_t i = 0; i < F * R; i++) A[i] = rnd();
        for (size_t i = 0; i < R * D; i++) Bm[i] = rnd();
        double ss = 0;
        for (size_t i = 0; i < F; i++)
            for (size_t c = 0; c < D; c++) {
                double s = 0;
                for (size_t j = 0; j < R; j++) s += (double)A[i * R + j] * Bm[j * D + c];
                L->W[i * D + c] = (float)s;
                ss += s * s;
            }
        const double rms = sqrt(ss / (F * D)), nrms = 1 / sqrt(3.0); /* rnd()'s RMS */
        for (size_t i = 0; i < F * D; i++) L->W[i] += (float)(noise * rms / nrms * rnd());
    } else {
        for (size_t i = 0; i < F * D; i++) L->W[i] = rnd();
    }
    for (size_t i = 0; i < F; i++) {
        double n2 = 0;
        for (size_t c = 0; c < D; c++) n2 += (double)L->W[i * D + c] * L->W[i * D + c];
        L->bias[i] = (float)(-1.2816 * sqrt(n2 / 3));
    }
    rows_and_mass(L, L->X, L->mass);
    rows_and_mass(L, L->Xh, L->massh);
}

/* The share of the mass on the rows that the mask predicts. */
static double mask_recall(const uint8_t *mask, const float *mass, size_t n) {
    double cap = 0, tot = 0;
    for (size_t i = 0; i < n * F; i++) {
        tot += mass[i];
        if (mask[i]) cap += mass[i];
    }
    return tot > 0 ? cap / tot : 1;
}

/* Each mask entry against U (V x) + pb in float64; scores within 1e-4 of 0 may go either way. */
static size_t mask_disagreements(const float *V, const float *U, const float *pb,
                                 const float *X, const uint8_t *mask, size_t *near) {
    size_t bad = 0;
    for (size_t t = 0; t < T; t++) {
        double tv[RANK];
        for (size_t j = 0; j < RANK; j++) {
            double s = 0;
            for (size_t c = 0; c < D; c++) s += (double)V[j * D + c] * X[t * D + c];
            tv[j] = s;
        }
        for (size_t i = 0; i < F; i++) {
            double s = pb[i];
            for (size_t j = 0; j < RANK; j++) s += (double)U[i * RANK + j] * tv[j];
            if (fabs(s) <= 1e-4) (*near)++;
            else if ((s > 0) != (mask[t * F + i] != 0)) bad++;
        }
    }
    return bad;
}

static int is_f16(const float *x, size_t n) {
    uint16_t h[D > RANK ? D : RANK];
    float back[D > RANK ? D : RANK];
    tl_quant_row(TL_TYPE_F16, x, h, n);
    tl_dequant_row(TL_TYPE_F16, h, back, n);
    return memcmp(x, back, n * sizeof *x) == 0;
}

static tl_neuron_fit_in fit_in(const layer *L, size_t rank, double recall) {
    tl_neuron_fit_in in = {T, D, F, rank, L->X, L->W, L->bias, L->mass, recall, 12345};
    return in;
}

static void test_low_rank(tl_budget *b) {
    static layer L;
    static float V[RANK * D], U[F * RANK], pb[F], V2[RANK * D], U2[F * RANK], pb2[F];
    static float scratch[T * RANK];
    static uint8_t mask[T * F];
    make_layer(&L, 1, 0.2);
    tl_neuron_fit_in in = fit_in(&L, RANK, 0.99);
    tl_neuron_fit_report rep;
    CHECK(tl_neuron_fit_predictor(&in, b, V, U, pb, &rep) == TL_OK);
    CHECK(tl_budget_used(b) == 0);
    printf("low rank: recall %.4f, predicted %.3f, active %.3f, tau %.4g\n", rep.recall,
           rep.predicted_share, rep.active_share, rep.margin);
    CHECK_MSG(rep.recall >= 0.99, "recall %.5f", rep.recall);
    CHECK_MSG(rep.active_share > 0.05 && rep.active_share < 0.15, "active %.3f",
              rep.active_share);
    CHECK_MSG(rep.predicted_share < 0.5, "predicted %.3f", rep.predicted_share);
    CHECK(rep.predicted_share >= rep.active_share * 0.9);

    /* the report is tl_neuron_predict's recall on the fitting rows */
    size_t near = 0, nrows = 0;
    tl_neuron_predict(V, U, pb, D, F, RANK, L.X, T, mask, scratch);
    const double fit_recall = mask_recall(mask, L.mass, T);
    CHECK_MSG(fabs(fit_recall - rep.recall) < 1e-9, "%.9f vs %.9f", fit_recall, rep.recall);
    for (size_t i = 0; i < (size_t)T * F; i++) nrows += mask[i];
    CHECK(fabs((double)nrows / (T * F) - rep.predicted_share) < 1e-12);
    CHECK(mask_disagreements(V, U, pb, L.X, mask, &near) == 0);

    /* held-out rows */
    tl_neuron_predict(V, U, pb, D, F, RANK, L.Xh, T, mask, scratch);
    const double held = mask_recall(mask, L.massh, T);
    size_t npred = 0;
    for (size_t i = 0; i < (size_t)T * F; i++) npred += mask[i];
    printf("held out: recall %.4f, predicted %.3f, near-zero scores %zu\n", held,
           (double)npred / (T * F), near);
    CHECK_MSG(held >= 0.97, "held-out recall %.4f", held);
    CHECK((double)npred / (T * F) < 0.5);
    CHECK(mask_disagreements(V, U, pb, L.Xh, mask, &near) == 0);
    CHECK(near < (size_t)T * F / 1000);

    /* the power of the comparison: a flipped bit away from 0 is caught */
    for (size_t i = 0; i < (size_t)T * F; i++) mask[i] ^= 1;
    size_t near2 = 0;
    CHECK(mask_disagreements(V, U, pb, L.Xh, mask, &near2) > (size_t)T * F / 2);

    /* F16 values; U's columns orthonormal to F16 rounding */
    int f16 = 1;
    for (size_t i = 0; i < F; i++) f16 &= is_f16(U + i * RANK, RANK);
    for (size_t j = 0; j < RANK; j++) f16 &= is_f16(V + j * D, D);
    CHECK(f16);
    double worst = 0;
    for (size_t a = 0; a < RANK; a++)
        for (size_t c = 0; c < RANK; c++) {
            double s = 0;
            for (size_t i = 0; i < F; i++) s += (double)U[i * RANK + a] * U[i * RANK + c];
            s -= a == c;
            if (fabs(s) > worst) worst = fabs(s);
        }
    CHECK_MSG(worst < 1e-2, "U^T U - I: %.3g", worst);

    /* deterministic */
    tl_neuron_fit_report rep2;
    CHECK(tl_neuron_fit_predictor(&in, b, V2, U2, pb2, &rep2) == TL_OK);
    CHECK(memcmp(V, V2, sizeof V) == 0 && memcmp(U, U2, sizeof U) == 0 &&
          memcmp(pb, pb2, sizeof pb) == 0 && rep2.margin == rep.margin);

    /* recall 1: every entry with mass is predicted */
    in.recall = 1;
    CHECK(tl_neuron_fit_predictor(&in, b, V2, U2, pb2, &rep2) == TL_OK);
    tl_neuron_predict(V2, U2, pb2, D, F, RANK, L.X, T, mask, scratch);
    size_t missed = 0;
    for (size_t i = 0; i < (size_t)T * F; i++) missed += L.mass[i] > 0 && !mask[i];
    CHECK(missed == 0 && rep2.recall == 1);
    CHECK(rep2.margin <= rep.margin);

    /* no mass at all: tau 0, pb = bias, recall 1 */
    static float zero_mass[T * F];
    in.mass = zero_mass;
    in.recall = 0.99;
    CHECK(tl_neuron_fit_predictor(&in, b, V2, U2, pb2, &rep2) == TL_OK);
    CHECK(rep2.margin == 0 && rep2.recall == 1 && memcmp(pb2, L.bias, sizeof pb2) == 0);
    CHECK(tl_budget_used(b) == 0);
}

static void test_full_rank(tl_budget *b) {
    static layer L;
    static float V[RANK * D], U[F * RANK], pb[F], scratch[T * RANK];
    static uint8_t mask[T * F];
    make_layer(&L, 0, 0);
    tl_neuron_fit_in in = fit_in(&L, RANK, 0.99);
    tl_neuron_fit_report rep;
    CHECK(tl_neuron_fit_predictor(&in, b, V, U, pb, &rep) == TL_OK);
    printf("full rank: recall %.4f, predicted %.3f, active %.3f, tau %.4g\n", rep.recall,
           rep.predicted_share, rep.active_share, rep.margin);
    CHECK_MSG(rep.recall >= 0.99, "recall %.5f", rep.recall);
    tl_neuron_predict(V, U, pb, D, F, RANK, L.X, T, mask, scratch);
    CHECK(mask_recall(mask, L.mass, T) >= 0.99);
    CHECK(rep.margin < 0); /* rank 16 of 64 is too coarse: the margin predicts more */
    CHECK(tl_budget_used(b) == 0);
}

static void test_errors(tl_budget *b) {
    static layer L;
    static float V[(D + 1) * D], U[F * (D + 1)], pb[F];
    make_layer(&L, 1, 0.2);
    tl_neuron_fit_report rep;
    tl_neuron_fit_in in = fit_in(&L, 0, 0.99);
    CHECK(tl_neuron_fit_predictor(&in, b, V, U, pb, &rep) == TL_ERR_INVALID);
    in.rank = D + 1;
    CHECK(tl_neuron_fit_predictor(&in, b, V, U, pb, &rep) == TL_ERR_INVALID);
    in = fit_in(&L, RANK, 0.99);
    in.T = RANK - 1;
    CHECK(tl_neuron_fit_predictor(&in, b, V, U, pb, &rep) == TL_ERR_INVALID);
    in = fit_in(&L, RANK, 0);
    CHECK(tl_neuron_fit_predictor(&in, b, V, U, pb, &rep) == TL_ERR_INVALID);
    in.recall = 1.5;
    CHECK(tl_neuron_fit_predictor(&in, b, V, U, pb, &rep) == TL_ERR_INVALID);
    in = fit_in(&L, RANK, 0.99);
    in.d = 0;
    CHECK(tl_neuron_fit_predictor(&in, b, V, U, pb, &rep) == TL_ERR_INVALID);
    in = fit_in(&L, RANK, 0.99);
    in.X = NULL;
    CHECK(tl_neuron_fit_predictor(&in, b, V, U, pb, &rep) == TL_ERR_INVALID);
    static float bad_mass[T * F];
    bad_mass[17] = -1;
    in = fit_in(&L, RANK, 0.99);
    in.mass = bad_mass;
    CHECK(tl_neuron_fit_predictor(&in, b, V, U, pb, &rep) == TL_ERR_INVALID);
    CHECK(tl_budget_used(b) == 0);

    /* a budget too small: NOMEM, and nothing left allocated */
    tl_budget *small;
    CHECK(tl_budget_open(100000, &small) == TL_OK);
    in = fit_in(&L, RANK, 0.99);
    CHECK(tl_neuron_fit_predictor(&in, small, V, U, pb, &rep) == TL_ERR_NOMEM);
    CHECK(strstr(tl_last_error(), "neuron predictor fit") != NULL);
    CHECK(tl_budget_used(small) == 0);
    tl_budget_close(small);
}

int main(void) {
    tl_budget *b;
    CHECK(tl_budget_open(0, &b) == TL_OK);
    test_low_rank(b);
    test_full_rank(b);
    test_errors(b);
    tl_budget_close(b);
    return tl_test_finish("test_neuron_fit");
}
