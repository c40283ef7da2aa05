/*
 * fuzz_heartbeat: the HeartbeatData reader (proto/heartbeat.c) and the
 * client registry it feeds (broker/client_registry.c).  Each input is read
 * twice, with the default limits and with small ones (so the limit paths
 * are reached with small inputs), every subscription is normalised, and
 * an accepted heartbeat is applied to a private registry from two
 * connections, applied again (the repeat path), then both connections
 * close.  A finding is a sanitizer report or a registry that still holds
 * groups after every connection closed.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "broker/client_registry.h"
#include "proto/heartbeat.h"

static struct creg *reg;

static void
normalise_all(const struct heartbeat *hb)
{
    for (uint32_t i = 0; i < hb->nconsumers; i++) {
        const struct hb_consumer *c = &hb->consumers[i];
        for (uint32_t s = 0; s < c->nsubs; s++) {
            struct hb_norm n;
            if (hb_normalize(&c->subs[s], &n) == 0) {
                /* Touch what it made: the sanitizers check the bounds. */
                volatile int32_t sink = 0;
                for (uint32_t t = 0; t < n.ntags; t++)
                    sink ^= n.codes[t] ^ (int32_t)n.tags[t].len;
                (void)sink;
            }
            hb_norm_free(&n);
        }
    }
}

static void
apply(const struct heartbeat *hb, uint64_t conn)
{
    struct creg_client cl = { "JAVA", "127.0.0.1:1", 409, 1000 };
    struct creg_hb_result res;
    if (creg_hb_result_init(&res, hb) != 0)
        return;
    (void)creg_heartbeat(reg, conn, hb, &cl, &res);
    creg_hb_result_free(&res);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (reg == NULL && (reg = creg_new()) == NULL)
        abort();
    struct hb_limits small;
    hb_limits_default(&small);
    small.max_consumers = small.max_producers = 4;
    small.max_subs = small.max_tags = 4;
    small.max_subs_total = 8;
    small.max_string = 64;
    small.max_depth = 4;
    const struct hb_limits *limits[2] = { NULL, &small };
    for (int i = 0; i < 2; i++) {
        struct heartbeat hb;
        if (heartbeat_parse(&hb, (const char *)data, size, limits[i]) == 0) {
            normalise_all(&hb);
            if (i == 0) {
                apply(&hb, 1);
                apply(&hb, 2);
                apply(&hb, 1);
            }
        }
        heartbeat_free(&hb);
    }
    uint32_t removed = 0;
    struct buf out;
    buf_init(&out);
    (void)creg_conn_closed(reg, 1, &out, &removed);
    buf_reset(&out);
    (void)creg_conn_closed(reg, 2, &out, &removed);
    buf_free(&out);
    struct creg_counts c;
    creg_counts(reg, &c);
    if (c.consumer_groups != 0 || c.producer_groups != 0 || c.connections != 0)
        abort();  /* every connection closed: nothing may be left */
    return 0;
}
