/* pretokenize.h - the pre-tokenizers of byte-level BPE vocabularies: the rules that cut
 * text into words before any merge, chosen by the GGUF key tokenizer.ggml.pre as
 * llama.cpp's LLAMA_VOCAB_PRE_TYPE_* are. Internal to src/text (tokenizer_bpe.c calls
 * it, tokenizer_load.c picks the rules, tests call it directly).
 */
#ifndef TL_TEXT_PRETOKENIZE_H
#define TL_TEXT_PRETOKENIZE_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"

/* One value per set of split rules; the names that select each are in pretokenize.c. */
typedef enum tl__pretok {
    TL_PRETOK_GPT2,           /* "gpt-2", "mpt" */
    TL_PRETOK_DEFAULT,        /* "default" */
    TL_PRETOK_LLAMA3,         /* "llama-bpe", "llama3", "llama-v3" */
    TL_PRETOK_QWEN2,          /* "qwen2" */
    TL_PRETOK_DEEPSEEK_LLM,   /* "deepseek-llm" */
    TL_PRETOK_DEEPSEEK_CODER, /* "deepseek-coder" */
    TL_PRETOK_FALCON,         /* "falcon" */
    TL_PRETOK_STARCODER,      /* "starcoder", "refact" */
    TL_PRETOK_COUNT
} tl__pretok;

/* The rules a tokenizer.ggml.pre value (name[0..len), not NUL-terminated) selects.
 * Returns 0 and sets *out, or -1 for a value it does not know. */
int tl__pretok_from_name(const char *name, size_t len, tl__pretok *out);

/* The canonical name of a set of rules ("gpt-2", "llama-bpe", ...). */
const char *tl__pretok_name(tl__pretok rules);

/* Cuts the code points cpts[0..n) into words by `rules`: writes the end (an exclusive
 * index into cpts) of each word, in order, to ends, which has room for n entries, and
 * their number to *n_words. Every word is non-empty and the last one ends at n; n == 0
 * gives no words. A byte that is not UTF-8 should be passed as U+FFFD, as llama.cpp
 * reads it. Time and memory are linear in n; TL_ERR_NOMEM if scratch memory fails. */
tl_status tl__pretokenize(tl__pretok rules, const uint32_t *cpts, size_t n, uint32_t *ends,
                          size_t *n_words);

#endif
