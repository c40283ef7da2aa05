/*
 * topic_config: see topic_config.h.  JSON goes through route/fjson (the
 * one home of fastjson's output rules); the wrapper, written on every
 * persist of a table that may hold tens of thousands of topics, is
 * written into room reserved once, names copied as they are when fastjson
 * would not escape them (every valid name) and through fjw_str otherwise.
 */
#include "broker/topic_config.h"

#include <errno.h>
#include <string.h>

#include "core/fjson.h"

const char *
topic_filter_name(uint8_t t)
{
    return t == TOPIC_MULTI_TAG ? "MULTI_TAG" : "SINGLE_TAG";
}

static const char *const msg_types[] = {
    NULL, "UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED",
};

const char *
topic_msg_type_name(uint8_t t)
{
    return t >= 1 && t <= TOPIC_MSG_COUNT ? msg_types[t] : NULL;
}

uint8_t
topic_msg_type_parse(const char *s, size_t n)
{
    for (uint8_t t = 1; t <= TOPIC_MSG_COUNT; t++)
        if (strlen(msg_types[t]) == n && memcmp(msg_types[t], s, n) == 0)
            return t;
    return 0;
}

static bool
has_attributes(const struct topic_config *c)
{
    return c->message_type != 0 || c->attr_flags != 0;
}

/* With perm >= 0, the TopicConfig(name, read, write, perm) a Java broker
 * registers instead when its own permission is not read+write: default
 * filter type, sysflag and order. */
static const struct topic_config *
as_registered(const struct topic_config *cfg, int perm, struct topic_config *plain)
{
    if (perm < 0)
        return cfg;
    memset(plain, 0, sizeof(*plain));
    plain->read_queue_nums = cfg->read_queue_nums;
    plain->write_queue_nums = cfg->write_queue_nums;
    plain->perm = perm;
    return plain;
}

/* {{{ Writing into reserved room */

/* Room one record needs besides its name (which appears twice). */
#define CONFIG_ROOM 320

/* Worst case of one name through fjw_str: \uXXXX per byte, and quotes. */
static size_t
name_room(size_t n)
{
    return 6 * n + 2;
}

struct cursor {
    struct buf *b;
    char *p;
};

static void
w_lit(struct cursor *c, const char *s, size_t n)
{
    memcpy(c->p, s, n);
    c->p += n;
}

#define W_LIT(c, s) w_lit((c), (s), sizeof(s) - 1)

static void
w_i64(struct cursor *c, int64_t v)
{
    char tmp[24];
    char *s = fjson_i64_digits(tmp + sizeof(tmp), v);
    w_lit(c, s, (size_t)(tmp + sizeof(tmp) - s));
}

/* A name as a JSON string.  The fallback appends through the buffer,
 * which has the room reserved, so it never moves. */
static void
w_name(struct cursor *c, const char *s, size_t n)
{
    if (fjson_plain(s, n)) {
        *c->p++ = '"';
        w_lit(c, s, n);
        *c->p++ = '"';
        return;
    }
    c->b->end = (size_t)((uint8_t *)c->p - c->b->data);
    struct fjw w;
    fjw_init(&w, c->b, false);
    fjw_str(&w, s, n);
    c->p = (char *)buf_tail(c->b);
}

/* The attributes map, in its HashMap order (cleanup.policy,
 * message.type, queue.type: the buckets of their hashes). */
static void
w_attributes(struct cursor *c, const struct topic_config *cfg)
{
    bool first = true;
    *c->p++ = '{';
    if (cfg->attr_flags & TOPIC_ATTR_CLEANUP_DELETE) {
        W_LIT(c, "\"cleanup.policy\":\"DELETE\"");
        first = false;
    }
    const char *mt = topic_msg_type_name(cfg->message_type);
    if (mt != NULL) {
        if (!first)
            *c->p++ = ',';
        W_LIT(c, "\"message.type\":\"");
        w_lit(c, mt, strlen(mt));
        *c->p++ = '"';
        first = false;
    }
    if (cfg->attr_flags & TOPIC_ATTR_SIMPLE_CQ) {
        if (!first)
            *c->p++ = ',';
        W_LIT(c, "\"queue.type\":\"SimpleCQ\"");
    }
    *c->p++ = '}';
}

