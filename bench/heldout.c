/* heldout.c - bench_costmodel --heldout N --seed S: the planner's predictions on workloads
 * it was never tuned on (issue 16's harness, prediction half).
 *
 * N configurations are drawn from the seed: a model shape (layers 4-24, width 512-2048,
 * FFN 2-3.5x, heads of 64 or 128 dims, multi-head or grouped KV, Q8_0, Q4_0, F16 or Q4_K,
 * vocabulary 8000 or 32000, at most 1.1 GB; shrunk by layers until it is), a budget of 20-100%
 * of the model (under 80%, so weights stream, for two configurations in four: one run and
 * one batch of each four; raised to the minimum a refusal states, else by half, up to
 * four times, while it is under the engine's minimum for the workload or the plan is
 * predicted to take over 150 s), the regime (run or batch, alternating), a prompt length up to 4096 (log-uniform from 16), 8-64 generated
 * tokens and, for batch, 4-64 prompts (fewer when they would pass 8192 prompt tokens in
 * all, down to 4). Each is planned with --policy auto as the CLI plans
 * it (placement, calibration, re-plan) and run; the prediction and the measurement of each
 * phase are printed with the prediction's terms, then per regime the median and worst
 * |error| and the mean signed error (positive: slower than predicted) of the whole run;
 * every configuration is planned and run three times (five when its first run took under
 * 2 s) and scored by the median of its errors (each repeat's calibration and prediction
 * printed, and at the end the repeats' pooled spread within a configuration: of the whole
 * error, of the measured time - the machine's, which no model removes - and of the
 * prediction - the calibration's); the summary scored on each configuration's first run
 * alone follows, as the one plan and run a user gets.
 * Models are synthesized into --dir once per shape (random weights: speed does not depend
 * on the values), written out to the disk before they are planned, and removed after
 * their configuration unless --keep. --list prints the draw and runs nothing.
 * With --decide CAP, each configuration whose planned run took at most CAP seconds then
 * runs the decision half (decide.c): the chosen policy against the next two predicted, two
 * naive and two random ones, interleaved, medians of 3 (of 7 where the chosen one is
 * predicted under 5 s); the summary counts the configurations whose choice measured within
 * 5% of the fastest candidate.
 */
#include "heldout.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "decide.h"
#include "plan_case.h"
#include "base/stats.h"

#define MAX_BYTES 1.1e9
#define MAX_PROMPT_TOKENS 8192

typedef struct draw { uint64_t s; } draw;

