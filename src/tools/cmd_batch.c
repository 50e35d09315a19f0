/* cmd_batch.c - `tierllm batch`: generate for every prompt of a JSONL file, writing one
 * JSON line per prompt in input order. Lines are flushed as each block completes, so an
 * interrupted run keeps every completed result. Progress goes to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "cli_plan.h"
#include "json.h"
#include "base/status.h"
#include "plan/replan.h"

static void usage(void) {
    printf("usage: tierllm batch -m MODEL.gguf -i prompts.jsonl -o out.jsonl [options]\n"
           "  input lines: {\"id\": ..., \"prompt\": \"...\", \"n_predict\": N}  (id, n_predict optional)\n"
           "  output lines: {\"id\": ..., \"text\": \"...\", \"tokens\": [...], \"finish_reason\": \"stop\"|\"length\"}\n"
           "  -n, --n-predict N       tokens per prompt unless the line says (default 32)\n"
           "  -c, --ctx-size N        prompt + generated tokens per sequence (default 512)\n"
           "  --gbs N                 sequences per micro-batch (default 8)\n"
           "  --num-gb N              micro-batches per block (default 4)\n"
           "  --kv-bits 32|16|8|4     KV storage (default 32 = exact)\n"
           "  --kv-mem PCT            share of KV pages kept in memory (default 100)\n"
           "  --w-mem PCT             share of weights kept in memory at most (default 100)\n"
           "  --spill-dir DIR         where spilled KV pages go (default $TMPDIR or /tmp)\n"
           "  --mem-budget SIZE --prefetch N --no-overlap --io auto|pool|uring -t N\n"
           "  --temp T --top-k K --top-p P --seed S --ignore-eos  (as tierllm run)\n"
           "  --no-progress           no progress bar\n"
           "planning:\n"
           "  --policy auto|manual    auto: the planner picks gbs, num_gb, KV format and\n"
           "                          placement, prefetch (default when --mem-budget is given\n"
           "                          and no knob above is); manual: the flags/defaults\n"
           "  --profile PATH          hardware profile for auto (default: cached, or measured)\n"
           "  --lossy-kv              auto may choose 8- or 4-bit KV\n"
           "  --no-replan             auto keeps its first policy whatever the run measures\n"
           "  --stats                 predicted vs measured, term by term\n");
}

typedef struct prompt_set {
    char **prompt, **id;
    int32_t *n_predict;
    int32_t n, cap;
} prompt_set;

static void prompts_free(prompt_set *p) {
    for (int32_t i = 0; i < p->n; i++) { free(p->prompt[i]); free(p->id[i]); }
    free(p->prompt);
    free(p->id);
    free(p->n_predict);
}

static int read_prompts(const char *path, int32_t dflt, prompt_set *p) {
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "error: cannot open %s\n", path); return 0; }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int line_no = 0, ok = 1;
    while (ok && (len = getline(&line, &cap, f)) >= 0) {
        line_no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        json_field fl[16];
        char err[128];
        int n = json_parse_object(line, fl, 16, err, sizeof err);
        if (n < 0) {
            fprintf(stderr, "error: %s line %d: %s\n", path, line_no, err);
            ok = 0;
            break;
        }
        const json_field *pr = json_get(fl, n, "prompt"), *id = json_get(fl, n, "id");
        const json_field *np = json_get(fl, n, "n_predict");
        int32_t npv = dflt;
        if (!pr || !pr->is_string) {
            fprintf(stderr, "error: %s line %d: no \"prompt\" string\n", path, line_no);
            ok = 0;
        } else if (np && (np->is_string || !cli_int("n_predict", np->value, 0, 1 << 24, &npv))) {
            fprintf(stderr, "error: %s line %d: bad \"n_predict\"\n", path, line_no);
            ok = 0;
        }
        if (ok && p->n == p->cap) {
            int32_t c = p->cap ? 2 * p->cap : 64;
            char **a = realloc(p->prompt, (size_t)c * sizeof *a);
            if (a) p->prompt = a;
            char **b = realloc(p->id, (size_t)c * sizeof *b);
            if (b) p->id = b;
            int32_t *d = realloc(p->n_predict, (size_t)c * sizeof *d);
            if (d) p->n_predict = d;
            if (!a || !b || !d) ok = 0;
            else p->cap = c;
        }
        if (ok) {
            p->prompt[p->n] = strdup(pr->value);
            /* the id is echoed as it was written: strings re-escaped, numbers verbatim */
            p->id[p->n] = id ? strdup(id->value) : NULL;
            if (id && id->is_string) {
                char *tagged = malloc(strlen(id->value) + 2);
                if (tagged) { tagged[0] = 's'; strcpy(tagged + 1, id->value); }
                free(p->id[p->n]);
                p->id[p->n] = tagged;
            } else if (id) {
                char *tagged = malloc(strlen(id->value) + 2);
                if (tagged) { tagged[0] = 'n'; strcpy(tagged + 1, id->value); }
                free(p->id[p->n]);
                p->id[p->n] = tagged;
            }
            p->n_predict[p->n] = npv;
            p->n++;
        }
        json_free(fl, n);
    }
    free(line);
    fclose(f);
    if (ok && p->n == 0) {
        fprintf(stderr, "error: %s has no prompts\n", path);
        ok = 0;
    }
    return ok;
}

