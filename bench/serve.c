/* serve.c (bench_serve) - `tierllm serve` under concurrent streaming clients, against
 * `batch` on the same prompts.
 *
 * TinyLlama-1.1B shape, Q8_0 (synthesized, reused), once with the weights in memory and
 * once streamed at a third of the model's size. For each setting the server is started
 * (--max-seqs 64), then for 1, 4, 16 and 64 concurrent clients each client sends
 * --requests streaming completions one after another (prompts of 128 tokens, 32 generated,
 * temperature 0, ignore_eos): aggregate generated tokens per second over the wall time of
 * that point, time to first token and inter-token latency (p50, p99) from the arrival
 * times of the server-sent events. Then the server is stopped and the same 64 x requests
 * prompts go through tl_batch_generate in this process, same budget, 64 sequences per
 * block: the throughput the server is held to (generated tokens over prefill plus decode,
 * as batch reports it).
 * Clients speak HTTP/1.0 (the response ends when the connection closes), one connection
 * per request, over loopback.
 * Usage: bench_serve [--tierllm PATH] [--dir DIR] [--requests N] [--clients 1,4,16,64]
 *        [--gen N] [--port P] [--only mem|stream] [--prefill-chunk N (the server's; 64)]
 *        [--kv-bits B (server and batch)] [--max-seqs N (server; batch's block; 64)]
 *        [--auto (the server plans its slots, chunks and KV bits: --policy auto, told the
 *        requests' lengths; batch keeps the flags above)]
 * The server keeps KV in memory: at a third of the model's size, 64 sequences of 256
 * positions do not fit beside the streamed weights' buffers; 16 with 4-bit KV do.
 * As the load test's driver (tests/serve_load.sh): --model PATH --budget MiB (one setting,
 * that model and budget), --no-batch, --max-rss MiB (exit 1 when the server's peak
 * resident memory passed it), --attach PORT (a server already running there: the clients
 * only); the exit code is 1 when any request failed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tierllm.h"
#include "prompt.h"
#include "base/clock.h"

#define PROMPT 128
#define PROMPT_STR "128"
#define MAX_CLIENTS 64

static int g_port = 18555, g_gen = 32, g_chunk = 0, g_kv_bits = 32, g_max_seqs = 64;
static int g_auto = 0; /* --auto: the server plans its own policy (--policy auto) */

/* ---- one HTTP/1.0 exchange over loopback ---- */

static int connect_local(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)g_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* GET path: the status code, or -1. */
static int http_get_status(const char *path) {
    int fd = connect_local();
    if (fd < 0) return -1;
    char req[256], buf[64];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
    int code = -1;
    if (send_all(fd, req, (size_t)n) == 0) {
        ssize_t r = recv(fd, buf, sizeof buf - 1, 0);
        if (r > 12) {
            buf[r] = 0;
            code = atoi(buf + 9);
        }
    }
    close(fd);
    return code;
}

typedef struct request_result {
    int ok;
    int tokens;     /* events with text (arrival times) */
    int generated;  /* the final usage's completion_tokens */
    double t_send, t_first, t_last;
    double *gaps; /* inter-token gaps, tokens - 1 of them */
} request_result;

/* 1 when an event's JSON has a non-empty "text" (with or without a space after ':'). */
static int has_text(const char *line) {
    const char *t = strstr(line, "\"text\":");
    if (!t) return 0;
    t += 7;
    while (*t == ' ') t++;
    return t[0] == '"' && t[1] != '"';
}

