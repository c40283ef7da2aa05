/*
 * sendpack: see sendpack.h.
 */
#include "grpc/sendpack.h"

#include <string.h>

#include "grpc/pbwire.h"

/* An entry: its body's size, and (out not NULL) its bytes, tag and
 * length first.  Each size is computed once, bottom up (each string's
 * strlen once): the nested size-then-bytes recursion this replaced
 * measured 1,300 instructions a send. */
static size_t
entry(uint8_t **out, const Apache__Rocketmq__V2__SendResultEntry *e)
{
    size_t sm = e->status != NULL ? slen(e->status->message) : 0;
    size_t ss = e->status != NULL ? status_body(e->status, sm) : 0;
    size_t id = slen(e->message_id), tx = slen(e->transaction_id), rh = slen(e->recall_handle);
    size_t body = (e->status != NULL ? len_field(1, ss) : 0) + strn_size(2, id) + strn_size(3, tx) +
                  int_size(4, e->offset) + strn_size(5, rh);
    if (out != NULL) {
        uint8_t *p = put_msg_head(*out, 2, body);
        if (e->status != NULL)
            p = put_status(p, 1, e->status, sm, ss);
        p = put_strn(p, 2, e->message_id, id);
        p = put_strn(p, 3, e->transaction_id, tx);
        p = put_int(p, 4, e->offset);
        *out = put_strn(p, 5, e->recall_handle, rh);
    }
    return body;
}

size_t
sendpack_response(uint8_t *out, const Apache__Rocketmq__V2__Status *st,
                  Apache__Rocketmq__V2__SendResultEntry *const *entries, size_t n)
{
    size_t len = 0;
    uint8_t *p = out;
    if (st != NULL) {
        size_t sm = slen(st->message), ss = status_body(st, sm);
        len += len_field(1, ss);
        if (p != NULL)
            p = put_status(p, 1, st, sm, ss);
    }
    for (size_t i = 0; i < n; i++) {
        if (entries[i] == NULL)
            continue;
        size_t body = entry(p != NULL ? &p : NULL, entries[i]);
        len += len_field(2, body);
    }
    return len;
}
