/*
 * membudget: see membudget.h.
 */
#include "core/membudget.h"

#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/peertab.h"
#include "core/queue.h"

/* One peer address: an entry of the table (core/peertab.h; its refs are
 * the accounts open on it, under the mutex). */
struct mb_peer {
    struct peertab_entry e;    /* first: the table's part */
    _Atomic int64_t bytes;
};

struct membudget {
    _Atomic int64_t total;
    _Atomic int64_t kind[MB_NKINDS];
    _Atomic int64_t refused[MB_NLIMITS];
    _Atomic int64_t lim_total, lim_peer, lim_conn;
    _Atomic int64_t released;      /* bytes given back since the last trim */
    _Atomic int64_t trimmed_ms;    /* when the last trim ran */
    _Atomic int64_t trims;         /* trims that ran */
    _Atomic int64_t lua_bytes[MEMBUDGET_LUA_STATES];
    char lua_name[MEMBUDGET_LUA_STATES][16];   /* under the mutex */
    int nlua;
    unsigned burst_arena;          /* membudget_burst_calloc's; 0: none */
    pthread_mutex_t lock;          /* the peer table */
    struct peertab peers;          /* of struct mb_peer */
};

/* jemalloc's control call, when the program is linked with it (rmq-server
 * is: docs/memory.md); NULL otherwise (the CLI, the Lua module, the
 * sanitizer builds), and glibc's malloc_trim does the job. */
extern int mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen)
    __attribute__((weak));
extern void *mallocx(size_t size, int flags) __attribute__((weak));
extern void dallocx(void *ptr, int flags) __attribute__((weak));

/* jemalloc's flags (jemalloc/jemalloc.h, not included: the header is
 * not there where jemalloc is not linked). */
#define JE_MALLOCX_ZERO 0x40               /* MALLOCX_ZERO */
#define JE_MALLOCX_TCACHE_NONE 0x100       /* MALLOCX_TCACHE(-1): ((-1) + 2) << 8 */
#define JE_MALLOCX_ARENA(a) ((int)(((a) + 1u) << 20))

static pthread_once_t shared_once = PTHREAD_ONCE_INIT;
static struct membudget *shared;

static void
make_shared(void)
{
    struct membudget *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return;
    if (pthread_mutex_init(&b->lock, NULL) != 0) {
        free(b);
        return;
    }
    peertab_init(&b->peers, sizeof(struct mb_peer), 64);
    /* The burst arena (membudget.h).  Arena 0 is jemalloc's first
     * automatic one, so 0 can mean none. */
    unsigned arena = 0;
    size_t len = sizeof(arena);
    if (mallctl != NULL && mallocx != NULL && dallocx != NULL &&
        mallctl("arenas.create", &arena, &len, NULL, 0) == 0)
        b->burst_arena = arena;
    shared = b;
}

struct membudget *
membudget_shared(void)
{
    (void)pthread_once(&shared_once, make_shared);
    return shared;
}

void
membudget_set_limits(struct membudget *b, const struct membudget_limits *l)
{
    atomic_store_explicit(&b->lim_total, l->total, memory_order_relaxed);
    atomic_store_explicit(&b->lim_peer, l->per_peer, memory_order_relaxed);
    atomic_store_explicit(&b->lim_conn, l->per_conn, memory_order_relaxed);
}

const char *
membudget_limit_key(enum membudget_limit which)
{
    switch (which) {
    case MB_LIMIT_CONNECTION: return "memoryBudgetPerConnectionBytes";
    case MB_LIMIT_PEER: return "memoryBudgetPerPeerBytes";
    default: return "memoryBudgetBytes";
    }
}

/* {{{ Peers */

void
membudget_open(struct membudget *b, struct mb_account *a, const char *peer)
{
    a->peer = NULL;
    a->bytes = a->out = 0;
    if (pthread_mutex_lock(&b->lock) != 0)
        return;
    struct peertab_entry *e = peertab_join(&b->peers, peer);
    if (e != NULL)
        a->peer = container_of(e, struct mb_peer, e);
    (void)pthread_mutex_unlock(&b->lock);
}

void
membudget_close(struct membudget *b, struct mb_account *a)
{
    membudget_set_output(b, a, 0);
    if (a->bytes > 0)
        membudget_release(b, a, a->bytes);
    struct mb_peer *p = a->peer;
    a->peer = NULL;
    if (p == NULL || pthread_mutex_lock(&b->lock) != 0)
        return;
    peertab_leave(&b->peers, &p->e);
    (void)pthread_mutex_unlock(&b->lock);
}

/* }}} */

