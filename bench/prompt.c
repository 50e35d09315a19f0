/* prompt.c - see prompt.h. Words are added until the prompt reaches n_tokens, then
 * characters are trimmed until it is exactly n_tokens. */
#include "prompt.h"

#include <stdio.h>
#include <stdlib.h>

char *bench_make_prompt(tl_model *m, int n_tokens, int variant) {
    static const char *words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran",
                                  "to", "see", "big", "red", "sun", "in", "sky"};
    size_t cap = 16384, len = 0, n = 0;
    char *p = calloc(1, cap);
    for (int i = 0; p && len + 16 < cap; i++) {
        const char *w = words[(i * 7 + variant * 3 + i / 5) % 16];
        len += (size_t)snprintf(p + len, cap - len, "%s%s", i ? " " : "", w);
        if (tl_tokenize(m, p, len, 1, NULL, 0, &n) != TL_OK && n == 0) break;
        if ((int)n >= n_tokens) break;
    }
    while (p && (int)n > n_tokens && len > 0) {
        p[--len] = 0;
        tl_tokenize(m, p, len, 1, NULL, 0, &n);
    }
    return p;
}
