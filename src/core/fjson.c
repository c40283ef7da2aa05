/*
 * fjson: see fjson.h.  The escape tables follow fastjson 1.2.69's
 * SerializeWriter.writeStringWithDoubleQuote (IOUtils.specicalFlags_
 * doubleQuotes for the default mode, the browserCompatible branch for the
 * other); \u escapes use upper-case hex digits, as fastjson's do.
 */
#include "core/fjson.h"

#include <errno.h>

#include "core/jstr.h"

static const char HEX[] = "0123456789ABCDEF";

void
fjw_init(struct fjw *w, struct buf *b, bool browser)
{
    w->b = b;
    w->err = 0;
    w->browser = browser;
}

void
fjw_raw(struct fjw *w, const char *s, size_t n)
{
    if (w->err == 0 && n > 0 && buf_append(w->b, s, n) != 0)
        w->err = -ENOMEM;
}

static void
put_u(struct fjw *w, uint32_t unit)
{
    char e[6] = { '\\', 'u', HEX[(unit >> 12) & 15], HEX[(unit >> 8) & 15],
                  HEX[(unit >> 4) & 15], HEX[unit & 15] };
    fjw_raw(w, e, sizeof(e));
}

/* The two-character escape of c, or 0. */
static char
short_escape(unsigned char c, bool browser)
{
    switch (c) {
    case '\b': return 'b';
    case '\t': return 't';
    case '\n': return 'n';
    case '\f': return 'f';
    case '\r': return 'r';
    case '"': return '"';
    case '\\': return '\\';
    case '/': return browser ? '/' : 0;
    default: return 0;
    }
}

void
fjw_str(struct fjw *w, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    fjw_raw(w, "\"", 1);
    size_t run = 0;  /* start of bytes copied as they are */
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        char se = short_escape(c, w->browser);
        bool plain_ascii = c >= 0x20 && c < 0x7F && se == 0;
        if (plain_ascii) {
            i++;
            continue;
        }
        if (c >= 0x80 && !w->browser) {
            /* UTF-8 passes through, except the C1 controls U+0080-U+009F
             * (C2 80 - C2 9F), which fastjson escapes. */
            if (c == 0xC2 && i + 1 < n && s[i + 1] >= 0x80 && s[i + 1] <= 0x9F) {
                fjw_raw(w, str + run, i - run);
                put_u(w, s[i + 1]);
                i += 2;
                run = i;
            } else {
                i++;
            }
            continue;
        }
        fjw_raw(w, str + run, i - run);
        if (se != 0) {
            char e[2] = { '\\', se };
            fjw_raw(w, e, 2);
            i++;
        } else if (c < 0x80) {
            put_u(w, c);  /* other controls and DEL */
            i++;
        } else {
            uint16_t u[2];
            int k = utf16_units(utf8_next(s, n, &i), u);
            for (int j = 0; j < k; j++)
                put_u(w, u[j]);
        }
        run = i;
    }
    fjw_raw(w, str + run, n - run);
    fjw_raw(w, "\"", 1);
}

/* Two digits a step from a table: a send's reply has a queue offset and
 * a queue id to write, and a division by 100 costs what one by 10 does. */
static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

char *
fjson_i64_digits(char *end, int64_t v)
{
    char *p = end;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    while (u >= 100) {
        uint64_t q = u / 100;
        p -= 2;
        memcpy(p, digit_pairs + 2 * (u - q * 100), 2);
        u = q;
    }
    if (u >= 10) {
        p -= 2;
        memcpy(p, digit_pairs + 2 * u, 2);
    } else {
        *--p = (char)('0' + u);
    }
    if (v < 0)
        *--p = '-';
    return p;
}

bool
fjson_plain(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7F || c == '"' || c == '\\')
            return false;
    }
    return true;
}

void
fjw_i64(struct fjw *w, int64_t v)
{
    /* By hand: this runs a dozen times per route body. */
    char tmp[24];
    char *p = fjson_i64_digits(tmp + sizeof(tmp), v);
    fjw_raw(w, p, (size_t)(tmp + sizeof(tmp) - p));
}

void
fjw_long_key(struct fjw *w, int64_t v)
{
    if (w->browser)
        fjw_raw(w, "\"", 1);
    fjw_i64(w, v);
    fjw_raw(w, w->browser ? "\":" : ":", w->browser ? 2 : 1);
}
