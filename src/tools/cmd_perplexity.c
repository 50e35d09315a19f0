/* cmd_perplexity.c - `tierllm perplexity`: perplexity of a text file (tl_perplexity), at
 * the activation sparsity asked for, as llama.cpp's llama-perplexity reports it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/cli.h"

static int usage(FILE *f) {
    fprintf(f, "usage: tierllm perplexity -m MODEL -f TEXT.txt [-c N] [--sparsity S] [-t N]\n"
               "         [--mem-budget SIZE]\n"
               "  -c N          window in tokens (default: the model's context, at most 512)\n"
               "  --sparsity S  activation sparsity (a converted file; default: the file's)\n");
    return f == stdout ? 0 : 2;
}

int tl_cmd_perplexity(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL;
    tl_model_params mp = tl_model_default_params();
    int32_t n_ctx = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model_path = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(text_path = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 2, 1 << 20, &n_ctx)) return 2;
        } else if (!strcmp(a, "--sparsity")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_sparsity(a, v, &mp.sparsity)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 256, &mp.n_threads))
                return 2;
        } else if (!strcmp(a, "--mem-budget")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_size(a, v, &mp.mem_budget)) return 2;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            return usage(stdout);
        } else {
            fprintf(stderr, "error: unknown option '%s'\n", a);
            return usage(stderr);
        }
    }
    if (!model_path || !text_path) {
        fprintf(stderr, "error: -m and -f are required\n");
        return usage(stderr);
    }
    char *text = cli_read_text_file("text file", text_path);
    if (!text) return 1;
    const size_t len = strlen(text);
    tl_model *m = NULL;
    int32_t *ids = malloc((len + 2) * sizeof *ids);
    size_t n = 0, scored = 0;
    double ppl = 0;
    tl_model_desc d;
    tl_status st = ids ? tl_model_open(model_path, &mp, &m) : TL_ERR_NOMEM;
    if (!st) st = tl_model_describe(m, &d);
    if (!st && (st = tl_tokenize(m, text, len, 1, ids, len + 2, &n)) && n > len + 2) {
        int32_t *more = realloc(ids, n * sizeof *ids); /* again at the size it needs */
        st = more ? tl_tokenize(m, text, len, 1, ids = more, n, &n) : TL_ERR_NOMEM;
    }
    if (!st && n_ctx == 0) n_ctx = d.n_ctx_train < 512 ? d.n_ctx_train : 512;
    if (!st) st = tl_perplexity(m, ids, n, n_ctx, &ppl, &scored);
    double zeroed = 0, seen = 0;
    if (!st) tl_model_sparsity_stats(m, 0, &zeroed, &seen);
    int rc = 0;
    if (st) rc = cli_fail(st);
    else
        printf("perplexity %.4f over %zu tokens (windows of %d); weights skipped %.1f%%\n",
               ppl, scored, (int)n_ctx, seen > 0 ? 100.0 * zeroed / seen : 0.0);
    tl_model_close(m);
    free(ids);
    free(text);
    return rc;
}
