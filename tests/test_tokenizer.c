/* test_tokenizer.c - the llama (SentencePiece BPE) and gpt2 (byte-level BPE) tokenizers
 * against llama.cpp's test vectors (tokenizers/ggml-vocab-*.gguf.{inp,out}, tokenized
 * without BOS as test-tokenizer-0 does), detokenization round trips, the UTF-8 stream,
 * the stories260K vocabulary, and hostile tokenizer metadata.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "base/status.h"
#include "format/gguf.h"
#include "testutil.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        *len = (size_t)n;
    }
    return buf;
}

static void print_escaped(const char *s, size_t n)
{
    fputc('"', stderr);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n')
            fputs("\\n", stderr);
        else if (c == '\t')
            fputs("\\t", stderr);
        else if (c < 0x20 || c == 0x7F)
            fprintf(stderr, "\\x%02X", c);
        else
            fputc(c, stderr);
    }
    fputc('"', stderr);
}

static void print_ids(const char *label, const int32_t *ids, size_t n)
{
    fprintf(stderr, "    %s (%zu):", label, n);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %d", (int)ids[i]);
    fputc('\n', stderr);
}

static int valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t c;
        size_t l = tl_utf8_decode((const unsigned char *)s + i, n - i, &c);
        if (!l)
            return 0;
        i += l;
    }
    return 1;
}

static tl_tokenizer *open_tokenizer(const char *name)
{
    tl_gguf *g = NULL;
    tl_tokenizer *tok = NULL;
    tl_status st = tl_gguf_open(tl_test_model(name), &g);
    CHECK_MSG(st == TL_OK, "%s: %s", name, tl_last_error());
    if (st)
        return NULL;
    st = tl_tokenizer_from_gguf(g, &tok);
    CHECK_MSG(st == TL_OK, "%s: %s", name, tl_last_error());
    tl_gguf_free(g); /* the tokenizer keeps its own copies */
    return tok;
}

/* Concatenated pieces of ids. */
static char *detokenize(const tl_tokenizer *tok, const int32_t *ids, size_t n, size_t *len)
{
    size_t cap = 64, m = 0;
    char *out = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t pl;
        if (tl_tokenizer_piece(tok, ids[i], &p, &pl) != TL_OK)
            continue;
        while (m + pl + 1 > cap)
            out = realloc(out, cap *= 2);
        memcpy(out + m, p, pl);
        m += pl;
    }
    out[m] = 0;
    *len = m;
    return out;
}

/* Encodes text into a fresh array; returns NULL (after a failed CHECK) on error. */
static int32_t *encode(const tl_tokenizer *tok, const char *text, size_t len, int bos,
                       size_t *n)
{
    size_t need = 0;
    tl_status st = tl_tokenizer_encode(tok, text, len, bos, NULL, 0, &need);
    CHECK(st == TL_OK || st == TL_ERR_INVALID);
    int32_t *ids = malloc((need + 1) * sizeof(*ids));
    st = tl_tokenizer_encode(tok, text, len, bos, ids, need, n);
    CHECK_MSG(st == TL_OK && *n == need, "%s", tl_last_error());
    return ids;
}

