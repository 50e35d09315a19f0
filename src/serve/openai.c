/* openai.c - requests checked into generation jobs, and responses written (openai.h).
 *
 * Checking order: the body must be a JSON object (strict: base/json.h refuses invalid
 * UTF-8, duplicate keys and NUL characters), then each field is checked by type, range
 * and support, then the prompt is rendered (chat) and tokenized, and its length checked
 * against the context; only a request that passes all of it reaches the server, so a
 * rejected one costs no engine time.
 */
#include "serve/openai.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "base/status.h"
#include "exec/model_handle.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

#define INVALID "invalid_request_error"

int tl_oai_fail(tl_oai_error *e, int status, const char *type, const char *code,
                const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    /* the message quotes request bytes (a path, a model name) cut at a byte count: keep
     * it valid UTF-8, or the JSON writer refuses it */
    size_t w = 0;
    for (size_t i = 0, n = strlen(e->message); i < n;) {
        uint32_t cpt;
        size_t len = tl_utf8_decode((const unsigned char *)e->message + i, n - i, &cpt);
        if (len == 0) {
            e->message[w++] = '?';
            i++;
            continue;
        }
        memmove(e->message + w, e->message + i, len);
        w += len, i += len;
    }
    e->message[w] = 0;
    return -1;
}

/* Token id of a special token's text when it is one token, else -1. */
static int32_t special_token(const tl_model *m, const char *text) {
    int32_t ids[4];
    size_t n = 0;
    if (tl_tokenizer_encode_flags(m->lm.tok, text, strlen(text), TL_ENCODE_PARSE_SPECIAL, ids,
                                  4, &n) || n != 1)
        return -1;
    return ids[0];
}

tl_status tl_oai_init(tl_oai *o, tl_model *m, const char *model_name, int32_t n_ctx,
                      const char *chat_name) {
    memset(o, 0, sizeof *o);
    o->m = m;
    o->model_name = model_name;
    o->n_ctx = n_ctx;
    o->add_bos = tl_tokenizer_add_bos_default(m->lm.tok);
    o->eot_token = -1;
    o->started = (int64_t)time(NULL);
    o->max_piece = 1;
    for (int32_t id = 0; id < m->lm.hp.n_vocab; id++) {
        const char *bytes;
        size_t len;
        if (tl_token_piece(m, id, &bytes, &len) == TL_OK && len > o->max_piece) o->max_piece = len;
    }
    atomic_init(&o->counter, (uint_fast64_t)o->started << 20);
    if (chat_name) {
        o->chat = tl_chat_from_name(chat_name);
        if (o->chat == TL_CHAT_NONE)
            return tl_error_set(TL_ERR_INVALID, "unknown chat template '%s' (one of: %s)",
                                chat_name, tl_chat_names());
    } else {
        const tl_gguf_str *t = NULL;
        if (tl_gguf_get_str(m->lm.gguf, "tokenizer.chat_template", &t) == TL_OK && t)
            o->chat = tl_chat_detect(t->s);
        tl_error_clear();
        o->chat_from_model = o->chat != TL_CHAT_NONE;
    }
    const char *eot = tl_chat_end_of_turn(o->chat);
    if (eot) o->eot_token = special_token(m, eot);
    return TL_OK;
}

void tl_oai_job_drop_tree(tl_oai_job *job) {
    if (job->root) json_decref(job->root);
    job->root = NULL;
    for (int32_t i = 0; i < job->gen.n_stop; i++) job->gen.stop[i] = NULL; /* they were in it */
    job->gen.n_stop = 0;
}

void tl_oai_job_free(tl_oai_job *job) {
    free(job->prompt);
    if (job->root) json_decref(job->root);
    memset(job, 0, sizeof *job);
}

/* ---- field checks: each returns 0, or -1 with e filled --------------------------------- */

static json_t *field(json_t *root, const char *key) {
    json_t *v = json_object_get(root, key);
    return v && !json_is_null(v) ? v : NULL;
}

