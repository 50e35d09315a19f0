/* batch_input.h - the prompts of `tierllm batch`: a JSONL file read strictly.
 *
 * One JSON object per line: {"id": ..., "prompt": "...", "n_predict": N}. Blank lines
 * are skipped. What makes the whole input unusable is a fatal error naming the line, and
 * the run refuses to start: a line that is not one JSON object (syntax, trailing text,
 * duplicate keys, "\u0000" in a string, invalid UTF-8, an overflowing number), an id that
 * is not a string or a number, a line over BATCH_MAX_LINE bytes, a read error. What is
 * wrong with one prompt's parameters (no "prompt" string, a bad "n_predict", an unknown
 * key) is kept as that line's error: the prompt gets an error record in the output and
 * the rest of the batch runs.
 */
#ifndef TL_TOOLS_BATCH_INPUT_H
#define TL_TOOLS_BATCH_INPUT_H

#include <stddef.h>
#include <stdint.h>

enum { BATCH_MAX_LINE = 16 << 20 }; /* bytes of one input line, newline excluded */
enum { BATCH_MAX_N_PREDICT = 1 << 24 };

typedef struct batch_line {
    char *id;          /* canonical JSON text of "id", or NULL when the line has none */
    char *prompt;      /* NULL when error is set */
    int32_t n_predict;
    int32_t line_no;   /* 1-based line in the input file */
    char error[160];   /* this prompt's failure (a record, not a fatal error), or "" */
} batch_line;

typedef struct batch_input {
    batch_line *line;
    int32_t n, cap;
} batch_input;

/* Parses one line (len bytes, no newline). Returns 0 and fills *out (its error may be
 * set), or -1 with a fatal message in err. */
int batch_line_parse(const char *text, size_t len, int32_t default_n_predict,
                     batch_line *out, char *err, size_t err_len);
void batch_line_free(batch_line *l);

/* Reads every line of path. require_ids: each line needs an id and no two ids may be
 * equal (--resume matches ids). Returns 0, or -1 with the message in err (which names
 * the file and line). */
int batch_input_read(const char *path, int32_t default_n_predict, int require_ids,
                     batch_input *in, char *err, size_t err_len);
void batch_input_free(batch_input *in);

#endif
