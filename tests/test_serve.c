/* test_serve.c - the serving core (serve/server.h) without HTTP, on stories260K: greedy
 * text equals tl_generate's alone and among concurrent clients, stop strings (also one
 * spanning tokens) and stop tokens end the text before them, readers that let go early
 * cancel their sequences, a full queue answers TL_ERR_BUSY, a draining server
 * TL_ERR_CANCELLED; and the chat families render as their reference templates do.
 * Run under ThreadSanitizer too: many client threads against the one engine thread.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "exec/model_handle.h"
#include "serve/chat_template.h"
#include "serve/server.h"
#include "text/tokenizer.h"

typedef struct gen_text {
    char *s;
    size_t len;
} gen_text;

static int on_piece(void *user, int32_t tok, const char *text, size_t len) {
    gen_text *g = user;
    (void)tok;
    char *p = realloc(g->s, g->len + len + 1);
    if (!p) return 1;
    g->s = p;
    memcpy(g->s + g->len, text, len);
    g->len += len;
    g->s[g->len] = 0;
    return 0;
}

/* tl_generate's greedy text for a prompt (BOS added, as the server does for stories260K). */
static char *reference(tl_model *m, const char *prompt, int n) {
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = 256;
    tl_context *c = NULL;
    gen_text g = {calloc(1, 1), 0};
    tl_generate_params gp = tl_generate_default_params();
    gp.n_predict = n;
    gp.sampler.temperature = 0;
    CHECK(tl_context_open(m, &cp, &c) == TL_OK);
    if (c) CHECK(tl_generate(c, prompt, &gp, on_piece, &g, NULL) == TL_OK);
    tl_context_close(c);
    return g.s;
}

static int32_t *tokens(tl_model *m, const char *text, int32_t *n) {
    size_t cap = 512, k = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    CHECK(tl_tokenize(m, text, strlen(text), 1, ids, cap, &k) == TL_OK);
    *n = (int32_t)k;
    return ids;
}

static tl_server_gen greedy(const int32_t *ids, int32_t n, int32_t max_tokens) {
    tl_server_gen g;
    memset(&g, 0, sizeof g);
    g.prompt = ids;
    g.n_prompt = n;
    g.max_tokens = max_tokens;
    g.sampler = tl_sampler_default_params();
    g.sampler.temperature = 0;
    return g;
}

/* Reads a request to its end in small pieces (as a stream does); returns the text. */
static char *read_all(tl_server_req *r, tl_server_status *st) {
    size_t cap = 64, len = 0;
    char *s = malloc(cap);
    for (;;) {
        if (cap - len < 8) s = realloc(s, cap *= 2);
        size_t n = tl_server_req_read(r, s + len, 7, 100, st);
        len += n;
        if (!n && st->finish) break;
    }
    s[len] = 0;
    return s;
}

typedef struct client {
    tl_server *srv;
    tl_model *m;
    int k;
    const char *want; /* greedy text expected, or NULL (sampled, let go early) */
    int ok;
} client;