static int get_number(json_t *root, const char *key, double lo, double hi, int lo_open,
                      double *out, tl_oai_error *e) {
    json_t *v = field(root, key);
    if (!v) return 0;
    if (!json_is_number(v))
        return tl_oai_fail(e, 400, INVALID, NULL, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo))
        return tl_oai_fail(e, 400, INVALID, NULL, key, "'%s' must be in %s%g, %g]", key,
                           lo_open ? "(" : "[", lo, hi);
    *out = x;
    return 0;
}

static int get_int(json_t *root, const char *key, long long lo, long long hi, long long *out,
                   tl_oai_error *e) {
    json_t *v = field(root, key);
    if (!v) return 0;
    if (!json_is_integer(v))
        return tl_oai_fail(e, 400, INVALID, NULL, key, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi)
        return tl_oai_fail(e, 400, INVALID, NULL, key, "'%s' must be in [%lld, %lld], not %lld",
                           key, lo, hi, x);
    *out = x;
    return 0;
}

static int get_bool(json_t *root, const char *key, int *out, tl_oai_error *e) {
    json_t *v = field(root, key);
    if (!v) return 0;
    if (!json_is_boolean(v))
        return tl_oai_fail(e, 400, INVALID, NULL, key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

static int check_type(json_t *root, const char *key, json_type type, const char *what,
                      tl_oai_error *e) {
    json_t *v = field(root, key);
    if (v && json_typeof(v) != type)
        return tl_oai_fail(e, 400, INVALID, NULL, key, "'%s' must be %s", key, what);
    return 0;
}

static int unsupported(tl_oai_error *e, const char *key, const char *why) {
    return tl_oai_fail(e, 400, INVALID, "unsupported", key, "'%s' is not supported: %s", key,
                       why);
}

/* The options this server does not implement: refused when set to anything but their
 * neutral value, so a client never gets silently different behaviour. */
static int check_unsupported(json_t *root, int chat, tl_oai_error *e) {
    long long n = 1;
    if (get_int(root, "n", 1, 128, &n, e)) return -1;
    if (n != 1) return unsupported(e, "n", "one choice per request (n = 1)");
    if (get_int(root, "best_of", 1, 128, &n, e)) return -1;
    if (n != 1) return unsupported(e, "best_of", "it must be 1");
    int flag = 0;
    if (get_bool(root, "echo", &flag, e)) return -1;
    if (flag) return unsupported(e, "echo", "the prompt is not echoed");
    json_t *lp = field(root, "logprobs");
    if (lp && chat && !json_is_boolean(lp))
        return tl_oai_fail(e, 400, INVALID, NULL, "logprobs", "'logprobs' must be true or false");
    if (lp && !chat && !json_is_integer(lp))
        return tl_oai_fail(e, 400, INVALID, NULL, "logprobs", "'logprobs' must be an integer");
    if (lp && !json_is_false(lp)) return unsupported(e, "logprobs", "no log probabilities");
    if (field(root, "top_logprobs")) return unsupported(e, "top_logprobs", "no log probabilities");
    if (check_type(root, "suffix", JSON_STRING, "a string", e)) return -1;
    json_t *suf = field(root, "suffix");
    if (suf && json_string_length(suf)) return unsupported(e, "suffix", "no insertion");
    static const char *const penalties[] = {"presence_penalty", "frequency_penalty"};
    for (int i = 0; i < 2; i++) {
        double p = 0;
        if (get_number(root, penalties[i], -2, 2, 0, &p, e)) return -1;
        if (p != 0) return unsupported(e, penalties[i], "use repeat_penalty");
    }
    if (check_type(root, "logit_bias", JSON_OBJECT, "an object", e)) return -1;
    json_t *lb = field(root, "logit_bias");
    if (lb && json_object_size(lb)) return unsupported(e, "logit_bias", "no logit biases");
    if (check_type(root, "user", JSON_STRING, "a string", e)) return -1;
    if (check_type(root, "stream_options", JSON_OBJECT, "an object", e)) return -1;
    json_t *so = field(root, "stream_options");
    if (so && get_bool(so, "include_usage", &flag, e)) return -1;
    if (chat) {
        if (check_type(root, "tools", JSON_ARRAY, "an array", e)) return -1;
        json_t *tools = field(root, "tools");
        if (tools && json_array_size(tools)) return unsupported(e, "tools", "no tool calls");
        json_t *rf = field(root, "response_format");
        if (rf && !json_is_object(rf))
            return tl_oai_fail(e, 400, INVALID, NULL, "response_format",
                               "'response_format' must be an object");
        json_t *rt = rf ? json_object_get(rf, "type") : NULL;
        if (rt && (!json_is_string(rt) || strcmp(json_string_value(rt), "text")))
            return unsupported(e, "response_format", "only {\"type\": \"text\"}");
    }
    return 0;
}

static int parse_stop(json_t *root, tl_server_gen *g, tl_oai_error *e) {
    json_t *v = field(root, "stop");
    if (!v) return 0;
    if (json_is_string(v)) {
        if (json_string_length(v)) g->stop[g->n_stop++] = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) > TL_SERVER_MAX_STOP)
        return tl_oai_fail(e, 400, INVALID, NULL, "stop", "'stop' must be a string or an "
                           "array of at most %d strings", TL_SERVER_MAX_STOP);
    size_t i;
    json_t *s;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s))
            return tl_oai_fail(e, 400, INVALID, NULL, "stop", "'stop' must be a string or an "
                               "array of at most %d strings", TL_SERVER_MAX_STOP);
        if (json_string_length(s)) g->stop[g->n_stop++] = json_string_value(s);
    }
    return 0;
}

