/* utf8_stream.c - tl_utf8_stream (text/tokenizer.h): releases decoded token bytes only as
 * complete UTF-8 characters. A pending prefix is kept only while it can still become a
 * strictly valid character (text/unicode.h's tl_utf8_strict_len, the rule tl_utf8_decode
 * applies); once it cannot, it is released as one U+FFFD and the byte that broke it is
 * read afresh, so the output is always valid UTF-8.
 */
#include "text/tokenizer.h"

#include <string.h>

#include "text/unicode.h"

static size_t put_fffd(char *out)
{
    memcpy(out, "\xEF\xBF\xBD", 3);
    return 3;
}

size_t tl_utf8_stream_push(tl_utf8_stream *s, const char *bytes, size_t len, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)bytes[i], lo, hi;
        if (s->n_pending) {
            size_t want = tl_utf8_strict_len(s->pending[0], &lo, &hi);
            if (s->n_pending > 1) /* only the second byte has a narrower range */
                lo = 0x80, hi = 0xBF;
            if (b >= lo && b <= hi) {
                s->pending[s->n_pending++] = b;
                if (s->n_pending == want) {
                    memcpy(out + n, s->pending, s->n_pending);
                    n += s->n_pending;
                    s->n_pending = 0;
                }
                continue;
            }
            /* the pending prefix can never complete: one U+FFFD for it, then b
             * starts afresh */
            n += put_fffd(out + n);
            s->n_pending = 0;
        }
        size_t l = tl_utf8_strict_len(b, &lo, &hi);
        if (l == 1)
            out[n++] = (char)b;
        else if (l == 0)
            n += put_fffd(out + n);
        else
            s->pending[s->n_pending++] = b;
    }
    return n;
}

size_t tl_utf8_stream_flush(tl_utf8_stream *s, char *out)
{
    if (!s->n_pending)
        return 0;
    s->n_pending = 0;
    return put_fffd(out);
}
