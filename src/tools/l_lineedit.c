/*
 * l_lineedit: the line editor of `rmq repl` (the rmq.lineedit module),
 * over libedit's readline interface.
 *
 * libedit (BSD) rather than GNU readline (GPL-3): rmq carries no
 * licence file, so nothing allows the rmq binary and rmq.so to become a
 * GPL-3 work, which linking GNU readline would make them.  libedit has
 * the same calls for what the REPL needs (editing, history, completion).
 *
 *   le.readline(prompt) -> line | nil        nil at end of input (Ctrl-D)
 *   le.add_history(line)
 *   le.read_history(path) -> true | nil, err
 *   le.write_history(path) -> true | nil, err    (a new file is mode 0600)
 *   le.stifle_history(n)                     keep at most n lines
 *   le.history_length() -> n
 *   le.set_completer(fn | nil)   fn(word, line_before_word) -> {candidates}
 *   le.isatty(fd) -> boolean
 *   le.catch_interrupt(on)   while on, Ctrl-C (SIGINT) stops the running
 *                            Lua code with the error "interrupted!", as
 *                            lua.c does; a second Ctrl-C ends the process
 *
 * readline's state is the process's (one terminal, one history, a
 * completion hook without a user pointer), and so is a signal handler:
 * the completer's and the interrupt's Lua state are kept in statics here
 * (`completer`, `interrupt_L` below).
 */
#include <errno.h>
#include <fcntl.h>
#include <lauxlib.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <editline/readline.h>

#include "tools/l_tools.h"

/* Candidates past this are dropped: a completion list is for a person. */
#define LE_MAX_CANDIDATES 1000

static struct {
    lua_State *L;   /* the state that set the completer, while readline runs */
    int ref;        /* the Lua function, LUA_NOREF when none */
} completer = { NULL, LUA_NOREF };

/* The longest common prefix of the candidates: what Tab inserts. */
static char *
common_prefix(char **c, size_t n)
{
    size_t len = strlen(c[0]);
    for (size_t i = 1; i < n; i++) {
        size_t j = 0;
        while (j < len && c[i][j] == c[0][j]) {
            j++;
        }
        len = j;
    }
    return strndup(c[0], len);
}

/* Called by libedit on Tab.  The Lua completer runs under pcall, so an
 * error in it leaves the prompt as it was (no candidates). */
static char **
le_attempted_completion(const char *word, int start, int end)
{
    (void)end;
    rl_attempted_completion_over = 1;   /* never fall back to file names */
    rl_completion_append_character = '\0';
    lua_State *L = completer.L;
    if (L == NULL || completer.ref == LUA_NOREF) {
        return NULL;
    }
    int top = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, completer.ref);
    lua_pushstring(L, word);
    size_t before = start > 0 && rl_line_buffer != NULL ? (size_t)start : 0;
    lua_pushlstring(L, rl_line_buffer != NULL ? rl_line_buffer : "", before);
    if (lua_pcall(L, 2, 1, 0) != LUA_OK || !lua_istable(L, -1)) {
        lua_settop(L, top);
        return NULL;
    }
    size_t n = (size_t)lua_rawlen(L, -1);
    if (n > LE_MAX_CANDIDATES) {
        n = LE_MAX_CANDIDATES;
    }
    if (n == 0) {
        lua_settop(L, top);
        return NULL;
    }
    /* [0] the common prefix, [1..n] the candidates, then NULL; libedit
     * frees all of them.  One slot more than needed: for a single
     * candidate libedit looks at [2]. */
    char **m = calloc(n + 3, sizeof(*m));
    if (m == NULL) {
        lua_settop(L, top);
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i);
        const char *s = lua_tostring(L, -1);
        if (s != NULL) {
            char *d = strdup(s);
            if (d != NULL) {
                m[1 + k++] = d;
            }
        }
        lua_pop(L, 1);
    }
    lua_settop(L, top);
    if (k == 0 || (m[0] = common_prefix(m + 1, k)) == NULL) {
        for (size_t i = 1; i <= k; i++) {
            free(m[i]);
        }
        free(m);
        return NULL;
    }
    return m;
}

static int
le_readline(lua_State *L)
{
    const char *prompt = luaL_optstring(L, 1, "");
    completer.L = L;
    char *line = readline(prompt);
    completer.L = NULL;
    if (line == NULL) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushstring(L, line);
    free(line);
    return 1;
}

static int
le_add_history(lua_State *L)
{
    const char *line = luaL_checkstring(L, 1);
    if (add_history(line) != 0) {
        return luaL_error(L, "add_history failed");
    }
    return 0;
}

