/* test_sched.c - continuous batching (exec/sched.h).
 *
 * 1. Each sequence's greedy tokens equal generating it alone through the single-sequence
 *    API, when 11 sequences join at different steps (a few at first, the others while the
 *    first generate) with prompt chunks small enough that prefill and decode rows share
 *    steps, with fewer slots than sequences (later ones wait for a slot), and with the
 *    weights streamed under a small budget; on stories260K and a synthetic GQA model.
 * 2. Sampled (temperature 0.8) sequences are the same alone and among others.
 * 3. Finish reasons: max_tokens and the context end a sequence with TL_SCHED_LENGTH after
 *    exactly that many tokens; cancel returns the slot at once; full slots are TL_ERR_BUSY,
 *    an over-long prompt TL_ERR_CONTEXT, bad ids and max_tokens 0 TL_ERR_INVALID; a budget
 *    too small is TL_ERR_NOMEM at open.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "tierllm.h"
#include "exec/engine.h"
#include "exec/model_handle.h"
#include "exec/sched.h"
#include "model/placement.h"
#include "testutil.h"

#define N_PROMPTS TL_TEST_N_STORY_PROMPTS
#define N_GEN 12

static const char *const *const prompts = tl_test_story_prompts;

typedef struct seqs {
    int32_t ids[N_PROMPTS][64];
    size_t n_ids[N_PROMPTS];
    int32_t tokens[N_PROMPTS][N_GEN];
    int32_t n[N_PROMPTS];
} seqs;

static void tokenize_all(tl_model *m, seqs *s) {
    for (int p = 0; p < N_PROMPTS; p++)
        CHECK(tl_tokenize(m, prompts[p], strlen(prompts[p]), 1, s->ids[p], 64, &s->n_ids[p]) ==
              TL_OK);
}

/* The reference: each prompt alone through the single-sequence API, greedy. */
static void alone(tl_model *m, seqs *ref) {
    tl_context *c;
    tl_context_params cp = tl_context_default_params();
    cp.n_ctx = 128;
    CHECK(tl_context_open(m, &cp, &c) == TL_OK);
    float *logits = malloc((size_t)m->lm.hp.n_vocab * sizeof *logits);
    for (int p = 0; p < N_PROMPTS; p++) {
        tl_context_reset(c);
        CHECK(tl_decode(c, ref->ids[p], ref->n_ids[p], logits) == TL_OK);
        ref->n[p] = N_GEN;
        for (int i = 0; i < N_GEN; i++) {
            int32_t best = 0;
            for (int v = 1; v < m->lm.hp.n_vocab; v++) best = logits[v] > logits[best] ? v : best;
            ref->tokens[p][i] = best;
            CHECK(tl_decode(c, &best, 1, logits) == TL_OK);
        }
    }
    free(logits);
    tl_context_close(c);
}

static tl_sched_request request(const seqs *s, int p, float temp) {
    tl_sched_request rq;
    memset(&rq, 0, sizeof rq);
    rq.prompt = s->ids[p];
    rq.n_prompt = (int32_t)s->n_ids[p];
    rq.max_tokens = N_GEN;
    rq.stop_at_eos = 0;
    rq.sampler = tl_sampler_default_params();
    rq.sampler.temperature = temp;
    rq.sampler.seed = 1000 + (uint64_t)p;
    return rq;
}

/* Runs the prompts through a scheduler: `first` of them at once, then one more each
 * `every` steps (when a slot is free). Collects each one's tokens. */
static tl_status run_sched(tl_sched *sc, seqs *got, int first, int every, float temp) {
    int64_t id_of[N_PROMPTS];
    int submitted = 0;
    tl_sched_event ev[64];
    memset(got->n, 0, sizeof got->n);
    for (int step = 0; step < 10000; step++) {
        while (submitted < N_PROMPTS && (submitted < first || step % every == 0)) {
            tl_sched_request rq = request(got, submitted, temp);
            tl_status st = tl_sched_submit(sc, &rq, &id_of[submitted]);
            if (st == TL_ERR_BUSY) break;
            if (st) return st;
            submitted++;
            if (submitted > first) break; /* later ones: one per `every` steps */
        }
        int32_t n_ev;
        tl_status st = tl_sched_step(sc, ev, 64, &n_ev);
        if (st) return st;
        for (int32_t e = 0; e < n_ev; e++) {
            int p = -1;
            for (int k = 0; k < submitted; k++)
                if (id_of[k] == ev[e].id) p = k;
            CHECK_MSG(p >= 0, "event for unknown id %lld", (long long)ev[e].id);
            if (p < 0) continue;
            CHECK(ev[e].token >= 0 && got->n[p] < N_GEN);
            if (ev[e].token >= 0 && got->n[p] < N_GEN) got->tokens[p][got->n[p]++] = ev[e].token;
            CHECK(ev[e].n_generated == got->n[p] && ev[e].n_prompt == (int32_t)got->n_ids[p]);
            CHECK((ev[e].finish == TL_SCHED_LENGTH) == (got->n[p] == N_GEN));
        }
        if (submitted == N_PROMPTS && tl_sched_active(sc) == 0) return TL_OK;
    }
    CHECK_MSG(0, "the scheduler did not finish");
    return TL_ERR_INVALID;
}

