/* throughput.c (bench_throughput) - FlexGen's experiment on this machine: a disk-bound
 * model turned into a batch engine by the block schedule.
 *
 * TinyLlama-1.1B shape, Q8_0 (synthesized, reused), a memory budget about a third of
 * the model, prompts of 128 tokens, 32 new tokens each. Sweeps the block size
 * (gbs x num_gb) and the KV placement (all in memory / all spilled to the SSD) and
 * reports, per point, aggregate generated tokens/s (generated tokens over prefill plus
 * decode time, as FlexGen counts) beside the bound for that point:
 *     bound = generated tokens / (max(C_prefill, IO_prefill) + max(C_decode, IO_decode))
 *     C = forward time minus stalls in that phase, measured by the run itself;
 *     IO = passes x (pure weight-IO time of one pass, measured in the same run just
 *          before and after) + that phase's KV bytes / the disk bandwidth of that pass.
 * The two phases are bounded separately because they cannot overlap each other:
 * prefill is compute-heavy and decode IO-heavy, so max over the whole run would be a
 * bound no schedule can reach.
 * Usage: bench_throughput [--dir DIR] [--budget MiB] [--points 1x1:100,...] [--page N]
 *        [--prefetch N] [--quick]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tierllm.h"
#include "prompt.h"
#include "base/clock.h"
#include "exec/residency.h"
#include "exec/model_handle.h"

#define PROMPT 128
#define GEN 32

typedef struct point { int gbs, num_gb, kv_mem; } point;

static int g_page = 4, g_prefetch = 1;

static int run_point(const char *path, uint64_t budget, point pt, double *out_tps,
                     double *out_bound) {
    tl_model_params mp = tl_model_default_params();
    mp.mem_budget = budget;
    mp.prefetch = g_prefetch;
    mp.n_threads = 2;
    tl_model *m;
    if (tl_model_open(path, &mp, &m)) {
        fprintf(stderr, "error: %s\n", tl_last_error());
        return 1;
    }
    const int n = pt.gbs * pt.num_gb;
    char **prompts = calloc((size_t)n, sizeof *prompts);
    for (int i = 0; i < n; i++) prompts[i] = bench_make_prompt(m, PROMPT, i);
    tl_batch_params bp = tl_batch_default_params();
    bp.gbs = pt.gbs;
    bp.num_gb = pt.num_gb;
    bp.n_ctx = PROMPT + GEN + 1;
    bp.kv_mem_pct = pt.kv_mem;
    bp.page_tokens = g_page;
    bp.prefill_rows = pt.gbs * g_page > 256 ? pt.gbs * g_page : 256; /* a page per step */
    tl_generate_params gp = tl_generate_default_params();
    gp.n_predict = GEN;
    gp.stop_at_eos = 0;
    gp.sampler.temperature = 0;
    tl_batch_stats bs;
    /* place the weights (a one-token warm-up run fixes the placement) */
    const char *warm = "the";
    tl_batch_params wp = bp;
    tl_generate_params wg = gp;
    wg.n_predict = 1;
    tl_status st = tl_batch_generate(m, &bp, &wg, &warm, NULL, 1, NULL, NULL, NULL, &bs);
    (void)wp;
    double io_before = 0, io_after = 0;
    uint64_t io_bytes = 0;
    tl_residency_stats r0 = {0}, r1 = {0};
    if (!st) st = tl_residency_measure_io(m->res, 0, NULL, &io_before, &io_bytes);
    if (!st) tl_residency_get_stats(m->res, &r0);
    if (!st) st = tl_batch_generate(m, &bp, &gp, (const char *const *)prompts, NULL, n, NULL,
                                    NULL, NULL, &bs);
    if (!st) tl_residency_get_stats(m->res, &r1);
    if (!st) st = tl_residency_measure_io(m->res, 0, NULL, &io_after, &io_bytes);
    int rc = 0;
    if (st) {
        fprintf(stderr, "error: %s\n", tl_last_error());
        rc = 1;
    } else {
        const double t_pass = 0.5 * (io_before + io_after);
        const double bw = t_pass > 0 ? (double)io_bytes / t_pass : 1e12;
        const double passes = (double)(r1.passes - r0.passes);
        const double wall = bs.prefill_s + bs.decode_s;
        const double c_pre = bs.prefill_s - bs.prefill_stall_s;
        const double c_dec = bs.decode_s - bs.decode_stall_s;
        /* KV traffic is all in decode (prefill writes, too, are counted there: bound) */
        const double io_pre = (double)bs.prefill_passes * t_pass;
        const double io_dec = (double)bs.decode_passes * t_pass +
                              (double)(bs.kv_bytes_read + bs.ssd_bytes_written) / bw;
        const double t_compute = c_pre + c_dec, t_io = io_pre + io_dec;
        const double bound_t = (c_pre > io_pre ? c_pre : io_pre) + (c_dec > io_dec ? c_dec : io_dec);
        *out_tps = (double)bs.generated_tokens / wall;
        *out_bound = (double)bs.generated_tokens / bound_t;
        printf("%3dx%-3d (%4d seqs) kv-mem %3d%% | %7.2f tok/s  bound %7.2f tok/s  %3.0f%% | "
               "prefill %6.1f s decode %6.1f s | passes %3.0f, weight IO/pass %.2f s "
               "(%.2f GB/s), IO %.1f+%.1f s, compute %.1f+%.1f s (%s-bound) | per token: weights "
               "%.1f MiB, KV read %.1f KiB, SSD written %.1f KiB\n",
               pt.gbs, pt.num_gb, n, pt.kv_mem, *out_tps, *out_bound,
               100.0 * *out_tps / *out_bound, bs.prefill_s, bs.decode_s, passes, t_pass,
               bw / 1e9, io_pre, io_dec, c_pre, c_dec, t_compute > t_io ? "compute" : "IO",
               (double)bs.weight_bytes_read / bs.generated_tokens / 1048576.0,
               (double)bs.kv_bytes_read / bs.generated_tokens / 1024.0,
               (double)bs.ssd_bytes_written / bs.generated_tokens / 1024.0);
        fflush(stdout);
    }
    for (int i = 0; i < n; i++) free(prompts[i]);
    free(prompts);
    tl_model_close(m);
    return rc;
}