/* read_history/write_history return an errno (0 ok), or -1. */
static int
push_history_result(lua_State *L, int rc, const char *path)
{
    if (rc == 0) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", path, rc > 0 ? strerror(rc) : "cannot read or write history");
    return 2;
}

static int
le_read_history(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    errno = 0;
    int rc = read_history(path);
    return push_history_result(L, rc != 0 && errno != 0 ? errno : rc, path);
}

static int
le_write_history(lua_State *L)
{
    const char *path = luaL_checkstring(L, 1);
    /* Made 0600 when new, as bash's: a history holds what was typed
     * (a password too).  An existing file keeps its mode. */
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        return push_history_result(L, errno, path);
    }
    (void)close(fd);
    errno = 0;
    int rc = write_history(path);
    return push_history_result(L, rc != 0 && errno != 0 ? errno : rc, path);
}

static int
le_stifle_history(lua_State *L)
{
    lua_Integer n = luaL_checkinteger(L, 1);
    luaL_argcheck(L, n > 0 && n <= 1000000, 1, "history size must be 1..1000000");
    stifle_history((int)n);
    return 0;
}

static int
le_history_length(lua_State *L)
{
    lua_pushinteger(L, history_length);
    return 1;
}

static int
le_set_completer(lua_State *L)
{
    if (!lua_isnoneornil(L, 1)) {
        luaL_checktype(L, 1, LUA_TFUNCTION);
    }
    if (completer.ref != LUA_NOREF) {
        luaL_unref(L, LUA_REGISTRYINDEX, completer.ref);
        completer.ref = LUA_NOREF;
    }
    if (!lua_isnoneornil(L, 1)) {
        lua_pushvalue(L, 1);
        completer.ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    return 0;
}

/* The state the SIGINT handler stops (set while catch_interrupt is on). */
static lua_State *interrupt_L;

static void
le_stop_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    lua_pushliteral(L, "interrupted!");   /* no position: where it stopped is noise */
    lua_error(L);
}

/* A signal handler may only set a hook (lua_sethook is safe here, as in
 * lua.c); the hook raises the error at the next Lua instruction. */
static void
le_on_sigint(int sig)
{
    signal(sig, SIG_DFL);   /* a second Ctrl-C ends the process */
    if (interrupt_L != NULL) {
        lua_sethook(interrupt_L, le_stop_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
    }
}

static int
le_catch_interrupt(lua_State *L)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    if (lua_toboolean(L, 1)) {
        interrupt_L = L;
        sa.sa_handler = le_on_sigint;
    } else {
        sa.sa_handler = SIG_DFL;
    }
    if (sigaction(SIGINT, &sa, NULL) != 0) {
        return luaL_error(L, "sigaction: %s", strerror(errno));
    }
    if (!lua_toboolean(L, 1)) {
        interrupt_L = NULL;
        lua_sethook(L, NULL, 0, 0);   /* a Ctrl-C that came too late to act */
    }
    return 0;
}

static int
le_isatty(lua_State *L)
{
    lua_Integer fd = luaL_checkinteger(L, 1);
    luaL_argcheck(L, fd >= 0 && fd <= 1024, 1, "not a descriptor");
    lua_pushboolean(L, isatty((int)fd) == 1);
    return 1;
}

int
luaopen_rmq_lineedit(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "readline", le_readline },
        { "add_history", le_add_history },
        { "read_history", le_read_history },
        { "write_history", le_write_history },
        { "stifle_history", le_stifle_history },
        { "history_length", le_history_length },
        { "set_completer", le_set_completer },
        { "isatty", le_isatty },
        { "catch_interrupt", le_catch_interrupt },
        { NULL, NULL },
    };
    /* libedit drops what the C locale calls unprintable (any UTF-8
     * beyond ASCII): take the terminal's character set, and C.UTF-8 for
     * a plain C locale, as Python does (PEP 538).  LC_CTYPE only; Lua's
     * lexer and number formatting do not depend on it. */
    const char *loc = setlocale(LC_CTYPE, "");
    if (loc == NULL || strcmp(loc, "C") == 0 || strcmp(loc, "POSIX") == 0) {
        (void)setlocale(LC_CTYPE, "C.UTF-8");   /* stays C when absent */
    }
    rl_readline_name = "rmq";
    /* Quotes, parentheses and commas end a word, so a topic inside
     * topic_route("T or send("T", completes; '.' and ':' do not. */
    rl_basic_word_break_characters = " \t\n\"'`@$><=;|&{(,[+*/%^~#";
    rl_attempted_completion_function = le_attempted_completion;
    luaL_newlib(L, fns);
    return 1;
}
