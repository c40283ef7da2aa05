/*
 * smap: named maps of string -> string shared by every thread of the
 * process, each under one rwlock, each with a version that moves on every
 * write.  The broker keeps the state all its workers must agree on here
 * (topic configs, subscription groups, consumer offsets, client groups):
 * workers read far more often than they write, and a Lua state caches
 * what it decoded from a map until the map's version moves.
 *
 * Maps are created on first use and live until the process exits (the
 * registry is the one process-wide object of this module: by nature there
 * is one set of broker tables per process).
 *
 * MT: every function, from any thread.
 */
#ifndef RMQ_SMAP_H
#define RMQ_SMAP_H

#include <stddef.h>
#include <stdint.h>

struct smap;

/** The map called `name`, created empty on first use; NULL on ENOMEM. */
struct smap *smap_named(const char *name);

/** Bumped by every set and delete. */
uint64_t smap_version(struct smap *m);

/**
 * Sets key to value (copied).  Returns 0 or -ENOMEM.
 * With `if_absent`, an existing key is left alone and 1 is returned.
 */
int smap_set(struct smap *m, const char *key, size_t klen, const char *val,
             size_t vlen, int if_absent);

/** Removes key. Returns 1 if it was there, 0 if not. */
int smap_del(struct smap *m, const char *key, size_t klen);

/**
 * Copies the value of key into buf (up to cap bytes).  Returns its full
 * length (which may exceed cap: call again with a larger buffer), or -1
 * when the key is absent.
 */
long smap_get(struct smap *m, const char *key, size_t klen, char *buf,
              size_t cap);

/**
 * Serialises every pair into buf as repeated (u32 klen, key, u32 vlen,
 * value).  Returns the bytes needed (a call with cap < that copies
 * nothing) and sets *count.
 */
size_t smap_dump(struct smap *m, char *buf, size_t cap, size_t *count);

/** Number of keys. */
size_t smap_count(struct smap *m);

/** The longest bucket chain (what a lookup may walk), and the bucket count. */
size_t smap_max_chain(struct smap *m, size_t *nbuckets);

/** Removes every key. */
void smap_clear(struct smap *m);

#endif