/* Runs one vocabulary's .inp/.out vectors. Returns the number that pass. */
static int run_vectors(const char *name, int spm, int *n_total)
{
    char path[1200];
    size_t inp_len = 0, out_len = 0;
    tl_tokenizer *tok = open_tokenizer(name);
    snprintf(path, sizeof path, "%s.inp", tl_test_model(name));
    char *inp = read_file(path, &inp_len);
    snprintf(path, sizeof path, "%s.out", tl_test_model(name));
    char *out = read_file(path, &out_len);
    CHECK_MSG(inp && out, "cannot read the .inp/.out files of %s", name);
    *n_total = 0;
    if (!tok || !inp || !out) {
        free(inp);
        free(out);
        tl_tokenizer_free(tok);
        return 0;
    }

    /* As test-tokenizer-0: inputs are the pieces before each separator (what follows
     * the last one is dropped); outputs are the lines of .out, ids split by spaces. */
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof(sep) - 1;
    int pass = 0, idx = 0;
    char *ip = inp, *op = out;
    int32_t expect[4096];
    for (;;) {
        char *end = strstr(ip, sep);
        if (!end)
            break;
        size_t len = (size_t)(end - ip);
        char *eol = strchr(op, '\n');
        CHECK_MSG(eol != NULL, "%s: .out has fewer lines than .inp has tests", name);
        if (!eol)
            break;
        *eol = 0;
        size_t n_expect = 0;
        for (char *p = op;;) {
            char *q;
            long v = strtol(p, &q, 10);
            if (q == p || n_expect == 4096)
                break;
            expect[n_expect++] = (int32_t)v;
            p = q;
        }

        size_t n = 0;
        int32_t *ids = encode(tok, ip, len, 0, &n);
        int ok = ids && n == n_expect && memcmp(ids, expect, n * sizeof(*ids)) == 0;
        if (ok) {
            pass++;
        } else {
            fprintf(stderr, "%s: vector %d mismatch, input ", name, idx);
            print_escaped(ip, len);
            fputc('\n', stderr);
            print_ids("expected", expect, n_expect);
            print_ids("actual  ", ids, n);
            tl_test_failures++;
        }

        /* round trip: the pieces give back the input (spm: after the added space) */
        size_t dl;
        char *dec = detokenize(tok, ids, n, &dl);
        int rt = spm && len ? dl == len + 1 && dec[0] == ' ' && memcmp(dec + 1, ip, len) == 0
                            : dl == len && memcmp(dec, ip, len) == 0;
        if (!rt) {
            fprintf(stderr, "%s: vector %d does not round-trip: ", name, idx);
            print_escaped(ip, len);
            fputs(" -> ", stderr);
            print_escaped(dec, dl);
            fputc('\n', stderr);
            tl_test_failures++;
        }
        free(dec);
        free(ids);
        ip = end + sep_len;
        op = eol + 1;
        idx++;
    }
    CHECK_MSG(*op == 0, "%s: .out has more lines than .inp has tests", name);
    *n_total = idx;
    printf("%s: %d/%d vectors pass\n", name, pass, idx);

    /* a buffer that is too small: TL_ERR_INVALID, the count, and a prefix */
    int32_t small[2] = {-7, -7};
    size_t need = 0;
    const char *hello = "Hello world, this is a test";
    tl_status st = tl_tokenizer_encode(tok, hello, strlen(hello), 0, small, 1, &need);
    CHECK(st == TL_ERR_INVALID && need > 1 && small[0] >= 0 && small[1] == -7);

    /* BOS handling */
    size_t nb = 0;
    int32_t *b = encode(tok, "Hello", 5, 1, &nb);
    if (tl_tokenizer_bos(tok) >= 0)
        CHECK(nb >= 1 && b[0] == tl_tokenizer_bos(tok));
    free(b);
    const char *piece;
    size_t pl;
    CHECK(tl_tokenizer_piece(tok, -1, &piece, &pl) == TL_ERR_INVALID);
    CHECK(tl_tokenizer_piece(tok, tl_tokenizer_n_vocab(tok), &piece, &pl) == TL_ERR_INVALID);

    /* invalid UTF-8 is encoded, never rejected, and (spm byte fallback / gpt2 byte
     * alphabet) comes back byte for byte */
    const char bad[] = "a\xff\x80 b\xe2\x82 \xed\xa0\x80 c\xc0";
    size_t nbad = 0, dl;
    int32_t *ib = encode(tok, bad, sizeof(bad) - 1, 0, &nbad);
    char *db = detokenize(tok, ib, nbad, &dl);
    size_t off = spm ? 1 : 0;
    CHECK_MSG(dl == sizeof(bad) - 1 + off && memcmp(db + off, bad, sizeof(bad) - 1) == 0,
              "%s: invalid UTF-8 does not round-trip", name);
    free(db);
    free(ib);

    /* random bytes: never an error, and the pieces give the bytes back (unless the
     * input happens to hold a literal U+2581, which spm decodes as a space) */
    uint64_t state = 0x2545F4914F6CDD1Dull, r;
    for (int iter = 0; iter < 300; iter++) {
        char in[96];
        size_t len = (size_t)iter % sizeof(in);
        for (size_t i = 0; i < len; i++) {
            r = tl_splitmix64(&state);
            in[i] = iter % 3 ? (char)r : " a\xE2\x96\x81\xC3\xA9\xF0\x9F\x98\x81"[r % 11];
        }
        int32_t *fi = encode(tok, in, len, 0, &nbad);
        char *fd = detokenize(tok, fi, nbad, &dl);
        if (!memmem(in, len, "\xE2\x96\x81", 3)) {
            off = spm && len ? 1 : 0;
            CHECK_MSG(dl == len + off && memcmp(fd + off, in, len) == 0,
                      "%s: random bytes %d do not round-trip", name, iter);
        }
        free(fd);
        free(fi);
    }

    free(inp);
    free(out);
    tl_tokenizer_free(tok);
    return pass;
}

