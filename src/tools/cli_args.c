/* cli_args.c - strict parsing of numeric flags (the whole value must parse). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include "tools/cli.h"

int cli_int(const char *flag, const char *s, long lo, long hi, int32_t *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "error: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, s);
        return 0;
    }
    *out = (int32_t)v;
    return 1;
}

int cli_float(const char *flag, const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "error: %s expects a number, got '%s'\n", flag, s);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_share(const char *flag, const char *s, float *out) {
    float v;
    if (!cli_float(flag, s, &v)) return 0;
    if (!(v >= 0 && v <= 1)) {
        fprintf(stderr, "error: %s expects a share in [0, 1], not %s\n", flag, s);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_sparsity(const char *flag, const char *s, float *out) {
    float v;
    if (!cli_float(flag, s, &v)) return 0;
    if (!(v >= 0 && v < 1)) {
        fprintf(stderr, "error: %s expects a sparsity in [0, 1), not %s\n", flag, s);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_size_i64(const char *flag, const char *s, int64_t *out) {
    uint64_t bytes;
    if (!cli_size(flag, s, &bytes)) return 0;
    *out = (int64_t)(bytes > INT64_MAX ? INT64_MAX : bytes);
    return 1;
}

int cli_u64(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') end = (char *)s;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-') {
        fprintf(stderr, "error: %s expects a non-negative integer, got '%s'\n", flag, s);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_size(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mul = 1;
    if (!strcasecmp(end, "k") || !strcasecmp(end, "kib") || !strcasecmp(end, "kb")) mul = 1024.0;
    else if (!strcasecmp(end, "m") || !strcasecmp(end, "mib") || !strcasecmp(end, "mb")) mul = 1048576.0;
    else if (!strcasecmp(end, "g") || !strcasecmp(end, "gib") || !strcasecmp(end, "gb")) mul = 1073741824.0;
    else if (!strcasecmp(end, "t") || !strcasecmp(end, "tib") || !strcasecmp(end, "tb")) mul = 1099511627776.0;
    else if (*end) mul = -1;
    if (errno || end == s || mul < 0 || !(v >= 0) || v * mul > 1.8e19) {
        fprintf(stderr, "error: %s expects a size such as 512M or 2G, got '%s'\n", flag, s);
        return 0;
    }
    *out = (uint64_t)(v * mul);
    return 1;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "error: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_fail(tl_status st) {
    const char *msg = tl_last_error();
    fprintf(stderr, "error: %s\n", msg && *msg ? msg : tl_status_str(st));
    return 1;
}

int cli_io_backend(const char *flag, const char *s, int32_t *out) {
    if (!strcmp(s, "auto")) *out = TL_IO_AUTO;
    else if (!strcmp(s, "pool")) *out = TL_IO_POOL;
    else if (!strcmp(s, "uring")) *out = TL_IO_URING;
    else {
        fprintf(stderr, "error: %s expects auto, pool or uring, got '%s'\n", flag, s);
        return 0;
    }
    return 1;
}

char *cli_read_text_file(const char *what, const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "error: cannot open %s %s: %s\n", what, path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    const char *why = buf ? NULL : "out of memory";
    while (!why) {
        if (len == cap - 1) { /* full: grow, at most to the limit and its terminator */
            size_t ncap = cap * 2 > CLI_PROMPT_FILE_MAX + 2 ? CLI_PROMPT_FILE_MAX + 2 : cap * 2;
            char *nb = ncap > cap ? realloc(buf, ncap) : NULL;
            if (!nb) {
                why = "out of memory";
                break;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            why = strerror(errno);
            break;
        }
        if (r == 0) break;
        len += (size_t)r;
        if (len > CLI_PROMPT_FILE_MAX) {
            fprintf(stderr, "error: %s %s is larger than the limit of %zu MiB\n", what, path,
                    CLI_PROMPT_FILE_MAX >> 20);
            close(fd);
            free(buf);
            return NULL;
        }
    }
    close(fd);
    if (why) {
        fprintf(stderr, "error: cannot read %s %s: %s\n", what, path, why);
        free(buf);
        return NULL;
    }
    if (memchr(buf, 0, len)) {
        fprintf(stderr, "error: %s %s contains a NUL byte at offset %zu (it must be "
                "text)\n", what, path, (size_t)((char *)memchr(buf, 0, len) - buf));
        free(buf);
        return NULL;
    }
    buf[len] = 0;
    return buf;
}
