/* cmd_run.c - `tierllm run`: generate text from a prompt, streaming it to stdout.
 * Flags follow llama.cpp's llama-cli where they overlap. Timing goes to stderr. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tools/cli.h"
#include "base/out_file.h"
#include "base/status.h"
#include "model/flash_layout.h"
#include "tools/cli_plan.h"
#include "tools/cli_pipe.h"
#include "exec/engine.h"
#include "plan/calibrate.h"
#include "plan/replan.h"

static void usage(void) {
    printf("usage: tierllm run -m MODEL.gguf [options]\n"
           "  -m, --model PATH        GGUF model file\n"
           "  -p, --prompt TEXT       prompt (default: empty, start from BOS)\n"
           "  -f, --file PATH         read the prompt from a file (text, at most %zu MiB)\n"
           "  -n, --n-predict N       tokens to generate (default 128, -1 = until EOS)\n"
           "  -c, --ctx-size N        context length (default: model's, at most 4096)\n"
           "  -b, --batch-size N      prompt tokens per matrix-matrix step (default 64)\n"
           "  -t, --threads N         compute threads (default: all cores)\n"
           "  --temp T                temperature (default 0.8; 0 = greedy)\n"
           "  --top-k K               top-k (default 40; 0 = off)\n"
           "  --top-p P               top-p (default 0.95; 1 = off)\n"
           "  --repeat-penalty R      repetition penalty (default 1.0 = off)\n"
           "  --repeat-last-n N       tokens the penalty looks back over (default 64)\n"
           "  -s, --seed S            random seed (default 24301)\n"
           "  --ignore-eos            keep generating past end-of-sequence\n"
           "  --reference             use the scalar reference kernels (slow)\n"
           "memory and IO:\n"
           "  --mem-budget SIZE       memory the engine may hold, e.g. 2G (default: 80%% of\n"
           "                          available memory); weights that do not fit stream\n"
           "  --prefetch N            streamed layers read ahead (default 2)\n"
           "  --no-overlap            read streamed layers synchronously (for comparison)\n"
           "  --io auto|pool|uring    IO backend (default auto: io_uring if it works)\n"
           "  --io-chunk SIZE         read chunk size (default 1M)\n"
           "  --io-depth N            chunks in flight (default 8)\n"
           "  --io-order kv-first|by-need  KV pages ahead of streamed weights (default), or\n"
           "                          both in the order compute needs them\n"
           "  --no-direct             read through the page cache instead of O_DIRECT\n"
           "  --weights-copy on|off   stream Q8_0/Q4_0 weights from a converted copy in the\n"
           "                          int8 kernels' layout, written once to the cache\n"
           "                          directory (default off: repacked on arrival each pass;\n"
           "                          AVX-512 VNNI CPUs; the model file is only read)\n"
           "  --kv-window N           KV in tiers: the last N positions (and the sinks) stay\n"
           "                          in memory, older pages go to --spill-dir (default:\n"
           "                          tiers with N = 256 only when the KV does not fit the\n"
           "                          budget; -1 = always in memory)\n"
           "  --kv-sinks N            first positions kept in memory with tiers (default 16)\n"
           "  --kv-cache SIZE         memory caching disk KV pages (default: what the budget\n"
           "                          leaves once every weight is resident)\n"
           "  --spill-dir DIR         where disk KV pages go (default $TMPDIR or /tmp)\n"
           "  --kv-recompute N        with tiers and 32-bit KV: the first N layers keep\n"
           "                          their input rows on disk beside K and V and recompute\n"
           "                          K and V from them instead of reading them (default 0)\n"
           CLI_SPARSITY_HELP
           "  --kv-select SHARE       lossy, opt-in: each generated token attends to this\n"
           "                          share of its KV pages (0.4 keeps ~95%% of the\n"
           "                          attention mass on stories260K), chosen by per-page\n"
           "                          key bounds; 0 = exact attention (default)\n"
           "  --stats                 print IO/compute/stall statistics per token, and the\n"
           "                          plan's prediction beside the measurement\n"
           "  --measure-recall        ReLU files stored by neuron: also compute every neuron\n"
           "                          (reading all) and report the share of the active\n"
           "                          neurons' output mass predicted (--stats)\n"
           "  --ids FILE              write the generated token ids there, one per line\n"
           "  --policy auto|manual    auto: the planner picks n_batch, prefetch and the\n"
           "                          context size (default when --mem-budget is given and\n"
           "                          neither --prefetch nor -b is); manual: flags/defaults\n"
           "  --profile PATH          hardware profile for auto (default: cached, or measured)\n"
           "pipeline (an MPI build, under mpirun -np N):\n"
           "  --pipeline              each rank holds a contiguous range of layers with its\n"
           "                          own --mem-budget; rank 0 prints the text; with\n"
           "                          --policy auto each rank plans its own stage\n"
           "  --pipeline-layers LIST  layers per rank, e.g. 12,10 (default: an even split)\n",
           CLI_PROMPT_FILE_MAX >> 20);
}

typedef struct run_state {
    tl_context *ctx;
    int stats;
    tl_run_stats *snap; /* stats after each generated token (printed at the end, so they
                           do not interleave with the streamed text) */
    int n, cap;
    int32_t *ids;       /* --ids: the generated tokens' ids (written at the end, whole) */
    size_t n_ids, ids_cap;
} run_state;

