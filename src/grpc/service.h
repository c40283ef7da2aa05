/*
 * service: apache.rocketmq.v2.MessagingService in local mode, served on a
 * broker's (or standalone's) own workers: the gRPC port (conf
 * grpcServerPort) is a listener of the broker role whose connections
 * speak HTTP/2 (h2.h) instead of RemotingCommand frames.
 *
 * Each gRPC connection has a "shadow" remoting connection: a detached
 * conn (net/conn.h) on the same worker and listener, whose requests are
 * the broker's own requests, and whose replies come back to this module
 * instead of a socket (conn_handler.on_output).  A SendMessage becomes a
 * SEND_MESSAGE_V2 command built in memory (never encoded) and handed to
 * the native send processor (proto/native.h), exactly the C path a
 * remoting producer's send takes; what the native processor hands to Lua
 * (auto-created topics, refusals, delay levels, transactions) is encoded
 * once as a frame and dispatched as any remoting request
 * (host_server_handler), so every rule has one home.  A native
 * processor's reply is handed over as the command itself
 * (conn_handler.on_reply: no frame encoded and decoded again); Lua's
 * replies are decoded from the shadow conn's output.
 *
 * RPCs served: QueryRoute, Heartbeat, SendMessage, QueryAssignment,
 * Telemetry (settings both ways, transaction checks), EndTransaction,
 * NotifyClientTermination, ReceiveMessage / AckMessage /
 * ChangeInvisibleDuration over POP, UpdateOffset / GetOffset /
 * QueryOffset.  The others of MessagingService
 * answer gRPC UNIMPLEMENTED naming the method (docs/grpc.md).
 *
 * With aclEnable (conf.acl) every call is authenticated by its
 * authorization header (acl_guard_authenticate_hex) and its signed date
 * (within conf.auth_window_ms), and every request it makes of the broker
 * is checked as that account's (acl_guard_check_as), before the native
 * processor or Lua sees it; the gRPC listener's own frames are not
 * checked again (lua/rmq/acl/plain.lua installs it as "none").
 *
 * MT: one grpc_server per worker, used on that worker's thread.
 */
#ifndef RMQ_GRPC_SERVICE_H
#define RMQ_GRPC_SERVICE_H

#include <stdbool.h>
#include <stdint.h>

#include "grpc/h2.h"
#include "grpc/renew.h"
#include "grpc/txdata.h"
#include "grpc/upstream.h"

struct host;
struct grpc_server;

struct grpc_conf {
    struct h2_limits lim;
    int listener;                 /* index of the gRPC listener (role broker) */
    const char *role;             /* its role name, for ctx.role in Lua */
    char broker_name[128];        /* brokerName: the route's broker */
    char host[64];                /* the access point when a client sends none */
    int port;
    int32_t max_body;             /* maxMessageSize */
    bool acl;                     /* aclEnable: calls authenticated, requests checked */
    int64_t auth_window_ms;       /* grpcAuthDateTimeWindowMillis */
    int64_t invisible_min_ms;     /* popInvisibleTimeMinMillis */
    int64_t recv_invisible_min_ms;  /* minInvisibleTimeMillsForRecv */
    int64_t invisible_max_ms;     /* maxInvisibleTimeMills */
    uint32_t max_producer_topics; /* grpcMaxProducerTopics: topics one producer registers under */
    int64_t poll_min_ms;          /* grpcClientConsumerMinLongPollingTimeoutMillis */
    int64_t poll_max_ms;          /* grpcClientConsumerMaxLongPollingTimeoutMillis */
    struct renew_conf renew;      /* ReceiveMessage's auto_renew (renew.h) */
    bool cluster;                 /* role proxy: requests go to the brokers (upstream.h) */
    struct upstream_conf up;      /* with cluster */
    struct txdata_conf tx;        /* with cluster: the transactions it may end */
    struct txdata *tx_table;      /* with cluster: the proxy's one table,
                                   * shared by every worker's server and
                                   * freed by its maker after them; NULL:
                                   * the server makes one of its own */
};

/** A worker's gRPC server (conf copied), or NULL with err_set(). */
struct grpc_server *grpc_server_new(struct host *h, const struct grpc_conf *conf);

/** Serves accepted socket fd (owned from here on). */
void grpc_server_accept(struct grpc_server *gs, int fd);

/** GOAWAY on every connection (the worker is stopping). */
void grpc_server_goaway(struct grpc_server *gs);

/** Frees the server once every connection has closed (after the loop). */
void grpc_server_free(struct grpc_server *gs);

#endif
