/*
 * fuzz_bodies: libFuzzer target for the JSON (and compressed) bodies the
 * control plane decodes: REGISTER_BROKER (rmq.namesrv.register), the
 * HEART_BEAT body's consumer and producer data (rmq.fastjson +
 * the C client registry rmq.client_registry), SubscriptionGroupConfig
 * (rmq.broker.groups.normalize) and TopicConfig / topic config tables
 * (rmq.broker.topics.normalize).
 *
 * One Lua 5.4 state for the whole run, as a server worker has: rmq's C
 * modules preloaded (lmodules_preload), the Lua modules compiled in
 * (host_set_lua_path; $RMQ_LUA_DIR points at a lua/ tree instead), and
 * fuzz/bodies.lua ($RMQ_FUZZ_DIR overrides where it is)
 * returning the function each input is given to.  That function calls
 * the decoders under pcall (a clean `nil, err` or a raised error is a
 * refusal, not a finding) and checks the shape of whatever they accept;
 * it raises only for a finding, which aborts here.
 *
 * Also findings: an input that makes the state grow past MEM_CAP (the
 * allocator refuses, and the refusal is reported), and (libFuzzer's
 * -timeout, set by scripts/fuzz.sh) a slow input.
 *
 * Coverage: libFuzzer sees the C it instruments (rmqcore: inflate,
 * java_hash, ...), not the Lua interpreter.  A line hook feeds Lua's
 * line-to-line edges into extra counters, so inputs that reach new Lua
 * code are kept too.
 */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "lua/l_modules.h"
#include "runtime/host.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MEM_CAP ((size_t)512 << 20)

static lua_State *L;
static int driver_ref = LUA_NOREF;
static size_t mem_used;
static bool mem_refused;

/* {{{ Lua coverage as libFuzzer extra counters */

#define LUA_COV_SIZE (1u << 16)
__attribute__((section("__libfuzzer_extra_counters"), used))
static uint8_t lua_cov[LUA_COV_SIZE];
static uint32_t prev_loc;

static void
line_hook(lua_State *l, lua_Debug *ar)
{
    (void)l;
    /* The line alone (lua_getinfo for the chunk costs another 15% on a
     * hook that already makes a run 2.4x slower): lines of different
     * files share counters, but an edge between two lines still tells
     * most paths apart.  RMQ_FUZZ_LUA_COV=0 turns the hook off. */
    uint32_t loc = ((uint32_t)ar->currentline * 2654435761u) >> 16;
    uint32_t edge = (loc ^ prev_loc) & (LUA_COV_SIZE - 1);
    if (lua_cov[edge] < 255)
        lua_cov[edge]++;
    prev_loc = loc >> 1;
}

/* }}} */

static void *
capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    (void)ud;
    size_t old = ptr != NULL ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        mem_used -= old;
        return NULL;
    }
    if (nsize > old && mem_used - old + nsize > MEM_CAP) {
        mem_refused = true;
        return NULL;
    }
    void *p = realloc(ptr, nsize);
    if (p != NULL)
        mem_used = mem_used - old + nsize;
    return p;
}

static void
die(const char *what)
{
    fprintf(stderr, "fuzz_bodies: %s\n", what);
    abort();
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* The registry logs every registration at info: noise at this rate. */
    (void)log_open(NULL, LOG_ERROR);
    L = lua_newstate(capped_alloc, NULL);
    if (L == NULL)
        die("cannot create a Lua state");
    luaL_openlibs(L);
    lmodules_preload(L);
    host_set_lua_path(L);
    const char *dir = getenv("RMQ_FUZZ_DIR");
    char path[4200];
    snprintf(path, sizeof(path), "%s/bodies.lua",
             dir != NULL && dir[0] != '\0' ? dir : RMQ_FUZZ_DIR);
    if (luaL_loadfile(L, path) != LUA_OK || lua_pcall(L, 0, 1, 0) != LUA_OK) {
        fprintf(stderr, "fuzz_bodies: %s\n", lua_tostring(L, -1));
        exit(1);
    }
    if (!lua_isfunction(L, -1))
        die("bodies.lua must return a function");
    driver_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    /* RMQ_FUZZ_LUA_COV=0: without the line hook (faster, blind to Lua). */
    const char *cov = getenv("RMQ_FUZZ_LUA_COV");
    if (cov == NULL || strcmp(cov, "0") != 0)
        lua_sethook(L, line_hook, LUA_MASKLINE, 0);
    return 0;
}

static int
traceback(lua_State *l)
{
    const char *msg = lua_tostring(l, 1);
    luaL_traceback(l, l, msg != NULL ? msg : "(error object is not a string)", 1);
    return 1;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int top = lua_gettop(L);
    lua_pushcfunction(L, traceback);
    lua_rawgeti(L, LUA_REGISTRYINDEX, driver_ref);
    lua_pushlstring(L, (const char *)data, size);
    prev_loc = 0;
    mem_refused = false;
    int rc = lua_pcall(L, 1, 0, top + 1);
    if (mem_refused) {
        fprintf(stderr, "fuzz_bodies: the input took the Lua state past %zu MiB\n",
                MEM_CAP >> 20);
        abort();
    }
    if (rc != LUA_OK) {
        fprintf(stderr, "fuzz_bodies: FINDING: %s\n", lua_tostring(L, -1));
        abort();
    }
    lua_settop(L, top);
    /* What one input allocated is garbage now: collect it in steps, as a
     * long-running worker would. */
    lua_gc(L, LUA_GCSTEP, 0);
    return 0;
}