static void print_token_stats(const tl_run_stats *a, const tl_run_stats *b, int n) {
    double wall = b->wall_s - a->wall_s, stall = b->stall_s - a->stall_s;
    double io = b->io_busy_s - a->io_busy_s;
    uint64_t disk = b->bytes_read_disk - a->bytes_read_disk;
    uint64_t mem = b->bytes_read_mem - a->bytes_read_mem;
    fprintf(stderr, "[stats] %s %d: disk %.1f MiB, mem %.1f MiB | io busy %.3f s, compute "
            "%.3f s, stall %.3f s | read %.2f GB/s | overlap %.2f",
            n ? "token" : "prefill+token", n, disk / 1048576.0,
            mem / 1048576.0, io, wall - stall, stall, io > 0 ? disk / io / 1e9 : 0.0,
            wall > 0 ? 1.0 - stall / wall : 1.0);
    if (b->kv_window_pages && !b->kv_select_pages_total) {
        uint64_t rd = b->kv_pages_read - a->kv_pages_read, hit = b->kv_cache_hits - a->kv_cache_hits;
        uint64_t pr = b->kv_predicted_reads - a->kv_predicted_reads;
        fprintf(stderr, " | KV disk pages read %llu, cached %llu: hit rate %.3f (predicted "
                "%.3f)", (unsigned long long)rd, (unsigned long long)hit,
                rd + hit ? (double)hit / (double)(rd + hit) : 1.0,
                rd + hit ? 1.0 - (double)pr / (double)(rd + hit) : 1.0);
    } else if (b->kv_window_pages) { /* selection: the prefetch stages the hot pages */
        uint64_t rd = b->kv_pages_read - a->kv_pages_read;
        uint64_t dem = b->kv_demand_reads - a->kv_demand_reads;
        uint64_t used = b->kv_select_disk_pages - a->kv_select_disk_pages;
        double hn = b->kv_heat_needed - a->kv_heat_needed, hr = b->kv_heat_ready - a->kv_heat_ready;
        fprintf(stderr, " | KV disk pages read %llu, of them on demand %llu: hit rate %.3f "
                "(predicted %.3f)", (unsigned long long)rd, (unsigned long long)dem,
                used ? 1.0 - (double)dem / (double)used : 1.0, hn > 0 ? hr / hn : 1.0);
    }
    fputc('\n', stderr);
}

static int on_piece(void *user, int32_t token, const char *text, size_t len) {
    run_state *rs = user;
    if (rs->ids_cap && token >= 0) {
        if (rs->n_ids == rs->ids_cap) {
            int32_t *more = realloc(rs->ids, 2 * rs->ids_cap * sizeof *more);
            if (!more) { /* stops generation; reported after it */
                rs->ids_cap = 0;
                return 1;
            }
            rs->ids = more, rs->ids_cap *= 2;
        }
        rs->ids[rs->n_ids++] = token;
    }
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    if (rs->stats && token >= 0 && rs->n < rs->cap) tl_context_get_stats(rs->ctx, &rs->snap[rs->n++]);
    return 0;
}

/* --ids: the generated ids, one per line, written whole or not at all (base/out_file.h). */
static tl_status write_ids(const char *path, const int32_t *ids, size_t n) {
    char *text = malloc(n * 12 + 1);
    if (!text) return tl_error_set(TL_ERR_NOMEM, "out of memory for --ids");
    size_t len = 0;
    for (size_t i = 0; i < n; i++) len += (size_t)sprintf(text + len, "%d\n", (int)ids[i]);
    tl_out_file out;
    tl_status st = tl_out_file_open(&out, path);
    if (!st) {
        st = tl_out_file_write(&out, text, len);
        if (st) tl_out_file_abort(&out);
        else st = tl_out_file_commit(&out);
    }
    free(text);
    return st;
}

/* The workload from the prompt and -n; then the search with the policy applied (auto),
 * or the prediction of the manual policy (for --stats). */
/* The planner's policy as the model's knobs and the context's parameters. */
static void apply_run_policy(tl_model *m, const tl_policy *pol, tl_context_params *cp) {
    tl_plan_apply(pol, m, NULL);
    tl_plan_context_params(pol, m, cp);
}

/* A pipeline's prompt chunks are rank 0's and every stage computes them: after each rank
 * planned its own stage (its layers, its budget), all take the smallest chunk any planned,
 * at most the rows the pipe was opened for. A smaller chunk than a rank planned only shrinks
 * its scratch, so its plan still fits. */