typedef struct run_ctx {
    FILE *out;
    const char *out_path;
    prompt_set *ps;
    int progress;
    int write_failed;
} run_ctx;

static int on_result(void *user, const tl_batch_result *r) {
    run_ctx *rc = user;
    FILE *o = rc->out;
    const char *id = rc->ps->id[r->index];
    fputs("{\"id\": ", o);
    if (!id) fprintf(o, "%d", (int)r->index);
    else if (id[0] == 's') json_write_string(o, id + 1, strlen(id + 1));
    else fputs(id + 1, o);
    fputs(", \"text\": ", o);
    json_write_string(o, r->text, r->text_len);
    fputs(", \"tokens\": [", o);
    for (int32_t i = 0; i < r->n_tokens; i++) fprintf(o, i ? ", %d" : "%d", (int)r->tokens[i]);
    fprintf(o, "], \"n_prompt\": %d, \"finish_reason\": \"%s\"}\n", (int)r->n_prompt,
            r->finish_eos ? "stop" : "length");
    if (fflush(o) != 0 || ferror(o)) {
        fprintf(stderr, "\nerror: writing %s failed\n", rc->out_path);
        rc->write_failed = 1;
        return 1;
    }
    return 0;
}

static void on_progress(void *user, const tl_batch_stats *s) {
    run_ctx *rc = user;
    if (!rc->progress) return;
    double tps = s->elapsed_s > 0 ? s->generated_tokens / s->elapsed_s : 0;
    double frac = s->total_prompts ? (double)s->done_prompts / s->total_prompts : 0;
    double eta = frac > 0 ? s->elapsed_s * (1 - frac) / frac : 0;
    int width = 30, fill = (int)(frac * width);
    fprintf(stderr, "\r[");
    for (int i = 0; i < width; i++) fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %d/%d prompts  %llu tokens  %.1f tok/s  ETA %.0fs   ", s->done_prompts,
            s->total_prompts, (unsigned long long)s->generated_tokens, tps, eta);
}

/* --policy auto: the workload from the prompts, the search, the policy applied. */
/* The workload from the prompts; then either the search (auto: the policy is applied and
 * a replanner made) or the prediction of the manual policy (for --stats). */