static int parse_sampling(tl_oai *o, json_t *root, int chat, tl_server_gen *g, tl_oai_error *e) {
    tl_sampler_params sp = tl_sampler_default_params();
    double t = 1.0, top_p = 1.0, rp = 1.0;
    long long top_k = 0, seed, max_tokens = chat ? o->n_ctx : 16;
    seed = (long long)(atomic_fetch_add(&o->counter, 1) * 0x9E3779B97F4A7C15ull >> 1);
    if (get_number(root, "temperature", 0, 2, 0, &t, e) ||
        get_number(root, "top_p", 0, 1, 1, &top_p, e) ||
        get_int(root, "top_k", 0, 1 << 30, &top_k, e) ||
        get_number(root, "repeat_penalty", 0, 100, 1, &rp, e) ||
        get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, e))
        return -1;
    const char *mt = chat && field(root, "max_completion_tokens") ? "max_completion_tokens"
                                                                   : "max_tokens";
    json_t *mv = field(root, mt);
    if (mv && json_is_integer(mv) && json_integer_value(mv) > o->n_ctx)
        return tl_oai_fail(e, 400, INVALID, "context_length_exceeded", mt, "'%s' is %lld; the "
                           "context holds %d tokens", mt, (long long)json_integer_value(mv),
                           (int)o->n_ctx);
    if (get_int(root, mt, 1, o->n_ctx, &max_tokens, e)) return -1;
    sp.temperature = (float)t;
    sp.top_p = (float)top_p;
    sp.top_k = (int32_t)top_k;
    sp.repeat_penalty = (float)rp;
    sp.seed = (uint64_t)seed;
    if (tl_sampler_params_check(&sp))
        return tl_oai_fail(e, 400, INVALID, NULL, NULL, "%s", tl_last_error());
    g->sampler = sp;
    g->max_tokens = (int32_t)max_tokens;
    return 0;
}

/* A message's content: a string, or an array of {"type": "text", "text": ...} parts
 * (joined), or null (an assistant turn with nothing said). Returns a malloc'd string. */
