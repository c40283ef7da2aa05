/*
 * l_jstats: pushes a jmap's chain statistics (core/jmap.h) as a table
 * {size=, cap=, max_keyed_chain=, max_java_chain=}: the hash_stats()
 * methods of rmq.route, rmq.config_table and rmq.offset_table, which the
 * hash-flooding spec and benchmark read (docs/hardening-tables.md).
 */
#ifndef RMQ_L_JSTATS_H
#define RMQ_L_JSTATS_H

#include <lua.h>

#include "core/jmap.h"

/* [-0, +1, m] */
static inline void
l_push_jmap_stats(lua_State *L, const struct jmap_stats *st)
{
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, (lua_Integer)st->size);
    lua_setfield(L, -2, "size");
    lua_pushinteger(L, (lua_Integer)st->cap);
    lua_setfield(L, -2, "cap");
    lua_pushinteger(L, (lua_Integer)st->max_keyed_chain);
    lua_setfield(L, -2, "max_keyed_chain");
    lua_pushinteger(L, (lua_Integer)st->max_java_chain);
    lua_setfield(L, -2, "max_java_chain");
}

#endif
