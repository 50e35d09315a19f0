/* cmd_batch.c - `tierllm batch`: generate for every prompt of a JSONL file, writing one
 * JSON line per prompt in input order.
 *
 * Order of work, so that nothing the user owns is lost: the output is checked (and locked)
 * first, then the input is read strictly, the model opened and the policy planned and
 * checked against the budget; only then is the output created, replaced or resumed
 * (batch_output.h). Each result line is written whole as its block completes, and synced
 * at the block's end. SIGINT/SIGTERM stop the run at the next step boundary: the complete
 * results are written and the process exits 128 + the signal; a second signal ends it at
 * once (the lines on disk are whole or cut by --resume). A prompt that cannot run gets a
 * record with finish_reason "error" and the rest run; the exit code is then 3. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/json.h"
#include "base/status.h"
#include "tools/batch_input.h"
#include "tools/batch_output.h"
#include "tools/cli.h"
#include "model/neurons.h"
#include "tools/cli_plan.h"
#include "tools/cli_pipe.h"
#include "tools/batch_pipe.h"
#include "exec/engine.h"
#include "plan/replan.h"
#include "base/clock.h"
#ifdef TL_TEST_HOOKS
#include "tools/test_hooks.h"
#endif

enum { EXIT_SOME_FAILED = 3 };

static void usage(void) {
    printf("usage: tierllm batch -m MODEL.gguf -i prompts.jsonl -o out.jsonl [options]\n"
           "  input lines: {\"id\": ..., \"prompt\": \"...\", \"n_predict\": N}  (id, n_predict optional;\n"
           "               id a string or a number)\n"
           "  output lines: {\"id\": ..., \"text\": \"...\", \"tokens\": [...], \"n_prompt\": N,\n"
           "                 \"finish_reason\": \"stop\"|\"length\"|\"error\"[, \"error\": \"...\"]}\n"
           "  --resume                -o holds an interrupted run's results: skip the ids done,\n"
           "                          append the rest (every input line needs a unique id)\n"
           "  --overwrite             replace a non-empty -o (atomically, once the run starts)\n"
           "  -n, --n-predict N       tokens per prompt unless the line says (default 32; 0: none)\n"
           "  -c, --ctx-size N        prompt + generated tokens per sequence (default 512)\n"
           "  --gbs N                 sequences per micro-batch (default 8)\n"
           "  --num-gb N              micro-batches per block (default 4)\n"
           "  --kv-bits 32|16|8|4     KV storage (default 32 = exact)\n"
           "  --kv-mem PCT            share of KV pages kept in memory (default 100)\n"
           "  --kv-window N           KV in tiers instead: each sequence's last N positions\n"
           "                          and first --kv-sinks positions stay in memory, older\n"
           "                          pages go to --spill-dir\n"
           "  --kv-sinks N            first positions kept in memory with --kv-window (0)\n"
           "  --kv-cache SIZE         memory caching disk KV pages (default 0)\n"
           CLI_SPARSITY_HELP
           "  --kv-select SHARE       lossy, opt-in: each generated token attends to this\n"
           "                          share of its KV pages (see tierllm run --help)\n"
           "  --w-mem PCT             share of weights kept in memory at most (default 100)\n"
           "  --spill-dir DIR         where spilled KV pages go (default $TMPDIR or /tmp)\n"
           "  --mem-budget SIZE --prefetch N --no-overlap --io auto|pool|uring -t N\n"
           "  --temp T --top-k K --top-p P --repeat-penalty R --repeat-last-n N --seed S\n"
           "  --ignore-eos            (as tierllm run)\n"
           "  --no-progress           no progress bar\n"
           "  --weights-copy auto|on|off  Q8_0/Q4_0 weights streamed each pass are repacked\n"
           "                          into the int8 kernels' layout on arrival (AVX-512 VNNI\n"
           "                          CPUs); on: stream them from a converted copy written\n"
           "                          once to the cache directory instead; auto (default):\n"
           "                          when the run's predicted repacking costs more than\n"
           "                          twice writing the copy; the model file is only read\n"
           "planning:\n"
           "  --policy auto|manual    auto: the planner picks gbs, num_gb, KV format and\n"
           "                          placement, prefetch (default when --mem-budget is given\n"
           "                          and no knob above is); manual: the flags/defaults\n"
           "  --profile PATH          hardware profile for auto (default: cached, or measured)\n"
           "  --lossy-kv              auto may choose 8- or 4-bit KV\n"
           "  --no-replan             auto keeps its first policy whatever the run measures\n"
           "  --stats                 predicted vs measured, term by term\n"
           "pipeline (an MPI build, under mpirun -np N):\n"
           "  --pipeline              each rank holds a contiguous range of layers with its\n"
           "                          own --mem-budget and the same batch knobs; rank 0 reads\n"
           "                          the input and writes the output\n"
           "  --pipeline-layers LIST  layers per rank, e.g. 12,10 (default: an even split); auto:\n"
           "                          each rank predicts its stage near the even split (its\n"
           "                          budget, its host's profile) and the slowest is minimized\n"
           "  --policy auto           with --pipeline: each rank places its own KV cache and\n"
           "                          weights at its --mem-budget (the ranks share gbs, num_gb,\n"
           "                          prefill rows, KV bits and context: flags or defaults),\n"
           "                          and the split is searched unless --pipeline-layers is given\n"
           "exit: 0 all done, 1 error, 2 usage, 3 done but some prompts failed (their lines\n"
           "      say finish_reason \"error\"), 128+N stopped by signal N (--resume continues)\n");
}

/* The prompts that go to the engine, and for each the input line it came from. */
typedef struct run_list {
    char **prompt;        /* borrowed from the input */
    int32_t *n_predict;
    int32_t *line;        /* index into batch_input.line */
    int32_t n;
} run_list;

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) {
    if (stop_signal) { /* a second signal: end now; lines on disk are whole or cut later */
        signal(sig, SIG_DFL);
        raise(sig);
    }
    stop_signal = sig;
}

