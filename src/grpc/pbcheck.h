/*
 * pbcheck: what protobuf-c's unpacker does not check of a request and
 * proto3 requires: every `string` field is valid UTF-8 (RFC 3629: no
 * overlong forms, no surrogates, nothing past U+10FFFF).  Java's and
 * Go's protobuf refuse to parse a message that breaks it, so a tag, key,
 * property or group stored with bytes that are not UTF-8 would be handed
 * to every consumer of the topic in a ReceiveMessageResponse its SDK
 * cannot parse: one producer's bad byte would stop them all.  The
 * service refuses such a request as one that does not parse.
 *
 * MT: any.
 */
#ifndef RMQ_GRPC_PBCHECK_H
#define RMQ_GRPC_PBCHECK_H

#include <stdbool.h>
#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

/** True when every string field of m (sub-messages, repeated fields,
 * maps and the set member of a oneof included) is valid UTF-8; else
 * false with the first offending field's name in why. */
bool pbcheck_utf8(const ProtobufCMessage *m, char *why, size_t cap);

/** True when p[0..n) is valid UTF-8. */
bool pbcheck_utf8_bytes(const unsigned char *p, size_t n);

#endif
