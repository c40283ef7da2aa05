/*
 * lua_source: a package.searchers entry for the Lua compiled into the
 * binary (see lua_source.h).  The sources are kept as text, not luac
 * bytecode: tracebacks keep their lines, the live console can diff and
 * swap a module against the code that runs, and the one liblua5.4 the
 * binary links decides the bytecode format at load time.
 */
#include "runtime/lua_source.h"

#include <lauxlib.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/err.h"

/* Registry: true when the embedded modules come before package.path
 * (rmq-server and rmq without RMQ_LUA_DIR); false with the tree first
 * or in plain lua5.4; absent until installed (package.path alone). */
static const char embedded_first_key = 0;

const struct lua_source *
lua_source_find(const char *name)
{
    size_t lo = 0, hi = lua_sources_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, lua_sources[mid].name);
        if (c == 0)
            return &lua_sources[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* searcher(name) -> loader, path | message */
static int
lua_source_searcher(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    const struct lua_source *s = lua_source_find(name);
    if (s == NULL) {
        lua_pushfstring(L, "no embedded module '%s'", name);
        return 1;
    }
    /* "@rmq/broker/init.lua": messages read "rmq/broker/init.lua:12: ...",
     * with no directory of the machine that built it. */
    lua_pushfstring(L, "@%s", s->path);
    int rc = luaL_loadbufferx(L, s->text, s->len, lua_tostring(L, -1), "t");
    if (rc != LUA_OK)
        return luaL_error(L, "error loading embedded module '%s':\n\t%s", name,
                          lua_tostring(L, -1));
    lua_pushstring(L, s->path);
    return 2;
}

static bool
path_first(lua_State *L)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &embedded_first_key);
    bool r = !lua_toboolean(L, -1);
    lua_pop(L, 1);
    return r;
}

/* package.searchpath(name, package.path): pushes the file or nil. */
static void
search_path(lua_State *L, const char *name)
{
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "searchpath");
    lua_pushstring(L, name);
    lua_getfield(L, -3, "path");
    lua_call(L, 2, 1);
    lua_remove(L, -2);
}

/* locate(name) -> "embedded" | file, or nil, message: where `require`
 * finds the module's source, in the searchers' order. */
static int
lua_source_locate(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1);
    bool file_first = path_first(L);
    if (file_first) {
        search_path(L, name);
        if (lua_isstring(L, -1))
            return 1;
        lua_pop(L, 1);
    }
    if (lua_source_find(name) != NULL) {
        lua_pushliteral(L, "embedded");
        return 1;
    }
    if (!file_first) {
        search_path(L, name);
        if (lua_isstring(L, -1))
            return 1;
        lua_pop(L, 1);
    }
    lua_pushnil(L);
    lua_pushfstring(L, "module %s not found", name);
    return 2;
}

/* text(name) -> the embedded source, or nil */
static int
lua_source_text(lua_State *L)
{
    const struct lua_source *s = lua_source_find(luaL_checkstring(L, 1));
    if (s == NULL)
        lua_pushnil(L);
    else
        lua_pushlstring(L, s->text, s->len);
    return 1;
}

/* names() -> sorted list of the embedded modules */
static int
lua_source_names(lua_State *L)
{
    lua_createtable(L, (int)lua_sources_count, 0);
    for (size_t i = 0; i < lua_sources_count; i++) {
        lua_pushstring(L, lua_sources[i].name);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static const char *
override_dir(void)
{
    const char *dir = getenv("RMQ_LUA_DIR");
    return dir != NULL && dir[0] != '\0' ? dir : NULL;
}

/* override() -> $RMQ_LUA_DIR or nil */
static int
lua_source_override(lua_State *L)
{
    const char *dir = override_dir();
    if (dir == NULL)
        lua_pushnil(L);
    else
        lua_pushstring(L, dir);
    return 1;
}

int
luaopen_rmq_lua_source(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "locate", lua_source_locate },
        { "text", lua_source_text },
        { "names", lua_source_names },
        { "override", lua_source_override },
        { NULL, NULL },
    };
    luaL_newlib(L, fns);
    return 1;
}

int
lua_source_check_override(void)
{
    const char *dir = override_dir();
    if (dir == NULL)
        return 0;
    char path[4096];
    struct stat st;
    int n = snprintf(path, sizeof(path), "%s/rmq", dir);
    if (n < 0 || (size_t)n >= sizeof(path) || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        err_set("RMQ_LUA_DIR=%s has no rmq/ directory: it must be a lua/ tree "
                "(unset it to run the modules compiled in)", dir);
        return -1;
    }
    return 0;
}

void
lua_source_install(lua_State *L, enum lua_source_order order)
{
    lua_rawgetp(L, LUA_REGISTRYINDEX, &embedded_first_key);
    bool done = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (done)
        return;
    const char *dir = order == LUA_SOURCE_FIRST ? override_dir() : NULL;
    lua_pushboolean(L, order == LUA_SOURCE_FIRST && dir == NULL);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &embedded_first_key);

    lua_getglobal(L, "package");
    if (dir != NULL) {
        lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", dir, dir);
        lua_getfield(L, -2, "path");
        lua_concat(L, 2);
        lua_setfield(L, -2, "path");
    }
    /* Standard searchers: preload, Lua path, C path, C root. */
    lua_getfield(L, -1, "searchers");
    lua_Integer n = luaL_len(L, -1);
    lua_Integer pos = order == LUA_SOURCE_LAST ? n + 1 : (dir != NULL ? 3 : 2);
    if (pos > n + 1)
        pos = n + 1;
    for (lua_Integer i = n; i >= pos; i--) {
        lua_rawgeti(L, -1, i);
        lua_rawseti(L, -2, i + 1);
    }
    lua_pushcfunction(L, lua_source_searcher);
    lua_rawseti(L, -2, pos);
    lua_pop(L, 1);

    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, luaopen_rmq_lua_source);
    lua_setfield(L, -2, "rmq.lua_source");
    lua_pop(L, 2);
}
