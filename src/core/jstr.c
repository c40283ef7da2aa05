/* jstr: see jstr.h. */
#include "core/jstr.h"

#include <string.h>

uint32_t
utf8_next(const uint8_t *s, size_t n, size_t *i)
{
    uint8_t c = s[*i];
    if (c < 0x80) {
        (*i)++;
        return c;
    }
    /* Lead bytes C0, C1 and F5-FF never start a well-formed sequence. */
    int len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    if (len == 0 || *i + (size_t)len > n)
        goto bad;
    uint32_t cp = c & (0x3F >> (len - 1));
    for (int k = 1; k < len; k++) {
        uint8_t cc = s[*i + (size_t)k];
        if ((cc & 0xC0) != 0x80)
            goto bad;
        cp = (cp << 6) | (cc & 0x3F);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        goto bad;
    *i += (size_t)len;
    return cp;
bad:
    (*i)++;
    return JSTR_REPLACEMENT;
}

int
java_compare(const char *a, size_t an, const char *b, size_t bn)
{
    const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
    size_t i = 0, j = 0;
    /* Unit by unit; k counts the units of the current code points
     * consumed (a pair's second unit is compared after its first). */
    uint16_t ux[2], uy[2];
    int nx = 0, ny = 0, kx = 0, ky = 0;
    for (;;) {
        if (kx == nx) {
            if (i == an)
                break;
            nx = x[i] < 0x80 ? (ux[0] = x[i++], 1) : utf16_units(utf8_next(x, an, &i), ux);
            kx = 0;
        }
        if (ky == ny) {
            if (j == bn)
                return 1;
            ny = y[j] < 0x80 ? (uy[0] = y[j++], 1) : utf16_units(utf8_next(y, bn, &j), uy);
            ky = 0;
        }
        if (ux[kx] != uy[ky])
            return ux[kx] < uy[ky] ? -1 : 1;
        kx++;
        ky++;
    }
    return ky == ny && j == bn ? 0 : -1;
}

int32_t
java_hash_more(int32_t h, const char *s, size_t n)
{
    const uint8_t *u = (const uint8_t *)s;
    uint32_t x = (uint32_t)h;  /* Java's int wrap-around, without UB */
    size_t i = 0;
    /* Four ASCII bytes a step while they last: x*31^4 + a*31^3 + b*31^2
     * + c*31 + d, the same sum as four steps with a shorter chain (the
     * index hashes two keys of every message stored); the rest a unit
     * at a time. */
    uint32_t w4;
    while (n - i >= 4 && (memcpy(&w4, u + i, 4), (w4 & 0x80808080u) == 0)) {
        x = x * 923521u + u[i] * 29791u + u[i + 1] * 961u + u[i + 2] * 31u + u[i + 3];
        i += 4;
    }
    while (i < n) {
        if (u[i] < 0x80) {
            x = x * 31u + u[i++];
            continue;
        }
        uint16_t units[2];
        int k = utf16_units(utf8_next(u, n, &i), units);
        for (int j = 0; j < k; j++)
            x = x * 31u + units[j];
    }
    return (int32_t)x;
}

int32_t
java_hash(const char *s, size_t n)
{
    return java_hash_more(0, s, n);
}
