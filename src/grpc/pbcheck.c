/*
 * pbcheck: see pbcheck.h.
 */
#include "grpc/pbcheck.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

bool
pbcheck_utf8_bytes(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        /* ASCII eight bytes at a time: names, tags and keys mostly are. */
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if ((w & 0x8080808080808080ULL) == 0) {
                i += 8;
                continue;
            }
        }
        unsigned char c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2, cp = c & 0x1F, min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3, cp = c & 0x0F, min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;   /* a continuation byte, C0/C1, F5-FF */
        }
        if (n - i < len)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
            cp = cp << 6 | (p[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

static bool check(const ProtobufCMessage *m, char *why, size_t cap, int depth);

static bool
check_value(const ProtobufCFieldDescriptor *f, const void *v, char *why, size_t cap, int depth)
{
    if (f->type == PROTOBUF_C_TYPE_STRING) {
        const char *s;
        memcpy(&s, v, sizeof(s));
        /* Most are unset (protobuf-c's shared ""): no strlen, no call. */
        if (s != NULL && s[0] != '\0' && !pbcheck_utf8_bytes((const unsigned char *)s, strlen(s))) {
            snprintf(why, cap, "string field %s is not valid UTF-8", f->name);
            return false;
        }
        return true;
    }
    const ProtobufCMessage *sub;
    memcpy(&sub, v, sizeof(sub));
    return sub == NULL || check(sub, why, cap, depth + 1);
}

static bool
check(const ProtobufCMessage *m, char *why, size_t cap, int depth)
{
    /* protobuf-c bounds the nesting it unpacks; this only guards the
     * stack against a descriptor cycle. */
    if (depth > 64)
        return true;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        const char *base = (const char *)m;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            uint32_t which;
            memcpy(&which, base + f->quantifier_offset, sizeof(which));
            if (which != f->id)
                continue;
        }
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n;
            memcpy(&n, base + f->quantifier_offset, sizeof(n));
            const char *arr;
            memcpy(&arr, base + f->offset, sizeof(arr));
            for (size_t k = 0; k < n && arr != NULL; k++)
                if (!check_value(f, arr + k * sizeof(void *), why, cap, depth))
                    return false;
        } else if (!check_value(f, base + f->offset, why, cap, depth)) {
            return false;
        }
    }
    return true;
}

bool
pbcheck_utf8(const ProtobufCMessage *m, char *why, size_t cap)
{
    return check(m, why, cap, 0);
}
