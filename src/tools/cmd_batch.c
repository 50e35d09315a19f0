/* cmd_batch.c - `tierllm batch`: generate for every prompt of a JSONL file, writing one
 * JSON line per prompt in input order. Lines are flushed as each block completes, so an
 * interrupted run keeps every completed result. Progress goes to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "json.h"

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
           "  --no-progress           no progress bar\n");
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

int tl_cmd_batch(int argc, char **argv) {
    const char *model_path = NULL, *in_path = NULL, *out_path = NULL;
    tl_model_params mp = tl_model_default_params();
    tl_batch_params bp = tl_batch_default_params();
    tl_generate_params gp = tl_generate_default_params();
    gp.n_predict = 32;
    gp.sampler.seed = 24301;
    int progress = isatty(2), w_mem = 100;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
#define VAL() if (!(v = cli_value(argc, argv, &i))) return 2
#define INT(flag, lo, hi, dst) else if (!strcmp(a, flag)) { VAL(); if (!cli_int(a, v, lo, hi, dst)) return 2; }
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
    if (!st)
        st = tl_batch_generate(m, &bp, &gp, (const char *const *)ps.prompt, ps.n_predict, ps.n,
                               on_result, on_progress, &rc, &bs);
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
    tl_model_close(m);
    prompts_free(&ps);
    return rc_code;
}
