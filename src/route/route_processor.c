/*
 * route_processor: see route_processor.h.
 */
#include "route/route_processor.h"

#include <stdlib.h>
#include <strings.h>

#include "core/buf.h"
#include "core/err.h"
#include "route/route.h"
#include "rmq_codes.h"

/* MQVersion.Version.V4_9_4: from this client version on, the route is
 * written as standard JSON (numeric map keys quoted). */

struct route_processor {
    struct native_proc base;
    struct route *rt;
    struct buf out;
};

static int
route_run(struct native_proc *p, struct native_req *r)
{
    struct route_processor *rp = (struct route_processor *)p;
    const struct rmq_str *topic = rmq_cmd_field(r->cmd, "topic", 5);
    if (topic == NULL || topic->p == NULL)
        return NATIVE_TO_LUA;
    bool std = r->cmd->version >= RMQ_MQVERSION_V4_9_4;
    if (!std) {
        const struct rmq_str *a = rmq_cmd_field(r->cmd, "acceptStandardJsonOnly", 22);
        std = a != NULL && a->len == 4 && strncasecmp(a->p, "true", 4) == 0;
    }
    buf_reset(&rp->out);
    int rc = route_topic_json(rp->rt, topic->p, topic->len, std, &rp->out);
    if (rc <= 0)
        return NATIVE_TO_LUA;   /* TOPIC_NOT_EXIST (or no memory) */
    native_reply(r, RMQ_RESP_SUCCESS, NULL, 0, NULL, 0, buf_head(&rp->out), buf_len(&rp->out), NULL);
    if (rp->out.cap > (1u << 20)) {
        /* One huge route does not stay allocated. */
        buf_free(&rp->out);
        buf_init(&rp->out);
    }
    return NATIVE_DONE;
}

static void
route_destroy(struct native_proc *p)
{
    struct route_processor *rp = (struct route_processor *)p;
    buf_free(&rp->out);
    free(rp);
}

struct native_proc *
route_processor_new(struct route *rt)
{
    struct route_processor *rp = calloc(1, sizeof(*rp));
    if (rp == NULL) {
        err_set("out of memory");
        return NULL;
    }
    rp->base.name = "route";
    rp->base.run = route_run;
    rp->base.destroy = route_destroy;
    rp->rt = rt;
    buf_init(&rp->out);
    return &rp->base;
}
