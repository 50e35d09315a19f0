/* json.h - the project's one JSON library, Jansson, behind a small strict wrapper.
 *
 * Reading is strict: a document is exactly one value (an object unless TL_JSON_ANY is
 * asked for), with no trailing text, no duplicate keys, no NUL character in a string
 * (Jansson rejects "\u0000" unless asked not to) and valid UTF-8; numbers that
 * overflow are errors. Errors carry the column (and line) Jansson reports.
 * Writing goes through Jansson too, so every string we emit is escaped one way.
 * Callers hold json_t references and release them with json_decref.
 */
#ifndef TL_BASE_JSON_H
#define TL_BASE_JSON_H

#include <jansson.h>
#include <stddef.h>
#include "tierllm.h"

enum { TL_JSON_ANY = 1 }; /* accept any value at the top, not only an object */

/* Parses buf[0..len). On error returns TL_ERR_FORMAT with "column N: what" in err and
 * *out = NULL; the caller adds the file and line. */
tl_status tl_json_parse(const char *buf, size_t len, int flags, json_t **out, char *err,
                        size_t err_len);
/* The same, also giving the 1-based line of an error in *err_line (for a file whose
 * lines mean something, like the profile's one field per line). */
tl_status tl_json_parse_at(const char *buf, size_t len, int flags, json_t **out, char *err,
                           size_t err_len, int *err_line);

/* The canonical text of a value: compact, keys in insertion order, numbers as Jansson
 * prints them (integers plainly, reals with the shortest round-trip form). Two values
 * that parse equal give the same text. Returns a malloc'd string, or NULL when out of
 * memory. */
char *tl_json_canonical(const json_t *v);

/* One line of JSONL: the value without newlines (", " and ": " separators), then '\n'.
 * Returns a malloc'd string (length in *len), or NULL when out of memory or when a string
 * inside is not valid UTF-8. */
char *tl_json_line(const json_t *v, size_t *len);

#endif