/* ---- UTF-8 stream ----------------------------------------------------------------- */

static size_t stream_all(const char *in, size_t len, size_t chunk, char *out)
{
    tl_utf8_stream s = {0};
    size_t n = 0;
    for (size_t i = 0; i < len; i += chunk) {
        size_t c = len - i < chunk ? len - i : chunk;
        size_t w = tl_utf8_stream_push(&s, in + i, c, out + n);
        CHECK(w <= 3 * c + 3);
        n += w;
    }
    return n + tl_utf8_stream_flush(&s, out + n);
}

static void test_utf8_stream(void)
{
    char out[4096];
    tl_utf8_stream s = {0};

    /* a 4-byte character split over pushes is held back until complete */
    CHECK(tl_utf8_stream_push(&s, "\xF0", 1, out) == 0);
    CHECK(tl_utf8_stream_push(&s, "\x9F\xA6", 2, out) == 0);
    CHECK(tl_utf8_stream_push(&s, "\x99!", 2, out) == 5 && memcmp(out, "\xF0\x9F\xA6\x99!", 5) == 0);
    CHECK(tl_utf8_stream_flush(&s, out) == 0);

    struct {
        const char *in, *out;
    } cases[] = {
        {"a\x80" "b", "a\xEF\xBF\xBD" "b"},
        {"\xE2\x82" "A", "\xEF\xBF\xBD" "A"},
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},             /* overlong */
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate */
        {"\xF4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"},
        {"\xFF", "\xEF\xBF\xBD"},
        {"x\xF0\x9F", "x\xEF\xBF\xBD"}, /* truncated at the end: flushed as one U+FFFD */
        {"\xE2\x82\xAC\xC3", "\xE2\x82\xAC\xEF\xBF\xBD"},
        {"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x81", "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x81"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t len = strlen(cases[i].in);
        for (size_t chunk = 1; chunk <= len; chunk++) {
            size_t n = stream_all(cases[i].in, len, chunk, out);
            CHECK_MSG(n == strlen(cases[i].out) && memcmp(out, cases[i].out, n) == 0,
                      "utf8 stream case %zu chunk %zu", i, chunk);
        }
    }

    /* random bytes, random chunking: always valid output; valid input passes through */
    uint64_t state = 0x9E3779B97F4A7C15ull, r = 0;
    for (int iter = 0; iter < 2000; iter++) {
        unsigned char in[64];
        size_t len = 1 + iter % 64;
        for (size_t i = 0; i < len; i++) {
            r = tl_splitmix64(&state);
            in[i] = (unsigned char)(iter & 1 ? r : (r % 3 ? 0x80 | (r & 0x3F) : 0xC0 | (r & 0x3F)));
        }
        size_t n = stream_all((const char *)in, len, 1 + (size_t)(r % 7), out);
        CHECK(n <= 3 * len + 3 && valid_utf8(out, n));
        if (valid_utf8((const char *)in, len))
            CHECK(n == len && memcmp(out, in, len) == 0);
    }
}

