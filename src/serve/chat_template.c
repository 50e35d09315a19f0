/* chat_template.c - the five chat families rendered in C (see chat_template.h).
 *
 * Each renderer writes what the family's reference template writes for a conversation
 * ending in a user turn, plus the opening of the assistant's turn: Llama 2 and Mistral as
 * Meta's and Mistral's reference code (content stripped; Llama 2 opens every turn with
 * <s>, Mistral only the first), Llama 3 as its template (content trimmed), ChatML and
 * Zephyr verbatim. A system message goes where the family has a place for one (Llama 2's
 * <<SYS>> block, a header or role line); Mistral has none, so it is prefixed to the next
 * user message.
 */
#include "serve/chat_template.h"

#include <stdlib.h>
#include <string.h>
#include "base/status.h"

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void put_n(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void put(sbuf *b, const char *s) { put_n(b, s, strlen(s)); }

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The content without leading and trailing whitespace (Python's str.strip on ASCII space). */
static void put_stripped(sbuf *b, const char *s) {
    size_t n = strlen(s);
    while (n && is_space(*s)) s++, n--;
    while (n && is_space(s[n - 1])) n--;
    put_n(b, s, n);
}

tl_chat_kind tl_chat_detect(const char *t) {
    if (!t) return TL_CHAT_NONE;
    if (strstr(t, "<|im_start|>")) return TL_CHAT_CHATML;
    if (strstr(t, "<|start_header_id|>") && strstr(t, "<|end_header_id|>")) return TL_CHAT_LLAMA3;
    if (strstr(t, "[INST]")) return strstr(t, "<<SYS>>") ? TL_CHAT_LLAMA2 : TL_CHAT_MISTRAL;
    if (strstr(t, "<|user|>")) return TL_CHAT_ZEPHYR;
    return TL_CHAT_NONE;
}

static const char *const names[] = {"none", "llama2", "llama3", "chatml", "mistral", "zephyr"};

tl_chat_kind tl_chat_from_name(const char *name) {
    for (int k = TL_CHAT_LLAMA2; k <= TL_CHAT_ZEPHYR; k++)
        if (name && !strcmp(name, names[k])) return (tl_chat_kind)k;
    return TL_CHAT_NONE;
}

const char *tl_chat_name(tl_chat_kind k) {
    return k >= TL_CHAT_NONE && k <= TL_CHAT_ZEPHYR ? names[k] : "none";
}

const char *tl_chat_names(void) { return "llama2, llama3, chatml, mistral, zephyr"; }

const char *tl_chat_end_of_turn(tl_chat_kind k) {
    if (k == TL_CHAT_LLAMA3) return "<|eot_id|>";
    if (k == TL_CHAT_CHATML) return "<|im_end|>";
    return NULL;
}

enum { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_BAD };

static int role_of(const char *r) {
    if (!r) return ROLE_BAD;
    if (!strcmp(r, "system")) return ROLE_SYSTEM;
    if (!strcmp(r, "user")) return ROLE_USER;
    if (!strcmp(r, "assistant")) return ROLE_ASSISTANT;
    return ROLE_BAD;
}

/* Llama 2 (system in <<SYS>>): <s>[INST] user [/INST] answer </s><s>[INST] ...; Mistral
 * (no system block): <s>[INST] user [/INST] answer</s>[INST] ...; a system message opens
 * the next user turn. */
static void render_inst(sbuf *b, const tl_chat_msg *m, size_t n, int sys_block) {
    int open = 0; /* inside an [INST] turn that has not been closed */
    const char *pending_sys = NULL;
    const char *turn = "<s>[INST] "; /* Mistral writes BOS only once */
    for (size_t i = 0; i < n; i++) {
        int role = role_of(m[i].role);
        if (role == ROLE_SYSTEM) {
            pending_sys = m[i].content;
            continue;
        }
        if (role == ROLE_USER) {
            if (!open) put(b, turn);
            else put(b, "\n\n");
            if (!sys_block) turn = "[INST] ";
            open = 1;
            if (pending_sys) {
                if (sys_block) {
                    put(b, "<<SYS>>\n");
                    put_stripped(b, pending_sys);
                    put(b, "\n<</SYS>>\n\n");
                } else {
                    put_stripped(b, pending_sys);
                    put(b, "\n\n");
                }
                pending_sys = NULL;
            }
            put_stripped(b, m[i].content);
        } else { /* assistant */
            if (!open) put(b, turn);
            if (!sys_block) turn = "[INST] ";
            put(b, " [/INST] ");
            put_stripped(b, m[i].content);
            put(b, sys_block ? " </s>" : "</s>");
            open = 0;
        }
    }
    if (!open) put(b, turn);
    if (pending_sys) put_stripped(b, pending_sys);
    put(b, " [/INST]");
}

tl_status tl_chat_render(tl_chat_kind k, const tl_chat_msg *m, size_t n, char **out,
                         size_t *len, int *writes_bos) {
    *out = NULL;
    *len = 0;
    *writes_bos = 0;
    if (k <= TL_CHAT_NONE || k > TL_CHAT_ZEPHYR)
        return tl_error_set(TL_ERR_INVALID, "no chat template");
    for (size_t i = 0; i < n; i++)
        if (role_of(m[i].role) == ROLE_BAD || !m[i].content)
            return tl_error_set(TL_ERR_INVALID, "message %zu: role must be system, user or "
                                "assistant", i);
    sbuf b = {0};
    switch (k) {
    case TL_CHAT_LLAMA2:
    case TL_CHAT_MISTRAL:
        render_inst(&b, m, n, k == TL_CHAT_LLAMA2);
        *writes_bos = 1;
        break;
    case TL_CHAT_LLAMA3:
        put(&b, "<|begin_of_text|>");
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|start_header_id|>");
            put(&b, m[i].role);
            put(&b, "<|end_header_id|>\n\n");
            put_stripped(&b, m[i].content);
            put(&b, "<|eot_id|>");
        }
        put(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        *writes_bos = 1;
        break;
    case TL_CHAT_CHATML:
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|im_start|>");
            put(&b, m[i].role);
            put(&b, "\n");
            put(&b, m[i].content);
            put(&b, "<|im_end|>\n");
        }
        put(&b, "<|im_start|>assistant\n");
        break;
    case TL_CHAT_ZEPHYR:
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|");
            put(&b, m[i].role);
            put(&b, "|>\n");
            put(&b, m[i].content);
            put(&b, "</s>\n");
        }
        put(&b, "<|assistant|>\n");
        break;
    default:
        break;
    }
    if (b.oom || !b.p) {
        free(b.p);
        return tl_error_set(TL_ERR_NOMEM, "out of memory rendering the chat");
    }
    *out = b.p;
    *len = b.len;
    return TL_OK;
}
