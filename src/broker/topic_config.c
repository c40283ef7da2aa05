/* topic_config: see topic_config.h. */
#include "broker/topic_config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

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

/* Appends the decimal text of v (snprintf costs more than the rest of a
 * record; a 20,000-topic table is encoded on every persist). */
static int
put_i64(struct buf *b, int64_t v)
{
    char tmp[24];
    char *e = tmp + sizeof(tmp), *p = e;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        *--p = '-';
    return buf_append(b, p, (size_t)(e - p));
}

#define PUT_LIT(b, s) buf_append((b), (s), sizeof(s) - 1)

/* With perm >= 0, the TopicConfig(name, read, write, perm) a Java broker
 * registers instead when its own permission is not read+write: default
 * filter type, sysflag and order. */
static int
config_json(struct buf *b, const char *name, size_t nlen,
            const struct topic_config *cfg, int perm)
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
    int rc = buf_reserve(b, nlen + 160);
    if (rc != 0)
        return rc;
    if (c->order)
        PUT_LIT(b, "{\"order\":true,\"perm\":");
    else
        PUT_LIT(b, "{\"order\":false,\"perm\":");
    put_i64(b, c->perm);
    PUT_LIT(b, ",\"readQueueNums\":");
    put_i64(b, c->read_queue_nums);
    if (c->filter_type == TOPIC_MULTI_TAG)
        PUT_LIT(b, ",\"topicFilterType\":\"MULTI_TAG\",\"topicName\":");
    else
        PUT_LIT(b, ",\"topicFilterType\":\"SINGLE_TAG\",\"topicName\":");
    if ((rc = json_put_string(b, name, nlen)) != 0)
        return rc;
    if ((rc = buf_reserve(b, 64)) != 0)
        return rc;
    PUT_LIT(b, ",\"topicSysFlag\":");
    put_i64(b, c->topic_sys_flag);
    PUT_LIT(b, ",\"writeQueueNums\":");
    put_i64(b, c->write_queue_nums);
    return PUT_LIT(b, "}");
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
    int rc = put(b, "{\"dataVersion\":");
    if (rc == 0)
        rc = json_put_data_version(b, s->dv);
    if (rc == 0)
        rc = put(b, ",\"topicConfigTable\":{");
    for (size_t i = 0; rc == 0 && i < s->count; i++) {
        const struct config_item *it = &s->items[i];
        if (i > 0)
            rc = buf_append(b, ",", 1);
        if (rc == 0)
            rc = json_put_string(b, it->name, it->name_len);
        if (rc == 0)
            rc = buf_append(b, ":", 1);
        if (rc == 0)
            rc = config_json(b, it->name, it->name_len, it->rec, perm);
    }
    if (rc == 0)
        rc = put(b, "}}");
    return rc;
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
