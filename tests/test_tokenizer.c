/* test_tokenizer.c - the llama (SentencePiece BPE) and gpt2 (byte-level BPE) tokenizers
 * against llama.cpp's test vectors for all nine vocabularies it ships them for
 * (tokenizers/ggml-vocab-*.gguf.{inp,out}, tokenized without BOS as test-tokenizer-0
 * does), detokenization round trips, the UTF-8 stream, the stories260K vocabulary,
 * hostile tokenizer metadata, the pre-tokenizers' splits (Llama 3 and Qwen2 from their
 * published regexes, having no vocabulary here), tokenizer.ggml.pre, and special tokens
 * with and without parse_special.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/rng.h"
#include "base/status.h"
#include "format/gguf.h"
#include "format/hf_folder.h"
#include "testutil.h"
#include "text/pretokenize.h"
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

/* Whether each of the 256 bytes alone encodes to tokens whose pieces give it back (spm:
 * after the added space). Not so in vocabularies that lack tokens for bytes UTF-8 never
 * uses (falcon, mpt, starcoder, refact) or give them user-defined tokens (deepseek). */
static int bytes_round_trip(const tl_tokenizer *tok, int spm)
{
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        size_t n = 0, dl;
        int32_t *ids = encode(tok, &c, 1, 0, &n);
        char *dec = detokenize(tok, ids, n, &dl);
        int ok = spm ? dl == 2 && dec[0] == ' ' && dec[1] == c : dl == 1 && dec[0] == c;
        free(dec);
        free(ids);
        if (!ok)
            return 0;
    }
    return 1;
}

/* Runs one vocabulary's .inp/.out vectors. Returns the number that pass. all_bytes: the
 * vocabulary has a token for every byte (bytes_round_trip). */
