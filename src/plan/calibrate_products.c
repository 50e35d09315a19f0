/* calibrate_products.c - a layer's forward over many rows against its price
 * (tl_plan_calibrate_products, calibrate.h).
 *
 * The profile times each type's products on one shape, and the rest of a layer (norms,
 * RoPE, the KV append, the pool's hand-overs) on their own; how far a model's layer runs
 * from the sum changes with its shapes and with the rows, and not monotonically. So the
 * first layer's real forward is timed, over rows of one fresh sequence at positions
 * 0 .. n - 1, at each of the profile's row counts n from 16 to 512, and the cost model's
 * price of everything in it but attention (which the profile times over contexts of its
 * own, and grows with the positions, not the rows) is scaled to match:
 * g(n) = (measured - priced attention) / priced rest, in prof->layer_row_scale. Prefill and
 * many-row decode steps price their layers with it, so they come out at the layer's
 * measured time at the counts timed.
 * The forwards run in a KV cache of their own (one sequence, f32, in memory) and with the
 * engine's scratch for that many rows, all from the budget: where it has no room for the
 * most rows, or the forwards would take too long, fewer counts are timed, and nothing
 * where there is no room for 16.
 */
#include "plan/calibrate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "base/budget.h"
#include "base/clock.h"
#include "base/stats.h"
#include "base/status.h"
#include "exec/model_handle.h"
#include "exec/residency.h"
#include "format/tensor_type.h"
#include "kv/kv_cache.h"
#include "model/llama.h"
#include "plan/cost.h"

/* The row counts timed: the profile's from 16 up, a decode micro-batch's to a prefill
 * chunk's; each takes its own ratio. */
static const int32_t product_rows[TL_PLAN_PRODUCTS_POINTS] = {16, 32, 64, 128, 256, 512};

/* Each sample lasts at least PRODUCTS_SAMPLE_S (a small layer's forward is too short to
 * time alone against the clock and the pool's wake-ups); 5 samples, 3 when one forward
 * takes over PRODUCTS_LONG_S (a large layer). The forwards take the resident layers
 * shaped as the first in turn, up to PRODUCTS_CYCLE_BYTES of them, and where they are
 * fewer (a streamed first layer is alone), a sweep over the memory the weights hold
 * (tl_residency_sweep) comes before each forward, so that PRODUCTS_CYCLE_BYTES of other
 * memory pass through the caches between two uses of one layer's weights, as a pass's
 * other layers do in the run: one layer timed over and over runs from the caches. */
#define PRODUCTS_SAMPLE_S 0.004
#define PRODUCTS_LONG_S 0.05
/* A count whose forwards would take over PRODUCTS_COUNT_MAX_S in a round (a large
 * model's many-row layer: twice the count before it, with 6 forwards a sample set) is not
 * timed: the calibration stays near a second, and the counts above the timed ones take
 * the highest's ratio. Rounds after the first only when the first took under
 * PRODUCTS_ROUND_MAX_S. */
#define PRODUCTS_COUNT_MAX_S 0.4
#define PRODUCTS_ROUND_MAX_S 0.5
#define PRODUCTS_MAX_LAYERS 32
#define PRODUCTS_CYCLE_BYTES ((uint64_t)64 << 20)
#define PRODUCTS_PAGE_TOKENS 16 /* the contexts' KV page */
/* The stream calibration's forward: the most rows timed whose forward takes at most
 * this long (11 samples of 4-6 forwards). The more rows, the more compute-bound the
 * products and the more the stream slows them: a prefill's chunks are many rows. */
#define STREAM_FORWARD_MAX_S 0.06
/* The work beside attention is given at least this share of the layer's measured time:
 * where attention is priced at nearly all of it (or more) the difference says nothing. */
#define PRODUCTS_MIN_SHARE 0.5

/* The forwards' state: the engine's scratch and a KV cache for N rows, the input rows
 * (x0, kept) and those a forward works on in place (x). */
typedef struct fwd {
    tl_model *m;
    int32_t N;
    uint64_t sweep_bytes, sweep_at; /* swept before each forward; where the sweep is */
    tl_llama_scratch s;
    int scratch_ok;
    tl_kv *kv;
    float *x0, *x;
    int32_t *seq, *pos;
} fwd;

static void fwd_close(fwd *f) {
    if (f->kv) tl_kv_close(f->kv);
    if (f->scratch_ok) tl_llama_scratch_free(&f->m->lm, &f->s);
    tl_budget_free(f->m->lm.budget, f->x0);
    tl_budget_free(f->m->lm.budget, f->x);
    free(f->seq);
    free(f->pos);
    memset(f, 0, sizeof *f);
}

