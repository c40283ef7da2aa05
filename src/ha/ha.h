/*
 * ha: RocketMQ 4.x master/slave replication (HAService, HAConnection,
 * HAClient; protocol.md section 7), byte-compatible with a 4.9.8 broker
 * on either side.
 *
 * One service per broker, on a thread and libuv loop of its own (no Lua
 * on this path).  Every broker listens, a slave too as in 4.9.8 (its own
 * slaves follow it); a slave also follows its master:
 *   - master (ha_master.c): listens on haListenPort; serves only peers
 *     in haAllowedAddresses or the list ha_set_peers gave (unless
 *     allow_any: 4.9.8 serves anyone); per slave, reads
 *     8-byte offset reports and writes [phyOffset 8][size 4][bytes]
 *     frames straight from the mapped commit log, heartbeats with size 0;
 *     acknowledgements feed SYNC_MASTER waits (store/replica.h);
 *   - slave (ha_slave.c): connects to the master's HA address, appends
 *     what it receives at the same offsets (the store builds consume
 *     queues and index from it), reports its offset; reconnects.
 *
 * MT: ha_start / ha_stop from one thread; ha_set_master and ha_stats
 * from any thread.
 */
#ifndef RMQ_HA_H
#define RMQ_HA_H

#include <stdbool.h>
#include <stdint.h>

struct store;

struct ha_conf {
    bool slave;                 /* brokerRole == SLAVE */
    char bind[64];              /* master: address to listen on */
    int listen_port;            /* master: haListenPort (0 = any free) */
    char master_addr[256];      /* slave: haMasterAddress, "" = not yet */
    int heartbeat_ms;           /* haSendHeartbeatInterval */
    int housekeeping_ms;        /* haHousekeepingInterval */
    int batch_size;             /* haTransferBatchSize */
    int max_slaves;             /* connections the master accepts */
    bool transfer_from_min;     /* a slave reporting 0 gets the whole log
                                   (4.9.8: only the master's last file) */
    char allowed[1024];         /* haAllowedAddresses: ";ip;ip;" ("" = none) */
    bool allow_any;             /* haAllowAnyAddress: any peer (4.9.8) */
    int hold_ms;                /* haUnknownPeerHoldMillis */
    int hold_max;               /* haUnknownPeersMax */
};

struct ha;

/** One slave as the master sees it. */
struct ha_slave_info {
    char addr[64];
    int64_t request;            /* first offset it reported */
    int64_t ack;                /* last offset it acknowledged, -1 none */
    int64_t next;               /* where the next frame starts */
    int64_t caught_up_ago;      /* ms since its ack last reached this
                                   log's end; -1 never */
};

struct ha_stats {
    /* Master. */
    int port;                   /* bound HA port */
    int conns;
    int64_t acked;              /* push2SlaveMaxOffset */
    int64_t max_phy;            /* this store's end */
    /* Slave. */
    char master[256];           /* HA address followed, "" none */
    char local[64];             /* this slave's end of that connection */
    bool connected;
    int64_t raw_end;            /* bytes received up to here */
    int64_t master_offset;      /* master's position in its last frame */
    int64_t reconnects;
    int64_t truncations;
};

/**
 * Starts the service for store s (the master binds its port now).
 * Returns it, or NULL with err_set() ("port in use", ...).
 */
struct ha *ha_start(struct store *s, const struct ha_conf *c);

/** Slave: the HA address to follow ("" = none); reconnects on change. */
void ha_set_master(struct ha *h, const char *addr);

/**
 * A role switch at run time (controller mode, rmq.broker.replica_role):
 * slave: follow addr (reconnecting even to the same one); trunc >= 0 is
 * the end of the last epoch this log shares with that master: the first
 * offset reported is trunc when the log is longer, so the master sends
 * from there and the slave truncates what follows (logged with the bytes
 * and records dropped).  Master: stop following.  Any thread.
 */
void ha_set_role(struct ha *h, bool slave, const char *addr, int64_t trunc);

/**
 * allAckInSyncStateSet: an offset counts as acknowledged (SYNC_MASTER
 * waits, push2SlaveMaxOffset) only once n connected slaves acknowledged
 * it (n = the SyncStateSet's size less the master); n <= 1 is 4.x's any
 * one slave.  The 4.x stream does not say which broker a connection is:
 * n distinct connections stand for the n members.  Any thread.
 */
void ha_set_min_acks(struct ha *h, int n);

/**
 * allAckInSyncStateSet by name: every other SyncStateSet member,
 * ";"-separated, each as the ","-separated connections that are its
 * ("ip:port" as the master sees them; ha_acks.h).  While set, an offset
 * counts as acknowledged only once each member acknowledged it on its
 * newest live connection (a member without one holds every send; two
 * connections of one member count once); "" goes back to counting
 * (ha_set_min_acks).  Any thread.
 */
void ha_set_ack_peers(struct ha *h, const char *list);
#define HA_ACK_PEERS_MAX 4000           /* the list, bytes */

/**
 * The peers a master serves besides haAllowedAddresses: ";"-separated
 * IPs (the brokers registered for this brokerName at the NameServers,
 * haMasterAddress).  A peer in neither list is held, unread, until the
 * next ha_set_peers or hold_ms, then served or closed.  Any thread.
 */
void ha_set_peers(struct ha *h, const char *list);

/**
 * Whether a peer not in the lists connected since the last call (the
 * caller then asks the NameServers again and calls ha_set_peers).
 * Clears the flag.  Any thread.
 */
bool ha_take_refresh(struct ha *h);

/**
 * Fills st and up to max slaves (master); returns the number of slaves
 * connected (which may exceed max).
 */
int ha_stats(struct ha *h, struct ha_stats *st, struct ha_slave_info *out,
             int max);

/** Stops the thread, closes every connection, frees h. */
void ha_stop(struct ha *h);

#endif