typedef struct run_ctx {
    batch_out *out;
    const batch_input *in;
    const run_list *rl;
    int32_t next_line;    /* input lines before this one are written or skipped */
    int progress;
    int write_failed;
    int32_t written, failed;
    char err[512];
} run_ctx;

/* One output record; text NULL for an error record. */
static int write_record(run_ctx *rc, int32_t line, const tl_batch_result *r, const char *error) {
    const batch_line *bl = &rc->in->line[line];
    json_t *o = json_object(), *id = NULL, *toks = json_array();
    char e[160];
    int ok = o && toks;
    if (ok && bl->id) ok = tl_json_parse(bl->id, strlen(bl->id), TL_JSON_ANY, &id, e, sizeof e) == TL_OK;
    else if (ok) ok = (id = json_integer(line)) != NULL;
    ok = ok && json_object_set_new(o, "id", id) == 0;
    json_t *text = ok ? json_stringn(r ? r->text : "", r ? r->text_len : 0) : NULL;
    ok = ok && text && json_object_set_new(o, "text", text) == 0;
    for (int32_t i = 0; ok && r && i < r->n_tokens; i++)
        ok = json_array_append_new(toks, json_integer(r->tokens[i])) == 0;
    ok = ok && json_object_set(o, "tokens", toks) == 0;
    ok = ok && json_object_set_new(o, "n_prompt", json_integer(r ? r->n_prompt : 0)) == 0;
    const char *reason = error ? "error" : r->finish_eos ? "stop" : "length";
    ok = ok && json_object_set_new(o, "finish_reason", json_string(reason)) == 0;
    if (ok && error) {
        json_t *m = json_string(error);
        if (!m) m = json_string("invalid parameters"); /* a message cut inside a character */
        ok = json_object_set_new(o, "error", m) == 0;
    }
    size_t len = 0;
    char *text_line = ok ? tl_json_line(o, &len) : NULL;
    json_decref(o);
    json_decref(toks);
    if (!text_line) {
        snprintf(rc->err, sizeof rc->err, "out of memory building the result of input line %d",
                 (int)bl->line_no);
        return -1;
    }
    int st = batch_out_write(rc->out, text_line, len, rc->err, sizeof rc->err);
    free(text_line);
    if (st) return -1;
    rc->written++;
    rc->failed += error != NULL;
    return 0;
}

/* Error records of the input lines before `upto` that did not go to the engine. */
static int write_pending_errors(run_ctx *rc, int32_t upto) {
    for (; rc->next_line < upto; rc->next_line++) {
        const batch_line *bl = &rc->in->line[rc->next_line];
        if (bl->error[0] && !batch_out_is_done(rc->out, bl->id) &&
            write_record(rc, rc->next_line, NULL, bl->error))
            return -1;
    }
    return 0;
}

static int on_result(void *user, const tl_batch_result *r) {
    run_ctx *rc = user;
    const int32_t line = rc->rl->line[r->index];
    if (write_pending_errors(rc, line) ||
        write_record(rc, line, r, r->status ? r->error : NULL) ||
        (r->last_in_block && batch_out_sync(rc->out, rc->err, sizeof rc->err))) {
        rc->write_failed = 1;
        return 1;
    }
    rc->next_line = line + 1;
    return 0;
}

static int on_progress(void *user, const tl_batch_stats *s) {
    run_ctx *rc = user;
#ifdef TL_TEST_HOOKS
    tl_test_hook_progress((unsigned long long)s->generated_tokens);
#endif
    if (rc->progress) {
        double tps = s->elapsed_s > 0 ? s->generated_tokens / s->elapsed_s : 0;
        double frac = s->total_prompts ? (double)s->done_prompts / s->total_prompts : 0;
        double eta = frac > 0 ? s->elapsed_s * (1 - frac) / frac : 0;
        int width = 30, fill = (int)(frac * width);
        fprintf(stderr, "\r[");
        for (int i = 0; i < width; i++) fputc(i < fill ? '#' : '.', stderr);
        fprintf(stderr, "] %d/%d prompts  %llu tokens  %.1f tok/s  ETA %.0fs   ",
                s->done_prompts, s->total_prompts, (unsigned long long)s->generated_tokens,
                tps, eta);
    }
    return stop_signal != 0;
}

