/*
 * broker_perm: the broker's brokerPermission as a C request processor
 * sees it.  UPDATE_BROKER_CONFIG changes it at run time in the shared
 * settings map ("broker.settings", lua/rmq/broker/tables.lua: the value
 * is the JSON text {"v":N}); this reads the map again only when its
 * version moves, so a request pays one atomic load.
 *
 * MT: one per worker (not shared).
 */
#ifndef RMQ_BROKER_PERM_H
#define RMQ_BROKER_PERM_H

#include <stdbool.h>
#include <stdint.h>

struct smap;

struct broker_perm {
    struct smap *settings;
    uint64_t seen;
    int32_t perm;
    bool property_filter;       /* enablePropertyFilter, read alike */
};

/** Starts from `initial` (the conf's). Returns 0, or -1 with err_set(). */
int broker_perm_init(struct broker_perm *bp, int32_t initial);

/** The permission now. */
int32_t broker_perm_get(struct broker_perm *bp);

/** enablePropertyFilter now (starts from property_filter as set after init). */
bool broker_perm_property_filter(struct broker_perm *bp);

#endif
