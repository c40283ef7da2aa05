/*
 * txdata: the transactions a cluster-mode proxy (role proxy) may end, as
 * RocketMQ 5.x's proxy keeps them (TransactionDataManager): an entry is
 * added when a transactional message's send is answered and when a
 * broker's transaction check is relayed to a producer; EndTransaction
 * takes one, and is refused ("cannot found transaction data") when there
 * is none.  So a second COMMIT of the same transaction never reaches the
 * broker (a Java 5.x broker commits the half message again: stored twice),
 * nor an end after the entry expired: the broker's check asks the
 * producer then, and its answer is taken.
 *
 * Keyed on "TOPIC@TRANSACTIONID" (5.x: producerGroup@transactionId, the
 * producer group being the topic's name for gRPC clients).  Each entry
 * lives transactionDataExpireMillis; one key holds at most
 * transactionDataMaxNum entries (its oldest goes, as 5.x's pollFirst);
 * the table at most proxyMaxTransactionData (rmq's bound, 5.x has none:
 * the oldest entry goes).  Expired entries are dropped as new ones come,
 * oldest first (every entry lives as long, so the list in order of
 * addition is in order of expiry): no timer.
 *
 * One table for the proxy, shared by its workers (the server makes it,
 * grpc_conf.tx_table): a producer's connections are spread over the
 * workers, and the end of a transaction sent on one connection may come
 * on another (a reconnect, a second producer of the group, the broker's
 * check relayed on one worker and answered on another).  With a table
 * per worker such an end was refused and the message waited for the
 * broker's check.
 *
 * MT: every function on any thread; each call holds the table's mutex
 * (a hash lookup and a list splice: nothing waits in it).
 */
#ifndef RMQ_GRPC_TXDATA_H
#define RMQ_GRPC_TXDATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct txdata;

struct txdata_conf {
    uint64_t expire_ms;     /* transactionDataExpireMillis */
    uint32_t per_key_max;   /* transactionDataMaxNum */
    uint32_t max_total;     /* proxyMaxTransactionData */
};

/** An empty table, or NULL with err_set(). */
struct txdata *txdata_new(const struct txdata_conf *conf);

/** Adds an entry for topic@tid at now_ms.  0, or -1 (out of memory). */
int txdata_add(struct txdata *t, const char *topic, const char *tid, uint64_t now_ms);

/**
 * Takes the newest live entry of topic@tid: true when there was one
 * (then the end may go to the broker), false when none (never added,
 * taken already, expired or evicted).
 */
bool txdata_take(struct txdata *t, const char *topic, const char *tid, uint64_t now_ms);

/** Live entries (expired ones not yet dropped included). */
size_t txdata_count(struct txdata *t);

void txdata_free(struct txdata *t);

#endif
