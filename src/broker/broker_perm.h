/*
 * broker_perm: the broker's brokerPermission (and enablePropertyFilter)
 * as a C request processor sees it.  UPDATE_BROKER_CONFIG changes them at
 * run time in the typed shared settings (broker/bsettings.h, set from
 * lua/rmq/broker/tables.lua); this reads them again only when their
 * version moves, so a request pays one atomic load.
 *
 * MT: one per worker (not shared).
 */
#ifndef RMQ_BROKER_PERM_H
#define RMQ_BROKER_PERM_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/bsettings.h"

struct broker_perm {
    struct bsettings_view view;
    int32_t perm;               /* the conf's brokerPermission */
    bool property_filter;       /* the conf's enablePropertyFilter (set after init) */
    int32_t perm_now;           /* with the run-time settings applied */
    bool property_filter_now;
};

/** Starts from `initial` (the conf's). Returns 0 (it cannot fail). */
int broker_perm_init(struct broker_perm *bp, int32_t initial);

/** The permission now. */
int32_t broker_perm_get(struct broker_perm *bp);

/** enablePropertyFilter now (starts from property_filter as set after init). */
bool broker_perm_property_filter(struct broker_perm *bp);

#endif