/* A streaming completion: records the arrival time of each event that carries text. */
static void stream_completion(const char *prompt, request_result *r) {
    memset(r, 0, sizeof *r);
    r->gaps = calloc((size_t)g_gen + 8, sizeof *r->gaps);
    char *body = malloc(strlen(prompt) + 256), *req = malloc(strlen(prompt) + 512);
    int fd = body && req && r->gaps ? connect_local() : -1;
    if (fd < 0) goto out;
    int bl = sprintf(body, "{\"prompt\": \"%s\", \"max_tokens\": %d, \"temperature\": 0, "
                           "\"stream\": true, \"ignore_eos\": true}", prompt, g_gen);
    int rl = sprintf(req, "POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n"
                          "Content-Length: %d\r\n\r\n%s", bl, body);
    r->t_send = tl_now();
    if (send_all(fd, req, (size_t)rl)) goto out;
    char buf[16384];
    size_t have = 0;
    int status = 0, done = 0;
    double prev = 0;
    for (;;) {
        ssize_t n = recv(fd, buf + have, sizeof buf - 1 - have, 0);
        if (n <= 0) break;
        const double now = tl_now();
        have += (size_t)n;
        buf[have] = 0;
        if (!status && have > 12) status = atoi(buf + 9);
        char *line = buf, *nl; /* complete lines: events; the rest waits */
        while ((nl = strchr(line, '\n'))) {
            *nl = 0;
            const char *u = strstr(line, "\"completion_tokens\":");
            if (u) r->generated = atoi(u + 20);
            if (!strncmp(line, "data: [DONE]", 12)) done = 1;
            else if (!strncmp(line, "data: {", 7) && has_text(line)) {
                if (r->tokens == 0) r->t_first = now;
                else if (r->tokens - 1 < g_gen + 8) r->gaps[r->tokens - 1] = now - prev;
                r->tokens++;
                prev = now;
            }
            line = nl + 1;
        }
        have = (size_t)(buf + have - line);
        memmove(buf, line, have);
        if (have == sizeof buf - 1) have = 0; /* a line longer than the buffer: dropped */
    }
    r->t_last = prev;
    /* complete: every token asked for (ignore_eos), and the stream's end */
    r->ok = status == 200 && done && r->tokens > 0 && r->generated == g_gen;
out:
    if (fd >= 0) close(fd);
    free(body);
    free(req);
}

/* ---- clients ---- */

typedef struct client {
    pthread_t th;
    char **prompts; /* this client's, one per request */
    int n;
    request_result *res;
} client;

static void *client_main(void *arg) {
    client *c = arg;
    for (int i = 0; i < c->n; i++) stream_completion(c->prompts[i], &c->res[i]);
    return NULL;
}

static double pct(double *v, size_t n, double p) {
    if (n == 0) return 0;
    for (size_t i = 1; i < n; i++) /* insertion sort: a few thousand values */
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    size_t k = (size_t)(p * (double)(n - 1) + 0.5);
    return v[k < n ? k : n - 1];
}

/* One point: `clients` concurrent clients, `reqs` requests each. */
static int run_point(char **prompts, int clients, int reqs, double *tps) {
    client cl[MAX_CLIENTS];
    const double t0 = tl_now();
    for (int c = 0; c < clients; c++) {
        cl[c].prompts = prompts + (size_t)c * reqs;
        cl[c].n = reqs;
        cl[c].res = calloc((size_t)reqs, sizeof *cl[c].res);
        pthread_create(&cl[c].th, NULL, client_main, &cl[c]);
    }
    for (int c = 0; c < clients; c++) pthread_join(cl[c].th, NULL);
    const double wall = tl_now() - t0;
    size_t nt = (size_t)clients * reqs, ng = 0, failed = 0;
    long tokens = 0;
    double *ttft = calloc(nt, sizeof *ttft), *gaps = calloc(nt * (size_t)(g_gen + 8), sizeof *gaps);
    size_t nf = 0;
    for (int c = 0; c < clients; c++) {
        for (int i = 0; i < reqs; i++) {
            request_result *r = &cl[c].res[i];
            if (!r->ok) failed++;
            tokens += r->generated;
            if (r->tokens > 0) ttft[nf++] = r->t_first - r->t_send;
            for (int g = 0; g + 1 < r->tokens && g < g_gen + 8; g++) gaps[ng++] = r->gaps[g];
            free(r->gaps);
        }
        free(cl[c].res);
    }
    *tps = (double)tokens / wall;
    printf("  %3d clients: %5zu requests (%zu failed), %6ld tokens in %7.2f s = %8.2f tok/s | "
           "TTFT p50 %7.3f s p99 %7.3f s | ITL p50 %6.1f ms p99 %6.1f ms\n",
           clients, nt, failed, tokens, wall, *tps, pct(ttft, nf, 0.5), pct(ttft, nf, 0.99),
           1e3 * pct(gaps, ng, 0.5), 1e3 * pct(gaps, ng, 0.99));
    fflush(stdout);
    free(ttft);
    free(gaps);
    return failed ? 1 : 0;
}

/* ---- the server process ---- */

