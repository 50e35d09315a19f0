/* json.c - see json.h. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"

typedef struct cur { const char *s; size_t i; char *err; size_t err_len; } cur;

static int fail(cur *c, const char *what) {
    snprintf(c->err, c->err_len, "%s at column %zu", what, c->i + 1);
    return -1;
}

static void ws(cur *c) {
    while (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\r' || c->s[c->i] == '\n')
        c->i++;
}

static int hex4(cur *c, unsigned *out) {
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        char h = c->s[c->i++];
        v <<= 4;
        if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
        else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
        else return fail(c, "bad \\u escape");
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* Parses a string at c->i (on the opening quote) into a new allocation. */
static int parse_string(cur *c, char **out) {
    size_t start = ++c->i, cap = 16;
    (void)start;
    char *o = malloc(cap);
    size_t n = 0;
    if (!o) return fail(c, "out of memory");
    for (;;) {
        if (n + 8 > cap) {
            char *p = realloc(o, cap *= 2);
            if (!p) { free(o); return fail(c, "out of memory"); }
            o = p;
        }
        unsigned char ch = (unsigned char)c->s[c->i];
        if (ch == 0) { free(o); return fail(c, "unterminated string"); }
        if (ch < 0x20) { free(o); return fail(c, "control character in string"); }
        c->i++;
        if (ch == '"') break;
        if (ch != '\\') { o[n++] = (char)ch; continue; }
        char e = c->s[c->i++];
        switch (e) {
        case '"': o[n++] = '"'; break;
        case '\\': o[n++] = '\\'; break;
        case '/': o[n++] = '/'; break;
        case 'b': o[n++] = '\b'; break;
        case 'f': o[n++] = '\f'; break;
        case 'n': o[n++] = '\n'; break;
        case 'r': o[n++] = '\r'; break;
        case 't': o[n++] = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (hex4(c, &cp)) { free(o); return -1; }
            if (cp >= 0xd800 && cp < 0xdc00 && c->s[c->i] == '\\' && c->s[c->i + 1] == 'u') {
                c->i += 2;
                if (hex4(c, &lo)) { free(o); return -1; }
                if (lo >= 0xdc00 && lo < 0xe000) cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                else cp = 0xfffd;
            } else if (cp >= 0xd800 && cp < 0xe000) {
                cp = 0xfffd; /* lone surrogate */
            }
            n += put_utf8(o + n, cp);
            break;
        }
        default: free(o); return fail(c, "bad escape");
        }
    }
    o[n] = 0;
    *out = o;
    return 0;
}

/* Skips any value (for nested objects/arrays we do not use). */
static int skip_value(cur *c, int depth) {
    ws(c);
    char ch = c->s[c->i];
    if (depth > 64) return fail(c, "nesting too deep");
    if (ch == '"') {
        char *tmp;
        if (parse_string(c, &tmp)) return -1;
        free(tmp);
        return 0;
    }
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        c->i++;
        ws(c);
        if (c->s[c->i] == close) { c->i++; return 0; }
        for (;;) {
            if (ch == '{') {
                ws(c);
                if (c->s[c->i] != '"') return fail(c, "expected a key");
                if (skip_value(c, depth + 1)) return -1;
                ws(c);
                if (c->s[c->i++] != ':') return fail(c, "expected ':'");
            }
            if (skip_value(c, depth + 1)) return -1;
            ws(c);
            if (c->s[c->i] == ',') { c->i++; continue; }
            if (c->s[c->i] == close) { c->i++; return 0; }
            return fail(c, "expected ',' or a closing bracket");
        }
    }
    size_t start = c->i;
    while (c->s[c->i] && strchr("+-.0123456789eEtruefalsn", c->s[c->i])) c->i++;
    return c->i > start ? 0 : fail(c, "expected a value");
}

int json_parse_object(const char *line, json_field *f, int cap, char *err, size_t err_len) {
    cur c = {line, 0, err, err_len};
    int n = 0;
    ws(&c);
    if (c.s[c.i++] != '{') return fail(&c, "expected '{'");
    ws(&c);
    if (c.s[c.i] == '}') { c.i++; goto end; }
    for (;;) {
        ws(&c);
        if (c.s[c.i] != '"') { json_free(f, n); return fail(&c, "expected a key"); }
        char *key;
        if (parse_string(&c, &key)) { json_free(f, n); return -1; }
        ws(&c);
        if (c.s[c.i++] != ':') { free(key); json_free(f, n); return fail(&c, "expected ':'"); }
        ws(&c);
        size_t vstart = c.i;
        char *val = NULL;
        int is_string = c.s[c.i] == '"';
        int rc = is_string ? parse_string(&c, &val) : skip_value(&c, 0);
        if (rc) { free(key); json_free(f, n); return -1; }
        if (!is_string && c.s[vstart] != '{' && c.s[vstart] != '[') {
            val = strndup(c.s + vstart, c.i - vstart);
            if (!val) { free(key); json_free(f, n); return fail(&c, "out of memory"); }
        }
        if (val && n < cap && strlen(key) < sizeof f[n].key) {
            strcpy(f[n].key, key);
            f[n].value = val;
            f[n].is_string = is_string;
            n++;
        } else {
            free(val);
        }
        free(key);
        ws(&c);
        if (c.s[c.i] == ',') { c.i++; continue; }
        if (c.s[c.i] == '}') { c.i++; break; }
        json_free(f, n);
        return fail(&c, "expected ',' or '}'");
    }
end:
    ws(&c);
    if (c.s[c.i]) { json_free(f, n); return fail(&c, "trailing characters after the object"); }
    return n;
}

void json_free(json_field *f, int n) {
    for (int i = 0; i < n; i++) free(f[i].value);
}

const json_field *json_get(const json_field *f, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(f[i].key, key)) return &f[i];
    return NULL;
}

void json_write_string(FILE *out, const char *s, size_t len) {
    fputc('"', out);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (ch < 0x20) fprintf(out, "\\u%04x", ch);
            else fputc(ch, out);
        }
    }
    fputc('"', out);
}
