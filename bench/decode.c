/* decode.c (bench_decode) - decode and prefill speed against this machine's bounds.
 *
 * Synthesizes TinyLlama-1.1B-shape models (Q8_0 and F16; reused if present in the work
 * directory), then in the same run measures: DRAM read bandwidth and FMA peak on the
 * same thread pool, prefill tokens/s for a 128-token prompt, and decode tokens/s.
 *   decode bound  = DRAM bandwidth / weight bytes read per token (every matrix, plus one
 *                   embedding row); the host's bandwidth drifts, so decode runs in slices
 *                   of 8 tokens each preceded by a probe, and the ratio is the median
 *                   slice's decode speed over the median probe's bound
 *   prefill ratios = matrix FLOPs per second (2 x weights per token, the convention of
 *                   llama.cpp's figures) / the widest f32 FMA peak, the yardstick across
 *                   types; and all FLOPs (attention too) / the peak of the unit the
 *                   type's GEMM runs on (where AVX-512 VNNI is present int8 dot products
 *                   for Q8_0/Q4_0 and 512-bit FMA for float types, else f32 FMA AVX2).
 *                   Every unit's peak is printed.
 * Reports medians of repeated runs. Usage:
 *   bench_decode [--dir DIR] [--threads N] [--reps R] [--types q8_0,f16] [--gen N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tierllm.h"
#include "base/clock.h"
#include "base/stats.h"
#include "kernels/kernels.h"
#include "kernels/probe.h"
#include "exec/model_handle.h"

#define SLICE 8
#define PROBE_BYTES ((size_t)256 << 20)

static uint64_t matrix_bytes(const tl_weight *w) {
    return tl_type_row_bytes(w->type, w->cols) * w->rows;
}

/* Bytes of weights one decode step reads, and matmul FLOPs per token. */
static void per_token_costs(const tl_model *m, uint64_t *bytes, double *flops) {
    uint64_t b = matrix_bytes(&m->lm.output) + tl_type_row_bytes(m->lm.tok_embd.type, m->lm.tok_embd.cols);
    double f = 2.0 * (double)m->lm.output.rows * (double)m->lm.output.cols;
    for (int l = 0; l < m->lm.hp.n_layer; l++) {
        const tl_llama_layer *L = &m->lm.layers[l];
        const tl_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < 7; i++) {
            b += matrix_bytes(ws[i]);
            f += 2.0 * (double)ws[i]->rows * (double)ws[i]->cols;
        }
        b += 2 * (uint64_t)m->lm.hp.n_embd * sizeof(float); /* norms */
    }
    *bytes = b;
    *flops = f;
}

