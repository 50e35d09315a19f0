/* cli.h - the tierllm command line: one file per subcommand, shared argument helpers.
 * Subcommands return the process exit code (0 ok, 1 error, 2 usage). */
#ifndef TL_TOOLS_CLI_H
#define TL_TOOLS_CLI_H

#include <stdint.h>
#include "tierllm.h"

int tl_cmd_run(int argc, char **argv);
int tl_cmd_info(int argc, char **argv);
int tl_cmd_synth(int argc, char **argv);
int tl_cmd_logits(int argc, char **argv);
int tl_cmd_batch(int argc, char **argv);
int tl_cmd_profile(int argc, char **argv);
int tl_cmd_plan(int argc, char **argv);
int tl_cmd_serve(int argc, char **argv);
int tl_cmd_convert(int argc, char **argv);
int tl_cmd_perplexity(int argc, char **argv);

/* The largest prompt file `run -f` reads (16 MiB: far beyond any context; a larger file,
 * or /dev/zero, is refused rather than read without end). */
#define CLI_PROMPT_FILE_MAX ((size_t)16 << 20)

/* A text file (a prompt, calibration or evaluation text) as a string, or NULL after
 * printing why, naming it `what`: it cannot be opened or read (a read error is an error,
 * not the end of the file), it is over CLI_PROMPT_FILE_MAX (read no further than that:
 * /dev/zero ends), or it holds a NUL byte (a C string would silently cut it there). */
char *cli_read_text_file(const char *what, const char *path);

/* Argument parsing helpers: each prints a message and returns 0 on a bad value. */
int cli_int(const char *flag, const char *s, long lo, long hi, int32_t *out);
int cli_float(const char *flag, const char *s, float *out);
int cli_u64(const char *flag, const char *s, uint64_t *out);
/* --io: "auto", "pool" or "uring" into a TL_IO_* value */
int cli_io_backend(const char *flag, const char *s, int32_t *out);
/* "2G", "512M", "1.5GiB", "4096" (bytes) */
int cli_size(const char *flag, const char *s, uint64_t *out);
/* A size as cli_size, capped at INT64_MAX (for int64_t fields such as kv_cache_bytes). */
int cli_size_i64(const char *flag, const char *s, int64_t *out);
/* A share in [0, 1] ("expects a share in [0, 1]" otherwise). */
int cli_share(const char *flag, const char *s, float *out);
/* An activation sparsity in [0, 1) (tl_model_params.sparsity). */
int cli_sparsity(const char *flag, const char *s, float *out);
#define CLI_SPARSITY_HELP \
    "  --sparsity S            activation sparsity of a file made by `tierllm convert`:\n" \
    "                          the share of each matrix's smallest inputs set to zero\n" \
    "                          (default: the file's; 0 = dense)\n" \
    "  --flash-gap SIZE        flash-layout files: needed runs this close are read as\n" \
    "                          one request, the gap with them (default 16K)\n" \
    "  --neuron-window K       flash files of ReLU models (stored by neuron): keep the\n" \
    "                          neurons of the last K tokens in memory, within the\n" \
    "                          budget (default: the planner's K; 0 = none)\n" \
    "  --no-predictor          ... compute every neuron, not the predicted ones\n"
/* Returns argv[*i + 1] and advances, or prints "flag needs a value" and returns NULL. */
const char *cli_value(int argc, char **argv, int *i);
/* Prints "error: <message>" for a failed status and returns 1. */
int cli_fail(tl_status st);

#endif
