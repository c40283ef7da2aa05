/* topic_config: see topic_config.h. */
#include "broker/topic_config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* {{{ Writing into reserved room: a table of 20,000 topics is encoded on
 * every persist, and per-piece buf_append calls cost more than the bytes. */

/* Worst case of one escaped name: \u00XX for every byte, and quotes. */
static size_t
jstr_room(size_t n)
{
    return 6 * n + 2;
}

static char *
w_lit(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

#define W_LIT(p, s) w_lit((p), (s), sizeof(s) - 1)

static char *
w_i64(char *p, int64_t v)
{
    char tmp[24];
    char *e = tmp + sizeof(tmp), *q = e;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        *--q = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        *--q = '-';
    return w_lit(p, q, (size_t)(e - q));
}

static char *
w_jstr(char *p, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    *p++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7F) {
            *p++ = (char)c;
            continue;
        }
        *p++ = '\\';
        switch (c) {
        case '"': *p++ = '"'; break;
        case '\\': *p++ = '\\'; break;
        case '\b': *p++ = 'b'; break;
        case '\f': *p++ = 'f'; break;
        case '\n': *p++ = 'n'; break;
        case '\r': *p++ = 'r'; break;
        case '\t': *p++ = 't'; break;
        default:
            p = W_LIT(p, "u00");
            *p++ = hex[c >> 4];
            *p++ = hex[c & 15];
            break;
        }
    }
    *p++ = '"';
    return p;
}

/* }}} */

const char *
topic_filter_name(uint8_t t)
{
    return t == TOPIC_MULTI_TAG ? "MULTI_TAG" : "SINGLE_TAG";
}

static int
put(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int
json_put_string(struct buf *b, const char *s, size_t n)
{
    /* fastjson: `"` and `\` escaped, control characters as \b \f \n \r \t
     * or \u00XX (DEL too), everything else (UTF-8 included) as is. */
    int rc = buf_reserve(b, n + 2);
    if (rc != 0)
        return rc;
    buf_append(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c != 0x7F)
            continue;
        if ((rc = buf_append(b, s + run, i - run)) != 0)
            return rc;
        char esc[8];
        switch (c) {
        case '"': memcpy(esc, "\\\"", 3); break;
        case '\\': memcpy(esc, "\\\\", 3); break;
        case '\b': memcpy(esc, "\\b", 3); break;
        case '\f': memcpy(esc, "\\f", 3); break;
        case '\n': memcpy(esc, "\\n", 3); break;
        case '\r': memcpy(esc, "\\r", 3); break;
        case '\t': memcpy(esc, "\\t", 3); break;
        default: snprintf(esc, sizeof(esc), "\\u%04x", c); break;
        }
        if ((rc = put(b, esc)) != 0)
            return rc;
        run = i + 1;
    }
    if ((rc = buf_append(b, s + run, n - run)) != 0)
        return rc;
    return buf_append(b, "\"", 1);
}

int
json_put_data_version(struct buf *b, struct data_version dv)
{
    char tmp[80];
    int n = snprintf(tmp, sizeof(tmp), "{\"counter\":%" PRId64 ",\"timestamp\":%" PRId64 "}",
                     dv.counter, dv.timestamp);
    return buf_append(b, tmp, (size_t)n);
}

/* Room one record needs besides its escaped name (twice: key and value). */
#define CONFIG_ROOM 192

/* Writes one TopicConfig object at p (room: CONFIG_ROOM + jstr_room(nlen)).
 * With perm >= 0, the TopicConfig(name, read, write, perm) a Java broker
 * registers instead when its own permission is not read+write: default
 * filter type, sysflag and order. */
