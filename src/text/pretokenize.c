/* pretokenize.c - BPE pre-tokenizers by hand over code points, no regex engine.
 *
 * llama.cpp (unicode_regex_split) gives each pre type a list of regexes. The text starts
 * as one word; each regex in turn cuts every current word: a match becomes a word, and
 * the text between two matches (or a match and the word's edge) becomes one word too.
 * Words never merge, so each pass refines the last, and a pass sees only its word: a
 * lookahead or `$` stops at the word's end. Each regex here is a pass kind below,
 * written as the leftmost-first, greedy search of the regex it stands for, so every pass
 * is one linear scan.
 *
 * llama.cpp runs two regexes by hand (the GPT-2 and Llama 3 ones; gpt2_end and
 * llama3_end follow that code, including what it does at a word's end), and the others
 * through std::regex, where:
 *  - a regex with \p{L}, \p{N} or \p{P} runs over a "collapsed" text in which every
 *    code point above 0x7F is one byte standing for its class: whitespace (as \s), a
 *    letter, a number, punctuation, or "other". Those classes are what the passes test,
 *    so for such a regex a code point counts by its Unicode category alone.
 *  - a regex without them runs over the code points themselves (std::wregex), except that
 *    whitespace above 0x7F reads as U+000B: an explicit range never matches such a
 *    character (U+3000 in deepseek-llm's "　-。" included), while \s does.
 *  - \s is White_Space: ASCII \t \n \v \f \r and space, and the others through U+000B.
 * Qwen2's regex is Llama 3's with \p{N} for \p{N}{1,3}; llama.cpp sends it to std::regex,
 * and for this regex that search cuts exactly where the hand-written Llama 3 scan does
 * with one digit per word, so llama3_end serves both (the leftmost-first reasoning is
 * at llama3_end).
 */
#include "text/pretokenize.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "text/unicode.h"

/* ---- names -------------------------------------------------------------------------- */

static const struct {
    const char *name;
    tl__pretok rules;
} pretok_names[] = {
    /* the first name of each rule set is its canonical one */
    {"gpt-2", TL_PRETOK_GPT2},
    {"default", TL_PRETOK_DEFAULT},
    {"llama-bpe", TL_PRETOK_LLAMA3},
    {"qwen2", TL_PRETOK_QWEN2},
    {"deepseek-llm", TL_PRETOK_DEEPSEEK_LLM},
    {"deepseek-coder", TL_PRETOK_DEEPSEEK_CODER},
    {"falcon", TL_PRETOK_FALCON},
    {"starcoder", TL_PRETOK_STARCODER},
    {"mpt", TL_PRETOK_GPT2},
    {"llama3", TL_PRETOK_LLAMA3},
    {"llama-v3", TL_PRETOK_LLAMA3},
    {"refact", TL_PRETOK_STARCODER},
};

#define N_NAMES (sizeof(pretok_names) / sizeof(pretok_names[0]))

int tl__pretok_from_name(const char *name, size_t len, tl__pretok *out)
{
    for (size_t i = 0; i < N_NAMES; i++) {
        const char *known = pretok_names[i].name;
        if (strlen(known) == len && memcmp(known, name, len) == 0) {
            *out = pretok_names[i].rules;
            return 0;
        }
    }
    return -1;
}

const char *tl__pretok_name(tl__pretok rules)
{
    for (size_t i = 0; i < N_NAMES; i++)
        if (pretok_names[i].rules == rules)
            return pretok_names[i].name;
    return "?";
}

/* ---- character classes ----------------------------------------------------------- */

/* Per code point: its TL_UNICODE_* bits, and CLS_IN, which every code point inside the
 * current word has (llama.cpp's flags.as_uint() != 0: past the word's end all is 0). */
#define CLS_IN 0x10u

enum {
    IS_L = TL_UNICODE_LETTER, IS_N = TL_UNICODE_NUMBER, IS_W = TL_UNICODE_WHITESPACE,
    IS_P = TL_UNICODE_PUNCTUATION
};

