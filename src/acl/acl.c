/* acl: the access check of RocketMQ ACL 1.0 (see acl.h). */
#include "acl/acl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "acl/acl_sign.h"
#include "proto/heartbeat.h"
#include "core/hmap.h"
#include "core/err.h"
#include "core/jscan.h"
#include "rmq_codes.h"

#define RETRY_PREFIX "%RETRY%"
#define RETRY_PREFIX_LEN 7
#define TRACE_TOPIC "RMQ_SYS_TRACE_TOPIC"

/* AclConstants.ACCESS_KEY_MIN_LENGTH / SECRET_KEY_MIN_LENGTH: both must
 * be longer than this. */
#define KEY_MIN_LENGTH 6

/* The AclException and its first stack frame as a 4.9.8 broker reports
 * them (RemotingHelper.exceptionSimpleDesc; line numbers of the 4.9.8
 * sources). */
#define EXC "org.apache.rocketmq.acl.common.AclException: "
#define AT_PARSE "org.apache.rocketmq.acl.plain.PlainAccessValidator.parse(PlainAccessValidator.java:134)"
#define AT_CHECK_PERM_ADMIN "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:581)"
#define AT_CHECK_PERM_DEFAULT "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:606)"
#define AT_CHECK_PERM_OWNED "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm(PlainPermissionManager.java:611)"
#define AT_NO_AK "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:664)"
#define AT_UNKNOWN_AK "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:668)"
#define AT_SIGNATURE "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:684)"

/* {{{ Permissions */

static void
trim(const char **s, size_t *n)
{
    while (*n > 0 && (unsigned char)**s <= ' ')
        (*s)++, (*n)--;
    while (*n > 0 && (unsigned char)(*s)[*n - 1] <= ' ')
        (*n)--;
}

static bool
eq(const char *s, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n == l && memcmp(s, lit, l) == 0;
}

uint8_t
acl_perm_parse(const char *s, size_t n)
{
    if (s == NULL)
        return ACL_PERM_DENY;
    trim(&s, &n);
    if (eq(s, n, "PUB"))
        return ACL_PERM_PUB;
    if (eq(s, n, "SUB"))
        return ACL_PERM_SUB;
    if (eq(s, n, "PUB|SUB") || eq(s, n, "SUB|PUB"))
        return ACL_PERM_PUB | ACL_PERM_SUB;
    return ACL_PERM_DENY;
}

bool
acl_perm_valid(const char *s, size_t n)
{
    trim(&s, &n);
    return eq(s, n, "DENY") || acl_perm_parse(s, n) != ACL_PERM_DENY;
}

/* Permission.checkPermission */
static bool
perm_ok(uint8_t needed, uint8_t owned)
{
    if (owned & ACL_PERM_DENY)
        return false;
    if (needed & ACL_PERM_ANY)
        return (owned & (ACL_PERM_PUB | ACL_PERM_SUB)) != 0;
    return (needed & owned) != 0;
}

bool
acl_admin_code(enum acl_role role, int32_t code)
{
    if (role == ACL_ROLE_NAMESRV) {
        switch (code) {
        case RMQ_REQ_PUT_KV_CONFIG:
        case RMQ_REQ_DELETE_KV_CONFIG:
        case RMQ_REQ_REGISTER_BROKER:
        case RMQ_REQ_UNREGISTER_BROKER:
        case RMQ_REQ_WIPE_WRITE_PERM_OF_BROKER:
        case RMQ_REQ_DELETE_TOPIC_IN_NAMESRV:
        case RMQ_REQ_REGISTER_TOPIC_IN_NAMESRV:
        case RMQ_REQ_UPDATE_NAMESRV_CONFIG:
        case RMQ_REQ_GET_NAMESRV_CONFIG:
        case RMQ_REQ_QUERY_DATA_VERSION:  /* refreshes a broker's liveness */
        case RMQ_REQ_ADD_WRITE_PERM_OF_BROKER:
        case RMQ_REQ_BROKER_HEARTBEAT:  /* the same */
            return true;
        default:
            return false;
        }
    }
    switch (code) {
    /* 4.9.8's Permission.ADMIN_CODE */
    case RMQ_REQ_UPDATE_AND_CREATE_TOPIC:
    case RMQ_REQ_UPDATE_BROKER_CONFIG:
    case RMQ_REQ_UPDATE_AND_CREATE_SUBSCRIPTIONGROUP:
    case RMQ_REQ_DELETE_SUBSCRIPTIONGROUP:
    case RMQ_REQ_DELETE_TOPIC_IN_BROKER:
    /* rmq's extension: every other code that changes or wipes state,
     * and the ACL requests (GET_BROKER_CLUSTER_ACL_CONFIG returns the
     * secret keys) */
    case RMQ_REQ_UPDATE_AND_CREATE_TOPIC_LIST:
    case RMQ_REQ_TRIGGER_DELETE_FILES:
    case RMQ_REQ_UPDATE_AND_CREATE_ACL_CONFIG:
    case RMQ_REQ_DELETE_ACL_CONFIG:
    case RMQ_REQ_GET_BROKER_CLUSTER_ACL_INFO:
    case RMQ_REQ_UPDATE_GLOBAL_WHITE_ADDRS_CONFIG:
    case RMQ_REQ_GET_BROKER_CLUSTER_ACL_CONFIG:
    case RMQ_REQ_PUT_KV_CONFIG:
    case RMQ_REQ_DELETE_KV_CONFIG:
    case RMQ_REQ_WIPE_WRITE_PERM_OF_BROKER:
    case RMQ_REQ_SUSPEND_CONSUMER:
    case RMQ_REQ_RESUME_CONSUMER:
    case RMQ_REQ_RESET_CONSUMER_OFFSET_IN_BROKER:
    case RMQ_REQ_ADJUST_CONSUMER_THREAD_POOL:
    case RMQ_REQ_INVOKE_BROKER_TO_RESET_OFFSET:
    case RMQ_REQ_UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST:
    case RMQ_REQ_CLEAN_EXPIRED_CONSUMEQUEUE:
    case RMQ_REQ_GET_CONSUMER_RUNNING_INFO:  /* a client's stacks and settings */
    case RMQ_REQ_CONSUME_MESSAGE_DIRECTLY:  /* makes a client consume */
    case RMQ_REQ_CLONE_GROUP_OFFSET:
    case RMQ_REQ_CLEAN_UNUSED_TOPIC:
    case RMQ_REQ_UPDATE_NAMESRV_CONFIG:
    case RMQ_REQ_RESUME_CHECK_HALF_MESSAGE:
    case RMQ_REQ_ADD_WRITE_PERM_OF_BROKER:
    case RMQ_REQ_DELETE_EXPIRED_COMMITLOG:
    case RMQ_REQ_UPDATE_AND_CREATE_STATIC_TOPIC:
        return true;
    default:
        return false;
    }
}

/* }}} */

/* {{{ Addresses (RemoteAddressStrategyFactory) */

enum addr_kind {
    ADDR_BLANK,    /* matches nothing */
    ADDR_ANY,      /* "*", "*.*.*.*", "*:*:*:*:*:*:*:*" */
    ADDR_SET,      /* one address, a list, or a {a,b,c} last segment */
    ADDR_RANGE4,   /* a.b.*.* / a.b.1-10.* */
    ADDR_RANGE6,   /* 2001:db8:*, 2001:db8::1-ff, ... */
};

struct ip {
    int family;                /* AF_INET, AF_INET6; 0: unparseable */
    uint8_t b[16];
};