static void check_equal(const seqs *ref, const seqs *got, const char *what) {
    for (int p = 0; p < N_PROMPTS; p++)
        CHECK_MSG(got->n[p] == ref->n[p] &&
                      !memcmp(got->tokens[p], ref->tokens[p], sizeof ref->tokens[p]),
                  "%s: prompt %d differs (%d tokens)", what, p, got->n[p]);
}

/* A step policy that changes the chunk with the load (beyond the scheduler's cap at some
 * loads) and checks what it is told: every step's rows. */
typedef struct test_policy {
    int32_t chunk; /* the scheduler's prefill_chunk */
    int32_t asked, observed, last_gen, bad;
    uint64_t prompt_rows;
} test_policy;

static int32_t tp_chunk(void *user, int32_t gen_rows) {
    test_policy *t = user;
    t->asked++;
    t->last_gen = gen_rows;
    t->bad += gen_rows < 1; /* asked only when some sequence generates */
    return (gen_rows * 7) % 11 - 1; /* -1..9: below 1 is taken as 1 */
}

static void tp_observe(void *user, int32_t gen_rows, int32_t prompt_rows, double s, double stall) {
    test_policy *t = user;
    t->observed++;
    t->prompt_rows += (uint64_t)prompt_rows;
    t->bad += gen_rows < 0 || prompt_rows < 0 || !(s >= 0) || !(stall >= 0);
    if (gen_rows > 0) { /* the answer, clamped to 1..prefill_chunk, bounded the prompt rows */
        int32_t cap = (gen_rows * 7) % 11 - 1;
        cap = cap < 1 ? 1 : cap > t->chunk ? t->chunk : cap;
        t->bad += prompt_rows > cap || t->last_gen != gen_rows;
    }
}

