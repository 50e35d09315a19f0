/* test_vmhwm.c - the budget is a promise: a synthetic model four times larger than its
 * budget streams, and the process's peak resident memory (VmHWM) stays within the budget
 * plus a fixed overhead of 64 MiB (code, libc, thread stacks, tokenizer, GGUF metadata).
 * Runs in its own process so the high-water mark is this scenario's alone. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "tierllm.h"
#include "testutil.h"

static long vm_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) v = atol(line + n + 1);
    if (f) fclose(f);
    return v;
}

int main(void) {
    char dir[] = "tl_vmhwm_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    tl_synth_params sp = {.n_vocab = 8000, .n_embd = 1024, .n_ff = 2816, .n_layer = 16,
        .n_head = 16, .n_head_kv = 4, .n_ctx = 512, .weight_type = 8 /* Q8_0 */,
        .rope_base = 10000.0f, .seed = 5};
    CHECK(tl_synth_write(&sp, path) == TL_OK);
    struct stat sb;
    CHECK(stat(path, &sb) == 0);
    const uint64_t budget = (uint64_t)sb.st_size / 4;
    tl_model_params mp = tl_model_default_params();
    mp.mem_budget = budget;
    mp.n_threads = 2;
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = 128;
    cp.n_batch = 16;
    tl_model *m = NULL;
    tl_context *c = NULL;
    tl_status st = tl_model_open(path, &mp, &m);
    if (!st) st = tl_context_open(m, &cp, &c);
    CHECK_MSG(st == TL_OK, "%s", tl_last_error());
    tl_generate_params gp = tl_generate_default_params();
    gp.n_predict = 6;
    gp.sampler.temperature = 0;
    tl_generate_stats gs;
    if (!st) st = tl_generate(c, "the quick brown fox jumps over the lazy dog", &gp, NULL, NULL, &gs);
    CHECK_MSG(st == TL_OK, "%s", tl_last_error());
    tl_run_stats rs = {0};
    if (c) tl_context_get_stats(c, &rs);
    long hwm = vm_kib("VmHWM:");
    double limit_mib = budget / 1048576.0 + 64.0;
    printf("model %.1f MiB, budget %.1f MiB (engine peak %.1f MiB), streamed %.1f MiB per pass; "
           "VmHWM %.1f MiB, limit %.1f MiB\n", sb.st_size / 1048576.0, budget / 1048576.0,
           rs.budget_peak_bytes / 1048576.0, rs.weights_streamed_bytes / 1048576.0,
           hwm / 1024.0, limit_mib);
    CHECK(rs.weights_streamed_bytes > 0 && gs.n_generated == 6);
    CHECK(rs.budget_peak_bytes <= budget);
    CHECK_MSG(hwm > 0 && hwm / 1024.0 <= limit_mib, "VmHWM %.1f MiB exceeds %.1f MiB",
              hwm / 1024.0, limit_mib);
    tl_context_close(c);
    tl_model_close(m);
    unlink(path);
    rmdir(dir);
    return tl_test_finish("test_vmhwm");
}
