/*
 * peertab: a table of peer addresses (the address part of a connection's
 * "ip:port"), one entry an address, shared by every connection from it
 * and freed with the last one.  What an entry counts is the caller's: it
 * embeds struct peertab_entry as the first member of its own struct and
 * gives the table that struct's size (peertab_init).
 *
 * Two users, one core (they were two copies): the loop's per-peer frame
 * fairness (net/conn.c, one table a reactor) and the memory budget's
 * per-peer account (core/membudget.c, one table a process).
 *
 * Cost: the entries are kept sorted by address and found by binary
 * search, so addresses a peer chooses never make a lookup slower than
 * O(log n); an address joins at accept and leaves at close only, and a
 * connection keeps its entry in between.
 *
 * Bounds: an entry exists only while a connection holds it (joined and
 * not left), so there are never more entries than open connections, and
 * an address longer than PEERTAB_ADDR_MAX - 1 bytes is cut there (no
 * address a socket gives is: INET6_ADDRSTRLEN is 46).  The array halves
 * when it is under a quarter full (down to four times its first size),
 * so a flood from many addresses does not pin its peak.
 *
 * MT: none; a table shared between threads is locked around every call
 * by its owner.
 */
#ifndef RMQ_PEERTAB_H
#define RMQ_PEERTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PEERTAB_ADDR_MAX 64

struct peertab_entry {
    uint32_t refs;             /* holders (peertab_join without leave) */
    char addr[PEERTAB_ADDR_MAX];
};

struct peertab {
    struct peertab_entry **v;  /* sorted by addr */
    size_t n, cap;
    size_t entry_size;         /* the caller's struct, entry first */
    size_t min_cap;            /* the first allocation, and the floor of shrinking */
};

/** An empty table of entries `entry_size` bytes each (at least
 * sizeof(struct peertab_entry)); `min_cap` slots are allocated at the
 * first join (0: 16). */
void peertab_init(struct peertab *t, size_t entry_size, size_t min_cap);

/** The address part of `peer` ("ip:port", "[v6]:port", "v6:port" or a
 * bare address): its length, cut to PEERTAB_ADDR_MAX - 1. */
size_t peertab_addr_len(const char *peer);

/**
 * Joins the entry of `peer`'s address (made, zeroed but for addr and
 * refs, when it is the first): one reference more.  NULL when out of
 * memory; the table is then as before.
 */
struct peertab_entry *peertab_join(struct peertab *t, const char *peer);

/** Drops a reference taken by peertab_join; the last one removes and
 * frees the entry.  NULL: nothing. */
void peertab_leave(struct peertab *t, struct peertab_entry *e);

/** The entry of `peer`'s address, or NULL; takes no reference. */
struct peertab_entry *peertab_find(const struct peertab *t, const char *peer);

/** The number of entries, and entry i (0 <= i < n) in address order. */
size_t peertab_count(const struct peertab *t);
struct peertab_entry *peertab_at(const struct peertab *t, size_t i);

/** Frees the array and every entry still in it; the table is empty
 * (and may be used again). */
void peertab_free(struct peertab *t);

#endif
