/*
 * fuzz_record: libFuzzer target for the commit log record parser that
 * crash recovery, the clean-start check and the index dispatcher use
 * (clog_decode, clog_peek_store_ts; commitlog.c), and for what recovery
 * does with a record it accepts (props_find, java_hash, the DELAY level,
 * the KEYS split of the index; the hosts as msgId and ip:port), and for
 * what the broker does with its properties (props_edit, props_for_store).
 *
 * The input is the tail of a mapped file: it is copied to the end of a
 * private mapping whose next page is PROT_NONE, and the bytes before it
 * are poisoned for ASan, so a read one byte past the end (or before the
 * start) is reported, as it would fault in a real mapping.  The input is
 * then scanned the way recover.c's scan() walks a file: decode at the
 * position, step over a record, stop at anything else.  Each scan runs
 * with and without the CRC check, with expect_phy -1 (the index) and
 * with the offsets the first record claims (recovery).
 *
 * Oracles (any failure aborts, which libFuzzer reports as a crash):
 *   - ref_decode below, written from the format comment at the top of
 *     commitlog.c independently of clog_decode, must give the same
 *     result and the same fields;
 *   - an accepted record's fields lie inside it, its lengths give its
 *     size back through clog_msg_len(), its CRC matches when checked,
 *     clog_peek_store_ts() agrees with it;
 *   - a host that is a valid ip:port survives inet_ntop ->
 *     host_addr_parse(); clog_msgid() has 32 or 56 hex digits.
 */
#include <arpa/inet.h>
#include <sanitizer/asan_interface.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/crc32.h"
#include "core/err.h"
#include "core/jstr.h"
#include "store/commitlog.h"
#include "store/props.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define MAP_CAP (4u << 20)  /* longest input scanned; larger ones are cut */

static uint8_t *map_base;
static size_t page;

static void
check(bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_record: %s\n", what);
        abort();
    }
}