static void
w_config(struct cursor *c, const char *name, size_t nlen,
         const struct topic_config *cfg)
{
    if (has_attributes(cfg)) {
        W_LIT(c, "{\"attributes\":");
        w_attributes(c, cfg);
        *c->p++ = ',';
    } else {
        *c->p++ = '{';
    }
    if (cfg->order)
        W_LIT(c, "\"order\":true,\"perm\":");
    else
        W_LIT(c, "\"order\":false,\"perm\":");
    w_i64(c, cfg->perm);
    W_LIT(c, ",\"readQueueNums\":");
    w_i64(c, cfg->read_queue_nums);
    if (cfg->filter_type == TOPIC_MULTI_TAG)
        W_LIT(c, ",\"topicFilterType\":\"MULTI_TAG\",\"topicName\":");
    else
        W_LIT(c, ",\"topicFilterType\":\"SINGLE_TAG\",\"topicName\":");
    w_name(c, name, nlen);
    W_LIT(c, ",\"topicSysFlag\":");
    w_i64(c, cfg->topic_sys_flag);
    W_LIT(c, ",\"writeQueueNums\":");
    w_i64(c, cfg->write_queue_nums);
    *c->p++ = '}';
}

/* }}} */

int
topic_config_json(struct buf *b, const char *name, size_t nlen,
                  const struct topic_config *cfg)
{
    int rc = buf_reserve(b, CONFIG_ROOM + name_room(nlen));
    if (rc != 0)
        return rc;
    struct cursor c = { b, (char *)buf_tail(b) };
    w_config(&c, name, nlen, cfg);
    b->end = (size_t)((uint8_t *)c.p - b->data);
    return 0;
}

int
topic_wrapper_json(struct buf *b, const struct config_snapshot *s, int perm)
{
    size_t room = 128;
    for (size_t i = 0; i < s->count; i++)
        room += CONFIG_ROOM + 2 * name_room(s->items[i].name_len) + 2;
    int rc = buf_reserve(b, room);
    if (rc != 0)
        return rc;
    struct cursor c = { b, (char *)buf_tail(b) };
    W_LIT(&c, "{\"dataVersion\":{\"counter\":");
    w_i64(&c, s->dv.counter);
    W_LIT(&c, ",\"timestamp\":");
    w_i64(&c, s->dv.timestamp);
    W_LIT(&c, "},\"topicConfigTable\":{");
    for (size_t i = 0; i < s->count; i++) {
        const struct config_item *it = &s->items[i];
        struct topic_config plain;
        if (i > 0)
            *c.p++ = ',';
        w_name(&c, it->name, it->name_len);
        *c.p++ = ':';
        w_config(&c, it->name, it->name_len, as_registered(it->rec, perm, &plain));
    }
    W_LIT(&c, "}}");
    b->end = (size_t)((uint8_t *)c.p - b->data);
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
    struct buf dv;
    buf_init(&dv);
    struct fjw w;
    fjw_init(&w, &dv, false);
    fjw_lit(&w, "{\"counter\":");
    fjw_i64(&w, s->dv.counter);
    fjw_lit(&w, ",\"timestamp\":");
    fjw_i64(&w, s->dv.timestamp);
    fjw_lit(&w, "}");
    int rc = w.err != 0 ? w.err : put_record(b, (const char *)buf_head(&dv), buf_len(&dv));
    buf_free(&dv);
    if (rc == 0)
        rc = buf_put_be32(b, (uint32_t)s->count);
    /* TopicConfig.encode(): "name read write perm filterType". */
    for (size_t i = 0; rc == 0 && i < s->count; i++) {
        const struct config_item *it = &s->items[i];
        struct topic_config plain;
        const struct topic_config *c = as_registered(it->rec, perm, &plain);
        char text[224];
        struct cursor cur = { b, text };
        *cur.p++ = ' ';
        w_i64(&cur, c->read_queue_nums);
        *cur.p++ = ' ';
        w_i64(&cur, c->write_queue_nums);
        *cur.p++ = ' ';
        w_i64(&cur, c->perm);
        *cur.p++ = ' ';
        const char *ft = topic_filter_name(c->filter_type);
        w_lit(&cur, ft, strlen(ft));
        if (has_attributes(c)) {
            *cur.p++ = ' ';
            w_attributes(&cur, c);
        }
        size_t tl = (size_t)(cur.p - text);
        rc = buf_put_be32(b, (uint32_t)(it->name_len + tl));
        if (rc == 0)
            rc = buf_append(b, it->name, it->name_len);
        if (rc == 0)
            rc = buf_append(b, text, tl);
    }
    if (rc == 0)
        rc = put_record(b, "[]", 2);
    return rc;
}