static tl_status plan_batch(tl_model *m, const prompt_set *ps, tl_batch_params *bp,
                            const tl_generate_params *gp, const char *profile_path, int lossy,
                            int kv_bits_given, int ctx_given, int automatic,
                            tl_plan_request *rq, tl_plan_result *chosen, tl_replanner **rp) {
    double prompt_sum = 0, gen_sum = 0;
    int32_t prompt_max = 1, gen_max = 1;
    for (int32_t i = 0; i < ps->n; i++) {
        size_t n = 0;
        tl_status st = tl_tokenize(m, ps->prompt[i], strlen(ps->prompt[i]), gp->add_bos, NULL, 0, &n);
        if (st && st != TL_ERR_INVALID) return st;
        prompt_sum += (double)n;
        gen_sum += ps->n_predict[i];
        if ((int32_t)n > prompt_max) prompt_max = (int32_t)n;
        if (ps->n_predict[i] > gen_max) gen_max = ps->n_predict[i];
    }
    memset(rq, 0, sizeof *rq);
    rq->w.prompt_len = (int32_t)(prompt_sum / ps->n + 0.5);
    rq->w.gen_len = (int32_t)(gen_sum / ps->n + 0.5);
    if (rq->w.prompt_len < 1) rq->w.prompt_len = 1;
    if (rq->w.gen_len < 1) rq->w.gen_len = 1;
    rq->w.num_seqs = ps->n;
    rq->n_ctx = ctx_given ? bp->n_ctx : prompt_max + gen_max;
    rq->kv_bits = kv_bits_given ? bp->kv_bits : 0;
    rq->allow_lossy_kv = lossy;
    rq->overlap = m->params.overlap;
    tl_hw_profile prof;
    tl_status st = cli_profile(m, profile_path, &prof);
    if (!st && !automatic) {
        tl_policy pol = tl_plan_default_policy(m, rq);
        pol.gbs = bp->gbs;
        pol.num_gb = bp->num_gb;
        pol.prefill_rows = bp->prefill_rows;
        pol.kv_bits = bp->kv_bits;
        pol.kv_mem_pct = bp->kv_mem_pct;
        pol.page_tokens = bp->page_tokens;
        pol.n_ctx = bp->n_ctx;
        pol.w_mem_pct = m->params.w_mem_pct;
        return tl_plan_evaluate(m, &prof, &rq->w, &pol, chosen);
    }
    if (!st) st = tl_plan_search(m, &prof, rq, chosen);
    if (st) return st;
    tl_plan_apply(&chosen->policy, m, bp);
    cli_print_policy(stderr, "policy auto", chosen);
    cli_print_prediction(stderr, "predicted", chosen, &rq->w);
    *rp = malloc(sizeof **rp);
    if (!*rp) return tl_error_set(TL_ERR_NOMEM, "out of memory");
    tl_replanner_init(*rp, m, &prof, rq, chosen);
    return TL_OK;
}

static void print_plan_stats(const tl_plan_request *rq, const tl_plan_result *chosen,
                             const tl_replanner *rp, const tl_batch_stats *bs) {
    /* the policy that ran: re-planned before the first block, the new one covers the
     * whole run; re-planned later, the first prediction is what the run is compared with */
    const int whole = rp && rp->switches > 0 && rp->checks == 0;
    const tl_cost *c = whole ? &rp->current.cost : &chosen->cost;
    if (whole) cli_print_policy(stderr, "[plan] policy that ran", &rp->current);
    cli_measured pre = {bs->prefill_s, (double)bs->prefill_passes,
                        bs->prefill_s - bs->prefill_stall_s, -1, -1, -1, -1,
                        bs->prefill_kv_wait_s};
    cli_measured dec = {bs->decode_s, (double)bs->decode_passes,
                        bs->decode_s - bs->decode_stall_s, -1, -1, -1, -1, bs->decode_kv_wait_s};
    cli_measured all = {bs->prefill_s + bs->decode_s,
                        (double)(bs->prefill_passes + bs->decode_passes),
                        bs->prefill_s + bs->decode_s - bs->prefill_stall_s - bs->decode_stall_s,
                        -1, (double)bs->weight_bytes_read, (double)bs->kv_bytes_read,
                        (double)bs->ssd_bytes_written, bs->prefill_kv_wait_s + bs->decode_kv_wait_s};
    tl_cost_terms sum = c->prefill;
    sum.compute_s += c->decode.compute_s;
    sum.weight_read_s += c->decode.weight_read_s;
    sum.kv_read_s += c->decode.kv_read_s;
    sum.kv_write_s += c->decode.kv_write_s;
    sum.kv_wait_s += c->decode.kv_wait_s;
    sum.weight_bytes += c->decode.weight_bytes;
    sum.kv_read_bytes += c->decode.kv_read_bytes;
    sum.kv_write_bytes += c->decode.kv_write_bytes;
    fprintf(stderr, "[plan] workload: %d prompts, mean prompt %d tokens, mean generation %d\n",
            (int)rq->w.num_seqs, (int)rq->w.prompt_len, (int)rq->w.gen_len);
    cli_print_terms(stderr, "prefill", &c->prefill, c->prefill_s, c->prefill_passes, &pre);
    cli_print_terms(stderr, "decode", &c->decode, c->decode_s, c->decode_passes, &dec);
    cli_print_terms(stderr, "whole run", &sum, c->total_s, c->prefill_passes + c->decode_passes,
                    &all);
    fprintf(stderr, "[plan] throughput: predicted %.2f tok/s, measured %.2f tok/s\n",
            c->tokens_per_s, bs->elapsed_s > 0 ? bs->generated_tokens / bs->elapsed_s : 0.0);
    if (!rp) {
        fprintf(stderr, "[plan] re-planning off (manual policy or --no-replan)\n");
        return;
    }
    fprintf(stderr, "[plan] re-planning: %d block checks, %d re-plans, %d policy changes\n",
            (int)rp->checks, (int)rp->replans, (int)rp->switches);
    for (int32_t i = 0; i < rp->n_log; i++) fprintf(stderr, "[plan]   %s\n", rp->log[i]);
}