static tl_status agree_prompt_rows(cli_pipe *pp, tl_model *m, tl_context_params *cp) {
    const tl_pipe_shape shape = tl_context_pipe_shape(m, cp);
    int32_t mine = shape.max_rows, rows = mine;
    int32_t *all = calloc((size_t)pp->size, sizeof *all);
    if (!all) return TL_ERR_NOMEM;
    tl_status st = tl_link_gather(pp->link, &mine, sizeof mine, all);
    for (int r = 1; !st && pp->rank == 0 && r < pp->size; r++) rows = all[r] < rows ? all[r] : rows;
    free(all);
    if (!st) st = tl_link_share(pp->link, &rows, sizeof rows);
    if (st) return st;
    if (rows > pp->rows) rows = pp->rows;
    cp->n_batch = rows;
    if (pp->rank == 0) fprintf(stderr, "policy auto: the ranks take prompt chunks of %d rows\n",
                               (int)rows);
    return TL_OK;
}

static tl_status plan_run(tl_model *m, const char *prompt, const tl_generate_params *gp,
                          tl_context_params *cp, int ctx_given, const char *profile_path,
                          int automatic, tl_plan_request *rq, tl_plan_result *chosen,
                          tl_hw_profile *prof) {
    size_t n = 0;
    tl_status st = tl_tokenize(m, prompt, strlen(prompt), gp->add_bos, NULL, 0, &n);
    if (st && st != TL_ERR_INVALID) return st;
    tl_model_desc d;
    tl_model_describe(m, &d);
    int32_t train = d.n_ctx_train > 0 && d.n_ctx_train < 4096 ? d.n_ctx_train : 4096;
    int32_t n_ctx = ctx_given && cp->n_ctx > 0 ? cp->n_ctx : train;
    memset(rq, 0, sizeof *rq);
    rq->single = 1;
    rq->w.num_seqs = 1;
    rq->w.prompt_len = n > 0 ? (int32_t)n : 1;
    /* the context only needs prompt + generation: a smaller KV leaves more for weights */
    rq->w.gen_len = gp->n_predict >= 1 ? gp->n_predict : n_ctx - rq->w.prompt_len;
    if (rq->w.gen_len < 1) rq->w.gen_len = 1;
    rq->n_ctx = rq->w.prompt_len + rq->w.gen_len;
    if (ctx_given && cp->n_ctx > 0) rq->n_ctx = cp->n_ctx;
    if (rq->n_ctx > n_ctx && !ctx_given) rq->n_ctx = n_ctx;
    if (rq->w.prompt_len + rq->w.gen_len > rq->n_ctx) rq->w.gen_len = rq->n_ctx - rq->w.prompt_len;
    if (rq->w.gen_len < 1) return TL_OK; /* the context check in tl_generate reports it */
    rq->kv_bits = cp->kv_bits;
    rq->overlap = m->lm.params.overlap;
    if ((st = cli_profile(m, profile_path, prof))) return st;
    if (!automatic) {
        rq->n_ctx = n_ctx;
        tl_policy pol = tl_plan_default_policy(m, rq);
        pol.prefill_rows = cp->n_batch > 0 ? cp->n_batch : 64;
        if (pol.prefill_rows > n_ctx) pol.prefill_rows = n_ctx;
        pol.w_mem_pct = m->lm.params.w_mem_pct;
        return tl_plan_evaluate(m, prof, &rq->w, &pol, chosen);
    }
    if ((st = tl_plan_search(m, prof, rq, chosen))) return st;
    apply_run_policy(m, &chosen->policy, cp);
    cli_print_policy(stderr, "policy auto", chosen);
    return TL_OK;
}

/* Once placed: one pass of the engine's own streaming against the profile; more than
 * 20% off, the profile is corrected and the search runs again; a different policy is
 * placed instead (plan/calibrate.h), its stream timed when the first placement streamed
 * nothing to time. */