/* Greedy tokens against alone, over several shapes; and sampled ones alone vs mixed. */
static void equal_to_alone(const char *path, const char *what) {
    tl_model *m;
    tl_status st = tl_model_open(path, NULL, &m);
    CHECK_MSG(st == TL_OK, "%s: %s", what, tl_last_error());
    if (st) return;
    seqs ref, got;
    memset(&ref, 0, sizeof ref);
    tokenize_all(m, &ref);
    alone(m, &ref);
    /* window > 0: KV in tiers, older pages on disk (exact: 32-bit pages round trip) */
    static const struct { int max_seqs, chunk, first, every, policy, window; } shapes[] = {
        {16, 64, N_PROMPTS, 1, 0, 0}, {16, 7, 3, 2, 0, 0}, {4, 5, 4, 1, 0, 0},
        {3, 64, 1, 3, 0, 0}, {1, 3, 1, 1, 0, 0}, {16, 6, 3, 1, 1, 0}, {5, 9, 2, 1, 0, 8},
        {16, 64, N_PROMPTS, 1, 1, 4}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        tl_sched_params sp = tl_sched_default_params();
        sp.max_seqs = shapes[i].max_seqs;
        sp.prefill_chunk = shapes[i].chunk;
        sp.n_ctx = 128;
        sp.page_tokens = 4;
        sp.kv_window = shapes[i].window;
        sp.kv_sinks = 4;
        test_policy tp;
        memset(&tp, 0, sizeof tp);
        tp.chunk = sp.prefill_chunk;
        if (shapes[i].policy) sp.policy = (tl_sched_policy){tp_chunk, tp_observe, &tp};
        tl_sched *sc;
        st = tl_sched_open(m, &sp, &sc);
        CHECK_MSG(st == TL_OK, "%s: %s", what, tl_last_error());
        if (st) continue;
        memcpy(&got, &ref, sizeof got); /* the prompts */
        st = run_sched(sc, &got, shapes[i].first, shapes[i].every, 0);
        CHECK_MSG(st == TL_OK, "%s: %s", what, tl_last_error());
        char name[160];
        snprintf(name, sizeof name, "%s, %d slots, chunk %d, KV window %d", what, sp.max_seqs,
                 sp.prefill_chunk, sp.kv_window);
        if (!st) check_equal(&ref, &got, name);
        tl_sched_stats ss;
        tl_sched_get_stats(sc, &ss);
        CHECK(ss.generated_tokens == N_PROMPTS * N_GEN && ss.finished == N_PROMPTS &&
              ss.active == 0 && ss.submitted == N_PROMPTS);
        uint64_t prompt_sum = 0;
        for (int p = 0; p < N_PROMPTS; p++) prompt_sum += ref.n_ids[p];
        CHECK_MSG(ss.prompt_tokens == prompt_sum, "%s: %llu prompt rows, expected %llu", name,
                  (unsigned long long)ss.prompt_tokens, (unsigned long long)prompt_sum);
        /* tiers: pages went to disk and were read back; with fewer slots than prompts, the
         * later sequences wrote into the finished ones' slots */
        CHECK_MSG(!shapes[i].window || (ss.kv_pages_disk > 0 && ss.kv_bytes_read > 0 &&
                                        (sp.max_seqs >= N_PROMPTS ||
                                         ss.kv_pages_disk < ss.kv_pages_written)),
                  "%s: %llu disk slots for %llu pages written, %llu bytes read", name,
                  (unsigned long long)ss.kv_pages_disk, (unsigned long long)ss.kv_pages_written,
                  (unsigned long long)ss.kv_bytes_read);
        if (shapes[i].policy) { /* asked on steps with generating rows, told of every step */
            CHECK_MSG(tp.asked > 0 && tp.observed == (int32_t)ss.steps && !tp.bad &&
                          tp.prompt_rows == prompt_sum,
                      "%s: policy asked %d, told %d of %llu steps, %llu prompt rows, %d bad",
                      name, tp.asked, tp.observed, (unsigned long long)ss.steps,
                      (unsigned long long)tp.prompt_rows, tp.bad);
        }
        tl_sched_close(sc);
    }
    /* sampled: alone (one slot) and mixed (all at once, small chunks) agree */
    seqs one, mixed;
    for (int k = 0; k < 2; k++) {
        tl_sched_params sp = tl_sched_default_params();
        sp.max_seqs = k ? 16 : 1;
        sp.prefill_chunk = k ? 6 : 64;
        sp.n_ctx = 128;
        tl_sched *sc;
        CHECK(tl_sched_open(m, &sp, &sc) == TL_OK);
        seqs *out = k ? &mixed : &one;
        memcpy(out, &ref, sizeof *out);
        CHECK(run_sched(sc, out, k ? N_PROMPTS : 1, 1, 0.8f) == TL_OK);
        tl_sched_close(sc);
    }
    check_equal(&one, &mixed, "temperature 0.8, alone vs among others");
    int differs = 0; /* and sampling did something */
    for (int p = 0; p < N_PROMPTS; p++) differs |= memcmp(one.tokens[p], ref.tokens[p], sizeof ref.tokens[p]);
    CHECK_MSG(differs, "temperature 0.8 gave the greedy tokens everywhere");
    tl_model_close(m);
}

/* The same with the weights streamed: a budget just above the minimum. */
static void streamed(const char *path) {
    tl_model *m;
    if (tl_model_open(path, NULL, &m) != TL_OK) {
        CHECK_MSG(0, "%s", tl_last_error());
        return;
    }
    seqs ref, got;
    memset(&ref, 0, sizeof ref);
    tokenize_all(m, &ref);
    tl_sched_params sp = tl_sched_default_params();
    sp.max_seqs = 4;
    sp.prefill_chunk = 8;
    sp.n_ctx = 128;
    /* before anything is placed: the model's own bytes, the state, two layers' slots */
    const uint64_t need = tl_budget_used(m->lm.budget) + tl_sched_budget_bytes(m, &sp) +
                          tl_weight_plan_minimum(&m->lm, 2, 1) + (64 << 10);
    alone(m, &ref);
    tl_model_close(m);
    tl_model_params mp = tl_model_default_params();
    mp.mem_budget = need;
    CHECK(tl_model_open(path, &mp, &m) == TL_OK);
    tl_sched *sc;
    tl_status st = tl_sched_open(m, &sp, &sc);
    CHECK_MSG(st == TL_OK, "streamed: %s", tl_last_error());
    if (!st) {
        memcpy(&got, &ref, sizeof got);
        CHECK(run_sched(sc, &got, 2, 2, 0) == TL_OK);
        check_equal(&ref, &got, "streamed weights");
        tl_sched_stats ss;
        tl_sched_get_stats(sc, &ss);
        CHECK_MSG(ss.weight_bytes_read > 0, "nothing streamed");
        tl_sched_close(sc);
    }
    tl_model_close(m);
    /* a budget below the scheduler's state: refused at open, with the numbers */
    mp.mem_budget = need / 8;
    CHECK(tl_model_open(path, &mp, &m) == TL_OK);
    st = tl_sched_open(m, &sp, &sc);
    CHECK_MSG(st == TL_ERR_NOMEM, "a budget of %llu: %d", (unsigned long long)mp.mem_budget, st);
    tl_model_close(m);
}

