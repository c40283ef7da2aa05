/*
 * l_roles: the server process's calls into lua/rmq/server.lua, which runs
 * the roles (rmq.namesrv, rmq.broker): the plan it makes of the conf,
 * each worker's dispatch functions, and the roles' main-thread hooks.
 * Each call logs (or, before the log is open, prints) why it failed and
 * returns -1; the Lua stack is left as it was.
 *
 * MT: on the thread that owns L (or the host).
 */
#ifndef RMQ_L_ROLES_H
#define RMQ_L_ROLES_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/membudget.h"
#include "grpc/service.h"
#include "net/reactor.h"
#include "runtime/host.h"

/* Worker threads at most; notify.h's NOTIFY_MAX_SLOTS leaves room for
 * them and the main thread. */
#define ROLES_MAX_WORKERS 256

struct listener_plan {
    char name[32];
    char role[32];
    int port;
    bool grpc;                 /* its connections speak gRPC (src/grpc/) */
};

/* The Prometheus endpoint (metrics_http.h), when on. */
struct metrics_plan {
    bool on;
    char host[64];
    int port;                  /* 0: any free port; the bound one after */
    uint32_t max_label_sets;
    unsigned max_connections;
    unsigned timeout_s;
    unsigned header_ms;        /* request line and headers within this */
    unsigned max_per_address;  /* connections from one address */
    char allowed[1024];        /* metricsAllowedAddresses (";"-list, "" none) */
    size_t max_header;
    size_t max_body;           /* request bodies (POST /api/send) */
    char cluster[128];
    char node_type[16];
    char node_id[256];         /* "": the NameServer's listen address */
};

/* TLS on the remoting ports (net/tls.h): the tls.server.* keys. */
struct tls_plan {
    bool on;                   /* a certificate is configured */
    int mode;                  /* enum tls_mode */
    char cert[1024];
    char key[1024];
    char password[256];        /* "" = none */
    char trust[1024];          /* "" = the system's CAs */
    int need_client_auth;      /* enum tls_client_auth */
    bool auth_client;
    uint64_t handshake_ms;
};

/* What rmq.server.prepare() decided. */
struct plan {
    char role[32];
    char bind[64];
    int workers;
    size_t max_frame;
    uint64_t idle_ms;
    uint64_t shutdown_ms;
    int fd_reserve;            /* serverReservedDescriptors (net/listen.h) */
    struct reactor_limits limits;  /* backpressure per accepted connection */
    struct membudget_limits budget; /* memoryBudget* (core/membudget.h) */
    char log_level[16];
    char log_file[1024];
    size_t log_buffer;         /* logBufferBytes (core/log.h); 0 = synchronous */
    struct listener_plan listeners[HOST_MAX_LISTENERS];
    const char *roles[HOST_MAX_LISTENERS];
    int nlisteners;
    struct metrics_plan metrics;
    struct tls_plan tls;
    bool grpc_on;              /* grpcServerPort set: grpc's listener and keys */
    struct grpc_conf grpc;
};

/**
 * rmq.server.prepare(conf_path, overrides): checks the conf and fills *p.
 * Returns 0, or -1 with the reason on stderr (a bad conf is the usual
 * cause, and the log is not open yet).
 */
int roles_prepare(lua_State *L, const char *conf_path, char **overrides,
                  int noverrides, struct plan *p);

/**
 * rmq.server.bound(ports) once the sockets are bound (port 0 resolved in
 * p): the roles' main_init hooks, which may refuse to start.  0 or -1.
 */
int roles_bound(lua_State *L, const struct plan *p);

/**
 * rmq.server.worker(...) in a worker's host: one dispatch function per
 * listener, chosen by its role, into h->dispatch_refs, and the role's
 * close hook, if any, into h->close_refs.  0 or -1.
 */
int roles_worker(struct host *h, const char *conf_path, char **overrides,
                 int noverrides, int worker_id, const struct plan *p);

/**
 * rmq.server.main_start() as a task on the main host, running its loop
 * until the task is done (the hooks may wait).  0 or -1.
 */
int roles_main_start(struct host *m);

/**
 * rmq.server.ready_fields(): what the roles add to the READY line
 * (" ha=HOST:PORT"), copied into buf (always NUL-terminated).
 */
void roles_ready_fields(lua_State *L, char *buf, size_t n);

/**
 * rmq.server.main_stop(done) as a task on the main host; done(arg) runs
 * when the hooks have finished, or at once if the task cannot start.
 */
void roles_main_stop(struct host *m, void (*done)(void *arg), void *arg);

/** rmq.server.after_workers(), once every worker has ended.  0 or -1. */
int roles_after_workers(lua_State *L);

#endif
