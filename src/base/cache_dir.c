/* cache_dir.c - see cache_dir.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "base/cache_dir.h"

tl_status tl_cache_dir(char *out, size_t cap) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && *xdg) n = snprintf(out, cap, "%s/tierllm", xdg);
    else if (home && *home) n = snprintf(out, cap, "%s/.cache/tierllm", home);
    else return tl_error_set(TL_ERR_INVALID, "no cache directory: neither XDG_CACHE_HOME nor HOME is set");
    if (n < 0 || (size_t)n >= cap) return tl_error_set(TL_ERR_INVALID, "cache directory path too long");
    return TL_OK;
}

const char *tl_scratch_dir(const char *chosen) {
    if (chosen && *chosen) return chosen;
    const char *tmp = getenv("TMPDIR");
    return tmp && *tmp ? tmp : "/tmp";
}

tl_status tl_make_dirs(const char *dir) {
    char buf[1024];
    size_t n = strlen(dir);
    if (n == 0) return TL_OK;
    if (n >= sizeof buf)
        return tl_error_set(TL_ERR_INVALID, "directory name too long: %s", dir);
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0) continue;
        char c = buf[i];
        buf[i] = 0;
        struct stat sb;
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return tl_error_set(TL_ERR_IO, "create directory %s: %s", buf, strerror(errno));
        if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
            return tl_error_set(TL_ERR_IO, "%s is not a directory", buf);
        buf[i] = c;
    }
    return TL_OK;
}
