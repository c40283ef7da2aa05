/*
 * recvpack: a ReceiveMessageResponse carrying one message, packed by hand:
 * the bulk of what a gRPC receive writes (one a message received;
 * service.c).  protobuf-c's generic packer walks every field descriptor
 * of Message and SystemProperties twice (size, then bytes, recursively
 * per nested message): 6,600 instructions a 1 KiB message, more than the
 * broker's whole POP of it (docs/grpc.md, "Measured").  Here each nested
 * size is computed once, bottom up, and the bytes written in one pass.
 * Proto3 rules as protobuf-c applies them: a singular field at its
 * default (0, an empty or NULL string, empty bytes, a NULL message) is not
 * written, every element of a repeated field is, so the bytes are
 * protobuf-c's (spec/c/test_recvpack.c compares them).
 *
 * MT: pure.
 */
#ifndef RMQ_GRPC_RECVPACK_H
#define RMQ_GRPC_RECVPACK_H

#include <stddef.h>
#include <stdint.h>

#include "apache/rocketmq/v2/service.pb-c.h"

/**
 * The sizes of ReceiveMessageResponse{message = *m}, computed once by
 * recvpack_size and used by recvpack_write.
 */
struct recvpack_sizes {
    size_t topic, sp, digest, born, store, delivery, inv, orphan, dlq, msg, total;
    /* the strings' lengths, measured once */
    size_t ns, name, tag, id, sum, host, handle, group;
};

/** The packed size of ReceiveMessageResponse{message = *m}; *z filled. */
size_t recvpack_size(const Apache__Rocketmq__V2__Message *m, struct recvpack_sizes *z);

/**
 * Writes ReceiveMessageResponse{message = *m} into out (z->total bytes,
 * z from recvpack_size of the same m).  Returns the bytes written.
 */
size_t recvpack_write(uint8_t *out, const Apache__Rocketmq__V2__Message *m, const struct recvpack_sizes *z);

/**
 * Packs AckMessageResponse{status = *st, entries = {message_id, receipt_handle,
 * status} of each of e[0..n)} into out (NULL: nothing written); returns
 * its size either way.  The answer of every AckMessage (32 entries a
 * receive's worth), where protobuf-c's packer cost 1,450 instructions an
 * entry.
 */
size_t recvpack_ack_response(uint8_t *out, const Apache__Rocketmq__V2__Status *st,
                             Apache__Rocketmq__V2__AckMessageResultEntry *const *e, size_t n);

#endif
