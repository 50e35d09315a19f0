/* testutil.c - see testutil.h. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"

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