static pid_t start_server(const char *tierllm, const char *model, uint64_t budget) {
    char port[16], bud[32], chunk[16], bits[8], seqs[16];
    snprintf(port, sizeof port, "%d", g_port);
    snprintf(seqs, sizeof seqs, "%d", g_max_seqs);
    snprintf(bits, sizeof bits, "%d", g_kv_bits);
    snprintf(chunk, sizeof chunk, "%d", g_chunk > 0 ? g_chunk : 64);
    snprintf(bud, sizeof bud, "%lluK", (unsigned long long)(budget >> 10));
    pid_t pid = fork();
    if (pid == 0) {
        if (g_auto) {
            char gen[16];
            snprintf(gen, sizeof gen, "%d", g_gen);
            execl(tierllm, tierllm, "serve", "-m", model, "--port", port, "--max-queue", "256",
                  "-c", "256", "--mem-budget", bud, "--policy", "auto", "--expect-prompt",
                  PROMPT_STR, "--expect-gen", gen, (char *)NULL);
        } else {
            execl(tierllm, tierllm, "serve", "-m", model, "--port", port, "--max-seqs", seqs,
                  "--max-queue", "256", "-c", "256", "--mem-budget", bud, "--prefill-chunk",
                  chunk, "--kv-bits", bits, (char *)NULL);
        }
        _exit(127);
    }
    for (int i = 0; pid > 0 && i < 600; i++) { /* up to 60 s to load and place */
        if (http_get_status("/health") == 200) return pid;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) return -1;
        usleep(100000);
    }
    if (pid > 0) kill(pid, SIGKILL), waitpid(pid, NULL, 0);
    return -1;
}

/* The server's peak resident memory (VmHWM), MiB; -1 when unknown. */
static double peak_rss_mib(pid_t pid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    double kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lf kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib < 0 ? -1 : kib / 1024.0;
}

