/* cmd_profile.c - `tierllm profile`: measure this machine's hardware profile (disk,
 * memory, kernels, attention; plan/profile.h), save it as JSON and print a summary, or
 * print the summary of a saved profile (--show). */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "tools/cli.h"
#include "format/tensor_type.h"
#include "model/llama.h"
#include "plan/profile.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: tierllm profile [--dir DIR] [-t N] [-o PATH] | --show PATH\n"
            "  --dir DIR    directory whose disk to measure (a temporary 256 MiB file;\n"
            "               default: the profile cache directory, else .)\n"
            "  -t N         compute threads (default: all cores)\n"
            "  -o PATH      where to save (default: $XDG_CACHE_HOME/tierllm/profile-tN.json\n"
            "               or ~/.cache/tierllm/profile-tN.json)\n"
            "  --show PATH  print a saved profile without measuring\n");
}

static void on_progress(void *user, const char *line) {
    const struct timespec *t0 = user;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double el = (double)(now.tv_sec - t0->tv_sec) + 1e-9 * (double)(now.tv_nsec - t0->tv_nsec);
    fprintf(stderr, "profile [%5.1f s]: %s\n", el, line);
}

static void print_summary(const tl_hw_profile *p) {
    time_t when = (time_t)p->measured_unix;
    struct tm tm;
    char date[64] = "?";
    if (localtime_r(&when, &tm)) strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S", &tm);
    printf("machine:       %s\n", p->machine);
    printf("measured:      %s, in %.1f s, %d threads\n", date, p->profile_seconds,
           (int)p->n_threads);
    printf("memory read:   %.2f GB/s\n", p->mem_read_bps / 1e9);
    printf("FMA peak:      %.1f GFLOP/s\n", p->fma_flops / 1e9);
    printf("disk:          %s\n", p->disk_dir);
    printf("  write:       %.3f GB/s (1 MiB chunks, depth 4)\n", p->disk_write_bps / 1e9);
    printf("  read GB/s    ");
    for (int d = 0; d < TL_PROF_N_DEPTH; d++) printf("  depth %-3d", (int)tl_prof_depths[d]);
    printf("\n");
    for (int c = 0; c < TL_PROF_N_CHUNK; c++) {
        printf("    %5llu KiB  ", (unsigned long long)(tl_prof_chunks[c] >> 10));
        for (int d = 0; d < TL_PROF_N_DEPTH; d++)
            printf("  %9.3f", p->disk_read_bps[c][d] / 1e9);
        printf("\n");
    }
    printf("  KV page read behind the weight stream: %.2f ms, +%.3f ms per further page\n",
           p->disk_urgent_read_s * 1e3, p->disk_urgent_page_s * 1e3);
    printf("matmul GMAC/s by rows (8192 x 2048 weights streamed from memory):\n       ");
    for (int r = 0; r < TL_PROF_N_ROWS; r++) printf(" %6d", (int)tl_prof_rows[r]);
    printf("\n");
    for (int t = 0; t < TL_PROF_N_TYPE; t++) {
        printf("  %-5s", tl_type_name(tl_type_table[t].type));
        for (int r = 0; r < TL_PROF_N_ROWS; r++) printf(" %6.1f", p->matmul_macs[t][r] / 1e9);
        printf("\n");
    }
    printf("matmul per-call us by rows:\n");
    for (int t = 0; t < TL_PROF_N_TYPE; t++) {
        printf("  %-5s", tl_type_name(tl_type_table[t].type));
        for (int r = 0; r < TL_PROF_N_ROWS; r++) printf(" %6.1f", p->matmul_call_s[t][r] * 1e6);
        printf("\n");
    }
    printf("repacking into int8 panels (streamed weights, on arrival):");
    int any = 0;
    for (int t = 0; t < TL_PROF_N_TYPE; t++)
        if (p->repack_bps[t] > 0)
            printf("%s %s %.1f GB/s", any++ ? "," : "", tl_type_name(tl_type_table[t].type),
                   p->repack_bps[t] / 1e9);
    printf("%s\n", any ? "" : " none (this CPU computes from the file's layout)");
    printf("attention:     %.3f ns per (position x head x head_dim), f32 KV; %.3f ns in "
           "blocks of %d rows\n", p->attn_s_per_mac * 1e9, p->attn_block_s_per_mac * 1e9,
           TL_ATTN_BLOCK_MAX_ROWS);
    printf("  grouped %d:  %.3f ns, %.3f ns in blocks (query heads per kv head)\n",
           TL_PROF_GQA_GROUP, p->attn_gqa_s_per_mac * 1e9, p->attn_gqa_block_s_per_mac * 1e9);
    printf("  beyond the caches: +%.4f ns per KV byte read with %.0f MiB read per token "
           "(in the caches: %.0f MiB)\n", p->attn_mem_s_per_byte * 1e9,
           p->attn_mem_bytes / 1048576.0, p->attn_cache_bytes / 1048576.0);
    printf("  KV decode:   ");
    for (int k = 1; k < TL_PROF_N_KVBITS; k++)
        printf("%s%d-bit %.3f ns", k > 1 ? ", " : "", (int)tl_prof_kvbits[k],
               p->attn_decode_s[k] * 1e9);
    printf(" per element\n");
    printf("  KV store:    ");
    for (int k = 0; k < TL_PROF_N_KVBITS; k++)
        printf("%s%d-bit %.3f ns", k ? ", " : "", (int)tl_prof_kvbits[k], p->kv_store_s[k] * 1e9);
    printf(" per value (fresh memory)\n");
    printf("element-wise:  %.3f ns per element\n", p->elementwise_s * 1e9);
    printf("compute while the disk streams: %.2fx slower (%.2fx for 1-4 rows, %.2fx for "
           "attention), the stream at %.2f GB/s\n", p->io_compute_slowdown,
           p->io_slowdown_matvec, p->io_slowdown_attn, p->io_stream_bps / 1e9);
    printf("layer fixed:   %.1f us per layer per forward pass\n", p->layer_fixed_s * 1e6);
}

int tl_cmd_profile(int argc, char **argv) {
    const char *dir = NULL, *out = NULL, *show = NULL;
    int32_t threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--dir")) {
            if (!(dir = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (!(out = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--show")) {
            if (!(show = cli_value(argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            const char *v = cli_value(argc, argv, &i);
            if (!v || !cli_int(a, v, 1, 256, &threads)) return 2;
        } else {
            fprintf(stderr, "error: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    tl_hw_profile p;
    tl_status st;
    if (show) {
        if (dir || out || threads) {
            fprintf(stderr, "error: --show takes no other options\n");
            return 2;
        }
        if ((st = tl_profile_load(show, &p))) return cli_fail(st);
        print_summary(&p);
        printf("profile:       %s\n", show);
        return 0;
    }
    char def[1024];
    if (!out) {
        if ((st = tl_profile_default_path(threads, def, sizeof def))) return cli_fail(st);
        out = def;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* the target is checked before the measurement, not after a minute of it */
    if ((st = tl_profile_check_path(out))) return cli_fail(st);
    if ((st = tl_profile_measure(threads, dir, 0, on_progress, &t0, &p))) return cli_fail(st);
    if ((st = tl_profile_save(&p, out))) return cli_fail(st);
    print_summary(&p);
    printf("profile:       %s\n", out);
    return 0;
}
