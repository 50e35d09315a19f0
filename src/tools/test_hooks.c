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
#include "test_hooks.h"

void tl_test_hook_result_line(int fd, const char *line, size_t len) {
    static unsigned long long n_lines;
    const char *spec = getenv("TIERLLM_TEST_KILL");
    char kind[16];
    unsigned long long at;
    n_lines++;
    if (!spec || sscanf(spec, "%15[a-z]:%llu", kind, &at) != 2 || at != n_lines) return;
    if (!strcmp(kind, "midline") && write(fd, line, len / 2) < 0) perror("test hook");
    raise(SIGKILL);
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
