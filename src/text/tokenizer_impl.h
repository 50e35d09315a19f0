/* tokenizer_impl.h - internals shared by the tokenizer files: the tl_tokenizer struct
 * (filled by tokenizer_load.c), the id list and model encoders tokenizer.c calls
 * (tokenizer_spm.c, tokenizer_bpe.c), and the merge heap both encoders use
 * (bigram_heap.c). Not part of the API.
 */
#ifndef TL_TEXT_TOKENIZER_IMPL_H
#define TL_TEXT_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include "text/pretokenize.h"
#include "text/strmap.h"
#include "text/tokenizer.h"

/* tokenizer.ggml.token_type values (llama.cpp's llama_token_type). */
enum {
    TL_TOKTYPE_UNDEFINED = 0, TL_TOKTYPE_NORMAL = 1, TL_TOKTYPE_UNKNOWN = 2,
    TL_TOKTYPE_CONTROL = 3, TL_TOKTYPE_USER_DEFINED = 4, TL_TOKTYPE_UNUSED = 5,
    TL_TOKTYPE_BYTE = 6
};

typedef enum tl_tok_kind { TL_TOK_SPM, TL_TOK_BPE } tl_tok_kind;

/* A token whose text is cut out of the prompt before the model runs (llama.cpp's
 * cache_special_tokens): USER_DEFINED ones always, CONTROL and UNKNOWN ones only when
 * the caller asks (parse_special). rstrip drops the ASCII whitespace after a match
 * (llama.cpp's LLAMA_TOKEN_ATTR_RSTRIP, which it sets for phi-3; its LSTRIP is set only
 * for jina-v2 vocabularies, which have no pre-tokenizer here). */
typedef struct tl__special {
    int32_t id;
    uint32_t len; /* of its text */
    unsigned char always, rstrip;
} tl__special;

struct tl_tokenizer {
    tl_tok_kind kind;
    int32_t n_vocab;
    int32_t bos, eos, unk;
    int add_bos;
    int add_space_prefix; /* spm only */
    tl__pretok pre;       /* bpe only: the pre-tokenizer (tokenizer.ggml.pre) */
    int ignore_merges;    /* bpe only: a word that is a token is not merged (Llama 3) */

    /* token i's text is text_pool[text_off[i] .. + text_len[i]] */
    char *text_pool;
    uint64_t *text_off;
    uint32_t *text_len;
    /* token i's decoded piece */
    char *piece_pool;
    uint64_t *piece_off;
    uint32_t *piece_len;

    float *scores;  /* n_vocab; zeros if the file has none */
    int32_t *types; /* n_vocab; TL_TOKTYPE_* */

    tl__strmap vocab;  /* token text -> id; a later duplicate wins, as in llama.cpp */
    tl__strmap merges; /* bpe: "left right" -> rank; the first duplicate wins */
    char *merge_pool;

    int32_t byte_token[256]; /* spm: id of <0xXX>, or -1 */

    /* longest text first (ties: lower id), as llama.cpp's tokenizer_st_partition
     * tries them */
    tl__special *specials;
    size_t n_special;
};

/* A growable id list (tokenizer.c). */
typedef struct tl__ids {
    int32_t *v;
    size_t n, cap;
} tl__ids;

tl_status tl__ids_push(tl__ids *ids, int32_t id);

/* Model-specific encoders: append the ids for text[0..len) (no BOS) to out. spm
 * prepends a space when `prefix`. */
tl_status tl__spm_encode(const tl_tokenizer *tok, const char *text, size_t len, int prefix,
                         tl__ids *out);
tl_status tl__bpe_encode(const tl_tokenizer *tok, const char *text, size_t len, tl__ids *out);

/* GPT-2 byte alphabet: the code point byte b is written as, and the inverse (-1 for a
 * code point that stands for no byte). */
uint32_t tl__bpe_byte_to_cpt(unsigned char b);
int tl__bpe_cpt_to_byte(uint32_t cpt);

/* A candidate merge of symbols left and right; both tokenizers merge the best first.
 * The heap pops the smallest key first (SPM: -score; BPE: merge rank, exact in a float
 * below 2^24), ties by the leftmost position, as llama.cpp does. */
typedef struct tl__bigram {
    float key;
    int32_t left, right;
    uint32_t size; /* combined length when queued, to detect stale entries */
} tl__bigram;

typedef struct tl__bigram_heap {
    tl__bigram *v;
    size_t n, cap;
} tl__bigram_heap;

/* bigram_heap.c */
tl_status tl__bigram_push(tl__bigram_heap *h, tl__bigram bg);
tl__bigram tl__bigram_pop(tl__bigram_heap *h); /* h->n must be > 0 */

#endif