int tl_cmd_batch(int argc, char **argv) {
    const char *model_path = NULL, *in_path = NULL, *out_path = NULL;
    tl_model_params mp = tl_model_default_params();
    tl_batch_params bp = tl_batch_default_params();
    tl_generate_params gp = tl_generate_default_params();
    gp.n_predict = 32;
    gp.sampler.seed = 24301;
    int progress = isatty(2), w_mem = 100;
    int policy = -1, knobs = 0, stats = 0, lossy = 0, replan = 1, kv_bits_given = 0, ctx_given = 0;
    const char *profile_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
#define VAL() if (!(v = cli_value(argc, argv, &i))) return 2
#define INT(flag, lo, hi, dst) else if (!strcmp(a, flag)) { VAL(); if (!cli_int(a, v, lo, hi, dst)) return 2; \
        knobs += !strcmp(flag, "--gbs") || !strcmp(flag, "--num-gb") || !strcmp(flag, "--kv-mem") || \
                 !strcmp(flag, "--w-mem") || !strcmp(flag, "--prefetch") || !strcmp(flag, "--prefill-rows"); \
        kv_bits_given |= !strcmp(flag, "--kv-bits"); ctx_given |= !strcmp(flag, "-c") || !strcmp(flag, "--ctx-size"); }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VAL(); model_path = v; }
        else if (!strcmp(a, "-i") || !strcmp(a, "--input")) { VAL(); in_path = v; }
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) { VAL(); out_path = v; }
        INT("-n", 0, 1 << 24, &gp.n_predict) INT("--n-predict", 0, 1 << 24, &gp.n_predict)
        INT("-c", 2, 1 << 24, &bp.n_ctx) INT("--ctx-size", 2, 1 << 24, &bp.n_ctx)
        INT("--gbs", 1, 4096, &bp.gbs) INT("--num-gb", 1, 4096, &bp.num_gb)
        INT("--kv-bits", 4, 32, &bp.kv_bits) INT("--kv-mem", 0, 100, &bp.kv_mem_pct)
        INT("--w-mem", 0, 100, &w_mem) INT("--prefetch", 0, 64, &mp.prefetch)
        INT("-t", 1, 256, &mp.n_threads) INT("--threads", 1, 256, &mp.n_threads)
        INT("--top-k", 0, 1 << 24, &gp.sampler.top_k) INT("--prefill-rows", 1, 1 << 20, &bp.prefill_rows)
        else if (!strcmp(a, "--spill-dir")) { VAL(); bp.spill_dir = v; }
        else if (!strcmp(a, "--mem-budget")) { VAL(); if (!cli_size(a, v, &mp.mem_budget)) return 2; }
        else if (!strcmp(a, "--no-overlap")) mp.overlap = 0;
        else if (!strcmp(a, "--io")) {
            VAL();
            if (!strcmp(v, "auto")) mp.io_backend = 0;
            else if (!strcmp(v, "pool")) mp.io_backend = 1;
            else if (!strcmp(v, "uring")) mp.io_backend = 2;
            else { fprintf(stderr, "error: --io expects auto, pool or uring\n"); return 2; }
        }
        else if (!strcmp(a, "--temp")) { VAL(); if (!cli_float(a, v, &gp.sampler.temperature)) return 2; }
        else if (!strcmp(a, "--top-p")) { VAL(); if (!cli_float(a, v, &gp.sampler.top_p)) return 2; }
        else if (!strcmp(a, "--seed")) { VAL(); if (!cli_u64(a, v, &gp.sampler.seed)) return 2; }
        else if (!strcmp(a, "--ignore-eos")) gp.stop_at_eos = 0;
        else if (!strcmp(a, "--no-progress")) progress = 0;
        else if (!strcmp(a, "--policy")) {
            VAL();
            if (!strcmp(v, "auto")) policy = 1;
            else if (!strcmp(v, "manual")) policy = 0;
            else { fprintf(stderr, "error: --policy expects auto or manual\n"); return 2; }
        }
        else if (!strcmp(a, "--profile")) { VAL(); profile_path = v; }
        else if (!strcmp(a, "--lossy-kv")) lossy = 1;
        else if (!strcmp(a, "--no-replan")) replan = 0;
        else if (!strcmp(a, "--stats")) stats = 1;
        else {
            fprintf(stderr, "error: unknown option '%s' (see tierllm batch --help)\n", a);
            return 2;
        }
