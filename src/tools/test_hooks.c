/* test_hooks.c - see test_hooks.h. Only in the test build of the CLI. */
#ifndef TL_TEST_HOOKS
#error "test_hooks.c belongs to the test build of the CLI only"
#endif
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tools/test_hooks.h"

/* 1 when the variable names this (1-based) call as "kind:N"; kind is copied out. */
static int hook_at(const char *var, unsigned long long call, char kind[16]) {
    const char *spec = getenv(var);
    unsigned long long at;
    return spec && sscanf(spec, "%15[a-z]:%llu", kind, &at) == 2 && at == call;
}

int tl_test_hook_result_line(int fd, const char *line, size_t len, size_t *written) {
    static unsigned long long n_lines;
    char kind[16];
    *written = 0;
    n_lines++;
    if (hook_at("TIERLLM_TEST_OUTPUT_FAULT", n_lines, kind)) {
        ssize_t w = write(fd, line, len / 2);
        *written = w > 0 ? (size_t)w : 0;
        return strcmp(kind, "enospc") ? EIO : ENOSPC;
    }
    if (!hook_at("TIERLLM_TEST_KILL", n_lines, kind)) return 0;
    if (!strcmp(kind, "midline") && write(fd, line, len / 2) < 0) perror("test hook");
    raise(SIGKILL);
    return 0;
}

int tl_test_hook_spill_fault(tl_fault_spec *f) {
    const char *spec = getenv("TIERLLM_TEST_SPILL_FAULT");
    char kind[16];
    unsigned long long n;
    if (!spec || sscanf(spec, "%15[a-z]:%llu", kind, &n) != 2) return 0;
    memset(f, 0, sizeof *f);
    f->fail_call = n;
    f->sticky = 1;
    f->fail_errno = strcmp(kind, "enospc") ? EIO : ENOSPC;
    f->fail_writes_only = 1; /* writes are deterministic: each full disk page once */
    return 1;
}

void tl_test_hook_progress(unsigned long long generated_tokens) {
    static int raised;
    const char *spec = getenv("TIERLLM_TEST_SIGNAL");
    char kind[16];
    unsigned long long at;
    if (raised || !spec || sscanf(spec, "%15[a-z]:%llu", kind, &at) != 2 || generated_tokens < at)
        return;
    raised = 1;
    raise(strcmp(kind, "term") ? SIGINT : SIGTERM);
}
