/* cmd_serve.c - `tierllm serve`: the OpenAI-compatible HTTP server (src/serve/).
 *
 * SIGINT and SIGTERM are blocked in every thread (they inherit the mask from here, set
 * before any thread starts) and taken by sigwait in this one, so no handler runs inside
 * the engine or a connection. The first one drains: no new connections or requests (503),
 * the requests in flight finish and are sent in full, then the process exits 0. The
 * signals are unblocked for the drain, so a second one ends the process at once.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/cli.h"
#include "model/neurons.h"
#include "tools/cli_plan.h"
#include "plan/serve_plan.h"
#include "exec/model_handle.h"
#include "serve/chat_template.h"
#include "serve/http.h"
#include "serve/openai.h"
#include "serve/server.h"

static void usage(void) {
    printf("usage: tierllm serve -m MODEL [options]\n"
           "  -m, --model PATH        GGUF model file or Hugging Face folder\n"
           "  --host ADDR             address to listen on (default 127.0.0.1)\n"
           "  --port N                port (default 8080; 0 = any free port, printed)\n"
           "  --api-key KEY           require 'Authorization: Bearer KEY' (not /health)\n"
           "  --model-name NAME       the model's name in the API (default: the file's\n"
           "                          base name without .gguf)\n"
           "  --chat-template NAME    llama2, llama3, chatml, mistral or zephyr (default:\n"
           "                          recognised from the model's tokenizer.chat_template)\n"
           "  --max-seqs N            sequences generated at once (default 16)\n"
           "  --max-queue N           requests waiting beyond those; more get 503 (default 64)\n"
           "  -c, --ctx-size N        positions per sequence (default: model's, at most 4096)\n"
           "  --prefill-chunk N       prompt tokens per step over all joining sequences\n"
           "                          (default 64)\n"
           "  --kv-bits 32|16|8|4     KV cache storage (default 32, exact)\n"
           "  --kv-window N           KV in tiers: each sequence's last N positions (and its\n"
           "                          first 16) stay in memory, older pages go to --spill-dir\n"
           "                          and are read back each step (default: all in memory)\n"
           "  --spill-dir DIR         where disk KV pages go (default $TMPDIR or /tmp)\n"
           "  --timeout S             seconds a client has to send a request, and of\n"
           "                          idleness before a connection is closed (default 30)\n"
           "  --max-conns N           open connections at once (default 256)\n"
           "  -t, --threads N         compute threads (default: all cores)\n"
           "  --mem-budget SIZE       memory the engine may hold, e.g. 2G (default 80%% of\n"
           "                          available memory); weights that do not fit stream\n"
           "  --prefetch N            streamed layers read ahead (default 2)\n"
           "  --io auto|pool|uring    IO backend (default auto)\n"
           "  --no-direct             read through the page cache instead of O_DIRECT\n"
           CLI_SPARSITY_HELP
           "planning:\n"
           "  --policy auto|manual    auto: the planner picks --max-seqs, --prefill-chunk,\n"
           "                          --kv-bits and --kv-window for the budget, and each\n"
           "                          step's prompt rows from how many sequences generate,\n"
           "                          corrected as steps are measured (default when\n"
           "                          --mem-budget is given and none of those four is);\n"
           "                          manual: the flags and defaults\n"
           "  --profile PATH          hardware profile for auto (default: cached, or measured)\n"
           "  --expect-prompt N       auto: a typical request's prompt tokens (default 256)\n"
           "  --expect-gen N          auto: a typical request's generated tokens (default 128)\n"
           "  --max-itl-ms MS         auto: a step that takes prompt rows may last this long\n"
           "                          (default: twice the full-load decode step)\n"
           "  --lossy-kv              auto may choose 8- or 4-bit KV\n"
           "SIGINT/SIGTERM: stop accepting, finish the requests in flight, exit 0.\n");
}

/* "models/stories260K.gguf" -> "stories260K"; a folder "hf/llama/" -> "llama". */
static char *base_name(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    size_t len = n - b;
    if (len > 5 && !strncmp(path + n - 5, ".gguf", 5)) len -= 5;
    return strndup(path + b, len);
}

