/*
 * membudget: the memory a process holds because of its peers or its
 * data, counted against limits per connection, per peer address and in
 * total (docs/memory.md).
 *
 * What is counted (enum membudget_kind):
 *   MB_REQUESTS  requests dispatched to a Lua task and not answered yet
 *                (held long-poll pulls above all): the frame plus
 *                MEMBUDGET_TASK_BYTES, an estimate of what a waiting task
 *                keeps (its coroutine, the decoded header and the
 *                handler's tables): 40,000 held pulls grew a broker's RSS
 *                by 216 MB, 5.4 KiB each.
 *   MB_OUTPUT    reply bytes queued for a connection that the kernel has
 *                not taken (admin replies being written included).
 *   MB_CONSOLE   the web console's Lua state (its history), as it reports.
 *   MB_METRICS   the metrics registry's label sets.
 * Requests and output are charged to their connection and its peer
 * address too; the console and the metrics count in the total only.
 *
 * Refusal.  membudget_charge adds a request's bytes unless that would
 * take its connection, its peer address or the total past its limit;
 * then nothing is added and it returns the conf key of the limit, which
 * the caller names in its SYSTEM_BUSY remark.  Output and the reported
 * figures are never refused (a reply already computed is sent); they
 * count, so the next request is refused while they are high.
 *
 * Peers.  A peer entry (one per IP address with a connection open) is
 * found by binary search in a sorted table (core/peertab.h) under a
 * mutex, at accept and close only; a connection keeps its entry, so charging costs atomic
 * adds and no lookup.
 *
 * MT: every function on any thread.  The process has one budget
 * (membudget_shared), like the other process-wide registries (smap_named,
 * creg_shared): connections of every worker, the console's thread and
 * the metrics registry report to it.
 */
#ifndef RMQ_MEMBUDGET_H
#define RMQ_MEMBUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a waiting request task keeps besides its frame (see above). */
#define MEMBUDGET_TASK_BYTES 5120

enum membudget_kind {
    MB_REQUESTS,
    MB_OUTPUT,
    MB_CONSOLE,
    MB_METRICS,
    MB_NKINDS
};

/* Which limit refused. */
enum membudget_limit {
    MB_LIMIT_CONNECTION,
    MB_LIMIT_PEER,
    MB_LIMIT_TOTAL,
    MB_NLIMITS
};

struct membudget_limits {
    int64_t total;             /* memoryBudgetBytes; 0 = no limit */
    int64_t per_peer;          /* memoryBudgetPerPeerBytes */
    int64_t per_conn;          /* memoryBudgetPerConnectionBytes */
};

struct membudget;
struct mb_peer;

/* A connection's share: its bytes and its peer's entry. */
struct mb_account {
    struct mb_peer *peer;      /* NULL: not counted per peer (no memory) */
    int64_t bytes;             /* requests + output charged to it */
    int64_t out;               /* of which output */
};

struct membudget_figures {
    int64_t total;
    int64_t kind[MB_NKINDS];
    int64_t peer_max;          /* the largest peer's bytes */
    int64_t peers;             /* peer addresses with a connection */
    int64_t refused[MB_NLIMITS];
    struct membudget_limits limits;
};

/** The process's budget (made on first use; never freed).  NULL only
 * when out of memory at the first call. */
struct membudget *membudget_shared(void);

void membudget_set_limits(struct membudget *b, const struct membudget_limits *l);

/** The conf key of a limit ("memoryBudgetBytes", ...). */
const char *membudget_limit_key(enum membudget_limit which);

/** Opens a connection's account; `peer` is "ip:port" (the port is not
 * part of the address).  Without memory the account counts in the total
 * only. */
void membudget_open(struct membudget *b, struct mb_account *a, const char *peer);

/** Releases whatever the account still holds and its peer entry. */
void membudget_close(struct membudget *b, struct mb_account *a);

