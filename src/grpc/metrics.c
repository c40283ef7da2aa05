/*
 * grpc metrics: see metrics.h.
 *
 * A call's labels are rendered once per (method, gRPC status, v2 code)
 * a worker sees; the series pointer is then kept in a small table here,
 * so recording a call is a probe and three adds (no text, no hash of
 * text).  Past the table's size (more outcomes than a worker ever sees
 * in practice) the labels are rendered and looked up each time.
 */
#include "grpc/metrics.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apache/rocketmq/v2/definition.pb-c.h"
#include "core/metrics.h"
#include "grpc/h2.h"

#define PREFIX "/apache.rocketmq.v2.MessagingService/"

/* MessagingService's methods (apache/rocketmq-apis service.proto) and
 * their labels; index 0 is every other path. */
static const struct {
    const char *method, *label;
} METHODS[] = {
    { "", "unknown" },
    { "QueryRoute", "query_route" },
    { "Heartbeat", "heartbeat" },
    { "SendMessage", "send_message" },
    { "QueryAssignment", "query_assignment" },
    { "ReceiveMessage", "receive_message" },
    { "AckMessage", "ack_message" },
    { "ForwardMessageToDeadLetterQueue", "forward_message_to_dead_letter_queue" },
    { "PullMessage", "pull_message" },
    { "UpdateOffset", "update_offset" },
    { "GetOffset", "get_offset" },
    { "QueryOffset", "query_offset" },
    { "EndTransaction", "end_transaction" },
    { "Telemetry", "telemetry" },
    { "NotifyClientTermination", "notify_client_termination" },
    { "ChangeInvisibleDuration", "change_invisible_duration" },
    { "RecallMessage", "recall_message" },
    { "SyncLiteSubscription", "sync_lite_subscription" },
};
#define NMETHODS (sizeof(METHODS) / sizeof(METHODS[0]))

/* gRPC status names (grpc/doc/statuscodes.md), lower case. */
static const char *const STATUS[] = {
    "ok", "cancelled", "unknown", "invalid_argument", "deadline_exceeded", "not_found",
    "already_exists", "permission_denied", "resource_exhausted", "failed_precondition", "aborted",
    "out_of_range", "unimplemented", "internal", "unavailable", "data_loss", "unauthenticated",
};
#define NSTATUS ((int)(sizeof(STATUS) / sizeof(STATUS[0])))

#define SLOTS 128   /* a power of two */

struct slot {
    uint64_t key;
    struct metrics_series *s;    /* NULL: free */
};

struct grpc_metrics {
    struct metrics_shard *sh;
    struct slot slots[SLOTS];
    size_t used;
};

struct grpc_metrics *
grpc_metrics_new(struct metrics_shard *sh)
{
    if (sh == NULL)
        return NULL;
    struct grpc_metrics *gm = calloc(1, sizeof(*gm));
    if (gm != NULL)
        gm->sh = sh;
    return gm;
}

void
grpc_metrics_free(struct grpc_metrics *gm)
{
    free(gm);
}

static size_t
method_of(const char *path)
{
    if (strncmp(path, PREFIX, sizeof(PREFIX) - 1) != 0)
        return 0;
    const char *name = path + sizeof(PREFIX) - 1;
    for (size_t i = 1; i < NMETHODS; i++)
        if (strcmp(name, METHODS[i].method) == 0)
            return i;
    return 0;
}

/* The response_code label: the v2 code's name in lower case, or the
 * gRPC status's. */
static void
response_label(char *out, size_t cap, int status, int32_t v2)
{
    if (status == GRPC_OK && v2 >= 0) {
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value(&apache__rocketmq__v2__code__descriptor, v2);
        if (ev == NULL) {
            snprintf(out, cap, "%d", (int)v2);
            return;
        }
        size_t i = 0;
        for (; ev->name[i] != '\0' && i + 1 < cap; i++)
            out[i] = (char)tolower((unsigned char)ev->name[i]);
        out[i] = '\0';
        return;
    }
    if (status >= 0 && status < NSTATUS)
        snprintf(out, cap, "%s", STATUS[status]);
    else
        snprintf(out, cap, "grpc_%d", status);
}

static struct metrics_series *
series_of(struct grpc_metrics *gm, size_t method, int status, int32_t v2)
{
    char resp[64], labels[256];
    response_label(resp, sizeof(resp), status, v2);
    const char *result = status == GRPC_OK ? "success"
                       : status == GRPC_CANCELLED || status == GRPC_DEADLINE_EXCEEDED ? "cancelled"
                       : "process_request_failed";
    int n = snprintf(labels, sizeof(labels),
                     "protocol_type=\"grpc\",request_code=\"%s\",response_code=\"%s\",result=\"%s\"",
                     METHODS[method].label, resp, result);
    if (n < 0 || (size_t)n >= sizeof(labels))
        return NULL;
    return metrics_rpc_series(gm->sh, labels, (size_t)n);
}

void
grpc_metrics_call(struct grpc_metrics *gm, const char *path, int grpc_status, int32_t v2_code,
                  int64_t elapsed_ns)
{
    if (gm == NULL)
        return;
    size_t method = method_of(path != NULL ? path : "");
    /* A v2 code matters only to a call that ended OK (response_label). */
    int32_t v2 = grpc_status == GRPC_OK ? v2_code : -1;
    uint64_t key = (uint64_t)method << 40 | (uint64_t)(uint8_t)grpc_status << 32 | (uint32_t)v2;
    uint64_t h = key * 0x9E3779B97F4A7C15ULL;
    size_t i = (size_t)(h >> 57) & (SLOTS - 1);
    for (size_t probes = 0; probes < SLOTS; probes++, i = (i + 1) & (SLOTS - 1)) {
        struct slot *sl = &gm->slots[i];
        if (sl->s == NULL) {
            struct metrics_series *s = series_of(gm, method, grpc_status, v2);
            if (s == NULL)
                return;
            /* Keep a free slot or more: a probe for a new key ends. */
            if (gm->used + 1 < SLOTS) {
                sl->key = key;
                sl->s = s;
                gm->used++;
            }
            metrics_rpc_observe(s, elapsed_ns);
            return;
        }
        if (sl->key == key) {
            metrics_rpc_observe(sl->s, elapsed_ns);
            return;
        }
    }
}

int32_t
grpc_metrics_status_of(const ProtobufCMessage *m)
{
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(m->descriptor, 1);
    if (f == NULL || f->type != PROTOBUF_C_TYPE_MESSAGE ||
        f->descriptor != &apache__rocketmq__v2__status__descriptor)
        return -1;
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
        uint32_t which;
        memcpy(&which, (const char *)m + f->quantifier_offset, sizeof(which));
        if (which != f->id)
            return -1;
    }
    const Apache__Rocketmq__V2__Status *st;
    memcpy(&st, (const char *)m + f->offset, sizeof(st));
    return st != NULL ? (int32_t)st->code : -1;
}