int main(int argc, char **argv) {
    const char *dir = "/tmp/tierllm-bench";
    /* the default sweep (~15 min here): a third of the model, small KV pages and one layer
     * of prefetch so 128 sequences' KV bookkeeping fits beside the layer buffers */
    const char *points = "1x1:100,4x2:0,16x4:0,32x4:0";
    double budget_mib = 400;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) points = "1x1:100,8x2:100,8x2:0";
        else if (i + 1 < argc && !strcmp(argv[i], "--dir")) dir = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--budget")) budget_mib = atof(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--points")) points = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--page")) g_page = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--prefetch")) g_prefetch = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_throughput [--dir DIR] [--budget MiB] "
                    "[--points GBSxNUMGB:KVMEM,...] [--page N] [--prefetch N] [--quick]\n");
            return 2;
        }
    }
    mkdir(dir, 0755);
    char path[1024];
    snprintf(path, sizeof path, "%s/tinyllama-1.1b-q8_0.gguf", dir);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        tl_synth_params sp;
        tl_synth_preset("tinyllama-1.1b", &sp);
        sp.weight_type = 8;
        printf("synthesizing %s ...\n", path);
        if (tl_synth_write(&sp, path)) {
            fprintf(stderr, "error: %s\n", tl_last_error());
            return 1;
        }
        stat(path, &sb);
    }
    uint64_t budget = (uint64_t)(budget_mib * 1048576.0);
    printf("model %.0f MiB, budget %.0f MiB (%.2f of the model), prompt %d, generate %d, KV "
           "page %d tokens, prefetch %d\n", sb.st_size / 1048576.0, budget_mib,
           budget / (double)sb.st_size, PROMPT, GEN, g_page, g_prefetch);
    char list[512];
    snprintf(list, sizeof list, "%s", points);
    double best = 0, best_ratio = 0;
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        point pt = {1, 1, 100};
        if (sscanf(tok, "%dx%d:%d", &pt.gbs, &pt.num_gb, &pt.kv_mem) < 2) continue;
        double tps = 0, bound = 0;
        if (run_point(path, budget, pt, &tps, &bound)) return 1;
        if (tps > best) { best = tps; best_ratio = tps / bound; }
    }
    printf("best point: %.2f tok/s at %.0f%% of its bound\n", best, 100.0 * best_ratio);
    return 0;
}
