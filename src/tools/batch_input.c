/* batch_input.c - see batch_input.h. Lines come from line_reader (capped, read errors
 * reported); each is parsed by Jansson through base/json. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "base/json.h"
#include "tools/batch_input.h"
#include "tools/line_reader.h"

int batch_line_parse(const char *text, size_t len, int32_t default_n_predict,
                     batch_line *out, char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    out->n_predict = default_n_predict;
    json_t *obj;
    if (tl_json_parse(text, len, 0, &obj, err, err_len)) return -1;
    json_t *id = json_object_get(obj, "id");
    if (id) {
        if (!json_is_string(id) && !json_is_number(id)) {
            snprintf(err, err_len, "\"id\" must be a string or a number");
            json_decref(obj);
            return -1;
        }
        if (!(out->id = tl_json_canonical(id))) {
            snprintf(err, err_len, "out of memory");
            json_decref(obj);
            return -1;
        }
    }
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        if (!out->error[0] && strcmp(key, "id") && strcmp(key, "prompt") &&
            strcmp(key, "n_predict"))
            snprintf(out->error, sizeof out->error, "unknown key \"%.64s\" (a line has id, "
                     "prompt and n_predict)", key);
    }
    json_t *np = json_object_get(obj, "n_predict");
    if (!out->error[0] && np) {
        json_int_t n = json_is_integer(np) ? json_integer_value(np) : -1;
        if (n < 0 || n > BATCH_MAX_N_PREDICT)
            snprintf(out->error, sizeof out->error, "\"n_predict\" must be an integer 0..%d",
                     (int)BATCH_MAX_N_PREDICT);
        else
            out->n_predict = (int32_t)n;
    }
    json_t *pr = json_object_get(obj, "prompt");
    if (!out->error[0] && !json_is_string(pr))
        snprintf(out->error, sizeof out->error, "%s",
                 pr ? "\"prompt\" must be a string" : "no \"prompt\"");
    if (!out->error[0] && !(out->prompt = strdup(json_string_value(pr)))) {
        snprintf(err, err_len, "out of memory");
        json_decref(obj);
        batch_line_free(out);
        return -1;
    }
    json_decref(obj);
    return 0;
}

void batch_line_free(batch_line *l) {
    free(l->id);
    free(l->prompt);
    memset(l, 0, sizeof *l);
}

void batch_input_free(batch_input *in) {
    for (int32_t i = 0; i < in->n; i++) batch_line_free(&in->line[i]);
    free(in->line);
    memset(in, 0, sizeof *in);
}

static int add_line(batch_input *in, const char *text, size_t len, int32_t line_no,
                    int32_t dflt, const char *path, char *err, size_t err_len) {
    size_t i = 0;
    while (i < len && strchr(" \t\r", text[i])) i++;
    if (i == len) return 0; /* blank */
    if (len > 0 && text[len - 1] == '\r') len--;
    if (in->n == in->cap) {
        int32_t cap = in->cap ? 2 * in->cap : 64;
        batch_line *l = realloc(in->line, (size_t)cap * sizeof *l);
        if (!l) { snprintf(err, err_len, "out of memory"); return -1; }
        in->line = l;
        in->cap = cap;
    }
    char e[256];
    if (batch_line_parse(text, len, dflt, &in->line[in->n], e, sizeof e)) {
        snprintf(err, err_len, "%s line %d: %s", path, (int)line_no, e);
        return -1;
    }
    in->line[in->n++].line_no = line_no;
    return 0;
}

static int cmp_id(const void *a, const void *b) {
    const batch_line *x = *(batch_line *const *)a, *y = *(batch_line *const *)b;
    return strcmp(x->id, y->id);
}

/* Under --resume ids are what finished work is matched by: each line has one, once. */
static int check_ids(const batch_input *in, const char *path, char *err, size_t err_len) {
    for (int32_t i = 0; i < in->n; i++)
        if (!in->line[i].id) {
            snprintf(err, err_len, "%s line %d: no \"id\" (--resume matches lines by id, so "
                     "every line needs one)", path, (int)in->line[i].line_no);
            return -1;
        }
    if (in->n < 2) return 0;
    batch_line **s = malloc((size_t)in->n * sizeof *s);
    if (!s) { snprintf(err, err_len, "out of memory"); return -1; }
    for (int32_t i = 0; i < in->n; i++) s[i] = &in->line[i];
    qsort(s, (size_t)in->n, sizeof *s, cmp_id);
    int rc = 0;
    for (int32_t i = 1; i < in->n && !rc; i++)
        if (!strcmp(s[i - 1]->id, s[i]->id)) {
            int a = s[i - 1]->line_no, b = s[i]->line_no;
            snprintf(err, err_len, "%s lines %d and %d have the same id %.200s (--resume "
                     "matches lines by id)", path, a < b ? a : b, a < b ? b : a, s[i]->id);
            rc = -1;
        }
    free(s);
    return rc;
}

typedef struct read_ctx {
    batch_input *in;
    int32_t dflt;
    const char *path;
} read_ctx;

static int on_line(void *user, const char *text, size_t len, int32_t line_no, off_t offset,
                   int terminated, char *err, size_t err_len) {
    (void)offset, (void)terminated;
    read_ctx *c = user;
    return add_line(c->in, text, len, line_no, c->dflt, c->path, err, err_len);
}

int batch_input_read(const char *path, int32_t dflt, int require_ids, batch_input *in,
                     char *err, size_t err_len) {
    memset(in, 0, sizeof *in);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_len, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    read_ctx c = {in, dflt, path};
    int rc = line_reader_run(fd, path, BATCH_MAX_LINE, on_line, &c, err, err_len);
    close(fd);
    if (!rc && in->n == 0) {
        snprintf(err, err_len, "%s has no prompts", path);
        rc = -1;
    }
    if (!rc && require_ids) rc = check_ids(in, path, err, err_len);
    if (rc) batch_input_free(in);
    return rc;
}