static char *
w_config(char *p, const char *name, size_t nlen, const struct topic_config *cfg,
         int perm)
{
    struct topic_config plain;
    const struct topic_config *c = cfg;
    if (perm >= 0) {
        memset(&plain, 0, sizeof(plain));
        plain.read_queue_nums = cfg->read_queue_nums;
        plain.write_queue_nums = cfg->write_queue_nums;
        plain.perm = perm;
        c = &plain;
    }
    p = c->order ? W_LIT(p, "{\"order\":true,\"perm\":") : W_LIT(p, "{\"order\":false,\"perm\":");
    p = w_i64(p, c->perm);
    p = W_LIT(p, ",\"readQueueNums\":");
    p = w_i64(p, c->read_queue_nums);
    p = c->filter_type == TOPIC_MULTI_TAG
            ? W_LIT(p, ",\"topicFilterType\":\"MULTI_TAG\",\"topicName\":")
            : W_LIT(p, ",\"topicFilterType\":\"SINGLE_TAG\",\"topicName\":");
    p = w_jstr(p, name, nlen);
    p = W_LIT(p, ",\"topicSysFlag\":");
    p = w_i64(p, c->topic_sys_flag);
    p = W_LIT(p, ",\"writeQueueNums\":");
    p = w_i64(p, c->write_queue_nums);
    *p++ = '}';
    return p;
}

static int
config_json(struct buf *b, const char *name, size_t nlen,
            const struct topic_config *c, int perm)
{
    int rc = buf_reserve(b, CONFIG_ROOM + jstr_room(nlen));
    if (rc != 0)
        return rc;
    char *p = (char *)buf_tail(b);
    b->end += (size_t)(w_config(p, name, nlen, c, perm) - p);
    return 0;
}

int
topic_config_json(struct buf *b, const char *name, size_t nlen,
                  const struct topic_config *c)
{
    return config_json(b, name, nlen, c, -1);
}

int
topic_wrapper_json(struct buf *b, const struct config_snapshot *s, int perm)
{
    size_t room = 128;
    for (size_t i = 0; i < s->count; i++)
        room += CONFIG_ROOM + 2 * jstr_room(s->items[i].name_len) + 2;
    int rc = buf_reserve(b, room);
    if (rc != 0)
        return rc;
    char *p = (char *)buf_tail(b), *start = p;
    p = W_LIT(p, "{\"dataVersion\":{\"counter\":");
    p = w_i64(p, s->dv.counter);
    p = W_LIT(p, ",\"timestamp\":");
    p = w_i64(p, s->dv.timestamp);
    p = W_LIT(p, "},\"topicConfigTable\":{");
    for (size_t i = 0; i < s->count; i++) {
        const struct config_item *it = &s->items[i];
        if (i > 0)
            *p++ = ',';
        p = w_jstr(p, it->name, it->name_len);
        *p++ = ':';
        p = w_config(p, it->name, it->name_len, it->rec, perm);
    }
    p = W_LIT(p, "}}");
    b->end += (size_t)(p - start);
    return 0;
}

/* An int32 length, then the bytes. */
static int
put_record(struct buf *b, const char *p, size_t n)
{
    int rc = buf_put_be32(b, (uint32_t)n);
    return rc != 0 ? rc : buf_append(b, p, n);
}

int
topic_register_records(struct buf *b, const struct config_snapshot *s,
                       int perm)
{
    char tmp[96];
    int n = snprintf(tmp, sizeof(tmp), "{\"counter\":%" PRId64 ",\"timestamp\":%" PRId64 "}",
                     s->dv.counter, s->dv.timestamp);
    int rc = put_record(b, tmp, (size_t)n);
    if (rc == 0)
        rc = buf_put_be32(b, (uint32_t)s->count);
    for (size_t i = 0; rc == 0 && i < s->count; i++) {
        const struct config_item *it = &s->items[i];
        const struct topic_config *c = it->rec;
        n = snprintf(tmp, sizeof(tmp), " %d %d %d %s", (int)c->read_queue_nums,
                     (int)c->write_queue_nums, perm >= 0 ? perm : (int)c->perm,
                     topic_filter_name(perm >= 0 ? TOPIC_SINGLE_TAG : c->filter_type));
        rc = buf_put_be32(b, (uint32_t)(it->name_len + (size_t)n));
        if (rc == 0)
            rc = buf_append(b, it->name, it->name_len);
        if (rc == 0)
            rc = buf_append(b, tmp, (size_t)n);
    }
    if (rc == 0)
        rc = put_record(b, "[]", 2);
    return rc;
}
