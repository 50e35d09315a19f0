/* tokenizer.h - tokenizers built from GGUF metadata (tokenizer.ggml.*).
 *
 * Two models, chosen by tokenizer.ggml.model:
 *  - "llama": SentencePiece-style BPE over scores (llama.cpp's llm_tokenizer_spm):
 *    spaces become U+2581, a leading space is added, pieces merge by best score, and
 *    unknown bytes fall back to <0xXX> byte tokens. tokenizer.ggml.pre is ignored, as
 *    llama.cpp does.
 *  - "gpt2": byte-level BPE with the merges list, after the pre-tokenizer that
 *    tokenizer.ggml.pre names (pretokenize.h): "default", "gpt-2", "llama-bpe" (also
 *    "llama3", "llama-v3"), "qwen2", "deepseek-llm", "deepseek-coder", "falcon", "mpt",
 *    "starcoder", "refact". Without the key the GPT-2 rules apply, as they always did
 *    here (llama.cpp takes "default" then, with a warning). Any other value fails to
 *    load (TL_ERR_UNSUPPORTED, naming it) unless the caller passes
 *    TL_TOKENIZER_UNKNOWN_PRE_AS_DEFAULT.
 * Both reproduce llama.cpp's tokenizer test vectors exactly (tests/test_tokenizer.c).
 * Before the model runs, the text is cut around special tokens: user-defined ones
 * always, control and unknown ones (<s>, <|im_start|>, ...) only when the caller asks
 * (TL_ENCODE_PARSE_SPECIAL).
 * Detokenization returns each token's raw bytes; tl_utf8_stream turns a sequence of
 * pieces into complete UTF-8 characters.
 */
#ifndef TL_TEXT_TOKENIZER_H
#define TL_TEXT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"
#include "format/gguf.h"

typedef struct tl_tokenizer tl_tokenizer;

/* Options of tl_tokenizer_from_gguf_flags (a bit set). */
enum {
    /* An unknown tokenizer.ggml.pre gets llama.cpp's "default" rules instead of failing
     * (for a vocabulary whose pre-tokenizer is close enough; the split may differ). */
    TL_TOKENIZER_UNKNOWN_PRE_AS_DEFAULT = 1u
};

/* Builds a tokenizer from g's tokenizer.ggml.* keys (g may be freed afterwards).
 * TL_ERR_FORMAT names the malformed key; TL_ERR_UNSUPPORTED an unknown model or
 * pre-tokenizer. */
tl_status tl_tokenizer_from_gguf_flags(const tl_gguf *g, unsigned flags, tl_tokenizer **out);
/* tl_tokenizer_from_gguf_flags with no flags. */
tl_status tl_tokenizer_from_gguf(const tl_gguf *g, tl_tokenizer **out);
void tl_tokenizer_free(tl_tokenizer *tok);

int32_t tl_tokenizer_n_vocab(const tl_tokenizer *tok);
int32_t tl_tokenizer_bos(const tl_tokenizer *tok); /* -1 if none */
int32_t tl_tokenizer_eos(const tl_tokenizer *tok); /* -1 if none */
/* tokenizer.ggml.add_bos_token if present, else 1 for llama and for gpt2 with the
 * llama-bpe pre-tokenizer, 0 for other gpt2 vocabularies (llama.cpp's defaults). */
int tl_tokenizer_add_bos_default(const tl_tokenizer *tok);

/* Options of tl_tokenizer_encode_flags (a bit set). */
enum {
    TL_ENCODE_ADD_BOS = 1u, /* prepend BOS when the vocabulary has one */
    /* llama.cpp's parse_special: the text of a control or unknown token (<s>, </s>,
     * <|im_start|>, ...) in the input becomes that token. Off, such text is tokenized
     * as plain text, which is what a prompt from an untrusted user needs; user-defined
     * tokens are matched either way. */
    TL_ENCODE_PARSE_SPECIAL = 2u
};

/* Encodes UTF-8 text (invalid UTF-8 is encoded byte-wise, never rejected). Writes up
 * to cap ids; *n_out = the number the text needs. TL_ERR_INVALID if cap < *n_out. */
tl_status tl_tokenizer_encode_flags(const tl_tokenizer *tok, const char *text, size_t len,
                                    unsigned flags, int32_t *ids, size_t cap, size_t *n_out);
/* tl_tokenizer_encode_flags with TL_ENCODE_ADD_BOS if add_bos, no special parsing. */
tl_status tl_tokenizer_encode(const tl_tokenizer *tok, const char *text, size_t len,
                              int add_bos, int32_t *ids, size_t cap, size_t *n_out);

/* The bytes this token decodes to (U+2581 -> ' ', <0xXX> -> that byte, gpt2 byte
 * mapping undone, control tokens such as <s> -> empty). TL_ERR_INVALID if id is out
 * of range. */
tl_status tl_tokenizer_piece(const tl_tokenizer *tok, int32_t id, const char **bytes,
                             size_t *len);

/* Accumulates decoded bytes and releases only complete UTF-8 characters; an invalid
 * sequence is released as U+FFFD so the output is always valid UTF-8. Zero-initialize
 * before use ({0}). */
typedef struct tl_utf8_stream {
    unsigned char pending[4];
    size_t n_pending;
} tl_utf8_stream;

/* Appends `len` bytes; writes the complete characters to out and returns the number of
 * bytes written. Each invalid byte can become a 3-byte U+FFFD, so out needs room for
 * 3 * len + 3 bytes in the worst case (len + 3 if the bytes are valid UTF-8). */
size_t tl_utf8_stream_push(tl_utf8_stream *s, const char *bytes, size_t len, char *out);
/* Releases what is still pending (as U+FFFD if incomplete; out needs 3 bytes). */
size_t tl_utf8_stream_flush(tl_utf8_stream *s, char *out);

#endif