static inline uint64_t
be64(const uint8_t *p)
{
    return (uint64_t)be32_get(p) << 32 | be32_get(p + 4);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    page = (size_t)sysconf(_SC_PAGESIZE);
    map_base = mmap(NULL, MAP_CAP + page, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    check(map_base != MAP_FAILED, "mmap");
    check(mprotect(map_base + MAP_CAP, page, PROT_NONE) == 0, "guard page");
    return 0;
}

/* {{{ The reference decoder: commitlog.c's format comment, read literally */

struct ref_view {
    int result;
    uint32_t size;
    size_t born_at, born_len, storets_at, store_at, store_len;
    size_t body_at;
    uint32_t body_len;
    size_t topic_at;
    uint32_t topic_len;
    size_t props_at;
    uint32_t props_len;
};

static int
ref_decode(const uint8_t *p, size_t avail, int64_t expect_phy, bool crc,
           struct ref_view *r)
{
    memset(r, 0, sizeof(*r));
    if (avail < 8) {
        /* Fewer bytes than a size and a magic: zeros or garbage. */
        for (size_t i = 0; i < avail; i++)
            if (p[i])
                return CLOG_BAD;
        return CLOG_END;
    }
    uint64_t size = be32_get(p), magic = be32_get(p + 4);
    if (magic == CLOG_BLANK_MAGIC) {
        r->size = (uint32_t)size;
        return size == avail ? CLOG_BLANK : CLOG_BAD;
    }
    if (magic != CLOG_MAGIC)
        return size == 0 && magic == 0 ? CLOG_END : CLOG_BAD;
    if (size > avail || size < 40)
        return CLOG_BAD;
    uint32_t sysflag = be32_get(p + 36);
    uint64_t hb = (sysflag & 0x10) ? 16 : 4, hs = (sysflag & 0x20) ? 16 : 4;
    uint64_t storets = 48 + hb + 4, storeh = storets + 8;
    uint64_t bodylen_at = storeh + hs + 4 + 4 + 8;
    if (bodylen_at + 4 > size)
        return CLOG_BAD;
    uint64_t b = be32_get(p + bodylen_at);
    uint64_t topic_len_at = bodylen_at + 4 + b;
    if (topic_len_at + 1 > size)
        return CLOG_BAD;
    uint64_t t = p[topic_len_at];
    if (t > 127)
        return CLOG_BAD;
    uint64_t props_len_at = topic_len_at + 1 + t;
    if (props_len_at + 2 > size)
        return CLOG_BAD;
    uint64_t pl = (uint64_t)p[props_len_at] << 8 | p[props_len_at + 1];
    if (pl > 32767)
        return CLOG_BAD;
    /* TOTALSIZE = 91 + B + T + P (+12 per IPv6 host) */
    if (size != 91 + b + t + pl + (hb - 4) + (hs - 4))
        return CLOG_BAD;
    if (expect_phy >= 0 && (int64_t)be64(p + 28) != expect_phy)
        return CLOG_BAD;
    if (crc && (rmq_crc32(0, p + bodylen_at + 4, b) & 0x7FFFFFFFu) !=
                   be32_get(p + 8))
        return CLOG_BAD;
    r->size = (uint32_t)size;
    r->born_at = 48;
    r->born_len = hb;
    r->storets_at = storets;
    r->store_at = storeh;
    r->store_len = hs;
    r->body_at = bodylen_at + 4;
    r->body_len = (uint32_t)b;
    r->topic_at = topic_len_at + 1;
    r->topic_len = (uint32_t)t;
    r->props_at = props_len_at + 2;
    r->props_len = (uint32_t)pl;
    return CLOG_REC;
}

/* }}} */

/* {{{ What recovery and the index do with an accepted record */

static volatile uint64_t sink;

static void
host_roundtrip(const uint8_t *h, uint8_t len)
{
    struct host_addr a;
    memset(&a, 0, sizeof(a));
    memcpy(a.ip, h, len);
    a.len = len;
    a.port = (int32_t)be32_get(h + len);
    char id[64];
    size_t n = clog_msgid(id, &a, 42);
    check(n == (len == 4 ? 32u : 56u) && strlen(id) == n, "msgid length");
    if (a.port < 0 || a.port > 65535)
        return;  /* not an ip:port: host_addr_parse rightly refuses it */
    char ip[INET6_ADDRSTRLEN], text[INET6_ADDRSTRLEN + 16];
    check(inet_ntop(len == 4 ? AF_INET : AF_INET6, a.ip, ip, sizeof(ip)) != NULL,
          "inet_ntop");
    int tn = snprintf(text, sizeof(text), len == 4 ? "%s:%d" : "[%s]:%d", ip,
                      (int)a.port);
    struct host_addr b;
    check(host_addr_parse(text, (size_t)tn, &b) == 0, "host_addr_parse refused");
    check(b.len == a.len && b.port == a.port && memcmp(b.ip, a.ip, len) == 0,
          "host does not survive ip:port");
}

/* What the broker does with a stored record's properties (props.h):
 * re-put edits and a send's one pass agree with props_find. */
static void
use_props(const char *props, size_t n)
{
    static struct buf out;     /* reused: one input at a time */
    buf_reset(&out);
    struct prop edits[2] = { { "TAGS", 4, "x", 1 }, { "KEYS", 4, NULL, 0 } };
    check(props_edit(&out, props, n, edits, 2) == 0, "props_edit failed");
    const char *e = (const char *)buf_head(&out);
    size_t en = buf_len(&out), vl = 0;
    const char *t = props_find(e, en, "TAGS", &vl);
    check(t != NULL && vl == 1 && t[0] == 'x', "props_edit: TAGS not set");
    check(props_find(e, en, "KEYS", &vl) == NULL, "props_edit: KEYS not removed");
    buf_reset(&out);
    struct props_send f;
    check(props_for_store(&out, props, n, "C", 1, false, &f) == 0, "props_for_store failed");
    const char *tags = props_find(props, n, "TAGS", &vl);
    check(f.tags == tags && (tags == NULL || f.tags_len == vl), "props_for_store: TAGS differs");
    e = (const char *)buf_head(&out);
    en = buf_len(&out);
    t = props_find(e, en, "CLUSTER", &vl);
    check(t != NULL && vl == 1 && t[0] == 'C', "props_for_store: CLUSTER not last");
    check(props_find(e, en, "WAIT", &vl) == NULL, "props_for_store: WAIT kept");
}

static void
use_record(const struct clog_view *v)
{
    const char *props = (const char *)v->props;
    size_t n = 0;
    uint64_t acc = 0;
    /* redispatch(): the tags code, and the delay level of a schedule
     * record (recover.c). */
    const char *tv = props_find(props, v->props_len, "TAGS", &n);
    if (tv != NULL) {
        check(tv >= props && tv + n <= props + v->props_len, "TAGS outside");
        acc += (uint32_t)java_hash(tv, n);
    }
    const char *dv = props_find(props, v->props_len, "DELAY", &n);
    acc += (uint64_t)(dv != NULL ? props_delay_level(dv, n) : 0);
    /* index_record(): UNIQ_KEY, then KEYS split at spaces. */
    const char *uniq = props_find(props, v->props_len, "UNIQ_KEY", &n);
    if (uniq != NULL)
        acc += (uint32_t)java_hash_more(java_hash((const char *)v->topic,
                                                  v->topic_len), uniq, n);
    const char *keys = props_find(props, v->props_len, "KEYS", &n);
    check(keys == NULL || (keys >= props && keys + n <= props + v->props_len),
          "KEYS outside");
    while (keys != NULL && n > 0) {
        const char *sp = memchr(keys, ' ', n);
        size_t len = sp ? (size_t)(sp - keys) : n;
        if (len > 0)
            acc += (uint32_t)java_hash(keys, len);
        if (sp == NULL)
            break;
        n -= len + 1;
        keys = sp + 1;
    }
    acc += (uint32_t)java_hash((const char *)v->topic, v->topic_len);
    check(java_compare((const char *)v->topic, v->topic_len, (const char *)v->topic,
                       v->topic_len) == 0, "a topic does not compare equal to itself");
    use_props(props, v->props_len);
    host_roundtrip(v->born, v->born_len);
    host_roundtrip(v->storeh, v->store_len);
    sink += acc;
}

/* }}} */

static void
compare(const uint8_t *p, size_t avail, int64_t expect, bool crc)
{
    struct clog_view v;
    struct ref_view r;
    memset(&v, 0xA5, sizeof(v));
    int got = clog_decode(p, avail, expect, crc, &v);
    int want = ref_decode(p, avail, expect, crc, &r);
    if (got != want) {
        fprintf(stderr, "fuzz_record: clog_decode says %d, the format says %d "
                "(avail %zu, expect_phy %lld, crc %d)\n", got, want, avail,
                (long long)expect, crc);
        abort();
    }
    int64_t ts = clog_peek_store_ts(p, avail);
    if (got == CLOG_BLANK)
        check(v.size == avail, "blank size");
    if (got != CLOG_REC) {
        check(ts == -1 || (avail >= 8 && be32_get(p + 4) == CLOG_MAGIC),
              "store ts of a non-record");
        return;
    }
    check(v.size == r.size && v.size >= 91 && v.size <= avail, "size");
    check(v.born == p + r.born_at && v.born_len == r.born_len, "born host");
    check(v.storeh == p + r.store_at && v.store_len == r.store_len, "store host");
    check(v.body == p + r.body_at && v.body_len == r.body_len, "body");
    check(v.topic == p + r.topic_at && v.topic_len == r.topic_len, "topic");
    check(v.props == p + r.props_at && v.props_len == r.props_len, "properties");
    check(v.props + v.props_len == p + v.size, "record does not end at its size");
    check(v.store_ts == (int64_t)be64(p + r.storets_at) && ts == v.store_ts,
          "store timestamp");
    check(v.qid == (int32_t)be32_get(p + 12) && v.qoff == (int64_t)be64(p + 20) &&
              v.phy == (int64_t)be64(p + 28), "fixed fields");
    check(expect < 0 || v.phy == expect, "own offset");
    check(!crc || rmq_body_crc(v.body, v.body_len) == v.body_crc, "crc");
    struct clog_msg m;
    memset(&m, 0, sizeof(m));
    m.born.len = v.born_len;
    m.store.len = v.store_len;
    m.body_len = v.body_len;
    m.topic_len = v.topic_len;
    m.props_len = v.props_len;
    check(clog_msg_len(&m) == v.size, "clog_msg_len disagrees with the size");
    use_record(&v);
}

/* recover.c's scan() over one file's tail: records until anything else. */
static void
scan(const uint8_t *p, size_t size, int64_t base, bool crc)
{
    size_t rel = 0;
    while (rel < size) {
        int64_t expect = base < 0 ? -1 : base + (int64_t)rel;
        compare(p + rel, size - rel, expect, crc);
        struct clog_view v;
        if (clog_decode(p + rel, size - rel, expect, crc, &v) != CLOG_REC)
            break;
        check(v.size > 0 && v.size <= size - rel, "scan step");
        rel += v.size;
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAP_CAP)
        size = MAP_CAP;
    uint8_t *p = map_base + MAP_CAP - size;
    /* What is before the input is not part of the file's tail. */
    ASAN_POISON_MEMORY_REGION(map_base, MAP_CAP - size);
    ASAN_UNPOISON_MEMORY_REGION(p, size);
    if (size > 0)
        memcpy(p, data, size);
    /* The offset the first record claims, as recovery would expect it
     * when the file starts there. */
    int64_t base = size >= 36 ? (int64_t)be64(p + 28) : 0;
    scan(p, size, -1, false);
    scan(p, size, -1, true);
    scan(p, size, base, false);
    scan(p, size, base, true);
    /* The clean-start check: nothing written at the end. */
    struct clog_view v;
    (void)clog_decode(p, size, 0, false, &v);
    ASAN_UNPOISON_MEMORY_REGION(map_base, MAP_CAP);
    return 0;
}
