/* chat_template.h - the chat formats a GGUF's tokenizer.chat_template may name, rendered in C.
 *
 * A chat template is Jinja in the file; instead of a Jinja interpreter, the server
 * recognises the common families by substrings only they contain (as llama.cpp does) and
 * renders each with fixed C code: Llama 2 ([INST] with <<SYS>>), Llama 3
 * (<|start_header_id|>), ChatML as Qwen2 uses it (<|im_start|>), Mistral ([INST] without
 * <<SYS>>), Zephyr (<|user|>). An unrecognised template renders nothing: the caller says
 * so and asks for --chat-template. The rendered text holds the family's special tokens as
 * text; it is meant to be tokenized with special-token parsing on.
 */
#ifndef TL_SERVE_CHAT_TEMPLATE_H
#define TL_SERVE_CHAT_TEMPLATE_H

#include <stddef.h>
#include "tierllm.h"

typedef enum tl_chat_kind {
    TL_CHAT_NONE = 0,
    TL_CHAT_LLAMA2,
    TL_CHAT_LLAMA3,
    TL_CHAT_CHATML,
    TL_CHAT_MISTRAL,
    TL_CHAT_ZEPHYR
} tl_chat_kind;

/* The family a template's text belongs to, TL_CHAT_NONE when none (or tmpl NULL). */
tl_chat_kind tl_chat_detect(const char *tmpl);
/* "llama2", "llama3", "chatml", "mistral", "zephyr" -> kind; TL_CHAT_NONE if unknown. */
tl_chat_kind tl_chat_from_name(const char *name);
/* The kind's name as --chat-template takes it ("none" for TL_CHAT_NONE). */
const char *tl_chat_name(tl_chat_kind k);
/* The names --chat-template accepts, for messages: "llama2, llama3, ...". */
const char *tl_chat_names(void);

typedef struct tl_chat_msg {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* UTF-8 text */
} tl_chat_msg;

/* Renders the conversation followed by the opening of the assistant's turn. *out is a
 * malloc'd NUL-terminated string (*len bytes). *writes_bos is 1 when the text starts with
 * the family's BOS token itself (the tokenizer must not add another). TL_ERR_INVALID for an
 * unknown role or TL_CHAT_NONE, TL_ERR_NOMEM. */
tl_status tl_chat_render(tl_chat_kind k, const tl_chat_msg *msgs, size_t n, char **out,
                         size_t *len, int *writes_bos);

/* The text of the token that ends an assistant turn in this family when it is not the
 * model's EOS ("<|eot_id|>", "<|im_end|>"), else NULL. */
const char *tl_chat_end_of_turn(tl_chat_kind k);

#endif