/* The workload of the prompts: mean prompt and generation lengths (tokenized), their
 * count, and the context they need. */
static tl_status batch_workload(tl_model *m, const run_list *ps, const tl_generate_params *gp,
                                const tl_batch_params *bp, int ctx_given, tl_plan_request *rq) {
    double gen_sum = 0;
    int32_t prompt_max = 1, gen_max = 1;
    memset(rq, 0, sizeof *rq);
    if (ps->n < 1) return TL_OK; /* num_seqs 0: nothing to predict */
    int32_t *lens = malloc((size_t)ps->n * sizeof *lens);
    if (!lens) return tl_error_set(TL_ERR_NOMEM, "no memory for %d prompt lengths", (int)ps->n);
    for (int32_t i = 0; i < ps->n; i++) {
        size_t n = 0;
        tl_status st = tl_tokenize(m, ps->prompt[i], strlen(ps->prompt[i]), gp->add_bos, NULL, 0, &n);
        if (st && st != TL_ERR_INVALID) {
            free(lens);
            return st;
        }
        lens[i] = n < INT32_MAX ? (int32_t)n : INT32_MAX;
        gen_sum += ps->n_predict[i];
        if (lens[i] > prompt_max) prompt_max = lens[i];
        if (ps->n_predict[i] > gen_max) gen_max = ps->n_predict[i];
    }
    /* the mean and the quantiles: a block's prefill follows its longest prompt */
    tl_workload_set_prompts(&rq->w, lens, ps->n);
    free(lens);
    rq->w.gen_len = (int32_t)(gen_sum / ps->n + 0.5);
    if (rq->w.gen_len < 1) rq->w.gen_len = 1;
    rq->w.num_seqs = ps->n;
    rq->n_ctx = ctx_given ? bp->n_ctx : prompt_max + gen_max;
    /* learned positions end at the training context: longer sequences stop there ("length")
     * or, when their prompt does not fit, fail alone */
    if (!ctx_given && m->lm.hp.pos_learned && rq->n_ctx > m->lm.hp.n_ctx_train)
        rq->n_ctx = m->lm.hp.n_ctx_train;
    rq->overlap = m->lm.params.overlap;
    return TL_OK;
}

/* The workload from the prompts; then either the search (auto: the policy is applied and
 * a replanner made) or the prediction of the manual policy (for --stats). */
