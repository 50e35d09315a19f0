/* openai.h - the OpenAI API's JSON shapes: requests of /v1/completions and
 * /v1/chat/completions checked and turned into generation requests, and the responses,
 * stream chunks, model list and errors written, all through Jansson (base/json.h).
 *
 * A request is checked whole before anything runs: every known field must have its
 * OpenAI type and range (fields this server does not know are ignored, as OpenAI's
 * clients send many), the prompt must fit the context, and options this server cannot
 * honour (n > 1, echo, logprobs, penalties other than 0) are refused by name rather than
 * silently ignored. Errors come back in OpenAI's shape with the HTTP status to send.
 */
#ifndef TL_SERVE_OPENAI_H
#define TL_SERVE_OPENAI_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "tierllm.h"
#include "base/json.h"
#include "serve/chat_template.h"
#include "serve/server.h"

typedef struct tl_oai {
    tl_model *m;
    const char *model_name; /* the name /v1/models lists and requests may give */
    int32_t n_ctx;          /* positions per request: prompt plus generated */
    int add_bos;            /* the tokenizer's default for plain prompts */
    tl_chat_kind chat;      /* TL_CHAT_NONE: chat requests are refused */
    int chat_from_model;    /* 1: recognised in the GGUF, 0: chosen by name */
    int32_t eot_token;      /* the chat family's end-of-turn token, or -1 */
    atomic_uint_fast64_t counter; /* request ids and default seeds */
    int64_t started;        /* unix time the server started (the model's "created") */
    size_t max_piece;       /* the longest token's text in bytes (>= 1) */
} tl_oai;

/* JSON values a request may hold (messages, stop strings and fields: far fewer). */
#define TL_OAI_MAX_VALUES 65536

/* Fills o for model m served with n_ctx positions. chat_name: --chat-template's value or
 * NULL to recognise the GGUF's tokenizer.chat_template. TL_ERR_INVALID for an unknown
 * name. */
tl_status tl_oai_init(tl_oai *o, tl_model *m, const char *model_name, int32_t n_ctx,
                      const char *chat_name);

typedef struct tl_oai_error {
    int status;        /* HTTP status */
    const char *type;  /* "invalid_request_error", ... */
    const char *code;  /* NULL or "model_not_found", "context_length_exceeded", ... */
    char param[32];    /* the field at fault, "" if none */
    char message[512];
} tl_oai_error;

/* Fills e (param may be NULL) and returns -1. */
int tl_oai_fail(tl_oai_error *e, int status, const char *type, const char *code,
                const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

typedef struct tl_oai_job {
    int chat, stream;
    int32_t *prompt;        /* malloc'd; gen.prompt points here */
    tl_server_gen gen;      /* stop strings point into root */
    json_t *root;           /* the parsed request */
    char id[48];
    int64_t created;
} tl_oai_job;

/* Parses and checks a request body; on success job holds everything a submit needs and
 * must be freed with tl_oai_job_free. Returns 0, or -1 with e filled. */
int tl_oai_parse(tl_oai *o, int chat, const char *body, size_t len, tl_oai_job *job,
                 tl_oai_error *e);
void tl_oai_job_free(tl_oai_job *job);
/* Frees the parsed request tree once it has been submitted (tl_server_submit copies the
 * stop strings): what the response needs stays. */
void tl_oai_job_drop_tree(tl_oai_job *job);

/* Writers: each returns a malloc'd string (*len bytes) or NULL when out of memory. */
char *tl_oai_error_body(const tl_oai_error *e, size_t *len);
/* The whole (non-streamed) response for text[0..n) and how the request ended. */
char *tl_oai_response(const tl_oai *o, const tl_oai_job *job, const char *text, size_t n,
                      const tl_server_status *st, size_t *len);
/* One server-sent event "data: {...}\n\n": a chunk of text (first: the chat's role is
 * announced), or with end set the last chunk, with finish_reason and usage, followed by
 * "data: [DONE]\n\n". */
char *tl_oai_chunk(const tl_oai *o, const tl_oai_job *job, const char *text, size_t n,
                   int first, const tl_server_status *end, size_t *len);
/* The event sent instead when a streamed request fails, then "data: [DONE]\n\n". */
char *tl_oai_stream_error(const tl_oai_error *e, size_t *len);
/* GET /v1/models */
char *tl_oai_models(const tl_oai *o, size_t *len);

#endif