static int run_type(const char *dir, const char *type_name, int32_t type, int32_t mix,
                    int threads, int reps, int n_gen, int n_prompt) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tinyllama-1.1b-%s.gguf", dir, type_name);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        tl_synth_params sp;
        tl_synth_preset("tinyllama-1.1b", &sp);
        sp.weight_type = type;
        sp.mix = mix;
        printf("synthesizing %s ...\n", path);
        fflush(stdout);
        if (tl_synth_write(&sp, path)) {
            fprintf(stderr, "error: %s\n", tl_last_error());
            return 1;
        }
    }
    tl_model_params mp = tl_model_default_params();
    mp.n_threads = threads;
    tl_model *m;
    if (tl_model_open(path, &mp, &m)) {
        fprintf(stderr, "error: %s\n", tl_last_error());
        return 1;
    }
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = n_prompt + n_gen + 8;
    cp.n_batch = n_prompt;
    tl_context *c;
    if (tl_context_open(m, &cp, &c)) {
        fprintf(stderr, "error: %s\n", tl_last_error());
        tl_model_close(m);
        return 1;
    }
    uint64_t bytes;
    double flops;
    per_token_costs(m, &bytes, &flops);
    int32_t *prompt = malloc((size_t)n_prompt * sizeof *prompt);
    float *logits = malloc((size_t)m->lm.hp.n_vocab * sizeof *logits);
    for (int i = 0; i < n_prompt; i++) prompt[i] = 3 + (i * 7919) % (m->lm.hp.n_vocab - 3);
    double pre[64], dec[64], slice_bw[64 * 64], slice_tps[64 * 64];
    int n_slices = 0;
    void *probe_buf = tl_probe_buffer(PROBE_BYTES); /* huge pages, as the weights */
    if (!probe_buf) return 1;
    /* warm-up: touch every weight once */
    tl_context_reset(c);
    tl_decode(c, prompt, 1, logits);
    for (int r = 0; r < reps; r++) {
        tl_context_reset(c);
        double t0 = tl_now();
        tl_decode(c, prompt, (size_t)n_prompt, logits);
        pre[r] = tl_now() - t0;
        /* this machine's memory bandwidth drifts by 2-3x within seconds (a shared host):
         * decode runs in slices of SLICE tokens, each preceded by a short probe over a
         * buffer allocated once (a fresh one per probe costs the next slice its page
         * faults and unmaps: 4-token slices then ran ~25% slower); the ratio
         * compares the median slice's decode speed with the median probe of the same
         * period (medians: single slices and probes catch spikes of contention) */
        int32_t tok = 5;
        dec[r] = 0;
        for (int i = 0; i < n_gen;) {
            slice_bw[n_slices] = tl_probe_read_buffer(m->lm.pool, probe_buf, PROBE_BYTES, 3);
            int slice = n_gen - i < SLICE ? n_gen - i : SLICE;
            t0 = tl_now();
            for (int e = i + slice; i < e; i++) {
                if (tl_decode(c, &tok, 1, logits)) {
                    fprintf(stderr, "error: %s\n", tl_last_error());
                    return 1;
                }
                tok = 3 + (tok * 31 + i) % (m->lm.hp.n_vocab - 3);
            }
            double el = tl_now() - t0;
            dec[r] += el;
            slice_tps[n_slices++] = slice / el;
        }
    }
    /* the peaks, in the same run: every unit present once, then the widest f32 FMA (the
     * yardstick across types) and the unit this type's prefill GEMM runs on */
    static int units_printed;
    if (!units_printed) {
        printf("peaks (%d threads):", tl_pool_threads(m->lm.pool));
        for (int u = 0; u < TL_UNIT_COUNT; u++)
            if (tl_probe_unit_present((tl_probe_unit)u))
                printf(" %s %.1f G/s;", tl_probe_unit_name((tl_probe_unit)u),
                       tl_probe_unit_peak(m->lm.pool, (tl_probe_unit)u, 5) / 1e9);
        printf(" (operations: 2 per multiply-add)\n");
        units_printed = 1;
    }
    double peak = tl_probe_fma_peak(m->lm.pool, 5);
    /* x86_matmul.c's rule: Q8_0/Q4_0 prompts take the widest int8 GEMM (AVX-512 VNNI, else
     * AVX-VNNI, else AVX2's); the K-quants AVX-512's int8 products where present, else
     * AVX2's; Q4_1/Q5_x AVX2's; float types the widest f32 FMA */
    const int rounds = type == 8 || type == 2;
    tl_probe_unit own = tl_probe_unit_present(TL_UNIT_FMA_AVX512) ? TL_UNIT_FMA_AVX512 : TL_UNIT_FMA_AVX2;
    if (mix || tl_type_rounds_act((tl_type)type)) own = TL_UNIT_INT8_AVX2;
    if ((mix || tl_type_act_block((tl_type)type) == TL_QK_K) &&
        tl_probe_unit_present(TL_UNIT_INT8_AVX512VNNI))
        own = TL_UNIT_INT8_AVX512VNNI;
    if (rounds && tl_probe_unit_present(TL_UNIT_INT8_AVX512VNNI)) own = TL_UNIT_INT8_AVX512VNNI;
    else if (rounds && tl_probe_unit_present(TL_UNIT_INT8_AVXVNNI)) own = TL_UNIT_INT8_AVXVNNI;
    else if (rounds) own = TL_UNIT_INT8_AVX2;
    double own_peak = tl_probe_unit_peak(m->lm.pool, own, 5);
    double t_pre = tl_median(pre, (size_t)reps), t_dec = tl_median(dec, (size_t)reps);
    double bw = tl_median(slice_bw, (size_t)n_slices);
    double ratio = tl_median(slice_tps, (size_t)n_slices) * (double)bytes / bw;
    double dec_tps = n_gen / t_dec, bound_tps = bw / (double)bytes;
    /* attention FLOPs of the prompt: 2 matrices (QK^T and PV), causal half */
    double attn = 2.0 * 2.0 * (double)m->lm.hp.n_layer * m->lm.hp.n_head * m->lm.hp.head_dim *
                  (double)n_prompt * (n_prompt + 1) / 2.0;
    double pre_flops = (flops * n_prompt + attn) / t_pre;
    printf("%-5s threads %d | weights/token %.1f MiB | DRAM read %.1f GB/s | widest f32 FMA "
           "peak %.1f GFLOP/s\n", type_name, tl_pool_threads(m->lm.pool), bytes / 1048576.0, bw / 1e9,
           peak / 1e9);
    printf("%-5s decode  %.2f tok/s  bound %.2f tok/s  ratio %.0f%% (median slice over median probe; "
           "%.1f GB/s of weights)\n", type_name, dec_tps, bound_tps, 100.0 * ratio,
           dec_tps * (double)bytes / 1e9);
    printf("%-5s prefill %.1f tok/s (%d-token prompt)  %.1f GFLOP/s of matrices (2 x weights "
           "per token: %.2f GFLOP) = %.0f%% of the widest f32 FMA peak; with attention "
           "%.1f GFLOP/s = %.0f%% of its own unit's peak (%s)\n",
           type_name, n_prompt / t_pre, n_prompt, flops * n_prompt / t_pre / 1e9, flops / 1e9,
           100.0 * flops * n_prompt / t_pre / peak, pre_flops / 1e9,
           100.0 * pre_flops / own_peak, tl_probe_unit_name(own));
    fflush(stdout);
    free(prompt);
    free(logits);
    free(probe_buf);
    tl_context_close(c);
    tl_model_close(m);
    return 0;
}