#undef INT
#undef VAL
    }
    if (!model_path || !in_path || !out_path) {
        fprintf(stderr, "error: -m, -i and -o are required (see tierllm batch --help)\n");
        return 2;
    }
    mp.w_mem_pct = w_mem;
    if (policy == 1 && knobs) {
        fprintf(stderr, "error: --policy auto chooses gbs, num_gb, prefill rows, KV placement, "
                "weight placement and prefetch itself; drop those flags or use --policy manual\n");
        return 2;
    }
    if (policy < 0) policy = mp.mem_budget > 0 && !knobs;
    prompt_set ps = {0};
    if (!read_prompts(in_path, gp.n_predict, &ps)) {
        prompts_free(&ps);
        return 1;
    }
    FILE *out = fopen(out_path, "w");
    if (!out) {
        fprintf(stderr, "error: cannot create %s\n", out_path);
        prompts_free(&ps);
        return 1;
    }
    tl_model *m = NULL;
    tl_batch_stats bs;
    memset(&bs, 0, sizeof bs);
    run_ctx rc = {out, out_path, &ps, progress, 0};
    tl_status st = tl_model_open(model_path, &mp, &m);
    tl_replanner *rp = NULL;
    tl_plan_request rq;
    tl_plan_result chosen;
    int predicted = 0;
    if (!st && policy == 1) {
        st = plan_batch(m, &ps, &bp, &gp, profile_path, lossy, kv_bits_given, ctx_given, 1, &rq,
                        &chosen, &rp);
        predicted = !st;
        if (!st && !replan) {
            free(rp);
            rp = NULL;
        }
    } else if (!st && stats) { /* a manual policy: predicted for the comparison only */
        if (plan_batch(m, &ps, &bp, &gp, profile_path, lossy, 1, 1, 0, &rq, &chosen, &rp))
            fprintf(stderr, "[plan] no prediction for this policy: %s\n", tl_last_error());
        else
            predicted = 1;
    }
    if (!st)
        st = tl_batch_generate_replan(m, &bp, &gp, (const char *const *)ps.prompt, ps.n_predict,
                                      ps.n, on_result, on_progress, &rc,
                                      rp ? tl_replanner_hook : NULL, rp, &bs);
    if (progress) fputc('\n', stderr);
    int rc_code = 0;
    if (st && !rc.write_failed) rc_code = cli_fail(st);
    else if (rc.write_failed) rc_code = 1;
    if (fclose(out) != 0 && !rc_code) {
        fprintf(stderr, "error: closing %s failed\n", out_path);
        rc_code = 1;
    }
    double gen = bs.generated_tokens ? (double)bs.generated_tokens : 1;
    fprintf(stderr, "batch: %d/%d prompts, %llu prompt + %llu generated tokens | prefill %.2f s, "
            "decode %.2f s, %.2f generated tok/s | per generated token: weights read %.1f KiB, "
            "KV read %.1f KiB, SSD written %.1f KiB\n", bs.done_prompts, bs.total_prompts,
            (unsigned long long)bs.prompt_tokens, (unsigned long long)bs.generated_tokens,
            bs.prefill_s, bs.decode_s, bs.elapsed_s > 0 ? bs.generated_tokens / bs.elapsed_s : 0,
            bs.weight_bytes_read / gen / 1024, bs.kv_bytes_read / gen / 1024,
            bs.ssd_bytes_written / gen / 1024);
    if (stats && predicted && bs.done_prompts > 0) print_plan_stats(&rq, &chosen, rp, &bs);
    free(rp);
    tl_model_close(m);
    prompts_free(&ps);
    return rc_code;
}
