/*
 * heartbeat_processor: HEART_BEAT (34) in C for the repeat heartbeat, the
 * one every client sends every 30 s (protocol.md 4.4): a HeartbeatData
 * that changes nothing in the client registry but the channels'
 * lastUpdate is parsed and applied under the registry's read lock and
 * answered here.  A heartbeat that adds a channel, changes a group's
 * subscriptions or names a new group goes to the Lua handler
 * (lua/rmq/broker/clients.lua), which applies it, creates the groups'
 * retry topics and notifies the groups' consumers; so does one that does
 * not parse (the refusal is written there).
 *
 * MT: one processor per worker.
 */
#ifndef RMQ_HEARTBEAT_PROCESSOR_H
#define RMQ_HEARTBEAT_PROCESSOR_H

#include "proto/native.h"

struct creg;

/** A new processor on reg, or NULL with err_set(). */
struct native_proc *heartbeat_processor_new(struct creg *reg);

#endif