static tl_status recheck_run(tl_model *m, tl_context **c, tl_context_params *cp,
                             const tl_plan_request *rq, tl_plan_result *chosen,
                             tl_hw_profile *prof) {
    double bps, ratio, cratio = 1, pratio = 1;
    tl_status st = tl_plan_calibrate_disk(m, prof, &bps, &ratio);
    if (!st) st = tl_plan_calibrate_compute(m, prof, &cratio);
    if (!st) st = tl_plan_calibrate_products(m, prof, &pratio);
    double delay = 0;
    if (!st) {
        const tl_plan_decode_shape ds = tl_plan_decode_shape_of(&chosen->policy, &rq->w);
        st = tl_plan_calibrate_ring(m, prof, &ds, &delay);
    }
    double page_scale = 0;
    if (!st)
        st = tl_plan_calibrate_kv(m, prof, chosen, &rq->w, cp->spill_dir, &page_scale, NULL);
    if (!(page_scale > 0)) page_scale = 1; /* not timed */
    if (st) return st;
    if (ratio > 0.8 && ratio < 1.25 && cratio > 0.8 && cratio < 1.25 && pratio > 0.8 &&
        pratio < 1.25 && page_scale > 0.8 && page_scale < 1.25) {
        /* the policy stays; its prediction is the calibrated profile's, as printed beside
         * the run's measurement */
        tl_plan_result again;
        if (tl_plan_evaluate(m, prof, &rq->w, &chosen->policy, &again) == TL_OK)
            chosen->cost = again.cost;
        tl_error_clear();
        return TL_OK;
    }
    tl_plan_result next;
    if ((st = tl_plan_search(m, prof, rq, &next))) return st;
    int change = next.policy.prefetch != chosen->policy.prefetch ||
                 next.policy.prefill_rows != chosen->policy.prefill_rows ||
                 next.policy.n_ctx != chosen->policy.n_ctx ||
                 next.policy.kv_window_pages != chosen->policy.kv_window_pages ||
                 next.policy.kv_cache_pages != chosen->policy.kv_cache_pages;
    if (bps > 0)
        fprintf(stderr, "policy auto: the model file streams at %.2f GB/s, %.0f%% of the "
                "profile's figure, and matrix-vector products take %.0f%% of the profile's "
                "time; re-planned: %s\n", bps / 1e9, ratio * 100, cratio * 100,
                change ? "new policy" : "policy kept");
    else /* too little streams through the ring to time */
        fprintf(stderr, "policy auto: matrix-vector products take %.0f%% of the profile's time; "
                "re-planned: %s\n", cratio * 100, change ? "new policy" : "policy kept");
    if (pratio <= 0.8 || pratio >= 1.25)
        fprintf(stderr, "policy auto: a layer over 16 to 512 rows takes (the furthest off) "
                "%.0f%% of its price beside attention\n", pratio * 100);
    if (page_scale <= 0.8 || page_scale >= 1.25)
        fprintf(stderr, "policy auto: KV pages read from a spill file take %.0f%% of the "
                "time the profile gives them\n", 100 / page_scale);
    *chosen = next;
    if (!change) return TL_OK;
    tl_context_close(*c);
    *c = NULL;
    tl_engine_unplace(m);
    apply_run_policy(m, &next.policy, cp);
    if ((st = tl_context_open(m, cp, c))) return st;
    if (bps <= 0 && next.streamed_bytes > 0) {
        /* the first placement streamed nothing to time: this one's stream and its reads
         * beside compute, so that the prediction printed is at the disk's rate now */
        const tl_plan_decode_shape ds = tl_plan_decode_shape_of(&next.policy, &rq->w);
        double delay = 0;
        st = tl_plan_calibrate_disk(m, prof, &bps, &ratio);
        if (!st) st = tl_plan_calibrate_ring(m, prof, &ds, &delay);
        if (st) return st;
        tl_plan_result again;
        if (tl_plan_evaluate(m, prof, &rq->w, &next.policy, &again) == TL_OK) *chosen = again;
        tl_error_clear();
    }
    cli_print_policy(stderr, "policy auto", chosen);
    return TL_OK;
}

/* With the KV cache in tiers, the prediction of the policy the context really runs: its
 * KV placement and the weight plan it placed. */
static tl_status predict_tiers(tl_model *m, const tl_context *c, const tl_context_params *cp,
                               const char *profile_path, const tl_plan_request *rq,
                               tl_plan_result *out, tl_hw_profile *prof) {
    tl_status st = cli_profile(m, profile_path, prof);
    if (st) return st;
    const tl_kv_params *kp = tl_context_kv_params(c);
    tl_policy pol = tl_plan_default_policy(m, rq);
    pol.n_ctx = kp->max_tokens;
    pol.prefill_rows = cp->n_batch > 0 ? cp->n_batch : 64;
    if (pol.prefill_rows > pol.n_ctx) pol.prefill_rows = pol.n_ctx;
    tl_policy_set_kv(&pol, kp);
    pol.kv_select = cp->kv_select;
    memset(out, 0, sizeof *out);
    out->policy = pol;
    return tl_cost_predict(m, prof, &rq->w, &pol, tl_residency_plan(m->res), &out->cost);
}

static void print_plan_stats(const tl_plan_result *chosen, const tl_generate_stats *gs,
                             const tl_run_stats *t, const tl_run_stats *after_prefill) {
    const tl_cost *c = &chosen->cost;
    cli_measured pre = cli_measured_none(), dec = cli_measured_none();
    pre.wall_s = gs->prefill_seconds;
    dec.wall_s = gs->decode_seconds;
    dec.passes = gs->n_decoded;
    if (after_prefill) {
        pre.compute_s = after_prefill->compute_s;
        pre.io_busy_s = after_prefill->io_busy_s;
        pre.weight_bytes = (double)after_prefill->bytes_read_disk;
        pre.passes = (double)after_prefill->forward_passes;
        dec.compute_s = t->compute_s - after_prefill->compute_s;
        dec.io_busy_s = t->io_busy_s - after_prefill->io_busy_s;
        dec.weight_bytes = (double)(t->bytes_read_disk - after_prefill->bytes_read_disk);
        pre.repack_s = after_prefill->weights_arrival_repack_s;
        dec.repack_s = t->weights_arrival_repack_s - after_prefill->weights_arrival_repack_s;
        if (t->kv_window_pages) { /* KV in tiers: its disk reads and writes are measured */
            pre.kv_read_bytes = (double)after_prefill->kv_bytes_read;
            dec.kv_read_bytes = (double)(t->kv_bytes_read - after_prefill->kv_bytes_read);
        }
    }
    cli_print_terms(stderr, "prefill", &c->prefill, c->prefill_s, c->prefill_passes, &pre);
    cli_print_terms(stderr, "decode", &c->decode, c->decode_s, c->decode_passes, &dec);
}

