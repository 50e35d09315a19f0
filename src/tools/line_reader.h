/* line_reader.h - reading a file line by line with a cap on a line's length, for the
 * JSONL files of `tierllm batch`. read() in chunks: a file with no newline (/dev/zero)
 * stops at the cap instead of taking all memory, and a read error is an error, never
 * the end of the file. */
#ifndef TL_TOOLS_LINE_READER_H
#define TL_TOOLS_LINE_READER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Called for each line: text[0..len) without its newline, its 1-based number, its byte
 * offset in the file, and whether a newline ended it (only the last line may lack one).
 * Returns 0 to go on, -1 to stop with a message already in err. */
typedef int (*line_fn)(void *user, const char *text, size_t len, int32_t line_no,
                       off_t offset, int terminated, char *err, size_t err_len);

/* Reads fd from its current position to the end. Returns 0, or -1 with the message in err
 * (naming path) for a read error, a line over max_line bytes, or the callback's error. */
int line_reader_run(int fd, const char *path, size_t max_line, line_fn fn, void *user,
                    char *err, size_t err_len);

#endif
