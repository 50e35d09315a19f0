/* line_reader.c - see line_reader.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tools/line_reader.h"

int line_reader_run(int fd, const char *path, size_t max_line, line_fn fn, void *user,
                    char *err, size_t err_len) {
    enum { CHUNK = 64 << 10 };
    char *buf = malloc(CHUNK), *line = NULL;
    size_t line_len = 0, line_cap = 0;
    int32_t line_no = 0;
    off_t pos = 0, line_start = 0;
    int rc = 0;
    if (!buf) {
        snprintf(err, err_len, "out of memory");
        return -1;
    }
    for (;;) {
        ssize_t got = read(fd, buf, CHUNK);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            snprintf(err, err_len, "reading %s (after line %d): %s", path, (int)line_no,
                     strerror(errno));
            rc = -1;
        }
        if (got <= 0) break;
        for (size_t i = 0; i < (size_t)got && !rc;) {
            char *nl = memchr(buf + i, '\n', (size_t)got - i);
            size_t take = nl ? (size_t)(nl - (buf + i)) : (size_t)got - i;
            if (line_len + take > max_line) {
                snprintf(err, err_len, "%s line %d is longer than the limit of %zu MiB", path,
                         (int)line_no + 1, max_line >> 20);
                rc = -1;
                break;
            }
            if (line_len + take + 1 > line_cap) {
                size_t cap = line_cap ? line_cap : 4096;
                while (cap < line_len + take + 1) cap *= 2;
                char *l = realloc(line, cap);
                if (!l) {
                    snprintf(err, err_len, "out of memory");
                    rc = -1;
                    break;
                }
                line = l;
                line_cap = cap;
            }
            memcpy(line + line_len, buf + i, take);
            line_len += take;
            i += take;
            pos += (off_t)take;
            if (nl) {
                i++;
                pos++;
                line[line_len] = 0;
                rc = fn(user, line, line_len, ++line_no, line_start, 1, err, err_len);
                line_len = 0;
                line_start = pos;
            }
        }
        if (rc) break;
    }
    if (!rc && line_len > 0) {
        line[line_len] = 0;
        rc = fn(user, line, line_len, ++line_no, line_start, 0, err, err_len);
    }
    free(buf);
    free(line);
    return rc;
}