static int run_vectors(const char *name, int spm, int all_bytes, int *n_total,
                       tl_tokenizer *given)
{
    char path[1200];
    size_t inp_len = 0, out_len = 0;
    tl_tokenizer *tok = given ? given : open_tokenizer(name); /* given: taken over */
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

    /* invalid UTF-8 is encoded, never rejected; where every byte has a token of its own
     * (spm byte fallback, a full gpt2 byte alphabet) it comes back byte for byte */
    int exact = bytes_round_trip(tok, spm);
    CHECK_MSG(exact == all_bytes, "%s: bytes round trip %d, expected %d", name, exact, all_bytes);
    const char bad[] = "a\xff\x80 b\xe2\x82 \xed\xa0\x80 c\xc0";
    size_t nbad = 0, dl;
    int32_t *ib = encode(tok, bad, sizeof(bad) - 1, 0, &nbad);
    char *db = detokenize(tok, ib, nbad, &dl);
    size_t off = spm ? 1 : 0;
    CHECK_MSG(!exact ||
                  (dl == sizeof(bad) - 1 + off && memcmp(db + off, bad, sizeof(bad) - 1) == 0),
              "%s: invalid UTF-8 does not round-trip", name);
    free(db);
    free(ib);

    /* random bytes: never an error, and the pieces give the bytes back (unless the
     * input happens to hold a literal U+2581, which spm decodes as a space). Every third
     * input is valid UTF-8 from a small alphabet, which every vocabulary covers. */
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
        if (!memmem(in, len, "\xE2\x96\x81", 3) && (exact || iter % 3 == 0)) {
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

static tl_status from_kvs_flags(tl_gguf_kv *kv, size_t n, unsigned flags, tl_tokenizer **tok)
{
    tl_gguf g;
    memset(&g, 0, sizeof(g));
    g.version = 3;
    g.n_kv = n;
    g.kv = kv;
    tl_error_clear();
    return flags ? tl_tokenizer_from_gguf_flags(&g, flags, tok) : tl_tokenizer_from_gguf(&g, tok);
}

static tl_status from_kvs(tl_gguf_kv *kv, size_t n, tl_tokenizer **tok)
{
    return from_kvs_flags(kv, n, 0, tok);
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

/* ---- pre-tokenizers --------------------------------------------------------------- */

#define WORDS(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Splits text by `rules` and compares the words with want (NULL-terminated). */
static void check_split(tl__pretok rules, const char *text, const char *const *want)
{
    uint32_t cpts[256], ends[256];
    size_t off[257], n = 0, len = strlen(text);
    CHECK(len < 256);
    for (size_t i = 0; i < len && n < 256; n++) {
        size_t l = tl_utf8_decode((const unsigned char *)text + i, len - i, &cpts[n]);
        CHECK(l > 0); /* the cases are valid UTF-8 */
        if (!l) {
            cpts[n] = 0xFFFD;
            l = 1;
        }
        off[n] = i;
        i += l;
    }
    off[n] = len;
    size_t n_words = 0, k = 0;
    CHECK(tl__pretokenize(rules, cpts, n, ends, &n_words) == TL_OK);
    int ok = 1;
    for (size_t start = 0; k < n_words; start = ends[k++]) {
        size_t b0 = off[start], b1 = off[ends[k]];
        if (!want[k] || strlen(want[k]) != b1 - b0 || memcmp(want[k], text + b0, b1 - b0) != 0) {
            ok = 0;
            break;
        }
    }
    if (ok && k == n_words && !want[k])
        return;
    fprintf(stderr, "%s split of ", tl__pretok_name(rules));
    print_escaped(text, len);
    fputs(":\n    got ", stderr);
    for (size_t w = 0, start = 0; w < n_words; start = ends[w++]) {
        print_escaped(text + off[start], off[ends[w]] - off[start]);
        fputc(' ', stderr);
    }
    fputs("\n    want", stderr);
    for (size_t w = 0; want[w]; w++) {
        fputc(' ', stderr);
        print_escaped(want[w], strlen(want[w]));
    }
    fputc('\n', stderr);
    tl_test_failures++;
}

/* Llama 3 and Qwen2 ship no vocabulary to run vectors on: their words, worked out from
 * the published regexes
 *   llama-bpe: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *               ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   qwen2: the same with \p{N} for \p{N}{1,3}
 * and for "default" from llama.cpp's regex list (each regex cuts the words the previous
 * ones left). */
static void test_pretokenize_split(void)
{
    const tl__pretok L3 = TL_PRETOK_LLAMA3, QW = TL_PRETOK_QWEN2;
    /* contractions in any case; a quote that starts none joins the next letters */
    check_split(L3, "I'M HERE, we'RE 'll x'Ll",
                WORDS("I", "'M", " HERE", ",", " we", "'RE", " '", "ll", " x", "'Ll"));
    check_split(L3, "don't O'Neil I'Ve", WORDS("don", "'t", " O", "'Neil", " I", "'Ve"));
    check_split(QW, "I'M we'Ve", WORDS("I", "'M", " we", "'Ve"));
    /* digits: groups of up to three (llama-bpe) or one each (qwen2), never with a space */
    check_split(L3, "1234567 abc123def 3.14",
                WORDS("123", "456", "7", " abc", "123", "def", " ", "3", ".", "14"));
    check_split(QW, "1234567 abc123def 3.14",
                WORDS("1", "2", "3", "4", "5", "6", "7", " abc", "1", "2", "3", "def", " ", "3",
                      ".", "1", "4"));
    check_split(L3, " 12 \u0661\u0662\u0663\u0664 \u00bd",
                WORDS(" ", "12", " ", "\u0661\u0662\u0663", "\u0664", " ", "\u00bd"));
    check_split(QW, " 12 \u0661\u0662 \u00bd",
                WORDS(" ", "1", "2", " ", "\u0661", "\u0662", " ", "\u00bd"));
    /* newlines: whitespace up to the last \r or \n is one word; other runs give their
     * last space to the next word */
    check_split(L3, "Hello\n\nworld\r\n", WORDS("Hello", "\n\n", "world", "\r\n"));
    check_split(L3, "a   b  \t\n  x  ", WORDS("a", "  ", " b", "  \t\n", " ", " x", "  "));
    check_split(QW, "a   b  \t\n  x  ", WORDS("a", "  ", " b", "  \t\n", " ", " x", "  "));
    /* punctuation runs take one leading space and the newlines after them */
    check_split(L3, "foo!!\n\nbar ... ?!", WORDS("foo", "!!\n\n", "bar", " ...", " ?!"));
    /* CJK ideographs are letters; the full-width ～ is a symbol */
    check_split(L3, "我想在apple工作1314151天～",
                WORDS("我想在apple工作", "131", "415", "1", "天", "～"));
    check_split(QW, "我想在apple工作13天～",
                WORDS("我想在apple工作", "1", "3", "天", "～"));
    /* emoji are symbols: a ZWJ sequence stays one word with its space */
    check_split(L3, "🚀 (normal) \U0001F636\u200d\U0001F32B\ufe0f ✅",
                WORDS("🚀", " (", "normal", ")", " \U0001F636\u200d\U0001F32B\ufe0f", " ✅"));
    /* a combining mark is no letter: it starts the next word as its one prefix */
    check_split(L3, "Cafe\u0301s na\u00efve", WORDS("Cafe", "\u0301s", " na\u00efve"));
    check_split(QW, "Cafe\u0301s", WORDS("Cafe", "\u0301s"));
    /* non-ASCII whitespace is whitespace, and a letter prefix like any other */
    check_split(L3, "x\u00a0y\u3000\u3000z", WORDS("x", "\u00a0y", "\u3000", "\u3000z"));
    check_split(L3, "Привет, мир!", WORDS("Привет", ",", " мир", "!"));

    /* "default": punctuation runs (with $+<=>^~|) first, then GPT-2, then number runs,
     * then ASCII digits in threes */
    const tl__pretok D = TL_PRETOK_DEFAULT;
    check_split(D, "Hello, world! 12345 $5+3=8",
                WORDS("Hello", ",", " world", "!", " ", "123", "45", " ", "$", "5", "+", "3",
                      "=", "8"));
    check_split(D, "«Grüße» — ok… 1000000 x++ 's",
                WORDS("«", "Grüße", "»", " ", "—", " ok", "…", " ", "100", "000", "0", " x",
                      "++", " ", "'", "s"));
    check_split(D, "a\u00a0\u00a0b \u0663\u0664\u0665\u0666",
                WORDS("a", "\u00a0", "\u00a0", "b", " ", "\u0663\u0664\u0665\u0666"));

    /* invalid UTF-8 reads as U+FFFD (a symbol), beyond-range code points as unassigned */
    const uint32_t odd[] = {'a', 0xFFFD, 0xFFFD, 'b', ' ', 0x110000, '1'};
    uint32_t ends[8];
    size_t nw = 0;
    CHECK(tl__pretokenize(TL_PRETOK_GPT2, odd, 7, ends, &nw) == TL_OK);
    CHECK(nw == 5 && ends[0] == 1 && ends[1] == 3 && ends[2] == 4 && ends[3] == 6 && ends[4] == 7);
    CHECK(tl__pretokenize(TL_PRETOK_GPT2, odd, 0, ends, &nw) == TL_OK && nw == 0);

    /* every rule set stays linear on long runs of one class (whitespace with and
     * without newlines, digits, punctuation, letters): 1 Mi code points */
    size_t n = (size_t)1 << 20;
    uint32_t *text = malloc(n * sizeof(*text)), *out = malloc(n * sizeof(*out));
    static const uint32_t fill[] = {' ', '\n', '7', '!', 'x', 0x3000, '\''};
    for (size_t i = 0; i < n; i++)
        text[i] = fill[(i / (n / 8)) % 7];
    for (int r = 0; r < TL_PRETOK_COUNT; r++) {
        CHECK(tl__pretokenize((tl__pretok)r, text, n, out, &nw) == TL_OK);
        CHECK(nw >= 1 && out[nw - 1] == n);
    }
    free(text);
    free(out);
}

/* A small gpt2 vocabulary on which the rule sets differ: " ," is one word for GPT-2
 * but two for "default"; "1234" merges whole, in threes or per digit; "ab" is a token
 * no merge reaches (only Llama 3's ignore_merges finds it). */
static tl_gguf_str pre_toks[] = {
    {1, "a"}, {1, "b"}, {1, ","}, {2, "\xC4\xA0"}, {3, "\xC4\xA0,"}, {1, "1"}, {1, "2"},
    {1, "3"}, {1, "4"}, {2, "12"}, {3, "123"}, {4, "1234"}, {2, "ab"}, {1, "<"}, {1, "|"},
    {1, "s"}, {1, ">"}, {5, "<|s|>"}, {5, "<|u|>"},
};
static const int32_t pre_types[19] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 4};
static tl_gguf_str pre_merges[] = {{4, "\xC4\xA0 ,"}, {3, "1 2"}, {4, "12 3"}, {5, "123 4"}};

/* Loads the small vocabulary with tokenizer.ggml.pre = pre (NULL: no key). */
static tl_status open_small(const char *pre, unsigned flags, tl_tokenizer **tok)
{
    tl_gguf_kv kv[] = {
        KV_STR("tokenizer.ggml.model", "gpt2"),
        KV_ARR("tokenizer.ggml.tokens", TL_GGUF_STRING, 19, pre_toks),
        KV_ARR("tokenizer.ggml.token_type", TL_GGUF_INT32, 19, pre_types),
        KV_ARR("tokenizer.ggml.merges", TL_GGUF_STRING, 4, pre_merges),
        KV_STR("tokenizer.ggml.pre", pre ? pre : ""),
    };
    return from_kvs_flags(kv, pre ? 5 : 4, flags, tok);
}

/* Encodes text with flags and compares with want[0..n). */
static void check_ids(const tl_tokenizer *tok, const char *text, unsigned flags,
                      const int32_t *want, size_t n, const char *what)
{
    int32_t ids[64];
    size_t got = 0;
    tl_status st = tl_tokenizer_encode_flags(tok, text, strlen(text), flags, ids, 64, &got);
    if (st == TL_OK && got == n && memcmp(ids, want, n * sizeof(*ids)) == 0)
        return;
    fprintf(stderr, "%s: ", what);
    print_escaped(text, strlen(text));
    fputc('\n', stderr);
    print_ids("expected", want, n);
    print_ids("actual  ", ids, got < 64 ? got : 64);
    tl_test_failures++;
}

static void test_pre_key(void)
{
    static const struct {
        const char *pre; /* NULL: no key */
        int32_t comma[2], digits[4], ab[2];
        int n_comma, n_digits, n_ab, add_bos;
    } cases[] = {
        {NULL, {4}, {11}, {0, 1}, 1, 1, 2, 0}, /* missing key: GPT-2, as before */
        {"", {4}, {11}, {0, 1}, 1, 1, 2, 0},
        {"gpt-2", {4}, {11}, {0, 1}, 1, 1, 2, 0},
        {"mpt", {4}, {11}, {0, 1}, 1, 1, 2, 0},
        {"default", {3, 2}, {10, 8}, {0, 1}, 2, 2, 2, 0},
        {"falcon", {3, 2}, {10, 8}, {0, 1}, 2, 2, 2, 0},
        {"llama-bpe", {4}, {10, 8}, {12}, 1, 2, 1, 1},
        {"llama3", {4}, {10, 8}, {12}, 1, 2, 1, 1},
        {"llama-v3", {4}, {10, 8}, {12}, 1, 2, 1, 1},
        {"qwen2", {4}, {5, 6, 7, 8}, {0, 1}, 1, 4, 2, 0},
        {"starcoder", {4}, {5, 6, 7, 8}, {0, 1}, 1, 4, 2, 0},
        {"refact", {4}, {5, 6, 7, 8}, {0, 1}, 1, 4, 2, 0},
        {"deepseek-coder", {4}, {5, 6, 7, 8}, {0, 1}, 1, 4, 2, 0},
        {"deepseek-llm", {4}, {11}, {0, 1}, 1, 1, 2, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        tl_tokenizer *tok = NULL;
        const char *what = cases[i].pre ? cases[i].pre : "(no pre key)";
        CHECK_MSG(open_small(cases[i].pre, 0, &tok) == TL_OK, "%s: %s", what, tl_last_error());
        if (!tok)
            continue;
        check_ids(tok, " ,", 0, cases[i].comma, (size_t)cases[i].n_comma, what);
        check_ids(tok, "1234", 0, cases[i].digits, (size_t)cases[i].n_digits, what);
        check_ids(tok, "ab", 0, cases[i].ab, (size_t)cases[i].n_ab, what);
        CHECK_MSG(tl_tokenizer_add_bos_default(tok) == cases[i].add_bos, "%s: add_bos", what);
        tl_tokenizer_free(tok);
    }

    /* an unknown value is an error that names it, unless the caller falls back */
    tl_tokenizer *tok = (tl_tokenizer *)1;
    CHECK(open_small("bogus-pre", 0, &tok) == TL_ERR_UNSUPPORTED && tok == NULL);
    CHECK_MSG(strstr(tl_last_error(), "'bogus-pre'") &&
                  strstr(tl_last_error(), "tokenizer.ggml.pre"),
              "message: %s", tl_last_error());
    CHECK(open_small("bogus-pre", TL_TOKENIZER_UNKNOWN_PRE_AS_DEFAULT, &tok) == TL_OK && tok);
    if (tok) {
        const int32_t want[] = {3, 2};
        check_ids(tok, " ,", 0, want, 2, "unknown pre as default");
        tl_tokenizer_free(tok);
    }
    /* the flag changes nothing for a known value */
    CHECK(open_small("qwen2", TL_TOKENIZER_UNKNOWN_PRE_AS_DEFAULT, &tok) == TL_OK && tok);
    if (tok) {
        const int32_t want[] = {5, 6, 7, 8};
        check_ids(tok, "1234", 0, want, 4, "qwen2 with the fallback flag");
        tl_tokenizer_free(tok);
    }

    /* a value that is not a string */
    tl_gguf_kv kv[] = {
        KV_STR("tokenizer.ggml.model", "gpt2"),
        KV_ARR("tokenizer.ggml.tokens", TL_GGUF_STRING, 19, pre_toks),
        KV_ARR("tokenizer.ggml.merges", TL_GGUF_STRING, 4, pre_merges),
        KV_U32("tokenizer.ggml.pre", 3),
    };
    expect_error(kv, 4, TL_ERR_FORMAT, "tokenizer.ggml.pre", "pre not a string");

    /* SentencePiece vocabularies ignore the key, as llama.cpp does */
    static tl_gguf_str spm_toks[] = {{5, "<unk>"}, {3, "<s>"}, {4, "</s>"}, {1, "a"}};
    tl_gguf_kv spm[] = {
        KV_STR("tokenizer.ggml.model", "llama"),
        KV_ARR("tokenizer.ggml.tokens", TL_GGUF_STRING, 4, spm_toks),
        KV_STR("tokenizer.ggml.pre", "bogus-pre"),
    };
    CHECK_MSG(from_kvs(spm, 3, &tok) == TL_OK, "%s", tl_last_error());
    tl_tokenizer_free(tok);
}

/* Control tokens match in the text only with TL_ENCODE_PARSE_SPECIAL; user-defined ones
 * always; phi-3 drops the whitespace after its special tokens (llama.cpp's RSTRIP). */
static void test_parse_special(void)
{
    tl_tokenizer *tok = NULL;
    CHECK_MSG(open_small("gpt-2", 0, &tok) == TL_OK, "%s", tl_last_error());
    if (tok) {
        const int32_t plain[] = {0, 13, 14, 15, 14, 16, 1}, parsed[] = {0, 17, 1};
        const int32_t user[] = {0, 18, 1};
        check_ids(tok, "a<|s|>b", 0, plain, 7, "control token, parse_special off");
        check_ids(tok, "a<|s|>b", TL_ENCODE_PARSE_SPECIAL, parsed, 3, "parse_special on");
        check_ids(tok, "a<|u|>b", 0, user, 3, "user-defined token, parse_special off");
        check_ids(tok, "a<|u|>b", TL_ENCODE_PARSE_SPECIAL, user, 3, "user-defined, on");
        int32_t ids[8];
        size_t n = 0; /* tl_tokenizer_encode never parses control tokens */
        CHECK(tl_tokenizer_encode(tok, "a<|s|>b", 7, 0, ids, 8, &n) == TL_OK && n == 7 &&
              memcmp(ids, plain, sizeof(plain)) == 0);
        tl_tokenizer_free(tok);
    }

    /* GPT-2's <|endoftext|> */
    tok = open_tokenizer("tokenizers/ggml-vocab-gpt-2.gguf");
    if (tok) {
        const char *t = "Hi<|endoftext|>";
        size_t n = 0;
        int32_t *ids = encode(tok, t, strlen(t), 0, &n);
        int seen = 0;
        for (size_t i = 0; i < n; i++)
            seen |= ids[i] == 50256;
        CHECK(n > 2 && !seen);
        free(ids);
        int32_t on[8];
        CHECK(tl_tokenizer_encode_flags(tok, t, strlen(t), TL_ENCODE_PARSE_SPECIAL, on, 8, &n) ==
                  TL_OK &&
              n == 2 && on[1] == 50256);
        tl_tokenizer_free(tok);
    }

    /* phi-3: <|user|> and <|end|> are control tokens, </s> a user-defined one; all three
     * strip the whitespace after them, and the text after a special token gets the
     * SentencePiece space prefix again */
    tok = open_tokenizer("tokenizers/ggml-vocab-phi-3.gguf");
    if (tok) {
        size_t n_hi = 0, n_b = 0, n_a = 0, n = 0;
        int32_t *hi = encode(tok, "Hi", 2, 0, &n_hi), *b = encode(tok, "b", 1, 0, &n_b);
        int32_t *a = encode(tok, "a", 1, 0, &n_a);
        int32_t want[32], got[32];
        size_t nw = 0;
        want[nw++] = 1; /* BOS */
        want[nw++] = 32010;
        for (size_t i = 0; i < n_hi; i++)
            want[nw++] = hi[i];
        want[nw++] = 32007;
        const char *chat = "<|user|>\n  Hi<|end|>\n";
        CHECK(tl_tokenizer_encode_flags(tok, chat, strlen(chat),
                                        TL_ENCODE_ADD_BOS | TL_ENCODE_PARSE_SPECIAL, got, 32,
                                        &n) == TL_OK);
        CHECK_MSG(n == nw && memcmp(got, want, nw * sizeof(*got)) == 0, "phi-3 chat prompt");
        CHECK(tl_tokenizer_encode(tok, chat, strlen(chat), 1, got, 32, &n) == TL_OK);
        for (size_t i = 0; i < n; i++)
            CHECK(got[i] != 32010 && got[i] != 32007);
        nw = 0;
        for (size_t i = 0; i < n_a; i++)
            want[nw++] = a[i];
        want[nw++] = 2;
        for (size_t i = 0; i < n_b; i++)
            want[nw++] = b[i];
        check_ids(tok, "a</s> \n b", 0, want, nw, "phi-3 </s> strips what follows");
        free(hi);
        free(a);
        free(b);
        tl_tokenizer_free(tok);
    }

    /* llama-spm strips nothing: the space after </s> stays (as a second U+2581) */
    tok = open_tokenizer("tokenizers/ggml-vocab-llama-spm.gguf");
    if (tok) {
        size_t n_a = 0, n_b = 0;
        int32_t *a = encode(tok, "a", 1, 0, &n_a), *b = encode(tok, " b", 2, 0, &n_b);
        int32_t want[16];
        size_t nw = 0;
        for (size_t i = 0; i < n_a; i++)
            want[nw++] = a[i];
        want[nw++] = 2;
        for (size_t i = 0; i < n_b; i++)
            want[nw++] = b[i];
        check_ids(tok, "a</s> b", TL_ENCODE_PARSE_SPECIAL, want, nw, "llama-spm </s>");
        free(a);
        free(b);
        tl_tokenizer_free(tok);
    }
}

/* Hugging Face folders' tokenizers (format/hf_folder.c), written from llama.cpp's
 * vocabularies as Hugging Face's files hold them (tests/ref/make_hf_tokenizer.py): a
 * tokenizer.json of the SentencePiece kind from llama-spm, and GPT-2's vocab.json and
 * merges.txt (OPT's checkpoints) from gpt-2. Read from the folder, each must pass
 * llama.cpp's vectors as the GGUF does. */
static void test_hf_folder_vocab(const char *flag, const char *vocab, int spm,
                                 const char *what)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char dir[512], cmd[2048], name[128];
    snprintf(name, sizeof name, "tokenizers/ggml-vocab-%s.gguf", vocab);
    snprintf(dir, sizeof dir, "%s/tl_hf_tok_%d", tmp, (int)getpid());
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/ref/make_hf_tokenizer.py %s '%s' '%s'",
             TL_SOURCE_DIR, flag, tl_test_model(name), dir);
    CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
    tl_hf_folder *f = NULL;
    tl_tokenizer *tok = NULL;
    tl_status st = tl_hf_folder_open(dir, &f);
    CHECK_MSG(st == TL_OK, "%s folder: %s", what, tl_last_error());
    if (f) st = tl_tokenizer_from_gguf(f->gguf, &tok);
    CHECK_MSG(!f || st == TL_OK, "%s tokenizer: %s", what, tl_last_error());
    if (tok) {
        int n = 0, pass = run_vectors(name, spm, 1, &n, tok);
        CHECK_MSG(n == 46 && pass == n, "%s: %d/%d vectors pass", what, pass, n);
    }
    tl_hf_folder_free(f);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    /* llama.cpp's vectors for every vocabulary it ships one for; each must pass whole */
    static const struct {
        const char *name;
        int spm, all_bytes;
    } vocabs[] = {
        {"llama-spm", 1, 1},      {"phi-3", 1, 1},        {"gpt-2", 0, 1},
        {"mpt", 0, 0},            {"falcon", 0, 0},       {"deepseek-coder", 0, 0},
        {"deepseek-llm", 0, 0},   {"starcoder", 0, 0},    {"refact", 0, 0},
    };
    for (size_t i = 0; i < sizeof(vocabs) / sizeof(vocabs[0]); i++) {
        char path[128];
        snprintf(path, sizeof path, "tokenizers/ggml-vocab-%s.gguf", vocabs[i].name);
        int n = 0, pass = run_vectors(path, vocabs[i].spm, vocabs[i].all_bytes, &n, NULL);
        CHECK_MSG(n == 46 && pass == n, "%s: %d/%d vectors pass", vocabs[i].name, pass, n);
    }
    test_hf_folder_vocab("", "llama-spm", 1, "llama-spm as tokenizer.json");
    test_hf_folder_vocab("--gpt2-files", "gpt-2", 0, "gpt-2 as vocab.json + merges.txt");
    test_utf8_stream();
    test_stream_pieces();
    test_stories();
    test_hostile();
    test_user_defined();
    test_pretokenize_split();
    test_pre_key();
    test_parse_special();
    return tl_test_finish("test_tokenizer");
}
