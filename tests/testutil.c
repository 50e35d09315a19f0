/* testutil.c - see testutil.h. */
#include <stdlib.h>
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
