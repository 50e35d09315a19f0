/* unicode.h - the little Unicode the tokenizers need: UTF-8 decoding and encoding, and
 * membership in \p{L}, \p{N}, \p{P} and \s (White_Space), from generated range tables
 * (unicode_tables.inc, made by gen_unicode_tables.py). No global state.
 */
#ifndef TL_TEXT_UNICODE_H
#define TL_TEXT_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#define TL_UNICODE_REPLACEMENT 0xFFFDu

enum {
    TL_UNICODE_LETTER = 1,     /* \p{L} */
    TL_UNICODE_NUMBER = 2,     /* \p{N} */
    TL_UNICODE_WHITESPACE = 4, /* \s */
    TL_UNICODE_PUNCTUATION = 8 /* \p{P} */
};

/* Bit set of TL_UNICODE_* classes of a code point (0 for anything else, including
 * values beyond U+10FFFF). Letter, number and punctuation are general categories, so at
 * most one of them is set; no whitespace character has one of them. */
unsigned tl_unicode_class(uint32_t cpt);

/* Decodes one strictly valid UTF-8 character (no overlongs, surrogates or values past
 * U+10FFFF) at s[0..n). Returns its length (1..4) and sets *cpt; for an invalid or
 * truncated sequence returns 0 and leaves *cpt unset. n must be >= 1. */
size_t tl_utf8_decode(const unsigned char *s, size_t n, uint32_t *cpt);

/* Writes cpt (<= U+10FFFF) as UTF-8 to out (>= 4 bytes); returns the length. */
size_t tl_utf8_encode(uint32_t cpt, char *out);

/* Length (1..4) of the strictly valid UTF-8 sequence lead byte b starts, 0 if b cannot
 * start one (a continuation byte, C0, C1, F5..FF). Sets [*lo, *hi] to the range the
 * second byte must fall in, which rules out overlongs, surrogates and values past
 * U+10FFFF; every later byte is 0x80..0xBF. The one definition of validity, shared by
 * tl_utf8_decode and tl_utf8_stream. */
static inline size_t tl_utf8_strict_len(unsigned char b, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80, *hi = 0xBF;
    if (b < 0x80)
        return 1;
    if (b >= 0xC2 && b <= 0xDF)
        return 2;
    if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) *lo = 0xA0;
        if (b == 0xED) *hi = 0x9F; /* no surrogates */
        return 3;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) *lo = 0x90;
        if (b == 0xF4) *hi = 0x8F;
        return 4;
    }
    return 0;
}

/* Length of the UTF-8 sequence a lead byte announces, as llama.cpp's unicode_len_utf8:
 * by its high nibble, 1 for ASCII and stray continuation bytes. */
static inline size_t tl_utf8_lead_len(unsigned char b)
{
    static const unsigned char lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[b >> 4];
}

#endif
