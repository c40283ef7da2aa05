/*
 * offset_processor: see offset_processor.h.
 */
#include "broker/offset_processor.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "broker/config_table.h"
#include "broker/offset_table.h"
#include "broker/topic_config.h"
#include "core/buf.h"
#include "core/err.h"
#include "proto/header.h"
#include "core/fjson.h"
#include "store/access.h"
#include "store/store.h"
#include "rmq_codes.h"

enum { F_GROUP, F_TOPIC, F_QUEUE_ID, F_COMMIT, NFIELDS };
static const char *const field_keys[NFIELDS] = {
    "consumerGroup", "topic", "queueId", "commitOffset",
};

struct offset_processor {
    struct native_proc base;
    enum offset_request kind;
    struct store *store;
    const struct hspec *header;
    int idx[NFIELDS];              /* -1: not in this request's header */
    struct offset_table *offsets;
    struct config_table *topics;
    struct buf key;                /* "topic@group" */
};

static int
reply_offset(struct native_req *r, int64_t v)
{
    char d[24];
    char *e = d + sizeof(d), *b = fjson_i64_digits(e, v);
    struct rmq_field ext = { { "offset", 6 }, { b, (uint32_t)(e - b) } };
    native_reply(r, RMQ_RESP_SUCCESS, NULL, 0, &ext, 1, NULL, 0, NULL);
    return NATIVE_DONE;
}

static const char *
table_key(struct offset_processor *op, const struct lheader_val *topic,
          const struct lheader_val *group)
{
    buf_reset(&op->key);
    if (buf_append(&op->key, topic->p, topic->len) != 0 ||
        buf_append(&op->key, "@", 1) != 0 ||
        buf_append(&op->key, group->p, group->len) != 0)
        return NULL;
    return (const char *)buf_head(&op->key);
}

/* The request, its header's values read (v: lheader_decode's, or the
 * typed one-pass decode's, the same for every header it takes). */
static int
offset_serve(struct offset_processor *op, struct native_req *r, const struct lheader_val *v)
{
    const struct lheader_val *topic = &v[op->idx[F_TOPIC]];
    int64_t qid = v[op->idx[F_QUEUE_ID]].i;
    if (qid < 0 || qid > INT32_MAX)
        return NATIVE_TO_LUA;
    switch (op->kind) {
    case OFFSET_MAX:
        return reply_offset(r, store_max_offset(op->store, topic->p, topic->len, (int32_t)qid));
    case OFFSET_MIN:
        return reply_offset(r, store_min_offset(op->store, topic->p, topic->len, (int32_t)qid));
    case OFFSET_QUERY: {
        const char *key = table_key(op, topic, &v[op->idx[F_GROUP]]);
        int64_t off = key != NULL ? offset_table_query(op->offsets, key, buf_len(&op->key),
                                                       (uint32_t)qid)
                                  : -1;
        if (off < 0)
            return NATIVE_TO_LUA;   /* where a new group starts */
        return reply_offset(r, off);
    }
    case OFFSET_UPDATE: {
        struct topic_config tc;
        if (config_table_get(op->topics, topic->p, topic->len, &tc) != 0)
            return NATIVE_TO_LUA;
        int32_t nq = tc.write_queue_nums > tc.read_queue_nums ? tc.write_queue_nums
                                                              : tc.read_queue_nums;
        if (qid >= nq)
            return NATIVE_TO_LUA;
        const char *key = table_key(op, topic, &v[op->idx[F_GROUP]]);
        if (key == NULL)
            return NATIVE_TO_LUA;
        /* A negative offset is not stored, and still answered: as
         * offsets.commit. */
        int rc = offset_table_commit(op->offsets, key, buf_len(&op->key), (uint32_t)qid,
                                     v[op->idx[F_COMMIT]].i);
        if (rc == -ENOMEM)
            return NATIVE_TO_LUA;
        static const struct rmq_field none[1];
        native_reply(r, RMQ_RESP_SUCCESS, NULL, 0, none, 0, NULL, 0, NULL);
        return NATIVE_DONE;
    }
    }
    return NATIVE_TO_LUA;
}

static int
offset_run(struct native_proc *p, struct native_req *r)
{
    struct offset_processor *op = (struct offset_processor *)p;
    struct lheader_val v[16];
    char remark[512];
    if (lheader_decode(op->header, r->cmd, v, remark, sizeof(remark)) != 0)
        return NATIVE_TO_LUA;
    return offset_serve(op, r, v);
}

/* The typed one-pass decode's spec (runtime/host.c's typed_frame): a
 * processor serves one request code, whose header this is. */
static const struct hspec *
offset_json_spec(struct native_proc *p, int32_t code)
{
    (void)code;
    return ((struct offset_processor *)p)->header;
}

static int
offset_run_typed(struct native_proc *p, struct native_req *r, const struct lheader_val *vals)
{
    return offset_serve((struct offset_processor *)p, r, vals);
}

static void
offset_destroy(struct native_proc *p)
{
    struct offset_processor *op = (struct offset_processor *)p;
    if (op->store != NULL)
        store_unref(op->store);
    buf_free(&op->key);
    free(op);
}

struct native_proc *
offset_processor_new(enum offset_request kind, struct store *store,
                     const struct hspec *header)
{
    static const char *const names[] = { "query offset", "update offset",
                                         "max offset", "min offset" };
    struct offset_processor *op = calloc(1, sizeof(*op));
    if (op == NULL) {
        err_set("out of memory");
        return NULL;
    }
    op->base.name = names[kind];
    op->base.run = offset_run;
    op->base.json_spec = offset_json_spec;
    op->base.run_typed = offset_run_typed;
    op->base.destroy = offset_destroy;
    op->kind = kind;
    op->header = header;
    buf_init(&op->key);
    int need = kind == OFFSET_UPDATE ? NFIELDS : kind == OFFSET_QUERY ? F_COMMIT : F_GROUP;
    for (int i = 0; i < NFIELDS; i++) {
        op->idx[i] = lheader_field(header, field_keys[i]);
        bool wanted = kind == OFFSET_MAX || kind == OFFSET_MIN
                          ? (i == F_TOPIC || i == F_QUEUE_ID) : i < need;
        if (wanted && op->idx[i] < 0) {
            offset_destroy(&op->base);
            err_set("the offset header spec has no field %s", field_keys[i]);
            return NULL;
        }
    }
    if (lheader_nfields(header) > 16) {
        offset_destroy(&op->base);
        err_set("an offset header spec has more than 16 fields");
        return NULL;
    }
    op->offsets = offset_table_shared();
    op->topics = config_table_topics();
    if (op->offsets == NULL || op->topics == NULL) {
        offset_destroy(&op->base);
        err_set("out of memory");
        return NULL;
    }
    op->store = store;
    store_ref(store);
    return &op->base;
}
