/*
 * recvpack: see recvpack.h.
 */
#include "grpc/recvpack.h"

#include <string.h>

#include "grpc/pbwire.h"

/* Timestamp and Duration: seconds 1 (int64), nanos 2 (int32). */
static size_t
secs_body(int64_t seconds, int32_t nanos)
{
    return int_size(1, seconds) + int_size(2, nanos);
}

static uint8_t *
put_secs(uint8_t *p, uint32_t field, int64_t seconds, int32_t nanos, size_t body)
{
    p = put_msg_head(p, field, body);
    p = put_int(p, 1, seconds);
    return put_int(p, 2, nanos);
}

static size_t
ts_body(const Google__Protobuf__Timestamp *t)
{
    return t != NULL ? secs_body(t->seconds, t->nanos) : 0;
}

static size_t
dur_body(const Google__Protobuf__Duration *d)
{
    return d != NULL ? secs_body(d->seconds, d->nanos) : 0;
}

static size_t
entry_body(const Apache__Rocketmq__V2__Message__UserPropertiesEntry *e)
{
    return str_size(1, e->key) + str_size(2, e->value);
}

size_t
recvpack_size(const Apache__Rocketmq__V2__Message *m, struct recvpack_sizes *z)
{
    memset(z, 0, sizeof(*z));
    size_t body = 0;
    if (m->topic != NULL) {
        z->ns = slen(m->topic->resource_namespace);
        z->name = slen(m->topic->name);
        z->topic = strn_size(1, z->ns) + strn_size(2, z->name);
        body += len_field(1, z->topic);
    }
    for (size_t i = 0; i < m->n_user_properties; i++)
        body += len_field(2, entry_body(m->user_properties[i]));
    const Apache__Rocketmq__V2__SystemProperties *sp = m->system_properties;
    if (sp != NULL) {
        z->tag = slen(sp->tag);
        size_t b = strn_size(1, z->tag);
        for (size_t i = 0; i < sp->n_keys; i++)
            b += len_field(2, slen(sp->keys[i]));
        z->id = slen(sp->message_id);
        b += strn_size(3, z->id);
        if (sp->body_digest != NULL) {
            z->sum = slen(sp->body_digest->checksum);
            z->digest = int_size(1, sp->body_digest->type) + strn_size(2, z->sum);
            b += len_field(4, z->digest);
        }
        b += int_size(5, sp->body_encoding) + int_size(6, sp->message_type);
        z->born = ts_body(sp->born_timestamp);
        b += msg_size(7, sp->born_timestamp, z->born);
        z->host = slen(sp->born_host);
        b += strn_size(8, z->host);
        z->store = ts_body(sp->store_timestamp);
        b += msg_size(9, sp->store_timestamp, z->store);
        b += str_size(10, sp->store_host);
        z->delivery = ts_body(sp->delivery_timestamp);
        b += msg_size(11, sp->delivery_timestamp, z->delivery);
        z->handle = slen(sp->receipt_handle);
        b += strn_size(12, z->handle);
        b += int_size(13, sp->queue_id) + int_size(14, sp->queue_offset);
        z->inv = dur_body(sp->invisible_duration);
        b += msg_size(15, sp->invisible_duration, z->inv);
        b += int_size(16, sp->delivery_attempt);
        z->group = slen(sp->message_group);
        b += strn_size(17, z->group) + str_size(18, sp->trace_context);
        z->orphan = dur_body(sp->orphaned_transaction_recovery_duration);
        b += msg_size(19, sp->orphaned_transaction_recovery_duration, z->orphan);
        if (sp->dead_letter_queue != NULL) {
            z->dlq = str_size(1, sp->dead_letter_queue->topic) + str_size(2, sp->dead_letter_queue->message_id);
            b += len_field(20, z->dlq);
        }
        b += str_size(21, sp->lite_topic) + int_size(22, sp->priority);
        z->sp = b;
        body += len_field(3, b);
    }
    if (m->body.len > 0)
        body += len_field(4, m->body.len);
    z->msg = body;
    z->total = len_field(2, body);
    return z->total;
}