static tl_status plan_batch(tl_model *m, const run_list *ps, tl_batch_params *bp,
                            const tl_generate_params *gp, const char *profile_path, int lossy,
                            int kv_bits_given, int ctx_given, int automatic,
                            tl_plan_request *rq, tl_plan_result *chosen, tl_replanner **rp) {
    tl_status st = batch_workload(m, ps, gp, bp, ctx_given, rq);
    if (st) return st;
    rq->kv_bits = kv_bits_given ? bp->kv_bits : 0;
    rq->allow_lossy_kv = lossy;
    tl_hw_profile prof;
    st = cli_profile(m, profile_path, &prof);
    if (!st && !automatic) return batch_evaluate_manual(m, &prof, rq, bp, chosen);
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

/* --weights-copy: auto writes the converted copy (exec/panel_copy.h) when repacking the
 * streamed weights on arrival over the run's predicted passes would cost more than twice
 * writing the copy once (reading the model file and writing as many bytes). A copy that
 * cannot be made is an error for on, a note for auto. */
static tl_status weights_from_copy(tl_model *m, int mode, const tl_plan_result *chosen,
                                   const char *profile_path) {
    if (mode == 0) return TL_OK;
    if (mode < 0) {
        tl_hw_profile prof;
        if (!chosen || cli_profile(m, profile_path, &prof) != TL_OK) {
            tl_error_clear();
            return TL_OK;
        }
        const double bytes = (double)m->lm.tier->size;
        const double repack = chosen->cost.prefill.repack_s + chosen->cost.decode.repack_s;
        const double write = bytes / prof.disk_write_bps + bytes / tl_profile_read_bps(&prof, 4u << 20, 4);
        if (repack <= 2 * write) return TL_OK;
    }
    tl_status st = cli_use_weights_copy(m, "batch");
    if (st && mode < 0) {
        fprintf(stderr, "batch: no converted copy of the weights (%s): repacking them on "
                "arrival\n", tl_last_error());
        tl_error_clear();
        return TL_OK;
    }
    return st;
}

static void print_plan_stats(const tl_plan_request *rq, const tl_plan_result *chosen,
                             const tl_replanner *rp, const tl_batch_stats *bs) {
    /* the run is compared with the prediction for the policy it started with, priced on
     * the calibration before the first block when there was one (re-planned then: the new
     * policy; later switches are in the log below) */
    const tl_cost *c = rp && rp->has_calibrated ? &rp->calibrated : &chosen->cost;
    if (rp && rp->first_switch)
        cli_print_policy(stderr, rp->switches > 1 ? "[plan] policy that ran first"
                                                  : "[plan] policy that ran", &rp->first);
    cli_measured pre = cli_measured_none(), dec = cli_measured_none(), all = cli_measured_none();
    pre.wall_s = bs->prefill_s;
    pre.passes = (double)bs->prefill_passes;
    pre.compute_s = bs->prefill_s - bs->prefill_stall_s;
    pre.kv_wait_s = bs->prefill_kv_wait_s;
    dec.wall_s = bs->decode_s;
    dec.passes = (double)bs->decode_passes;
    dec.compute_s = bs->decode_s - bs->decode_stall_s;
    dec.kv_wait_s = bs->decode_kv_wait_s;
    pre.io_busy_s = bs->prefill_io_busy_s;
    dec.io_busy_s = bs->decode_io_busy_s;
    all.io_busy_s = pre.io_busy_s + dec.io_busy_s;
    all.wall_s = pre.wall_s + dec.wall_s;
    all.passes = pre.passes + dec.passes;
    all.compute_s = pre.compute_s + dec.compute_s;
    all.weight_bytes = (double)bs->weight_bytes_read;
    all.kv_read_bytes = (double)bs->kv_bytes_read;
    all.kv_write_bytes = (double)bs->ssd_bytes_written;
    all.kv_wait_s = pre.kv_wait_s + dec.kv_wait_s;
    all.repack_s = bs->weight_arrival_repack_s;
    tl_cost_terms sum = c->prefill;
    sum.compute_s += c->decode.compute_s;
    sum.weight_read_s += c->decode.weight_read_s;
    sum.kv_read_s += c->decode.kv_read_s;
    sum.kv_write_s += c->decode.kv_write_s;
    sum.kv_wait_s += c->decode.kv_wait_s;
    sum.repack_s += c->decode.repack_s;
    sum.weight_bytes += c->decode.weight_bytes;
    sum.kv_read_bytes += c->decode.kv_read_bytes;
    sum.kv_write_bytes += c->decode.kv_write_bytes;
    fprintf(stderr, "[plan] workload: %d prompts, mean prompt %d tokens, mean generation %d\n",
            (int)rq->w.num_seqs, (int)rq->w.prompt_len, (int)rq->w.gen_len);
    cli_print_terms(stderr, "prefill", &c->prefill, c->prefill_s, c->prefill_passes, &pre);
    cli_print_terms(stderr, "decode", &c->decode, c->decode_s, c->decode_passes, &dec);
    cli_print_terms(stderr, "whole run", &sum, c->total_s, c->prefill_passes + c->decode_passes,
                    &all);
    /* like for like: the prediction covers prefill and decode, not the calibration, loading
     * or input and output (the [fixed] line has those) */
    const double phases_s = bs->prefill_s + bs->decode_s;
    fprintf(stderr, "[plan] throughput: predicted %.2f tok/s, measured %.2f tok/s over prefill "
            "and decode (%.2f over the whole run)\n", c->tokens_per_s,
            phases_s > 0 ? bs->generated_tokens / phases_s : 0.0,
            bs->elapsed_s > 0 ? bs->generated_tokens / bs->elapsed_s : 0.0);
    if (bs->weight_panel_bytes || bs->weight_bytes_repacked)
        fprintf(stderr, "[plan] weights in int8 panels: %.1f MiB resident (repacked once at "
                "placement or from the converted copy), %.1f MiB repacked on arrival over the "
                "run's passes | repacking "
                "%.2f s in all\n", bs->weight_panel_bytes / 1048576.0,
                bs->weight_bytes_repacked / 1048576.0, bs->weight_repack_s);
    if (!rp) {
        fprintf(stderr, "[plan] re-planning off (manual policy or --no-replan)\n");
        return;
    }
    fprintf(stderr, "[plan] re-planning: %d block checks, %d re-plans, %d policy changes\n",
            (int)rp->checks, (int)rp->replans, (int)rp->switches);
    for (int32_t i = 0; i < rp->n_log; i++) fprintf(stderr, "[plan]   %s\n", rp->log[i]);
}

static void run_list_free(run_list *rl) {
    free(rl->prompt);
    free(rl->n_predict);
    free(rl->line);
}

/* The lines that go to the engine: not failed, and (--resume) not finished already. */
static int make_run_list(const batch_input *in, const batch_out *out, run_list *rl,
                         int32_t *n_done, int32_t *n_bad) {
    memset(rl, 0, sizeof *rl);
    size_t n = (size_t)in->n;
    rl->prompt = malloc(n * sizeof *rl->prompt);
    rl->n_predict = malloc(n * sizeof *rl->n_predict);
    rl->line = malloc(n * sizeof *rl->line);
    if (!rl->prompt || !rl->n_predict || !rl->line) return 0;
    *n_done = *n_bad = 0;
    for (int32_t i = 0; i < in->n; i++) {
        const batch_line *l = &in->line[i];
        if (batch_out_is_done(out, l->id)) (*n_done)++;
        else if (l->error[0]) (*n_bad)++;
        else {
            rl->prompt[rl->n] = l->prompt;
            rl->n_predict[rl->n] = l->n_predict;
            rl->line[rl->n++] = i;
        }
    }
    return 1;
}

/* The model as this rank's stage (the whole model without a pipeline), with its pipe, and
 * the context a model with learned positions defaults to: the same on every rank. */
static tl_status open_stage(cli_pipe *pp, const char *model_path, const tl_model_params *mp,
                            tl_batch_params *bp, int ctx_given, tl_model **m) {
    tl_status st = tl_model_open(model_path, mp, m);
    /* learned positions end at the training context: the default context stops there */
    if (!st && !ctx_given && (*m)->lm.hp.pos_learned && bp->n_ctx > (*m)->lm.hp.n_ctx_train)
        bp->n_ctx = (*m)->lm.hp.n_ctx_train;
    if (!st && pp->link) {
        const tl_pipe_shape shape = tl_batch_pipe_shape(*m, bp);
        st = cli_pipe_attach(pp, *m, &shape);
    }
    return st;
}

/* What rank 0 shares before a pipeline's batch plans: the workload and the context it
 * settled on (a model with learned positions shortens the default one). */
typedef struct shared_plan {
    tl_plan_request rq;
    int32_t n_ctx;
} shared_plan;

/* Ranks > 0 of a pipeline: serve rank 0's block steps through this rank's layers. */
static int batch_stage(cli_pipe *pp, const char *model_path, tl_model_params *mp,
                       tl_batch_params *bp, int ctx_given, int weights_copy,
                       const char *profile_path, int stats, int split, int place) {
    tl_model *m = NULL;
    tl_batch_stats bs;
    memset(&bs, 0, sizeof bs);
    tl_plan_request rq;
    memset(&rq, 0, sizeof rq);
    tl_status st = TL_OK;
    if (stats || split || place) { /* rank 0's workload and context; the split it plans */
        shared_plan sh;
        st = tl_link_share(pp->link, &sh, sizeof sh);
        rq = sh.rq;
        if (!st) bp->n_ctx = sh.n_ctx;
        if (!st && split)
            st = batch_split_auto(pp, model_path, mp, bp, &rq, profile_path, pp->n_layer, place);
    }
    if (!st) st = open_stage(pp, model_path, mp, bp, ctx_given, &m);
    if (!st && place) st = batch_place_stage(m, pp, &rq, bp, profile_path);
    if (!st) st = weights_from_copy(m, weights_copy, NULL, profile_path);
    batch_stage_pred pred = {-1, 0, 0, 0, 0};
    if (!st && stats) st = batch_predict_stage(m, pp, &rq, bp, profile_path, &pred);
    if (!st) st = tl_batch_pipeline_work(m, bp, &bs);
    if (!st && stats) batch_report_pipeline(m, pp, &pred, bs.elapsed_s, &bs);
    if (!st && stats)
        fprintf(stderr, "[stats] rank %d of %d (layers %d..%d) | budget %.1f MiB (peak %.1f "
                "MiB) | weights read %.1f MiB | KV read %.1f MiB, written %.1f MiB | stall "
                "%.2f s over %.2f s\n", pp->rank, pp->size, (int)m->lm.stage_first,
                (int)m->lm.stage_end - 1, tl_budget_limit(m->lm.budget) / 1048576.0,
                tl_budget_peak(m->lm.budget) / 1048576.0, bs.weight_bytes_read / 1048576.0,
                bs.kv_bytes_read / 1048576.0, bs.ssd_bytes_written / 1048576.0,
                bs.prefill_stall_s + bs.decode_stall_s, bs.elapsed_s);
    int code = cli_pipe_end(pp, m, st);
    tl_model_close(m);
    return code;
}

int tl_cmd_batch(int argc, char **argv) {
    const double t_start = tl_now();
    const char *model_path = NULL, *in_path = NULL, *out_path = NULL;
    tl_model_params mp = tl_model_default_params();
    tl_batch_params bp = tl_batch_default_params();
    tl_generate_params gp = tl_generate_default_params();
    gp.n_predict = 32;
    gp.sampler.seed = 24301;
    int progress = isatty(2), w_mem = 100, out_mode = BATCH_OUT_NEW, mode_flags = 0;
    int policy = -1, knobs = 0, placement = 0, stats = 0, lossy = 0, replan = 1, kv_bits_given = 0, ctx_given = 0;
    int weights_copy = -1, pipeline = 0, split = 0;
    const char *profile_path = NULL, *pipeline_layers = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
#define VAL() if (!(v = cli_value(argc, argv, &i))) return 2
#define INT(flag, lo, hi, dst) else if (!strcmp(a, flag)) { VAL(); if (!cli_int(a, v, lo, hi, dst)) return 2; \
        knobs += !strcmp(flag, "--gbs") || !strcmp(flag, "--num-gb") || !strcmp(flag, "--kv-mem") || \
                 !strcmp(flag, "--kv-window") || !strcmp(flag, "--kv-sinks") || \
                 !strcmp(flag, "--w-mem") || !strcmp(flag, "--prefetch") || !strcmp(flag, "--prefill-rows"); \
        placement += !strcmp(flag, "--kv-mem") || !strcmp(flag, "--w-mem") || \
                     !strcmp(flag, "--kv-window") || !strcmp(flag, "--kv-sinks"); \
        kv_bits_given |= !strcmp(flag, "--kv-bits"); ctx_given |= !strcmp(flag, "-c") || !strcmp(flag, "--ctx-size"); }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VAL(); model_path = v; }
        else if (!strcmp(a, "-i") || !strcmp(a, "--input")) { VAL(); in_path = v; }
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) { VAL(); out_path = v; }
        else if (!strcmp(a, "--resume")) { out_mode = BATCH_OUT_RESUME; mode_flags++; }
        else if (!strcmp(a, "--overwrite")) { out_mode = BATCH_OUT_OVERWRITE; mode_flags++; }
        INT("-n", 0, 1 << 24, &gp.n_predict) INT("--n-predict", 0, 1 << 24, &gp.n_predict)
        INT("-c", 2, 1 << 24, &bp.n_ctx) INT("--ctx-size", 2, 1 << 24, &bp.n_ctx)
        INT("--gbs", 1, 4096, &bp.gbs) INT("--num-gb", 1, 4096, &bp.num_gb)
        INT("--kv-bits", 4, 32, &bp.kv_bits) INT("--kv-mem", 0, 100, &bp.kv_mem_pct)
        INT("--kv-window", 0, 1 << 26, &bp.kv_window) INT("--kv-sinks", 0, 1 << 26, &bp.kv_sinks)
        INT("--w-mem", 0, 100, &w_mem) INT("--prefetch", 0, 64, &mp.prefetch)
        INT("-t", 1, 256, &mp.n_threads) INT("--threads", 1, 256, &mp.n_threads)
        INT("--top-k", 0, 1 << 24, &gp.sampler.top_k) INT("--prefill-rows", 1, 1 << 20, &bp.prefill_rows)
        INT("--repeat-last-n", 0, 1 << 20, &gp.sampler.repeat_last_n)
        else if (!strcmp(a, "--spill-dir")) { VAL(); bp.spill_dir = v; }
        else if (!strcmp(a, "--sparsity")) {
            VAL(); if (!cli_sparsity(a, v, &mp.sparsity)) return 2;
        }
        else if (!strcmp(a, "--flash-gap")) {
            VAL(); if (!cli_size(a, v, &mp.flash_gap_bytes)) return 2;
        }
        else if (!strcmp(a, "--neuron-window")) {
            VAL(); if (!cli_int(a, v, -1, TL_NEURON_WINDOW_MAX, &mp.neuron_window)) return 2;
        }
        else if (!strcmp(a, "--no-predictor")) mp.neuron_predict = 0;
        else if (!strcmp(a, "--kv-select")) {
            VAL(); if (!cli_share(a, v, &bp.kv_select)) return 2;
            knobs++, placement++;
        }
        else if (!strcmp(a, "--kv-cache")) {
            VAL(); if (!cli_size_i64(a, v, &bp.kv_cache_bytes)) return 2;
            knobs++, placement++;
        }
        else if (!strcmp(a, "--mem-budget")) { VAL(); if (!cli_size(a, v, &mp.mem_budget)) return 2; }
        else if (!strcmp(a, "--no-overlap")) mp.overlap = 0;
        else if (!strcmp(a, "--io")) { VAL(); if (!cli_io_backend(a, v, &mp.io_backend)) return 2; }
        else if (!strcmp(a, "--temp")) { VAL(); if (!cli_float(a, v, &gp.sampler.temperature)) return 2; }
        else if (!strcmp(a, "--top-p")) { VAL(); if (!cli_float(a, v, &gp.sampler.top_p)) return 2; }
        else if (!strcmp(a, "--repeat-penalty")) { VAL(); if (!cli_float(a, v, &gp.sampler.repeat_penalty)) return 2; }
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
        else if (!strcmp(a, "--weights-copy")) {
            VAL();
            if (!strcmp(v, "auto")) weights_copy = -1;
            else if (!strcmp(v, "on")) weights_copy = 1;
            else if (!strcmp(v, "off")) weights_copy = 0;
            else { fprintf(stderr, "error: --weights-copy expects auto, on or off\n"); return 2; }
        }
        else if (!strcmp(a, "--stats")) stats = 1;
        else if (!strcmp(a, "--pipeline")) pipeline = 1;
        else if (!strcmp(a, "--pipeline-layers")) { VAL(); pipeline_layers = v; pipeline = 1; }
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
    if (mode_flags > 1) {
        fprintf(stderr, "error: --resume and --overwrite exclude each other\n");
        return 2;
    }
    if (tl_sampler_params_check(&gp.sampler)) {
        fprintf(stderr, "error: %s\n", tl_last_error());
        return 2;
    }
    mp.w_mem_pct = w_mem;
    if (policy == 1 && knobs && !pipeline) {
        fprintf(stderr, "error: --policy auto chooses gbs, num_gb, prefill rows, KV placement, "
                "weight placement and prefetch itself; drop those flags or use --policy manual\n");
        return 2;
    }
    if (pipeline && policy == 1 && placement) {
        fprintf(stderr, "error: with --pipeline, --policy auto places each rank's KV cache and "
                "weights at its own --mem-budget (the ranks share gbs, num_gb, prefill rows, "
                "KV bits and context); drop --kv-mem, --w-mem, --kv-window, --kv-sinks, "
                "--kv-select and --kv-cache\n");
        return 2;
    }
    const int place = pipeline && policy == 1;
    if (policy < 0) policy = mp.mem_budget > 0 && !knobs && !pipeline;
    cli_pipe pp = {0};
    if (pipeline) {
        /* --policy auto plans the split too, unless the ranks' layers are given */
        split = pipeline_layers ? !strcmp(pipeline_layers, "auto") : place;
        int prc = cli_pipe_start(&pp, model_path, split ? NULL : pipeline_layers, &mp);
        if (prc) return prc;
        if (pp.rank > 0) return batch_stage(&pp, model_path, &mp, &bp, ctx_given, weights_copy,
                                            profile_path, stats, split, place);
    }

    /* 1. the output: checked and locked, not touched */
    char err[1024];
    batch_out out;
    if (batch_out_prepare(&out, out_path, in_path, out_mode, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return cli_pipe_abort(&pp, 1);
    }
    /* 2. the input, strictly */
    batch_input in;
    if (batch_input_read(in_path, gp.n_predict, out_mode == BATCH_OUT_RESUME, &in, err,
                         sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        batch_out_close(&out, NULL, 0);
        return cli_pipe_abort(&pp, 1);
    }
    run_list rl;
    int32_t n_done = 0, n_bad = 0;
    if (!make_run_list(&in, &out, &rl, &n_done, &n_bad)) {
        fprintf(stderr, "error: out of memory\n");
        run_list_free(&rl);
        batch_input_free(&in);
        batch_out_close(&out, NULL, 0);
        return cli_pipe_abort(&pp, 1);
    }
    if (n_done) fprintf(stderr, "batch: --resume: %d of %d prompts already done in %s\n",
                        (int)n_done, (int)in.n, out_path);
    /* 3. the model and the policy, checked against the budget */
    tl_model *m = NULL;
    tl_batch_stats bs;
    memset(&bs, 0, sizeof bs);
    tl_replanner *rp = NULL;
    tl_plan_request rq;
    tl_plan_result chosen;
    int predicted = 0;
    batch_stage_pred pipe_pred = {-1, 0, 0, 0, 0};
    tl_status st = TL_OK;
    double load_s = 0, plan_s = 0;
    if (rl.n > 0 || pp.link) { /* a pipeline's rank 0 tells the others, even of no work */
        double t0 = tl_now();
        st = open_stage(&pp, model_path, &mp, &bp, ctx_given, &m);
        load_s = tl_now() - t0;
        t0 = tl_now();
        if (!st && pp.link && (stats || split || place)) { /* every stage plans with it */
            memset(&rq, 0, sizeof rq);
            st = batch_workload(m, &rl, &gp, &bp, ctx_given, &rq);
            shared_plan sh = {rq, bp.n_ctx};
            if (!st) st = tl_link_share(pp.link, &sh, sizeof sh);
            const int32_t a = mp.layer_first, b = mp.layer_end;
            if (!st && split) st = batch_split_auto(&pp, model_path, &mp, &bp, &rq, profile_path,
                                              pp.n_layer, place);
            if (!st && (mp.layer_first != a || mp.layer_end != b)) { /* its new layers */
                tl_model_close(m);
                m = NULL;
                st = open_stage(&pp, model_path, &mp, &bp, ctx_given, &m);
            }
            if (!st && place) st = batch_place_stage(m, &pp, &rq, &bp, profile_path);
            if (!st && stats)
                st = batch_predict_stage(m, &pp, &rq, &bp, profile_path, &pipe_pred);
        }
        if (!st && policy == 1 && !pp.link) {
            st = plan_batch(m, &rl, &bp, &gp, profile_path, lossy, kv_bits_given, ctx_given, 1,
                            &rq, &chosen, &rp);
            predicted = !st;
            if (!st && !replan) {
                free(rp);
                rp = NULL;
            }
        } else if (!st && stats && !pp.link) { /* a manual policy: predicted for the comparison only */
            if (plan_batch(m, &rl, &bp, &gp, profile_path, lossy, 1, 1, 0, &rq, &chosen, &rp))
                fprintf(stderr, "[plan] no prediction for this policy: %s\n", tl_last_error());
            else
                predicted = 1;
        }
        if (!st) st = weights_from_copy(m, weights_copy, predicted ? &chosen : NULL, profile_path);
        if (!st) st = tl_batch_check(m, &bp);
        plan_s = tl_now() - t0;
    }
    if (st) {
        int code = pp.link ? cli_pipe_end(&pp, m, st) : cli_fail(st);
        free(rp);
        tl_model_close(m);
        run_list_free(&rl);
        batch_input_free(&in);
        batch_out_close(&out, NULL, 0);
        return code;
    }
    /* 4. the output is made, replaced or resumed; the run */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    run_ctx rc;
    memset(&rc, 0, sizeof rc);
    rc.out = &out;
    rc.in = &in;
    rc.rl = &rl;
    rc.progress = progress;
    int code = 0;
    if (batch_out_begin(&out, rc.err, sizeof rc.err)) {
        fprintf(stderr, "error: %s\n", rc.err);
        code = 1;
    }
    /* each prompt samples with seed + its input position, as in a run that did them all */
    tl_batch_run run = {rp ? tl_replanner_hook : NULL, rp, NULL, rl.line};
#ifdef TL_TEST_HOOKS
    tl_fault_spec fault;
    if (tl_test_hook_spill_fault(&fault)) run.spill_fault = &fault;
#endif
    if (!code && rl.n > 0)
        st = tl_batch_generate_ex(m, &bp, &gp, (const char *const *)rl.prompt, rl.n_predict,
                                  rl.n, on_result, on_progress, &rc, &run, &bs);
    if (progress && rl.n > 0) fputc('\n', stderr);
    /* error records not yet written are complete results too: after a stop or a failure
     * they go out as well, so nothing computed is lost */
    if (!code && !rc.write_failed && write_pending_errors(&rc, in.n)) rc.write_failed = 1;
    if (rc.write_failed) {
        fprintf(stderr, "error: %s\n", rc.err);
        code = 1;
    } else if (!code && st && !(st == TL_ERR_CANCELLED && stop_signal)) {
        code = cli_fail(st);
    }
    if (batch_out_close(&out, rc.err, sizeof rc.err) && !code) {
        fprintf(stderr, "error: %s\n", rc.err);
        code = 1;
    }
    double gen = bs.generated_tokens ? (double)bs.generated_tokens : 1;
    if (rl.n > 0)
        fprintf(stderr, "batch: %d/%d prompts, %llu prompt + %llu generated tokens | prefill "
                "%.2f s, decode %.2f s, %.2f generated tok/s | per generated token: weights "
                "read %.1f KiB, KV read %.1f KiB, SSD written %.1f KiB\n", bs.done_prompts,
                bs.total_prompts, (unsigned long long)bs.prompt_tokens,
                (unsigned long long)bs.generated_tokens, bs.prefill_s, bs.decode_s,
                bs.elapsed_s > 0 ? bs.generated_tokens / bs.elapsed_s : 0,
                bs.weight_bytes_read / gen / 1024, bs.kv_bytes_read / gen / 1024,
                bs.ssd_bytes_written / gen / 1024);
    if (rl.n > 0 && bs.kv_pages_read + bs.kv_cache_hits > 0) {
        double seen = (double)(bs.kv_pages_read + bs.kv_cache_hits);
        fprintf(stderr, "batch: disk KV pages: %llu read, %llu found in memory: hit rate "
                "%.3f", (unsigned long long)bs.kv_pages_read,
                (unsigned long long)bs.kv_cache_hits, (double)bs.kv_cache_hits / seen);
        if (bp.kv_select == 0) /* the cache model is for exact attention */
            fprintf(stderr, " (predicted %.3f)", 1.0 - (double)bs.kv_predicted_reads / seen);
        fputc('\n', stderr);
    }
    fprintf(stderr, "batch: %d result lines written to %s (%d with an error)%s\n",
            (int)rc.written, out_path, (int)rc.failed,
            n_done ? ", after the ones already there" : "");
    if (stats && predicted && bs.done_prompts > 0) print_plan_stats(&rq, &chosen, rp, &bs);
    if (!code && stop_signal) {
        fprintf(stderr, "batch: stopped by %s; the complete results are in %s; run again "
                "with --resume to finish\n", stop_signal == SIGINT ? "SIGINT" : "SIGTERM",
                out_path);
        code = 128 + stop_signal;
    } else if (!code && rc.failed) {
        code = EXIT_SOME_FAILED;
    }
    const double t0 = tl_now();
    if (pp.link && stats && (!st || st == TL_ERR_CANCELLED) && !tl_pipe_finish(m->pipe))
        batch_report_pipeline(m, &pp, &pipe_pred, bs.elapsed_s, &bs);
    if (pp.link) {
        int pcode = cli_pipe_end(&pp, m, st && st != TL_ERR_CANCELLED ? st : TL_OK);
        if (!code) code = pcode;
    }
    tl_model_close(m);
    if (stats && rl.n > 0) { /* the costs that are not the work: the wall time around it */
        const double wall = tl_now() - t_start, close_s = tl_now() - t0;
        const double hook_s = rp ? rp->hook_s : 0, work = bs.prefill_s + bs.decode_s;
        fprintf(stderr, "[fixed] %.2f s of %.2f s wall (%.1f%%) outside prefill and decode: "
                "load %.2f s, plan %.2f s, calibration and re-planning %.2f s, close %.2f s, "
                "other %.2f s (input, tokenizing, output)\n", wall - work, wall,
                wall > 0 ? 100 * (wall - work) / wall : 0.0, load_s, plan_s, hook_s, close_s,
                wall - work - load_s - plan_s - hook_s - close_s);
    }
    free(rp);
    run_list_free(&rl);
    batch_input_free(&in);
    return code;
}
