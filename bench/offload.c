/* offload.c (bench_offload) - a model larger than its budget, streamed from the SSD.
 *
 * Synthesizes a Llama-2-7B-shape Q8_0 model (~7 GB; reused if present), then:
 *  1. sweeps O_DIRECT read bandwidth of the model file over chunk size x queue depth
 *     (the same IO queue the engine uses) and picks the best;
 *  2. for each budget (default 2 GiB and 4 GiB), decodes a few tokens with overlap and
 *     with --no-overlap, and reports tokens/s beside the bound
 *        max(T_compute, streamed bytes per token / disk bandwidth)
 *     where T_compute is the compute time the same run measured (forward time minus
 *     stalls) and T_io is measured in the same run, just before and just after the
 *     decoded tokens: the engine's own ring reads every streamed byte of one pass with
 *     nothing else running (same bytes, same queue, same moment; this machine's disk
 *     varies from run to run). The no-overlap run is compared with T_compute + T_io.
 * Medians over the decoded tokens. Usage:
 *   bench_offload [--dir DIR] [--budgets 2G,4G] [--tokens N] [--threads N] [--quick]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tierllm.h"
#include "base/clock.h"
#include "base/stats.h"
#include "exec/residency.h"
#include "exec/model_handle.h"
#include "tier/aio.h"
#include "tier/tier.h"

/* O_DIRECT read bandwidth of `bytes` of the file from `offset`, through the IO queue. */
static double disk_bandwidth(const char *path, size_t chunk, int depth, uint64_t offset,
                             size_t bytes) {
    tl_tier *t;
    if (tl_tier_file_open(path, TL_TIER_FILE_DIRECT, &t)) return 0;
    tl_aio_params ap = tl_aio_default_params();
    ap.chunk_bytes = chunk;
    ap.queue_depth = depth;
    ap.n_threads = depth;
    tl_aio *q;
    void *buf = NULL;
    double bw = 0;
    if (tl_aio_open(&ap, &q) == TL_OK) {
        const size_t req = 64u << 20; /* 64 MiB requests, like a layer's tensors */
        if (posix_memalign(&buf, 4096, req) == 0) {
            offset &= ~(uint64_t)4095;
            if (offset + bytes > t->size) offset = 0;
            double t0 = tl_now();
            size_t done = 0;
            int ok = 1;
            for (uint64_t tag = 1; done < bytes && ok; tag++) {
                size_t len = bytes - done < req ? bytes - done : req;
                len &= ~(size_t)4095;
                if (!len) break;
                ok = tl_aio_read(q, t, offset + done, buf, len, tag) == TL_OK &&
                     tl_aio_wait(q, tag) == TL_OK;
                done += len;
            }
            if (ok) bw = (double)done / (tl_now() - t0);
            free(buf);
        }
        tl_aio_close(q);
    }
    tl_tier_close(t);
    return bw;
}

typedef struct result { double tps, t_tok, t_compute, t_io, bw, streamed; } result;

static int run(const char *path, uint64_t budget, int overlap, int threads, int n_tokens,
               size_t chunk, int depth, result *res) {
    tl_model_params mp = tl_model_default_params();
    mp.mem_budget = budget;
    mp.overlap = overlap;
    mp.n_threads = threads;
    mp.io_chunk_bytes = chunk;
    mp.io_queue_depth = depth;
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 8;
    tl_model *m = NULL;
    tl_context *c = NULL;
    tl_status st = tl_model_open(path, &mp, &m);
    if (!st) st = tl_context_open(m, &cp, &c);
    if (st) {
        fprintf(stderr, "error: %s\n", tl_last_error());
        tl_model_close(m);
        return 1;
    }
    tl_model_desc d;
    tl_model_describe(m, &d);
    float *logits = malloc((size_t)d.n_vocab * sizeof *logits);
    int32_t prompt[4] = {1, 300, 301, 302};
    st = tl_decode(c, prompt, 4, logits);
    double tok_s[64], comp_s[64], io_before = 0, io_after = 0;
    uint64_t io_bytes = 0;
    tl_run_stats a, b;
    if (!st) st = tl_residency_measure_io(m->res, 0, NULL, &io_before, &io_bytes);
    for (int i = 0; i < n_tokens && !st; i++) {
        tl_context_get_stats(c, &a);
        int32_t tok = 400 + i;
        st = tl_decode(c, &tok, 1, logits);
        tl_context_get_stats(c, &b);
        tok_s[i] = b.wall_s - a.wall_s;
        comp_s[i] = (b.wall_s - a.wall_s) - (b.stall_s - a.stall_s);
        res->streamed = (double)(b.bytes_read_disk - a.bytes_read_disk);
    }
    if (!st) st = tl_residency_measure_io(m->res, 0, NULL, &io_after, &io_bytes);
    if (st) fprintf(stderr, "error: %s\n", tl_last_error());
    if (!st) {
        res->t_tok = tl_median(tok_s, (size_t)n_tokens);
        res->t_compute = tl_median(comp_s, (size_t)n_tokens);
        res->t_io = 0.5 * (io_before + io_after);
        res->bw = (double)io_bytes / res->t_io;
        res->tps = 1.0 / res->t_tok;
        printf("  (pure IO pass before %.2f s, after %.2f s)\n", io_before, io_after);
    }
    free(logits);
    tl_context_close(c);
    tl_model_close(m);
    return st ? 1 : 0;
}

