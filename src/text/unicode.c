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
        return 0;
    }
    if (in_ranges(tl__ranges_letter, N_RANGES(tl__ranges_letter), cpt))
        c |= TL_UNICODE_LETTER;
    else if (in_ranges(tl__ranges_number, N_RANGES(tl__ranges_number), cpt))
        c |= TL_UNICODE_NUMBER;
    if (in_ranges(tl__ranges_space, N_RANGES(tl__ranges_space), cpt))
        c |= TL_UNICODE_WHITESPACE;
    return c;
}

size_t tl_utf8_decode(const unsigned char *s, size_t n, uint32_t *cpt)
{
    unsigned char b = s[0];
    if (b < 0x80) {
        *cpt = b;
        return 1;
    }
    size_t len;
    uint32_t c, min;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2, c = b & 0x1F, min = 0x80;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3, c = b & 0x0F, min = 0x800;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4, c = b & 0x07, min = 0x10000;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    if (c < min)
        return 0;
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
