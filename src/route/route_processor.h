/*
 * route_processor: GET_ROUTEINFO_BY_TOPIC (105) in C (protocol.md 3.3,
 * DefaultRequestProcessor.getRouteInfoByTopic): the TopicRouteData JSON
 * of a topic the NameServer knows, straight from the route tables into
 * the reply.  A request without a topic, or for a topic without a route,
 * goes to the Lua handler (lua/rmq/namesrv/processor.lua), which writes
 * the refusal.
 *
 * MT: one processor per worker.
 */
#ifndef RMQ_ROUTE_PROCESSOR_H
#define RMQ_ROUTE_PROCESSOR_H

#include "proto/native.h"

struct route;

/** A new processor on rt, or NULL with err_set(). */
struct native_proc *route_processor_new(struct route *rt);

#endif
