/*
 * bsettings: see bsettings.h.
 */
#include "broker/bsettings.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/err.h"

static const struct {
    const char *name;
    enum bset_type type;
} keys[BSET_NKEYS] = {
    [BSET_BROKER_PERMISSION] = { "brokerPermission", BSET_INT },
    [BSET_PROPERTY_FILTER] = { "enablePropertyFilter", BSET_BOOL },
    [BSET_SLAVE_READ_ENABLE] = { "slaveReadEnable", BSET_BOOL },
    [BSET_SLAVE_READ_BUILTIN] = { "slaveReadPolicyBuiltin", BSET_BOOL },
    [BSET_PAGE_CACHE_MS] = { "osPageCacheBusyTimeOutMills", BSET_INT },
    [BSET_WAIT_SEND_MS] = { "waitTimeMillsInSendQueue", BSET_INT },
    [BSET_WAIT_PULL_MS] = { "waitTimeMillsInPullQueue", BSET_INT },
    [BSET_WAIT_HEARTBEAT_MS] = { "waitTimeMillsInHeartbeatQueue", BSET_INT },
    [BSET_WAIT_TRANSACTION_MS] = { "waitTimeMillsInTransactionQueue", BSET_INT },
    [BSET_FAST_FAILURE] = { "brokerFastFailureEnable", BSET_BOOL },
};

/* The process's one set (bsettings.h says why one).  Writers and a
 * reader that saw the version move take the lock; the version is
 * published after the values, so a reader that copies under the lock
 * and records the version it read there never misses a write. */
static struct {
    pthread_mutex_t lock;
    _Atomic uint64_t version;
    struct bsettings_values v;
} shared = { .lock = PTHREAD_MUTEX_INITIALIZER, .version = 1 };

int
bsettings_key(const char *name)
{
    for (int k = 0; k < BSET_NKEYS; k++)
        if (strcmp(keys[k].name, name) == 0)
            return k;
    return -1;
}

enum bset_type
bsettings_type(enum bset_key k)
{
    return keys[k].type;
}

const char *
bsettings_name(enum bset_key k)
{
    return keys[k].name;
}

int
bsettings_set(enum bset_key k, int64_t value)
{
    if ((unsigned)k >= BSET_NKEYS) {
        err_set("no such setting");
        return -1;
    }
    if (keys[k].type == BSET_BOOL ? (value != 0 && value != 1)
                                  : value < 0) {
        err_set("%s: %lld is out of range", keys[k].name, (long long)value);
        return -1;
    }
    pthread_mutex_lock(&shared.lock);
    shared.v.val[k] = value;
    shared.v.set |= 1u << k;
    atomic_fetch_add_explicit(&shared.version, 1, memory_order_release);
    pthread_mutex_unlock(&shared.lock);
    return 0;
}

void
bsettings_clear(void)
{
    pthread_mutex_lock(&shared.lock);
    memset(&shared.v, 0, sizeof(shared.v));
    atomic_fetch_add_explicit(&shared.version, 1, memory_order_release);
    pthread_mutex_unlock(&shared.lock);
}

uint64_t
bsettings_version(void)
{
    return atomic_load_explicit(&shared.version, memory_order_acquire);
}

bool
bsettings_refresh(struct bsettings_view *view)
{
    if (atomic_load_explicit(&shared.version, memory_order_acquire) == view->seen)
        return false;
    pthread_mutex_lock(&shared.lock);
    view->v = shared.v;
    view->seen = atomic_load_explicit(&shared.version, memory_order_relaxed);
    pthread_mutex_unlock(&shared.lock);
    return true;
}