/* Opens the state for N rows; 0 (nothing held, no error left) when the budget has no
 * room, or memory runs out. */
static int fwd_open(tl_model *m, int32_t N, fwd *f) {
    memset(f, 0, sizeof *f);
    f->m = m;
    f->N = N;
    const tl_llama_hparams *hp = &m->lm.hp;
    tl_kv_params kp;
    tl__calibrate_kv_params(m, tl_llama_stage_layers(&m->lm), N, N, PRODUCTS_PAGE_TOKENS, &kp);
    const size_t xb = (size_t)N * (size_t)hp->n_embd * sizeof(float);
    f->seq = malloc((size_t)N * sizeof *f->seq);
    f->pos = malloc((size_t)N * sizeof *f->pos);
    int ok = f->seq && f->pos &&
             !tl_llama_scratch_init(&m->lm, N, N, PRODUCTS_PAGE_TOKENS, &f->s);
    f->scratch_ok = ok;
    ok = ok && !tl_budget_alloc(m->lm.budget, xb, 64, "products calibration", (void **)&f->x0);
    ok = ok && !tl_budget_alloc(m->lm.budget, xb, 64, "products calibration", (void **)&f->x);
    ok = ok && !tl_kv_open(&kp, m->lm.budget, m->lm.aio, &f->kv);
    /* the frames come as the forward appends, one layer's at a time (each forward's
     * sequence is closed after it): room for them now, or a forward would fail */
    tl_kv_params one = kp;
    one.n_layer = 1;
    ok = ok && tl_budget_used(m->lm.budget) + tl_kv_budget_bytes(&one, 1) <=
                   tl_budget_limit(m->lm.budget);
    if (!ok) {
        fwd_close(f);
        tl_error_clear();
        return 0;
    }
    for (size_t i = 0; i < (size_t)N * (size_t)hp->n_embd; i++)
        f->x0[i] = (float)(i % 17) / 17.0f - 0.5f;
    return 1;
}

/* One forward of layer l over n rows of a fresh sequence; its seconds in *dt. */
static tl_status forward_once(fwd *f, int32_t l, int32_t n, double *dt) {
    tl_model *m = f->m;
    const int32_t kl = l - m->lm.stage_first;
    int32_t seq;
    memcpy(f->x, f->x0, (size_t)n * (size_t)m->lm.hp.n_embd * sizeof(float));
    tl_status st = tl_kv_seq_open(f->kv, &seq);
    if (st) return st;
    for (int32_t i = 0; i < n; i++) f->seq[i] = seq, f->pos[i] = i;
    const tl_llama_rows rows = {n, f->seq, f->pos};
    tl_residency_sweep(m->res, l, f->sweep_bytes, &f->sweep_at);
    const double t0 = tl_now();
    st = tl_kv_prefetch(f->kv, &seq, 1, kl);
    if (!st) st = tl_kv_wait(f->kv, &seq, 1, kl);
    if (!st) st = tl_llama_layer_forward(&m->lm, &f->s, f->kv, l, &rows, f->x);
    tl_kv_release(f->kv, &seq, 1, kl);
    *dt = tl_now() - t0;
    tl_kv_seq_close(f->kv, seq);
    return st;
}

/* Seconds of one layer's forward over n rows: the median of the samples, the layers
 * layers[0..n_l) taken in turn. */
static tl_status layer_forward_s(fwd *f, const int32_t *layers, int n_l, int32_t n,
                                 double *seconds) {
    double t[5];
    int reps = 1, samples = 5, at = 0;
    for (int r = -1; r < samples; r++) { /* -1: one round warms the caches, sizes a sample */
        double sum = 0;
        for (int k = 0; k < reps; k++, at = (at + 1) % n_l) {
            double dt;
            tl_status st = forward_once(f, layers[at], n, &dt);
            if (st) return st;
            sum += dt;
        }
        if (r < 0) {
            reps = sum > 0 && sum < PRODUCTS_SAMPLE_S ? (int)ceil(PRODUCTS_SAMPLE_S / sum) : 1;
            if (sum > PRODUCTS_LONG_S) samples = 3;
            continue;
        }
        t[r] = sum / reps;
    }
    *seconds = tl_median(t, (size_t)samples);
    return TL_OK;
}

/* The stream calibration's work: one layer's forward over n rows, as layer_forward_s
 * times it. */
typedef struct stream_work {
    fwd *f;
    const int32_t *layers;
    int n_l;
    int32_t n;
} stream_work;

static tl_status stream_work_s(void *user, double *seconds) {
    stream_work *w = user;
    return layer_forward_s(w->f, w->layers, w->n_l, w->n, seconds);
}

