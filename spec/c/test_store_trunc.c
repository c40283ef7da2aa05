/* A slave's truncation (store_replica_truncate: a failover makes it cut
 * its log back to the new master's end), then new records, then a crash
 * before the next thorough checkpoint (flushConsumeQueueThoroughInterval,
 * 60 s by default).  Recovery must start from a point at or before the
 * cut: every flushed record is found again, the log ends where it ended
 * before the crash, and each new record is found by its key.  A
 * checkpoint still pointing past the cut made the scan start in the
 * middle of a new record and end the log there.
 *
 * The child process does the work and dies with _exit (a crash: no close,
 * the abort marker stays); the parent reopens the store.  No timing: the
 * service thread never flushes the queues on its own (intervals of 2^30
 * ms), the only thorough checkpoint is the one store_open writes. */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "store/access.h"
#include "tmpdir.h"
#include "store/replica.h"
#include "store/store.h"

#define TOPIC "TruncTopic"
#define OLD_N 20
#define NEW_N 30
#define CUT_AT 3

static void
conf(struct store_conf *c)
{
    store_conf_defaults(c);
    c->clog_file_size = 1 << 20;
    c->cq_file_size = 6000;
    c->timer_enable = false;
    /* No queue flush and no checkpoint from the service thread. */
    c->cq_flush_interval_ms = 1 << 30;
    c->cq_flush_thorough_ms = 1 << 30;
    c->flush_interval_ms = 1 << 30;
    c->flush_thorough_ms = 1 << 30;
}

/* One message with KEYS `key` and a body of blen bytes; its offset. */
static int64_t
put(struct store *s, const char *key, size_t blen)
{
    static uint8_t body[2048];
    memset(body, 'b', sizeof(body));
    char props[64];
    int pl = snprintf(props, sizeof(props), "KEYS\001%s\002", key);
    struct store_msg m;
    memset(&m, 0, sizeof(m));
    m.topic = TOPIC;
    m.topic_len = strlen(TOPIC);
    m.body = body;
    m.body_len = blen;
    m.props = props;
    m.props_len = (size_t)pl;
    m.born_ts = 1;
    m.born.len = 4;
    m.store.len = 4;
    struct store_put_result r;
    if (store_put(s, &m, &r) != 0)
        return -1;
    return r.phy;
}

static int
query(struct store *s, const char *key, int64_t *phy)
{
    struct iovec iov[8];
    struct mfile *pins[8];
    struct store_slices sl;
    memset(&sl, 0, sizeof(sl));
    sl.cap = 8;
    sl.iov = iov;
    sl.pins = pins;
    int64_t lts, lphy;
    int n = store_query(s, TOPIC, strlen(TOPIC), key, strlen(key), 8, 0,
                        INT64_MAX / 2, &sl, &lts, &lphy);
    if (n == 1) {
        /* The record's offset is in its header: bytes 28..35 (PHYSICALOFFSET). */
        const uint8_t *b = iov[0].iov_base;
        int64_t v = 0;
        for (int i = 0; i < 8; i++)
            v = (v << 8) | b[28 + i];
        *phy = v;
    }
    store_slices_release(&sl);
    return n;
}

struct child_out {
    int64_t cut, end, flushed;
    int64_t nw[NEW_N];
};

/* Old records, a clean close, a reopen (its checkpoint: past all of
 * them), the cut, new records of another size, a flush, and a crash. */
static void
child(int fd)
{
    struct store_conf c;
    conf(&c);
    struct child_out o;
    memset(&o, 0, sizeof(o));
    struct store *s = store_open(tdir, &c);
    if (s == NULL)
        _exit(2);
    int64_t old[OLD_N];
    char k[32];
    for (int i = 0; i < OLD_N; i++) {
        snprintf(k, sizeof(k), "old-%d", i);
        if ((old[i] = put(s, k, 1000)) < 0)
            _exit(3);
    }
    store_unref(s);
    s = store_open(tdir, &c);
    if (s == NULL)
        _exit(4);
    o.cut = old[CUT_AT];
    if (store_replica_truncate(s, o.cut) != 0)
        _exit(5);
    for (int i = 0; i < NEW_N; i++) {
        snprintf(k, sizeof(k), "new-%d", i);
        if ((o.nw[i] = put(s, k, 777)) < 0)
            _exit(6);
    }
    if (store_flush(s) != 0)
        _exit(7);
    o.end = store_max_phy(s);
    o.flushed = store_flushed(s);
    if (write(fd, &o, sizeof(o)) != (ssize_t)sizeof(o))
        _exit(8);
    _exit(0);
}

static void
crash_after_cut_keeps_new_records(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        child(p[1]);
    }
    close(p[1]);
    struct child_out o;
    ssize_t got = read(p[0], &o, sizeof(o));
    close(p[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(got, (ssize_t)sizeof(o));
    assert_true(o.flushed >= o.end);
    assert_int_equal(o.nw[0], o.cut);

    struct store_conf c;
    conf(&c);
    struct store *s = store_open(tdir, &c);
    assert_non_null(s);
    /* Every flushed record is back, and nothing past them. */
    assert_int_equal(store_max_phy(s), o.end);
    char k[32];
    for (int i = 0; i < NEW_N; i++) {
        int64_t phy = -1;
        snprintf(k, sizeof(k), "new-%d", i);
        assert_int_equal(query(s, k, &phy), 1);
        assert_int_equal(phy, o.nw[i]);
    }
    for (int i = 0; i < CUT_AT; i++) {
        int64_t phy = -1;
        snprintf(k, sizeof(k), "old-%d", i);
        assert_int_equal(query(s, k, &phy), 1);
    }
    store_unref(s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(crash_after_cut_keeps_new_records, tdir_setup, tdir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
