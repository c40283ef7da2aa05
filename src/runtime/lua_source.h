/*
 * lua_source: the Lua modules of lua/, compiled into the binary (the
 * table is generated at build time by cmake/lua_embed.cmake), and the
 * package.searchers entry that loads them, so a copied rmq-server, rmq
 * or rmq.so needs no lua/ tree beside it.
 *
 * Development override: with $RMQ_LUA_DIR set to a lua/ tree, the
 * binaries load modules from that tree first (scripts can be changed
 * without a rebuild) and fall back to the embedded copy for the modules
 * the tree lacks.  A conf's own policy modules are never embedded: they
 * load from package.path as before.
 */
#ifndef RMQ_LUA_SOURCE_H
#define RMQ_LUA_SOURCE_H

#include <lua.h>
#include <stddef.h>

struct lua_source {
    const char *name;   /* module name: "rmq.broker" */
    const char *path;   /* under lua/: "rmq/broker/init.lua" */
    const char *text;
    size_t len;
};

/* Sorted by name (strcmp order). */
extern const struct lua_source lua_sources[];
extern const size_t lua_sources_count;

/** The embedded module `name`, or NULL: a binary search. */
const struct lua_source *lua_source_find(const char *name);

enum lua_source_order {
    /* Embedded modules before package.path (rmq-server, rmq). */
    LUA_SOURCE_FIRST,
    /* After every other searcher: plain lua5.4 with rmq.so, where a lua/
     * tree on package.path (the specs') wins. */
    LUA_SOURCE_LAST,
};

/**
 * Installs the embedded modules' searcher in L's package.searchers
 * (once per state) and preloads "rmq.lua_source": locate(name) ->
 * "embedded" | the file `require` would load, or nil, err (the
 * searchers' order); text(name) -> an embedded module's source or nil;
 * names() -> the embedded modules, sorted; override() -> $RMQ_LUA_DIR
 * or nil.  With FIRST and $RMQ_LUA_DIR set,
 * the tree is put at the front of package.path and the embedded
 * searcher goes right after the Lua path searcher.  Raises on a Lua
 * error (memory).
 */
void lua_source_install(lua_State *L, enum lua_source_order order);

/**
 * 0, or -1 with err_set() when $RMQ_LUA_DIR is set to something that is
 * not a lua/ tree (no rmq/ directory): a mistyped override must not
 * silently run the compiled-in modules.  The programs check it once at
 * start.
 */
int lua_source_check_override(void);

/** The "rmq.lua_source" module (also reached through rmq.so). */
int luaopen_rmq_lua_source(lua_State *L);

#endif