/**
 * Adds `bytes` of MB_REQUESTS to the account, its peer and the total,
 * unless one of them would pass its limit: then adds nothing, counts the
 * refusal and returns false with *which set.
 */
bool membudget_charge(struct membudget *b, struct mb_account *a, int64_t bytes,
                      enum membudget_limit *which);

/** Gives back bytes of MB_REQUESTS charged earlier. */
void membudget_release(struct membudget *b, struct mb_account *a, int64_t bytes);

/** Sets the account's output figure to `bytes` (never refused). */
void membudget_set_output(struct membudget *b, struct mb_account *a, int64_t bytes);

/** Adds delta (may be negative) to an unattributed kind (console,
 * metrics). */
void membudget_add(struct membudget *b, enum membudget_kind kind, int64_t delta);

/** True when the total is at or past its limit (for reporters that
 * shrink themselves, like the console). */
bool membudget_over(struct membudget *b);

void membudget_figures(struct membudget *b, struct membudget_figures *out);

/* {{{ What the process holds, for operators (docs/memory.md) */

/* Lua states that report their heap: the main one, each worker, the
 * console; more than this are not shown. */
#define MEMBUDGET_LUA_STATES 16

struct membudget_lua {
    int n;
    struct {
        char name[16];         /* "main", "worker0", "console" */
        int64_t bytes;         /* collectgarbage("count") * 1024, last report */
    } state[MEMBUDGET_LUA_STATES];
};

/** A slot for a Lua state's heap figure, named `name` (a slot of that
 * name is reused, so a restarted console keeps its own); -1 when all are
 * taken. */
int membudget_lua_slot(struct membudget *b, const char *name);

/** Sets slot's heap figure (bytes); slot -1 is ignored. */
void membudget_lua_report(struct membudget *b, int slot, int64_t bytes);

void membudget_lua_figures(struct membudget *b, struct membudget_lua *out);

/* The allocator's own figures.  With jemalloc (rmq-server): its
 * stats.* (allocated: what the program holds; active: pages with
 * something allocated in them; resident: pages mapped in, its metadata
 * and dirty pages not given back yet included; retained: address space
 * kept but given back to the system; metadata).  With glibc:
 * mallinfo2's in-use bytes as allocated, the arena's size as resident,
 * the top chunk's free tail as retained.  `name` says which. */
struct membudget_alloc {
    const char *name;          /* "jemalloc" or "glibc" */
    int64_t allocated, active, resident, retained, metadata, mapped;
    int64_t purges;            /* membudget_trim calls that ran */
};

void membudget_alloc_figures(struct membudget *b, struct membudget_alloc *out);

/* }}} */

/* {{{ The burst arena
 *
 * Objects a peer makes by the thousand and that all go when its burst
 * ends (a held pull's record and its waits) come from a jemalloc arena
 * of their own, without the thread cache.  From the shared arena they
 * filled slabs beside the long-lived objects allocated meanwhile, and
 * those few kept each slab (5 pages) in memory after the burst: 2-5 MB
 * after a held-pull flood (docs/memory.md).  In their own arena, the
 * slabs empty together and go back to the system with the decay.
 * Without jemalloc (the sanitizer builds, the CLI, the Lua module) they
 * are calloc / free.  A pointer from membudget_burst_calloc goes back
 * through membudget_burst_free only (not free: the thread cache would
 * hand it to a long-lived malloc). */

/** size bytes, zeroed; NULL when out of memory. */
void *membudget_burst_calloc(size_t size);

/** Frees p (NULL: nothing). */
void membudget_burst_free(void *p);

/* }}} */

/** Gives freed heap memory back to the system (jemalloc's purge when
 * linked with it, else malloc_trim) at most once
 * per `min_gap_ms` and only after at least `min_freed` bytes of the
 * budget were released since the last time.  Returns true when it ran.
 * Called by each worker's idle sweep (docs/memory.md says why). */
bool membudget_trim(struct membudget *b, int64_t min_freed, int64_t min_gap_ms);

#endif