static char *message_text(json_t *c, size_t i, tl_oai_error *e) {
    if (!c || json_is_null(c)) return strdup("");
    if (json_is_string(c)) return strndup(json_string_value(c), json_string_length(c));
    if (!json_is_array(c)) {
        tl_oai_fail(e, 400, INVALID, NULL, "messages", "messages[%zu].content must be a "
                    "string or an array of text parts", i);
        return NULL;
    }
    size_t total = 1, k;
    json_t *part;
    json_array_foreach(c, k, part) {
        json_t *ty = json_object_get(part, "type"), *tx = json_object_get(part, "text");
        if (!json_is_string(ty) || strcmp(json_string_value(ty), "text") || !json_is_string(tx)) {
            tl_oai_fail(e, 400, INVALID, NULL, "messages", "messages[%zu].content[%zu] must "
                        "be {\"type\": \"text\", \"text\": ...} (only text is supported)", i, k);
            return NULL;
        }
        total += json_string_length(tx);
    }
    char *s = malloc(total), *p = s;
    if (!s) return NULL;
    json_array_foreach(c, k, part) {
        json_t *tx = json_object_get(part, "text");
        memcpy(p, json_string_value(tx), json_string_length(tx));
        p += json_string_length(tx);
    }
    *p = 0;
    return s;
}

/* The chat rendered by the template (*flags: how to tokenize it). */
static char *render_chat(tl_oai *o, json_t *root, size_t *len, unsigned *flags,
                         tl_oai_error *e) {
    if (o->chat == TL_CHAT_NONE) {
        tl_oai_fail(e, 400, INVALID, "chat_template_missing", NULL, "the model has no chat "
                    "template this server recognises; restart it with --chat-template NAME "
                    "(one of: %s) to use /v1/chat/completions", tl_chat_names());
        return NULL;
    }
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs)) {
        tl_oai_fail(e, 400, INVALID, NULL, "messages", "'messages' must be a non-empty array");
        return NULL;
    }
    size_t n = json_array_size(msgs);
    tl_chat_msg *cm = calloc(n, sizeof *cm);
    char **texts = calloc(n, sizeof *texts);
    char *out = NULL;
    int ok = cm && texts;
    if (!ok) tl_oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; ok && i < n; i++) {
        json_t *m = json_array_get(msgs, i), *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role)) {
            ok = !tl_oai_fail(e, 400, INVALID, NULL, "messages", "messages[%zu] must be an "
                              "object with a string 'role'", i);
            break;
        }
        const char *r = json_string_value(role);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")) {
            ok = !tl_oai_fail(e, 400, INVALID, NULL, "messages", "messages[%zu].role '%.40s' "
                              "is not supported (system, user or assistant)", i, r);
            break;
        }
        if (!(texts[i] = message_text(json_object_get(m, "content"), i, e))) {
            if (!e->status) tl_oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
            ok = 0;
            break;
        }
        cm[i].role = r;
        cm[i].content = texts[i];
    }
    int writes_bos = 0;
    if (ok && tl_chat_render(o->chat, cm, n, &out, len, &writes_bos))
        tl_oai_fail(e, 500, "server_error", NULL, NULL, "%s", tl_last_error());
    for (size_t i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
    free(cm);
    *flags = TL_ENCODE_PARSE_SPECIAL | (!writes_bos && o->add_bos ? TL_ENCODE_ADD_BOS : 0u);
    return out;
}

static int tokenize(tl_oai *o, const char *text, size_t len, unsigned flags, tl_oai_job *job,
                    tl_oai_error *e) {
    const tl_tokenizer *tok = o->m->lm.tok;
    size_t n = 0;
    /* every token stands for at most max_piece bytes of the text: a text that long is over
     * the context without tokenizing it (tokenizing takes memory outside the budget in
     * proportion to the text) */
    if (len / o->max_piece >= (size_t)o->n_ctx)
        return tl_oai_fail(e, 400, INVALID, "context_length_exceeded", job->chat ? "messages"
                           : "prompt", "the prompt is at least %zu tokens; the context holds "
                           "%d (prompt plus at least one generated token)", len / o->max_piece,
                           (int)o->n_ctx);
    tl_status st = tl_tokenizer_encode_flags(tok, text, len, flags, NULL, 0, &n);
    if (st && st != TL_ERR_INVALID)
        return tl_oai_fail(e, 500, "server_error", NULL, NULL, "%s", tl_last_error());
    if (n == 0)
        return tl_oai_fail(e, 400, INVALID, NULL, "prompt", "the prompt is empty and the "
                           "model has no BOS token to start from");
    if (n >= (size_t)o->n_ctx)
        return tl_oai_fail(e, 400, INVALID, "context_length_exceeded", job->chat ? "messages"
                           : "prompt", "the prompt is %zu tokens; the context holds %d "
                           "(prompt plus at least one generated token)", n, (int)o->n_ctx);
    if (!(job->prompt = malloc(n * sizeof *job->prompt)))
        return tl_oai_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (tl_tokenizer_encode_flags(tok, text, len, flags, job->prompt, n, &n))
        return tl_oai_fail(e, 500, "server_error", NULL, NULL, "%s", tl_last_error());
    job->gen.prompt = job->prompt;
    job->gen.n_prompt = (int32_t)n;
    return 0;
}