/* Pieces of an encoded text streamed one token at a time give the text back. */
static void test_stream_pieces(void)
{
    tl_tokenizer *tok = open_tokenizer("tokenizers/ggml-vocab-llama-spm.gguf");
    if (!tok)
        return;
    /* 🦙 and some CJK fall back to byte tokens in the Llama vocabulary, so pieces split
     * multibyte characters */
    const char *text = "F\xC3\xBChrer \xF0\x9F\xA6\x99.cpp \xE6\x88\x91\xE6\x83\xB3 \xE2\x9C\x85";
    size_t n = 0, len = strlen(text);
    int32_t *ids = encode(tok, text, len, 1, &n);
    char out[1024];
    size_t m = 0;
    int split_seen = 0;
    tl_utf8_stream s = {0};
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t pl;
        CHECK(tl_tokenizer_piece(tok, ids[i], &p, &pl) == TL_OK);
        if (pl == 1 && ((unsigned char)p[0] & 0x80))
            split_seen = 1;
        size_t w = tl_utf8_stream_push(&s, p, pl, out + m);
        CHECK(valid_utf8(out + m, w));
        m += w;
    }
    m += tl_utf8_stream_flush(&s, out + m);
    CHECK(split_seen);
    CHECK_MSG(m == len + 1 && out[0] == ' ' && memcmp(out + 1, text, len) == 0,
              "streamed pieces differ from the text");
    free(ids);
    tl_tokenizer_free(tok);
}

/* ---- stories260K ------------------------------------------------------------------ */

static void test_stories(void)
{
    tl_tokenizer *tok = open_tokenizer("stories260K.gguf");
    if (!tok)
        return;
    CHECK(tl_tokenizer_n_vocab(tok) == 512);
    CHECK(tl_tokenizer_bos(tok) == 1 && tl_tokenizer_eos(tok) == 2);
    CHECK(tl_tokenizer_add_bos_default(tok) == 1);

    size_t n = 0;
    int32_t *ids = encode(tok, "Once upon a time", 16, 1, &n);
    const int32_t want[] = {1, 403, 407, 261, 378}; /* <s> ▁Once ▁upon ▁a ▁time */
    CHECK(n == 5 && memcmp(ids, want, sizeof(want)) == 0);
    if (n != 5)
        print_ids("stories260K 'Once upon a time'", ids, n);
    free(ids);

    const char *x = " Once upon a time, there was a little girl named Lily.";
    size_t len = strlen(x), dl;
    ids = encode(tok, x, len, 0, &n);
    char *dec = detokenize(tok, ids, n, &dl);
    CHECK(dl == len + 1 && dec[0] == ' ' && memcmp(dec + 1, x, len) == 0);
    CHECK(n < len / 2); /* merged into words, not spelled out */
    free(dec);
    free(ids);

    const char *p;
    size_t pl;
    CHECK(tl_tokenizer_piece(tok, 1, &p, &pl) == TL_OK && pl == 0); /* <s> is control */
    CHECK(tl_tokenizer_piece(tok, 3 + 'A', &p, &pl) == TL_OK && pl == 1 && p[0] == 'A');
    tl_tokenizer_free(tok);
}

/* ---- hostile metadata ------------------------------------------------------------- */

#define KV_STR(k, sv) \
    { .key = (char *)(k), .type = TL_GGUF_STRING, .v.str = {strlen(sv), (char *)(sv)} }
#define KV_U32(k, x) { .key = (char *)(k), .type = TL_GGUF_UINT32, .v.u = (x) }
#define KV_ARR(k, et, cnt, d) \
    { .key = (char *)(k), .type = TL_GGUF_ARRAY, .v.arr = {(et), (cnt), (void *)(d)} }

