/* cmd_convert.c - `tierllm convert`: a copy of a GGUF with activation-sparsity thresholds
 * calibrated on sample text, optionally in the flash layout (exec/convert.h). The input is
 * only read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/cli.h"
#include "exec/convert.h"

static int usage(FILE *f) {
    fprintf(f,
            "usage: tierllm convert -m IN.gguf -o OUT.gguf --calib TEXT.txt [options]\n"
            "  writes OUT: IN's tensors and keys, and thresholds that zero the smallest\n"
            "  inputs of every matrix product (activation sparsity; run/batch/serve\n"
            "  --sparsity S pick the share). IN is never modified.\n"
            "  --calib FILE          sample text in the model's domain, at least %d tokens:\n"
            "                        the first 3/4 calibrate, the last 1/4 is held out\n"
            "  --sparsity S          the file's default sparsity in [0, 1); without it the\n"
            "                        default is the largest of 0.05-0.7 whose held-out\n"
            "                        perplexity is within --max-ppl-rise of dense\n"
            "  --max-ppl-rise R      the choice's limit (default 0.02: +2%%)\n"
            "  --alloc-tokens N      calibration tokens each step of the search for each\n"
            "                        input's share of S evaluates (default 256)\n"
            "  --uniform             no search: every matrix input at S\n"
            "  --layout flash|rows   flash: each layer's matrices stored by input channel,\n"
            "                        bundled by shared input, so a sparse input reads only\n"
            "                        its channels' runs (quantized types re-quantize along\n"
            "                        the run); rows (default): the input's layout. A ReLU\n"
            "                        feed-forward is stored by neuron instead (gate row, up\n"
            "                        row, down column in one run) with a predictor of the\n"
            "                        neurons each token activates:\n"
            "  --predictor-rank R    its rank (default 128)\n"
            "  --predictor-tokens N  calibration tokens it is fitted on (default 512)\n"
            "  --recall R            the share of the active neurons' output mass it must\n"
            "                        predict on them (default 0.9999)\n"
            "  -c N                  calibration windows in tokens (default: the model's\n"
            "                        context, at most 512)\n"
            "  -t N, --mem-budget SIZE  threads and memory for the calibration runs\n",
            TL_CONVERT_MIN_CALIB_TOKENS);
    return f == stdout ? 0 : 2;
}

int tl_cmd_convert(int argc, char **argv) {
    tl_convert_params p = tl_convert_default_params();
    const char *calib_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(p.in_path = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o")) {
            if (!(p.out_path = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--calib")) {
            if (!(calib_path = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--sparsity")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_sparsity(a, v, &p.sparsity)) return 2;
        } else if (!strcmp(a, "--max-ppl-rise")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_float(a, v, &p.max_ppl_rise)) return 2;
            if (!(p.max_ppl_rise >= 0 && p.max_ppl_rise <= 10)) {
                fprintf(stderr, "error: --max-ppl-rise expects 0..10\n");
                return 2;
            }
        } else if (!strcmp(a, "--uniform")) {
            p.uniform = 1;
        } else if (!strcmp(a, "--layout")) {
            if (i + 1 >= argc) return usage(stderr);
            v = argv[++i];
            if (!strcmp(v, "flash")) p.flash_layout = 1;
            else if (!strcmp(v, "rows")) p.flash_layout = 0;
            else {
                fprintf(stderr, "error: --layout expects flash or rows, not '%s'\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--alloc-tokens")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 2, 1 << 20, &p.alloc_tokens))
                return 2;
        } else if (!strcmp(a, "--predictor-rank")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 1 << 16, &p.predictor_rank))
                return 2;
        } else if (!strcmp(a, "--predictor-tokens")) {
            if (!(v = cli_value(argc, argv, &i)) ||
                !cli_int(a, v, 2, 1 << 20, &p.predictor_tokens))
                return 2;
        } else if (!strcmp(a, "--recall")) {
            float rc;
            if (!(v = cli_value(argc, argv, &i)) || !cli_float(a, v, &rc)) return 2;
            if (!(rc >= 0.5f && rc <= 1.0f)) {
                fprintf(stderr, "error: --recall expects a share in [0.5, 1]\n");
                return 2;
            }
            p.predictor_recall = rc;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 2, 1 << 20, &p.n_ctx)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_int(a, v, 1, 256, &p.mp.n_threads))
                return 2;
        } else if (!strcmp(a, "--mem-budget")) {
            if (!(v = cli_value(argc, argv, &i)) || !cli_size(a, v, &p.mp.mem_budget)) return 2;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            return usage(stdout);
        } else {
            fprintf(stderr, "error: unknown option '%s'\n", a);
            return usage(stderr);
        }
    }
    if (!p.in_path || !p.out_path || !calib_path) {
        fprintf(stderr, "error: -m, -o and --calib are required\n");
        return usage(stderr);
    }
    char *text = cli_read_text_file("calibration text", calib_path);
    if (!text) return 1;
    p.calib_text = text;
    p.calib_len = strlen(text);
    tl_convert_report r;
    tl_status st = tl_convert(&p, &r);
    free(text);
    if (st) return cli_fail(st);
    fprintf(stderr, "calibrated on %zu tokens; %zu held out\n", r.calib_tokens,
            r.heldout_tokens);
    if (r.alloc_steps)
        fprintf(stderr, "allocation: %d steps, %d evaluations; levels of attn_in, attn_out, "
                "ffn_in, ffn_mid at S = 0.25: %.2f %.2f %.2f %.2f, 0.5: %.2f %.2f %.2f %.2f\n",
                r.alloc_steps, r.alloc_evals, (double)r.alloc[5][0], (double)r.alloc[5][1],
                (double)r.alloc[5][2], (double)r.alloc[5][3], (double)r.alloc[10][0],
                (double)r.alloc[10][1], (double)r.alloc[10][2], (double)r.alloc[10][3]);
    for (int i = 0; i < r.n_curve; i++)
        fprintf(stderr, "  sparsity %.2f: held-out perplexity %.4f (%+.2f%%), weights skipped "
                "%.1f%%\n", (double)r.curve_sparsity[i], r.curve_ppl[i],
                100.0 * (r.curve_ppl[i] / r.curve_ppl[0] - 1.0), 100.0 * r.curve_reached[i]);
    if (r.neurons.rank) {
        const tl_neuron_info *ni = &r.neurons;
        fprintf(stderr, "neuron predictors: rank %d; on the calibration rows %.2f%% of the "
                "neurons active, %.2f%% predicted, %.2f%% of their output mass recalled\n",
                (int)ni->rank, 100.0 * ni->active, 100.0 * ni->predicted, 100.0 * ni->recall);
        fprintf(stderr, "neuron window (k tokens: hit rate, slots needed as a share of the "
                "neurons):");
        for (int32_t k = 0; k < ni->window_k; k++)
            if (k < 4 || k % 4 == 3)
                fprintf(stderr, " %d: %.1f%% %.1f%%", (int)k + 1, 100.0 * ni->window_hit[k],
                        100.0 * ni->window_union[k]);
        fprintf(stderr, "\n");
    }
    if (p.flash_layout)
        fprintf(stderr, "default sparsity %.2f%s; wrote %s (flash layout)\n", (double)r.chosen,
                r.n_curve ? " (from the curve)" : " (given)", p.out_path);
    else
        fprintf(stderr, "default sparsity %.2f%s; wrote %s (%.1f MiB of tensors copied)\n",
                (double)r.chosen, r.n_curve ? " (from the curve)" : " (given)", p.out_path,
                (double)r.tensor_bytes / (1 << 20));
    return 0;
}