/* A later stage's own line: its layers, budget and IO. */
static void print_stage_stats(tl_context *c, const tl_model *m, const cli_pipe *pp) {
    tl_run_stats t;
    tl_pipe_stats ps;
    tl_context_get_stats(c, &t);
    tl_pipe_get_stats(m->pipe, &ps);
    fprintf(stderr, "[stats] rank %d of %d | budget %.1f MiB (peak %.1f MiB) | weights resident "
            "%.1f MiB, streamed %.1f MiB per pass | disk %.1f MiB | %.2f s, of it %.2f s "
            "waiting for the pipeline, stall %.2f s\n",
            pp->rank, pp->size, t.budget_bytes / 1048576.0, t.budget_peak_bytes / 1048576.0,
            t.weights_resident_bytes / 1048576.0, t.weights_streamed_bytes / 1048576.0,
            t.bytes_read_disk / 1048576.0, t.wall_s, ps.wait_s, t.stall_s);
}

int tl_cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = "", *prompt_file = NULL;
    tl_model_params mp = tl_model_default_params();
    tl_context_params cp = tl_context_default_params();
    tl_generate_params gp = tl_generate_default_params();
    gp.sampler.seed = 24301;
    int stats = 0, policy = -1, knobs = 0, ctx_given = 0, kv_knobs = 0, weights_copy = 0;
    int pipeline = 0;
    const char *profile_path = NULL, *pipeline_layers = NULL, *ids_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