static uint64_t next(draw *d) { /* splitmix64 */
    uint64_t z = (d->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double uniform(draw *d) { return (double)(next(d) >> 11) / 9007199254740992.0; }
static int pick(draw *d, int n) { return (int)(uniform(d) * n); }

typedef struct config {
    tl_synth_params sp;
    double model_bytes;
    double budget_share;
    int single, prompt, gen, seqs;
} config;

static const char *type_name(int32_t t) {
    return t == 8 ? "Q8_0" : t == 2 ? "Q4_0" : t == 1 ? "F16" : t == 12 ? "Q4_K" : "?";
}

static config draw_config(draw *d, int i) {
    config c;
    memset(&c, 0, sizeof c);
    static const int widths[] = {512, 768, 1024, 1536, 2048};
    static const double ffn[] = {2.0, 2.7, 3.5};
    static const int32_t types[] = {8, 2, 1, 12};
    tl_synth_params *sp = &c.sp;
    sp->n_embd = widths[pick(d, 5)];
    sp->n_ff = (int32_t)(ffn[pick(d, 3)] * sp->n_embd / 256.0 + 0.5) * 256;
    sp->n_layer = 4 + pick(d, 21);
    const int head_dim = pick(d, 2) ? 128 : 64;
    sp->n_head = sp->n_embd / head_dim;
    sp->n_head_kv = pick(d, 2) && sp->n_head % 4 == 0 ? sp->n_head / 4 : sp->n_head;
    sp->n_vocab = pick(d, 2) ? 32000 : 8000;
    sp->n_ctx = 4096 + 64;
    sp->weight_type = types[pick(d, 4)];
    sp->rope_base = 10000.0f;
    sp->seed = next(d);
    while ((c.model_bytes = (double)tl_synth_file_bytes(sp)) > MAX_BYTES && sp->n_layer > 2)
        sp->n_layer--;
    /* regimes alternate; the budgets forced under 80% pair up with both of them */
    c.budget_share = i % 4 < 2 ? 0.2 + 0.6 * uniform(d) : 0.2 + 0.8 * uniform(d);
    c.single = i % 2 == 0;
    c.prompt = (int)exp(log(16.0) + uniform(d) * (log(4096.0) - log(16.0)));
    c.gen = 8 + pick(d, 57);
    c.seqs = c.single ? 1 : 4 + pick(d, 61);
    /* a batch's prompts hold at most MAX_PROMPT_TOKENS in all (at least 4 prompts), so one
     * configuration takes minutes, not an hour, on a 2-core machine */
    if (!c.single && (int64_t)c.seqs * c.prompt > MAX_PROMPT_TOKENS)
        c.seqs = MAX_PROMPT_TOKENS / c.prompt > 4 ? MAX_PROMPT_TOKENS / c.prompt : 4;
    return c;
}

/* err_no[0]: without the ring delay, err_no[1]: without the rate spread, err_no[2]:
 * without the layer row scales, err_no[3]: without the slowdown measured beside the
 * model file's stream (the profile's scaled by the rate instead), err_no[4]: with the
 * profile's slowdown as it stands, err_no[5]: with the layer row scales from each count's
 * lowest round, not its median, err_no[6]: without the compute's cost per byte read
 * (io_stream_s_per_byte: the slowdown ratios instead) */
enum { N_TERMS = 7 };
typedef struct result { double err, err_no[N_TERMS], first_err; int single, ok; } result;

/* A model file just written has dirty pages in the page cache, and the engine's direct
 * reads of them wait for their write-back: its first reads (the calibration's) would
 * time the flush, not the disk a user's model file is read from. Written out and dropped
 * from the cache before it is planned. */
static void settle(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    if (fsync(fd) == 0) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* without: 0 the errors of the predictions; 1 + k their errors without term k (err_no);
 * N_TERMS + 1 the errors of the first runs alone */
static void summary(const char *label, const result *r, int n, int single, int without) {
    double abs_err[256], sum = 0;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (r[i].ok && (single < 0 || r[i].single == single)) {
            const double e = without == N_TERMS + 1 ? r[i].first_err
                             : without ? r[i].err_no[without - 1] : r[i].err;
            abs_err[k++] = fabs(e);
            sum += e;
        }
    if (k == 0) {
        printf("%-7s no configuration ran\n", label);
        return;
    }
    const double med = tl_median(abs_err, (size_t)k); /* sorts abs_err */
    printf("%-7s %2d configurations: median |error| %5.1f%% (target <= 5%%), worst %5.1f%% "
           "(<= 15%%), mean signed %+5.1f%% (within +-3%%)\n", label, k, 100 * med,
           100 * abs_err[k - 1], 100 * sum / k);
}

/* The attention calibration's factor (1: not measured). */
static double attn_scale(const tl_hw_profile *p) {
    return p->attn_block_scale > 0 ? p->attn_block_scale : 1;
}

/* bytes / seconds in GB/s; 0 when nothing was read */
static double rate_gbs(double bytes, double seconds) {
    return seconds > 0 ? bytes / seconds / 1e9 : 0;
}

#define MAX_PREDICTED_S 150.0 /* a longer plan has its budget raised rather than run */

#define REPEATS 3 /* each configuration is planned and run this many times */
/* a run shorter still swings more from one run to the next: REPEATS_SHORT of them */
#define SHORT_UNDER_S 2.0
#define REPEATS_SHORT 5

static double whole_error(const outcome *o) {
    return (o->measured_s - o->plan.cost.total_s) / o->measured_s;
}
static double whole_error_without(const outcome *o, double predicted_s) {
    return (o->measured_s - predicted_s) / o->measured_s;
}

/* The repeats' spread within each configuration, pooled over the draw: squared deviations
 * from the configuration's mean of each repeat's whole error, log measured time and log
 * prediction, and their degrees of freedom. The measured time's spread is the machine's
 * (no model removes it); the prediction's is the calibration's, taken minutes apart. */
static struct { double err, meas, pred; int dof, configs; } g_spread;

static void add_spread(const outcome *runs, int n) {
    if (n < 2) return;
    double me = 0, mm = 0, mp = 0;
    for (int i = 0; i < n; i++) {
        me += whole_error(&runs[i]) / n;
        mm += log(runs[i].measured_s) / n;
        mp += log(runs[i].plan.cost.total_s) / n;
    }
    for (int i = 0; i < n; i++) {
        g_spread.err += pow(whole_error(&runs[i]) - me, 2);
        g_spread.meas += pow(log(runs[i].measured_s) - mm, 2);
        g_spread.pred += pow(log(runs[i].plan.cost.total_s) - mp, 2);
    }
    g_spread.dof += n - 1;
    g_spread.configs++;
}

/* This VM's run-to-run spread (and its calibration's, minutes apart) is of the size of the
 * error scored: a configuration is planned (calibration included) and run until REPEATS
 * runs are in (REPEATS_SHORT when its first took under SHORT_UNDER_S), and the run of the
 * median whole error stands in *o; when a repeat failed and an even number ran, the one
 * of the two middle runs further from its prediction (the score never flatters). */
static void repeat_median(const bench_case *bc, const tl_hw_profile *prof, outcome *o) {
    const int repeats = o->measured_s < SHORT_UNDER_S ? REPEATS_SHORT : REPEATS;
    outcome *runs = malloc(REPEATS_SHORT * sizeof *runs);
    if (!runs) return;
    runs[0] = *o;
    int n = 1;
    for (int r = 1; r < repeats; r++) {
        runs[n] = run_case(bc, prof, 0, 1);
        if (runs[n].ok) n++;
    }
    int order[REPEATS_SHORT];
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort by whole error */
        for (int j = i; j > 0 && whole_error(&runs[order[j]]) < whole_error(&runs[order[j - 1]]);
             j--) {
            const int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    printf("     %d runs (median of repeats), whole errors (predicted / measured s)", n);
    for (int i = 0; i < n; i++)
        printf(" %+.1f%% (%.2f/%.2f)", 100 * whole_error(&runs[i]), runs[i].plan.cost.total_s,
               runs[i].measured_s);
    printf("; the median's details follow\n");
    add_spread(runs, n);
    for (int i = 0; i < n; i++) /* what each repeat's calibration measured */
        printf("       repeat %d: disk x%.2f compute x%.2f layers x%.2f attention x%.2f, ring "
               "delay %.0f us, beside the stream x%.3f (%.3f s/GB); decode predicted %.2f s "
               "measured %.2f s\n", i + 1,
               runs[i].cal_disk, runs[i].cal_compute, runs[i].cal_products,
               attn_scale(&runs[i].prof), runs[i].prof.ring_unit_delay_s * 1e6,
               runs[i].prof.io_slowdown_stream, runs[i].prof.io_stream_s_per_byte * 1e9,
               runs[i].plan.cost.decode_s, runs[i].dec_s);
    for (int i = 0; i < n && bc->single; i++) {
        if (!(runs[i].dec_read_busy_s >= 0)) continue; /* the prompt's end was not seen */
        printf("       repeat %d: stalls prefill %.2f s, decode %.2f s; decode read busy %.2f s\n",
               i + 1, runs[i].pre_stall_s, runs[i].dec_stall_s, runs[i].dec_read_busy_s);
    }
    int pick = order[n / 2];
    if (n % 2 == 0 && fabs(whole_error(&runs[order[n / 2 - 1]])) > fabs(whole_error(&runs[pick])))
        pick = order[n / 2 - 1];
    *o = runs[pick];
    free(runs);
}

/* The least "minimum is X MiB" a planning refusal states, or 0. */
static double stated_minimum_mib(const char *msg) {
    double best = 0;
    for (const char *p = msg; p && (p = strstr(p, "minimum is ")) != NULL; p++) {
        double v;
        if (sscanf(p + strlen("minimum is "), "%lf MiB", &v) == 1 && v > 0 &&
            (best == 0 || v < best))
            best = v;
    }
    return best;
}

int heldout_run(int n, uint64_t seed, const char *dir, const tl_hw_profile *prof, int keep,
                double decide_cap_s, int only, int list_only) {
    if (n < 1 || n > 256) {
        fprintf(stderr, "error: --heldout takes 1..256 configurations\n");
        return 2;
    }
    if (only >= n) {
        fprintf(stderr, "error: --case %d: the draw has configurations 0..%d\n", only, n - 1);
        return 2;
    }
    draw d = {seed};
    result *res = calloc((size_t)n, sizeof *res);
    decision *dec = calloc((size_t)n, sizeof *dec);
    if (!res || !dec) {
        free(res);
        free(dec);
        return 1;
    }
    printf("\nheld-out draw: %d configurations, seed %llu (error = (measured - predicted) / "
           "measured; positive: the run was slower than predicted)\n", n,
           (unsigned long long)seed);
    for (int i = 0; i < n; i++) {
        config c = draw_config(&d, i);
        if (only >= 0 && i != only) continue;
        char path[768];
        snprintf(path, sizeof path, "%s/heldout-%llu-%d.gguf", dir, (unsigned long long)seed, i);
        bench_case bc;
        memset(&bc, 0, sizeof bc);
        bc.path = path;
        bc.budget_mib = (uint64_t)(c.model_bytes * c.budget_share / 1048576.0);
        bc.single = c.single;
        bc.prompt = c.prompt;
        bc.gen = c.gen;
        bc.seqs = c.seqs;
        bc.automatic = 1;
        printf("[%2d] %2d layers x %4d (ff %5d, heads %2d/%2d, vocab %5d) %-4s %4.0f MiB | "
               "budget %4.0f%% %5llu MiB | %s %4d + %2d x %2d\n", i, (int)c.sp.n_layer,
               (int)c.sp.n_embd, (int)c.sp.n_ff, (int)c.sp.n_head, (int)c.sp.n_head_kv,
               (int)c.sp.n_vocab, type_name(c.sp.weight_type), c.model_bytes / 1048576.0,
               100 * c.budget_share, (unsigned long long)bc.budget_mib,
               c.single ? "run  " : "batch", c.prompt, c.gen, c.seqs);
        fflush(stdout);
        if (list_only) continue;
        struct stat sb;
        if (stat(path, &sb) != 0 && tl_synth_write(&c.sp, path)) {
            fprintf(stderr, "error: synth: %s\n", tl_last_error());
            continue;
        }
        settle(path);
        bc.max_predicted_s = MAX_PREDICTED_S;
        outcome o = run_case(&bc, prof, 0, 1);
        /* a budget under the engine's minimum (KV and scratch at this context): raised, as
         * a user told the minimum would, to the least minimum the refusal states (with the
         * KV cache in tiers or not), else by half; a plan predicted to take longer than
         * MAX_PREDICTED_S (a budget at the minimum can mean one prompt token per pass of
         * streamed weights): raised by half; at most four times */
        for (int tries = 0; !o.ok && !o.ran && tries < 4; tries++) {
            const double stated = stated_minimum_mib(o.error);
            if (o.too_long)
                printf("     predicted %.0f s, more than %.0f s\n", o.plan.cost.total_s,
                       MAX_PREDICTED_S);
            if (!o.too_long && stated > (double)bc.budget_mib)
                bc.budget_mib = (unsigned long long)ceil(stated * 1.02);
            else
                bc.budget_mib += bc.budget_mib / 2 + 1;
            printf("     budget raised to %llu MiB (%.0f%% of the model)\n",
                   (unsigned long long)bc.budget_mib, 100 * bc.budget_mib * 1048576.0 / c.model_bytes);
            o = run_case(&bc, prof, 0, 1);
        }
        if (!o.ok) { /* reported, not scored */
            if (!keep) unlink(path);
            printf("     not run\n");
            continue;
        }
        const double first_err = whole_error(&o);
        repeat_median(&bc, prof, &o);
        const tl_cost *pc = &o.plan.cost;
        const tl_policy *pol = &o.plan.policy;
        const int kv_disk = pol->single ? pol->kv_window_pages > 0 : pol->kv_mem_pct < 100;
        /* the whole prediction with each term left out, in err_no's order, and its label */
        const double without_s[N_TERMS] = {o.total_no_ring_s,   o.total_no_spread_s,
                                           o.total_no_layer_s,  o.total_no_stream_s,
                                           o.total_no_rate_s,   o.total_lowest_s,
                                           o.total_no_bytecost_s};
        static const char *const without_label[N_TERMS] = {
            "without the ring delay", "at the median disk rate alone",
            "without the layer row scales", "the stream's slowdown extrapolated by rate",
            "the profile's slowdown", "the layers' lowest rounds",
            "without the cost per byte read"};
        res[i] = (result){whole_error(&o), {0}, first_err, c.single, 1};
        for (int k = 0; k < N_TERMS; k++) res[i].err_no[k] = whole_error_without(&o, without_s[k]);
        printf("     policy ");
        print_policy(pol);
        printf(" | weights %s, KV %s\n", o.plan.streamed_bytes > 0 ? "streamed" : "resident",
               kv_disk ? "partly on disk" : "in memory");
        printf("     prefill predicted %7.2f s (compute %.2f, weights %.2f, KV r/w %.2f/%.2f, "
               "KV wait %.2f) measured %7.2f s (%+5.1f%%)\n", pc->prefill_s,
               pc->prefill.compute_s, pc->prefill.weight_read_s, pc->prefill.kv_read_s,
               pc->prefill.kv_write_s, pc->prefill.kv_wait_s, o.pre_s,
               o.pre_s > 0 ? 100 * (o.pre_s - pc->prefill_s) / o.pre_s : 0.0);
        printf("     decode  predicted %7.2f s (compute %.2f, weights %.2f, KV r/w %.2f/%.2f, "
               "KV wait %.2f) measured %7.2f s (%+5.1f%%)\n", pc->decode_s,
               pc->decode.compute_s, pc->decode.weight_read_s, pc->decode.kv_read_s,
               pc->decode.kv_write_s, pc->decode.kv_wait_s, o.dec_s,
               o.dec_s > 0 ? 100 * (o.dec_s - pc->decode_s) / o.dec_s : 0.0);
        printf("     whole   predicted %7.2f s measured %7.2f s: error %+5.1f%%",
               pc->total_s, o.measured_s, 100 * res[i].err);
        for (int k = 0; k < N_TERMS; k++)
            if (without_s[k] != pc->total_s)
                printf(" (%s: predicted %.2f s, error %+.1f%%)", without_label[k], without_s[k],
                       100 * res[i].err_no[k]);
        printf("\n");
        if (!c.single)
            printf("     bytes   weights predicted %.0f MiB measured %.0f, KV read predicted %.0f "
                   "MiB measured %.0f; stalls prefill %.2f s (KV %.2f), decode %.2f s (KV %.2f)\n",
                   (pc->prefill.weight_bytes + pc->decode.weight_bytes) / 1048576.0,
                   o.weight_bytes_read / 1048576.0,
                   (pc->prefill.kv_read_bytes + pc->decode.kv_read_bytes) / 1048576.0,
                   o.kv_bytes_read / 1048576.0, o.pre_stall_s, o.pre_kv_wait_s, o.dec_stall_s,
                   o.dec_kv_wait_s);
        printf("     calibration (measured / profiled): disk %.2f, compute %.2f, layers of "
               "many rows %.2f, attention %.2f, KV page rate %.2f (alone %.2f); decode priced "
               "at weights %.2f GB/s, KV pages %.2f GB/s; ring delay %.0f us per streamed "
               "read\n",
               o.cal_disk, o.cal_compute, o.cal_products, attn_scale(&o.prof), o.cal_kv_page,
               o.cal_kv_alone,
               rate_gbs(pc->decode.weight_bytes, pc->decode.weight_read_s),
               rate_gbs(pc->decode.kv_read_bytes, pc->decode.kv_read_s),
               o.prof.ring_unit_delay_s * 1e6);
        if (o.prof.io_slowdown_stream > 0)
            printf("     a layer's forward beside the model file's stream (%.2f GB/s): x%.3f, "
                   "%.3f s lost per GB read; the profile's x%.3f beside its own (%.2f GB/s), "
                   "by rate x%.3f\n",
                   o.prof.io_stream_cal_bps / 1e9, o.prof.io_slowdown_stream,
                   o.prof.io_stream_s_per_byte * 1e9,
                   o.prof.io_compute_slowdown, o.prof.io_stream_bps / 1e9,
                   1 + (o.prof.io_compute_slowdown - 1) *
                           fmin(4, fmax(0.25, o.prof.io_rate_scale > 0 ? o.prof.io_rate_scale
                                                                       : 1)));
        if (o.plan.robust_pick)
            printf("     near tie: the fastest prediction (%.2f s) was passed over; worst case "
                   "%.2f s against its %.2f s\n", o.plan.nominal_s, o.plan.robust_worst_s,
                   o.plan.nominal_worst_s);
        fflush(stdout);
        if (decide_cap_s > 0 && o.measured_s <= decide_cap_s)
            dec[i] = decide_case(&bc, &o, c.sp.seed ^ 0xdec1de5ull);
        else if (decide_cap_s > 0)
            printf("     decision: not run (the planned run took over %.0f s)\n", decide_cap_s);
        if (!keep) unlink(path);
    }
    if (list_only) {
        free(res);
        free(dec);
        return 0;
    }
    printf("\nheld-out summary, seed %llu\n", (unsigned long long)seed);
    summary("run", res, n, 1, 0);
    summary("batch", res, n, 0, 0);
    summary("all", res, n, -1, 0);
    /* one line of titles per term left out, in err_no's order */
    static const char *const ablation[N_TERMS] = {
        "without the calibrated ring delay (the term's ablation)",
        "at the disk calibration's median rate alone (the rate spread's ablation)",
        "without the layer calibration's row scales (the term's ablation)",
        "with the compute's slowdown beside the model file's stream extrapolated from the "
        "profile's by the stream's rate, not measured (the term's ablation)",
        "with the profile's slowdown beside a stream as it stands (neither term)",
        "with the layer row scales from each row count's lowest round, not its median (the "
        "rule before)",
        "without the compute's cost per byte read (the slowdown ratios instead; the term's "
        "ablation)"};
    for (int k = 0; k < N_TERMS; k++) {
        printf("the same runs, predicted %s:\n", ablation[k]);
        summary("run", res, n, 1, k + 1);
        summary("batch", res, n, 0, k + 1);
        summary("all", res, n, -1, k + 1);
    }
    printf("the same configurations scored on their first plan and run alone:\n");
    summary("run", res, n, 1, N_TERMS + 1);
    summary("batch", res, n, 0, N_TERMS + 1);
    summary("all", res, n, -1, N_TERMS + 1);
    if (g_spread.dof > 0)
        printf("repeat spread (%d configurations run up to %d times, pooled sd within "
               "each): whole error %.1f%%, measured time %.1f%% (the machine's), prediction "
               "%.1f%% (the calibration's, minutes apart)\n", g_spread.configs, REPEATS_SHORT,
               100 * sqrt(g_spread.err / g_spread.dof), 100 * sqrt(g_spread.meas / g_spread.dof),
               100 * sqrt(g_spread.pred / g_spread.dof));
    if (decide_cap_s > 0) {
        int decided = 0, within = 0, naive = 0;
        double gain = 0;
        for (int i = 0; i < n; i++) {
            if (!dec[i].decided) continue;
            decided++;
            within += dec[i].chosen_s <= 1.05 * dec[i].best_s;
            if (dec[i].naive_s > 0) {
                naive++;
                gain += log(dec[i].naive_s / dec[i].chosen_s);
            }
        }
        printf("decision: %d of %d configurations decided (planned run <= %.0f s); the choice "
               "within 5%% of the fastest candidate in %d (%.0f%%, target >= 90%%)", decided,
               n, decide_cap_s, within, decided ? 100.0 * within / decided : 0.0);
        if (naive) printf("; %.2fx the faster naive policy (geometric mean)", exp(gain / naive));
        printf("\n");
    }
    free(res);
    free(dec);
    return 0;
}