/* 1 when two rounds' ratios at every row count are within TL_PLAN_PRODUCTS_AGREE of each
 * other (a ratio not measured, 0, agrees only with another 0: another round would not
 * measure it either). */
static int agree(const double *a, const double *b) {
    for (int k = 0; k < TL_PLAN_PRODUCTS_POINTS; k++)
        if (fabs(a[k] - b[k]) > TL_PLAN_PRODUCTS_AGREE * fmin(a[k], b[k]) ||
            (a[k] > 0) != (b[k] > 0))
            return 0;
    return 1;
}

int tl_plan_products_round(const double (*round_r)[TL_PLAN_PRODUCTS_POINTS], int q,
                           double *r) {
    for (int k = 0; k < TL_PLAN_PRODUCTS_POINTS; k++) {
        double v[TL_PLAN_PRODUCTS_ROUNDS];
        size_t n = 0;
        for (int i = 0; i <= q && i < TL_PLAN_PRODUCTS_ROUNDS; i++)
            if (round_r[i][k] > 0) v[n++] = round_r[i][k];
        r[k] = tl_median(v, n);
    }
    return q + 1 >= TL_PLAN_PRODUCTS_ROUNDS || (q == 1 && agree(round_r[0], round_r[1]));
}

/* The products of layer l in the order `all` lists them (names present). */
static int layer_products(const tl_model *m, int32_t l, const tl_weight **out) {
    const tl_llama_layer *ly = &m->lm.layers[l];
    const tl_weight *all[7] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up,
                               &ly->w_down};
    int k = 0;
    for (int i = 0; i < 7; i++)
        if (all[i]->name) out[k++] = all[i];
    return k;
}

/* 1 if layer l is resident and shaped, typed and laid out as the n_w products ref. */
static int resident_like(const tl_model *m, int32_t l, const tl_weight *const *ref, int n_w) {
    const tl_weight *w[7];
    if (layer_products(m, l, w) != n_w) return 0;
    for (int k = 0; k < n_w; k++)
        if (!w[k]->data || w[k]->type != ref[k]->type || w[k]->rows != ref[k]->rows ||
            w[k]->cols != ref[k]->cols || w[k]->panels != ref[k]->panels)
            return 0;
    return 1;
}