static void stop_server(pid_t pid) {
    kill(pid, SIGTERM);
    for (int i = 0; i < 100; i++) {
        if (waitpid(pid, NULL, WNOHANG) == pid) return;
        usleep(100000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* The same prompts through tl_batch_generate, --max-seqs per block: generated tok/s. */
static double batch_tps(const char *model, uint64_t budget, char **prompts, int n) {
    tl_model_params mp = tl_model_default_params();
    mp.mem_budget = budget;
    tl_model *m;
    if (tl_model_open(model, &mp, &m)) return -1;
    tl_batch_params bp = tl_batch_default_params();
    bp.gbs = g_max_seqs;
    bp.num_gb = 1;
    bp.n_ctx = 256;
    bp.prefill_rows = 512;
    bp.kv_bits = g_kv_bits;
    tl_generate_params gp = tl_generate_default_params();
    gp.n_predict = g_gen;
    gp.stop_at_eos = 0;
    gp.sampler.temperature = 0;
    tl_batch_stats bs;
    tl_status st = tl_batch_generate(m, &bp, &gp, (const char *const *)prompts, NULL, n, NULL,
                                     NULL, NULL, &bs);
    tl_model_close(m);
    if (st) return -1;
    return (double)bs.generated_tokens / (bs.prefill_s + bs.decode_s);
}

int main(int argc, char **argv) {
    const char *dir = "/tmp/tierllm-bench", *only = NULL, *model_arg = NULL;
    double budget_arg = 0, max_rss = 0;
    int no_batch = 0, attach = 0;
    char tierllm[4096];
    snprintf(tierllm, sizeof tierllm, "%s", argv[0]);
    char *slash = strrchr(tierllm, '/');
    snprintf(slash ? slash + 1 : tierllm, sizeof tierllm - (size_t)(slash ? slash + 1 - tierllm : 0),
             "../tierllm");
    int reqs = 2, clients[8] = {1, 4, 16, 64}, n_clients = 4;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--tierllm")) snprintf(tierllm, sizeof tierllm, "%s", argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--dir")) dir = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--requests")) reqs = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--gen")) g_gen = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--port")) g_port = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--only")) only = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--prefill-chunk")) g_chunk = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--model")) model_arg = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--kv-bits")) g_kv_bits = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--auto")) g_auto = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--max-seqs")) g_max_seqs = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--budget")) budget_arg = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--max-rss")) max_rss = atof(argv[++i]);
        else if (!strcmp(argv[i], "--no-batch")) no_batch = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--attach")) g_port = attach = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--clients")) {
            n_clients = 0;
            for (char *t = strtok(argv[++i], ","); t && n_clients < 8; t = strtok(NULL, ","))
                clients[n_clients++] = atoi(t);
        } else {
            fprintf(stderr, "usage: bench_serve [--tierllm PATH] [--dir DIR] [--requests N] "
                            "[--clients 1,4,16,64] [--gen N] [--port P] [--only mem|stream] "
                            "[--prefill-chunk N] [--model PATH --budget MiB] [--no-batch] "
                            "[--max-rss MiB] [--attach PORT] [--kv-bits B] [--max-seqs N] [--auto]\n");
            return 2;
        }
    }
    for (int i = 0; i < n_clients; i++)
        if (clients[i] < 1 || clients[i] > MAX_CLIENTS) {
            fprintf(stderr, "error: clients are 1..%d\n", MAX_CLIENTS);
            return 2;
        }
    if (reqs < 1 || g_gen < 1 || g_gen > 200) {
        fprintf(stderr, "error: --requests >= 1 and --gen 1..200\n");
        return 2;
    }
    mkdir(dir, 0755);
    char model[1024];
    snprintf(model, sizeof model, "%s/tinyllama-1.1b-q8_0.gguf", dir);
    if (model_arg) snprintf(model, sizeof model, "%s", model_arg);
    if (model_arg && budget_arg <= 0) {
        fprintf(stderr, "error: --model needs --budget MiB\n");
        return 2;
    }
    struct stat sb;
    if (!model_arg && stat(model, &sb) != 0) {
        tl_synth_params sp;
        tl_synth_preset("tinyllama-1.1b", &sp);
        sp.weight_type = 8; /* Q8_0 */
        printf("synthesizing %s ...\n", model);
        if (tl_synth_write(&sp, model) || stat(model, &sb) != 0) {
            fprintf(stderr, "error: %s\n", tl_last_error());
            return 1;
        }
    }
    if (stat(model, &sb) != 0) {
        fprintf(stderr, "error: %s: %s\n", model, strerror(errno));
        return 1;
    }
    const int n = MAX_CLIENTS * reqs;
    char **prompts = calloc((size_t)n, sizeof *prompts);
    {
        tl_model *m;
        if (tl_model_open(model, NULL, &m)) {
            fprintf(stderr, "error: %s\n", tl_last_error());
            return 1;
        }
        for (int i = 0; i < n; i++) prompts[i] = bench_make_prompt(m, PROMPT, i);
        tl_model_close(m);
    }
    printf("bench_serve: %s (%.0f MiB), prompts %d tokens, %d generated, %d request(s) per "
           "client, server %s\n", model, sb.st_size / 1048576.0, PROMPT, g_gen, reqs, tierllm);
    int rc = 0;
    for (int setting = 0; setting < (model_arg ? 1 : 2); setting++) {
        if (only && strcmp(only, setting ? "stream" : "mem") != 0) continue;
        /* in memory: the model and the state; streamed: a third of the model */
        const uint64_t budget = model_arg ? (uint64_t)(budget_arg * 1048576.0)
                                : setting ? (uint64_t)sb.st_size / 3
                                          : (uint64_t)sb.st_size + ((uint64_t)1 << 30);
        printf("%s, --mem-budget %.0f MiB\n",
               model_arg ? "as given" : setting ? "weights streamed" : "weights in memory",
               budget / 1048576.0);
        if (attach) { /* a server the caller runs: the clients only */
            double tps;
            for (int i = 0; i < n_clients; i++) rc |= run_point(prompts, clients[i], reqs, &tps);
            break;
        }
        pid_t pid = start_server(tierllm, model, budget);
        if (pid < 0) {
            fprintf(stderr, "error: the server did not start (%s serve ...)\n", tierllm);
            return 1;
        }
        double tps_top = 0, tps = 0;
        int top = 0;
        for (int i = 0; i < n_clients; i++) {
            rc |= run_point(prompts, clients[i], reqs, &tps);
            if (clients[i] >= top) top = clients[i], tps_top = tps;
        }
        const double rss = peak_rss_mib(pid);
        stop_server(pid);
        printf("  server peak resident memory %.1f MiB (budget %.1f MiB)\n", rss,
               budget / 1048576.0);
        if (max_rss > 0 && !(rss >= 0 && rss <= max_rss)) {
            printf("  FAIL: above --max-rss %.1f MiB\n", max_rss);
            rc = 1;
        }
        if (no_batch) continue;
        const int nb = top * reqs; /* the prompts of the largest point */
        const double btps = batch_tps(model, budget, prompts, nb);
        printf("  batch, the same %d prompts, %d per block: %.2f tok/s", nb, g_max_seqs, btps);
        if (tps_top > 0 && btps > 0)
            printf(" | server at %d clients: %.0f%% of batch", top, 100 * tps_top / btps);
        printf("\n");
    }
    for (int i = 0; i < n; i++) free(prompts[i]);
    free(prompts);
    return rc;
}
