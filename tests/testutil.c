/* testutil.c - see testutil.h. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"
#include "plan/profile.h"

int tl_test_failures;

const char *tl_test_model(const char *name) {
    static char buf[8][1024];
    static int slot;
    char *p = buf[slot++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", TL_MODELS_DIR, name);
    if (access(p, R_OK) != 0) {
        fprintf(stderr, "missing shared model %s (expected ../shared/models)\n", p);
        tl_test_failures++;
    }
    return p;
}

char *tl_test_read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 16);
    size_t n = buf ? fread(buf, 1, (1 << 16) - 1, f) : 0;
    (void)n;
    fclose(f);
    return buf;
}

int tl_test_finish(const char *name) {
    if (tl_test_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, tl_test_failures);
        return 1;
    }
    printf("%s: ok\n", name);
    return 0;
}

void tl_test_buf_put(tl_test_buf *b, const void *d, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) { perror("realloc"); exit(1); }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, d, n);
    b->len += n;
}

const char *const tl_test_story_prompts[TL_TEST_N_STORY_PROMPTS] = {
    "Once upon a time", "The little dog", "Lily and Ben went to the park",
    "One day, a big bird", "Tom had a red ball.", "The sun was hot and the",
    "Sam liked to", "There was a cat named Tim. Tim", "Mom said,", "A girl",
    "The boat was on the water and the fish swam under it. The boy"};

void tl_test_profile_set_disk(tl_hw_profile *p, double bps) {
    for (int c = 0; c < TL_PROF_N_CHUNK; c++)
        for (int d = 0; d < TL_PROF_N_DEPTH; d++) p->disk_read_bps[c][d] = bps;
}

void tl_test_round_profile(tl_hw_profile *p) {
    memset(p, 0, sizeof *p);
    snprintf(p->machine, sizeof p->machine, "test");
    p->n_threads = 1;
    p->mem_read_bps = 1e10;
    p->fma_flops = 1e11;
    tl_test_profile_set_disk(p, 1e9);
    p->disk_write_bps = 5e8;
    p->disk_urgent_read_s = 2e-3;
    p->disk_urgent_page_s = 1e-4;
    for (int t = 0; t < TL_PROF_N_TYPE; t++)
        for (int n = 0; n < TL_PROF_N_ROWS; n++) p->matmul_macs[t][n] = 1e9;
    p->attn_s_per_mac = 2e-9;
    p->attn_block_s_per_mac = 2e-9; /* blocks as fast as single rows (test_plan's longhand) */
    p->elementwise_s = 1e-9;
    p->layer_fixed_s = 1e-5;
    p->io_compute_slowdown = 1;
    p->io_slowdown_matvec = 1;
    p->io_slowdown_attn = 1;
}