struct acl_addr {
    enum addr_kind kind;
    struct ip *set;
    uint32_t nset;
    /* RANGE4: the first `index` octets equal head, octet `index` in
     * [start, end], the rest not looked at (as 4.9.8) */
    uint8_t head[3];
    uint16_t head6[7];         /* RANGE6: the first `index` groups */
    int index;
    int start;
    int end;
};

/* A textual address (IPv4-mapped IPv6 becomes IPv4, as Java sees it). */
static bool
ip_parse(const char *s, size_t n, struct ip *out)
{
    char tmp[INET6_ADDRSTRLEN + 1];
    if (n == 0 || n >= sizeof(tmp))
        return false;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, tmp, out->b) == 1) {
        out->family = AF_INET;
        return true;
    }
    uint8_t b6[16];
    if (inet_pton(AF_INET6, tmp, b6) == 1) {
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(b6, mapped, 12) == 0) {
            out->family = AF_INET;
            memcpy(out->b, b6 + 12, 4);
        } else {
            out->family = AF_INET6;
            memcpy(out->b, b6, 16);
        }
        return true;
    }
    return false;
}

/* The peer's IP from "ip:port" / "[ip]:port". */
static void
peer_ip(const char *peer, struct ip *out)
{
    memset(out, 0, sizeof(*out));
    if (peer == NULL)
        return;
    const char *colon = strrchr(peer, ':');
    size_t n = colon != NULL ? (size_t)(colon - peer) : strlen(peer);
    if (n >= 2 && peer[0] == '[' && peer[n - 1] == ']') {
        peer++;
        n -= 2;
    }
    if (!ip_parse(peer, n, out))
        out->family = 0;
}

static void
addr_free(struct acl_addr *a)
{
    free(a->set);
    a->set = NULL;
    a->nset = 0;
}

static int
set_add(struct acl_addr *a, const char *s, size_t n)
{
    struct ip ip;
    if (!ip_parse(s, n, &ip)) {
        err_set("Netaddress examine Exception netaddress is %.*s", (int)n, s);
        return -1;
    }
    struct ip *v = realloc(a->set, (a->nset + 1) * sizeof(*v));
    if (v == NULL) {
        err_set("out of memory");
        return -1;
    }
    a->set = v;
    a->set[a->nset++] = ip;
    return 0;
}

/* Calls fn on each non-empty piece of s split at sep (StringUtils.split). */
static int
split_each(const char *s, size_t n, char sep, int (*fn)(void *, const char *, size_t),
           void *arg)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] != sep)
            j++;
        if (j > i && fn(arg, s + i, j - i) != 0)
            return -1;
        i = j + 1;
    }
    return 0;
}

static int
set_add_cb(void *arg, const char *s, size_t n)
{
    return set_add(arg, s, n);
}

struct brace_ctx {
    struct acl_addr *a;
    const char *prefix;
    size_t prefix_len;
};

static int
brace_add_cb(void *arg, const char *s, size_t n)
{
    struct brace_ctx *b = arg;
    char tmp[INET6_ADDRSTRLEN + 1];
    if (b->prefix_len + n >= sizeof(tmp)) {
        err_set("Netaddress examine Exception netaddress is %.*s%.*s",
                (int)b->prefix_len, b->prefix, (int)n, s);
        return -1;
    }
    memcpy(tmp, b->prefix, b->prefix_len);
    memcpy(tmp + b->prefix_len, s, n);
    return set_add(b->a, tmp, b->prefix_len + n);
}

static bool
has(const char *s, size_t n, char c)
{
    return memchr(s, c, n) != NULL;
}

/* Integer.parseInt of a trimmed decimal; false when not a number. */
static bool
parse_int(const char *s, size_t n, int *out)
{
    trim(&s, &n);
    if (n == 0 || n > 9)
        return false;
    int v = 0;
    size_t i = 0;
    if (s[0] == '+')
        i = 1;
    if (i == n)
        return false;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* RangeRemoteAddressStrategy for IPv4 (see the struct). */
static int
range4_parse(struct acl_addr *a, const char *s, size_t n)
{
    const char *seg[8];
    size_t len[8];
    int nseg = 0;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && s[j] != '.')
            j++;
        if (j > i) {
            if (nseg == 8)
                goto bad;
            seg[nseg] = s + i;
            len[nseg] = j - i;
            nseg++;
        }
        i = j + 1;
    }
    if (nseg != 4)
        goto bad;
    int start = 0;
    int end = 0;
    int index = 0;
    for (int k = 1; k <= 3 && index == 0; k++) {
        const char *v = seg[k];
        size_t vl = len[k];
        trim(&v, &vl);
        if (eq(v, vl, "*")) {
            start = 0, end = 255;
        } else if (has(v, vl, '-')) {
            if (v[0] == '-') {
                err_set("RangeRemoteAddressStrategy netaddress examine scope Exception value %.*s ",
                        (int)vl, v);
                return -1;
            }
            const char *dash = memchr(v, '-', vl);
            if (!parse_int(v, (size_t)(dash - v), &start) ||
                !parse_int(dash + 1, vl - (size_t)(dash - v) - 1, &end) ||
                start > 255 || end > 255 || start > end) {
                err_set("RangeRemoteAddressStrategy netaddress examine scope Exception start is %d , end is %d",
                        start, end);
                return -1;
            }
        }
        if (end > 0)
            index = k;
    }
    if (index == 0)
        goto bad;  /* 4.9.8 would fail on every match (no head) */
    for (int k = 0; k < index; k++) {
        int v;
        if (!parse_int(seg[k], len[k], &v) || v > 255)
            goto bad;
        a->head[k] = (uint8_t)v;
    }
    a->kind = ADDR_RANGE4;
    a->index = index;
    a->start = start;
    a->end = end;
    return 0;
bad:
    err_set("Netaddress examine scope Exception netaddress is %.*s", (int)n, s);
    return -1;
}

/* A hex group of 1-4 digits (an empty one is 0, as expandIP pads it). */
static bool
hex_group(const char *s, size_t n, int *out)
{
    if (n > 4)
        return false;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0'
              : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return false;
        v = v * 16 + d;
    }
    *out = v;
    return true;
}

static const char *
last_of(const char *s, size_t n, char c)
{
    for (size_t i = n; i > 0; i--) {
        if (s[i - 1] == c)
            return s + i - 1;
    }
    return NULL;
}

/*
 * RangeRemoteAddressStrategy for IPv6, as 4.9.8 reads it: the first
 * segment after the first that is "*" or "a-b" (hex) gives the range;
 * the head is the pattern before the range segment, with "::" widened so
 * that the head and the range make 7 groups (6 when a "*" follows a
 * range), as AclUtils.expandIP does; a peer matches when its first
 * groups are the head and the next one is in the range.
 */