static tl_status from_kvs(tl_gguf_kv *kv, size_t n, tl_tokenizer **tok)
{
    tl_gguf g;
    memset(&g, 0, sizeof(g));
    g.version = 3;
    g.n_kv = n;
    g.kv = kv;
    tl_error_clear();
    return tl_tokenizer_from_gguf(&g, tok);
}

static void expect_error(tl_gguf_kv *kv, size_t n, tl_status want, const char *needle,
                         const char *what)
{
    tl_tokenizer *tok = (tl_tokenizer *)1;
    tl_status st = from_kvs(kv, n, &tok);
    CHECK_MSG(st == want && tok == NULL, "%s: got %s (%s)", what, tl_status_str(st),
              tl_last_error());
    CHECK_MSG(strstr(tl_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what,
              tl_last_error(), needle);
    if (st == TL_OK)
        tl_tokenizer_free(tok);
}

static void test_hostile(void)
{
    static tl_gguf_str toks[] = {{5, "<unk>"}, {3, "<s>"}, {4, "</s>"}, {4, "\xE2\x96\x81" "a"},
                                 {1, "a"},     {3, "\xE2\x96\x81"}, {1, "b"}};
    static const float scores[7] = {0, 0, 0, -1, -2, -3, -4};
    static const float scores_nan[7] = {0, 0, 0, -1, NAN, -3, -4};
    static const int32_t types[7] = {2, 3, 3, 1, 1, 1, 1};
    static const int32_t ints[7] = {1, 2, 3, 4, 5, 6, 7};
    static tl_gguf_str merges[] = {{3, "a b"}, {2, "ab"}, {0, ""}};
    const char *T = "tokenizer.ggml.tokens";

    /* a valid minimal spm vocabulary to start from */
    tl_gguf_kv ok[] = {
        KV_STR("tokenizer.ggml.model", "llama"),
        KV_ARR(T, TL_GGUF_STRING, 7, toks),
        KV_ARR("tokenizer.ggml.scores", TL_GGUF_FLOAT32, 7, scores),
        KV_ARR("tokenizer.ggml.token_type", TL_GGUF_INT32, 7, types),
        KV_U32("tokenizer.ggml.bos_token_id", 1),
    };
    tl_tokenizer *tok = NULL;
    CHECK_MSG(from_kvs(ok, 5, &tok) == TL_OK, "%s", tl_last_error());
    if (tok) {
        size_t n = 0;
        int32_t ids[16];
        /* "é" has no token and no byte tokens: <unk> per byte */
        CHECK(tl_tokenizer_encode(tok, "a b\xC3\xA9", 5, 1, ids, 16, &n) == TL_OK);
        const int32_t want[] = {1, 3, 5, 6, 0, 0};
        CHECK(n == 6 && memcmp(ids, want, sizeof(want)) == 0);
        const char *p;
        size_t pl;
        CHECK(tl_tokenizer_piece(tok, 3, &p, &pl) == TL_OK && pl == 2 && memcmp(p, " a", 2) == 0);
        CHECK(tl_tokenizer_encode(tok, "", 0, 0, ids, 16, &n) == TL_OK && n == 0);
        CHECK(tl_tokenizer_encode(tok, NULL, 0, 1, ids, 16, &n) == TL_OK && n == 1);
        tl_tokenizer_free(tok);
    }

    tl_gguf_kv kv[8];
#define WITH(i, e)                          \
    do {                                    \
        memcpy(kv, ok, sizeof(ok));         \
        tl_gguf_kv repl_ = e;               \
        kv[i] = repl_;                      \
    } while (0)

    expect_error(ok + 1, 4, TL_ERR_FORMAT, "tokenizer.ggml.model", "no model key");
    WITH(0, KV_STR("tokenizer.ggml.model", "bert"));
    expect_error(kv, 5, TL_ERR_UNSUPPORTED, "bert", "unknown model");
    WITH(0, KV_U32("tokenizer.ggml.model", 1));
    expect_error(kv, 5, TL_ERR_FORMAT, "tokenizer.ggml.model", "model not a string");
    WITH(1, KV_U32("tokenizer.ggml.nothing", 1));
    expect_error(kv, 5, TL_ERR_FORMAT, T, "no tokens");
    WITH(1, KV_ARR(T, TL_GGUF_INT32, 7, ints));
    expect_error(kv, 5, TL_ERR_FORMAT, T, "tokens of ints");
    WITH(1, KV_STR(T, "abc"));
    expect_error(kv, 5, TL_ERR_FORMAT, T, "tokens not an array");
    WITH(1, KV_ARR(T, TL_GGUF_STRING, 0, toks));
    expect_error(kv, 5, TL_ERR_FORMAT, T, "empty vocabulary");
    WITH(2, KV_ARR("tokenizer.ggml.scores", TL_GGUF_FLOAT32, 6, scores));
    expect_error(kv, 5, TL_ERR_FORMAT, "tokenizer.ggml.scores", "short scores");
    WITH(2, KV_ARR("tokenizer.ggml.scores", TL_GGUF_INT32, 7, ints));
    expect_error(kv, 5, TL_ERR_FORMAT, "tokenizer.ggml.scores", "int scores");
    WITH(3, KV_ARR("tokenizer.ggml.token_type", TL_GGUF_INT32, 8, ints));
    expect_error(kv, 5, TL_ERR_FORMAT, "tokenizer.ggml.token_type", "long types");
    WITH(3, KV_ARR("tokenizer.ggml.token_type", TL_GGUF_FLOAT32, 7, scores));
    expect_error(kv, 5, TL_ERR_FORMAT, "tokenizer.ggml.token_type", "float types");
    WITH(4, KV_U32("tokenizer.ggml.bos_token_id", 7));
    expect_error(kv, 5, TL_ERR_FORMAT, "tokenizer.ggml.bos_token_id", "bos out of range");
    WITH(4, KV_U32("tokenizer.ggml.eos_token_id", 1u << 31));
    expect_error(kv, 5, TL_ERR_FORMAT, "tokenizer.ggml.eos_token_id", "eos out of range");
    WITH(4, KV_STR("tokenizer.ggml.unknown_token_id", "0"));
    expect_error(kv, 5, TL_ERR_FORMAT, "tokenizer.ggml.unknown_token_id", "unk a string");
    WITH(4, KV_STR("tokenizer.ggml.add_bos_token", "yes"));
    expect_error(kv, 5, TL_ERR_FORMAT, "tokenizer.ggml.add_bos_token", "add_bos a string");

    /* 0xFFFFFFFF means "none"; NaN scores are tolerated */
    WITH(4, KV_U32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu));
    kv[2] = (tl_gguf_kv)KV_ARR("tokenizer.ggml.scores", TL_GGUF_FLOAT32, 7, scores_nan);
    CHECK_MSG(from_kvs(kv, 5, &tok) == TL_OK, "%s", tl_last_error());
    if (tok) {
        CHECK(tl_tokenizer_bos(tok) == -1);
        size_t n = 0;
        int32_t ids[16];
        CHECK(tl_tokenizer_encode(tok, "ab a", 4, 1, ids, 16, &n) == TL_OK && n >= 1);
        tl_tokenizer_free(tok);
    }

    /* gpt2: merges are required and must be strings; odd entries are skipped */
    tl_gguf_kv g2[] = {
        KV_STR("tokenizer.ggml.model", "gpt2"),
        KV_ARR(T, TL_GGUF_STRING, 7, toks),
        KV_ARR("tokenizer.ggml.merges", TL_GGUF_STRING, 3, merges),
    };
    expect_error(g2, 2, TL_ERR_FORMAT, "tokenizer.ggml.merges", "gpt2 without merges");
    tl_gguf_kv g2b[3];
    memcpy(g2b, g2, sizeof(g2));
    g2b[2] = (tl_gguf_kv)KV_ARR("tokenizer.ggml.merges", TL_GGUF_INT32, 7, ints);
    expect_error(g2b, 3, TL_ERR_FORMAT, "tokenizer.ggml.merges", "merges of ints");
    CHECK_MSG(from_kvs(g2, 3, &tok) == TL_OK, "%s", tl_last_error());
    if (tok) {
        size_t n = 0;
        int32_t ids[16];
        /* "ab" merges to nothing in the vocabulary: falls back to "a", "b" */
        CHECK(tl_tokenizer_encode(tok, "ab", 2, 0, ids, 16, &n) == TL_OK);
        CHECK(n == 2 && ids[0] == 4 && ids[1] == 6);
        /* bytes without tokens are dropped (no <unk> id), never a crash */
        CHECK(tl_tokenizer_encode(tok, "x\xF0 \n", 4, 0, ids, 16, &n) == TL_OK && n == 0);
        tl_tokenizer_free(tok);
    }
#undef WITH
}