/* Adds to one counter unless past limit (> 0); true when added. */
static bool
add_within(_Atomic int64_t *v, int64_t bytes, int64_t limit)
{
    int64_t now = atomic_fetch_add_explicit(v, bytes, memory_order_relaxed) + bytes;
    if (limit > 0 && now > limit) {
        atomic_fetch_sub_explicit(v, bytes, memory_order_relaxed);
        return false;
    }
    return true;
}

bool
membudget_charge(struct membudget *b, struct mb_account *a, int64_t bytes,
                 enum membudget_limit *which)
{
    int64_t lc = atomic_load_explicit(&b->lim_conn, memory_order_relaxed);
    if (lc > 0 && a->bytes + bytes > lc) {
        *which = MB_LIMIT_CONNECTION;
        goto refused;
    }
    if (a->peer != NULL &&
        !add_within(&a->peer->bytes, bytes, atomic_load_explicit(&b->lim_peer, memory_order_relaxed))) {
        *which = MB_LIMIT_PEER;
        goto refused;
    }
    if (!add_within(&b->total, bytes, atomic_load_explicit(&b->lim_total, memory_order_relaxed))) {
        if (a->peer != NULL)
            atomic_fetch_sub_explicit(&a->peer->bytes, bytes, memory_order_relaxed);
        *which = MB_LIMIT_TOTAL;
        goto refused;
    }
    atomic_fetch_add_explicit(&b->kind[MB_REQUESTS], bytes, memory_order_relaxed);
    a->bytes += bytes;
    return true;
refused:
    atomic_fetch_add_explicit(&b->refused[*which], 1, memory_order_relaxed);
    return false;
}

static void
sub_all(struct membudget *b, struct mb_account *a, enum membudget_kind kind, int64_t bytes)
{
    if (a->peer != NULL)
        atomic_fetch_sub_explicit(&a->peer->bytes, bytes, memory_order_relaxed);
    atomic_fetch_sub_explicit(&b->total, bytes, memory_order_relaxed);
    atomic_fetch_sub_explicit(&b->kind[kind], bytes, memory_order_relaxed);
    if (bytes > 0)
        atomic_fetch_add_explicit(&b->released, bytes, memory_order_relaxed);
    a->bytes -= bytes;
}

void
membudget_release(struct membudget *b, struct mb_account *a, int64_t bytes)
{
    sub_all(b, a, MB_REQUESTS, bytes);
}

void
membudget_set_output(struct membudget *b, struct mb_account *a, int64_t bytes)
{
    int64_t delta = bytes - a->out;
    if (delta == 0)
        return;
    a->out = bytes;
    /* Output is never refused: a negative release adds. */
    sub_all(b, a, MB_OUTPUT, -delta);
}

void
membudget_add(struct membudget *b, enum membudget_kind kind, int64_t delta)
{
    atomic_fetch_add_explicit(&b->total, delta, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->kind[kind], delta, memory_order_relaxed);
    if (delta < 0)
        atomic_fetch_add_explicit(&b->released, -delta, memory_order_relaxed);
}

bool
membudget_over(struct membudget *b)
{
    int64_t lim = atomic_load_explicit(&b->lim_total, memory_order_relaxed);
    return lim > 0 && atomic_load_explicit(&b->total, memory_order_relaxed) >= lim;
}

void
membudget_figures(struct membudget *b, struct membudget_figures *out)
{
    memset(out, 0, sizeof(*out));
    out->total = atomic_load_explicit(&b->total, memory_order_relaxed);
    for (int i = 0; i < MB_NKINDS; i++)
        out->kind[i] = atomic_load_explicit(&b->kind[i], memory_order_relaxed);
    for (int i = 0; i < MB_NLIMITS; i++)
        out->refused[i] = atomic_load_explicit(&b->refused[i], memory_order_relaxed);
    out->limits.total = atomic_load_explicit(&b->lim_total, memory_order_relaxed);
    out->limits.per_peer = atomic_load_explicit(&b->lim_peer, memory_order_relaxed);
    out->limits.per_conn = atomic_load_explicit(&b->lim_conn, memory_order_relaxed);
    if (pthread_mutex_lock(&b->lock) != 0)
        return;
    size_t n = peertab_count(&b->peers);
    out->peers = (int64_t)n;
    for (size_t i = 0; i < n; i++) {
        const struct mb_peer *p = container_of(peertab_at(&b->peers, i), struct mb_peer, e);
        int64_t v = atomic_load_explicit(&p->bytes, memory_order_relaxed);
        if (v > out->peer_max)
            out->peer_max = v;
    }
    (void)pthread_mutex_unlock(&b->lock);
}