/* --policy auto: the serving plan for the model's budget, printed, written into sp's
 * scheduler parameters with the replanner as their step policy. */
static tl_status plan_serving(tl_model *m, const char *profile_path, const tl_serve_request *rq,
                              tl_server_params *sp, tl_serve_replanner *rp) {
    tl_hw_profile prof;
    tl_serve_plan plan;
    tl_status st = cli_profile(m, profile_path, &prof);
    double disk_ratio = 1, compute_ratio = 1;
    if (!st) st = tl_serve_plan_calibrated(m, &prof, rq, &plan, &disk_ratio, &compute_ratio);
    if (!st) st = tl_serve_replanner_init(rp, m, &prof, &plan);
    if (st) return st;
    sp->sched = plan.sched;
    sp->sched.policy = tl_serve_replanner_policy(rp);
    const int32_t S = plan.sched.max_seqs;
    char kv[96];
    if (plan.sched.kv_window > 0)
        snprintf(kv, sizeof kv, "in tiers (a window of %d positions and %d sinks in memory, "
                 "the rest on disk)", (int)plan.sched.kv_window, (int)plan.sched.kv_sinks);
    else
        snprintf(kv, sizeof kv, "in memory");
    fprintf(stderr, "policy auto: %d sequences, KV %d-bit %s, prefill chunk up to %d (%d with "
            "one generating, %d with %d), streamed %.1f MiB per step, memory %.1f of %.1f MiB; "
            "%d of %d candidates fit\n", (int)S, (int)plan.sched.kv_bits, kv,
            (int)plan.sched.prefill_chunk, (int)plan.chunk_by_gen[1], (int)plan.chunk_by_gen[S],
            (int)S, plan.streamed_bytes / 1048576.0, plan.mem_bytes / 1048576.0,
            tl_budget_limit(m->lm.budget) / 1048576.0, (int)plan.feasible, (int)plan.candidates);
    if (disk_ratio != 1 || compute_ratio != 1)
        fprintf(stderr, "policy auto: the model's streaming read at %.2fx and its products ran at "
                "%.2fx the profile's time; planned on the corrected figures\n", 1 / disk_ratio,
                compute_ratio);
    fprintf(stderr, "predicted at full load (requests of %d + %d tokens): %.1f tok/s, %.1f "
            "generating, step %.0f ms, ITL up to %.0f ms (budget %.0f ms)\n",
            (int)plan.prompt_len, (int)plan.gen_len, plan.tokens_per_s, plan.gen_rows,
            plan.step_s * 1e3, plan.itl_s * 1e3, plan.itl_max_s * 1e3);
    return TL_OK;
}