/* USER_DEFINED tokens are split out of the text before the model runs; for spm the
 * text after one gets the space prefix again (llama.cpp, parse_special off). */
static void test_user_defined(void)
{
    static tl_gguf_str toks[] = {{5, "<unk>"}, {3, "<s>"}, {4, "</s>"}, {4, "\xE2\x96\x81" "a"},
                                 {1, "a"},     {3, "\xE2\x96\x81"}, {1, "b"}, {5, "<|u|>"},
                                 {3, "<|u"}};
    static const int32_t types[9] = {2, 3, 3, 1, 1, 1, 1, 4, 4};
    static tl_gguf_str merges[] = {{3, "a b"}};
    for (int spm = 0; spm < 2; spm++) {
        tl_gguf_kv kv[] = {
            KV_STR("tokenizer.ggml.model", spm ? "llama" : "gpt2"),
            KV_ARR("tokenizer.ggml.tokens", TL_GGUF_STRING, 9, toks),
            KV_ARR("tokenizer.ggml.token_type", TL_GGUF_INT32, 9, types),
            KV_ARR("tokenizer.ggml.merges", TL_GGUF_STRING, 1, merges),
        };
        tl_tokenizer *tok = NULL;
        CHECK_MSG(from_kvs(kv, 4, &tok) == TL_OK, "%s", tl_last_error());
        if (!tok)
            continue;
        int32_t ids[16];
        size_t n = 0;
        const char *text = "a<|u|>a<|ub";
        CHECK(tl_tokenizer_encode(tok, text, strlen(text), 0, ids, 16, &n) == TL_OK);
        /* spm: "a" <|u|> "a" <|u "b", each raw piece with the prefix: ▁a, ▁a, ▁ b */
        const int32_t want_spm[] = {3, 7, 3, 8, 5, 6}, want_bpe[] = {4, 7, 4, 8, 6};
        size_t nw = spm ? 6 : 5;
        CHECK_MSG(n == nw && memcmp(ids, spm ? want_spm : want_bpe, nw * sizeof(int32_t)) == 0,
                  "user-defined split (%s)", spm ? "spm" : "gpt2");
        const char *p;
        size_t pl;
        CHECK(tl_tokenizer_piece(tok, 7, &p, &pl) == TL_OK && pl == 5 && memcmp(p, "<|u|>", 5) == 0);
        tl_tokenizer_free(tok);
    }
}

int main(void)
{
    int n_spm = 0, n_gpt2 = 0;
    int p_spm = run_vectors("tokenizers/ggml-vocab-llama-spm.gguf", 1, &n_spm);
    int p_gpt2 = run_vectors("tokenizers/ggml-vocab-gpt-2.gguf", 0, &n_gpt2);
    CHECK(n_spm == 46 && p_spm == n_spm);
    CHECK(n_gpt2 == 46 && p_gpt2 == n_gpt2);
    test_utf8_stream();
    test_stream_pieces();
    test_stories();
    test_hostile();
    test_user_defined();
    return tl_test_finish("test_tokenizer");
}
