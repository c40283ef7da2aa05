/*
 * heartbeat_processor: see heartbeat_processor.h.
 */
#include "broker/heartbeat_processor.h"

#include <stdlib.h>

#include "broker/client_registry.h"
#include "proto/heartbeat.h"
#include "core/clock.h"
#include "core/err.h"
#include "net/conn.h"
#include "rmq_codes.h"

struct heartbeat_processor {
    struct native_proc base;
    struct creg *reg;
};

static int
heartbeat_run(struct native_proc *p, struct native_req *r)
{
    struct heartbeat_processor *hp = (struct heartbeat_processor *)p;
    struct hb_limits lim;
    creg_parse_limits(hp->reg, &lim);
    struct heartbeat hb;
    if (heartbeat_parse(&hb, (const char *)(r->cmd->body ? r->cmd->body : (const uint8_t *)""),
                        r->cmd->body_len, &lim) != 0) {
        /* A refused parse may keep the arena of the strings it read. */
        heartbeat_free(&hb);
        return NATIVE_TO_LUA;
    }
    struct creg_client cl = {
        .language = rmq_language_name(r->cmd->language),
        .addr = r->c->peer,
        .version = r->cmd->version,
        .now = clock_wall_ms(),
    };
    bool repeat = creg_heartbeat_repeat(hp->reg, r->c->id, &hb, &cl);
    bool sub_change;
    bool v2 = hb_v2_reply(&hb, r->cmd->version, false, &sub_change);
    heartbeat_free(&hb);
    if (!repeat)
        return NATIVE_TO_LUA;
    struct rmq_field ext[2] = {
        { { "IS_SUPPORT_HEART_BEAT_V2", 24 }, { "true", 4 } },
        { { "IS_SUB_CHANGE", 13 }, { sub_change ? "true" : "false", sub_change ? 4 : 5 } },
    };
    native_reply(r, RMQ_RESP_SUCCESS, NULL, 0, v2 ? ext : NULL, v2 ? 2 : 0, NULL, 0, NULL);
    return NATIVE_DONE;
}

static void
heartbeat_destroy(struct native_proc *p)
{
    free(p);
}

struct native_proc *
heartbeat_processor_new(struct creg *reg)
{
    struct heartbeat_processor *hp = calloc(1, sizeof(*hp));
    if (hp == NULL) {
        err_set("out of memory");
        return NULL;
    }
    hp->base.name = "heartbeat";
    hp->base.run = heartbeat_run;
    hp->base.destroy = heartbeat_destroy;
    hp->reg = reg;
    return &hp->base;
}
