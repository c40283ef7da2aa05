/*
 * codec: a SendMessageRequest decoded by hand, the request of every gRPC
 * send (service.c): protobuf's wire format read in one pass per message
 * into the structures protobuf-c's generated code defines, where
 * protobuf_c_message_unpack walks the descriptors (a scan, then a parse
 * per field) and copies the body.  It was a tenth of a 1 KiB send's
 * instructions (docs/grpc.md, "Measured").
 *
 * The result is what protobuf_c_message_unpack gives for the same bytes
 * (spec/c/test_codec_send.c decodes with both, the SDKs' shapes and
 * random mutations of them, and compares), with two differences a
 * reader of the structures does not see: unknown fields are skipped, not
 * kept (but in the fields no SDK sends, which protobuf-c reads for it),
 * and the body is not copied (body.data points into the input, so
 * the request lives no longer than the bytes it was decoded from).
 * Whatever this decoder does not answer itself it leaves to protobuf-c:
 * malformed input, a message field given twice (protobuf merges the two),
 * groups, a tag or length in a longer form than protobuf-c reads, and a
 * string that is not UTF-8 (proto3's rule, grpc/pbcheck.h: every string
 * of a request this returns is UTF-8, so the service does not check it
 * again; protobuf-c's result it does check).  Then it returns NULL and the caller unpacks with protobuf-c, which decides
 * (NULL for malformed bytes), so the two never disagree on what parses.
 *
 * MT: pure.
 */
#ifndef RMQ_GRPC_CODEC_H
#define RMQ_GRPC_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "apache/rocketmq/v2/service.pb-c.h"

/**
 * Decodes p[0..n) as a SendMessageRequest, allocating with `a`.  Returns
 * the request, or NULL: leave it to protobuf_c_message_unpack.  What was
 * allocated before a NULL is not freed here: `a` is an arena freed as a
 * whole (the service's pb_alloc).
 */
Apache__Rocketmq__V2__SendMessageRequest *codec_send_request(ProtobufCAllocator *a, const uint8_t *p,
                                                            size_t n);

/**
 * AckMessageRequest, the same way (every receive's acknowledgement, 32
 * entries a receive's worth; protobuf-c's unpack and the UTF-8 walk after
 * it were 1,400 instructions an entry).  Nothing is borrowed from p.
 */
Apache__Rocketmq__V2__AckMessageRequest *codec_ack_request(ProtobufCAllocator *a, const uint8_t *p, size_t n);

#endif
