/*
 * rcbuf: bytes written once, then shared read-only by reference count
 * among threads: a large admin reply body (GET_ALL_TOPIC_CONFIG at 26,000
 * topics is 3 MB) encoded once per DataVersion and queued on every
 * connection that asks for it without a copy per request (net/conn.h
 * conn_send_shared, docs/hardening-tables.md).
 *
 * The creator fills data[] before it shares the buffer; after that nobody
 * writes it.  The last rcbuf_unref frees it.
 *
 * MT: ref/unref from any thread.
 */
#ifndef RMQ_RCBUF_H
#define RMQ_RCBUF_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct rcbuf {
    atomic_size_t refs;
    size_t len;
    uint8_t data[];
};

/** A buffer of len bytes (uninitialised), one reference; NULL on ENOMEM. */
struct rcbuf *rcbuf_new(size_t len);

/** A buffer holding a copy of p[0..len); NULL on ENOMEM. */
struct rcbuf *rcbuf_copy(const void *p, size_t len);

/** Takes another reference; returns b. */
struct rcbuf *rcbuf_ref(struct rcbuf *b);

/** Drops a reference (NULL is ignored); the last one frees. */
void rcbuf_unref(struct rcbuf *b);

#endif