int main(int argc, char **argv) {
    const char *dir = "/tmp/tierllm-bench", *budgets = "2G,4G";
    int n_tokens = 4, threads = 2, quick = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--dir")) dir = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--budgets")) budgets = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--tokens")) n_tokens = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--threads")) threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_offload [--dir DIR] [--budgets 2G,4G] [--tokens N] "
                    "[--threads N] [--quick]\n");
            return 2;
        }
    }
    if (n_tokens < 1 || n_tokens > 64) n_tokens = 4;
    mkdir(dir, 0755);
    char path[1024];
    snprintf(path, sizeof path, "%s/llama2-7b-q8_0.gguf", dir);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        tl_synth_params sp;
        tl_synth_preset("llama2-7b", &sp);
        sp.weight_type = 8;
        printf("synthesizing %s (%.1f GB) ...\n", path, tl_synth_file_bytes(&sp) / 1e9);
        fflush(stdout);
        if (tl_synth_write(&sp, path)) {
            fprintf(stderr, "error: %s\n", tl_last_error());
            return 1;
        }
    }
    /* 1. chunk size x queue depth */
    static const size_t chunks[] = {256u << 10, 1u << 20, 4u << 20};
    static const int depths[] = {4, 8, 16};
    size_t best_chunk = 1u << 20;
    int best_depth = 8;
    double best = 0;
    printf("O_DIRECT read bandwidth of the model file, 512 MiB per point:\n");
    for (size_t ci = 0; ci < 3; ci++)
        for (size_t di = 0; di < 3; di++) {
            if (quick && (ci != 1 || di != 1)) continue;
            double bw = disk_bandwidth(path, chunks[ci], depths[di],
                                       (uint64_t)(ci * 3 + di + 1) << 29, (size_t)512 << 20);
            printf("  chunk %5zu KiB  depth %2d : %.2f GB/s\n", chunks[ci] >> 10, depths[di],
                   bw / 1e9);
            fflush(stdout);
            if (bw > best) { best = bw; best_chunk = chunks[ci]; best_depth = depths[di]; }
        }
    printf("best: chunk %zu KiB, depth %d\n", best_chunk >> 10, best_depth);
    /* 2. budgets x overlap */
    char list[256];
    snprintf(list, sizeof list, "%s", budgets);
    for (char *b = strtok(list, ","); b; b = strtok(NULL, ",")) {
        double v = atof(b);
        uint64_t budget = (uint64_t)(v * (strchr(b, 'G') ? 1073741824.0 : 1048576.0));
        for (int overlap = 1; overlap >= 0; overlap--) {
            result r = {0};
            if (run(path, budget, overlap, threads, n_tokens, best_chunk, best_depth, &r))
                return 1;
            double bound = r.t_compute > r.t_io ? r.t_compute : r.t_io;
            if (overlap)
                printf("budget %s overlap   : %.3f tok/s (%.2f s/token) | streamed %.2f GB/token,"
                       " disk %.2f GB/s -> T_io %.2f s, T_compute %.2f s | bound max = %.2f s "
                       "-> %.0f%% of bound\n", b, r.tps, r.t_tok, r.streamed / 1e9, r.bw / 1e9,
                       r.t_io, r.t_compute, bound, 100.0 * bound / r.t_tok);
            else
                printf("budget %s no-overlap: %.3f tok/s (%.2f s/token) | T_compute + T_io = "
                       "%.2f s -> measured/sum %.2f\n", b, r.tps, r.t_tok,
                       r.t_compute + r.t_io, r.t_tok / (r.t_compute + r.t_io));
            fflush(stdout);
        }
    }
    return 0;
}
