/* fuzz_jsonl.c - libFuzzer target for the JSONL input of `tierllm batch`.
 *
 * The input bytes are written to a file and read by batch_input_read exactly as the CLI
 * reads -i (line splitting with the size cap, Jansson through base/json, the per-line
 * checks, the id rules of --resume), once without and once with require_ids. Each line
 * is also parsed as any JSON value, and a value that parses must survive its canonical
 * text: canonical(parse(canonical(v))) == canonical(v), since --resume matches ids by that
 * text. Any crash, sanitizer report, leak, hang or broken round trip is a bug.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/json.h"
#include "tools/batch_input.h"

static char path[64];

static void remove_file(void) { unlink(path); }

static void round_trip(const char *p, size_t n) {
    json_t *v, *w;
    char err[160];
    if (tl_json_parse(p, n, TL_JSON_ANY, &v, err, sizeof err)) return;
    char *a = tl_json_canonical(v);
    if (a) {
        if (tl_json_parse(a, strlen(a), TL_JSON_ANY, &w, err, sizeof err)) {
            fprintf(stderr, "canonical text does not parse: %s (%s)\n", a, err);
            abort();
        }
        char *b = tl_json_canonical(w);
        if (!b || strcmp(a, b)) {
            fprintf(stderr, "canonical text changed: %s -> %s\n", a, b ? b : "(null)");
            abort();
        }
        free(b);
        json_decref(w);
    }
    free(a);
    json_decref(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!path[0]) {
        snprintf(path, sizeof path, "/dev/shm/fuzz_jsonl.%ld.jsonl", (long)getpid());
        atexit(remove_file);
    }
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    for (int ids = 0; ids < 2; ids++) {
        batch_input in;
        char err[512];
        if (batch_input_read(path, 16, ids, &in, err, sizeof err) == 0) {
            for (int32_t i = 0; i < in.n; i++) /* what the CLI reads of each line */
                if (!in.line[i].error[0] && (!in.line[i].prompt || in.line[i].n_predict < 0))
                    abort();
            batch_input_free(&in);
        }
    }
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        round_trip(p, n);
        p += n + 1;
    }
    return 0;
}