bool
membudget_trim(struct membudget *b, int64_t min_freed, int64_t min_gap_ms)
{
    int64_t now = clock_mono_ns() / 1000000;
    int64_t last = atomic_load_explicit(&b->trimmed_ms, memory_order_relaxed);
    if (atomic_load_explicit(&b->released, memory_order_relaxed) < min_freed ||
        (last != 0 && now - last < min_gap_ms))
        return false;
    /* One thread trims; the others see the new stamp and skip. */
    if (!atomic_compare_exchange_strong(&b->trimmed_ms, &last, now))
        return false;
    atomic_store_explicit(&b->released, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->trims, 1, memory_order_relaxed);
    if (mallctl != NULL)
        (void)mallctl("arena.4096.purge", NULL, NULL, NULL, 0);  /* MALLCTL_ARENAS_ALL */
    else
        (void)malloc_trim(0);
    return true;
}

/* {{{ The burst arena */

void *
membudget_burst_calloc(size_t size)
{
    struct membudget *b = membudget_shared();
    if (b == NULL || b->burst_arena == 0)
        return calloc(1, size);
    return mallocx(size, JE_MALLOCX_ARENA(b->burst_arena) | JE_MALLOCX_TCACHE_NONE | JE_MALLOCX_ZERO);
}

void
membudget_burst_free(void *p)
{
    if (p == NULL)
        return;
    struct membudget *b = membudget_shared();
    if (b == NULL || b->burst_arena == 0)
        free(p);
    else
        dallocx(p, JE_MALLOCX_TCACHE_NONE);
}

/* }}} */

/* {{{ What the process holds */

int
membudget_lua_slot(struct membudget *b, const char *name)
{
    int slot = -1;
    if (pthread_mutex_lock(&b->lock) != 0)
        return -1;
    for (int i = 0; i < b->nlua; i++)
        if (strncmp(b->lua_name[i], name, sizeof(b->lua_name[i]) - 1) == 0) {
            slot = i;
            break;
        }
    if (slot < 0 && b->nlua < MEMBUDGET_LUA_STATES) {
        slot = b->nlua++;
        (void)snprintf(b->lua_name[slot], sizeof(b->lua_name[slot]), "%s", name);
    }
    (void)pthread_mutex_unlock(&b->lock);
    return slot;
}

void
membudget_lua_report(struct membudget *b, int slot, int64_t bytes)
{
    if (slot >= 0 && slot < MEMBUDGET_LUA_STATES)
        atomic_store_explicit(&b->lua_bytes[slot], bytes, memory_order_relaxed);
}

void
membudget_lua_figures(struct membudget *b, struct membudget_lua *out)
{
    memset(out, 0, sizeof(*out));
    if (pthread_mutex_lock(&b->lock) != 0)
        return;
    out->n = b->nlua;
    for (int i = 0; i < b->nlua; i++) {
        memcpy(out->state[i].name, b->lua_name[i], sizeof(out->state[i].name));
        out->state[i].bytes = atomic_load_explicit(&b->lua_bytes[i], memory_order_relaxed);
    }
    (void)pthread_mutex_unlock(&b->lock);
}

/* One size_t statistic of jemalloc's; 0 when it has none by that name. */
static int64_t
je_stat(const char *name)
{
    size_t v = 0, len = sizeof(v);
    if (mallctl(name, &v, &len, NULL, 0) != 0)
        return 0;
    return (int64_t)v;
}

void
membudget_alloc_figures(struct membudget *b, struct membudget_alloc *out)
{
    memset(out, 0, sizeof(*out));
    out->purges = atomic_load_explicit(&b->trims, memory_order_relaxed);
    if (mallctl != NULL) {
        /* The stats are a snapshot taken when the epoch advances. */
        uint64_t epoch = 1;
        size_t len = sizeof(epoch);
        (void)mallctl("epoch", &epoch, &len, &epoch, len);
        out->name = "jemalloc";
        out->allocated = je_stat("stats.allocated");
        out->active = je_stat("stats.active");
        out->resident = je_stat("stats.resident");
        out->retained = je_stat("stats.retained");
        out->metadata = je_stat("stats.metadata");
        out->mapped = je_stat("stats.mapped");
        return;
    }
    struct mallinfo2 mi = mallinfo2();
    out->name = "glibc";
    out->allocated = (int64_t)(mi.uordblks + mi.hblkhd);
    out->active = out->allocated;
    out->resident = (int64_t)(mi.arena + mi.hblkhd);
    out->retained = (int64_t)mi.keepcost;
    out->mapped = out->resident;
}

/* }}} */