/* 1 when the JSON text holds more than `most` values, counted from above without parsing:
 * every '{', '[', ',' and ':' outside strings (the parsed tree, outside the budget, grows
 * with the values, many times faster than with the body's bytes). */
static int json_values_over(const char *s, size_t n, size_t most) {
    size_t count = 1;
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[' || c == ',' || c == ':') {
            if (++count > most) return 1;
        }
    }
    return 0;
}

int tl_oai_parse(tl_oai *o, int chat, const char *body, size_t len, tl_oai_job *job,
                 tl_oai_error *e) {
    memset(job, 0, sizeof *job);
    memset(e, 0, sizeof *e);
    job->chat = chat;
    if (json_values_over(body, len, TL_OAI_MAX_VALUES))
        return tl_oai_fail(e, 400, INVALID, NULL, NULL, "the body has more than %d JSON values",
                           TL_OAI_MAX_VALUES);
    char jerr[160];
    if (tl_json_parse(body, len, 0, &job->root, jerr, sizeof jerr))
        return tl_oai_fail(e, 400, INVALID, NULL, NULL, "the body is not a valid JSON object "
                           "(%s)", jerr);
    json_t *root = job->root;
    json_t *model = field(root, "model");
    if (model && !json_is_string(model))
        return tl_oai_fail(e, 400, INVALID, NULL, "model", "'model' must be a string");
    if (model && strcmp(json_string_value(model), o->model_name) &&
        strcmp(json_string_value(model), "default"))
        return tl_oai_fail(e, 404, INVALID, "model_not_found", "model", "the model '%.100s' "
                           "does not exist; this server serves '%.100s'",
                           json_string_value(model), o->model_name);
    if (get_bool(root, "stream", &job->stream, e) ||
        get_bool(root, "ignore_eos", &job->gen.ignore_eos, e) || check_unsupported(root, chat, e) ||
        parse_stop(root, &job->gen, e) || parse_sampling(o, root, chat, &job->gen, e))
        return -1;
    if (chat) {
        size_t n = 0;
        unsigned flags = 0;
        char *text = render_chat(o, root, &n, &flags, e);
        if (!text) return -1;
        int rc = tokenize(o, text, n, flags, job, e);
        free(text);
        if (rc) return -1;
        if (o->eot_token >= 0) job->gen.stop_tokens[job->gen.n_stop_tokens++] = o->eot_token;
    } else {
        json_t *p = json_object_get(root, "prompt");
        if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
            p = json_array_get(p, 0);
        else if (json_is_array(p))
            return tl_oai_fail(e, 400, INVALID, NULL, "prompt", "'prompt' must be a string or "
                               "an array of one string (one prompt per request; token arrays "
                               "are not supported)");
        if (!json_is_string(p))
            return tl_oai_fail(e, 400, INVALID, NULL, "prompt", "'prompt' is required and "
                               "must be a string");
        if (tokenize(o, json_string_value(p), json_string_length(p),
                     o->add_bos ? TL_ENCODE_ADD_BOS : 0u, job, e))
            return -1;
    }
    uint64_t k = atomic_fetch_add(&o->counter, 1);
    snprintf(job->id, sizeof job->id, "%s-%016llx", chat ? "chatcmpl" : "cmpl",
             (unsigned long long)(k * 0x9E3779B97F4A7C15ull));
    job->created = (int64_t)time(NULL);
    return 0;
}