static int
range6_parse(struct acl_addr *a, const char *s, size_t n)
{
    const char *star = memchr(s, '*', n);
    const char *dash = memchr(s, '-', n);
    const char *lc = last_of(s, n, ':');
    const char *lc2 = lc != NULL ? last_of(s, (size_t)(lc - s), ':') : NULL;
    /* AclUtils.IPv6AddressCheck */
    if ((star != NULL && star != s + n - 1) ||
        (dash != NULL && star == NULL && dash <= lc) ||
        (dash != NULL && star != NULL && (lc2 == NULL || dash <= lc2)))
        goto bad;
    /* the range: the first segment past the first that is * or a-b */
    int start = 0;
    int end = 0;
    size_t i = 0;
    int seg = 0;
    bool found = false;
    while (i < n && !found) {
        size_t j = i;
        while (j < n && s[j] != ':')
            j++;
        if (j > i) {
            const char *v = s + i;
            size_t vl = j - i;
            trim(&v, &vl);
            if (seg >= 1 && eq(v, vl, "*")) {
                start = 0, end = 0xFFFF;
            } else if (seg >= 1 && has(v, vl, '-')) {
                const char *d = memchr(v, '-', vl);
                if (d == v || !hex_group(v, (size_t)(d - v), &start) ||
                    !hex_group(d + 1, vl - (size_t)(d - v) - 1, &end) || start > end) {
                    err_set("RangeRemoteAddressStrategy netaddress examine scope Exception start is %d , end is %d",
                            start, end);
                    return -1;
                }
            }
            found = end > 0;
            seg++;
        }
        i = j + 1;
    }
    if (!found)
        goto bad;
    /* v6ipProcess: the head is the pattern up to its last ':' (its
     * second last with both * and -), expanded to 7 (6) groups */
    const char *cut = star != NULL && dash != NULL ? lc2 : lc;
    int part = star != NULL && dash != NULL ? 6 : 7;
    size_t hn = (size_t)(cut - s);
    int seps = 0;
    for (size_t k = 0; k < hn; k++)
        seps += s[k] == ':';
    int pad = part - seps;  /* "::" becomes pad + 1 colons */
    int index = 0;
    bool widened = false;
    i = 0;
    while (i <= hn) {
        size_t j = i;
        while (j < hn && s[j] != ':')
            j++;
        int v;
        if (!hex_group(s + i, j - i, &v) || index == 7)
            goto bad;
        a->head6[index++] = (uint16_t)v;
        if (j + 1 < hn && s[j + 1] == ':' && !widened && pad > 0) {
            /* the empty groups "::" stands for */
            widened = true;
            for (int k = 0; k < pad; k++) {
                if (index == 7)
                    goto bad;
                a->head6[index++] = 0;
            }
            j++;
        }
        i = j + 1;
    }
    a->kind = ADDR_RANGE6;
    a->index = index;
    a->start = start;
    a->end = end;
    return 0;
bad:
    err_set("Netaddress examine scope Exception netaddress is %.*s", (int)n, s);
    return -1;
}

static bool
blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)s[i] > ' ')
            return false;
    }
    return true;
}

static int
addr_parse(struct acl_addr *a, const char *s, size_t n)
{
    memset(a, 0, sizeof(*a));
    if (s == NULL || blank(s, n)) {
        a->kind = ADDR_BLANK;
        return 0;
    }
    if (eq(s, n, "*") || eq(s, n, "*.*.*.*") || eq(s, n, "*:*:*:*:*:*:*:*")) {
        a->kind = ADDR_ANY;
        return 0;
    }
    a->kind = ADDR_SET;
    int rc;
    if (s[n - 1] == '}') {
        /* prefix{a,b,c}: the last segment lists the values */
        const char *brace = memchr(s, '{', n);
        char sep = has(s, n, ':') ? ':' : '.';
        const char *last_sep = NULL;
        for (size_t i = 0; i < n; i++) {
            if (s[i] == sep)
                last_sep = s + i;
        }
        int nseg = 0;
        for (size_t i = 0; i < n; i++)
            nseg += (s[i] == sep);
        if (brace == NULL || last_sep == NULL || brace != last_sep + 1 ||
            (sep == '.' && nseg < 3)) {
            err_set(sep == '.' && nseg < 3
                        ? "MultipleRemoteAddressStrategy has got a/some wrong format IP(s) "
                        : "MultipleRemoteAddressStrategy netaddress examine scope Exception netaddress");
            return -1;
        }
        struct brace_ctx b = {a, s, (size_t)(brace - s)};
        rc = split_each(brace + 1, n - (size_t)(brace - s) - 2, ',', brace_add_cb, &b);
    } else if (has(s, n, ',')) {
        rc = split_each(s, n, ',', set_add_cb, a);
    } else if (has(s, n, '*') || has(s, n, '-')) {
        if (has(s, n, ':'))
            return range6_parse(a, s, n);
        return range4_parse(a, s, n);
    } else {
        rc = set_add(a, s, n);
    }
    if (rc != 0)
        addr_free(a);
    return rc;
}

int
acl_addr_check(const char *pattern, size_t n)
{
    struct acl_addr a;
    int rc = addr_parse(&a, pattern, n);
    if (rc == 0)
        addr_free(&a);
    return rc;
}

static bool
addr_match(const struct acl_addr *a, const struct ip *ip)
{
    switch (a->kind) {
    case ADDR_BLANK:
        return false;
    case ADDR_ANY:
        return true;
    case ADDR_SET:
        if (ip->family == 0)
            return false;
        for (uint32_t i = 0; i < a->nset; i++) {
            if (a->set[i].family == ip->family &&
                memcmp(a->set[i].b, ip->b, ip->family == AF_INET ? 4 : 16) == 0)
                return true;
        }
        return false;
    case ADDR_RANGE6:
        if (ip->family != AF_INET6)
            return false;
        for (int k = 0; k < a->index; k++) {
            if (ip->b[2 * k] != a->head6[k] >> 8 || ip->b[2 * k + 1] != (a->head6[k] & 0xFF))
                return false;
        }
        {
            int g = ip->b[2 * a->index] << 8 | ip->b[2 * a->index + 1];
            return g >= a->start && g <= a->end;
        }
    case ADDR_RANGE4:
        if (ip->family != AF_INET)
            return false;
        for (int k = 0; k < a->index; k++) {
            if (ip->b[k] != a->head[k])
                return false;
        }
        return ip->b[a->index] >= a->start && ip->b[a->index] <= a->end;
    }
    return false;
}

/* }}} */

/* {{{ Tables */

struct acl_account {
    char *access_key;
    size_t access_key_len;
    char *secret_key;
    size_t secret_key_len;
    struct acl_addr white;
    bool admin;
    bool has_perms;            /* Java's resourcePermMap != null */
    uint8_t default_topic_perm;
    uint8_t default_group_perm;
    struct hmap perms;         /* resource -> (uintptr_t)perm */
};

struct acl_table {
    atomic_int refs;
    struct hmap accounts;      /* access key -> struct acl_account */
    struct acl_addr *white;
    uint32_t nwhite;
};

struct acl_table *
acl_table_new(void)
{
    struct acl_table *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        err_set("out of memory");
        return NULL;
    }
    atomic_init(&t->refs, 1);
    hmap_init(&t->accounts, 16);
    return t;
}

static void
account_free(void *p)
{
    struct acl_account *a = p;
    if (a == NULL)
        return;
    free(a->access_key);
    free(a->secret_key);
    addr_free(&a->white);
    hmap_free(&a->perms, NULL);
    free(a);
}

void
acl_table_ref(struct acl_table *t)
{
    atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
}

