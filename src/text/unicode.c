/* unicode.c - UTF-8 coding and code point classes by binary search over the generated
 * range tables. The tables are sorted and disjoint (gen_unicode_tables.py checks by
 * construction), so a class test is one bsearch over a few hundred ranges.
 */
#include "text/unicode.h"

#include "text/unicode_tables.inc"

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cpt)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cpt < r[mid][0])
            hi = mid;
        else if (cpt > r[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

#define N_RANGES(a) (sizeof(a) / sizeof((a)[0]))

unsigned tl_unicode_class(uint32_t cpt)
{
    unsigned c = 0;
    if (cpt < 0x80) { /* fast path */
        if ((cpt | 0x20) >= 'a' && (cpt | 0x20) <= 'z')
            return TL_UNICODE_LETTER;
        if (cpt >= '0' && cpt <= '9')
            return TL_UNICODE_NUMBER;
        if (cpt == ' ' || (cpt >= 0x09 && cpt <= 0x0D))
            return TL_UNICODE_WHITESPACE;
        if (in_ranges(tl__ranges_punct, N_RANGES(tl__ranges_punct), cpt))
            return TL_UNICODE_PUNCTUATION;
        return 0;
    }
    if (in_ranges(tl__ranges_letter, N_RANGES(tl__ranges_letter), cpt))
        c |= TL_UNICODE_LETTER;
    else if (in_ranges(tl__ranges_number, N_RANGES(tl__ranges_number), cpt))
        c |= TL_UNICODE_NUMBER;
    else if (in_ranges(tl__ranges_punct, N_RANGES(tl__ranges_punct), cpt))
        c |= TL_UNICODE_PUNCTUATION;
    if (in_ranges(tl__ranges_space, N_RANGES(tl__ranges_space), cpt))
        c |= TL_UNICODE_WHITESPACE;
    return c;
}

size_t tl_utf8_decode(const unsigned char *s, size_t n, uint32_t *cpt)
{
    unsigned char lo, hi; /* allowed range of the second byte */
    size_t len = tl_utf8_strict_len(s[0], &lo, &hi);
    if (len == 1) {
        *cpt = s[0];
        return 1;
    }
    if (len == 0 || n < len || s[1] < lo || s[1] > hi)
        return 0;
    /* lo/hi exclude overlongs, so the value needs no minimum check */
    uint32_t c = s[0] & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    *cpt = c;
    return len;
}

size_t tl_utf8_encode(uint32_t cpt, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cpt < 0x80) {
        o[0] = (unsigned char)cpt;
        return 1;
    }
    if (cpt < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cpt >> 6));
        o[1] = (unsigned char)(0x80 | (cpt & 0x3F));
        return 2;
    }
    if (cpt < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cpt >> 12));
        o[1] = (unsigned char)(0x80 | ((cpt >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cpt & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cpt >> 18));
    o[1] = (unsigned char)(0x80 | ((cpt >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cpt >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cpt & 0x3F));
    return 4;
}