/* The character sets of the regexes, as in llama.cpp's lists. */
typedef enum charset {
    SET_LETTER,          /* \p{L} */
    SET_NUMBER,          /* \p{N} */
    SET_PUNCT,           /* \p{P} */
    SET_PUNCT_DEFAULT,   /* [\p{P}\$\+<=>\^~\|] */
    SET_PUNCT_FALCON,    /* [\p{P}\$\+<=>\^~\|`] */
    SET_CR_LF,           /* [\r\n] */
    SET_DIGIT,           /* [0-9] */
    SET_CJK,             /* [一-龥ࠀ-一가-퟿]: U+0800-U+9FA5, U+AC00-U+D7FF */
    SET_DEEPSEEK_LETTER, /* deepseek-llm's cased letters, deepseek_letters below */
    SET_DEEPSEEK_PUNCT   /* [!-/:-~！-／：-～‘-‟　-。] */
} charset;

/* deepseek-llm's second regex, \s?[A-Za-zµÀ-ÖØ-öø-ƺ...𞤀-𞥃]+, as code point ranges in its
 * order. Six of its characters are canonical singletons (U+1F7D, U+1FBE, U+1FD3, U+1FDB,
 * U+2126, U+212A); read in their NFC forms the list would leave its order and some ranges
 * would run backwards, which std::wregex refuses, so these are the code points meant. */
static const uint32_t deepseek_letters[][2] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA},
    {0x1BC, 0x1BF}, {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377},
    {0x37B, 0x37D}, {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C},
    {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556},
    {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF},
    {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE},
    {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC},
    {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113},
    {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128},
    {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE},
    {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787},
    {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};