void
acl_table_unref(struct acl_table *t)
{
    if (t == NULL || atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
        return;
    hmap_free(&t->accounts, account_free);
    for (uint32_t i = 0; i < t->nwhite; i++)
        addr_free(&t->white[i]);
    free(t->white);
    free(t);
}

int
acl_table_add_white(struct acl_table *t, const char *pattern, size_t n)
{
    struct acl_addr a;
    if (addr_parse(&a, pattern, n) != 0)
        return -1;
    struct acl_addr *v = realloc(t->white, (t->nwhite + 1) * sizeof(*v));
    if (v == NULL) {
        addr_free(&a);
        err_set("out of memory");
        return -1;
    }
    t->white = v;
    t->white[t->nwhite++] = a;
    return 0;
}

static char *
dup_bytes(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p != NULL) {
        if (n > 0)
            memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

int
acl_table_add_account(struct acl_table *t, const struct acl_account_spec *s,
                      struct acl_account **out)
{
    if (s->access_key == NULL || s->secret_key == NULL ||
        s->access_key_len <= KEY_MIN_LENGTH || s->secret_key_len <= KEY_MIN_LENGTH) {
        err_set("The accessKey=%.*s and secretKey=%.*s cannot be null and length should longer than 6",
                s->access_key ? (int)s->access_key_len : 4, s->access_key ? s->access_key : "null",
                s->secret_key ? (int)s->secret_key_len : 4, s->secret_key ? s->secret_key : "null");
        return -1;
    }
    struct acl_account *a = calloc(1, sizeof(*a));
    if (a == NULL) {
        err_set("out of memory");
        return -1;
    }
    hmap_init(&a->perms, 4);
    a->access_key = dup_bytes(s->access_key, s->access_key_len);
    a->secret_key = dup_bytes(s->secret_key, s->secret_key_len);
    if (a->access_key == NULL || a->secret_key == NULL) {
        account_free(a);
        err_set("out of memory");
        return -1;
    }
    a->access_key_len = s->access_key_len;
    a->secret_key_len = s->secret_key_len;
    if (addr_parse(&a->white, s->white, s->white ? s->white_len : 0) != 0) {
        account_free(a);
        return -1;
    }
    a->admin = s->admin;
    a->default_topic_perm = acl_perm_parse(s->default_topic_perm, s->default_topic_perm_len);
    a->default_group_perm = acl_perm_parse(s->default_group_perm, s->default_group_perm_len);
    void *old = NULL;
    if (hmap_remove(&t->accounts, a->access_key, a->access_key_len, &old))
        account_free(old);
    if (hmap_add(&t->accounts, hmap_hash(a->access_key, a->access_key_len),
                 a->access_key, a->access_key_len, a) == NULL) {
        account_free(a);
        err_set("out of memory");
        return -1;
    }
    *out = a;
    return 0;
}

int
acl_account_add_perm(struct acl_account *a, bool is_topic, const char *entry, size_t n)
{
    /* StringUtils.split(entry, "="): exactly two non-empty pieces. */
    const char *piece[2];
    size_t plen[2];
    int np = 0;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && entry[j] != '=')
            j++;
        if (j > i) {
            if (np == 2) {
                np = 3;
                break;
            }
            piece[np] = entry + i;
            plen[np] = j - i;
            np++;
        }
        i = j + 1;
    }
    if (np != 2) {
        err_set("Parse resource permission failed for %s:%.*s", is_topic ? "topic" : "group",
                (int)n, entry);
        return -1;
    }
    const char *name = piece[0];
    size_t nlen = plen[0];
    trim(&name, &nlen);
    char buf[RETRY_PREFIX_LEN + 512];
    if (nlen > 512) {
        err_set("resource name too long: %.*s...", 64, name);
        return -1;
    }
    size_t klen = 0;
    if (!is_topic) {
        memcpy(buf, RETRY_PREFIX, RETRY_PREFIX_LEN);
        klen = RETRY_PREFIX_LEN;
    }
    memcpy(buf + klen, name, nlen);
    klen += nlen;
    uintptr_t perm = acl_perm_parse(piece[1], plen[1]);
    void *old;
    hmap_remove(&a->perms, buf, klen, &old);
    if (hmap_add(&a->perms, hmap_hash(buf, klen), buf, klen, (void *)perm) == NULL) {
        err_set("out of memory");
        return -1;
    }
    a->has_perms = true;
    return 0;
}

size_t
acl_table_accounts(const struct acl_table *t)
{
    return t->accounts.size;
}

/* }}} */

/* {{{ The current table */

static struct {
    pthread_mutex_t lock;
    struct acl_table *table;
    atomic_uint_fast64_t gen;
} current = {PTHREAD_MUTEX_INITIALIZER, NULL, 0};

void
acl_publish(struct acl_table *t)
{
    if (t != NULL)
        acl_table_ref(t);
    pthread_mutex_lock(&current.lock);
    struct acl_table *old = current.table;
    current.table = t;
    atomic_fetch_add_explicit(&current.gen, 1, memory_order_release);
    pthread_mutex_unlock(&current.lock);
    acl_table_unref(old);
}

struct acl_table *
acl_acquire(uint64_t *gen)
{
    pthread_mutex_lock(&current.lock);
    struct acl_table *t = current.table;
    if (t != NULL)
        acl_table_ref(t);
    if (gen != NULL)
        *gen = atomic_load_explicit(&current.gen, memory_order_relaxed);
    pthread_mutex_unlock(&current.lock);
    return t;
}

uint64_t
acl_generation(void)
{
    return atomic_load_explicit(&current.gen, memory_order_acquire);
}

/* }}} */

/* {{{ The check */

struct acl_guard {
    struct acl_signer *signer;
    struct acl_table *table;
    uint64_t gen;
};

struct acl_guard *
acl_guard_new(void)
{
    struct acl_guard *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        err_set("out of memory");
        return NULL;
    }
    g->signer = acl_signer_new();
    if (g->signer == NULL) {
        free(g);
        return NULL;
    }
    g->table = acl_acquire(&g->gen);
    return g;
}

void
acl_guard_free(struct acl_guard *g)
{
    if (g == NULL)
        return;
    acl_table_unref(g->table);
    acl_signer_free(g->signer);
    free(g);
}

/* One resource a request needs (PlainAccessResource.resourcePermMap). */
struct res {
    const char *p;
    uint32_t len;
    bool retry;                /* p is a group: the key is %RETRY%p */
    uint8_t perm;
    uint32_t bucket;
    uint32_t seq;              /* insertion order */
};

#define RES_STACK 8

struct res_list {
    struct res *v;
    uint32_t n;
    uint32_t cap;
    /* past RES_STACK resources (a HEART_BEAT's), the names are indexed:
     * full name -> position + 1, so a large body costs O(n), not O(n^2) */
    bool indexed;
    struct hmap index;
    struct res stack[RES_STACK];
};

/* HEART_BEAT names are checked (255 characters at most) before they get
 * here; a longer one is only ever compared linearly. */
#define RES_KEY_MAX (RETRY_PREFIX_LEN + 512)

static bool
res_key_eq(const struct res *a, const struct res *b)
{
    size_t la = a->len + (a->retry ? RETRY_PREFIX_LEN : 0);
    size_t lb = b->len + (b->retry ? RETRY_PREFIX_LEN : 0);
    if (la != lb)
        return false;
    if (a->retry == b->retry)
        return memcmp(a->p, b->p, a->len) == 0;
    /* one of them spells the prefix itself */
    const struct res *r = a->retry ? a : b;
    const struct res *o = a->retry ? b : a;
    return memcmp(o->p, RETRY_PREFIX, RETRY_PREFIX_LEN) == 0 &&
           memcmp(o->p + RETRY_PREFIX_LEN, r->p, r->len) == 0;
}

/* addResourceAndPerm: a resource named again keeps its place, new perm. */
static size_t res_key(const struct res *r, char *buf, size_t cap);

static int
index_add(struct res_list *l, uint32_t i)
{
    char key[RES_KEY_MAX];
    if (l->v[i].len > RES_KEY_MAX - RETRY_PREFIX_LEN)
        return 0;
    size_t n = res_key(&l->v[i], key, sizeof(key));
    return hmap_add(&l->index, hmap_hash(key, n), key, n, (void *)(uintptr_t)(i + 1)) != NULL ? 0 : -1;
}

