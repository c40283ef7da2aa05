/* ha: state shared by ha.c, ha_master.c and ha_slave.c (see ha.h). */
#ifndef RMQ_HA_IMPL_H
#define RMQ_HA_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "core/queue.h"
#include "ha/ha.h"
#include "ha/ha_acks.h"

struct mfile;

#define HA_HEADER 12                    /* phyOffset 8 + size 4 */
#define HA_SLAVE_BUF (4 << 20)          /* HAClient's read buffer */
#define HA_RECONNECT_MAX_MS 5000        /* HAClient retries every 5 s */
#define HA_PEERS_MAX 4096               /* ha_set_peers's list, bytes */

/* The master's connection to one slave (HAConnection). */
struct ha_conn {
    struct qnode link;
    struct ha *h;
    uv_tcp_t tcp;
    char peer[64];
    uint8_t part[8];                    /* a report's first bytes */
    int part_len;
    int64_t request;                    /* slaveRequestOffset, -1 none */
    int64_t ack;                        /* slaveAckOffset, -1 none */
    int64_t next;                       /* nextTransferFromWhere, -1 */
    bool ahead;                         /* its first offset was past our
                                           end: until it truncates, its
                                           reports are not acks */
    int64_t last_read;                  /* monotonic ms */
    int64_t last_write;
    int64_t caught_up;                  /* monotonic ms its ack last reached
                                           our end (5.x lastCatchUpTimeMs),
                                           0 never */
    bool writing;
    bool closing;
    bool held;                          /* unknown peer, in h->held */
    int64_t held_until;                 /* monotonic ms */
    uint64_t seq;                       /* accepted as the seq-th (ha_acks) */
    int member;                         /* its SyncStateSet member in
                                           h->acks, -1 none ... */
    uint64_t member_gen;                /* ... for list h->acks_gen */
    int64_t accept_max;                 /* this log's end when it connected:
                                           a new slave (offset 0) gets the
                                           file that held it then, however
                                           long it was held (issue 21) */
    struct mfile *pinned;               /* the frame being written */
    uint8_t hdr[HA_HEADER];
    uv_write_t wr;
};

/* The slave's client (HAClient). */
struct ha_client {
    uv_tcp_t *tcp;                      /* NULL when not connected */
    uv_connect_t conn_req;
    bool connecting, connected;
    uint8_t *buf;                       /* HA_SLAVE_BUF, while connected */
    size_t len;
    int64_t reported;                   /* last offset reported, -1 none */
    bool report_busy, report_again;
    uint8_t report[8];
    uv_write_t report_wr;
    int64_t last_read, last_report;     /* monotonic ms */
    int backoff_ms;
    int64_t retry_at;                   /* monotonic ms, 0 = now */
    char addr[256];                     /* the master connected to */
    int64_t trunc_to;                   /* epoch fencing (ha_set_role): the
                                           first report, so that the master
                                           sends from the last common
                                           epoch's end; -1 none */
};

struct ha {
    struct store *s;
    struct ha_conf conf;
    uv_loop_t loop;
    uv_thread_t thread;
    bool thread_started;
    uv_async_t wake;                    /* stop / new master address */
    uv_timer_t tick;                    /* heartbeats, housekeeping */
    uv_poll_t data_poll;                /* the store's "new data" eventfd */
    int data_fd;
    uv_tcp_t server;
    bool listening;
    int port;
    uint8_t rscratch[65536];            /* master reads (reports are tiny) */
    struct qnode conns;                 /* struct ha_conn */
    int nconns;
    struct qnode held;                  /* unknown peers, unread */
    int nheld;
    int64_t refused_log_ms;             /* rate of "refusing" log lines */
    int64_t refused_quiet;
    struct ha_client cli;
    /* Shared with other threads (mu). */
    uv_mutex_t mu;
    bool stop;
    char want_master[256];
    bool master_changed;
    char peers[HA_PEERS_MAX];           /* ";ip;ip;" from ha_set_peers */
    bool peers_changed;
    bool want_refresh;                  /* an unknown peer came */
    int min_acks;                       /* ha_set_min_acks: slaves that must
                                           have an offset before it counts
                                           as acknowledged (<= 1: any one,
                                           4.x) */
    char ack_peers[HA_PEERS_MAX];       /* ha_set_ack_peers: the members'
                                           connections, "" = count them
                                           (min_acks) */
    uint64_t ack_gen;                   /* bumped by each ha_set_ack_peers */
    /* Loop thread only. */
    struct ha_acks acks;                /* ack_peers parsed ... */
    uint64_t acks_gen;                  /* ... as of this ack_gen */
    uint64_t conn_seq;                  /* connections accepted */
    bool role_changed;                  /* ha_set_role: want_slave, */
    bool want_slave;                    /* want_master, want_trunc */
    int64_t want_trunc;
    struct ha_stats st;                 /* slave counters, under mu */
};

int64_t ha_now_ms(void);

/* ha_master.c (loop thread). */
int ha_master_listen(struct ha *h);
void ha_master_pump_all(struct ha *h);
void ha_master_tick(struct ha *h, int64_t now);
void ha_master_close_all(struct ha *h);
void ha_master_peers_changed(struct ha *h);
void ha_master_recount(struct ha *h);
int ha_master_stats(struct ha *h, struct ha_slave_info *out, int max);

/* ha_slave.c (loop thread). */
void ha_slave_tick(struct ha *h, int64_t now);
void ha_slave_master_changed(struct ha *h, const char *addr);
void ha_slave_close(struct ha *h, const char *why);
void ha_slave_role(struct ha *h, bool slave, const char *addr, int64_t trunc);

#endif