static int in_deepseek_letters(uint32_t c)
{
    size_t lo = 0, hi = sizeof(deepseek_letters) / sizeof(deepseek_letters[0]);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c < deepseek_letters[mid][0])
            hi = mid;
        else if (c > deepseek_letters[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* Whether code point c of classes cls is in set s. Whitespace above 0x7F is in none: the
 * \p sets hold no whitespace, and the explicit ranges see it as U+000B (see the top). */
static int in_set(charset s, uint32_t c, unsigned cls)
{
    if (c > 0x7F && (cls & IS_W))
        return 0;
    switch (s) {
    case SET_LETTER: return (cls & IS_L) != 0;
    case SET_NUMBER: return (cls & IS_N) != 0;
    case SET_PUNCT: return (cls & IS_P) != 0;
    case SET_PUNCT_FALCON:
        if (c == '`')
            return 1;
        /* fall through */
    case SET_PUNCT_DEFAULT:
        return (cls & IS_P) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
               c == '^' || c == '~' || c == '|';
    case SET_CR_LF: return c == '\r' || c == '\n';
    case SET_DIGIT: return c >= '0' && c <= '9';
    case SET_CJK: return (c >= 0x800 && c <= 0x9FA5) || (c >= 0xAC00 && c <= 0xD7FF);
    case SET_DEEPSEEK_LETTER: return in_deepseek_letters(c);
    case SET_DEEPSEEK_PUNCT:
        return (c >= '!' && c <= '/') || (c >= ':' && c <= '~') ||
               (c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF5E) ||
               (c >= 0x2018 && c <= 0x201F) || (c >= 0x3000 && c <= 0x3002);
    }
    return 0;
}

/* ---- passes ------------------------------------------------------------------------- */

typedef enum pass_kind {
    PASS_GPT2,        /* llama.cpp's custom GPT-2 split */
    PASS_LLAMA3,      /* llama.cpp's custom Llama 3 split; digits in words of `arg` */
    PASS_RUN,         /* S+ */
    PASS_EACH,        /* S */
    PASS_SPACE_RUN,   /* \s?S+ */
    PASS_TRIPLE,      /* SSS */
    PASS_TRAILING_WS, /* \s+$ */
    PASS_END
} pass_kind;

typedef struct pass {
    pass_kind kind;
    charset set;
    unsigned arg;
} pass;

#define MAX_PASSES 6

/* The regex lists of llama.cpp's llm_tokenizer_bpe, in order. */
static const pass rule_passes[TL_PRETOK_COUNT][MAX_PASSES + 1] = {
    [TL_PRETOK_GPT2] = {{PASS_GPT2, 0, 0}, {PASS_END, 0, 0}},
    [TL_PRETOK_DEFAULT] = {{PASS_RUN, SET_PUNCT_DEFAULT, 0},
                           {PASS_GPT2, 0, 0},
                           {PASS_RUN, SET_NUMBER, 0},
                           {PASS_TRIPLE, SET_DIGIT, 0},
                           {PASS_END, 0, 0}},
    [TL_PRETOK_LLAMA3] = {{PASS_LLAMA3, 0, 3}, {PASS_END, 0, 0}},
    [TL_PRETOK_QWEN2] = {{PASS_LLAMA3, 0, 1}, {PASS_END, 0, 0}},
    [TL_PRETOK_DEEPSEEK_LLM] = {{PASS_EACH, SET_CR_LF, 0},
                                {PASS_SPACE_RUN, SET_DEEPSEEK_LETTER, 0},
                                {PASS_SPACE_RUN, SET_DEEPSEEK_PUNCT, 0},
                                {PASS_TRAILING_WS, 0, 0},
                                {PASS_RUN, SET_CJK, 0},
                                {PASS_RUN, SET_NUMBER, 0},
                                {PASS_END, 0, 0}},
    [TL_PRETOK_DEEPSEEK_CODER] = {{PASS_EACH, SET_CR_LF, 0},
                                  {PASS_SPACE_RUN, SET_LETTER, 0},
                                  {PASS_SPACE_RUN, SET_PUNCT, 0},
                                  {PASS_RUN, SET_CJK, 0},
                                  {PASS_EACH, SET_NUMBER, 0},
                                  {PASS_END, 0, 0}},
    [TL_PRETOK_FALCON] = {{PASS_RUN, SET_PUNCT_FALCON, 0},
                          {PASS_GPT2, 0, 0},
                          {PASS_TRIPLE, SET_DIGIT, 0},
                          {PASS_END, 0, 0}},
    [TL_PRETOK_STARCODER] = {{PASS_EACH, SET_NUMBER, 0}, {PASS_GPT2, 0, 0}, {PASS_END, 0, 0}},
};

/* One pass over one word [lo, hi): cut() records where new words end. */
typedef struct word {
    const uint32_t *cpt;
    const unsigned char *cls;
    size_t lo, hi;
    uint32_t *out;
    size_t n_out;
    size_t last; /* the last end recorded, or lo */
} word;

static void cut(word *w, size_t end)
{
    if (end > w->last) {
        w->out[w->n_out++] = (uint32_t)end;
        w->last = end;
    }
}

#define OUT_OF_RANGE 0xFFFFFFFFu

/* Classes at pos: 0 past the word's end, as llama.cpp's _get_flags. */
static unsigned cls_at(const word *w, size_t pos)
{
    return pos < w->hi ? w->cls[pos] | CLS_IN : 0;
}

static uint32_t cpt_at(const word *w, size_t pos)
{
    return pos < w->hi ? w->cpt[pos] : OUT_OF_RANGE;
}

static int set_at(const word *w, charset s, size_t pos)
{
    return pos < w->hi && in_set(s, w->cpt[pos], w->cls[pos]);
}

/* 's|'t|'re|'ve|'m|'ll|'d at pos: the end of the match, or 0. With `any_case` each
 * letter matches either case (Llama 3's (?i:...); no code point above 0x7F lowercases
 * to one of these letters, so ASCII folding is the whole of it). */
static size_t contraction_end(const word *w, size_t pos, int any_case)
{
    if (w->cpt[pos] != '\'' || pos + 1 >= w->hi)
        return 0;
    uint32_t c1 = w->cpt[pos + 1], c2 = pos + 2 < w->hi ? w->cpt[pos + 2] : 0;
    if (any_case) {
        c1 = c1 >= 'A' && c1 <= 'Z' ? c1 + 32 : c1;
        c2 = c2 >= 'A' && c2 <= 'Z' ? c2 + 32 : c2;
    }
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
        return pos + 2;
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        return pos + 3;
    return 0;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * The end of the word that starts at pos. */
static size_t gpt2_end(const word *w, size_t pos)
{
    const unsigned L = IS_L, N = IS_N, W = IS_W;
    uint32_t c = w->cpt[pos];
    size_t end = contraction_end(w, pos, 0);
    if (end)
        return end;
    unsigned f2 = cls_at(w, c == ' ' ? pos + 1 : pos);
    if (f2 & L) { /* ' ?\p{L}+' */
        pos += c == ' ';
        while (cls_at(w, pos) & L)
            pos++;
        return pos;
    }
    if (f2 & N) { /* ' ?\p{N}+' */
        pos += c == ' ';
        while (cls_at(w, pos) & N)
            pos++;
        return pos;
    }
    if (!(f2 & (W | L | N)) && (f2 & CLS_IN)) { /* ' ?[^\s\p{L}\p{N}]+' */
        pos += c == ' ';
        for (unsigned f = cls_at(w, pos); (f & CLS_IN) && !(f & (W | L | N));)
            f = cls_at(w, ++pos);
        return pos;
    }
    size_t nw = 0;
    while (cls_at(w, pos + nw) & W)
        nw++;
    if (nw > 1 && cpt_at(w, pos + nw) != OUT_OF_RANGE) /* '\s+(?!\S)' */
        return pos + nw - 1;
    if (nw > 0) /* '\s+' */
        return pos + nw;
    return pos + 1; /* no match: the code point stands alone */
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}|
 *     ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+              with D = digits.
 * The end of the word that starts at pos. Leftmost-first, the first alternative that
 * can match at pos wins, and backtracking settles as follows: the optional prefix of
 * the letter run is taken only when a letter follows it (the prefix class holds no
 * letter); the punctuation run and its newlines need nothing after them; \s*[\r\n]+
 * ends after the last \r or \n of the whitespace run at pos; \s+(?!\S) keeps the run,
 * less its last character when a non-space follows. Every code point starts some
 * alternative, so no text is left between matches. llama.cpp's scan has one quirk: a
 * lone space at the word's end goes to the punctuation branch (which tests the space's
 * own flags there), making the same word " " that \s+ would. */
static size_t llama3_end(const word *w, size_t pos, unsigned digits)
{
    const unsigned L = IS_L, N = IS_N, W = IS_W;
    uint32_t c = w->cpt[pos];
    unsigned f = cls_at(w, pos);
    size_t end = contraction_end(w, pos, 1);
    if (end)
        return end;
    if (!(c == '\r' || c == '\n' || (f & N)) && ((f & L) || (cls_at(w, pos + 1) & L))) {
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        pos++;
        while (cls_at(w, pos) & L)
            pos++;
        return pos;
    }
    if (f & N) { /* \p{N}{1,D} */
        end = pos + 1;
        while (end - pos < digits && (cls_at(w, end) & N))
            end++;
        return end;
    }
    if (!((c == ' ' ? cls_at(w, pos + 1) : f) & (W | L | N))) {
        /* ' ?[^\s\p{L}\p{N}]+[\r\n]*' */
        pos += c == ' ';
        for (unsigned g = cls_at(w, pos); (g & CLS_IN) && !(g & (W | L | N));)
            g = cls_at(w, ++pos);
        while (cpt_at(w, pos) == '\r' || cpt_at(w, pos) == '\n')
            pos++;
        return pos;
    }
    size_t nw = 0, after_cr_lf = 0;
    for (; cls_at(w, pos + nw) & W; nw++)
        if (w->cpt[pos + nw] == '\r' || w->cpt[pos + nw] == '\n')
            after_cr_lf = pos + nw + 1;
    if (after_cr_lf) /* '\s*[\r\n]+' */
        return after_cr_lf;
    if (nw > 1 && cpt_at(w, pos + nw) != OUT_OF_RANGE) /* '\s+(?!\S)' */
        return pos + nw - 1;
    if (nw > 0) /* '\s+' */
        return pos + nw;
    return pos + 1;
}

/* A regex pass of the kinds below: each match and each stretch between matches is a
 * word. The search is leftmost: at each pos the pattern either matches (greedy, so a run
 * is maximal) or the scan moves on. \s?S+ only meets sets without whitespace, so the
 * optional space never competes with S. */
static void pass_regex(word *w, const pass *p)
{
    if (p->kind == PASS_TRAILING_WS) { /* \s+$: the whitespace that ends the word */
        size_t t = w->hi;
        while (t > w->lo && (w->cls[t - 1] & IS_W))
            t--;
        cut(w, t);
        cut(w, w->hi);
        return;
    }
    for (size_t pos = w->lo; pos < w->hi;) {
        size_t start = pos, end = 0;
        switch (p->kind) {
        case PASS_EACH:
            if (set_at(w, p->set, pos))
                end = pos + 1;
            break;
        case PASS_TRIPLE:
            if (set_at(w, p->set, pos) && set_at(w, p->set, pos + 1) &&
                set_at(w, p->set, pos + 2))
                end = pos + 3;
            break;
        case PASS_SPACE_RUN:
            if ((w->cls[pos] & IS_W) && set_at(w, p->set, pos + 1))
                pos++;
            /* fall through */
        case PASS_RUN:
            for (end = pos; set_at(w, p->set, end);)
                end++;
            if (end == pos)
                end = 0;
            break;
        default:
            break;
        }
        if (end) {
            cut(w, start);
            cut(w, end);
            pos = end;
        } else {
            pos = start + 1;
        }
    }
    cut(w, w->hi);
}

tl_status tl__pretokenize(tl__pretok rules, const uint32_t *cpts, size_t n, uint32_t *ends,
                          size_t *n_words)
{
    *n_words = 0;
    if (n == 0)
        return TL_OK;
    if ((unsigned)rules >= TL_PRETOK_COUNT)
        return tl_error_set(TL_ERR_INVALID, "pretokenize: unknown rules %d", (int)rules);
    const pass *passes = rule_passes[rules];
    size_t n_passes = 0;
    while (passes[n_passes].kind != PASS_END)
        n_passes++;
    unsigned char *cls = malloc(n);
    uint32_t *spare = n_passes > 1 ? malloc(n * sizeof(*spare)) : NULL;
    if (!cls || (n_passes > 1 && !spare)) {
        free(cls);
        free(spare);
        return tl_error_set(TL_ERR_NOMEM, "pretokenize: out of memory for %zu code points", n);
    }
    for (size_t i = 0; i < n; i++)
        cls[i] = (unsigned char)tl_unicode_class(cpts[i]);

    /* Pass k reads what pass k - 1 wrote and writes the other buffer; the last one
     * writes to ends. */
    uint32_t *buf[2] = {ends, spare};
    uint32_t whole = (uint32_t)n;
    const uint32_t *in = &whole;
    size_t n_cur = 1;
    for (size_t k = 0; k < n_passes; k++) {
        const pass *p = &passes[k];
        word w = {cpts, cls, 0, 0, buf[(n_passes - 1 - k) % 2], 0, 0};
        for (size_t i = 0; i < n_cur; i++) {
            w.lo = w.last = i ? in[i - 1] : 0;
            w.hi = in[i];
            if (p->kind == PASS_GPT2 || p->kind == PASS_LLAMA3)
                for (size_t pos = w.lo; pos < w.hi; pos = w.last)
                    cut(&w, p->kind == PASS_GPT2 ? gpt2_end(&w, pos)
                                                 : llama3_end(&w, pos, p->arg));
            else
                pass_regex(&w, p);
        }
        n_cur = w.n_out;
        in = w.out;
    }
    *n_words = n_cur;
    free(cls);
    free(spare);
    return TL_OK;
}