tl_status tl_plan_calibrate_products(tl_model *m, tl_hw_profile *prof, double *ratio) {
    *ratio = 1;
    if (!m->res) return tl_error_set(TL_ERR_INVALID, "calibrating products: nothing placed");
    /* priced as the profile has it; an earlier calibration's factors go */
    for (int k = 0; k < TL_PROF_N_ROWS; k++)
        prof->layer_row_scale[k] = prof->layer_row_scale_lowest[k] = 0;
    prof->io_slowdown_stream = prof->io_stream_cal_bps = prof->io_stream_s_per_byte = 0;
    /* attention first: the rest is what the forwards take beyond its price */
    double attn_ratio;
    tl_status ast = tl_plan_calibrate_attention(m, prof, &attn_ratio);
    if (ast) return ast;
    const int32_t unit = m->lm.stage_first;
    const tl_llama_layer *ly = &m->lm.layers[unit];
    const tl_weight *w[7];
    /* a layer as the cost model prices it: its seven products (a flash or neuron layout
     * prices its own and keeps the profile's figures) */
    if (m->lm.flash || ly->neurons.name) return TL_OK;
    const int n_w = layer_products(m, unit, w);
    for (int i = 0; i < n_w; i++) { /* a type off the profile's axis: nothing to price */
        const int ty = tl_type_index((uint32_t)w[i]->type);
        if (ty < 0 || ty >= TL_PROF_N_TYPE) return TL_OK;
    }
    if (n_w == 0) return TL_OK;
    /* state for the most rows the budget has room for; counts above them not timed */
    int n_pts = TL_PLAN_PRODUCTS_POINTS;
    fwd f;
    while (n_pts > 0 && !fwd_open(m, product_rows[n_pts - 1], &f)) n_pts--;
    if (n_pts == 0) return TL_OK; /* the budget is spoken for: nothing measured */
    /* the layer's weights: resident, or its unit read into the ring on its own; then the
     * resident layers shaped as it, in turn */
    const tl_status borrowed = tl_residency_borrow(m->res, unit);
    tl_status st = borrowed;
    int32_t layers[PRODUCTS_MAX_LAYERS];
    int n_l = 1;
    uint64_t layer_bytes = 0;
    layers[0] = unit;
    for (int i = 0; i < n_w; i++) layer_bytes += w[i]->file_bytes;
    for (int32_t l = unit + 1; !st && l < m->lm.stage_end && n_l < PRODUCTS_MAX_LAYERS &&
                               layer_bytes * (uint64_t)n_l < PRODUCTS_CYCLE_BYTES; l++)
        if (resident_like(m, l, w, n_w)) layers[n_l++] = l;
    /* between two uses of a layer: the n_l - 1 others, and n_l sweeps */
    const uint64_t others = layer_bytes * (uint64_t)(n_l - 1);
    f.sweep_bytes = others < PRODUCTS_CYCLE_BYTES ? (PRODUCTS_CYCLE_BYTES - others) / n_l : 0;
    /* the cost model's layer at each count (unscaled): its attention, and the rest */
    enum { K = TL_PLAN_PRODUCTS_POINTS };
    double r[K] = {0}, round_r[TL_PLAN_PRODUCTS_ROUNDS][K] = {{0}}, at[K] = {0}, rest[K] = {0};
    double first_s[K] = {0}; /* each count's forward in the first round */
    for (int k = 0; k < n_pts; k++)
        rest[k] = tl_cost_prefill_layer_s(m, prof, unit, 32, product_rows[k], f.N, &at[k]) -
                  at[k];
    /* rounds of every count, the median ratio of each kept: the run meets the machine's
     * slow spells (another process, the host taking the core) as often as the rounds do,
     * so its layers run at their middle rate, not their best; a third round only when the
     * first two disagree */
    /* the forwards' own sparsity counts are not the run's (tl_model_sparsity_stats) */
    const double zeroed = m->lm.sparse.zeroed, seen = m->lm.sparse.seen;
    const double t_start = tl_now();
    int rounds = 0;
    for (int q = 0; q < TL_PLAN_PRODUCTS_ROUNDS && !st; q++) {
        if (q == 1 && tl_now() - t_start > PRODUCTS_ROUND_MAX_S) break;
        for (int k = 0; k < K && !st; k++) {
            round_r[q][k] = 0;
            double measured = 0;
            if (k >= n_pts || !(rest[k] > 0)) continue;
            st = layer_forward_s(&f, layers, n_l, product_rows[k], &measured);
            if (!st && measured > 0)
                round_r[q][k] = fmax(measured - at[k], PRODUCTS_MIN_SHARE * measured) / rest[k];
            if (q == 0) first_s[k] = measured;
            if (q == 0 && 2 * 6 * measured > PRODUCTS_COUNT_MAX_S) n_pts = k + 1;
        }
        rounds = q + 1;
        if (!st && tl_plan_products_round((const double (*)[K])round_r, q, r)) break;
    }
    double lowest[K] = {0}; /* each count's lowest round, for comparison (profile.h) */
    for (int q = 0; q < rounds; q++)
        for (int k = 0; k < K; k++)
            if (round_r[q][k] > 0 && (!(lowest[k] > 0) || round_r[q][k] < lowest[k]))
                lowest[k] = round_r[q][k];
    /* the same forward while the model file streams: the most rows whose forward took
     * up to STREAM_FORWARD_MAX_S (16 rows at least), the slowdown a prefill's layers meet
     * beside the weights' reads */
    if (!st) {
        int k = 0;
        while (k + 1 < n_pts && first_s[k + 1] > 0 && first_s[k + 1] <= STREAM_FORWARD_MAX_S)
            k++;
        stream_work sw = {&f, layers, n_l, product_rows[k]};
        double bps = 0, slow = 0;
        if (first_s[k] > 0)
            st = tl__calibrate_stream_slowdown(m, stream_work_s, &sw, &slow, &bps,
                                               &prof->io_stream_s_per_byte);
        prof->io_slowdown_stream = slow;
        prof->io_stream_cal_bps = bps;
    }
    m->lm.sparse.zeroed = zeroed, m->lm.sparse.seen = seen;
    if (!borrowed) tl_residency_unborrow(m->res, unit);
    fwd_close(&f);
    if (st) return tl_error_wrap(st, "calibrating products");
    for (int k = 0; k < n_pts; k++)
        if (!(r[k] > 0)) return TL_OK;
    /* the one furthest from the profile: what a caller's threshold should see */
    *ratio = r[0];
    for (int k = 1; k < n_pts; k++)
        if (fabs(log(r[k])) > fabs(log(*ratio))) *ratio = r[k];
    /* each grid count over 4 rows: the ratio of the highest count timed at or below it
     * (8 rows the one at 16) */
    for (int k = 0; k < TL_PROF_N_ROWS; k++) {
        if (tl_prof_rows[k] <= 4) continue;
        int p = 0;
        while (p + 1 < n_pts && product_rows[p + 1] <= tl_prof_rows[k]) p++;
        prof->layer_row_scale[k] = r[p];
        prof->layer_row_scale_lowest[k] = lowest[p];
    }
    return TL_OK;
}