/* ---- writers ------------------------------------------------------------------------ */

static char *dump(json_t *v, size_t *len) {
    char *s = v ? tl_json_canonical(v) : NULL;
    if (v) json_decref(v);
    *len = s ? strlen(s) : 0;
    return s;
}

char *tl_oai_error_body(const tl_oai_error *e, size_t *len) {
    json_t *v = json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", e->message,
                          "type", e->type ? e->type : INVALID, "param",
                          e->param[0] ? e->param : NULL, "code", e->code);
    return dump(v, len);
}

static const char *finish_name(int32_t f) {
    return f == TL_SERVER_LENGTH ? "length" : "stop";
}

static json_t *usage(const tl_server_status *st) {
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", (int)st->n_prompt,
                     "completion_tokens", (int)st->n_generated, "total_tokens",
                     (int)(st->n_prompt + st->n_generated));
}

char *tl_oai_response(const tl_oai *o, const tl_oai_job *job, const char *text, size_t n,
                      const tl_server_status *st, size_t *len) {
    json_t *choice = job->chat
        ? json_pack("{s:i, s:{s:s, s:s%}, s:n, s:s}", "index", 0, "message", "role",
                    "assistant", "content", text, n, "logprobs", "finish_reason",
                    finish_name(st->finish))
        : json_pack("{s:s%, s:i, s:n, s:s}", "text", text, n, "index", 0, "logprobs",
                    "finish_reason", finish_name(st->finish));
    json_t *v = json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o}", "id", job->id, "object",
                          job->chat ? "chat.completion" : "text_completion", "created",
                          (json_int_t)job->created, "model", o->model_name, "choices", choice,
                          "usage", usage(st));
    return dump(v, len);
}

/* "data: " + JSON + "\n\n" (+ "data: [DONE]\n\n" when done). */
static char *sse(json_t *v, int done, size_t *len) {
    size_t n;
    char *js = dump(v, &n);
    if (!js) return NULL;
    static const char tail[] = "data: [DONE]\n\n";
    size_t total = 6 + n + 2 + (done ? sizeof tail - 1 : 0);
    char *out = malloc(total + 1);
    if (out) {
        memcpy(out, "data: ", 6);
        memcpy(out + 6, js, n);
        memcpy(out + 6 + n, "\n\n", 2);
        if (done) memcpy(out + 8 + n, tail, sizeof tail - 1);
        out[total] = 0;
        *len = total;
    }
    free(js);
    return out;
}

char *tl_oai_chunk(const tl_oai *o, const tl_oai_job *job, const char *text, size_t n,
                   int first, const tl_server_status *end, size_t *len) {
    json_t *choice;
    if (job->chat) {
        json_t *delta = first ? json_pack("{s:s, s:s%}", "role", "assistant", "content", text, n)
                        : n || !end ? json_pack("{s:s%}", "content", text, n)
                                    : json_object();
        choice = json_pack("{s:i, s:o, s:n, s:s?}", "index", 0, "delta", delta, "logprobs",
                           "finish_reason", end ? finish_name(end->finish) : NULL);
    } else {
        choice = json_pack("{s:s%, s:i, s:n, s:s?}", "text", text, n, "index", 0, "logprobs",
                           "finish_reason", end ? finish_name(end->finish) : NULL);
    }
    json_t *v = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", job->id, "object",
                          job->chat ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)job->created, "model", o->model_name, "choices", choice);
    if (v && end && json_object_set_new(v, "usage", usage(end))) {
        json_decref(v);
        v = NULL;
    }
    return sse(v, end != NULL, len);
}

char *tl_oai_stream_error(const tl_oai_error *e, size_t *len) {
    json_t *v = json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", e->message,
                          "type", e->type ? e->type : INVALID, "param",
                          e->param[0] ? e->param : NULL, "code", e->code);
    return sse(v, 1, len);
}

char *tl_oai_models(const tl_oai *o, size_t *len) {
    json_t *v = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id",
                          o->model_name, "object", "model", "created", (json_int_t)o->started,
                          "owned_by", "tierllm");
    return dump(v, len);
}