#define VAL() if (!(v = cli_value(argc, argv, &i))) return 2
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VAL(); model_path = v; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { VAL(); prompt = v; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { VAL(); prompt_file = v; }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            VAL(); if (!cli_int(a, v, -1, 1 << 24, &gp.n_predict)) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            VAL(); if (!cli_int(a, v, 0, 1 << 24, &cp.n_ctx)) return 2;
            ctx_given = 1;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            VAL(); if (!cli_int(a, v, 1, 1 << 16, &cp.n_batch)) return 2;
            knobs++;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VAL(); if (!cli_int(a, v, 1, 256, &mp.n_threads)) return 2;
        } else if (!strcmp(a, "--temp")) {
            VAL(); if (!cli_float(a, v, &gp.sampler.temperature)) return 2;
        } else if (!strcmp(a, "--top-k")) {
            VAL(); if (!cli_int(a, v, 0, 1 << 24, &gp.sampler.top_k)) return 2;
        } else if (!strcmp(a, "--top-p")) {
            VAL(); if (!cli_float(a, v, &gp.sampler.top_p)) return 2;
        } else if (!strcmp(a, "--repeat-penalty")) {
            VAL(); if (!cli_float(a, v, &gp.sampler.repeat_penalty)) return 2;
        } else if (!strcmp(a, "--repeat-last-n")) {
            VAL(); if (!cli_int(a, v, 0, 1 << 20, &gp.sampler.repeat_last_n)) return 2;
        } else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
            VAL(); if (!cli_u64(a, v, &gp.sampler.seed)) return 2;
        } else if (!strcmp(a, "--ignore-eos")) gp.stop_at_eos = 0;
        else if (!strcmp(a, "--reference")) mp.reference_kernels = 1;
        else if (!strcmp(a, "--mem-budget")) {
            VAL(); if (!cli_size(a, v, &mp.mem_budget)) return 2;
        } else if (!strcmp(a, "--prefetch")) {
            VAL(); if (!cli_int(a, v, 0, 64, &mp.prefetch)) return 2;
            knobs++;
        } else if (!strcmp(a, "--no-overlap")) mp.overlap = 0;
        else if (!strcmp(a, "--policy")) {
            VAL();
            if (!strcmp(v, "auto")) policy = 1;
            else if (!strcmp(v, "manual")) policy = 0;
            else { fprintf(stderr, "error: --policy expects auto or manual\n"); return 2; }
        } else if (!strcmp(a, "--profile")) { VAL(); profile_path = v; }
        else if (!strcmp(a, "--io")) {
            VAL(); if (!cli_io_backend(a, v, &mp.io_backend)) return 2;
        } else if (!strcmp(a, "--io-chunk")) {
            VAL(); if (!cli_size(a, v, &mp.io_chunk_bytes)) return 2;
        } else if (!strcmp(a, "--io-depth")) {
            VAL(); if (!cli_int(a, v, 1, 1024, &mp.io_queue_depth)) return 2;
        } else if (!strcmp(a, "--io-order")) {
            VAL();
            if (!strcmp(v, "kv-first")) mp.io_order = TL_IO_KV_FIRST;
            else if (!strcmp(v, "by-need")) mp.io_order = TL_IO_BY_NEED;
            else {
                fprintf(stderr, "error: --io-order expects kv-first or by-need, not %s\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--no-direct")) mp.direct_io = 0;
        else if (!strcmp(a, "--weights-copy")) {
            VAL();
            if (!strcmp(v, "on")) weights_copy = 1;
            else if (!strcmp(v, "off")) weights_copy = 0;
            else { fprintf(stderr, "error: --weights-copy expects on or off\n"); return 2; }
        }
        else if (!strcmp(a, "--stats")) stats = 1;
        else if (!strcmp(a, "--pipeline")) pipeline = 1;
        else if (!strcmp(a, "--pipeline-layers")) { VAL(); pipeline_layers = v; pipeline = 1; }
        else if (!strcmp(a, "--kv-window")) {
            VAL(); if (!cli_int(a, v, -1, 1 << 26, &cp.kv_window)) return 2;
            kv_knobs++;
        } else if (!strcmp(a, "--kv-sinks")) {
            VAL(); if (!cli_int(a, v, 0, 1 << 26, &cp.kv_sinks)) return 2;
            kv_knobs++;
        } else if (!strcmp(a, "--kv-recompute")) {
            VAL(); if (!cli_int(a, v, 0, 256, &cp.kv_recompute)) return 2;
            kv_knobs++;
        } else if (!strcmp(a, "--kv-cache")) {
            VAL(); if (!cli_size_i64(a, v, &cp.kv_cache_bytes)) return 2;
            kv_knobs++;
        } else if (!strcmp(a, "--spill-dir")) { VAL(); cp.spill_dir = v; kv_knobs++; }
        else if (!strcmp(a, "--sparsity")) {
            VAL(); if (!cli_sparsity(a, v, &mp.sparsity)) return 2;
        }
        else if (!strcmp(a, "--flash-gap")) {
            VAL(); if (!cli_size(a, v, &mp.flash_gap_bytes)) return 2;
        } else if (!strcmp(a, "--neuron-window")) {
            VAL(); if (!cli_int(a, v, -1, TL_NEURON_WINDOW_MAX, &mp.neuron_window)) return 2;
        } else if (!strcmp(a, "--no-predictor")) {
            mp.neuron_predict = 0;
        } else if (!strcmp(a, "--measure-recall")) {
            mp.neuron_measure = 1;
        } else if (!strcmp(a, "--ids")) {
            VAL(); ids_path = v;
        }
        else if (!strcmp(a, "--kv-select")) {
            VAL(); if (!cli_share(a, v, &cp.kv_select)) return 2;
            kv_knobs++;
        }
        else {
            fprintf(stderr, "error: unknown option '%s' (see tierllm run --help)\n", a);
            return 2;
        }
#undef VAL
    }
    if (!model_path) {
        fprintf(stderr, "error: -m MODEL is required (see tierllm run --help)\n");
        return 2;
    }
    if (policy == 1 && knobs) {
        fprintf(stderr, "error: --policy auto chooses -b and --prefetch itself; drop them or "
                "use --policy manual\n");
        return 2;
    }
    if (policy == 1 && kv_knobs) {
        fprintf(stderr, "error: --policy auto chooses the KV placement itself; --kv-window, "
                "--kv-sinks, --kv-cache, --kv-recompute and --spill-dir need --policy "
                "manual\n");
        return 2;
    }
    if (tl_sampler_params_check(&gp.sampler)) { /* the same check and message as batch */
        fprintf(stderr, "error: %s\n", tl_last_error());
        return 2;
    }
    if (policy < 0) policy = mp.mem_budget > 0 && !knobs && !kv_knobs && !pipeline;
    if (pipeline_layers && !strcmp(pipeline_layers, "auto")) {
        fprintf(stderr, "error: --pipeline-layers auto plans a batch's split; give run the "
                "layers per rank, or none for an even split\n");
        return 2;
    }
    cli_pipe pp = {0};
    int prc = pipeline ? cli_pipe_start(&pp, model_path, pipeline_layers, &mp) : 0;
    if (prc) return prc;
    char *file_prompt = NULL;
    if (prompt_file) {
        file_prompt = cli_read_text_file("prompt file", prompt_file);
        if (!file_prompt) return cli_pipe_abort(&pp, 1);
        prompt = file_prompt;
    }
    tl_model *m = NULL;
    tl_context *c = NULL;
    tl_generate_stats gs;
    tl_status st = tl_model_open(model_path, &mp, &m);
    if (!st && weights_copy) st = cli_use_weights_copy(m, "run");
    if (!st && pp.link) {
        const tl_pipe_shape shape = tl_context_pipe_shape(m, &cp);
        st = cli_pipe_attach(&pp, m, &shape);
    }
    tl_plan_request rq;
    tl_plan_result chosen;
    tl_hw_profile prof;
    int predicted = 0;
    const int auto_asked = policy == 1; /* the same on every rank: the same command line */
    if (!st && policy == 1) {
        st = plan_run(m, prompt, &gp, &cp, ctx_given, profile_path, 1, &rq, &chosen, &prof);
        predicted = !st;
        if (st == TL_ERR_NOMEM && ctx_given) { /* the planner keeps KV in memory */
            fprintf(stderr, "policy auto: no policy with the KV cache in memory fits (%s); "
                    "running the default policy with the KV cache in tiers instead\n",
                    tl_last_error());
            policy = 0;
            st = TL_OK;
        }
    }
    /* every rank joins, whether its own plan or its fallback to the default policy ran */
    if (!st && pp.link && auto_asked) st = agree_prompt_rows(&pp, m, &cp);
    char no_prediction[512] = "";
    if (!st && pp.link) snprintf(no_prediction, sizeof no_prediction, "the planner does not "
                                 "model pipelines yet");
    else if (!st && policy != 1 && stats) { /* a manual policy: predicted for the comparison only */
        memset(&rq, 0, sizeof rq);
        if (plan_run(m, prompt, &gp, &cp, ctx_given, profile_path, 0, &rq, &chosen, &prof) ||
            rq.w.gen_len < 1)
            snprintf(no_prediction, sizeof no_prediction, "%s", tl_last_error());
        else
            predicted = 1;
    }
    if (!st) st = tl_context_open(m, &cp, &c);
    if (pp.rank > 0) { /* a later stage: serve rank 0's steps */
        if (!st) st = tl_context_pipeline_work(c);
        if (!st && stats) print_stage_stats(c, m, &pp);
        int rc = cli_pipe_end(&pp, m, st);
        tl_context_close(c);
        tl_model_close(m);
        free(file_prompt);
        return rc;
    }
    if (!st && stats && !pp.link && policy != 1 && rq.w.gen_len >= 1 &&
        tl_context_kv_params(c)->placement == TL_KV_TEMPERATURE) {
        predicted = predict_tiers(m, c, &cp, profile_path, &rq, &chosen, &prof) == TL_OK;
        if (!predicted) snprintf(no_prediction, sizeof no_prediction, "%s", tl_last_error());
    }
    if (!st && stats && !predicted)
        fprintf(stderr, "[plan] no prediction for this run: %s\n",
                no_prediction[0] ? no_prediction : "the workload is empty");
    if (!st && policy == 1 && rq.w.gen_len < 1) policy = predicted = 0; /* tl_generate reports it */
    /* a pipeline's ranks keep the rows they agreed on: no rank re-plans alone */
    if (!st && policy == 1 && !pp.link) st = recheck_run(m, &c, &cp, &rq, &chosen, &prof);
    if (!st && policy == 1 && !pp.link) /* a stage's prediction is not the run's */
        cli_print_prediction(stderr, "predicted", &chosen, &rq.w);
    run_state rs = {c, stats, NULL, 0, 0, NULL, 0, 0};
    if (ids_path && (rs.ids = malloc(256 * sizeof *rs.ids))) rs.ids_cap = 256;
    if (!st && ids_path && !rs.ids) st = tl_error_set(TL_ERR_NOMEM, "out of memory for --ids");
    if (stats && !st) {
        rs.cap = gp.n_predict >= 0 ? gp.n_predict + 1 : 4096;
        rs.snap = calloc((size_t)rs.cap + 1, sizeof *rs.snap);
        if (!rs.snap) rs.cap = 0;
    }
    if (!st) {
        fputs(prompt, stdout);
        fflush(stdout);
        st = tl_generate(c, prompt, &gp, on_piece, &rs, &gs);
    }
    int rc = 0;
    if (!st && ids_path && !rs.ids_cap)
        st = tl_error_set(TL_ERR_NOMEM, "out of memory for --ids: generation stopped");
    if (!st && ids_path) st = write_ids(ids_path, rs.ids, rs.n_ids);
    free(rs.ids);
    if (st) {
        fputc('\n', stdout);
        fflush(stdout);
        rc = pp.link ? cli_pipe_end(&pp, m, st) : cli_fail(st);
    } else {
        printf("\n");
        fflush(stdout);
        fprintf(stderr, "prefill: %d tokens in %.3f s (%.2f tok/s) | decode: %d tokens in "
                "%.3f s (%.2f tok/s)\n", gs.n_prompt, gs.prefill_seconds,
                gs.prefill_seconds > 0 ? gs.n_prompt / gs.prefill_seconds : 0.0, gs.n_decoded,
                gs.decode_seconds,
                gs.decode_seconds > 0 ? gs.n_decoded / gs.decode_seconds : 0.0);
        if (stats) {
            tl_run_stats t, zero = {0};
            tl_context_get_stats(c, &t);
            /* token 0 comes out of the prefill pass; each later one out of one decode */
            for (int i = 0; i < rs.n; i++)
                print_token_stats(i ? &rs.snap[i - 1] : &zero, &rs.snap[i], i);
            fprintf(stderr, "[stats] budget %.1f MiB (peak %.1f MiB) | weights resident %.1f "
                    "MiB, streamed %.1f MiB per pass through %d buffers (%s) | total: disk "
                    "%.1f MiB, io busy %.2f s, compute %.2f s, stall %.2f s, overlap %.2f\n",
                    t.budget_bytes / 1048576.0, t.budget_peak_bytes / 1048576.0,
                    t.weights_resident_bytes / 1048576.0, t.weights_streamed_bytes / 1048576.0,
                    t.slots, t.io_uring ? "io_uring" : "pread pool",
                    t.bytes_read_disk / 1048576.0, t.io_busy_s, t.compute_s, t.stall_s,
                    t.wall_s > 0 ? 1.0 - t.stall_s / t.wall_s : 1.0);
            if (t.flash_bytes_dense) {
                double zeroed = 0, seen = 0;
                tl_model_sparsity_stats(m, 0, &zeroed, &seen);
                const double passes = t.forward_passes ? (double)t.forward_passes : 1.0;
                char profiled[96] = "";
                if (predicted && t.flash_reads) { /* the profile's rate at that request size */
                    const int32_t depth = mp.io_queue_depth > TL_FLASH_MIN_QUEUE_DEPTH
                                              ? mp.io_queue_depth : TL_FLASH_MIN_QUEUE_DEPTH;
                    snprintf(profiled, sizeof profiled, " (profile: %.2f GB/s at %.0f KiB, %d "
                             "deep)", tl_profile_read_bps(&prof, t.flash_bytes_read /
                                                          t.flash_reads, depth) / 1e9,
                             (double)t.flash_bytes_read / (double)t.flash_reads / 1024.0,
                             (int)depth);
                }
                fprintf(stderr, "[stats] flash layout, per forward pass: runs needed %.1f MiB, "
                        "read %.1f MiB (%.0f%% of dense %.1f MiB) in %.0f reads, %.2f GB/s from "
                        "start to last wait%s, compute waited %.3f s | sparsity reached %.1f%%\n",
                        t.flash_bytes_needed / passes / 1048576.0,
                        t.flash_bytes_read / passes / 1048576.0,
                        100.0 * (double)t.flash_bytes_read / (double)t.flash_bytes_dense,
                        t.flash_bytes_dense / passes / 1048576.0, t.flash_reads / passes,
                        t.flash_fetch_s > 0 ? t.flash_bytes_read / t.flash_fetch_s / 1e9 : 0.0,
                        profiled, t.flash_stall_s / passes,
                        seen > 0 ? 100.0 * zeroed / seen : 0.0);
            }
            if (t.neurons_total) {
                fprintf(stderr, "[stats] FFN by neuron: %.2f%% of the neurons predicted and "
                        "computed (the file's calibration: %.2f%%)",
                        100.0 * (double)t.neurons_used / (double)t.neurons_total,
                        100.0 * m->lm.neuron_info.predicted);
                if (t.neuron_window_slots) {
                    const double hit = tl_neuron_window_hit(&m->lm.neuron_info,
                                                            t.neuron_window_k,
                                                            t.neuron_window_slots,
                                                            m->lm.hp.n_ff);
                    fprintf(stderr, " | window k=%d, %u slots per layer: hit rate %.1f%% "
                            "(predicted %.1f%%)", (int)t.neuron_window_k,
                            t.neuron_window_slots,
                            t.neuron_window_lookups ? 100.0 * (double)t.neuron_window_hits /
                                                          (double)t.neuron_window_lookups : 0.0,
                            100.0 * hit);
                }
                if (t.neuron_mass_all > 0)
                    fprintf(stderr, " | recall of the active neurons' output mass %.2f%% "
                            "(calibration %.2f%%)",
                            100.0 * t.neuron_mass_kept / t.neuron_mass_all,
                            100.0 * m->lm.neuron_info.recall);
                fprintf(stderr, "\n");
            }
            if (t.weights_panel_bytes || t.weights_repacked_bytes)
                fprintf(stderr, "[stats] weights in int8 panels: %.1f MiB resident (repacked "
                        "once at placement or from the converted copy), %.1f MiB streamed and "
                        "repacked on arrival | "
                        "repacking %.2f s in all\n", t.weights_panel_bytes / 1048576.0,
                        t.weights_repacked_bytes / 1048576.0, t.weights_repack_s);
            if (t.kv_window_pages)
                fprintf(stderr, "[stats] KV in tiers: %d-position pages, window %d pages, "
                        "sinks %d pages, cache %d pages | disk pages read %llu (%.1f MiB), "
                        "found in memory %llu, predicted reads %llu (exact attention)\n",
                        t.kv_page_tokens,
                        t.kv_window_pages, t.kv_sink_pages, t.kv_cache_pages,
                        (unsigned long long)t.kv_pages_read, t.kv_bytes_read / 1048576.0,
                        (unsigned long long)t.kv_cache_hits,
                        (unsigned long long)t.kv_predicted_reads);
            if (t.kv_select_pages_total)
                fprintf(stderr, "[stats] KV page selection: %.1f%% of the pages attended "
                        "(%llu of %llu), %llu disk pages read on demand\n",
                        100.0 * (double)t.kv_select_pages_read / (double)t.kv_select_pages_total,
                        (unsigned long long)t.kv_select_pages_read,
                        (unsigned long long)t.kv_select_pages_total,
                        (unsigned long long)t.kv_demand_reads);
            if (predicted) print_plan_stats(&chosen, &gs, &t, rs.n > 0 ? &rs.snap[0] : NULL);
            if (pp.link) {
                tl_pipe_stats ps;
                tl_pipe_get_stats(m->pipe, &ps);
                fprintf(stderr, "[stats] rank 0 of %d | %.2f s in forward passes, of it %.2f s "
                        "waiting for the later ranks' logits\n", pp.size, t.wall_s, ps.wait_s);
            }
        }
    }
    free(rs.snap);
    if (!rc && pp.link) rc = cli_pipe_end(&pp, m, TL_OK);
    tl_context_close(c);
    tl_model_close(m);
    free(file_prompt);
    return rc;
}
