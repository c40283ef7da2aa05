/*
 * bsettings: the broker's run-time settings that C reads, as typed values
 * in one versioned struct.  UPDATE_BROKER_CONFIG (and the live console)
 * change a conf key in Lua (lua/rmq/broker/tables.lua set_setting); the
 * keys a C processor acts on are set here as well, through one binding
 * (rmq.shared.setting), as the integer or boolean they are.  A reader
 * keeps a view and refreshes it when the version moves: one atomic load
 * a request in the common case, no text to parse, ever.
 *
 * A key set here overrides the value the reader started from (its conf);
 * a key never set leaves it alone.  There is one set per process (as for
 * the smap registry: one broker's settings, whichever worker changed
 * them).
 *
 * MT: every function, from any thread.
 */
#ifndef RMQ_BROKER_BSETTINGS_H
#define RMQ_BROKER_BSETTINGS_H

#include <stdbool.h>
#include <stdint.h>

enum bset_key {
    BSET_BROKER_PERMISSION,       /* brokerPermission (int) */
    BSET_PROPERTY_FILTER,         /* enablePropertyFilter (bool) */
    BSET_SLAVE_READ_ENABLE,       /* slaveReadEnable (bool) */
    BSET_SLAVE_READ_BUILTIN,      /* slaveReadPolicyBuiltin (bool): Lua's
                                   * answer to "is slaveReadPolicy the
                                   * built-in rule, unreplaced?" */
    BSET_PAGE_CACHE_MS,           /* osPageCacheBusyTimeOutMills (int) */
    BSET_WAIT_SEND_MS,            /* waitTimeMillsInSendQueue (int) */
    BSET_WAIT_PULL_MS,            /* waitTimeMillsInPullQueue (int) */
    BSET_WAIT_HEARTBEAT_MS,       /* waitTimeMillsInHeartbeatQueue (int) */
    BSET_WAIT_TRANSACTION_MS,     /* waitTimeMillsInTransactionQueue (int) */
    BSET_FAST_FAILURE,            /* brokerFastFailureEnable (bool) */
    BSET_NKEYS
};

enum bset_type { BSET_INT, BSET_BOOL };

/* A copy of the settings: val[k] is meaningful when bit k of `set` is. */
struct bsettings_values {
    uint32_t set;
    int64_t val[BSET_NKEYS];
};

/* A reader's copy and the version it is from. */
struct bsettings_view {
    uint64_t seen;
    struct bsettings_values v;
};

/** The key called `name` (the conf key; see enum bset_key), or -1. */
int bsettings_key(const char *name);

/** The type of key k, and its name. */
enum bset_type bsettings_type(enum bset_key k);
const char *bsettings_name(enum bset_key k);

/**
 * Sets key k (a boolean as 0/1).  Returns 0, or -1 with err_set() when
 * the value is out of the key's range (a bool 0 or 1, an int >= 0: the
 * conf schema checks each key's own bounds before).
 */
int bsettings_set(enum bset_key k, int64_t value);

/** Forgets every value (start-up: the conf file rules). */
void bsettings_clear(void);

/** Bumped by every set and clear. */
uint64_t bsettings_version(void);

/**
 * Brings `view` up to date.  Returns true when it changed (the caller
 * applies it), false when the version has not moved since the last call
 * (one atomic load).  A zeroed view reads on its first call.
 */
bool bsettings_refresh(struct bsettings_view *view);

/** The value of k in `v`, or `dflt` when k was never set. */
static inline int64_t
bsettings_get(const struct bsettings_values *v, enum bset_key k, int64_t dflt)
{
    return (v->set >> k) & 1u ? v->val[k] : dflt;
}

#endif
