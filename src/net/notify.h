/*
 * notify: which threads wait on which event keys, process-wide, so that
 * an event raised in one worker (a message stored for topic@queue) wakes
 * the tasks waiting for it in every worker (held long-poll pulls).  A
 * raise costs a cheap tag of the key and one relaxed load while no key
 * of that tag is waited on, else one lock and a hash lookup.
 *
 * A worker that starts waiting on a key calls notify_interest(key, slot,
 * +1), and -1 when the wait ends.  notify_raise(key) returns the slots
 * that have waiters and were not already told; the caller posts one wake
 * to each (the mailbox), and the woken slot calls notify_taken() before
 * waking its local waiters, so a burst of raises costs one post per
 * slot, not one per raise.
 *
 * MT: every function, any thread (one mutex).
 */
#ifndef RMQ_NOTIFY_H
#define RMQ_NOTIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NOTIFY_MAX_SLOTS 260   /* main/scripts + workers (server/server.c's cap) */

/** Adds delta (+1/-1) to slot's waiters on key.  Returns 0 or -ENOMEM. */
int notify_interest(const char *key, size_t klen, int slot, int delta);

/**
 * Marks key raised.  Fills slots[] with the slots that have waiters and
 * no wake pending (marking it pending) and returns how many.
 */
int notify_raise(const char *key, size_t klen, int *slots, int max);

/**
 * True while some task waits on a key ending in "@*" (a held POP of a
 * whole topic): the send path raises "topic@*" beside "topic@queueId"
 * only then, one relaxed atomic load otherwise.
 */
bool notify_star_waiting(void);

/** The wake for (key, slot) is being handled: raises post again. */
void notify_taken(const char *key, size_t klen, int slot);

#endif
