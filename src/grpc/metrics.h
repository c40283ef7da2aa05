/*
 * grpc metrics: every gRPC call in RocketMQ 5's rocketmq_rpc_latency
 * histogram (and rmq_requests_total), recorded in C when the call ends
 * (h2_callbacks.on_end), beside the remoting series of the same family.
 *
 * RocketMQ 5's proxy records no gRPC call in the family (only its
 * remoting requests, RemotingMetricsManager), so the labels follow its
 * remoting series' naming (RemotingHelper: a code's name in lower case):
 *   protocol_type  "grpc"
 *   request_code   the MessagingService method in lower snake case
 *                  ("send_message", "receive_message", ...), "unknown"
 *                  for any other path
 *   response_code  the v2 Status.code of the call's last answer in lower
 *                  case ("ok", "topic_not_found", "message_not_found");
 *                  when the call ended without one, or with a gRPC
 *                  status other than OK, that status's name ("cancelled",
 *                  "unimplemented", "invalid_argument", "resource_exhausted")
 *   result         5.x's: "success" (grpc-status OK), "cancelled" (the
 *                  client reset it, its connection went, or its deadline
 *                  passed), "process_request_failed" (any other status)
 * A bounded set: 18 names x the v2 codes and gRPC statuses.
 *
 * MT: one grpc_metrics per worker, on its thread.
 */
#ifndef RMQ_GRPC_METRICS_H
#define RMQ_GRPC_METRICS_H

#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

struct metrics_shard;
struct grpc_metrics;

/** A worker's recorder on shard sh; NULL when sh is NULL (metrics off)
 * or out of memory (then nothing is recorded). */
struct grpc_metrics *grpc_metrics_new(struct metrics_shard *sh);
void grpc_metrics_free(struct grpc_metrics *gm);

/** One call ended: its :path, gRPC status, v2 code (-1: none) and
 * duration.  gm NULL: nothing. */
void grpc_metrics_call(struct grpc_metrics *gm, const char *path, int grpc_status, int32_t v2_code,
                       int64_t elapsed_ns);

/** The v2 Status.code a MessagingService response carries (every
 * response has its Status as field 1, a oneof's case for
 * ReceiveMessageResponse and TelemetryCommand), or -1 when it has none. */
int32_t grpc_metrics_status_of(const ProtobufCMessage *m);

#endif