static void limits_and_errors(const char *path) {
    tl_model *m;
    if (tl_model_open(path, NULL, &m) != TL_OK) {
        CHECK_MSG(0, "%s", tl_last_error());
        return;
    }
    tl_sched_params sp = tl_sched_default_params();
    sp.max_seqs = 2;
    sp.n_ctx = 24;
    tl_sched *sc;
    CHECK(tl_sched_open(m, &sp, &sc) == TL_OK);
    seqs s;
    memset(&s, 0, sizeof s);
    tokenize_all(m, &s);
    int64_t a, b, c;
    tl_sched_request rq = request(&s, 0, 0); /* 5 tokens */
    rq.max_tokens = 3;
    CHECK(tl_sched_submit(sc, &rq, &a) == TL_OK);
    rq = request(&s, 1, 0);
    rq.max_tokens = 100; /* the context (24) ends it first */
    CHECK(tl_sched_submit(sc, &rq, &b) == TL_OK);
    CHECK(tl_sched_submit(sc, &rq, &c) == TL_ERR_BUSY && tl_sched_active(sc) == 2);
    tl_sched_request bad = rq;
    bad.n_prompt = 24;
    int32_t long_prompt[24] = {1};
    bad.prompt = long_prompt;
    CHECK(tl_sched_submit(sc, &bad, &c) == TL_ERR_CONTEXT);
    bad = rq;
    int32_t oob[2] = {1, 1 << 30};
    bad.prompt = oob;
    bad.n_prompt = 2;
    CHECK(tl_sched_submit(sc, &bad, &c) == TL_ERR_INVALID);
    bad = rq;
    bad.max_tokens = 0;
    CHECK(tl_sched_submit(sc, &bad, &c) == TL_ERR_INVALID);
    int32_t n_a = 0, n_b = 0, fin_a = -1, fin_b = -1;
    tl_sched_event ev[4];
    for (int step = 0; step < 100 && tl_sched_active(sc) > 0; step++) {
        int32_t n;
        CHECK(tl_sched_step(sc, ev, 4, &n) == TL_OK);
        for (int32_t e = 0; e < n; e++) {
            if (ev[e].id == a) n_a++, fin_a = ev[e].finish;
            if (ev[e].id == b) n_b++, fin_b = ev[e].finish;
        }
    }
    CHECK_MSG(n_a == 3 && fin_a == TL_SCHED_LENGTH, "max_tokens 3: %d tokens, finish %d", n_a, fin_a);
    CHECK_MSG(n_b == 24 - (int32_t)s.n_ids[1] && fin_b == TL_SCHED_LENGTH,
              "context 24: %d tokens after a %zu-token prompt, finish %d", n_b, s.n_ids[1], fin_b);
    /* cancel: the slot is free at once, and the id gives no more events */
    rq = request(&s, 2, 0);
    CHECK(tl_sched_submit(sc, &rq, &a) == TL_OK && tl_sched_submit(sc, &rq, &b) == TL_OK);
    int32_t n;
    CHECK(tl_sched_step(sc, ev, 4, &n) == TL_OK);
    tl_sched_cancel(sc, a);
    tl_sched_cancel(sc, a); /* twice: ignored */
    CHECK(tl_sched_active(sc) == 1);
    CHECK(tl_sched_submit(sc, &rq, &c) == TL_OK && tl_sched_active(sc) == 2);
    CHECK(tl_sched_step(sc, ev, 4, &n) == TL_OK);
    for (int32_t e = 0; e < n; e++) CHECK(ev[e].id != a);
    CHECK(tl_sched_step(sc, ev, 1, &n) == TL_ERR_INVALID); /* room for fewer than max_seqs */
    tl_sched_stats ss;
    tl_sched_get_stats(sc, &ss);
    CHECK(ss.cancelled == 1 && ss.submitted == 5 && ss.active == 2);
    tl_sched_close(sc);
    tl_model_close(m);
}

int main(void) {
    const char *stories = tl_test_model("stories260K.gguf");
    equal_to_alone(stories, "stories260K");
    /* a grouped-query Q8_0 model (int8 products: the GEMM and matrix-vector paths) */
    tl_synth_params sp;
    tl_synth_preset("stories260k", &sp);
    sp.n_embd = 128;
    sp.n_ff = 320;
    sp.n_layer = 2;
    sp.n_head = 8;
    sp.n_head_kv = 2;
    sp.weight_type = 8; /* Q8_0 */
    sp.seed = 7;
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char gqa[512];
    snprintf(gqa, sizeof gqa, "%s/tl_sched_gqa_%d.gguf", tmp, (int)getpid());
    CHECK_MSG(tl_synth_write(&sp, gqa) == TL_OK, "synth: %s", tl_last_error());
    equal_to_alone(gqa, "synthetic GQA Q8_0");
    remove(gqa);
    streamed(stories);
    limits_and_errors(stories);
    return tl_test_finish("test_sched");
}
