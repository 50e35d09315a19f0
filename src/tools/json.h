/* json.h - the little JSON the batch command needs: reading one flat object per line
 * (string, number, true/false/null values; nested values are skipped) and writing
 * escaped strings. Strict: malformed input is an error with the column, never a crash. */
#ifndef TL_TOOLS_JSON_H
#define TL_TOOLS_JSON_H

#include <stddef.h>
#include <stdio.h>

typedef struct json_field {
    char key[64];
    char *value;   /* decoded string, or the raw text of a number/literal */
    int is_string;
} json_field;

/* Parses `line` as one object; fills up to cap fields (owned: free with json_free).
 * Returns the number of fields, or -1 with a message in err. */
int json_parse_object(const char *line, json_field *fields, int cap, char *err, size_t err_len);
void json_free(json_field *fields, int n);
const json_field *json_get(const json_field *fields, int n, const char *key);

/* Writes s (len bytes of UTF-8) as a JSON string literal with escapes. */
void json_write_string(FILE *f, const char *s, size_t len);

#endif