int main(int argc, char **argv) {
    const char *dir = "/tmp/tierllm-bench", *types = "q8_0,f16";
    int threads = 2, reps = 5, n_gen = 32, n_prompt = 128;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--types")) types = argv[i + 1];
        else if (!strcmp(argv[i], "--gen")) n_gen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt")) n_prompt = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bench_decode [--dir DIR] [--threads N] [--reps R] "
                    "[--types q8_0,f16,f32,bf16,q4_0,q4_1,q5_0,q5_1,q2_k,q3_k,q4_k,q5_k,q6_k,"
                    "q4_k_m] [--gen N] [--prompt N]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 64 || threads < 1 || n_gen < 1 || n_gen > 256 || n_prompt < 1) return 2;
    mkdir(dir, 0755);
    static const struct { const char *n; int32_t t, mix; } known[] = {
        {"q8_0", 8, 0},  {"f16", 1, 0},  {"f32", 0, 0},  {"bf16", 30, 0}, {"q4_0", 2, 0},
        {"q4_1", 3, 0},  {"q5_0", 6, 0}, {"q5_1", 7, 0}, {"q2_k", 10, 0}, {"q3_k", 11, 0},
        {"q4_k", 12, 0}, {"q5_k", 13, 0}, {"q6_k", 14, 0}, {"q4_k_m", 0, TL_MIX_Q4_K_M}};
    int rc = 0;
    char list[512];
    snprintf(list, sizeof list, "%s", types);
    for (char *save = NULL, *name = strtok_r(list, ",", &save); name;
         name = strtok_r(NULL, ",", &save)) { /* in the order given */
        size_t k = 0;
        while (k < sizeof known / sizeof known[0] && strcmp(name, known[k].n) != 0) k++;
        if (k == sizeof known / sizeof known[0]) {
            fprintf(stderr, "bench_decode: unknown type '%s'\n", name);
            return 2;
        }
        rc |= run_type(dir, known[k].n, known[k].t, known[k].mix, threads, reps, n_gen, n_prompt);
    }
    return rc;
}
