/*
 * send_props: the properties string of a message as a 4.9.8 broker stores
 * it (protocol.md 5.2: key \001 value, pairs joined by \002), made from
 * the string a producer sent, with the facts the send path needs from it.
 *
 * SendMessageProcessor stores MessageDecoder.string2messageProperties ->
 * messageProperties2String of the producer's text: a pair with an empty
 * key or value is dropped, WAIT too (except in a batch, which keeps it),
 * and CLUSTER is set to the broker's cluster (replacing the producer's).
 *
 * MT: pure.
 */
#ifndef RMQ_SEND_PROPS_H
#define RMQ_SEND_PROPS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/buf.h"

struct send_props {
    const char *tags;          /* TAGS value in the input, NULL if none */
    size_t tags_len;
    bool wait;                 /* WAIT is not "false" */
    int delay;                 /* DELAY level (0: none; capped at 1000) */
};

/**
 * Appends the stored form of props[0..n) to out and fills f.
 * Returns 0 or -ENOMEM.
 */
int send_props_store(const char *props, size_t n, const char *cluster,
                     size_t cl, bool keep_wait, struct buf *out,
                     struct send_props *f);

#endif