static void *client_main(void *arg) {
    client *c = arg;
    int32_t n;
    int32_t *ids = tokens(c->m, c->want ? "Once upon a time" : tl_test_story_prompts[c->k % TL_TEST_N_STORY_PROMPTS], &n);
    tl_server_gen g = greedy(ids, n, c->want ? 48 : 120);
    if (!c->want) {
        g.sampler.temperature = 0.8f;
        g.sampler.seed = (uint64_t)c->k;
    }
    tl_server_req *r = NULL;
    tl_status st;
    while ((st = tl_server_submit(c->srv, &g, &r)) == TL_ERR_BUSY) {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    c->ok = st == TL_OK;
    if (r && c->want) {
        tl_server_status ss;
        char *text = read_all(r, &ss);
        c->ok = !strcmp(text, c->want) && ss.finish == TL_SERVER_LENGTH && ss.n_generated == 48;
        free(text);
    } else if (r) { /* read a little, then let go: the engine cancels the rest */
        char buf[16];
        tl_server_status ss;
        tl_server_req_read(r, buf, sizeof buf, 200, &ss);
    }
    tl_server_req_release(r);
    free(ids);
    return NULL;
}

static void test_server(tl_model *m) {
    char *want = reference(m, "Once upon a time", 48);
    CHECK(want && strlen(want) > 20);
    tl_server_params sp = tl_server_default_params();
    sp.sched.max_seqs = 4;
    sp.sched.n_ctx = 256;
    sp.max_queue = 2;
    tl_server *srv = NULL;
    CHECK(tl_server_open(m, &sp, &srv) == TL_OK);
    if (!srv) return;
    CHECK(tl_server_sched_params(srv)->n_ctx == 256);
    int32_t n;
    int32_t *ids = tokens(m, "Once upon a time", &n);

    /* alone */
    tl_server_gen g = greedy(ids, n, 48);
    tl_server_req *r = NULL;
    tl_server_status st;
    CHECK(tl_server_submit(srv, &g, &r) == TL_OK);
    char *text = r ? read_all(r, &st) : NULL;
    CHECK_MSG(text && !strcmp(text, want), "'%s' vs '%s'", text, want);
    CHECK(st.finish == TL_SERVER_LENGTH && st.n_generated == 48 && st.n_prompt == n);
    tl_server_req_release(r);
    free(text);

    /* a stop string spanning tokens ("girl named L" is several pieces), and one that
     * never matches: the text ends before the first */
    const char *cut = strstr(want, "girl named L");
    CHECK(cut != NULL);
    g.stop[0] = "no such text";
    g.stop[1] = "girl named L";
    g.n_stop = 2;
    CHECK(tl_server_submit(srv, &g, &r) == TL_OK);
    text = r ? read_all(r, &st) : NULL;
    CHECK_MSG(text && cut && strlen(text) == (size_t)(cut - want) && !strncmp(text, want, strlen(text)),
              "'%s'", text);
    CHECK(st.finish == TL_SERVER_STOP && st.n_generated < 48);
    tl_server_req_release(r);
    free(text);

    /* the text ends with the start of a stop string that never completes: held back
     * while it might, released whole at the end */
    char tailstop[16];
    snprintf(tailstop, sizeof tailstop, "%s#", want + strlen(want) - 3);
    g.stop[0] = tailstop;
    g.n_stop = 1;
    CHECK(tl_server_submit(srv, &g, &r) == TL_OK);
    text = r ? read_all(r, &st) : NULL;
    CHECK_MSG(text && !strcmp(text, want), "'%s'", text);
    CHECK(st.finish == TL_SERVER_LENGTH);
    tl_server_req_release(r);
    free(text);

    /* a stop token: the text ends before its piece. Candidates are tokens whose piece
     * occurs in the greedy text (the model may spell that text with other tokens, then it
     * runs to its length); one of them must stop it, and wherever one does, the text is
     * the greedy text up to that piece. */
    tl_model_desc d;
    tl_model_describe(m, &d);
    int stopped = 0, tries = 0;
    g.n_stop = 0;
    g.n_stop_tokens = 1;
    for (int32_t id = 0; id < d.n_vocab && !stopped && tries < 40; id++) {
        const char *piece;
        size_t plen;
        if (tl_token_piece(m, id, &piece, &plen) || plen < 4) continue;
        char pz[64];
        if (plen >= sizeof pz) continue;
        memcpy(pz, piece, plen);
        pz[plen] = 0;
        if (!strstr(want, pz)) continue;
        tries++;
        g.stop_tokens[0] = id;
        CHECK(tl_server_submit(srv, &g, &r) == TL_OK);
        text = r ? read_all(r, &st) : NULL;
        tl_server_req_release(r);
        if (text && st.finish == TL_SERVER_STOP) {
            stopped = 1;
            size_t tl = strlen(text);
            CHECK_MSG(!strncmp(text, want, tl) && !strncmp(want + tl, pz, plen), "'%s' + '%s'",
                      text, pz);
        }
        free(text);
    }
    CHECK(stopped);
    g.n_stop_tokens = 0;

    /* the queue: 4 running + 2 waiting, the 7th is refused; letting go of them all
     * (unread) cancels them */
    tl_server_req *held[7] = {0};
    g.max_tokens = 200;
    int busy = 0;
    for (int i = 0; i < 7; i++) {
        tl_status s2 = tl_server_submit(srv, &g, &held[i]);
        busy += s2 == TL_ERR_BUSY;
        CHECK(s2 == TL_OK || (s2 == TL_ERR_BUSY && i == 6));
    }
    CHECK(busy <= 1); /* the first ones may already have finished */
    tl_server_stats ss;
    tl_server_get_stats(srv, &ss);
    CHECK(ss.queued + ss.running <= 6);
    for (int i = 0; i < 7; i++) tl_server_req_release(held[i]);

    /* concurrent clients: 4 greedy ones must get the text alone, 12 sampling ones let go
     * early; the queue is full at times (clients retry on TL_ERR_BUSY) */
    enum { N_CLIENTS = 16 };
    pthread_t th[N_CLIENTS];
    client cl[N_CLIENTS];
    for (int i = 0; i < N_CLIENTS; i++) {
        cl[i] = (client){srv, m, i, i % 4 == 0 ? want : NULL, 0};
        CHECK(pthread_create(&th[i], NULL, client_main, &cl[i]) == 0);
    }
    for (int i = 0; i < N_CLIENTS; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(cl[i].ok, "client %d", i);
    }
    tl_server_get_stats(srv, &ss);
    CHECK(ss.sched.cancelled > 0);
    CHECK(ss.sched.generated_tokens > 0);

    /* draining: new requests are refused, the engine stops once idle */
    tl_server_drain(srv);
    g.max_tokens = 4;
    CHECK(tl_server_submit(srv, &g, &r) == TL_ERR_CANCELLED && r == NULL);
    tl_server_close(srv);
    free(ids);
    free(want);
}

static void expect_render(tl_chat_kind k, const tl_chat_msg *msgs, size_t n, const char *want,
                          int bos) {
    char *out = NULL;
    size_t len = 0;
    int writes_bos = -1;
    CHECK(tl_chat_render(k, msgs, n, &out, &len, &writes_bos) == TL_OK);
    CHECK_MSG(out && !strcmp(out, want) && len == strlen(want), "%s: '%s'", tl_chat_name(k), out);
    CHECK(writes_bos == bos);
    free(out);
}

static void test_chat_templates(void) {
    CHECK(tl_chat_detect("{% for m in messages %}<|im_start|>{{ m.role }}") == TL_CHAT_CHATML);
    CHECK(tl_chat_detect("<|start_header_id|>' + role + '<|end_header_id|>") == TL_CHAT_LLAMA3);
    CHECK(tl_chat_detect("[INST] <<SYS>>\\n' + sys + '\\n<</SYS>>") == TL_CHAT_LLAMA2);
    CHECK(tl_chat_detect("{{ bos_token + '[INST] ' + content + ' [/INST]' }}") == TL_CHAT_MISTRAL);
    CHECK(tl_chat_detect("{{ '<|user|>\\n' + message['content'] + eos_token }}") == TL_CHAT_ZEPHYR);
    CHECK(tl_chat_detect("{{ messages }}") == TL_CHAT_NONE && tl_chat_detect(NULL) == TL_CHAT_NONE);
    CHECK(tl_chat_from_name("llama3") == TL_CHAT_LLAMA3 && tl_chat_from_name("jinja") == TL_CHAT_NONE);
    const tl_chat_msg conv[] = {{"system", "Be brief."},
                                {"user", " Hi "},
                                {"assistant", "Hello."},
                                {"user", "Tell a story"}};
    expect_render(TL_CHAT_CHATML, conv, 4,
                  "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n"
                  "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nTell a story"
                  "<|im_end|>\n<|im_start|>assistant\n", 0);
    expect_render(TL_CHAT_LLAMA3, conv, 4,
                  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief."
                  "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nTell a story<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n", 1);
    expect_render(TL_CHAT_LLAMA2, conv, 4,
                  "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s>"
                  "<s>[INST] Tell a story [/INST]", 1);
    expect_render(TL_CHAT_MISTRAL, conv, 4,
                  "<s>[INST] Be brief.\n\nHi [/INST] Hello.</s>[INST] Tell a story [/INST]", 1);
    expect_render(TL_CHAT_ZEPHYR, conv, 4,
                  "<|system|>\nBe brief.</s>\n<|user|>\n Hi </s>\n<|assistant|>\nHello.</s>\n"
                  "<|user|>\nTell a story</s>\n<|assistant|>\n", 0);
    const tl_chat_msg bad[] = {{"tool", "x"}};
    char *out = NULL;
    size_t len;
    int wb;
    CHECK(tl_chat_render(TL_CHAT_CHATML, bad, 1, &out, &len, &wb) == TL_ERR_INVALID && !out);
    CHECK(tl_chat_render(TL_CHAT_NONE, conv, 1, &out, &len, &wb) == TL_ERR_INVALID && !out);
}

int main(void) {
    test_chat_templates();
    tl_model_params mp = tl_model_default_params();
    mp.n_threads = 2;
    tl_model *m = NULL;
    CHECK(tl_model_open(tl_test_model("stories260K.gguf"), &mp, &m) == TL_OK);
    if (m) test_server(m);
    tl_model_close(m);
    return tl_test_finish("test_serve");
}