static int
res_add(struct res_list *l, const char *p, uint32_t len, bool retry, uint8_t perm)
{
    if (p == NULL)
        return 0;
    struct res r = {p, len, retry, perm, 0, l->n};
    if (l->indexed && len <= RES_KEY_MAX - RETRY_PREFIX_LEN) {
        char key[RES_KEY_MAX];
        size_t n = res_key(&r, key, sizeof(key));
        struct hnode *node = hmap_find(&l->index, hmap_hash(key, n), key, n);
        if (node != NULL) {
            l->v[(uintptr_t)node->val - 1].perm = perm;
            return 0;
        }
    } else {
        for (uint32_t i = 0; i < l->n; i++) {
            if (res_key_eq(&l->v[i], &r)) {
                l->v[i].perm = perm;
                return 0;
            }
        }
    }
    if (!l->indexed && l->n == RES_STACK) {
        hmap_init(&l->index, 64);
        l->indexed = true;
        for (uint32_t i = 0; i < l->n; i++) {
            if (index_add(l, i) != 0)
                return -1;
        }
    }
    if (l->n == l->cap) {
        uint32_t cap = l->cap * 2;
        struct res *v = l->v == l->stack ? malloc(cap * sizeof(*v))
                                         : realloc(l->v, cap * sizeof(*v));
        if (v == NULL)
            return -1;
        if (l->v == l->stack)
            memcpy(v, l->stack, sizeof(l->stack));
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = r;
    return l->indexed ? index_add(l, l->n - 1) : 0;
}

static void
res_free(struct res_list *l)
{
    if (l->indexed)
        hmap_free(&l->index, NULL);
    if (l->v != l->stack)
        free(l->v);
}

/* The resource's name as one string into buf (for the hash and lookups). */
static size_t
res_key(const struct res *r, char *buf, size_t cap)
{
    size_t n = 0;
    if (r->retry) {
        memcpy(buf, RETRY_PREFIX, RETRY_PREFIX_LEN);
        n = RETRY_PREFIX_LEN;
    }
    size_t l = r->len < cap - n ? r->len : cap - n;
    memcpy(buf + n, r->p, l);
    return n + l;
}

static bool
res_is_group(const struct res *r)
{
    return r->retry || (r->len >= RETRY_PREFIX_LEN && memcmp(r->p, RETRY_PREFIX, RETRY_PREFIX_LEN) == 0);
}

/*
 * Java's HashMap iteration order, which decides the resource a refusal
 * names: by bucket of the spread String.hashCode in the table a map of
 * this size has (16, doubling past 3/4 full), ties in insertion order.
 */
static int
res_cmp(const void *x, const void *y)
{
    const struct res *a = x;
    const struct res *b = y;
    if (a->bucket != b->bucket)
        return a->bucket < b->bucket ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

static void
res_java_order(struct res_list *l)
{
    if (l->n < 2)
        return;
    uint32_t cap = 16;
    while (l->n > cap / 4 * 3)
        cap *= 2;
    for (uint32_t i = 0; i < l->n; i++) {
        uint32_t h = 0;
        if (l->v[i].retry) {
            for (size_t k = 0; k < RETRY_PREFIX_LEN; k++)
                h = 31 * h + (uint8_t)RETRY_PREFIX[k];
        }
        for (uint32_t k = 0; k < l->v[i].len; k++)
            h = 31 * h + (uint8_t)l->v[i].p[k];
        h ^= h >> 16;
        l->v[i].bucket = h & (cap - 1);
    }
    qsort(l->v, l->n, sizeof(*l->v), res_cmp);
}

static const struct rmq_str *
field(const struct rmq_cmd *cmd, const char *k)
{
    const struct rmq_str *v = rmq_cmd_field(cmd, k, strlen(k));
    return v != NULL && v->p != NULL ? v : NULL;
}

static int
add_field(struct res_list *l, const struct rmq_cmd *cmd, const char *k, bool retry,
          uint8_t perm)
{
    const struct rmq_str *v = field(cmd, k);
    return v != NULL ? res_add(l, v->p, v->len, retry, perm) : 0;
}

static bool
starts_retry(const struct rmq_str *v)
{
    return v != NULL && v->len >= RETRY_PREFIX_LEN &&
           memcmp(v->p, RETRY_PREFIX, RETRY_PREFIX_LEN) == 0;
}

/*
 * LOCK_BATCH_MQ / UNLOCK_BATCH_MQ bodies ({"consumerGroup":G, "clientId":C,
 * "mqSet":[{"topic":T, ...}, ...]}): the group SUB and each topic SUB.
 * The names point into the body, so a name written with an escape is
 * refused (no valid topic or group name needs one).  0, or -1 with the
 * reason set.
 */
static int
lock_str(const uint8_t **p, const uint8_t *end, const uint8_t **raw, size_t *n)
{
    bool esc;
    if (jscan_peek(*p, end) != '"') {
        err_set("LOCK_BATCH_MQ body: a name is not a string");
        return -1;
    }
    const char *why = jscan_string(p, end, raw, n, &esc);
    if (why != NULL || esc || *n > UINT32_MAX) {
        err_set("LOCK_BATCH_MQ body: %s", why != NULL ? why : "escaped name");
        return -1;
    }
    return 0;
}

static bool
lock_key(const uint8_t *raw, size_t n, const char *k)
{
    return n == strlen(k) && memcmp(raw, k, n) == 0;
}

/* A member's `"key":`, leaving *p at its value. */
static int
lock_member(const uint8_t **p, const uint8_t *end, const uint8_t **raw, size_t *n)
{
    if (lock_str(p, end, raw, n) != 0)
        return -1;
    *p = jscan_ws(*p, end);
    if (jscan_peek(*p, end) != ':') {
        err_set("LOCK_BATCH_MQ body: a member without ':'");
        return -1;
    }
    *p = jscan_ws(*p + 1, end);
    return 0;
}

/* A name value, added as a resource needing SUB. */
static int
lock_name(const uint8_t **p, const uint8_t *end, struct res_list *l, bool retry)
{
    const uint8_t *raw;
    size_t n;
    if (lock_str(p, end, &raw, &n) != 0)
        return -1;
    if (res_add(l, (const char *)raw, (uint32_t)n, retry, ACL_PERM_SUB) != 0) {
        err_set("out of memory");
        return -1;
    }
    return 0;
}

/* Past the blanks and one ',' after a value. */
static const uint8_t *
lock_next(const uint8_t *p, const uint8_t *end)
{
    p = jscan_ws(p, end);
    return jscan_peek(p, end) == ',' ? jscan_ws(p + 1, end) : p;
}

static int
lock_skip(const uint8_t **p, const uint8_t *end, int depth)
{
    const char *why = jscan_skip(p, end, depth, 32);
    if (why != NULL) {
        err_set("LOCK_BATCH_MQ body: %s", why);
        return -1;
    }
    return 0;
}

/* One MessageQueue of mqSet: its topic. */
static int
lock_mq(const uint8_t **p, const uint8_t *end, struct res_list *l)
{
    const uint8_t *raw;
    size_t n;
    *p = jscan_ws(*p + 1, end);  /* past '{' */
    while (jscan_peek(*p, end) == '"') {
        if (lock_member(p, end, &raw, &n) != 0)
            return -1;
        if (lock_key(raw, n, "topic") ? lock_name(p, end, l, false) != 0
                                      : lock_skip(p, end, 2) != 0)
            return -1;
        *p = lock_next(*p, end);
    }
    if (jscan_peek(*p, end) != '}') {
        err_set("LOCK_BATCH_MQ body: mqSet holds something else than MessageQueues");
        return -1;
    }
    *p = lock_next(*p + 1, end);
    return 0;
}

static int
lock_body_resources(const struct rmq_cmd *cmd, struct res_list *l)
{
    const uint8_t *p = cmd->body, *end = cmd->body + cmd->body_len;
    const uint8_t *raw;
    size_t n;
    bool group = false;
    if (cmd->body != NULL)
        p = jscan_ws(p, end);
    if (cmd->body == NULL || jscan_peek(p, end) != '{') {
        err_set("LOCK_BATCH_MQ body is not a LockBatchRequestBody");
        return -1;
    }
    p = jscan_ws(p + 1, end);
    while (jscan_peek(p, end) != '}') {
        if (lock_member(&p, end, &raw, &n) != 0)
            return -1;
        if (lock_key(raw, n, "consumerGroup")) {
            if (lock_name(&p, end, l, true) != 0)
                return -1;
            group = true;
        } else if (lock_key(raw, n, "mqSet") && jscan_peek(p, end) == '[') {
            p = jscan_ws(p + 1, end);
            while (jscan_peek(p, end) == '{') {
                if (lock_mq(&p, end, l) != 0)
                    return -1;
            }
            if (jscan_peek(p, end) != ']') {
                err_set("LOCK_BATCH_MQ body: mqSet holds something else than MessageQueues");
                return -1;
            }
            p++;
        } else if (lock_skip(&p, end, 1) != 0) {
            return -1;
        }
        p = lock_next(p, end);
        if (p >= end) {
            err_set("LOCK_BATCH_MQ body: unterminated object");
            return -1;
        }
    }
    if (!group) {
        err_set("LOCK_BATCH_MQ body without a consumerGroup");
        return -1;
    }
    return 0;
}

/*
 * BATCH_ACK_MESSAGE bodies ({"acks":[{"c":G,"t":T,...}, ...],"brokerName":B};
 * BatchAck's long names consumerGroup / topic are read too, as fastjson's
 * alternateNames): each group SUB and each topic SUB (a retry topic:
 * its group stands for it).  5.x reads no resource from this request; a
 * batch must not acknowledge what one ACK_MESSAGE could not.
 */
static int
batch_ack_entry(const uint8_t **p, const uint8_t *end, struct res_list *l)
{
    const uint8_t *raw;
    size_t n;
    *p = jscan_ws(*p + 1, end);  /* past '{' */
    while (jscan_peek(*p, end) == '"') {
        if (lock_member(p, end, &raw, &n) != 0)
            return -1;
        if (lock_key(raw, n, "c") || lock_key(raw, n, "consumerGroup")) {
            if (lock_name(p, end, l, true) != 0)
                return -1;
        } else if (lock_key(raw, n, "t") || lock_key(raw, n, "topic")) {
            const uint8_t *t;
            size_t tn;
            if (lock_str(p, end, &t, &tn) != 0)
                return -1;
            struct rmq_str tv = { (const char *)t, (uint32_t)tn };
            if (!starts_retry(&tv) && res_add(l, tv.p, tv.len, false, ACL_PERM_SUB) != 0) {
                err_set("out of memory");
                return -1;
            }
        } else if (lock_skip(p, end, 3) != 0) {
            return -1;
        }
        *p = lock_next(*p, end);
    }
    if (jscan_peek(*p, end) != '}') {
        err_set("BATCH_ACK_MESSAGE body: acks holds something else than AckMessageRequestHeaders");
        return -1;
    }
    *p = lock_next(*p + 1, end);
    return 0;
}

static int batch_ack_parse(const struct rmq_cmd *cmd, struct res_list *l);

/* The shared scanners (lock_*) name LOCK_BATCH_MQ in their reasons: the
 * reason of a batch ack names its own request. */
static int
batch_ack_resources(const struct rmq_cmd *cmd, struct res_list *l)
{
    static const char lock[] = "LOCK_BATCH_MQ";
    int rc = batch_ack_parse(cmd, l);
    if (rc != 0 && strncmp(err_msg(), lock, sizeof(lock) - 1) == 0) {
        char why[256];
        snprintf(why, sizeof(why), "%s", err_msg() + sizeof(lock) - 1);
        err_set("BATCH_ACK_MESSAGE%s", why);
    }
    return rc;
}

static int
batch_ack_parse(const struct rmq_cmd *cmd, struct res_list *l)
{
    const uint8_t *p = cmd->body, *end = cmd->body + cmd->body_len;
    const uint8_t *raw;
    size_t n;
    if (cmd->body != NULL)
        p = jscan_ws(p, end);
    if (cmd->body == NULL || jscan_peek(p, end) != '{') {
        err_set("BATCH_ACK_MESSAGE body is not a BatchAckMessageRequestBody");
        return -1;
    }
    p = jscan_ws(p + 1, end);
    while (jscan_peek(p, end) != '}') {
        if (lock_member(&p, end, &raw, &n) != 0)
            return -1;
        if (lock_key(raw, n, "acks") && jscan_peek(p, end) == '[') {
            p = jscan_ws(p + 1, end);
            while (jscan_peek(p, end) == '{') {
                if (batch_ack_entry(&p, end, l) != 0)
                    return -1;
            }
            if (jscan_peek(p, end) != ']') {
                err_set("BATCH_ACK_MESSAGE body: acks holds something else than AckMessageRequestHeaders");
                return -1;
            }
            p++;
        } else if (lock_skip(&p, end, 1) != 0) {
            return -1;
        }
        p = lock_next(p, end);
        if (p >= end) {
            err_set("BATCH_ACK_MESSAGE body: unterminated object");
            return -1;
        }
    }
    return 0;
}

/*
 * PlainAccessValidator.parse's resources.  Returns 0, or -1 with the
 * reason in err (the request is refused: 4.9.8 turns a failure here into
 * an AclException too).
 */
static int
parse_resources(const struct rmq_cmd *cmd, struct res_list *l, struct heartbeat *hb,
                bool *hb_used)
{
    int rc = 0;
    const struct rmq_str *topic;
    switch (cmd->code) {
    case RMQ_REQ_SEND_MESSAGE:
    case RMQ_REQ_SEND_REPLY_MESSAGE:  /* rmq's extension, as SEND_MESSAGE (its header) */
        topic = field(cmd, "topic");
        if (starts_retry(topic))
            rc = add_field(l, cmd, "group", true, ACL_PERM_SUB);
        else if (topic != NULL)
            rc = res_add(l, topic->p, topic->len, false, ACL_PERM_PUB);
        break;
    case RMQ_REQ_SEND_MESSAGE_V2:
    case RMQ_REQ_SEND_BATCH_MESSAGE:  /* rmq's extension, as SEND_MESSAGE_V2 (its header) */
    case RMQ_REQ_SEND_REPLY_MESSAGE_V2:  /* rmq's extension, as SEND_MESSAGE_V2 */
        topic = field(cmd, "b");
        if (starts_retry(topic))
            rc = add_field(l, cmd, "a", true, ACL_PERM_SUB);
        else if (topic != NULL)
            rc = res_add(l, topic->p, topic->len, false, ACL_PERM_PUB);
        break;
    case RMQ_REQ_CONSUMER_SEND_MSG_BACK:
        rc = add_field(l, cmd, "group", true, ACL_PERM_SUB);
        break;
    case RMQ_REQ_PULL_MESSAGE:
        rc = add_field(l, cmd, "topic", false, ACL_PERM_SUB);
        if (rc == 0)
            rc = add_field(l, cmd, "consumerGroup", true, ACL_PERM_SUB);
        break;
    case RMQ_REQ_QUERY_MESSAGE:
        rc = add_field(l, cmd, "topic", false, ACL_PERM_SUB);
        break;
    case RMQ_REQ_HEART_BEAT:
        if (cmd->body_len == 0) {
            err_set("HEART_BEAT without a body");
            return -1;
        }
        if (heartbeat_parse(hb, (const char *)cmd->body, cmd->body_len, NULL) != 0) {
            *hb_used = true;
            return -1;
        }
        *hb_used = true;
        for (uint32_t i = 0; rc == 0 && i < hb->nconsumers; i++) {
            const struct hb_consumer *c = &hb->consumers[i];
            rc = res_add(l, c->group.p, c->group.len, true, ACL_PERM_SUB);
            for (uint32_t j = 0; rc == 0 && j < c->nsubs; j++)
                rc = res_add(l, c->subs[j].topic.p, c->subs[j].topic.len, false, ACL_PERM_SUB);
        }
        break;
    case RMQ_REQ_UNREGISTER_CLIENT:
    case RMQ_REQ_GET_CONSUMER_LIST_BY_GROUP:
        rc = add_field(l, cmd, "consumerGroup", true, ACL_PERM_SUB);
        break;
    case RMQ_REQ_UPDATE_CONSUMER_OFFSET:
    case RMQ_REQ_QUERY_CONSUMER_OFFSET:  /* rmq's extension, as UPDATE_CONSUMER_OFFSET */
        rc = add_field(l, cmd, "consumerGroup", true, ACL_PERM_SUB);
        if (rc == 0)
            rc = add_field(l, cmd, "topic", false, ACL_PERM_SUB);
        break;
    case RMQ_REQ_END_TRANSACTION:  /* rmq's extension */
        /* The producer group: any permission but DENY (a group's
         * defaultGroupPerm is usually SUB, and producers have no
         * group PUB in 4.x's files); the topic when the header names
         * one (5.x's header does). */
        rc = add_field(l, cmd, "producerGroup", true, ACL_PERM_ANY);
        if (rc == 0)
            rc = add_field(l, cmd, "topic", false, ACL_PERM_PUB);
        break;
    case RMQ_REQ_LOCK_BATCH_MQ:  /* rmq's extension */
    case RMQ_REQ_UNLOCK_BATCH_MQ:  /* rmq's extension */
        return lock_body_resources(cmd, l);
    /* 5.x's POP codes, as its authorization reads their headers'
     * @RocketMQResource fields (the header's action: SUB; POLLING_INFO's
     * GET is read access, SUB here): the topic, unless a retry topic
     * (then the group stands for it, as for PULL), and the group.  5.x's
     * plain ACL of 5.3.0 checks none of them: a DENY account could pop
     * from any topic there. */
    case RMQ_REQ_POP_MESSAGE:
    case RMQ_REQ_ACK_MESSAGE:
    case RMQ_REQ_PEEK_MESSAGE:
    case RMQ_REQ_CHANGE_MESSAGE_INVISIBLETIME:
    case RMQ_REQ_NOTIFICATION:
    case RMQ_REQ_POLLING_INFO:
        topic = field(cmd, "topic");
        if (!starts_retry(topic) && topic != NULL)
            rc = res_add(l, topic->p, topic->len, false, ACL_PERM_SUB);
        if (rc == 0)
            rc = add_field(l, cmd, "consumerGroup", true, ACL_PERM_SUB);
        break;
    case RMQ_REQ_BATCH_ACK_MESSAGE: /* the body names them */
        return batch_ack_resources(cmd, l);
    case RMQ_REQ_RECALL_MESSAGE: /* (5.5) PUB on the topic, as 5.x */
        rc = add_field(l, cmd, "topic", false, ACL_PERM_PUB);
        break;
    default:
        break;
    }
    if (rc != 0)
        err_set("out of memory");
    return rc;
}

static bool
deny(char *remark, size_t *rlen, const char *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static bool
deny(char *remark, size_t *rlen, const char *at, const char *fmt, ...)
{
    size_t cap = ACL_REMARK_MAX;
    int n = snprintf(remark, cap, "%s", EXC);
    va_list ap;
    va_start(ap, fmt);
    /* the message is cut before the frame when it is too long */
    size_t room = cap - (size_t)n - strlen(at) - 3;
    int m = vsnprintf(remark + n, room, fmt, ap);
    va_end(ap);
    size_t used = (size_t)n + ((size_t)m < room ? (size_t)m : room - 1);
    int k = snprintf(remark + used, cap - used, ", %s", at);
    *rlen = used + (size_t)k;
    return false;
}

static bool
sig_matches(struct acl_signer *s, const struct rmq_cmd *cmd, const struct acl_account *a,
            const struct rmq_str *sig, bool *failed)
{
    char want[ACL_SIGNATURE_LEN + 1];
    *failed = false;
    if (sig == NULL || sig->len != ACL_SIGNATURE_LEN)
        return false;
    if (acl_sign_cmd(s, cmd, ACL_SIGN_SKIP_UNIQUE_KEY_QUERY, a->secret_key,
                     a->secret_key_len, want) != 0) {
        *failed = true;
        return false;
    }
    /* constant time: how much of a guess matches must not show */
    if (CRYPTO_memcmp(want, sig->p, ACL_SIGNATURE_LEN) == 0)
        return true;
    /* The 4.9.8 Java client signs _UNIQUE_KEY_QUERY (protocol.md §10),
     * which only QUERY_MESSAGE carries: a second HMAC over the body for
     * any other code would only cost time. */
    if (cmd->code != 12 || field(cmd, ACL_FIELD_UNIQUE_KEY_QUERY) == NULL)
        return false;
    if (acl_sign_cmd(s, cmd, 0, a->secret_key, a->secret_key_len, want) != 0) {
        *failed = true;
        return false;
    }
    return CRYPTO_memcmp(want, sig->p, ACL_SIGNATURE_LEN) == 0;
}

static bool
check_perms(const struct acl_account *a, struct res_list *l, int32_t code,
            char *remark, size_t *rlen)
{
    if (l->n == 0)
        return true;
    if (!a->has_perms && a->admin)
        return true;
    res_java_order(l);
    for (uint32_t i = 0; i < l->n; i++) {
        const struct res *r = &l->v[i];
        char key[RETRY_PREFIX_LEN + 1024];
        size_t klen = res_key(r, key, sizeof(key));
        bool group = res_is_group(r);
        struct hnode *node = a->has_perms
            ? hmap_find(&a->perms, hmap_hash(key, klen), key, klen) : NULL;
        uint8_t owned = node != NULL ? (uint8_t)(uintptr_t)node->val
                                     : group ? a->default_group_perm : a->default_topic_perm;
        if (!perm_ok(r->perm, owned)) {
            /* printStr: "group:G" (the retry prefix cut off) or "topic:T" */
            const char *name = group ? key + RETRY_PREFIX_LEN : key;
            int nlen = (int)(group ? klen - RETRY_PREFIX_LEN : klen);
            return deny(remark, rlen, node != NULL ? AT_CHECK_PERM_OWNED : AT_CHECK_PERM_DEFAULT,
                        "No default permission for %s:%.*s", group ? "group" : "topic", nlen, name);
        }
    }
    (void)code;
    return true;
}

/* acl_check's body; pre_ak != NULL: the account was authenticated by
 * the caller (gRPC's authorization header), so its AccessKey is that and
 * the request carries no Signature to check. */
static bool
check_cmd(const struct acl_table *t, struct acl_signer *s, enum acl_role role,
          const struct rmq_cmd *cmd, const char *peer, const char *pre_ak, size_t pre_ak_len,
          char remark[ACL_REMARK_MAX], size_t *rlen)
{
    struct ip ip;
    peer_ip(peer, &ip);
    struct res_list l = {.v = NULL, .n = 0, .cap = RES_STACK};
    l.v = l.stack;
    struct heartbeat hb;
    bool hb_used = false;
    bool ok = false;

    if (role == ACL_ROLE_BROKER && cmd->ext != NULL &&
        parse_resources(cmd, &l, &hb, &hb_used) != 0) {
        ok = deny(remark, rlen, AT_PARSE, "%s", err_msg());
        goto out;
    }
    for (uint32_t i = 0; t != NULL && i < t->nwhite; i++) {
        if (addr_match(&t->white[i], &ip)) {
            ok = true;
            goto out;
        }
    }
    struct rmq_str pre = { .p = pre_ak, .len = (uint32_t)pre_ak_len };
    const struct rmq_str *ak = pre_ak != NULL ? &pre
                             : cmd->ext != NULL ? field(cmd, ACL_FIELD_ACCESS_KEY) : NULL;
    if (ak == NULL) {
        ok = deny(remark, rlen, AT_NO_AK, "No accessKey is configured");
        goto out;
    }
    const struct acl_account *a = t != NULL ? hmap_get(&t->accounts, ak->p, ak->len) : NULL;
    if (a == NULL) {
        ok = deny(remark, rlen, AT_UNKNOWN_AK, "No acl config for %.*s", (int)ak->len, ak->p);
        goto out;
    }
    if (addr_match(&a->white, &ip)) {
        ok = true;
        goto out;
    }
    bool failed;
    if (pre_ak == NULL && !sig_matches(s, cmd, a, field(cmd, ACL_FIELD_SIGNATURE), &failed)) {
        if (failed)
            ok = deny(remark, rlen, AT_SIGNATURE, "[10015:signature-failed] unable to calculate a request signature. error=%s", err_msg());
        else
            ok = deny(remark, rlen, AT_SIGNATURE, "Check signature failed for accessKey=%.*s",
                      (int)ak->len, ak->p);
        goto out;
    }
    for (uint32_t i = 0; i < l.n; i++) {
        if (!l.v[i].retry && l.v[i].perm == ACL_PERM_PUB &&
            eq(l.v[i].p, l.v[i].len, TRACE_TOPIC)) {
            ok = true;
            goto out;
        }
    }
    if (acl_admin_code(role, cmd->code) && !a->admin) {
        ok = deny(remark, rlen, AT_CHECK_PERM_ADMIN,
                  "Need admin permission for request code=%d, but accessKey=%.*s is not",
                  (int)cmd->code, (int)ak->len, ak->p);
        goto out;
    }
    ok = check_perms(a, &l, cmd->code, remark, rlen);
out:
    res_free(&l);
    if (hb_used)
        heartbeat_free(&hb);
    return ok;
}

bool
acl_check(const struct acl_table *t, struct acl_signer *s, enum acl_role role,
          const struct rmq_cmd *cmd, const char *peer, char remark[ACL_REMARK_MAX],
          size_t *rlen)
{
    return check_cmd(t, s, role, cmd, peer, NULL, 0, remark, rlen);
}

bool
acl_check_topic(const struct acl_table *t, const char *peer, const char *ak, size_t ak_len,
                const char *topic, size_t topic_len, uint8_t perm,
                char remark[ACL_REMARK_MAX], size_t *rlen)
{
    struct ip ip;
    peer_ip(peer, &ip);
    for (uint32_t i = 0; t != NULL && i < t->nwhite; i++) {
        if (addr_match(&t->white[i], &ip))
            return true;
    }
    if (ak == NULL)
        return deny(remark, rlen, AT_NO_AK, "No accessKey is configured");
    const struct acl_account *a = t != NULL ? hmap_get(&t->accounts, ak, ak_len) : NULL;
    if (a == NULL)
        return deny(remark, rlen, AT_UNKNOWN_AK, "No acl config for %.*s", (int)ak_len, ak);
    if (addr_match(&a->white, &ip))
        return true;
    if (topic_len > UINT32_MAX)
        return deny(remark, rlen, AT_CHECK_PERM_DEFAULT, "No default permission for topic:%.*s", 64, topic);
    struct res_list l = {.v = NULL, .n = 0, .cap = RES_STACK};
    l.v = l.stack;
    l.v[0] = (struct res){topic, (uint32_t)topic_len, false, perm, 0, 0};
    l.n = 1;
    bool ok = check_perms(a, &l, 0, remark, rlen);
    res_free(&l);
    return ok;
}

static void
guard_refresh(struct acl_guard *g)
{
    if (acl_generation() != g->gen) {
        struct acl_table *old = g->table;
        g->table = acl_acquire(&g->gen);
        acl_table_unref(old);
    }
}

bool
acl_guard_check(struct acl_guard *g, enum acl_role role, const struct rmq_cmd *cmd,
                const char *peer, char remark[ACL_REMARK_MAX], size_t *rlen)
{
    guard_refresh(g);
    return acl_check(g->table, g->signer, role, cmd, peer, remark, rlen);
}

bool
acl_guard_check_as(struct acl_guard *g, enum acl_role role, const struct rmq_cmd *cmd,
                   const char *peer, const char *ak, size_t ak_len,
                   char remark[ACL_REMARK_MAX], size_t *rlen)
{
    guard_refresh(g);
    if (ak == NULL) {
        /* no account: only the white lists can let it through, and an
         * AccessKey the request itself carries must not count */
        struct ip ip;
        peer_ip(peer, &ip);
        for (uint32_t i = 0; g->table != NULL && i < g->table->nwhite; i++) {
            if (addr_match(&g->table->white[i], &ip))
                return true;
        }
        return deny(remark, rlen, AT_NO_AK, "No accessKey is configured");
    }
    return check_cmd(g->table, g->signer, role, cmd, peer, ak, ak_len, remark, rlen);
}

static int
hex_val(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool
acl_guard_authenticate_hex(struct acl_guard *g, const char *peer, const char *ak, size_t ak_len,
                           const void *content, size_t content_len, const char *sig, size_t sig_len,
                           char remark[ACL_REMARK_MAX], size_t *rlen)
{
    guard_refresh(g);
    const struct acl_table *t = g->table;
    struct ip ip;
    peer_ip(peer, &ip);
    for (uint32_t i = 0; t != NULL && i < t->nwhite; i++) {
        if (addr_match(&t->white[i], &ip))
            return true;
    }
    if (ak == NULL)
        return deny(remark, rlen, AT_NO_AK, "No accessKey is configured");
    const struct acl_account *a = t != NULL ? hmap_get(&t->accounts, ak, ak_len) : NULL;
    if (a == NULL)
        return deny(remark, rlen, AT_UNKNOWN_AK, "No acl config for %.*s", (int)ak_len, ak);
    if (addr_match(&a->white, &ip))
        return true;
    /* hex -> the 20 bytes -> Base64, compared with what the signer makes
     * (constant time, as the remoting check) */
    unsigned char md[20];
    bool shape = sig != NULL && sig_len == 40;
    for (size_t i = 0; shape && i < 20; i++) {
        int hi = hex_val(sig[2 * i]), lo = hex_val(sig[2 * i + 1]);
        if (hi < 0 || lo < 0)
            shape = false;
        else
            md[i] = (unsigned char)(hi << 4 | lo);
    }
    char want[ACL_SIGNATURE_LEN + 1], got[ACL_SIGNATURE_LEN + 1];
    if (!shape)
        return deny(remark, rlen, AT_SIGNATURE, "Check signature failed for accessKey=%.*s",
                    (int)ak_len, ak);
    if (EVP_EncodeBlock((unsigned char *)got, md, 20) != ACL_SIGNATURE_LEN ||
        acl_sign_data(g->signer, content, content_len, a->secret_key, a->secret_key_len, want) != 0)
        return deny(remark, rlen, AT_SIGNATURE,
                    "[10015:signature-failed] unable to calculate a request signature. error=%s",
                    err_msg());
    if (CRYPTO_memcmp(want, got, ACL_SIGNATURE_LEN) != 0)
        return deny(remark, rlen, AT_SIGNATURE, "Check signature failed for accessKey=%.*s",
                    (int)ak_len, ak);
    return true;
}

/* }}} */
