/* json.c - see json.h. Jansson does the parsing and encoding; this file fixes the flags
 * that make it strict and the forms our outputs take. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "base/json.h"

tl_status tl_json_parse(const char *buf, size_t len, int flags, json_t **out, char *err,
                        size_t err_len) {
    int line;
    return tl_json_parse_at(buf, len, flags, out, err, err_len, &line);
}

tl_status tl_json_parse_at(const char *buf, size_t len, int flags, json_t **out, char *err,
                           size_t err_len, int *err_line) {
    json_error_t e;
    *out = NULL;
    *err_line = 0;
    /* without JSON_ALLOW_NUL, Jansson refuses "\u0000" in strings */
    size_t jflags = JSON_REJECT_DUPLICATES;
    if (flags & TL_JSON_ANY) jflags |= JSON_DECODE_ANY;
    json_t *v = json_loadb(buf, len, jflags, &e);
    if (!v) {
        *err_line = e.line;
        if (e.line > 1)
            snprintf(err, err_len, "line %d, column %d: %s", e.line, e.column, e.text);
        else
            snprintf(err, err_len, "column %d: %s", e.column, e.text);
        return TL_ERR_FORMAT;
    }
    if (!(flags & TL_JSON_ANY) && !json_is_object(v)) {
        json_decref(v);
        snprintf(err, err_len, "column 1: expected a JSON object");
        *err_line = 1;
        return TL_ERR_FORMAT;
    }
    *out = v;
    return TL_OK;
}

char *tl_json_canonical(const json_t *v) {
    return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_PRESERVE_ORDER);
}

char *tl_json_line(const json_t *v, size_t *len) {
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
    if (!s) return NULL;
    size_t n = strlen(s);
    char *line = realloc(s, n + 2);
    if (!line) {
        free(s);
        return NULL;
    }
    line[n] = '\n';
    line[n + 1] = 0;
    *len = n + 1;
    return line;
}
