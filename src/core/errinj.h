/*
 * errinj: named fault injection points (Tarantool's errinj idea).  Every
 * point is listed once in ERRINJ_LIST; code tests it with ERRINJ(id) or
 * reads its value with errinj_get(id).  All points are off (0) unless a
 * test switches them on, from Lua through rmq.store.errinj(name, value).
 * They are compiled in always: the check is one relaxed atomic load on
 * paths that already do far more work (a file creation, an fsync, an
 * append under a lock).
 *
 * The values live in one process-wide static array of atomics (the only
 * global state of the store).  That is deliberate: a test enables a fault
 * for the whole process, whichever thread (flush, allocation, a worker)
 * hits the point.
 *
 * MT: every function here is safe from any thread.
 */
#ifndef RMQ_ERRINJ_H
#define RMQ_ERRINJ_H

#include <stdint.h>

/* _(ID, "lua name", "what it does") */
#define ERRINJ_LIST(_)                                                       \
    _(ERRINJ_WRITE_FAIL, "write_fail",                                       \
      "a commit log append fails after writing its bytes (rolled back)")     \
    _(ERRINJ_COMMIT_FAIL, "commit_fail",                                     \
      "writing the commit log's staged bytes to its file fails (EIO; "       \
      "what was staged is discarded)")                                       \
    _(ERRINJ_ALLOC_FAIL, "alloc_fail",                                       \
      "creating or reserving a mapped file fails with ENOSPC")               \
    _(ERRINJ_FSYNC_FAIL, "fsync_fail", "msync of a mapped file fails (EIO)") \
    _(ERRINJ_FLUSH_DELAY_MS, "flush_delay_ms",                               \
      "the commit log flush thread sleeps this many ms before each sync")    \
    _(ERRINJ_DISK_RATIO, "disk_ratio",                                       \
      "disk usage percent the store sees (0 = measure with statvfs)")        \
    _(ERRINJ_PUT_DELAY_MS, "put_delay_ms",                                   \
      "a commit log append sleeps this many ms holding the append lock")     \
    _(ERRINJ_CQ_CREATE_DELAY_MS, "cq_create_delay_ms",                       \
      "making a new consume queue (its directory and first file) sleeps "    \
      "this many ms first: a slow file system")                              \
    _(ERRINJ_TIMER_CLOCK_MS, "timer_clock_ms",                               \
      "ms added to the wall clock of timer messages (store/timer.h): tests "  \
      "of delays of hours or days")                                          \
    _(ERRINJ_TIMER_CRASH_AFTER, "timer_crash_after",                         \
      "the process kills itself (SIGKILL) right after the timer service's "  \
      "Nth delivery of this run is stored, before any checkpoint records it")\
    _(ERRINJ_SSS_ANSWER_DELAY_MS, "sss_answer_delay_ms",                     \
      "a master in controller mode applies the controller's answer to its "  \
      "SyncStateSet change this many ms late (rmq.broker.replica_role): the " \
      "window in which the controller's set and the master's differ")     \
    _(ERRINJ_CONFIG_PERSIST_DELAY_MS, "config_persist_delay_ms",             \
      "the broker's main thread waits this many ms (serving on) before "     \
      "each persist of topics.json and subscriptionGroup.json: the window "  \
      "between a request that auto-creates a config and the persister")

enum errinj_id {
#define ERRINJ_ENUM(id, name, doc) id,
    ERRINJ_LIST(ERRINJ_ENUM)
#undef ERRINJ_ENUM
    ERRINJ_COUNT
};

/** The value of an injection point (0 = off). */
int64_t errinj_get(enum errinj_id id);

/** Sets an injection point. */
void errinj_set(enum errinj_id id, int64_t value);

/** The id of a point by its Lua name, or -1. */
int errinj_find(const char *name);

/** The Lua name of a point ("" for an id out of range). */
const char *errinj_name(int id);

/** True when the point is on; for `if (ERRINJ(ERRINJ_X)) fail();`. */
#define ERRINJ(id) (__builtin_expect(errinj_get(id) != 0, 0))

#endif
