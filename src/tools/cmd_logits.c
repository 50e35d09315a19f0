/* cmd_logits.c - `tierllm logits`: evaluate a token list and write every position's
 * logits as raw little-endian float32 [n_tokens][n_vocab] (used by the NumPy check).
 * The output is checked before the model runs and written whole or not at all
 * (base/out_file.h): a failed run leaves an existing file as it was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/cli.h"
#include "model/neurons.h"
#include "base/out_file.h"

static int parse_tokens(const char *s, int32_t **out, size_t *n) {
    size_t cap = 16, len = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    char *copy = strdup(s);
    int ok = ids && copy;
    for (char *tok = ok ? strtok(copy, ",") : NULL; ok && tok; tok = strtok(NULL, ",")) {
        if (len == cap) {
            int32_t *n2 = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!n2) { ok = 0; break; }
            ids = n2;
        }
        ok = cli_int("--tokens", tok, 0, INT32_MAX, &ids[len++]);
    }
    free(copy);
    if (!ok || len == 0) {
        if (ok) fprintf(stderr, "error: --tokens needs at least one id\n");
        free(ids);
        return 0;
    }
    *out = ids;
    *n = len;
    return 1;
}

int tl_cmd_logits(int argc, char **argv) {
    const char *model_path = NULL, *out_path = NULL, *tokens = NULL;
    tl_model_params mp = tl_model_default_params();
    tl_context_params cp = tl_context_default_params();
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model_path = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o")) {
            if (!(out_path = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--tokens")) {
            if (!(tokens = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 256, &mp.n_threads))
                return 2;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 16, &cp.n_batch))
                return 2;
        } else if (!strcmp(a, "--reference")) {
            mp.reference_kernels = 1;
        } else if (!strcmp(a, "--sparsity")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_sparsity(a, v, &mp.sparsity)) return 2;
        } else if (!strcmp(a, "--mem-budget")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_size(a, v, &mp.mem_budget)) return 2;
        } else if (!strcmp(a, "--flash-gap")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_size(a, v, &mp.flash_gap_bytes))
                return 2;
        } else if (!strcmp(a, "--neuron-window")) {
            if (!(v = cli_value(argc, argv, &i)) ||
                !cli_int(a, v, -1, TL_NEURON_WINDOW_MAX, &mp.neuron_window))
                return 2;
        } else if (!strcmp(a, "--no-predictor")) {
            mp.neuron_predict = 0;
        } else {
            fprintf(stderr, "usage: tierllm logits -m MODEL --tokens 1,2,3 -o OUT.f32 "
                    "[-t N] [-b N] [--reference] [--sparsity S] [--mem-budget SIZE] "
                    "[--flash-gap SIZE] [--neuron-window K] [--no-predictor]\n");
            return 2;
        }
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (!model_path || !out_path || !tokens) {
        fprintf(stderr, "error: -m, --tokens and -o are required\n");
        return 2;
    }
    if (!parse_tokens(tokens, &ids, &n)) return 2;
    tl_status st = tl_out_check_target(out_path);
    if (st) {
        free(ids);
        return cli_fail(st);
    }
    tl_model *m = NULL;
    tl_context *c = NULL;
    float *logits = NULL;
    tl_model_desc d;
    cp.n_ctx = (int32_t)n;
    st = tl_model_open(model_path, &mp, &m);
    if (!st) st = tl_model_describe(m, &d);
    if (!st) st = tl_context_open(m, &cp, &c);
    if (!st && !(logits = malloc(n * (size_t)d.n_vocab * sizeof *logits))) st = TL_ERR_NOMEM;
    if (!st) st = tl_decode_all_logits(c, ids, n, logits);
    tl_out_file out;
    if (!st && !(st = tl_out_file_open(&out, out_path))) {
        st = tl_out_file_write(&out, logits, n * (size_t)d.n_vocab * sizeof *logits);
        if (st) tl_out_file_abort(&out);
        else st = tl_out_file_commit(&out);
    }
    int rc = st ? cli_fail(st) : 0;
    free(logits);
    free(ids);
    tl_context_close(c);
    tl_model_close(m);
    return rc;
}