int tl_cmd_serve(int argc, char **argv) {
    tl_model_params mp = tl_model_default_params();
    tl_server_params sp = tl_server_default_params();
    tl_http_params hp = tl_http_default_params();
    hp.max_conns = 0; /* 0: derived from the queue below */
    const char *model_path = NULL, *model_name = NULL, *chat = NULL;
    int32_t port = hp.port, timeout = hp.timeout_s, max_conns = 0;
    int policy = -1, knobs = 0, lossy = 0;
    const char *profile_path = NULL;
    tl_serve_request rq;
    memset(&rq, 0, sizeof rq);
    int32_t itl_ms = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
#define VAL() if (!(v = cli_value(argc, argv, &i))) return 2
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VAL(); model_path = v; }
        else if (!strcmp(a, "--host")) { VAL(); hp.host = v; }
        else if (!strcmp(a, "--port")) { VAL(); if (!cli_int(a, v, 0, 65535, &port)) return 2; }
        else if (!strcmp(a, "--api-key")) {
            VAL();
            if (!*v) { fprintf(stderr, "error: --api-key must not be empty\n"); return 2; }
            hp.api_key = v;
        } else if (!strcmp(a, "--model-name")) {
            VAL();
            if (!*v) { fprintf(stderr, "error: --model-name must not be empty\n"); return 2; }
            model_name = v;
        } else if (!strcmp(a, "--chat-template")) {
            VAL();
            if (tl_chat_from_name(v) == TL_CHAT_NONE) {
                fprintf(stderr, "error: --chat-template expects one of %s, not '%s'\n",
                        tl_chat_names(), v);
                return 2;
            }
            chat = v;
        } else if (!strcmp(a, "--max-seqs")) {
            VAL(); if (!cli_int(a, v, 1, 4096, &sp.sched.max_seqs)) return 2;
            knobs = 1;
        } else if (!strcmp(a, "--max-queue")) {
            VAL(); if (!cli_int(a, v, 0, 1 << 20, &sp.max_queue)) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            VAL(); if (!cli_int(a, v, 0, 1 << 24, &sp.sched.n_ctx)) return 2;
        } else if (!strcmp(a, "--prefill-chunk")) {
            VAL(); if (!cli_int(a, v, 1, 65536, &sp.sched.prefill_chunk)) return 2;
            knobs = 1;
        } else if (!strcmp(a, "--kv-bits")) {
            VAL(); if (!cli_int(a, v, 4, 32, &sp.sched.kv_bits)) return 2;
            knobs = 1;
        } else if (!strcmp(a, "--kv-window")) {
            VAL(); if (!cli_int(a, v, 1, 1 << 24, &sp.sched.kv_window)) return 2;
            knobs = 1;
        } else if (!strcmp(a, "--spill-dir")) {
            VAL(); sp.sched.spill_dir = v;
        } else if (!strcmp(a, "--timeout")) {
            VAL(); if (!cli_int(a, v, 1, 86400, &timeout)) return 2;
        } else if (!strcmp(a, "--max-conns")) {
            VAL(); if (!cli_int(a, v, 1, 1 << 16, &max_conns)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VAL(); if (!cli_int(a, v, 1, 256, &mp.n_threads)) return 2;
        } else if (!strcmp(a, "--mem-budget")) {
            VAL(); if (!cli_size(a, v, &mp.mem_budget)) return 2;
        } else if (!strcmp(a, "--sparsity")) {
            VAL(); if (!cli_sparsity(a, v, &mp.sparsity)) return 2;
        } else if (!strcmp(a, "--flash-gap")) {
            VAL(); if (!cli_size(a, v, &mp.flash_gap_bytes)) return 2;
        } else if (!strcmp(a, "--neuron-window")) {
            VAL(); if (!cli_int(a, v, -1, TL_NEURON_WINDOW_MAX, &mp.neuron_window)) return 2;
        } else if (!strcmp(a, "--no-predictor")) {
            mp.neuron_predict = 0;
        } else if (!strcmp(a, "--prefetch")) {
            VAL(); if (!cli_int(a, v, 0, 64, &mp.prefetch)) return 2;
        } else if (!strcmp(a, "--io")) {
            VAL(); if (!cli_io_backend(a, v, &mp.io_backend)) return 2;
        } else if (!strcmp(a, "--no-direct")) {
            mp.direct_io = 0;
        } else if (!strcmp(a, "--policy")) {
            VAL();
            if (!strcmp(v, "auto")) policy = 1;
            else if (!strcmp(v, "manual")) policy = 0;
            else { fprintf(stderr, "error: --policy expects auto or manual\n"); return 2; }
        } else if (!strcmp(a, "--profile")) {
            VAL(); profile_path = v;
        } else if (!strcmp(a, "--expect-prompt")) {
            VAL(); if (!cli_int(a, v, 1, 1 << 24, &rq.prompt_len)) return 2;
        } else if (!strcmp(a, "--expect-gen")) {
            VAL(); if (!cli_int(a, v, 1, 1 << 24, &rq.gen_len)) return 2;
        } else if (!strcmp(a, "--max-itl-ms")) {
            VAL(); if (!cli_int(a, v, 1, 3600000, &itl_ms)) return 2;
        } else if (!strcmp(a, "--lossy-kv")) {
            lossy = 1;
        } else {
            fprintf(stderr, "error: unknown option '%s' (see tierllm serve --help)\n", a);
            return 2;
        }
#undef VAL
    }
    if (!model_path) {
        fprintf(stderr, "error: -m MODEL is required (see tierllm serve --help)\n");
        return 2;
    }
    if (policy == 1 && knobs) {
        fprintf(stderr, "error: --policy auto chooses --max-seqs, --prefill-chunk, --kv-bits and "
                "--kv-window itself; drop those flags or use --policy manual\n");
        return 2;
    }
    if (policy < 0) policy = mp.mem_budget > 0 && !knobs;
    if (!policy && (rq.prompt_len || rq.gen_len || itl_ms || lossy || profile_path)) {
        fprintf(stderr, "error: --expect-prompt, --expect-gen, --max-itl-ms, --lossy-kv and "
                "--profile are for --policy auto\n");
        return 2;
    }
    rq.n_ctx = sp.sched.n_ctx;
    rq.spill_dir = sp.sched.spill_dir;
    rq.allow_lossy_kv = lossy;
    rq.max_itl_s = itl_ms / 1000.0;
    hp.port = port;
    hp.timeout_s = timeout;

    /* blocked before any thread exists, so every thread inherits the mask */
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);
    signal(SIGPIPE, SIG_IGN);

    char *name = model_name ? strdup(model_name) : base_name(model_path);
    tl_model *m = NULL;
    tl_server *srv = NULL;
    tl_http *h = NULL;
    tl_oai api;
    tl_status st = name ? TL_OK : TL_ERR_NOMEM;
    tl_serve_replanner rp;
    int have_rp = 0;
    if (!st) st = tl_model_open(model_path, &mp, &m);
    if (!st && policy == 1) {
        st = plan_serving(m, profile_path, &rq, &sp, &rp);
        have_rp = !st;
    }
    /* every request that may be running (as planned) or waiting, and room for health
     * checks */
    hp.max_conns = max_conns ? max_conns : sp.sched.max_seqs + sp.max_queue + 64;
    if (!st) st = tl_server_open(m, &sp, &srv);
    if (!st) st = tl_oai_init(&api, m, name, tl_server_sched_params(srv)->n_ctx, chat);
    if (!st) st = tl_http_start(srv, &api, &hp, &h);
    if (st) {
        int rc = name ? cli_fail(st) : (fprintf(stderr, "error: out of memory\n"), 1);
        tl_server_close(srv);
        if (have_rp) tl_serve_replanner_free(&rp);
        tl_model_close(m);
        free(name);
        return rc;
    }
    const tl_sched_params *ps = tl_server_sched_params(srv);
    if (api.chat == TL_CHAT_NONE)
        fprintf(stderr, "tierllm serve: the model has no chat template this server "
                "recognises: /v1/chat/completions will answer 400 until it is restarted "
                "with --chat-template NAME (%s)\n", tl_chat_names());
    else
        fprintf(stderr, "tierllm serve: chat template %s (%s)\n", tl_chat_name(api.chat),
                api.chat_from_model ? "recognised in the model" : "--chat-template");
    const char *host = hp.host;
    int v6 = strchr(host, ':') != NULL;
    fprintf(stderr, "tierllm serve: listening on http://%s%s%s:%d (model %s, %d sequences "
            "of %d positions, %d more may wait)\n", v6 ? "[" : "", host, v6 ? "]" : "",
            tl_http_port(h), name, (int)ps->max_seqs, (int)ps->n_ctx, (int)sp.max_queue);

    int sig = 0;
    sigwait(&sigs, &sig);
    pthread_sigmask(SIG_SETMASK, &old, NULL); /* a second signal ends the process */
    tl_server_stats ss;
    tl_server_get_stats(srv, &ss);
    fprintf(stderr, "tierllm serve: %s: no new requests; finishing %d running and %d "
            "waiting\n", sig == SIGINT ? "SIGINT" : "SIGTERM", (int)ss.running, (int)ss.queued);
    tl_http_quiesce(h);
    tl_server_stop_accepting(srv);
    tl_http_stop(h, 24 * 3600); /* every answered request is bounded by its max_tokens */
    tl_server_close(srv);
    if (have_rp) {
        fprintf(stderr, "tierllm serve: re-planning: %d checks, %d re-plans (last measured / "
                "predicted step time %.2f)\n", (int)rp.checks, (int)rp.replans, rp.last_ratio);
        tl_serve_replanner_free(&rp);
    }
    tl_model_close(m);
    free(name);
    fprintf(stderr, "tierllm serve: stopped\n");
    return 0;
}