size_t
recvpack_write(uint8_t *out, const Apache__Rocketmq__V2__Message *m, const struct recvpack_sizes *z)
{
    uint8_t *p = put_msg_head(out, 2, z->msg);
    if (m->topic != NULL) {
        p = put_msg_head(p, 1, z->topic);
        p = put_strn(p, 1, m->topic->resource_namespace, z->ns);
        p = put_strn(p, 2, m->topic->name, z->name);
    }
    for (size_t i = 0; i < m->n_user_properties; i++) {
        const Apache__Rocketmq__V2__Message__UserPropertiesEntry *e = m->user_properties[i];
        p = put_msg_head(p, 2, entry_body(e));
        p = put_str(p, 1, e->key);
        p = put_str(p, 2, e->value);
    }
    const Apache__Rocketmq__V2__SystemProperties *sp = m->system_properties;
    if (sp != NULL) {
        p = put_msg_head(p, 3, z->sp);
        p = put_strn(p, 1, sp->tag, z->tag);
        for (size_t i = 0; i < sp->n_keys; i++)
            p = put_str_always(p, 2, sp->keys[i]);
        p = put_strn(p, 3, sp->message_id, z->id);
        if (sp->body_digest != NULL) {
            p = put_msg_head(p, 4, z->digest);
            p = put_int(p, 1, sp->body_digest->type);
            p = put_strn(p, 2, sp->body_digest->checksum, z->sum);
        }
        p = put_int(p, 5, sp->body_encoding);
        p = put_int(p, 6, sp->message_type);
        if (sp->born_timestamp != NULL)
            p = put_secs(p, 7, sp->born_timestamp->seconds, sp->born_timestamp->nanos, z->born);
        p = put_strn(p, 8, sp->born_host, z->host);
        if (sp->store_timestamp != NULL)
            p = put_secs(p, 9, sp->store_timestamp->seconds, sp->store_timestamp->nanos, z->store);
        p = put_str(p, 10, sp->store_host);
        if (sp->delivery_timestamp != NULL)
            p = put_secs(p, 11, sp->delivery_timestamp->seconds, sp->delivery_timestamp->nanos, z->delivery);
        p = put_strn(p, 12, sp->receipt_handle, z->handle);
        p = put_int(p, 13, sp->queue_id);
        p = put_int(p, 14, sp->queue_offset);
        if (sp->invisible_duration != NULL)
            p = put_secs(p, 15, sp->invisible_duration->seconds, sp->invisible_duration->nanos, z->inv);
        p = put_int(p, 16, sp->delivery_attempt);
        p = put_strn(p, 17, sp->message_group, z->group);
        p = put_str(p, 18, sp->trace_context);
        if (sp->orphaned_transaction_recovery_duration != NULL)
            p = put_secs(p, 19, sp->orphaned_transaction_recovery_duration->seconds,
                         sp->orphaned_transaction_recovery_duration->nanos, z->orphan);
        if (sp->dead_letter_queue != NULL) {
            p = put_msg_head(p, 20, z->dlq);
            p = put_str(p, 1, sp->dead_letter_queue->topic);
            p = put_str(p, 2, sp->dead_letter_queue->message_id);
        }
        p = put_str(p, 21, sp->lite_topic);
        p = put_int(p, 22, sp->priority);
    }
    if (m->body.len > 0) {
        p = put_msg_head(p, 4, m->body.len);
        memcpy(p, m->body.data, m->body.len);
        p += m->body.len;
    }
    return (size_t)(p - out);
}

size_t
recvpack_ack_response(uint8_t *out, const Apache__Rocketmq__V2__Status *st,
                      Apache__Rocketmq__V2__AckMessageResultEntry *const *e, size_t n)
{
    size_t len = 0;
    uint8_t *p = out;
    if (st != NULL) {
        size_t ml = slen(st->message), sb = status_body(st, ml);
        len += len_field(1, sb);
        if (p != NULL)
            p = put_status(p, 1, st, ml, sb);
    }
    for (size_t i = 0; i < n; i++) {
        const Apache__Rocketmq__V2__AckMessageResultEntry *x = e[i];
        if (x == NULL)
            continue;
        size_t il = slen(x->message_id), hl = slen(x->receipt_handle);
        size_t ml = x->status != NULL ? slen(x->status->message) : 0;
        size_t sb = x->status != NULL ? status_body(x->status, ml) : 0;
        size_t body = (il == 0 ? 0 : len_field(1, il)) + (hl == 0 ? 0 : len_field(2, hl)) +
                      (x->status != NULL ? len_field(3, sb) : 0);
        len += len_field(2, body);
        if (p == NULL)
            continue;
        p = put_msg_head(p, 2, body);
        if (il > 0) {
            p = put_tag(p, 1, WT_LEN);
            p = put_varint(p, il);
            memcpy(p, x->message_id, il);
            p += il;
        }
        if (hl > 0) {
            p = put_tag(p, 2, WT_LEN);
            p = put_varint(p, hl);
            memcpy(p, x->receipt_handle, hl);
            p += hl;
        }
        if (x->status != NULL)
            p = put_status(p, 3, x->status, ml, sb);
    }
    return len;
}
