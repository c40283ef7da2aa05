/*
 * sendpack: a SendMessageResponse packed by hand, the answer of every
 * gRPC send (service.c): protobuf's wire format written in one pass over
 * the fields, where protobuf-c's generic packer walks the descriptors
 * twice (size, then bytes) and costs about as much again as the rest of
 * the answer (docs/grpc.md, "Measured").  Proto3 rules as protobuf-c
 * applies them: a field at its default (0, an empty or NULL string, a
 * NULL message) is not written, so the bytes are protobuf-c's
 * (spec/c/test_sendpack.c compares them).
 *
 * MT: pure.
 */
#ifndef RMQ_GRPC_SENDPACK_H
#define RMQ_GRPC_SENDPACK_H

#include <stddef.h>
#include <stdint.h>

#include "apache/rocketmq/v2/service.pb-c.h"

/**
 * Packs SendMessageResponse{status = *st, entries = entries[0..n)} into
 * out (NULL: nothing written).  Returns its size either way.
 */
size_t sendpack_response(uint8_t *out, const Apache__Rocketmq__V2__Status *st,
                         Apache__Rocketmq__V2__SendResultEntry *const *entries, size_t n);

#endif
